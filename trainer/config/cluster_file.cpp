// load_cluster: the cluster file (see configs/clusters/README.md).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "trainer/config/ini_scan.h"
#include "trainer/config/cluster_sites.h"
#include "trainer/config/cluster_file.h"

namespace pipelane {

namespace {

using sim::DeviceSpec;
using sim::LinkSpec;

struct Located {
  std::string value;
  int line = 0;
};

double to_number(const std::string& where, const std::string& key, const std::string& text, double min, bool positive) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(value) || value < min || (positive && !(value > 0)))
    throw SimInputError(where + ": " + key + " = '" + text + "': expected a number " +
                        (positive ? "> 0" : ">= " + std::to_string(static_cast<int>(min))));
  return value;
}


// [device.NAME] keys, applied onto a built-in entry or a new one.
void apply_device_key(DeviceSpec& d, const std::string& where, const std::string& key, const std::string& value) {
  if (key == "description") d.description = value;
  else if (key == "peak_bf16_tflops") d.peak_bf16_flops = to_number(where, key, value, 0, true) * 1e12;
  else if (key == "peak_fp32_tflops") d.peak_fp32_flops = to_number(where, key, value, 0, true) * 1e12;
  else if (key == "memory_gb") d.memory_bytes = to_number(where, key, value, 0, true) * 1024.0 * 1024.0 * 1024.0;
  else if (key == "memory_bandwidth_gbs") d.memory_bandwidth = to_number(where, key, value, 0, true) * 1e9;
  else if (key == "price_per_hour") {
    d.price_per_hour = to_number(where, key, value, 0, false);
    d.price_source = "cluster file";
  } else if (key == "efficiency") {
    d.efficiency = to_number(where, key, value, 0, true);
    if (d.efficiency > 1) throw SimInputError(where + ": efficiency = " + value + ": expected a share of the peak in (0, 1]");
  } else if (key == "precision") {
    if (value == "bf16") d.precision = sim::Precision::Bf16;
    else if (value == "fp32") d.precision = sim::Precision::Fp32;
    else throw SimInputError(where + ": precision = '" + value + "': expected bf16 or fp32");
  } else {
    throw SimInputError(where + ": unknown key '" + key +
                        "' (expected description, peak_bf16_tflops, peak_fp32_tflops, memory_gb, "
                        "memory_bandwidth_gbs, price_per_hour, efficiency, precision)");
  }
}

}  // namespace

int to_count(const std::string& where, const std::string& key, const std::string& text) {
  const double v = to_number(where, key, text, 1, true);
  if (v != std::floor(v)) throw SimInputError(where + ": " + key + " = '" + text + "': expected a whole number >= 1");
  return static_cast<int>(v);
}

void apply_link_key(LinkSpec& l, const std::string& where, const std::string& key, const std::string& value) {
  if (key == "description") l.description = value;
  else if (key == "latency_us") l.latency_s = to_number(where, key, value, 0, false) * 1e-6;
  else if (key == "bandwidth_gbs") l.bandwidth = to_number(where, key, value, 0, true) * 1e9;
  else if (key == "connections") l.connections = to_count(where, key, value);
  else if (key == "capacity_gbs") l.capacity = to_number(where, key, value, 0, false) * 1e9;
  else if (key == "rendezvous_above_bytes") l.rendezvous_above_bytes = to_number(where, key, value, 0, false);
  else
    throw SimInputError(where + ": unknown key '" + key +
                        "' (expected description, latency_us, bandwidth_gbs, connections, capacity_gbs, "
                        "rendezvous_above_bytes)");
}

const sim::DeviceSpec& find_device(const ClusterFile& file, const std::string& name, const std::string& where) {
  for (const DeviceSpec& d : file.devices)
    if (d.name == name) return d;
  std::string known;
  for (const DeviceSpec& d : file.devices) {
    if (!known.empty()) known += ", ";
    known += d.name;
  }
  throw SimInputError(where + ": unknown device '" + name + "' (known: " + known +
                      (file.path.empty() ? std::string(")") : "; or define [device." + name + "] in " + file.path + ")"));
}

namespace {

std::string at_line(const std::string& path, int line) { return path + ":" + std::to_string(line); }

IniScan scan_cluster_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SimInputError(path + ": cannot open the cluster file");
  try {
    return scan_ini(in);
  } catch (const IniSyntaxError& e) {
    throw SimInputError(path + ":" + std::to_string(e.line()) + ": " + e.what());
  }
}

// A cluster file's entries sorted by section kind: [cluster]'s keys (each once, with its line),
// [device.NAME]'s and [link.NAME]'s by NAME, the sites' for cluster_sites.h.
struct ClusterSections {
  std::map<std::string, Located> cluster;
  int cluster_line = 0;
  std::map<std::string, std::vector<IniEntry>> devices, links;
  ClusterSiteSections sites;
};

void sort_section_headers(const std::string& path, const IniScan& scan, ClusterSections& out) {
  for (const IniSectionHeader& h : scan.sections) {
    if (h.name == "cluster") out.cluster_line = h.line;
    else if (h.name.rfind("device.", 0) == 0 && h.name.size() > 7) out.devices[h.name.substr(7)];
    else if (h.name.rfind("link.", 0) == 0 && h.name.size() > 5) out.links[h.name.substr(5)];
    else if (h.name.rfind("site.", 0) == 0 && h.name.size() > 5) out.sites.sites.push_back(h);
    else if (h.name.rfind("between.", 0) == 0 && h.name.size() > 8) out.sites.between.push_back(h);
    else
      throw SimInputError(at_line(path, h.line) + ": unknown section [" + h.name +
                          "] (expected [cluster], [device.NAME], [link.NAME], [site.NAME], [between.A.B])");
  }
  if (!out.cluster_line) throw SimInputError(path + ": no [cluster] section");
}

ClusterSections sort_sections(const std::string& path, const IniScan& scan) {
  ClusterSections out;
  sort_section_headers(path, scan, out);
  static const char* const kClusterKeys[] = {"name", "device", "nodes", "devices_per_node", "intra_node_link",
                                             "inter_node_link", "sites", "inter_site_link", "all_reduce"};
  for (const IniEntry& e : scan.entries) {
    if (e.section == "cluster") {
      if (std::find(std::begin(kClusterKeys), std::end(kClusterKeys), e.key) == std::end(kClusterKeys))
        throw SimInputError(at_line(path, e.line) + ": [cluster] unknown key '" + e.key +
                            "' (expected name, device, nodes, devices_per_node, intra_node_link, inter_node_link, "
                            "sites, inter_site_link, all_reduce)");
      if (out.cluster.count(e.key)) throw SimInputError(at_line(path, e.line) + ": [cluster] " + e.key + " given twice");
      out.cluster[e.key] = {e.value, e.line};
    } else if (e.section.rfind("device.", 0) == 0) {
      out.devices[e.section.substr(7)].push_back(e);
    } else if (e.section.rfind("site.", 0) == 0 || e.section.rfind("between.", 0) == 0) {
      out.sites.entries[e.section].push_back(e);
    } else {
      out.links[e.section.substr(5)].push_back(e);
    }
  }
  return out;
}

// The built-in devices with the file's [device.NAME] sections applied; a new one needs its peak,
// memory and bandwidth.
std::vector<DeviceSpec> device_table(const std::string& path, const ClusterSections& sections) {
  std::vector<DeviceSpec> table = sim::builtin_devices();
  for (const auto& [name, entries] : sections.devices) {
    auto it = std::find_if(table.begin(), table.end(), [&](const DeviceSpec& d) { return d.name == name; });
    const bool is_new = it == table.end();
    DeviceSpec d = is_new ? DeviceSpec{} : *it;
    d.name = name;
    if (is_new) d.price_source = "cluster file";
    for (const IniEntry& e : entries) apply_device_key(d, at_line(path, e.line) + ": [device." + name + "]", e.key, e.value);
    if (is_new && (!(d.peak_flops() > 0) || !(d.memory_bytes > 0) || !(d.memory_bandwidth > 0)))
      throw SimInputError(path + ": [device." + name + "] is not a built-in (" + sim::builtin_device_names() +
                          "): give its peak_" + (d.precision == sim::Precision::Bf16 ? "bf16" : "fp32") +
                          "_tflops, memory_gb and memory_bandwidth_gbs");
    if (is_new) table.push_back(d);
    else *it = d;
  }
  return table;
}

// The built-in links with the file's [link.NAME] sections applied, by name.
std::map<std::string, LinkSpec> link_table(const std::string& path, const ClusterSections& sections) {
  std::map<std::string, LinkSpec> table;
  for (const LinkSpec& l : sim::builtin_links()) table[l.name] = l;
  for (const auto& [name, entries] : sections.links) {
    const bool is_new = !table.count(name);
    LinkSpec l = is_new ? LinkSpec{} : table[name];
    l.name = name;
    for (const IniEntry& e : entries) apply_link_key(l, at_line(path, e.line) + ": [link." + name + "]", e.key, e.value);
    if (is_new && !(l.bandwidth > 0))
      throw SimInputError(path + ": [link." + name + "] is not a built-in (" + sim::builtin_link_names() +
                          "): give its bandwidth_gbs and latency_us");
    table[name] = l;
  }
  return table;
}

// [cluster]'s keys with where each was given, for the messages that name them.
class ClusterKeys {
 public:
  ClusterKeys(const std::string& path, const ClusterSections& sections, const std::map<std::string, LinkSpec>& links)
      : path_(path), keys_(sections.cluster), section_line_(sections.cluster_line), links_(links) {}

  bool has(const char* key) const { return keys_.count(key) > 0; }
  std::string value(const char* key) const { return has(key) ? keys_.at(key).value : std::string(); }
  int line(const char* key) const { return has(key) ? keys_.at(key).line : 0; }
  // "FILE:LINE: [cluster] ", at the key's line (the section's when the key is absent).
  std::string where(const char* key) const { return at_line(path_, has(key) ? line(key) : section_line_) + ": [cluster] "; }
  std::string section() const { return at_line(path_, section_line_); }

  // The link a key names; nullopt when the key is absent.
  std::optional<LinkSpec> link(const char* key) const {
    if (!has(key)) return std::nullopt;
    const auto found = links_.find(value(key));
    if (found != links_.end()) return found->second;
    std::string known;
    for (const auto& [n, l] : links_) {
      if (!known.empty()) known += ", ";
      known += n;
    }
    throw SimInputError(at_line(path_, line(key)) + ": [cluster] " + key + " = '" + value(key) +
                        "': unknown link (known: " + known + "; or define [link." + value(key) + "])");
  }

 private:
  const std::string& path_;
  const std::map<std::string, Located>& keys_;
  int section_line_;
  const std::map<std::string, LinkSpec>& links_;
};

// [cluster] sites = name:nodes, ..., or nodes = N (one site).
std::vector<sim::Site> cluster_sites(const ClusterKeys& keys) {
  if (keys.has("sites") && keys.has("nodes"))
    throw SimInputError(keys.where("sites") + "give either nodes or sites (name:nodes, ...), not both");
  std::vector<sim::Site> sites;
  if (!keys.has("sites")) {
    sites.push_back({"site", keys.has("nodes") ? to_count(keys.where("nodes") + "nodes", "nodes", keys.value("nodes")) : 1, {}});
    return sites;
  }
  std::stringstream list(keys.value("sites"));
  for (std::string item; std::getline(list, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    const auto colon = item.find(':');
    if (colon == std::string::npos || colon == 0)
      throw SimInputError(keys.where("sites") + "sites = '" + keys.value("sites") + "': expected name:nodes, name:nodes, ...");
    sites.push_back({item.substr(0, colon),
                     to_count(keys.where("sites") + "sites", "nodes of " + item.substr(0, colon), item.substr(colon + 1)),
                     {}});
  }
  return sites;
}

// The cluster's device: [cluster] device from the table; the cpu's peak measured here unless given.
DeviceSpec cluster_device(const ClusterFile& file, const ClusterKeys& keys) {
  if (!keys.has("device")) throw SimInputError(keys.section() + ": [cluster] has no device (the type of every device)");
  DeviceSpec device = find_device(file, keys.value("device"), keys.where("device") + "device");
  if (device.name == "cpu" && !(device.peak_fp32_flops > 0)) {
    const DeviceSpec measured = sim::measured_cpu_device();
    device.peak_fp32_flops = measured.peak_fp32_flops;
    device.description = measured.description;
  }
  return device;
}

// The links inside a node, between nodes and between sites; a cluster that needs one must name it.
void set_cluster_links(const ClusterKeys& keys, sim::Cluster& c) {
  const std::optional<LinkSpec> intra = keys.link("intra_node_link");
  if (!intra && c.devices_per_node > 1)
    throw SimInputError(keys.where("devices_per_node") + "devices_per_node = " + std::to_string(c.devices_per_node) +
                        " needs intra_node_link (the link between devices of a node; built-ins: " +
                        sim::builtin_link_names() + ")");
  c.intra_node = intra ? *intra : *sim::builtin_link("shm");
  c.inter_node = keys.link("inter_node_link");
  c.inter_site = keys.link("inter_site_link");
}

void check_links_between_nodes_and_sites(const ClusterKeys& keys, const sim::Cluster& c) {
  const bool multi_node_site = std::any_of(c.sites.begin(), c.sites.end(), [](const sim::Site& s) { return s.nodes > 1; });
  if (multi_node_site && !c.inter_node)
    throw SimInputError(keys.section() + ": [cluster] has more than one node but no inter_node_link (built-ins: " +
                        sim::builtin_link_names() + ")");
  if (c.sites.size() > 1 && !c.inter_site && c.site_links.size() < c.sites.size() * (c.sites.size() - 1) / 2)
    throw SimInputError(keys.section() + ": [cluster] has " + std::to_string(c.sites.size()) +
                        " sites but no inter_site_link (e.g. wan) and not every pair has a [between.A.B]");
}

}  // namespace

ClusterFile load_cluster(const std::string& path) {
  const ClusterSections sections = sort_sections(path, scan_cluster_file(path));
  ClusterFile file;
  file.path = path;
  file.devices = device_table(path, sections);
  const std::map<std::string, LinkSpec> links = link_table(path, sections);
  const ClusterKeys keys(path, sections, links);

  sim::Cluster& c = file.cluster;
  c.name = keys.has("name") ? keys.value("name") : path;
  c.device = cluster_device(file, keys);
  if (keys.has("devices_per_node"))
    c.devices_per_node = to_count(keys.where("devices_per_node") + "devices_per_node", "devices_per_node",
                                  keys.value("devices_per_node"));
  c.sites = cluster_sites(keys);
  set_cluster_links(keys, c);
  apply_site_sections(path, sections.sites, links, keys.has("sites") ? keys.line("sites") : keys.line("nodes"), c);
  check_links_between_nodes_and_sites(keys, c);
  if (keys.has("all_reduce")) {
    try {
      file.all_reduce = sim::parse_all_reduce_algorithm(keys.value("all_reduce"));
    } catch (const std::invalid_argument& e) {
      throw SimInputError(keys.where("all_reduce") + e.what());
    }
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw SimInputError(path + ": " + e.what());
  }
  return file;
}

ClusterFile this_machine_cluster(int devices) {
  ClusterFile file;
  file.devices = sim::builtin_devices();
  sim::Cluster& c = file.cluster;
  c.name = "this machine";
  c.device = sim::measured_cpu_device();
  for (DeviceSpec& d : file.devices)
    if (d.name == "cpu") d = c.device;
  c.devices_per_node = std::max(1, devices);
  c.sites.push_back({"site", 1, {}});
  c.intra_node = *sim::builtin_link("shm");
  return file;
}

}  // namespace pipelane
