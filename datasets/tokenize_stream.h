// Tokenizing a stream of text segments on worker threads, the ids handed back in input order.
// At most 2 batches per worker are in flight, so memory follows the batch size (about 256 KiB of
// text each) and the longest segment, never the size of the input.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "datasets/text_segments.h"

namespace pipelane {

// Appends the ids of `text` to `ids`. Each worker gets its own (a tokenizer copy and its cache).
using SegmentEncoder = std::function<void(std::string_view text, std::vector<std::uint32_t>& ids)>;
// The same, told whether the segment continues a document that was cut before it: a SentencePiece
// model adds its dummy-prefix space only where a document starts.
using ContinuingSegmentEncoder =
    std::function<void(std::string_view text, bool continues_document, std::vector<std::uint32_t>& ids)>;

struct TokenizedSegment {
  bool ends_document = true;
  std::string where;  // as in TextSegment
  std::vector<std::uint32_t> ids;
};

// Calls `next` on this thread until it returns false, tokenizes on `threads` workers (each
// encoder made by `make_encoder` on its worker), and calls `consume` on this thread for every
// segment in input order. An exception from a worker stops the stream and is rethrown here; a
// worker running out of memory throws DataError naming the segment ("path: byte N: ...").
void tokenize_stream(int threads, const std::function<ContinuingSegmentEncoder()>& make_encoder,
                     const std::function<bool(TextSegment&)>& next,
                     const std::function<void(TokenizedSegment&&)>& consume);
void tokenize_stream(int threads, const std::function<SegmentEncoder()>& make_encoder,
                     const std::function<bool(TextSegment&)>& next,
                     const std::function<void(TokenizedSegment&&)>& consume);

}  // namespace pipelane
