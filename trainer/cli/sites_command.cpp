#include "trainer/cli/sites_command.h"

#include <boost/program_options.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "trainer/cli/command_options.h"
#include "trainer/sim/sim_inputs.h"
#include "trainer/config/wan_setup.h"

namespace pipelane {

namespace {

namespace po = boost::program_options;

struct SitesOptions {
  std::string cluster;
  bool shell = false;
};

void describe(SubcommandOptions& options, SitesOptions& o) {
  options.accept_train_keys("a `pipelane train` config whose grid to place (its keys also as --section.key=value)");
  options.add_options()
      ("cluster", po::value(&o.cluster), "cluster file (configs/clusters/README.md); default: [wan] cluster")
      ("shell", po::bool_switch(&o.shell),
       "print for scripts: `site INDEX NAME RANKS` per site, then `link A B LATENCY_US "
       "BANDWIDTH_BYTES_PER_S CONNECTIONS CAPACITY_BYTES_PER_S` per pair of sites (A < B)");
}

void print_sites_for_shell(const sim::Cluster& c, const SiteMap& sites) {
  for (int i = 0; i < sites.size(); ++i)
    std::printf("site %d %s %d\n", i, sites.site(i).name.c_str(), sites.site(i).ranks);
  for (int a = 0; a < sites.size(); ++a)
    for (int b = a + 1; b < sites.size(); ++b) {
      const sim::LinkSpec& l = c.site_link(a, b);
      std::printf("link %d %d %.0f %.0f %d %.0f\n", a, b, l.latency_s * 1e6, l.bandwidth, l.connections, l.capacity);
    }
}

void print_sites(const sim::Cluster& c, const SiteMap& sites) {
  std::printf("cluster %s: %d x %s, %d site(s)\n", c.name.c_str(), c.devices(), c.device.name.c_str(), sites.size());
  for (int i = 0; i < sites.size(); ++i) {
    const sim::Site& s = c.sites[i];
    std::string hosts;
    for (const std::string& h : s.hosts) hosts += (hosts.empty() ? "" : ", ") + h;
    std::printf("  site %s: ranks %d-%d (%d node(s))%s\n", s.name.c_str(), sites.site(i).first_rank,
                sites.site(i).first_rank + sites.site(i).ranks - 1, s.nodes,
                hosts.empty() ? "" : (", hosts " + hosts).c_str());
  }
  for (int a = 0; a < sites.size(); ++a)
    for (int b = a + 1; b < sites.size(); ++b) {
      const sim::LinkSpec& l = c.site_link(a, b);
      std::printf("  %s <-> %s: %s, %.3g ms one way, %.4g Gbit/s a connection x %d%s\n", c.sites[a].name.c_str(),
                  c.sites[b].name.c_str(), l.name.c_str(), l.latency_s * 1e3, l.bandwidth * 8 / 1e9, l.connections,
                  l.capacity > 0 ? (", capacity " + std::to_string(l.capacity * 8 / 1e9).substr(0, 6) + " Gbit/s").c_str()
                                 : "");
    }
}

// Where the config's grid lands on the sites; 2 (and the refusal on stderr) when it is refused.
int print_placement(const TrainOptions& options, const SiteMap& sites, bool shell) {
  const int model_parallel = options.parallel.tp * options.parallel.pp;
  const ParallelDims dims{options.parallel.tp,
                          options.parallel.dp > 0 ? options.parallel.dp : sites.ranks() / model_parallel,
                          options.parallel.pp};
  const SitePlacement p = place_on_sites(dims, sites);
  const std::string refusal = placement_refusal(p, options.wan.force);
  std::printf("%s%s (tp %d x dp %d x pp %d); %d pipeline boundar%s cross sites\n", shell ? "placement " : "  placement: ",
              p.describe(sites).c_str(), dims.tp, dims.dp, dims.pp, p.crossings, p.crossings == 1 ? "y" : "ies");
  for (const std::string& w : placement_warnings(p, options.wan.force)) std::printf("  warning: %s\n", w.c_str());
  if (!refusal.empty()) {
    std::fprintf(stderr, "pipelane sites: %s\n", refusal.c_str());
    return 2;
  }
  return 0;
}

}  // namespace

int sites_command(int argc, char** argv) {
  SitesOptions o;
  SubcommandOptions options(
      "sites", "--cluster FILE [--config FILE] [--section.key=value ...] [--shell]",
      "Prints the sites (data centres) of a cluster file - the ranks each holds, its hosts - and the\n"
      "link between every pair (latency, bandwidth per connection, connections, capacity). With a\n"
      "training config (any `pipelane train` key), also where its grid lands: the stages each site\n"
      "holds, the pipeline boundaries that cross the WAN, and what is refused (a tensor-parallel\n"
      "group across sites, unless [wan] force = true) or warned about (data parallelism across sites).\n"
      "Exits 2 when the placement is refused.");
  describe(options, o);
  if (const auto code = options.parse(argc, argv)) return *code;
  try {
    const bool with_config = options.has_train_arguments();
    const TrainOptions train = with_config ? options.train_options() : TrainOptions{};
    const std::string path = o.cluster.empty() ? train.wan.cluster : o.cluster;
    if (path.empty()) return options.usage_error("give --cluster FILE");
    const ClusterFile file = load_cluster(path);
    const SiteMap sites = file.cluster.site_map();
    if (o.shell) print_sites_for_shell(file.cluster, sites);
    else print_sites(file.cluster, sites);
    return with_config ? print_placement(train, sites, o.shell) : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane sites: %s\n", e.what());
    return 2;
  }
}

}  // namespace pipelane
