#include "trainer/sites_command.h"

#include <boost/program_options.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "trainer/sim_inputs.h"
#include "trainer/wan_setup.h"

namespace pipelane {

namespace {

namespace po = boost::program_options;

struct SitesOptions {
  std::string cluster;
  bool shell = false;
};

po::options_description describe(SitesOptions& o) {
  po::options_description d(
      "usage: pipelane sites --cluster FILE [--config FILE] [--section.key=value ...] [--shell]\n\n"
      "Prints the sites (data centres) of a cluster file - the ranks each holds, its hosts - and the\n"
      "link between every pair (latency, bandwidth per connection, connections, capacity). With a\n"
      "training config (any `pipelane train` key), also where its grid lands: the stages each site\n"
      "holds, the pipeline boundaries that cross the WAN, and what is refused (a tensor-parallel\n"
      "group across sites, unless [wan] force = true) or warned about (data parallelism across sites).\n"
      "Exits 2 when the placement is refused.\n\noptions");
  d.add_options()
      ("help,h", "print this help and exit")
      ("cluster", po::value(&o.cluster), "cluster file (configs/clusters/README.md); default: [wan] cluster")
      ("shell", po::bool_switch(&o.shell),
       "print for scripts: `site INDEX NAME RANKS` per site, then `link A B LATENCY_US\n"
       "BANDWIDTH_BYTES_PER_S CONNECTIONS CAPACITY_BYTES_PER_S` per pair of sites (A < B)");
  return d;
}

}  // namespace

int sites_command(int argc, char** argv) {
  SitesOptions o;
  const po::options_description desc = describe(o);
  try {
    po::variables_map vm;
    const std::optional<std::vector<std::string>> rest = parse_command_options(argc, argv, desc, vm);
    if (!rest) return 0;
    const bool with_config = has_config_argument(*rest) || !rest->empty();
    const TrainOptions options = with_config ? train_options_from_args(*rest, "") : TrainOptions{};
    const std::string path = o.cluster.empty() ? options.wan.cluster : o.cluster;
    if (path.empty()) throw SimInputError("give --cluster FILE (see --help)");
    const ClusterFile file = load_cluster(path);
    const sim::Cluster& c = file.cluster;
    const SiteMap sites = c.site_map();
    if (o.shell) {
      for (int i = 0; i < sites.size(); ++i)
        std::printf("site %d %s %d\n", i, sites.site(i).name.c_str(), sites.site(i).ranks);
      for (int a = 0; a < sites.size(); ++a)
        for (int b = a + 1; b < sites.size(); ++b) {
          const sim::LinkSpec& l = c.site_link(a, b);
          std::printf("link %d %d %.0f %.0f %d %.0f\n", a, b, l.latency_s * 1e6, l.bandwidth, l.connections, l.capacity);
        }
    } else {
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
    if (!with_config) return 0;
    const int model_parallel = options.parallel.tp * options.parallel.pp;
    const ParallelDims dims{options.parallel.tp,
                            options.parallel.dp > 0 ? options.parallel.dp : sites.ranks() / model_parallel,
                            options.parallel.pp};
    const SitePlacement p = place_on_sites(dims, sites);
    const std::string refusal = placement_refusal(p, options.wan.force);
    std::printf("%s%s (tp %d x dp %d x pp %d); %d pipeline boundar%s cross sites\n", o.shell ? "placement " : "  placement: ",
                p.describe(sites).c_str(), dims.tp, dims.dp, dims.pp, p.crossings, p.crossings == 1 ? "y" : "ies");
    for (const std::string& w : placement_warnings(p, options.wan.force)) std::printf("  warning: %s\n", w.c_str());
    if (!refusal.empty()) {
      std::fprintf(stderr, "pipelane sites: %s\n", refusal.c_str());
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane sites: %s\n", e.what());
    return 2;
  }
}

}  // namespace pipelane
