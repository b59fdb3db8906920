// A cluster the simulator places a job on: identical devices in nodes, nodes in sites, and the
// link between two devices by where they are (same node, same site, different sites).
//
// A job's ranks are laid out as in a real run (tp fastest, then dp, then pp) and filled into the
// nodes in order, site after site. Sites are for jobs spread over data centres joined by a WAN:
// the inter-site link is then what pipeline transfers and all-reduces crossing sites pay.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "parallel/sim/hardware.h"
#include "parallel/sites.h"

namespace pipelane::sim {

struct Site {
  std::string name;
  int nodes = 1;
  std::vector<std::string> hosts;  // its nodes' host names, when the cluster file gives them
};

struct Cluster {
  std::string name;
  DeviceSpec device;                   // every device's type
  int devices_per_node = 1;
  std::vector<Site> sites;             // at least one
  LinkSpec intra_node;                 // between devices of one node
  std::optional<LinkSpec> inter_node;  // between nodes of one site (needed when a site has > 1 node)
  std::optional<LinkSpec> inter_site;  // between sites (needed with > 1 site, unless every pair has its own)
  // The link between two particular sites (indices, the lower first), where it is not inter_site.
  std::map<std::pair<int, int>, LinkSpec> site_links;

  int nodes() const;
  int devices() const { return nodes() * devices_per_node; }
  int node_of(int rank) const { return rank / devices_per_node; }
  int site_of(int rank) const;  // index into sites
  // The link two ranks talk over. std::out_of_range for a rank past the cluster.
  const LinkSpec& link_between(int rank_a, int rank_b) const;
  // The slowest link a collective over ranks {first + k * stride, k < size} crosses (the one a
  // ring or tree is bound by): the inter-site link if it spans sites, else the inter-node link if
  // it spans nodes, else the intra-node link.
  const LinkSpec& group_link(int first, int stride, int size) const;
  // The link between sites a and b (a != b): their own, else inter_site.
  const LinkSpec& site_link(int a, int b) const;
  // The sites as blocks of ranks (devices), for parallel/sites.h's placement.
  SiteMap site_map() const;
  // std::invalid_argument, one line, when something a placement needs is missing.
  void validate() const;
};

enum class AllReduceAlgorithm { Ring, Tree, Auto };

// Seconds of an all-reduce of `bytes` over `ranks` ranks bound by `link`:
//   ring: 2(n-1) steps of latency + bytes/n at the link's bandwidth;
//   tree: (pipelined double binary tree) 2 ceil(log2 n) latencies + 2 bytes at the bandwidth;
//   auto: the faster of the two (NCCL's choice, roughly). 0 for one rank.
double all_reduce_s(double bytes, int ranks, const LinkSpec& link, AllReduceAlgorithm algorithm);

// Seconds of a ring reduce-scatter (or all-gather) of a `bytes` buffer over `ranks` ranks bound by
// `link`: (n-1) steps of latency + bytes/n, half a ring all-reduce (which is the two in turn).
// NCCL runs both as rings. 0 for one rank.
double reduce_scatter_s(double bytes, int ranks, const LinkSpec& link);
double all_gather_s(double bytes, int ranks, const LinkSpec& link);

AllReduceAlgorithm parse_all_reduce_algorithm(const std::string& name);  // ring | tree | auto
const char* all_reduce_algorithm_name(AllReduceAlgorithm algorithm);

}  // namespace pipelane::sim
