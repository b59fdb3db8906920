// The device (NCCL) data planes' layout (parallel/device_comm_plan.h) for every small grid: each
// rank gets one communicator per tensor-parallel, data-parallel and tied-embedding group it is in,
// and for pipeline transfers exactly the links of the phase-1 NCCL plan (runtime/cuda/plans/
// nccl_p2p.h, whose simulator shows every schedule runs on them without deadlock). And without a
// GPU, making the communicators fails with one line (the library is there, the driver is not).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "parallel/device_comm_plan.h"
#include "runtime/backend_registry.h"
#include "runtime/cuda/plans/nccl_p2p.h"

namespace pipelane::cuda_test {
namespace {

using Kind = DeviceCommGroup::Kind;

TEST(DeviceCommPlan, EveryRankGetsItsGroupsAndThePipelineLinksOfTheNcclPlan) {
  for (int tp = 1; tp <= 2; ++tp)
    for (int dp = 1; dp <= 3; ++dp)
      for (int pp = 1; pp <= 4; ++pp) {
        const ParallelDims dims{tp, dp, pp};
        const RankGrid grid(dims);
        SCOPED_TRACE(::testing::Message() << "tp " << tp << " dp " << dp << " pp " << pp);
        const std::vector<DeviceCommGroup> plan = device_comm_plan(dims);
        for (const DeviceCommGroup& g : plan) {
          EXPECT_GT(g.members.size(), 1u);
          EXPECT_EQ(std::set<int>(g.members.begin(), g.members.end()).size(), g.members.size());
        }
        for (int r = 0; r < dims.world(); ++r) {
          const RankCoords me = grid.coords(r);
          std::map<Kind, int> count;
          std::set<cuda::P2PLink> links;
          for (int index : device_comms_of(plan, r)) {
            const DeviceCommGroup& g = plan[static_cast<std::size_t>(index)];
            ++count[g.kind];
            for (int m : g.members) {
              const RankCoords c = grid.coords(m);
              if (g.kind == Kind::TensorParallel) EXPECT_TRUE(c.dp == me.dp && c.pp == me.pp);
              if (g.kind == Kind::DataParallel) EXPECT_TRUE(c.tp == me.tp && c.pp == me.pp);
              if (g.kind != Kind::TensorParallel && g.kind != Kind::DataParallel) EXPECT_TRUE(c.tp == me.tp && c.dp == me.dp);
            }
            if (g.kind == Kind::TensorParallel) EXPECT_EQ(g.members, std::vector<int>([&] {
                                                            std::vector<int> m;
                                                            for (int t = 0; t < tp; ++t) m.push_back(grid.rank_of({t, me.dp, me.pp}));
                                                            return m;
                                                          }()));
            if (g.kind == Kind::ForwardLink || g.kind == Kind::BackwardLink)
              links.insert({grid.coords(g.members[0]).pp, grid.coords(g.members[1]).pp,
                            g.kind == Kind::ForwardLink ? cuda::P2PChannel::Activations : cuda::P2PChannel::Gradients});
          }
          EXPECT_EQ(count[Kind::TensorParallel], tp > 1 ? 1 : 0);
          EXPECT_EQ(count[Kind::DataParallel], dp > 1 ? 1 : 0);
          EXPECT_EQ(count[Kind::Embedding], pp > 1 && (me.pp == 0 || me.pp == pp - 1) ? 1 : 0);
          const std::vector<cuda::P2PLink> want = cuda::pipeline_links(me.pp, pp);
          EXPECT_EQ(links, std::set<cuda::P2PLink>(want.begin(), want.end()));
        }
      }
}

TEST(DeviceCommPlan, WithoutAGpuNcclRefusesInOneLine) {
#if !PIPELANE_TEST_HAVE_CUDA_LIBRARY
  GTEST_SKIP() << "this build has no CUDA backend library";
#else
  if (const char* build = std::getenv("PIPELANE_BUILD_DIR")) setenv("PIPELANE_BACKEND_DIR", build, 1);
  const std::vector<char> id = cuda_comm_unique_id();  // needs no device
  EXPECT_EQ(id.size(), 128u);
  if (BackendRegistry::with_builtins().devices().back().available) GTEST_SKIP() << "this machine has a GPU";
  try {
    create_cuda_comms({DeviceCommSpec{id, 2, 0}}, 0);
    ADD_FAILURE() << "NCCL made a communicator without a GPU";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("NCCL communicators: ", 0), 0u) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
#endif
}

}  // namespace
}  // namespace pipelane::cuda_test
