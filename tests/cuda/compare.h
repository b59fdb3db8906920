// Comparing results with a reference, without CUDA headers (the plan tests build without them):
// NMSE = sum (got - want)^2 / sum want^2 under a limit; for bf16 also llm.c's elementwise
// |got - want| <= atol + 0.079 |want|; NaN and Inf must be where the reference has them.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace pipelane::cuda_test {

using Vec = std::vector<double>;

// The tolerances of one comparison. For fp32 only nmse is used; bf16 adds llm.c's elementwise
// test with atol = atol_fraction * max|want| (a bf16 ulp is 2^-8 of the value's binade).
struct Tolerance {
  double nmse;
  double atol_fraction = 1.0 / 128;  // two bf16 ulps of the largest element
  double rtol = 0.079;               // llm.c: about ten bf16 epsilons
};

// bf16 storage: inputs and outputs rounded to 2^-9 relative, a few roundings per op -> NMSE up
// to ~(4 * 2^-9)^2 = 6e-5.
constexpr double kBf16Nmse = 1e-4;

inline ::testing::AssertionResult compare(const std::string& what, const Vec& got, const Vec& want,
                                          const Tolerance& tol, bool elementwise) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " vs " << want.size();
  double err = 0.0, ref = 0.0, maxref = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool want_nan = std::isnan(want[i]), got_nan = std::isnan(got[i]);
    const bool want_inf = std::isinf(want[i]), got_inf = std::isinf(got[i]);
    if (want_nan != got_nan || want_inf != got_inf || (want_inf && (want[i] > 0) != (got[i] > 0)))
      return ::testing::AssertionFailure() << what << "[" << i << "]: got " << got[i] << ", want "
                                           << want[i] << " (NaN/Inf must match)";
    if (want_nan || want_inf) continue;
    err += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
    maxref = std::max(maxref, std::abs(want[i]));
  }
  const double nmse = ref > 0 ? err / ref : err;
  if (!(nmse <= tol.nmse))
    return ::testing::AssertionFailure()
           << what << ": NMSE " << nmse << " > limit " << tol.nmse << " (n=" << want.size() << ")";
  if (elementwise) {
    const double atol = tol.atol_fraction * maxref;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (!std::isfinite(want[i])) continue;
      if (std::abs(got[i] - want[i]) > atol + tol.rtol * std::abs(want[i]))
        return ::testing::AssertionFailure()
               << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (|diff| > "
               << atol << " + " << tol.rtol << "|want|)";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace pipelane::cuda_test
