// Byte writer/reader for a lane's save()/load() state (host byte order: the state only ever goes
// back into the same build's checkpoints).
#pragma once
#include <cstddef>
#include <cstring>
#include <string>

#include "lanes/lane.h"

namespace pipelane {

class StateWriter {
 public:
  void bytes(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  template <typename T>
  void put(T v) { bytes(&v, sizeof v); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class StateReader {
 public:
  // `lane` names the lane in the error for a truncated state.
  StateReader(const std::string& s, std::string lane) : s_(s), lane_(std::move(lane)) {}
  void bytes(void* p, std::size_t n) {
    if (n > s_.size() - pos_) throw LaneError("lane " + lane_ + ": saved state is truncated");
    std::memcpy(p, s_.data() + pos_, n);
    pos_ += n;
  }
  template <typename T>
  T get() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  bool at_end() const { return pos_ == s_.size(); }

 private:
  const std::string& s_;
  std::string lane_;
  std::size_t pos_ = 0;
};

}  // namespace pipelane
