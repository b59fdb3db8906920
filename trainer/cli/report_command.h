// `pipelane report RUN_DIR [RUN_DIR ...]`: one self-contained HTML page of one or more runs
// (trainer/report/report_html.h), written atomically; prints its path.
#pragma once
#include "trainer/cli/layer.h"  // trainer/README.md: the layers
#include <string>
#include <vector>

namespace pipelane {

int report_command(int argc, char** argv);

// The page for `run_dirs`, written to `output` (a temporary name, then renamed). std::runtime_error
// with one line on a run directory that cannot be read or an output that cannot be written.
void write_run_report(const std::vector<std::string>& run_dirs, const std::string& output,
                      const std::string& title, int traced_step = -1);

}  // namespace pipelane
