#include "parallel/device_comm_plan.h"

#include <algorithm>

namespace pipelane {

std::vector<DeviceCommGroup> device_comm_plan(ParallelDims dims) {
  using Kind = DeviceCommGroup::Kind;
  const RankGrid grid(dims);
  std::vector<DeviceCommGroup> plan;
  const auto add = [&plan](Kind kind, std::vector<int> members) {
    if (members.size() > 1) plan.push_back({kind, std::move(members)});
  };
  for (int pp = 0; pp < dims.pp; ++pp)
    for (int dp = 0; dp < dims.dp; ++dp) {
      std::vector<int> m;
      for (int tp = 0; tp < dims.tp; ++tp) m.push_back(grid.rank_of({tp, dp, pp}));
      add(Kind::TensorParallel, m);
    }
  for (int pp = 0; pp < dims.pp; ++pp)
    for (int tp = 0; tp < dims.tp; ++tp) {
      std::vector<int> m;
      for (int dp = 0; dp < dims.dp; ++dp) m.push_back(grid.rank_of({tp, dp, pp}));
      add(Kind::DataParallel, m);
    }
  if (dims.pp > 1)
    for (int dp = 0; dp < dims.dp; ++dp)
      for (int tp = 0; tp < dims.tp; ++tp) {
        const int first = grid.rank_of({tp, dp, 0}), last = grid.rank_of({tp, dp, dims.pp - 1});
        add(Kind::Embedding, {first, last});
        // Activations go to the next stage, gradients to the previous one; the ring wraps for
        // interleaved schedules (the last stage feeds the first stage's next chunk).
        for (int s = 0; s < dims.pp; ++s) {
          const int me = grid.rank_of({tp, dp, s});
          add(Kind::ForwardLink, {me, grid.rank_of({tp, dp, (s + 1) % dims.pp})});
          add(Kind::BackwardLink, {me, grid.rank_of({tp, dp, (s - 1 + dims.pp) % dims.pp})});
        }
      }
  // pp == 2: the ring's two directions are the same pair of ranks, but each (sender, receiver,
  // direction) is still its own link: nothing to merge.
  return plan;
}

std::vector<int> device_comms_of(const std::vector<DeviceCommGroup>& plan, int world_rank) {
  std::vector<int> out;
  for (std::size_t i = 0; i < plan.size(); ++i)
    if (std::find(plan[i].members.begin(), plan[i].members.end(), world_rank) != plan[i].members.end())
      out.push_back(static_cast<int>(i));
  return out;
}

}  // namespace pipelane
