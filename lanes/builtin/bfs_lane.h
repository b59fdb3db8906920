// bfs: level-synchronous breadth-first search from a source vertex (Gardenia's BFS, serial): the
// frontier of level d is scanned in order, every unvisited out-neighbour gets depth d + 1 and joins
// the next frontier in the order it was found; the level ends when the frontier is done. A step
// scans at most `slice_edges` edges (a frontier vertex counts as one unit too) and stops and
// resumes anywhere inside a vertex's row, so a level of any size is split across steps.
// `traversals` > 1 runs again from source + 1, source + 2, ... (mod the vertex count); visited
// marks carry the traversal's number, so a new traversal costs no O(V) reset in a step.
//
// [lane.bfs] options
//   graph, generate, scale, edge_factor, seed: the graph (graph/edge_source.h)
//   undirected = false   also follow every edge backwards (a SNAP undirected graph such as
//                        com-Orkut lists each pair once)
//   source = 0           the first traversal's source vertex                  [0, vertices)
//   traversals = 1       traversals to run                                    [1, 10^9]
//   slice_edges = 1048576  edges per step                                     [1, 2^40]
//   write_depths = false  OUTPUT_DIR/depths.txt at each traversal's end: "vertex depth" per line,
//                        -1 for vertices it did not reach (V lines: for small graphs); the backend
//                        step writes it once, for the last traversal, at teardown
//   step = auto          host: the push loop above (the CPU backend only); backend: a pull
//                        (bottom-up) BFS through Backend::bfs_step (bfs_lane_device.h: whole
//                        vertices per slice, graph and depths in the arena, device memory on a GPU);
//                        auto: host on the CPU backend, backend on a device backend
// Every traversal's levels (vertices per depth), reached vertices and edges scanned go to the
// report (the first 100 traversals; the backend step keeps the sizes of the first 256 levels).
// Depths and level sizes are the same in both steps (BFS depths do not depend on visit order);
// "edges scanned" is not: the push step counts the frontier's out-edges, the pull step the
// in-edges of unreached vertices it read up to a parent. Work unit: edges (push: edges scanned;
// pull: the slice's in-edges, what it may read). runs_on_device() is true: on a device backend
// the lane runs the pull step there.
#pragma once
#include <memory>

#include "lanes/lane.h"

namespace pipelane {

std::unique_ptr<Lane> make_bfs_lane();

}  // namespace pipelane
