// What `pipelane simulate` writes: summary.json with the fields a real run's summary.json has (the
// same names and definitions, so tools read both; "simulated" says which it is) plus what only a
// simulation knows (idle by wait kind, memory per stage, the cost sources), and trace.json for
// Perfetto (one track per stage of one replica, one per lane of each stage).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "parallel/sim/simulation.h"

namespace pipelane {

struct SimulationSources {
  std::string cluster;   // file or "this machine"
  std::string compute;   // where the instruction costs come from
  std::string lanes;     // where the lanes' step times come from ("" without lanes)
};

nlohmann::json simulation_summary(const sim::SimulationSetup& setup, const sim::SimulationOutcome& outcome,
                                  const SimulationSources& sources);
nlohmann::json simulation_trace_events(const sim::SimulationSetup& setup, const sim::SimulationOutcome& outcome);

}  // namespace pipelane
