#include "parallel/sites.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace pipelane {

SiteMap::SiteMap(std::vector<SiteRanks> sites) : sites_(std::move(sites)) {
  int next = 0;
  std::set<std::string> names;
  for (const SiteRanks& s : sites_) {
    if (s.name.empty()) throw std::invalid_argument("a site needs a name");
    if (!names.insert(s.name).second) throw std::invalid_argument("site " + s.name + " is named twice");
    if (s.ranks < 1) throw std::invalid_argument("site " + s.name + " needs at least one rank");
    if (s.first_rank != next)
      throw std::invalid_argument("site " + s.name + " starts at rank " + std::to_string(s.first_rank) +
                                  ", expected " + std::to_string(next) +
                                  " (sites hold consecutive ranks, in order from rank 0)");
    next += s.ranks;
  }
}

SiteMap SiteMap::from_counts(const std::vector<std::string>& names, const std::vector<int>& ranks) {
  if (names.size() != ranks.size()) throw std::invalid_argument("SiteMap::from_counts: one count per name");
  std::vector<SiteRanks> sites;
  int first = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    sites.push_back({names[i], first, ranks[i]});
    first += ranks[i];
  }
  return SiteMap(std::move(sites));
}

int SiteMap::ranks() const {
  int n = 0;
  for (const SiteRanks& s : sites_) n += s.ranks;
  return n;
}

int SiteMap::site_of(int rank) const {
  if (sites_.empty()) return 0;
  for (std::size_t i = 0; i < sites_.size(); ++i)
    if (rank >= sites_[i].first_rank && rank < sites_[i].first_rank + sites_[i].ranks) return static_cast<int>(i);
  throw std::out_of_range("rank " + std::to_string(rank) + " is in no site (the sites hold ranks 0-" +
                          std::to_string(ranks() - 1) + ")");
}

bool SitePlacement::multi_site() const {
  return std::any_of(site_of_rank.begin(), site_of_rank.end(), [&](int s) { return s != site_of_rank.front(); });
}

namespace {

std::string range_text(int first, int last) {
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

// The sites a group's ranks occupy: {first + k * stride, k < size}.
std::set<int> group_sites(const std::vector<int>& site_of_rank, int first, int stride, int size) {
  std::set<int> out;
  for (int k = 0; k < size; ++k) out.insert(site_of_rank[first + k * stride]);
  return out;
}

std::string joined_names(const std::vector<std::string>& names, const std::set<int>& indices) {
  std::string out;
  for (int i : indices)
    out += (out.empty() ? "" : ", ") + (i < static_cast<int>(names.size()) ? names[i] : std::string("site"));
  return out;
}

}  // namespace

SitePlacement place_on_sites(ParallelDims dims, const SiteMap& sites) {
  if (!sites.empty() && dims.world() > sites.ranks())
    throw std::invalid_argument("the job has " + std::to_string(dims.world()) + " ranks (tp " + std::to_string(dims.tp) +
                                " x dp " + std::to_string(dims.dp) + " x pp " + std::to_string(dims.pp) +
                                "), the sites hold " + std::to_string(sites.ranks()));
  std::vector<int> site_of_rank;
  for (int r = 0; r < dims.world(); ++r) site_of_rank.push_back(sites.site_of(r));
  std::vector<std::string> names;
  for (const SiteRanks& s : sites.sites()) names.push_back(s.name);
  return placement_of(dims, std::move(site_of_rank), names);
}

SitePlacement placement_of(ParallelDims dims, std::vector<int> site_of_rank, const std::vector<std::string>& names) {
  const RankGrid grid(dims);
  if (static_cast<int>(site_of_rank.size()) != dims.world())
    throw std::invalid_argument("placement_of: one site per rank of the job");
  SitePlacement p;
  p.dims = dims;
  p.site_of_rank = std::move(site_of_rank);
  const auto site_names = [&](const std::set<int>& indices) { return joined_names(names, indices); };
  p.stage_sites.resize(dims.pp);
  for (int s = 0; s < dims.pp; ++s) {
    const std::set<int> at = group_sites(p.site_of_rank, grid.rank_of({0, 0, s}), 1, dims.tp * dims.dp);
    p.stage_sites[s].assign(at.begin(), at.end());
    for (int d = 0; d < dims.dp; ++d) {
      const std::set<int> tp = group_sites(p.site_of_rank, grid.rank_of({0, d, s}), 1, dims.tp);
      if (tp.size() > 1)
        p.tp_across.push_back("stage " + std::to_string(s) + ", dp " + std::to_string(d) + ": " + site_names(tp));
    }
    for (int t = 0; t < dims.tp; ++t) {
      const std::set<int> dp = group_sites(p.site_of_rank, grid.rank_of({t, 0, s}), dims.tp, dims.dp);
      if (dp.size() > 1)
        p.dp_across.push_back("stage " + std::to_string(s) + ", tp " + std::to_string(t) + ": " + site_names(dp));
    }
    if (s + 1 < dims.pp)
      for (int d = 0; d < dims.dp; ++d)
        for (int t = 0; t < dims.tp; ++t)
          if (p.site_of_rank[grid.rank_of({t, d, s})] != p.site_of_rank[grid.rank_of({t, d, s + 1})]) ++p.crossings;
  }
  return p;
}

std::string SitePlacement::describe(const SiteMap& sites) const {
  const RankGrid grid(dims);
  std::string out;
  const int count = sites.empty() ? 1 : sites.size();
  for (int site = 0; site < count; ++site) {
    int first_stage = -1, last_stage = -1, first_rank = -1, last_rank = -1;
    for (int s = 0; s < dims.pp; ++s) {
      if (std::find(stage_sites[s].begin(), stage_sites[s].end(), site) == stage_sites[s].end()) continue;
      if (first_stage < 0) first_stage = s;
      last_stage = s;
    }
    for (int r = 0; r < static_cast<int>(site_of_rank.size()); ++r) {
      if (site_of_rank[r] != site) continue;
      if (first_rank < 0) first_rank = r;
      last_rank = r;
    }
    if (!out.empty()) out += "; ";
    out += sites.empty() ? std::string("site") : sites.site(site).name;
    if (first_stage < 0) {
      out += ": unused";
      continue;
    }
    out += ": stage" + std::string(first_stage == last_stage ? " " : "s ") + range_text(first_stage, last_stage) +
           " (ranks " + range_text(first_rank, last_rank) + ")";
  }
  return out;
}

std::string placement_refusal(const SitePlacement& p, bool force) {
  if (force || p.tp_across.empty()) return "";
  return "tensor-parallel group across sites (" + p.tp_across.front() +
         "): its all-reduces, two per layer and pass, would cross the WAN; give each site a multiple of tp x dp = " +
         std::to_string(p.dims.tp * p.dims.dp) + " ranks, or force it ([wan] force = true)";
}

std::vector<std::string> placement_warnings(const SitePlacement& p, bool force) {
  std::vector<std::string> out;
  if (force && !p.tp_across.empty())
    out.push_back("forced: " + std::to_string(p.tp_across.size()) + " tensor-parallel group(s) across sites (" +
                  p.tp_across.front() + "): their all-reduces cross the WAN");
  if (!p.dp_across.empty())
    out.push_back(std::to_string(p.dp_across.size()) + " data-parallel group(s) across sites (" + p.dp_across.front() +
                  "): their gradient all-reduce crosses the WAN every iteration");
  return out;
}

}  // namespace pipelane
