#include "trainer/cli/report_command.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include <boost/program_options.hpp>

#include "trainer/cli/command_options.h"

#include "trainer/report/report_data.h"
#include "trainer/report/report_html.h"

namespace pipelane {

namespace fs = std::filesystem;
namespace po = boost::program_options;

void write_run_report(const std::vector<std::string>& run_dirs, const std::string& output,
                      const std::string& title, int traced_step) {
  std::vector<report::RunData> runs;
  for (const std::string& dir : run_dirs) runs.push_back(report::load_run(dir, traced_step));
  const std::string page = report::render_report(runs, title);
  const fs::path out(output);
  std::error_code ec;
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), ec);
  const std::string tmp = output + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    file << page;
    if (!file) throw std::runtime_error(output + ": cannot write");
  }
  fs::rename(tmp, out, ec);
  if (ec) throw std::runtime_error(output + ": cannot write (" + ec.message() + ")");
}

int report_command(int argc, char** argv) {
  std::vector<std::string> dirs;
  std::string output, title = "pipelane report";
  int step = 0;
  SubcommandOptions options(
      "report", "RUN_DIR [RUN_DIR ...] [options]",
      "Writes one self-contained HTML page (inline SVG, nothing fetched) of one or more run\n"
      "directories: loss and validation curves (runs overlaid), tokens/s and MFU over steps, each\n"
      "pipeline stage's busy time and waits by kind, the lanes' harvest and overrun per stage and\n"
      "per lane, and a timeline of one traced iteration per rank with the lane steps in the waits.\n"
      "It reads metrics.jsonl, summary.json and trace.json; a run without some of them (still\n"
      "running, or failed) shows what the others give.");
  options.add_options()
      ("output,o", po::value(&output), "the HTML file (default: RUN_DIR/report.html for one run, "
                                        "report.html here for several)")
      ("title", value_with_default(&title), "the page's title")
      ("step", value_with_default(&step),
       "which traced step the timeline shows, 1 = the first traced; 0: the last traced one");
  options.add_arguments("run", po::value(&dirs)->composing(), -1);
  if (const auto code = options.parse(argc, argv, [&] {
        if (dirs.empty()) throw OptionError("give at least one run directory");
        if (step < 0) throw OptionError("--step must be >= 0");
      }))
    return *code;
  if (output.empty()) output = dirs.size() == 1 ? (fs::path(dirs.front()) / "report.html").string() : "report.html";
  try {
    write_run_report(dirs, output, title, step - 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipelane report: %s\n", e.what());
    return 1;
  }
  std::printf("pipelane report: %s\n", output.c_str());
  return 0;
}

}  // namespace pipelane
