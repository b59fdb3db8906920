// Sites: the data centres a job's ranks run in, and where the rank grid puts its pipeline stages.
//
// A site holds a contiguous block of world ranks, the sites following each other from rank 0 (a
// launcher starts one app context, or one block of hosts, per site, in order). The grid orders
// ranks tp fastest, then dp, then pp, so pipeline stages fill the sites in order: whenever a site
// holds a whole number of stages (a multiple of tp x dp ranks) every tensor- and data-parallel
// group stays inside one site and only pipeline transfers cross the WAN - the placement that keeps
// the heavy, latency-bound collectives local. place_on_sites says where that grid lands and what
// crosses; a tensor-parallel group across sites is refused unless forced.
#pragma once
#include <string>
#include <vector>

#include "parallel/rank_grid.h"

namespace pipelane {

struct SiteRanks {
  std::string name;
  int first_rank = 0;
  int ranks = 0;
};

class SiteMap {
 public:
  SiteMap() = default;  // no sites: every rank in one place
  // Blocks in rank order from 0, each with at least one rank; std::invalid_argument otherwise.
  explicit SiteMap(std::vector<SiteRanks> sites);
  // Consecutive blocks of the given sizes, named as given.
  static SiteMap from_counts(const std::vector<std::string>& names, const std::vector<int>& ranks);

  int size() const { return static_cast<int>(sites_.size()); }
  bool empty() const { return sites_.empty(); }
  int ranks() const;  // every site's ranks together
  const SiteRanks& site(int index) const { return sites_.at(index); }
  const std::vector<SiteRanks>& sites() const { return sites_; }
  // Index of the site holding `rank` (0 without sites); std::out_of_range past the last site.
  int site_of(int rank) const;

 private:
  std::vector<SiteRanks> sites_;
};

// Where a job's grid lands on the sites.
struct SitePlacement {
  ParallelDims dims;
  std::vector<int> site_of_rank;              // per world rank of the job
  std::vector<std::vector<int>> stage_sites;  // per stage: the sites its ranks occupy, ascending
  // Groups that span sites, one line each ("stage 1, dp 0: east, west").
  std::vector<std::string> tp_across, dp_across;
  // Pipeline boundaries (stage s to s + 1, of any pipeline) that cross sites.
  int crossings = 0;

  bool multi_site() const;
  // "east: stages 0-1 (ranks 0-7); west: stages 2-3 (ranks 8-15)"; a stage split over sites is
  // listed under each.
  std::string describe(const SiteMap& sites) const;
};

// std::invalid_argument when the job has more ranks than the sites hold.
SitePlacement place_on_sites(ParallelDims dims, const SiteMap& sites);
// The same from each grid rank's site (a grid laid out some other way on the sites: the
// simulator's baseline of whole pipelines per site). `site_names` name the indices.
SitePlacement placement_of(ParallelDims dims, std::vector<int> site_of_rank, const std::vector<std::string>& site_names);

// One line refusing a placement that puts a tensor-parallel group across sites (its all-reduces,
// two per layer and pass, would cross the WAN), or "" when there is none or `force` is set.
std::string placement_refusal(const SitePlacement& placement, bool force);
// Lines to warn with: a forced tensor-parallel group across sites, data-parallel groups across
// sites (their gradient all-reduce crosses the WAN every iteration).
std::vector<std::string> placement_warnings(const SitePlacement& placement, bool force);

}  // namespace pipelane
