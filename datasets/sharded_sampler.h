// The training sampler: deterministic, resumable, sharded over data-parallel ranks, optionally
// blending several token splits by weight.
//
// Samples are seq_len+1 tokens (inputs = [0, T), targets = [1, T]). Two ways to cut them:
// - kCrossDocuments (Megatron's sample index): per epoch the documents are shuffled and laid end
//   to end; sample k starts at token k*T of that sequence (consecutive samples share one token),
//   so every token except the last is an input exactly once per epoch.
// - kWithinDocuments: sample (d, j) is tokens [j*T, j*T+T] of document d; documents shorter than
//   T+1 tokens give none.
// Each epoch visits its samples in an order shuffled from (seed, epoch).
//
// All ranks walk one global stream of samples (epoch after epoch); the g-th sample of the stream
// goes to rank g mod dp_size. So the ranks' samples of an epoch are disjoint and together are
// exactly the dp=1 epoch. The state is the position in that global stream, the same on every
// rank, so a checkpoint taken on rank 0 resumes any rank, and even a different dp_size.
//
// Blending: with several splits, global sample g is drawn from the split whose share so far lags
// its weight the most (Megatron's BlendedDataset rule); each split keeps its own epochs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/token_store.h"

namespace pipelane {

enum class SampleMode { kCrossDocuments, kWithinDocuments };
// "cross-documents" or "within-documents"; DataError otherwise.
SampleMode parse_sample_mode(std::string_view name);
const char* sample_mode_name(SampleMode mode);

struct SamplerOptions {
  int seq_len = 128;
  std::uint64_t seed = 1337;
  SampleMode mode = SampleMode::kCrossDocuments;
  int dp_rank = 0;
  int dp_size = 1;
};

// Where the global sample stream stands. epoch/position count in epochs of `samples_per_epoch`
// global samples (one split: its own epoch; a blend: the sum over its splits).
struct SamplerState {
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;           // next global sample within the epoch, all ranks together
  std::uint64_t samples_per_epoch = 0;  // to refuse a state from a different dataset or seq_len
  friend bool operator==(const SamplerState&, const SamplerState&) = default;
};

struct WeightedSplit {
  const TokenSplit* split;  // must outlive the sampler
  double weight;
};

class ShardedSampler {
 public:
  // DataError: bad options, a split without a single sample, a weight <= 0.
  ShardedSampler(const TokenSplit& split, const SamplerOptions& options);
  ShardedSampler(const std::vector<WeightedSplit>& splits, const SamplerOptions& options);
  ~ShardedSampler();
  ShardedSampler(ShardedSampler&&) noexcept;

  // This rank's next `batch` samples, row-major [batch][seq_len]; advances the global stream by
  // batch * dp_size samples.
  void next_batch(int batch, std::int32_t* inputs, std::int32_t* targets);
  // The start of this rank's next sample, without tokens: for tests and tools. Advances like
  // next_batch(1, ...). Returns (split index, token offset of the sample in that split).
  std::pair<std::size_t, std::uint64_t> next_sample_origin();

  SamplerState state() const;
  // DataError if the state belongs to another dataset/seq_len (samples_per_epoch differs).
  void restore(const SamplerState& state);

  std::uint64_t samples_per_epoch() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Samples per epoch of one split (what a ShardedSampler over it alone would have).
std::uint64_t count_samples(const TokenSplit& split, int seq_len, SampleMode mode);

// "path:weight,path:weight" (weights need not sum to 1) -> pairs; DataError naming the bad entry.
std::vector<std::pair<std::string, double>> parse_blend(std::string_view spec);

}  // namespace pipelane
