// The op table as test cases, for test_backend_ops.cpp (ggml's test-backend-ops, our way): each
// case builds fresh random inputs, runs ONE op of the Backend op table on a backend (inputs and
// outputs in that backend's memory, every output followed by sentinel floats), and says what the
// double-precision reference (reference_ops.h; finite differences of it for gradients) expects.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "tests/runtime/reference_ops.h"

namespace pipelane::backend_ops {

// Buffers in a backend's memory. Every allocation is followed by kGuard sentinel floats, checked
// after the op: an out-of-bounds write there fails the test.
class DeviceBuffers {
 public:
  static constexpr std::size_t kGuard = 64;
  static constexpr float kSentinel = -7.8125e-3f;  // exactly representable, unlikely as a result

  DeviceBuffers(Backend& backend, Stream& stream, std::size_t bytes);
  float* upload(const std::vector<float>& host);
  std::int32_t* upload(const std::vector<std::int32_t>& host);
  float* zeros(std::size_t n) { return upload(std::vector<float>(n, 0.f)); }
  std::vector<float> download(const float* device, std::size_t n);
  // Names of the allocations whose guard floats changed.
  std::vector<std::string> damaged_guards();
  Backend& backend() { return backend_; }
  Stream& stream() { return stream_; }

 private:
  struct Guarded {
    const float* data;
    std::size_t n;
  };
  Backend& backend_;
  Stream& stream_;
  std::unique_ptr<Arena> arena_;
  std::vector<Guarded> guarded_;
};

using Outputs = std::map<std::string, std::vector<float>>;
using Expected = std::map<std::string, ref::Vec>;

struct OpCase {
  OpKind op;
  std::string name;            // what the case covers, e.g. "matmul_forward (bias, odd sizes)"
  double nmse_limit;           // against the reference, with the reason in backend_op_cases.cpp
  // Runs the op once on `bufs`' backend with this case's inputs; `poison` puts a NaN into the
  // first input element (for the NaN/Inf check). Returns the outputs, downloaded.
  std::function<Outputs(DeviceBuffers& bufs, bool poison)> run;
  std::function<Expected()> reference;
  // Outputs with a limit of their own, by name (a bf16 buffer's values: one rounding each).
  std::map<std::string, double> output_limits = {};
  // The case hands the op a bf16 buffer: it runs where supports(op, BF16) says yes.
  bool bf16_buffer = false;
  double limit_of(const std::string& output) const {
    const auto it = output_limits.find(output);
    return it == output_limits.end() ? nmse_limit : it->second;
  }
};

// Every op of the table, at least once (odd sizes included). Deterministic for a seed.
std::vector<OpCase> all_cases(std::uint32_t seed);

// The PageRank step's case (backend_op_cases_pagerank.cpp), appended by all_cases.
void add_pagerank_cases(std::vector<OpCase>& cases, std::mt19937& rng);
// The BFS and graph SGD steps' cases (backend_op_cases_graph.cpp), appended by all_cases.
void add_graph_cases(std::vector<OpCase>& cases, std::mt19937& rng);
// The Llama family's cases (backend_op_cases_llama.cpp), appended by all_cases.
void add_llama_cases(std::vector<OpCase>& cases, std::mt19937& rng);
// The CNN lanes' ops' cases, appended by all_cases: the window ops (backend_op_cases_cnn.cpp),
// which append the training ops' (backend_op_cases_cnn_training.cpp).
void add_cnn_cases(std::vector<OpCase>& cases, std::mt19937& rng);
void add_cnn_training_cases(std::vector<OpCase>& cases, std::mt19937& rng);
// The bf16-storage casts' cases (backend_op_cases_bf16.cpp), appended by all_cases.
void add_bf16_storage_cases(std::vector<OpCase>& cases, std::mt19937& rng);
// The ops with bf16 activation buffers, appended by all_cases: the attention's
// (backend_op_cases_probabilities.cpp), the norms' and the MLP's
// (backend_op_cases_bf16_activations.cpp).
void add_bf16_probability_cases(std::vector<OpCase>& cases, std::mt19937& rng);
void add_bf16_activation_cases(std::vector<OpCase>& cases, std::mt19937& rng);
// v with a NaN in its first element when `poison` (the NaN/Inf check's input).
std::vector<float> poisoned_first(std::vector<float> v, bool poison);

// mse(got, want) / mse(want, 0), in double (ggml's NMSE).
double nmse(const std::vector<float>& got, const ref::Vec& want);
double nmse(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace pipelane::backend_ops
