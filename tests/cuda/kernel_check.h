// What the emulated kernel tests share (in the spirit of ggml's test-backend-ops):
// - Guarded<T>: a buffer standing in for device memory, with sentinel bytes before and after it
//   that must be intact after the op (an out-of-bounds write fails the test). Under
//   AddressSanitizer the sentinels are dropped, so any access past the end is ASan's error.
// - Comparisons against a double-precision reference (or the CPU op): fp32 by NMSE =
//   sum (got - want)^2 / sum want^2 under a per-op limit; bf16 by llm.c's elementwise
//   |got - want| <= atol + 0.079 |want| and an NMSE limit; NaN and Inf must be where the
//   reference has them; bit-identical results between two runs.
// - Sizes: the sanitizer builds (PIPELANE_CUDA_TEST_SANITIZER) run fewer and smaller cases.
#pragma once
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/cuda/compare.h"

namespace pipelane::cuda_test {

using bf16 = __nv_bfloat16;

#ifndef PIPELANE_CUDA_TEST_SANITIZER
#define PIPELANE_CUDA_TEST_SANITIZER 0
#endif
constexpr bool kSanitizer = PIPELANE_CUDA_TEST_SANITIZER != 0;

#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kGuardBytes = 0;
#else
constexpr std::size_t kGuardBytes = 256;
#endif
constexpr unsigned char kSentinel = 0xA5;

inline float to_float(float x) { return x; }
inline float to_float(bf16 x) { return __bfloat162float(x); }
inline double to_float(double x) { return x; }  // (double results: sums of squares)
template <typename T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, bf16>)
    return __float2bfloat16_rn(x);
  else
    return x;
}

// A value buffer between two sentinel zones. Copies of the values go in and out by value.
template <typename T>
class Guarded {
 public:
  explicit Guarded(std::size_t n) : n_(n), bytes_(2 * kGuardBytes + n * sizeof(T)) {
    storage_.reset(new unsigned char[bytes_ > 0 ? bytes_ : 1]);
    std::memset(storage_.get(), kSentinel, bytes_);
  }
  explicit Guarded(const std::vector<T>& values) : Guarded(values.size()) {
    if (!values.empty()) std::memcpy(data(), values.data(), n_ * sizeof(T));
  }
  T* data() { return reinterpret_cast<T*>(storage_.get() + kGuardBytes); }
  const T* data() const { return reinterpret_cast<const T*>(storage_.get() + kGuardBytes); }
  std::size_t size() const { return n_; }
  std::vector<T> values() const { return std::vector<T>(data(), data() + n_); }
  Vec as_double() const {
    Vec v(n_);
    for (std::size_t i = 0; i < n_; ++i) v[i] = to_float(data()[i]);
    return v;
  }
  bool guards_intact() const {
    const unsigned char* p = storage_.get();
    for (std::size_t i = 0; i < kGuardBytes; ++i)
      if (p[i] != kSentinel || p[bytes_ - 1 - i] != kSentinel) return false;
    return true;
  }

 private:
  std::size_t n_, bytes_;
  std::unique_ptr<unsigned char[]> storage_;
};

// Fresh random inputs: normal(0, scale), rounded to T (so the reference sees exactly what the
// kernel sees).
template <typename T>
std::vector<T> random_values(std::mt19937& rng, std::size_t n, float scale = 1.0f,
                             float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, scale);
  std::vector<T> v(n);
  for (T& x : v) x = from_float<T>(dist(rng));
  return v;
}

template <typename T>
Vec to_double(const std::vector<T>& v) {
  Vec d(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) d[i] = to_float(v[i]);
  return d;
}
template <typename T>
std::vector<float> to_floats(const std::vector<T>& v) {
  std::vector<float> f(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) f[i] = to_float(v[i]);
  return f;
}

// fp32 outputs: NMSE only; bf16 outputs: NMSE <= max(limit, kBf16Nmse) and llm.c's test.
template <typename T>
::testing::AssertionResult matches(const std::string& what, const Guarded<T>& got, const Vec& want,
                                   double fp32_nmse) {
  if (!got.guards_intact())
    return ::testing::AssertionFailure() << what << ": sentinel bytes around the output changed";
  if constexpr (std::is_same_v<T, bf16>)
    return compare(what, got.as_double(), want, Tolerance{std::max(fp32_nmse, kBf16Nmse)}, true);
  else
    return compare(what, got.as_double(), want, Tolerance{fp32_nmse}, false);
}
template <typename T>
::testing::AssertionResult matches(const std::string& what, const Guarded<T>& got,
                                   const std::vector<float>& want, double fp32_nmse) {
  return matches(what, got, Vec(want.begin(), want.end()), fp32_nmse);
}

template <typename T>
::testing::AssertionResult intact(const std::string& what, const Guarded<T>& buf) {
  if (buf.guards_intact()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": sentinel bytes around the buffer changed";
}

template <typename T>
::testing::AssertionResult bit_identical(const std::string& what, const Guarded<T>& a,
                                         const Guarded<T>& b) {
  if (a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": two runs differ";
}

// The storage types every kernel test runs with.
using StorageTypes = ::testing::Types<float, bf16>;

template <typename T>
constexpr const char* type_name() {
  return std::is_same_v<T, bf16> ? "bf16" : "fp32";
}

}  // namespace pipelane::cuda_test
