// Parallel equivalence: pp, tp, dp splits and every schedule give the single-process losses and
// gradient norms (1e-5 relative) after 5 steps of the same tiny model.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/integration/mpi_job.h"

namespace pipelane {
namespace {

using namespace test_support;

struct ParallelCase {
  const char* name;
  int ranks;
  const char* args;
  // The case's name in test names and failures, not gtest's dump of the struct's bytes.
  friend void PrintTo(const ParallelCase& c, std::ostream* os) { *os << c.name; }
};

class ParallelEquivalence : public ::testing::TestWithParam<ParallelCase> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    write_test_corpus(dir_->file("data.h5"));
    write_file(dir_->file("tiny.ini"), tiny_parallel_config(dir_->file("data.h5")));
    const JobResult ref = run_job(0, "--config " + dir_->file("tiny.ini") + " --run.dir=" +
                                         dir_->file("ref"), dir_->file("ref.log"));
    ASSERT_EQ(ref.exit_code, 0) << ref.output;
    reference_ = new StepMetrics(read_metrics(dir_->file("ref")));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete dir_;
  }
  static TempDir* dir_;
  static StepMetrics* reference_;
};
TempDir* ParallelEquivalence::dir_ = nullptr;
StepMetrics* ParallelEquivalence::reference_ = nullptr;

TEST_P(ParallelEquivalence, MatchesSingleProcess) {
  const ParallelCase& c = GetParam();
  const std::string run = dir_->file(c.name);
  const JobResult job = run_job(c.ranks, "--config " + dir_->file("tiny.ini") + " --run.dir=" + run +
                                             " " + c.args, run + ".log");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  const StepMetrics got = read_metrics(run);
  ASSERT_EQ(got.loss.size(), 5u);
  ASSERT_EQ(reference_->loss.size(), 5u);
  // 1e-5: the same arithmetic, only summed in another order (gradients of a split model are
  // added across ranks, all-reduces combine partial sums); observed differences are ~1e-9.
  for (std::size_t i = 0; i < got.loss.size(); ++i) {
    EXPECT_NEAR(got.loss[i], reference_->loss[i], 1e-5 * reference_->loss[i]) << "step " << i + 1;
    EXPECT_NEAR(got.grad_norm[i], reference_->grad_norm[i], 1e-5 * reference_->grad_norm[i])
        << "step " << i + 1;
  }
}

const ParallelCase kCases[] = {
    {"pp2_gpipe", 2, "--parallel.pp=2 --parallel.schedule=gpipe"},
    {"pp2_1f1b", 2, "--parallel.pp=2 --parallel.schedule=1f1b"},
    {"pp2_interleaved", 2, "--parallel.pp=2 --parallel.schedule=interleaved --parallel.virtual_stages=2"},
    {"pp2_zbh1", 2, "--parallel.pp=2 --parallel.schedule=zb-h1"},
    {"pp4_gpipe", 4, "--parallel.pp=4 --parallel.schedule=gpipe"},
    {"pp4_1f1b", 4, "--parallel.pp=4 --parallel.schedule=1f1b"},
    {"pp4_interleaved", 4, "--parallel.pp=4 --parallel.schedule=interleaved --parallel.virtual_stages=2"},
    {"pp4_zbh1", 4, "--parallel.pp=4 --parallel.schedule=zb-h1"},
    {"tp2", 2, "--parallel.tp=2"},
    {"dp2", 2, "--parallel.dp=2"},
    {"pp2_tp2_gpipe", 4, "--parallel.pp=2 --parallel.tp=2 --parallel.schedule=gpipe"},
    {"pp2_tp2_1f1b", 4, "--parallel.pp=2 --parallel.tp=2 --parallel.schedule=1f1b"},
    {"pp2_tp2_interleaved", 4,
     "--parallel.pp=2 --parallel.tp=2 --parallel.schedule=interleaved --parallel.virtual_stages=2"},
    {"pp2_tp2_zbh1", 4, "--parallel.pp=2 --parallel.tp=2 --parallel.schedule=zb-h1"},
    {"pp2_dp2_1f1b", 4, "--parallel.pp=2 --parallel.dp=2"},
};
INSTANTIATE_TEST_SUITE_P(Grid, ParallelEquivalence, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace pipelane
