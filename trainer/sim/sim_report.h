// What `pipelane simulate` writes: summary.json with the fields a real run's summary.json has (the
// same names and definitions, so tools read both; "simulated" says which it is) plus what only a
// simulation knows (idle by wait kind, memory per stage, the cost sources), and trace.json for
// Perfetto (one track per stage of one replica, one per lane of each stage).
#pragma once
#include "trainer/sim/layer.h"  // trainer/README.md: the layers
#include <string>
#include <vector>

#include "parallel/sim/simulation.h"
#include "trainer/run/chrome_trace.h"
#include "trainer/run/run_summary.h"

namespace pipelane {

struct SimulationSources {
  std::string cluster;   // file or "this machine"
  std::string compute;   // where the instruction costs come from
  std::string lanes;     // where the lanes' step times come from ("" without lanes)
};

// Its summary.json, with `simulation` and `simulated_lanes` set (simulation->wall_s is the caller's).
RunSummary simulation_summary(const sim::SimulationSetup& setup, const sim::SimulationOutcome& outcome,
                              const SimulationSources& sources);
std::vector<TraceEvent> simulation_trace_events(const sim::SimulationSetup& setup, const sim::SimulationOutcome& outcome);

}  // namespace pipelane
