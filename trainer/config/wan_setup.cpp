#include "trainer/config/wan_setup.h"

#include <algorithm>
#include <cstdlib>

namespace pipelane {

std::optional<WanSettings> wan_settings(const WanOptions& wan, const sim::Cluster& cluster) {
  if (wan.sharing == "off") {
    if (wan.connections > 0)
      throw ConfigError("[wan] connections = " + std::to_string(wan.connections) +
                        " needs [wan] sharing = concurrent or temporal (sharing = off leaves cross-site "
                        "transfers as any other)");
    return std::nullopt;
  }
  WanSettings s;
  s.sharing = parse_wan_sharing(wan.sharing);
  s.connections = wan.connections;
  if (s.connections == 0) {
    s.connections = cluster.inter_site ? cluster.inter_site->connections : 1;
    for (const auto& [pair, link] : cluster.site_links) s.connections = std::max(s.connections, link.connections);
  }
  return s;
}

WanSetup wan_setup(const TrainOptions& opts, ParallelDims dims) {
  WanSetup setup;
  const WanOptions& wan = opts.wan;
  if (wan.placement != "stages")
    throw ConfigError("[wan] placement = " + wan.placement +
                      ": whole pipelines per site is a baseline pipelane simulate prices; training places "
                      "stages across sites (placement = stages)");
  if (wan.cluster.empty()) {
    if (wan.sharing != "off")
      throw ConfigError("[wan] sharing = " + wan.sharing + " needs [wan] cluster (the file naming the sites)");
    setup.placement = place_on_sites(dims, setup.sites);
    return setup;
  }
  try {
    setup.cluster = load_cluster(wan.cluster);
  } catch (const SimInputError& e) {
    throw ConfigError(std::string("[wan] cluster: ") + e.what());
  }
  setup.sites = setup.cluster->cluster.site_map();
  if (setup.sites.ranks() < dims.world())
    throw ConfigError("[wan] cluster = " + wan.cluster + ": its sites hold " + std::to_string(setup.sites.ranks()) +
                      " ranks, the job has " + std::to_string(dims.world()));
  setup.placement = place_on_sites(dims, setup.sites);
  const std::string refusal = placement_refusal(setup.placement, wan.force);
  if (!refusal.empty()) throw ConfigError("[wan] cluster = " + wan.cluster + ": " + refusal);
  setup.warnings = placement_warnings(setup.placement, wan.force);
  setup.settings = wan_settings(wan, setup.cluster->cluster);
  return setup;
}

std::optional<WanRoute> wan_route_for(const WanSetup& setup, int world_rank) {
  if (!setup.settings) return std::nullopt;
  return wan_route(setup.placement, world_rank, *setup.settings);
}

std::string wan_transport_mismatch(const WanSetup& setup) {
  if (!setup.settings) return "";
  const char* given = std::getenv("PIPELANE_WAN_CONNECTIONS");
  if (!given) return "";  // the launcher did not say: nothing to compare
  const int have = std::atoi(given);
  if (have == setup.settings->connections) return "";
  return "[wan] connections = " + std::to_string(setup.settings->connections) + " but the launcher gives " +
         std::to_string(have) + " TCP connection(s) per pair of ranks across sites (PIPELANE_WAN_CONNECTIONS; "
         "scripts/wan/emulate.sh --nics): cross-site messages take " + std::to_string(have);
}

}  // namespace pipelane
