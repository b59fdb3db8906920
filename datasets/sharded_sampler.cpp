#include "datasets/sharded_sampler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "datasets/data_error.h"

namespace pipelane {
namespace {

// splitmix64: the same small generator as WindowSampler; portable, unlike <random>'s distributions.
std::uint64_t mix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A permutation of [0, n) from (seed, split, epoch, purpose): Fisher-Yates with Lemire's bound.
std::vector<std::uint64_t> permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t split,
                                       std::uint64_t epoch, std::uint64_t purpose) {
  std::uint64_t state = seed;
  for (std::uint64_t word : {split, epoch, purpose}) {
    state ^= word + 0x632BE59BD9B4E019ULL;
    mix(state);
  }
  std::vector<std::uint64_t> order(n);
  std::iota(order.begin(), order.end(), std::uint64_t{0});
  for (std::uint64_t i = n; i > 1; --i) {
    const auto j = static_cast<std::uint64_t>((static_cast<unsigned __int128>(mix(state)) * i) >> 64);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

std::uint64_t doc_length(const TokenSplit& split, std::size_t d) {
  return split.doc_offsets[d + 1] - split.doc_offsets[d];
}

std::size_t doc_count(const TokenSplit& split) {
  return split.doc_offsets.empty() ? 0 : split.doc_offsets.size() - 1;
}

// One split's samples, epoch by epoch. Keeps only the current epoch's tables.
class SplitSamples {
 public:
  SplitSamples(const TokenSplit& split, std::size_t index, const SamplerOptions& o)
      : split_(&split), index_(index), T_(static_cast<std::uint64_t>(o.seq_len)), seed_(o.seed),
        mode_(o.mode), count_(count_samples(split, o.seq_len, o.mode)) {
    if (mode_ == SampleMode::kWithinDocuments) {
      window_prefix_.assign(doc_count(split) + 1, 0);
      for (std::size_t d = 0; d < doc_count(split); ++d) {
        const std::uint64_t len = doc_length(split, d);
        window_prefix_[d + 1] = window_prefix_[d] + (len > T_ ? (len - 1) / T_ : 0);
      }
    }
  }
  std::uint64_t count() const { return count_; }

  // Token offset in the split of the first token of the n-th sample of the stream (n counts over
  // epochs). Builds the epoch's tables on first use.
  std::uint64_t start_of(std::uint64_t n, std::vector<std::pair<std::uint64_t, std::uint64_t>>* pieces) {
    const std::uint64_t epoch = n / count_;
    if (epoch != epoch_ || order_.empty()) build_epoch(epoch);
    const std::uint64_t k = order_[n % count_];
    if (mode_ == SampleMode::kWithinDocuments) {
      const auto d = static_cast<std::size_t>(
          std::upper_bound(window_prefix_.begin(), window_prefix_.end(), k) - window_prefix_.begin() - 1);
      const std::uint64_t start = split_->doc_offsets[d] + (k - window_prefix_[d]) * T_;
      if (pieces) pieces->assign(1, {start, T_ + 1});
      return start;
    }
    // Virtual offset k*T in the shuffled concatenation -> (document, offset) -> split offsets.
    std::uint64_t virtual_offset = k * T_, remaining = T_ + 1;
    auto p = static_cast<std::size_t>(
        std::upper_bound(doc_prefix_.begin(), doc_prefix_.end(), virtual_offset) - doc_prefix_.begin() - 1);
    std::uint64_t within = virtual_offset - doc_prefix_[p];
    const std::uint64_t start = split_->doc_offsets[doc_order_[p]] + within;
    if (pieces) {
      pieces->clear();
      while (remaining > 0) {
        const std::size_t d = doc_order_[p];
        const std::uint64_t take = std::min(remaining, doc_length(*split_, d) - within);
        if (take > 0) pieces->push_back({split_->doc_offsets[d] + within, take});
        remaining -= take;
        within = 0;
        ++p;
      }
    }
    return start;
  }
  const TokenSplit& split() const { return *split_; }

 private:
  void build_epoch(std::uint64_t epoch) {
    epoch_ = epoch;
    order_ = permutation(count_, seed_, index_, epoch, 0);
    if (mode_ == SampleMode::kCrossDocuments) {
      doc_order_ = permutation(doc_count(*split_), seed_, index_, epoch, 1);
      doc_prefix_.assign(doc_order_.size() + 1, 0);
      for (std::size_t p = 0; p < doc_order_.size(); ++p)
        doc_prefix_[p + 1] = doc_prefix_[p] + doc_length(*split_, doc_order_[p]);
    }
  }

  const TokenSplit* split_;
  std::size_t index_;
  std::uint64_t T_, seed_;
  SampleMode mode_;
  std::uint64_t count_;
  std::vector<std::uint64_t> window_prefix_;  // within-documents: windows before document d
  std::uint64_t epoch_ = 0;
  std::vector<std::uint64_t> order_;       // epoch's sample order
  std::vector<std::uint64_t> doc_order_;   // cross-documents: epoch's document order
  std::vector<std::uint64_t> doc_prefix_;  // cross-documents: tokens before position p of doc_order_
};

void check_options(const SamplerOptions& o) {
  if (o.seq_len < 1) throw DataError("sampler: seq_len must be >= 1, got " + std::to_string(o.seq_len));
  if (o.dp_size < 1 || o.dp_rank < 0 || o.dp_rank >= o.dp_size)
    throw DataError("sampler: dp_rank " + std::to_string(o.dp_rank) + " is not in [0, dp_size = " +
                    std::to_string(o.dp_size) + ")");
}

}  // namespace

SampleMode parse_sample_mode(std::string_view name) {
  if (name == "cross-documents") return SampleMode::kCrossDocuments;
  if (name == "within-documents") return SampleMode::kWithinDocuments;
  throw DataError("unknown sample mode '" + std::string(name) +
                  "' (expected 'cross-documents' or 'within-documents')");
}

const char* sample_mode_name(SampleMode mode) {
  return mode == SampleMode::kCrossDocuments ? "cross-documents" : "within-documents";
}

std::uint64_t count_samples(const TokenSplit& split, int seq_len, SampleMode mode) {
  const auto T = static_cast<std::uint64_t>(std::max(seq_len, 1));
  if (mode == SampleMode::kCrossDocuments) {
    const std::uint64_t n = split.tokens.size();
    return n > T ? (n - 1) / T : 0;
  }
  std::uint64_t windows = 0;
  for (std::size_t d = 0; d < doc_count(split); ++d) {
    const std::uint64_t len = doc_length(split, d);
    windows += len > T ? (len - 1) / T : 0;
  }
  return windows;
}

struct ShardedSampler::Impl {
  SamplerOptions options;
  std::vector<SplitSamples> splits;
  std::vector<double> weights;        // normalized
  std::vector<std::uint64_t> counts;  // samples drawn so far from each split (global stream)
  std::uint64_t next = 0;             // global stream index of the next batch start
  std::uint64_t per_epoch = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> pieces;

  // The split of global sample `g` given counts before it: the one furthest behind its weight.
  std::size_t choose(std::uint64_t g) const {
    std::size_t best = 0;
    double best_error = -INFINITY;
    for (std::size_t i = 0; i < splits.size(); ++i) {
      const double error = weights[i] * static_cast<double>(g + 1) - static_cast<double>(counts[i]);
      if (error > best_error) {
        best_error = error;
        best = i;
      }
    }
    return best;
  }

  // This rank's next sample (split, n-th sample of that split); advances the stream by dp_size.
  std::pair<std::size_t, std::uint64_t> advance() {
    std::pair<std::size_t, std::uint64_t> mine{0, 0};
    for (int r = 0; r < options.dp_size; ++r) {
      const std::size_t s = splits.size() == 1 ? 0 : choose(next);
      if (r == options.dp_rank) mine = {s, counts[s]};
      ++counts[s];
      ++next;
    }
    return mine;
  }
};

ShardedSampler::ShardedSampler(const TokenSplit& split, const SamplerOptions& options)
    : ShardedSampler(std::vector<WeightedSplit>{{&split, 1.0}}, options) {}

ShardedSampler::ShardedSampler(const std::vector<WeightedSplit>& splits, const SamplerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  check_options(options);
  if (splits.empty()) throw DataError("sampler: no datasets given");
  impl_->options = options;
  double total = 0;
  for (std::size_t i = 0; i < splits.size(); ++i) {
    if (!(splits[i].weight > 0) || !std::isfinite(splits[i].weight))
      throw DataError("sampler: weight of dataset " + std::to_string(i) + " must be > 0, got " +
                      std::to_string(splits[i].weight));
    total += splits[i].weight;
    impl_->splits.emplace_back(*splits[i].split, i, options);
    const std::uint64_t n = impl_->splits.back().count();
    if (n == 0)
      throw DataError("sampler: dataset " + std::to_string(i) + " (" + std::to_string(splits[i].split->tokens.size()) +
                      " tokens) has no " + sample_mode_name(options.mode) + " sample of seq_len+1 = " +
                      std::to_string(options.seq_len + 1) + " tokens");
    impl_->per_epoch += n;
  }
  for (const WeightedSplit& s : splits) impl_->weights.push_back(s.weight / total);
  impl_->counts.assign(splits.size(), 0);
}

ShardedSampler::~ShardedSampler() = default;
ShardedSampler::ShardedSampler(ShardedSampler&&) noexcept = default;

std::uint64_t ShardedSampler::samples_per_epoch() const { return impl_->per_epoch; }

std::pair<std::size_t, std::uint64_t> ShardedSampler::next_sample_origin() {
  const auto [s, n] = impl_->advance();
  return {s, impl_->splits[s].start_of(n, nullptr)};
}

void ShardedSampler::next_batch(int batch, std::int32_t* inputs, std::int32_t* targets) {
  if (batch < 1) throw DataError("sampler: batch must be >= 1, got " + std::to_string(batch));
  const int T = impl_->options.seq_len;
  std::vector<std::int32_t> window(static_cast<std::size_t>(T) + 1);
  for (int b = 0; b < batch; ++b) {
    const auto [s, n] = impl_->advance();
    SplitSamples& split = impl_->splits[s];
    split.start_of(n, &impl_->pieces);
    std::size_t filled = 0;
    for (const auto& [offset, length] : impl_->pieces)
      for (std::uint64_t i = 0; i < length; ++i)
        window[filled++] = static_cast<std::int32_t>(split.split().tokens[offset + i]);
    std::copy(window.begin(), window.end() - 1, inputs + static_cast<std::size_t>(b) * T);
    std::copy(window.begin() + 1, window.end(), targets + static_cast<std::size_t>(b) * T);
  }
}

SamplerState ShardedSampler::state() const {
  return {impl_->next / impl_->per_epoch, impl_->next % impl_->per_epoch, impl_->per_epoch};
}

void ShardedSampler::restore(const SamplerState& state) {
  if (state.samples_per_epoch != impl_->per_epoch || state.position >= impl_->per_epoch)
    throw DataError("sampler: saved state (epoch " + std::to_string(state.epoch) + ", position " +
                    std::to_string(state.position) + " of " + std::to_string(state.samples_per_epoch) +
                    " samples per epoch) does not match this data (" + std::to_string(impl_->per_epoch) +
                    " samples per epoch): different dataset, seq_len or sample mode?");
  const std::uint64_t g = state.epoch * impl_->per_epoch + state.position;
  impl_->counts.assign(impl_->splits.size(), 0);
  if (impl_->splits.size() == 1) {
    impl_->counts[0] = g;
  } else {
    // Blend counts have no closed form; replaying the choice rule is cheap (no tokens touched).
    for (std::uint64_t i = 0; i < g; ++i) {
      impl_->next = i;
      ++impl_->counts[impl_->choose(i)];
    }
  }
  impl_->next = g;
}

std::vector<std::pair<std::string, double>> parse_blend(std::string_view spec) {
  std::vector<std::pair<std::string, double>> entries;
  std::size_t pos = 0;
  while (pos <= spec.size()) {
    std::size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view entry = spec.substr(pos, comma - pos);
    const std::size_t colon = entry.rfind(':');
    double weight = 0;
    const char* end = entry.data() + entry.size();
    if (colon == std::string_view::npos || colon == 0 ||
        std::from_chars(entry.data() + colon + 1, end, weight).ptr != end || !(weight > 0) ||
        !std::isfinite(weight))
      throw DataError("blend entry '" + std::string(entry) +
                      "': expected PATH:WEIGHT with a weight > 0 (e.g. a.h5:0.7,b.h5:0.3)");
    entries.emplace_back(std::string(entry.substr(0, colon)), weight);
    pos = comma + 1;
  }
  return entries;
}

}  // namespace pipelane
