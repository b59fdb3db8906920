// `pipelane`: dispatches to a subcommand. Each subcommand parses its own options and prints its
// own --help, through trainer/cli/command_options.h (`train` through trainer/config's key table).
#include <cstdio>
#include <cstring>
#include <string>

#include "lanes/isolation/lane_worker.h"
#include "trainer/cli/devices_command.h"
#include "trainer/cli/eval_command.h"
#include "trainer/cli/export_command.h"
#include "trainer/cli/generate_command.h"
#include "trainer/cli/import_command.h"
#include "trainer/cli/lane_bench_command.h"
#include "trainer/cli/memory_command.h"
#include "trainer/cli/prepare_data_command.h"
#include "trainer/cli/report_command.h"
#include "trainer/cli/schedule_command.h"
#include "trainer/cli/plan_command.h"
#include "trainer/cli/simulate_command.h"
#include "trainer/cli/sites_command.h"
#include "trainer/cli/train_command.h"

namespace {

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: pipelane <command> [options]\n\n"
               "commands:\n"
               "  train          train a GPT from a config file (pipelane train --help)\n"
               "  prepare-data   tokenize text into an HDF5 token file (pipelane prepare-data --help)\n"
               "  schedule       print a pipeline schedule and its bubbles (pipelane schedule --help)\n"
               "  simulate       replay a job's schedules under a cost model on a cluster (pipelane simulate --help)\n"
               "  memory         predict each rank's training memory for a config and grid (pipelane memory --help)\n"
               "  plan           search pp/tp/dp/schedule for a model on a cluster, with lane value (pipelane plan --help)\n"
               "  generate       sample text from a checkpoint or an exported model (pipelane generate --help)\n"
               "  eval           loss and perplexity of a model on a token or text file (pipelane eval --help)\n"
               "  sites          a cluster's sites, their links, where a config's stages go (pipelane sites --help)\n"
               "  export         a checkpoint as a Hugging Face GPT-2 model (pipelane export --help)\n"
               "  import         a Hugging Face GPT-2 model as a checkpoint (pipelane import --help)\n"
               "  report         an HTML page of one or more run directories (pipelane report --help)\n"
               "  lane-bench     one lane alone on one core: its dedicated throughput (pipelane lane-bench --help)\n"
               "  devices        list the compute devices this build can use (pipelane devices --help)\n"
               "  --version      print the version\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "train") return pipelane::train_command(argc - 1, argv + 1);
  if (cmd == "prepare-data") return pipelane::prepare_data_command(argc - 1, argv + 1);
  if (cmd == "schedule") return pipelane::schedule_command(argc - 1, argv + 1);
  if (cmd == "simulate") return pipelane::simulate_command(argc - 1, argv + 1);
  if (cmd == "memory") return pipelane::memory_command(argc - 1, argv + 1);
  if (cmd == "plan") return pipelane::plan_command(argc - 1, argv + 1);
  if (cmd == "sites") return pipelane::sites_command(argc - 1, argv + 1);
  if (cmd == "export") return pipelane::export_command(argc - 1, argv + 1);
  if (cmd == "generate") return pipelane::generate_command(argc - 1, argv + 1);
  if (cmd == "eval") return pipelane::eval_command(argc - 1, argv + 1);
  if (cmd == "import") return pipelane::import_command(argc - 1, argv + 1);
  if (cmd == "report") return pipelane::report_command(argc - 1, argv + 1);
  if (cmd == "devices") return pipelane::devices_command(argc - 1, argv + 1);
  if (cmd == "lane-bench") return pipelane::lane_bench_command(argc - 1, argv + 1);
  // Not listed in the usage: started by `train` for each isolated lane ([lanes] isolation).
  if (cmd == "lane-worker") return pipelane::run_lane_worker(argc - 1, argv + 1);
  if (cmd == "--version") {
    std::printf("pipelane 0.1.0\n");
    return 0;
  }
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    print_usage(stdout);
    return 0;
  }
  std::fprintf(stderr, "pipelane: unknown command '%s'\n", cmd.c_str());
  print_usage(stderr);
  return 2;
}
