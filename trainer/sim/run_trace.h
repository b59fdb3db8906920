// A run's trace.json as a profile for `pipelane simulate`: the mean time of every stage's
// instructions per chunk and pass, what a waiting rank takes to go on, and its lanes' step times.
#pragma once
#include "trainer/sim/layer.h"  // trainer/README.md: the layers
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parallel/sim/job_costs.h"

namespace pipelane {

// A run's traced instructions after its first step: per stage, chunk and pass their means, and
// every step as it ran (what an instruction took without its wait: GradSync's own work, a send's
// posting, a compute pass); the wake-up times of its waits; its lanes' steps by lane name, in the
// order they ran.
struct TraceDigest {
  std::optional<sim::OpTable> ops;
  std::vector<double> wake_samples;  // empty: no wait to measure
  std::map<std::string, std::vector<double>> lane_step_s;
  std::map<std::string, double> lane_units;
};

// SimInputError (from sim_inputs.h) when the trace is not a Chrome trace or misses a stage's passes.
TraceDigest digest_run_trace(const nlohmann::json& trace, const sim::JobSpec& job, const std::string& path);

}  // namespace pipelane
