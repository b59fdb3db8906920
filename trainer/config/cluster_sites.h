// Internal to the cluster file's reader (cluster_file.cpp): its [site.NAME] and
// [between.A.B] sections, which name the sites, what each holds and the links between pairs.
#pragma once
#include "trainer/config/layer.h"  // trainer/README.md: the layers
#include <map>
#include <string>
#include <vector>

#include "parallel/sim/cluster.h"
#include "trainer/config/ini_scan.h"

namespace pipelane {

struct ClusterSiteSections {
  std::vector<IniSectionHeader> sites;    // [site.NAME], in file order (the sites' rank order)
  std::vector<IniSectionHeader> between;  // [between.A.B]
  std::map<std::string, std::vector<IniEntry>> entries;  // by full section name
};

// Replaces `cluster.sites` by the [site.NAME] sections and fills `cluster.site_links` from the
// [between.A.B] ones, looking links up in `links` (built-ins and the file's [link.NAME]).
// `sites_in_cluster_line` is the line of [cluster] sites or nodes (0: not given): both ways of
// naming sites at once is an error. SimInputError (one line: file, line, key) otherwise.
void apply_site_sections(const std::string& path, const ClusterSiteSections& sections,
                         const std::map<std::string, sim::LinkSpec>& links, int sites_in_cluster_line,
                         sim::Cluster& cluster);

// Shared with cluster_file.cpp: a [link.NAME] key onto a link; a count >= 1.
void apply_link_key(sim::LinkSpec& link, const std::string& where, const std::string& key, const std::string& value);
int to_count(const std::string& where, const std::string& key, const std::string& text);

}  // namespace pipelane
