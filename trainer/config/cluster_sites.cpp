#include "trainer/config/cluster_sites.h"

#include <algorithm>
#include <sstream>

#include "trainer/config/cluster_file.h"

namespace pipelane {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// `ranks = N` (a count) or `ranks = FIRST-LAST` (which must follow the previous site's).
int parse_ranks(const std::string& where, const std::string& text, int first_expected) {
  const auto dash = text.find('-');
  if (dash == std::string::npos) return to_count(where, "ranks", text);
  const std::string first_text = text.substr(0, dash), last_text = text.substr(dash + 1);
  int first = -1, last = -1;
  try {
    std::size_t a = 0, b = 0;
    first = std::stoi(first_text, &a);
    last = std::stoi(last_text, &b);
    if (a != first_text.size() || b != last_text.size()) first = -1;
  } catch (const std::exception&) {
    first = -1;
  }
  if (first < 0 || last < first)
    throw SimInputError(where + ": ranks = '" + text + "': expected a count or FIRST-LAST");
  if (first != first_expected)
    throw SimInputError(where + ": ranks = '" + text + "': expected ranks from " + std::to_string(first_expected) +
                        " (sites hold consecutive ranks, in the order of their sections)");
  return last - first + 1;
}

}  // namespace

void apply_site_sections(const std::string& path, const ClusterSiteSections& sections,
                         const std::map<std::string, sim::LinkSpec>& links, int sites_in_cluster_line,
                         sim::Cluster& c) {
  const auto at = [&](int line) { return path + ":" + std::to_string(line); };
  const auto entries = [&](const std::string& section) {
    const auto it = sections.entries.find(section);
    return it == sections.entries.end() ? std::vector<IniEntry>{} : it->second;
  };
  if (!sections.sites.empty()) {
    if (sites_in_cluster_line)
      throw SimInputError(at(sites_in_cluster_line) + ": [cluster] sites/nodes and [site.NAME] sections both name "
                          "the sites: give one or the other");
    c.sites.clear();
    int next_rank = 0;
    for (const IniSectionHeader& h : sections.sites) {
      sim::Site site;
      site.name = h.name.substr(5);
      if (site.name.find('.') != std::string::npos)
        throw SimInputError(at(h.line) + ": [" + h.name + "]: a site's name cannot contain '.'");
      int nodes = 0, ranks = 0, nodes_line = 0;
      for (const IniEntry& e : entries(h.name)) {
        const std::string where = at(e.line) + ": [" + h.name + "] " + e.key;
        if (e.key == "nodes") {
          nodes = to_count(where, "nodes", e.value);
          nodes_line = e.line;
        } else if (e.key == "ranks") {
          ranks = parse_ranks(where, e.value, next_rank);
          nodes_line = e.line;
        } else if (e.key == "hosts") {
          site.hosts = split_list(e.value);
          if (site.hosts.empty()) throw SimInputError(where + ": expected host names, comma-separated");
        } else {
          throw SimInputError(at(e.line) + ": [" + h.name + "] unknown key '" + e.key +
                              "' (expected nodes, ranks or hosts)");
        }
      }
      const std::string where = at(nodes_line ? nodes_line : h.line) + ": [" + h.name + "]";
      if (nodes && ranks) throw SimInputError(where + ": give nodes or ranks, not both");
      if (ranks) {
        if (ranks % c.devices_per_node != 0)
          throw SimInputError(where + " ranks: " + std::to_string(ranks) + " ranks are not whole nodes of " +
                              std::to_string(c.devices_per_node) + " devices ([cluster] devices_per_node)");
        nodes = ranks / c.devices_per_node;
      }
      if (!nodes) nodes = static_cast<int>(site.hosts.size());
      if (!nodes) throw SimInputError(where + ": give nodes, ranks or hosts");
      if (!site.hosts.empty() && static_cast<int>(site.hosts.size()) != nodes)
        throw SimInputError(where + ": " + std::to_string(site.hosts.size()) + " hosts for " + std::to_string(nodes) +
                            " nodes");
      site.nodes = nodes;
      next_rank += nodes * c.devices_per_node;
      c.sites.push_back(site);
    }
  }
  for (const IniSectionHeader& h : sections.between) {
    const std::string pair = h.name.substr(8);
    const auto dot = pair.find('.');
    const auto index = [&](const std::string& name) {
      for (std::size_t i = 0; i < c.sites.size(); ++i)
        if (c.sites[i].name == name) return static_cast<int>(i);
      return -1;
    };
    const int a = dot == std::string::npos ? -1 : index(pair.substr(0, dot));
    const int b = dot == std::string::npos ? -1 : index(pair.substr(dot + 1));
    if (a < 0 || b < 0 || a == b)
      throw SimInputError(at(h.line) + ": [" + h.name + "]: expected [between.A.B] with A and B two different sites");
    sim::LinkSpec link;
    bool named = false;
    const std::vector<IniEntry> keys = entries(h.name);
    for (const IniEntry& e : keys) {
      if (e.key != "link") continue;
      const auto found = links.find(e.value);
      if (found == links.end())
        throw SimInputError(at(e.line) + ": [" + h.name + "] link = '" + e.value + "': unknown link (define [link." +
                            e.value + "] or use a built-in: " + sim::builtin_link_names() + ")");
      link = found->second;
      named = true;
    }
    if (!named) link.name = pair;
    for (const IniEntry& e : keys)
      if (e.key != "link") apply_link_key(link, at(e.line) + ": [" + h.name + "]", e.key, e.value);
    if (!(link.bandwidth > 0))
      throw SimInputError(at(h.line) + ": [" + h.name + "]: give link = NAME or its bandwidth_gbs and latency_us");
    if (!c.site_links.emplace(std::make_pair(std::min(a, b), std::max(a, b)), link).second)
      throw SimInputError(at(h.line) + ": [" + h.name + "]: sites " + c.sites[a].name + " and " + c.sites[b].name +
                          " already have a link");
  }
}

}  // namespace pipelane
