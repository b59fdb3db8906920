// [wan] for a run: the sites of the cluster file, where the job's grid lands on them (refused with
// one line when a tensor-parallel group would cross sites, unless forced) and the WAN settings the
// executor's lists are lowered with (parallel/wan_schedule.h). Shared by `pipelane train`,
// `simulate`, `plan` and `sites`.
#pragma once
#include "trainer/config/layer.h"  // trainer/README.md: the layers
#include <optional>
#include <string>
#include <vector>

#include "parallel/sites.h"
#include "parallel/wan_schedule.h"
#include "trainer/config/cluster_file.h"
#include "trainer/config/train_options.h"

namespace pipelane {

// The WAN settings [wan] asks for on `cluster` (nullopt when sharing = off): connections 0 takes
// the inter-site links' own (the most any pair has). ConfigError for a bad combination.
std::optional<WanSettings> wan_settings(const WanOptions& wan, const sim::Cluster& cluster);

struct WanSetup {
  std::optional<ClusterFile> cluster;  // none without [wan] cluster
  SiteMap sites;
  SitePlacement placement;
  std::optional<WanSettings> settings;
  std::vector<std::string> warnings;
};

// For a training run of `dims` ranks: reads [wan] cluster, places the grid, checks it.
// ConfigError (one line) when the sites hold too few ranks, a tensor-parallel group would cross
// sites without [wan] force, or placement = replicas (simulated only).
WanSetup wan_setup(const TrainOptions& opts, ParallelDims dims);
// This rank's route for its executor (nullopt without WAN settings).
std::optional<WanRoute> wan_route_for(const WanSetup& setup, int world_rank);

// The connections a cross-site message takes are the transport's (Open MPI stripes a large message
// over a TCP connection per interface pair). A launcher that knows says so in
// PIPELANE_WAN_CONNECTIONS (scripts/wan/emulate.sh does): a line to warn with when that differs
// from the WAN settings' connections, else "".
std::string wan_transport_mismatch(const WanSetup& setup);

}  // namespace pipelane
