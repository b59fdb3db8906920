#include "lanes/builtin/synthetic_lane.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "lanes/builtin/state_bytes.h"

namespace pipelane {
namespace {

class SyntheticLane final : public Lane {
 public:
  std::string name() const override { return "synthetic"; }
  std::string work_unit() const override { return "busy_us"; }

  void setup(LaneContext& ctx) override {
    const LaneOptions& o = ctx.options;
    step_us_ = o.get_int("step_us", 1000, 0, 10'000'000);
    const std::int64_t kb = o.get_int("working_set_kb", 4, 1, std::int64_t{1} << 22);
    max_steps_ = o.get_int("steps", 0, 0, std::int64_t{1} << 40);
    o.reject_unknown();
    words_ = static_cast<std::size_t>(kb) * 1024 / sizeof(std::uint64_t);
    memory_ = ctx.arena.allocate_n<std::uint64_t>(words_, "synthetic working set");
    std::memset(memory_, 0, words_ * sizeof(std::uint64_t));
  }

  double step(LaneContext&) override {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto until = start + std::chrono::microseconds(step_us_);
    // One word per 64-byte line, read and written, so the whole set goes through the caches; the
    // clock is read once per 256 lines (16 KiB) and the sweep goes on where the last step stopped.
    constexpr std::size_t kWordsPerLine = 64 / sizeof(std::uint64_t), kChunk = 256 * kWordsPerLine;
    while (step_us_ > 0 && clock::now() < until) {
      const std::size_t end = std::min(words_, cursor_ + kChunk);
      for (std::size_t j = cursor_; j < end; j += kWordsPerLine) memory_[j] += j;
      cursor_ = end == words_ ? 0 : end;
    }
    ++steps_;
    const double busy_us = std::chrono::duration<double, std::micro>(clock::now() - start).count();
    busy_us_ += busy_us;
    return busy_us;
  }

  bool finished() const override { return max_steps_ > 0 && steps_ >= max_steps_; }

  std::string save() const override {
    StateWriter w;
    w.put(steps_);
    w.put(busy_us_);
    return w.take();
  }
  void load(const std::string& state) override {
    StateReader r(state, "synthetic");
    steps_ = r.get<std::int64_t>();
    busy_us_ = r.get<double>();
  }

  nlohmann::json report() const override {
    return {{"steps", steps_}, {"busy_us", busy_us_}, {"step_us", step_us_},
            {"working_set_kb", words_ * sizeof(std::uint64_t) / 1024}};
  }

 private:
  std::int64_t step_us_ = 0, max_steps_ = 0, steps_ = 0;
  double busy_us_ = 0;
  std::uint64_t* memory_ = nullptr;
  std::size_t words_ = 0, cursor_ = 0;
};

}  // namespace

std::unique_ptr<Lane> make_synthetic_lane() { return std::make_unique<SyntheticLane>(); }

}  // namespace pipelane
