// The console's view of a run: one live line rewritten in place on a terminal, plain lines
// every log_every steps otherwise (logs and CI stay readable).
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <cstdio>
#include <string>

namespace pipelane {

class ProgressLine {
 public:
  // allow_live = false forces plain lines (e.g. under mpirun, which hands ranks a pty).
  ProgressLine(std::FILE* out, int total_steps, int log_every, bool allow_live = true);
  // Shown live on a terminal; printed as a line every log_every steps (and the last) otherwise;
  // skipped (and counted) when the console would block.
  // eta_s: the caller smooths it (the trainer uses an average of recent step times).
  void update(int step, double loss, double lr, double tokens_per_s, double eta_s);
  // A line that stays (evaluation results, notes): clears the live line first.
  void note(const std::string& line);
  void finish();

 private:
  std::FILE* out_;
  int total_;
  int log_every_;
  bool live_;
  bool dirty_ = false;
  long skipped_ = 0;
};

std::string format_duration(double seconds);  // "4:05", "1:02:03", past a day "3d 01:02:03"

}  // namespace pipelane
