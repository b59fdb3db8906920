// The threaded tokenize stream: input order kept whatever the workers' speed, failures of a
// worker (an exception, running out of memory) come back to the caller as one clear error.
#include <gtest/gtest.h>

#include <chrono>
#include <new>
#include <random>
#include <stdexcept>
#include <thread>

#include "datasets/data_error.h"
#include "datasets/tokenize_stream.h"

namespace pipelane {
namespace {

// Segments "0", "1", ... with every third one ending a document.
std::function<bool(TextSegment&)> numbered_segments(int count) {
  return [count, i = 0](TextSegment& segment) mutable {
    if (i == count) return false;
    segment = {std::to_string(i), i % 3 == 2, "input.txt: byte " + std::to_string(i)};
    ++i;
    return true;
  };
}

// Encodes a segment as its number, after a random pause so that workers finish out of order.
std::function<SegmentEncoder()> slow_number_encoder() {
  return [] {
    return [generator = std::mt19937(std::random_device{}())](std::string_view text,
                                                              std::vector<std::uint32_t>& ids) mutable {
      std::this_thread::sleep_for(std::chrono::microseconds(generator() % 200));
      ids.push_back(static_cast<std::uint32_t>(std::stoul(std::string(text))));
    };
  };
}

TEST(TokenizeStream, ResultsComeBackInInputOrder) {
  for (const int threads : {1, 2, 7}) {
    std::vector<std::uint32_t> order;
    std::vector<bool> ends;
    tokenize_stream(threads, slow_number_encoder(), numbered_segments(500), [&](TokenizedSegment&& segment) {
      ASSERT_EQ(segment.ids.size(), 1u);
      order.push_back(segment.ids[0]);
      ends.push_back(segment.ends_document);
    });
    ASSERT_EQ(order.size(), 500u);
    for (std::uint32_t i = 0; i < 500; ++i) {
      EXPECT_EQ(order[i], i);
      EXPECT_EQ(ends[i], i % 3 == 2);
    }
  }
}

TEST(TokenizeStream, AWorkerExceptionStopsTheStreamAndReachesTheCaller) {
  const auto failing = [] {
    return [](std::string_view text, std::vector<std::uint32_t>& ids) {
      if (text == "250") throw DataError("input.txt: byte 250: the tokenizer refused it");
      ids.push_back(1);
    };
  };
  int consumed = 0;
  try {
    tokenize_stream(2, failing, numbered_segments(100000), [&](TokenizedSegment&&) { ++consumed; });
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(), "input.txt: byte 250: the tokenizer refused it");
  }
  EXPECT_LE(consumed, 250);  // nothing from the failing segment on (its batch is dropped whole)
}

TEST(TokenizeStream, RunningOutOfMemoryInAWorkerNamesTheSegment) {
  // The failure of the issue: an uncaught bad_alloc in a tokenizer thread aborted the process.
  const auto hungry = [] {
    return [](std::string_view text, std::vector<std::uint32_t>&) {
      if (text == "7") throw std::bad_alloc();
    };
  };
  try {
    tokenize_stream(3, hungry, numbered_segments(20), [](TokenizedSegment&&) {});
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(), "input.txt: byte 7: out of memory tokenizing 1 bytes of text");
  }
}

TEST(TokenizeStream, ErrorsOfTheReaderAndTheConsumerStopTheWorkers) {
  const auto fine = [] { return [](std::string_view, std::vector<std::uint32_t>& ids) { ids.push_back(0); }; };
  int produced = 0;
  const auto failing_reader = [&](TextSegment& segment) {
    if (++produced == 3000) throw DataError("input.txt: truncated or corrupt gzip stream");
    segment = {"x", true, ""};
    return true;
  };
  EXPECT_THROW(tokenize_stream(2, fine, failing_reader, [](TokenizedSegment&&) {}), DataError);
  int consumed = 0;
  EXPECT_THROW(tokenize_stream(2, fine, numbered_segments(10000),
                               [&](TokenizedSegment&&) {
                                 if (++consumed == 10) throw std::runtime_error("disk full");
                               }),
               std::runtime_error);
}

}  // namespace
}  // namespace pipelane
