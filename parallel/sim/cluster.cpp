#include "parallel/sim/cluster.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pipelane::sim {

int Cluster::nodes() const {
  int n = 0;
  for (const Site& s : sites) n += s.nodes;
  return n;
}

int Cluster::site_of(int rank) const {
  int node = node_of(rank);
  if (rank < 0 || node >= nodes())
    throw std::out_of_range("rank " + std::to_string(rank) + " is past the cluster's " + std::to_string(devices()) +
                            " devices");
  for (std::size_t i = 0; i < sites.size(); ++i) {
    if (node < sites[i].nodes) return static_cast<int>(i);
    node -= sites[i].nodes;
  }
  return static_cast<int>(sites.size()) - 1;
}

const LinkSpec& Cluster::site_link(int a, int b) const {
  const auto it = site_links.find({std::min(a, b), std::max(a, b)});
  if (it != site_links.end()) return it->second;
  if (!inter_site)
    throw std::invalid_argument("cluster " + name + ": no link between sites " + sites.at(a).name + " and " +
                                sites.at(b).name);
  return *inter_site;
}

SiteMap Cluster::site_map() const {
  std::vector<std::string> names;
  std::vector<int> ranks;
  for (const Site& s : sites) {
    names.push_back(s.name);
    ranks.push_back(s.nodes * devices_per_node);
  }
  return SiteMap::from_counts(names, ranks);
}

const LinkSpec& Cluster::link_between(int rank_a, int rank_b) const {
  if (site_of(rank_a) != site_of(rank_b)) return site_link(site_of(rank_a), site_of(rank_b));
  if (node_of(rank_a) != node_of(rank_b)) return *inter_node;
  return intra_node;
}

const LinkSpec& Cluster::group_link(int first, int stride, int size) const {
  bool spans_nodes = false;
  std::vector<int> spanned{site_of(first)};
  for (int k = 1; k < size; ++k) {
    const int rank = first + k * stride;
    if (std::find(spanned.begin(), spanned.end(), site_of(rank)) == spanned.end()) spanned.push_back(site_of(rank));
    spans_nodes = spans_nodes || node_of(rank) != node_of(first);
  }
  if (spanned.size() > 1) {  // the slowest link between two of the sites it spans
    const LinkSpec* slowest = nullptr;
    for (std::size_t i = 0; i < spanned.size(); ++i)
      for (std::size_t j = i + 1; j < spanned.size(); ++j) {
        const LinkSpec& l = site_link(spanned[i], spanned[j]);
        if (!slowest || l.effective_bandwidth() < slowest->effective_bandwidth() ||
            (l.effective_bandwidth() == slowest->effective_bandwidth() && l.latency_s > slowest->latency_s))
          slowest = &l;
      }
    return *slowest;
  }
  return spans_nodes ? *inter_node : intra_node;
}

void Cluster::validate() const {
  const std::string where = "cluster " + (name.empty() ? std::string("(unnamed)") : name);
  if (devices_per_node < 1) throw std::invalid_argument(where + ": devices_per_node must be >= 1");
  if (sites.empty()) throw std::invalid_argument(where + ": no nodes");
  for (const Site& s : sites)
    if (s.nodes < 1) throw std::invalid_argument(where + ": site " + s.name + " needs at least one node");
  const bool multi_node_site = std::any_of(sites.begin(), sites.end(), [](const Site& s) { return s.nodes > 1; });
  if (multi_node_site && !inter_node)
    throw std::invalid_argument(where + ": nodes need a link between them ([cluster] inter_node_link)");
  for (std::size_t a = 0; a < sites.size() && !inter_site; ++a)
    for (std::size_t b = a + 1; b < sites.size(); ++b)
      if (!site_links.count({static_cast<int>(a), static_cast<int>(b)}))
        throw std::invalid_argument(where + ": sites " + sites[a].name + " and " + sites[b].name +
                                    " need a link between them ([cluster] inter_site_link or [between." +
                                    sites[a].name + "." + sites[b].name + "])");
  if (!(device.peak_flops() > 0))
    throw std::invalid_argument(where + ": device " + device.name + " has no peak FLOP/s for its precision");
}

double all_reduce_s(double bytes, int ranks, const LinkSpec& link, AllReduceAlgorithm algorithm) {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double n = ranks, bw = link.effective_bandwidth();
  const double ring = 2 * (n - 1) * (link.latency_s + bytes / n / bw);
  const double tree = 2 * std::ceil(std::log2(n)) * link.latency_s + 2 * bytes / bw;
  switch (algorithm) {
    case AllReduceAlgorithm::Ring: return ring;
    case AllReduceAlgorithm::Tree: return tree;
    case AllReduceAlgorithm::Auto: return std::min(ring, tree);
  }
  return ring;
}

double reduce_scatter_s(double bytes, int ranks, const LinkSpec& link) {
  if (ranks <= 1 || bytes <= 0) return 0.0;
  const double n = ranks;
  return (n - 1) * (link.latency_s + bytes / n / link.effective_bandwidth());
}

double all_gather_s(double bytes, int ranks, const LinkSpec& link) { return reduce_scatter_s(bytes, ranks, link); }

AllReduceAlgorithm parse_all_reduce_algorithm(const std::string& name) {
  if (name == "ring") return AllReduceAlgorithm::Ring;
  if (name == "tree") return AllReduceAlgorithm::Tree;
  if (name == "auto") return AllReduceAlgorithm::Auto;
  throw std::invalid_argument("unknown all-reduce algorithm '" + name + "' (expected ring, tree or auto)");
}

const char* all_reduce_algorithm_name(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::Ring: return "ring";
    case AllReduceAlgorithm::Tree: return "tree";
    case AllReduceAlgorithm::Auto: return "auto";
  }
  return "?";
}

}  // namespace pipelane::sim
