// Two training runs of the tiny GPT that must agree to 1e-5 relative (gtest checks; the runs
// themselves come from executor_runs.h).
#pragma once
#include <gtest/gtest.h>

#include "tests/cuda/executor_runs.h"

namespace pipelane::cuda_test {

// 1e-5 relative: the same arithmetic in another order (GEMMs interpreted in double and rounded
// once, glibc's expf against the CPU's polynomial), as the parallel-equivalence tests allow.
inline void expect_close(const TrainRun& got, const TrainRun& want) {
  ASSERT_EQ(got.loss.size(), want.loss.size());
  for (std::size_t s = 0; s < want.loss.size(); ++s) {
    EXPECT_NEAR(got.loss[s], want.loss[s], 1e-5 * want.loss[s]) << "step " << s + 1;
    EXPECT_NEAR(got.grad_norm[s], want.grad_norm[s], 1e-5 * want.grad_norm[s]) << "step " << s + 1;
  }
  EXPECT_NE(want.loss.front(), want.loss.back()) << "the model does not train";
}

}  // namespace pipelane::cuda_test
