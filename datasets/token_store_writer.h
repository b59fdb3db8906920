// Writing a token store (the format is at the top of token_store.h) a document at a time, so a
// corpus never has to be held in memory: `pipelane prepare-data` streams into it.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "datasets/token_store.h"

namespace pipelane {

class TokenStoreWriter {
 public:
  enum class Split { kTrain, kValid };

  // Creates the file under a temporary name in the same directory. DataError when the directory
  // does not exist, the file cannot be created or meta.vocab_size is 0.
  TokenStoreWriter(std::string path, TokenStoreMeta meta);
  // Unfinished (an error on the way), the temporary file is removed: nothing looks complete.
  ~TokenStoreWriter();
  TokenStoreWriter(const TokenStoreWriter&) = delete;
  TokenStoreWriter& operator=(const TokenStoreWriter&) = delete;

  // Adds tokens to the open document of `split`. DataError for an id >= vocab_size.
  void append(Split split, std::span<const std::uint32_t> tokens);
  // Closes the open document of `split` (an empty document is kept as one).
  void end_document(Split split);
  // Writes what is buffered and the checksum, closes the file and renames it into place.
  void finish();

  std::uint64_t tokens(Split split) const;
  std::uint64_t documents(Split split) const;

 private:
  struct State;
  static void create_layout(State& state);
  std::unique_ptr<State> state_;
};

}  // namespace pipelane
