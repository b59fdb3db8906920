// The page of `pipelane report`: one self-contained HTML file (inline CSS, inline SVG charts from
// trainer/report/report_svg.h, a few lines of inline script for the legends; nothing fetched).
// Element ids the tests look for: summary-table, chart-loss, chart-tokens, chart-mfu, and per run
// i: stages-i, lanes-i (when the run had lanes), timeline-i.
#pragma once
#include "trainer/report/layer.h"  // trainer/README.md: the layers
#include <string>
#include <vector>

#include "trainer/report/report_data.h"

namespace pipelane::report {

std::string render_report(const std::vector<RunData>& runs, const std::string& title);

}  // namespace pipelane::report
