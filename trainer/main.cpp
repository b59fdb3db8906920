// `pipelane`: dispatches to a subcommand. Each subcommand parses its own options and prints
// its own --help.
#include <cstdio>
#include <cstring>
#include <string>

#include "trainer/eval_command.h"
#include "trainer/export_command.h"
#include "trainer/generate_command.h"
#include "trainer/import_command.h"
#include "trainer/lane_bench_command.h"
#include "trainer/prepare_data_command.h"
#include "trainer/report_command.h"
#include "trainer/schedule_command.h"
#include "trainer/train_command.h"
#ifdef PIPELANE_HAVE_CUDA
#include "runtime/cuda_probe.h"
#endif

namespace {

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: pipelane <command> [options]\n\n"
               "commands:\n"
               "  train          train a GPT from a config file (pipelane train --help)\n"
               "  prepare-data   tokenize text into an HDF5 token file (pipelane prepare-data --help)\n"
               "  schedule       print a pipeline schedule and its bubbles (pipelane schedule --help)\n"
               "  generate       sample text from a checkpoint or an exported model (pipelane generate --help)\n"
               "  eval           loss and perplexity of a model on a token or text file (pipelane eval --help)\n"
               "  export         a checkpoint as a Hugging Face GPT-2 model (pipelane export --help)\n"
               "  import         a Hugging Face GPT-2 model as a checkpoint (pipelane import --help)\n"
               "  report         an HTML page of one or more run directories (pipelane report --help)\n"
               "  lane-bench     one lane alone on one core: its dedicated throughput (pipelane lane-bench --help)\n"
               "  devices        list the compute devices this build can use\n"
               "  --version      print the version\n");
}

int devices_command() {
  std::printf("cpu: available\n");
#ifdef PIPELANE_HAVE_CUDA
  std::printf("cuda: %s\n", pipelane::cuda_device_report().c_str());
#else
  std::printf("cuda: not built (configure with -DPIPELANE_CUDA=ON)\n");
#endif
  return 0;
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
  if (cmd == "export") return pipelane::export_command(argc - 1, argv + 1);
  if (cmd == "generate") return pipelane::generate_command(argc - 1, argv + 1);
  if (cmd == "eval") return pipelane::eval_command(argc - 1, argv + 1);
  if (cmd == "import") return pipelane::import_command(argc - 1, argv + 1);
  if (cmd == "report") return pipelane::report_command(argc - 1, argv + 1);
  if (cmd == "devices") return devices_command();
  if (cmd == "lane-bench") return pipelane::lane_bench_command(argc - 1, argv + 1);
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
