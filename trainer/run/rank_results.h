// What every rank's share of the results is on rank 0 once training ends: its lanes' summary and
// its trace events, gathered as typed values over the control plane (parallel/control_plane.h).
// Each travels encoded field by field in a fixed order, not as JSON text: both ends are the same
// build, so nothing is negotiated, and a message that does not decode is a bug, reported as
// std::runtime_error naming the rank. (A lane's own report, Lane::report(), is a JSON document
// by nature and travels as its text inside the lane's record.)
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <optional>
#include <string>
#include <vector>

#include "lanes/lane_summary.h"
#include "parallel/control_plane.h"
#include "trainer/run/chrome_trace.h"

namespace pipelane {

// Collective. Rank 0: every rank's summary in world-rank order (none where lanes were off);
// other ranks: empty.
std::vector<std::optional<StageLaneSummary>> gather_lane_summaries(ControlPlane& world,
                                                                   const std::optional<StageLaneSummary>& mine);

// Collective. Rank 0: every rank's events, rank 0's first; other ranks: empty.
std::vector<TraceEvent> gather_trace_events(ControlPlane& world, const std::vector<TraceEvent>& mine);

// The encodings themselves, for the tests.
std::string encode_lane_summary(const std::optional<StageLaneSummary>& summary);
std::optional<StageLaneSummary> decode_lane_summary(const std::string& bytes);
std::string encode_trace_events(const std::vector<TraceEvent>& events);
std::vector<TraceEvent> decode_trace_events(const std::string& bytes);

}  // namespace pipelane
