// A cluster file (INI: [cluster], [device.NAME], [link.NAME]; see configs/clusters/README.md) read
// into parallel/sim's typed data: the simulator's machine, and the sites a WAN training run spans.
// Every error is one line naming the file (and line) and what was expected.
#pragma once
#include "trainer/config/layer.h"  // trainer/README.md: the layers
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/sim/cluster.h"

namespace pipelane {

// An input file of the simulator's (a cluster file, a run profile, a lane model) that does not read.
class SimInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ClusterFile {
  sim::Cluster cluster;
  std::vector<sim::DeviceSpec> devices;  // the built-ins with the file's overrides, and its own
  sim::AllReduceAlgorithm all_reduce = sim::AllReduceAlgorithm::Auto;
  std::string path;
};

ClusterFile load_cluster(const std::string& path);
// "This machine": `devices` cores as devices (the cpu entry, peak measured), one node, shared memory.
ClusterFile this_machine_cluster(int devices);
// The device named `name` in a cluster file's table; SimInputError naming `where` otherwise.
const sim::DeviceSpec& find_device(const ClusterFile& file, const std::string& name, const std::string& where);

}  // namespace pipelane
