#include "datasets/tokenize_stream.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <thread>

#include "datasets/data_error.h"

namespace pipelane {
namespace {

constexpr std::size_t kBatchBytes = std::size_t{256} << 10;  // text per batch, ~100 ms of GPT-2 BPE

struct Batch {
  std::uint64_t sequence = 0;
  std::vector<TextSegment> segments;
  std::vector<std::uint8_t> continues;  // per segment: it continues the previous one's document
};

struct Finished {
  std::vector<TokenizedSegment> segments;
  std::exception_ptr error;
};

// Workers take batches from a queue and file their results by sequence number; the caller
// takes the results back in sequence. Destroying the pool stops and joins the workers.
class WorkerPool {
 public:
  WorkerPool(int threads, const std::function<ContinuingSegmentEncoder()>& make_encoder) {
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this, &make_encoder] { work(make_encoder); });
  }
  ~WorkerPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  void submit(Batch batch) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(batch));
    }
    work_ready_.notify_one();
  }

  Finished take(std::uint64_t sequence) {
    std::unique_lock lock(mutex_);
    result_ready_.wait(lock, [&] { return finished_.count(sequence) > 0; });
    Finished result = std::move(finished_.at(sequence));
    finished_.erase(sequence);
    return result;
  }

 private:
  void work(const std::function<ContinuingSegmentEncoder()>& make_encoder) {
    ContinuingSegmentEncoder encode;
    std::exception_ptr setup_error;
    try {
      encode = make_encoder();
    } catch (...) {
      setup_error = std::current_exception();
    }
    for (;;) {
      Batch batch;
      {
        std::unique_lock lock(mutex_);
        work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
      Finished result;
      result.error = setup_error;
      if (!result.error) {
        try {
          tokenize(batch, encode, result);
        } catch (...) {
          result.error = std::current_exception();
        }
      }
      {
        std::lock_guard lock(mutex_);
        finished_.emplace(batch.sequence, std::move(result));
      }
      result_ready_.notify_all();
    }
  }

  static void tokenize(Batch& batch, const ContinuingSegmentEncoder& encode, Finished& result) {
    result.segments.reserve(batch.segments.size());
    for (std::size_t i = 0; i < batch.segments.size(); ++i) {
      TextSegment& segment = batch.segments[i];
      TokenizedSegment out{segment.ends_document, std::move(segment.where), {}};
      try {
        encode(segment.text, batch.continues[i] != 0, out.ids);
      } catch (const std::bad_alloc&) {
        throw DataError(out.where + ": out of memory tokenizing " + std::to_string(segment.text.size()) +
                        " bytes of text");
      }
      std::string().swap(segment.text);  // the text is done with: give its memory back now
      result.segments.push_back(std::move(out));
    }
  }

  std::mutex mutex_;
  std::condition_variable work_ready_, result_ready_;
  std::deque<Batch> queue_;
  std::map<std::uint64_t, Finished> finished_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

void tokenize_stream(int threads, const std::function<SegmentEncoder()>& make_encoder,
                     const std::function<bool(TextSegment&)>& next,
                     const std::function<void(TokenizedSegment&&)>& consume) {
  const std::function<ContinuingSegmentEncoder()> make_continuing = [&make_encoder]() -> ContinuingSegmentEncoder {
    return [encode = make_encoder()](std::string_view text, bool, std::vector<std::uint32_t>& ids) { encode(text, ids); };
  };
  tokenize_stream(threads, make_continuing, next, consume);
}

void tokenize_stream(int threads, const std::function<ContinuingSegmentEncoder()>& make_encoder,
                     const std::function<bool(TextSegment&)>& next,
                     const std::function<void(TokenizedSegment&&)>& consume) {
  if (threads < 1) threads = 1;
  WorkerPool pool(threads, make_encoder);
  const std::uint64_t max_in_flight = 2 * static_cast<std::uint64_t>(threads);
  std::uint64_t submitted = 0, consumed = 0;
  bool input_done = false, continues = false;
  for (;;) {
    while (!input_done && submitted - consumed < max_in_flight) {
      Batch batch{submitted, {}, {}};
      std::size_t bytes = 0;
      while (bytes < kBatchBytes) {
        TextSegment segment;
        if (!next(segment)) {
          input_done = true;
          break;
        }
        bytes += segment.text.size();
        batch.continues.push_back(continues ? 1 : 0);
        continues = !segment.ends_document;
        batch.segments.push_back(std::move(segment));
      }
      if (batch.segments.empty()) break;
      pool.submit(std::move(batch));
      ++submitted;
    }
    if (consumed == submitted) return;
    Finished finished = pool.take(consumed++);
    if (finished.error) std::rethrow_exception(finished.error);
    for (TokenizedSegment& segment : finished.segments) consume(std::move(segment));
  }
}

}  // namespace pipelane
