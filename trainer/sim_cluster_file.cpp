// load_cluster: the cluster file (see configs/clusters/README.md).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "trainer/ini_scan.h"
#include "trainer/sim_cluster_sites.h"
#include "trainer/sim_inputs.h"

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

ClusterFile load_cluster(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SimInputError(path + ": cannot open the cluster file");
  IniScan scan;
  try {
    scan = scan_ini(in);
  } catch (const IniSyntaxError& e) {
    throw SimInputError(path + ":" + std::to_string(e.line()) + ": " + e.what());
  }
  const auto at = [&](int line) { return path + ":" + std::to_string(line); };
  std::map<std::string, Located> cluster;
  std::map<std::string, std::vector<IniEntry>> devices, links;
  ClusterSiteSections site_sections;
  int cluster_line = 0;
  for (const IniSectionHeader& h : scan.sections) {
    if (h.name == "cluster") cluster_line = h.line;
    else if (h.name.rfind("device.", 0) == 0 && h.name.size() > 7) devices[h.name.substr(7)];
    else if (h.name.rfind("link.", 0) == 0 && h.name.size() > 5) links[h.name.substr(5)];
    else if (h.name.rfind("site.", 0) == 0 && h.name.size() > 5) site_sections.sites.push_back(h);
    else if (h.name.rfind("between.", 0) == 0 && h.name.size() > 8) site_sections.between.push_back(h);
    else
      throw SimInputError(at(h.line) + ": unknown section [" + h.name +
                          "] (expected [cluster], [device.NAME], [link.NAME], [site.NAME], [between.A.B])");
  }
  if (!cluster_line) throw SimInputError(path + ": no [cluster] section");
  static const char* const kClusterKeys[] = {"name", "device", "nodes", "devices_per_node", "intra_node_link",
                                             "inter_node_link", "sites", "inter_site_link", "all_reduce"};
  for (const IniEntry& e : scan.entries) {
    if (e.section == "cluster") {
      if (std::find(std::begin(kClusterKeys), std::end(kClusterKeys), e.key) == std::end(kClusterKeys))
        throw SimInputError(at(e.line) + ": [cluster] unknown key '" + e.key +
                            "' (expected name, device, nodes, devices_per_node, intra_node_link, inter_node_link, "
                            "sites, inter_site_link, all_reduce)");
      if (cluster.count(e.key)) throw SimInputError(at(e.line) + ": [cluster] " + e.key + " given twice");
      cluster[e.key] = {e.value, e.line};
    } else if (e.section.rfind("device.", 0) == 0) {
      devices[e.section.substr(7)].push_back(e);
    } else if (e.section.rfind("site.", 0) == 0 || e.section.rfind("between.", 0) == 0) {
      site_sections.entries[e.section].push_back(e);
    } else {
      links[e.section.substr(5)].push_back(e);
    }
  }

  ClusterFile file;
  file.path = path;
  file.devices = sim::builtin_devices();
  for (const auto& [name, entries] : devices) {
    auto it = std::find_if(file.devices.begin(), file.devices.end(), [&](const DeviceSpec& d) { return d.name == name; });
    const bool is_new = it == file.devices.end();
    DeviceSpec d = is_new ? DeviceSpec{} : *it;
    d.name = name;
    if (is_new) d.price_source = "cluster file";
    for (const IniEntry& e : entries) apply_device_key(d, at(e.line) + ": [device." + name + "]", e.key, e.value);
    if (is_new && (!(d.peak_flops() > 0) || !(d.memory_bytes > 0) || !(d.memory_bandwidth > 0)))
      throw SimInputError(path + ": [device." + name + "] is not a built-in (" + sim::builtin_device_names() +
                          "): give its peak_" + (d.precision == sim::Precision::Bf16 ? "bf16" : "fp32") +
                          "_tflops, memory_gb and memory_bandwidth_gbs");
    if (is_new) file.devices.push_back(d);
    else *it = d;
  }
  std::map<std::string, LinkSpec> link_table;
  for (const LinkSpec& l : sim::builtin_links()) link_table[l.name] = l;
  for (const auto& [name, entries] : links) {
    const bool is_new = !link_table.count(name);
    LinkSpec l = is_new ? LinkSpec{} : link_table[name];
    l.name = name;
    for (const IniEntry& e : entries) apply_link_key(l, at(e.line) + ": [link." + name + "]", e.key, e.value);
    if (is_new && !(l.bandwidth > 0))
      throw SimInputError(path + ": [link." + name + "] is not a built-in (" + sim::builtin_link_names() +
                          "): give its bandwidth_gbs and latency_us");
    link_table[name] = l;
  }
  const auto link_named = [&](const char* key) -> std::optional<LinkSpec> {
    const auto it = cluster.find(key);
    if (it == cluster.end()) return std::nullopt;
    const auto found = link_table.find(it->second.value);
    if (found == link_table.end()) {
      std::string known;
      for (const auto& [n, l] : link_table) {
        if (!known.empty()) known += ", ";
        known += n;
      }
      throw SimInputError(at(it->second.line) + ": [cluster] " + key + " = '" + it->second.value +
                          "': unknown link (known: " + known + "; or define [link." + it->second.value + "])");
    }
    return found->second;
  };
  const auto value = [&](const char* key) { return cluster.count(key) ? cluster[key].value : std::string(); };
  const auto where = [&](const char* key) { return at(cluster.count(key) ? cluster[key].line : cluster_line) + ": [cluster] "; };

  sim::Cluster& c = file.cluster;
  c.name = cluster.count("name") ? value("name") : path;
  if (!cluster.count("device")) throw SimInputError(at(cluster_line) + ": [cluster] has no device (the type of every device)");
  c.device = find_device(file, value("device"), where("device") + "device");
  if (c.device.name == "cpu" && !(c.device.peak_fp32_flops > 0)) {
    const DeviceSpec measured = sim::measured_cpu_device();
    c.device.peak_fp32_flops = measured.peak_fp32_flops;
    c.device.description = measured.description;
  }
  if (cluster.count("devices_per_node"))
    c.devices_per_node = to_count(where("devices_per_node") + "devices_per_node", "devices_per_node", value("devices_per_node"));
  if (cluster.count("sites") && cluster.count("nodes"))
    throw SimInputError(where("sites") + "give either nodes or sites (name:nodes, ...), not both");
  if (cluster.count("sites")) {
    std::stringstream list(value("sites"));
    for (std::string item; std::getline(list, item, ',');) {
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      const auto colon = item.find(':');
      if (colon == std::string::npos || colon == 0)
        throw SimInputError(where("sites") + "sites = '" + value("sites") + "': expected name:nodes, name:nodes, ...");
      c.sites.push_back({item.substr(0, colon), to_count(where("sites") + "sites", "nodes of " + item.substr(0, colon),
                                                         item.substr(colon + 1)),
                         {}});
    }
  } else {
    c.sites.push_back({"site", cluster.count("nodes") ? to_count(where("nodes") + "nodes", "nodes", value("nodes")) : 1, {}});
  }
  const std::optional<LinkSpec> intra = link_named("intra_node_link");
  if (!intra && c.devices_per_node > 1)
    throw SimInputError(where("devices_per_node") + "devices_per_node = " + std::to_string(c.devices_per_node) +
                        " needs intra_node_link (the link between devices of a node; built-ins: " +
                        sim::builtin_link_names() + ")");
  c.intra_node = intra ? *intra : *sim::builtin_link("shm");
  c.inter_node = link_named("inter_node_link");
  c.inter_site = link_named("inter_site_link");
  const int sites_line = cluster.count("sites") ? cluster["sites"].line : cluster.count("nodes") ? cluster["nodes"].line : 0;
  apply_site_sections(path, site_sections, link_table, sites_line, c);
  const bool multi_node_site = std::any_of(c.sites.begin(), c.sites.end(), [](const sim::Site& s) { return s.nodes > 1; });
  if (multi_node_site && !c.inter_node)
    throw SimInputError(at(cluster_line) + ": [cluster] has more than one node but no inter_node_link (built-ins: " +
                        sim::builtin_link_names() + ")");
  if (c.sites.size() > 1 && !c.inter_site &&
      c.site_links.size() < c.sites.size() * (c.sites.size() - 1) / 2)
    throw SimInputError(at(cluster_line) + ": [cluster] has " + std::to_string(c.sites.size()) +
                        " sites but no inter_site_link (e.g. wan) and not every pair has a [between.A.B]");
  if (cluster.count("all_reduce")) {
    try {
      file.all_reduce = sim::parse_all_reduce_algorithm(value("all_reduce"));
    } catch (const std::invalid_argument& e) {
      throw SimInputError(where("all_reduce") + e.what());
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
