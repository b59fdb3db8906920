// The simulator's input files, read into parallel/sim's typed data (see configs/clusters/README.md):
//   a cluster file (INI: [cluster], [device.NAME], [link.NAME]),
//   a run directory as a profile (its config.ini, summary.json and, when there, trace.json),
//   lane step-time distributions (JSON lines: `pipelane lane-bench NAME --json`, or stated).
// Every error is one line naming the file (and line) and what was expected.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "parallel/sim/cluster.h"
#include "parallel/sim/job_costs.h"
#include "parallel/sim/lane_sim.h"
#include "trainer/train_options.h"

namespace pipelane {

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

// A run directory's profile and its resolved configuration (config.ini).
struct RunProfile {
  sim::MeasuredProfile profile;
  TrainOptions options;
  std::vector<sim::LaneModel> lanes;  // step-time distributions of its lanes, from trace.json
  bool had_trace = false;
};
RunProfile load_run_profile(const std::string& run_dir);

// Lane models from JSON lines. Each line: "lane", and the step time as "step_ms_median" (plus
// "step_ms_deciles": 11 values from the fastest to the slowest step, when known); optional
// "units_per_step" (else "units"/"steps", else 1), "work_unit", "units_per_s" (the dedicated
// throughput `lane-bench` measured), "dedicated_device" (priced from the cluster's table) or
// "dedicated_price_per_hour", "memory_mb", "requests_per_s" (a service: BubbleTea's prefill),
// "source". Dedicated prices are looked up in `devices`.
std::vector<sim::LaneModel> load_lane_models(const std::string& path, const ClusterFile& cluster);

// Parses a command's own options (`own`, with "help") into `vm` and returns the arguments it did not
// recognise: `pipelane train`'s (--config FILE, --section.key=value). nullopt when --help was
// given (the help is printed).
std::optional<std::vector<std::string>> parse_command_options(int argc, char** argv,
                                                              const boost::program_options::options_description& own,
                                                              boost::program_options::variables_map& vm);
// Whether those arguments name a --config.
bool has_config_argument(const std::vector<std::string>& args);

// `pipelane train`'s options from the arguments a command did not recognise (--config FILE and
// --section.key=value); `fallback_config` is read when no --config is among them ("" for none).
// SimInputError (one line) otherwise.
TrainOptions train_options_from_args(const std::vector<std::string>& args, const std::string& fallback_config);

// The job a training configuration describes, with dp from [parallel] dp (0: the cluster's
// devices / (tp x pp)). SimInputError when the batch does not split into microbatches.
sim::JobSpec job_from_options(const TrainOptions& options, int cluster_devices);

}  // namespace pipelane
