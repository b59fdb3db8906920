// graphsgd: matrix factorisation over a graph's edges by stochastic gradient descent, as
// Gardenia's SGD does (the kernel FreeRide runs): every edge u->v is a rating r(u,v) of item v by
// user u; each user and each item has a latent vector of `latent_dim` floats, and one iteration
// visits every edge once, in the CSR's order (rows by source, each row in file order: fixed, so
// the result is too), updating both vectors:
//
//   e = r(u,v) - <p_u, q_v>
//   p_u[k] += step * (e * q_v[k] - lambda * p_u[k])      (old p_u[k] on the right of both)
//   q_v[k] += step * (e * p_u[k] - lambda * q_v[k])
//
// after which a second pass over the edges measures the RMSE (Gardenia's compute_rmse). Both
// passes are sliced: a step visits at most `slice_edges` edges (an empty row passed counts as one
// unit), and stops and resumes anywhere inside a row. Serial updates, no atomics: the same bits
// on every run, and after a save()/load() at any step.
//
// [lane.graphsgd] options
//   graph, generate, scale, edge_factor, seed: the graph (graph/edge_source.h)
//   latent_dim = 16      K, floats per latent vector (Gardenia's K = 16)          [1, 1024]
//   learning_rate = 0.005  step                                                  (0, 1]
//   lambda = 0.05        L2 regularisation                                       [0, 10]
//   iterations = 10      iterations to run                                       [1, 10^8]
//   tolerance = 0        finished early once an iteration's RMSE is below this   [0, 1e9]
//   slice_edges = 32768  edges per step (~1-3 ms at K = 16 here; 4096 by default on a device
//                        backend, where a slice runs serially in one warp)      [1, 2^40]
//   init_seed = 1        latent vectors start uniform in [0, 1/sqrt(K)), hashed from this,
//                        the vertex and k (independent of any order)
//   step = auto          host: the loop in the arena (the CPU backend only); backend: through
//                        Backend::graphsgd_step (graphsgd_lane_device.h: graph and vectors in the
//                        arena, device memory on a GPU); auto: host on the CPU backend, backend on
//                        a device. The CPU backend's op is the host loop (the same bits); a GPU's
//                        is one warp per slice, serial in the same edge order, whose dot products
//                        round differently (deterministic, not the CPU's bits). Both save the
//                        same state: it resumes in either step.
// Ratings: a file's third column where every line has one; none: rating 1..5 hashed from
// (u, v), so an unweighted SNAP graph (com-Orkut) gets fixed ratings; a file that mixes both is
// refused. Work unit: edges (edge visits of both passes). runs_on_device() is true: on a device
// backend the lane runs the backend step there. Serial on purpose: Gardenia's GPU SGD updates
// edges in parallel without locks (Hogwild), so its results change with the thread order, which
// the lanes may not (the same bits on every run and after a resume).
#pragma once
#include <cstdint>
#include <memory>

#include "lanes/lane.h"

namespace pipelane {

std::unique_ptr<Lane> make_graphsgd_lane();

// The rating an unweighted edge u->v gets (1..5): the lane and its tests agree on it.
float graphsgd_hashed_rating(std::uint32_t u, std::uint32_t v);
// The initial value of element k of vertex v's user (item = false) or item latent vector.
float graphsgd_initial_latent(std::uint64_t init_seed, bool item, std::uint64_t v, int k, int latent_dim);

}  // namespace pipelane
