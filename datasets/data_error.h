// DataError: every failure to read, write or interpret training data. The message is one line that
// names the file and what was expected, so the trainer can print it as-is and stop.
#pragma once
#include <stdexcept>

namespace pipelane {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pipelane
