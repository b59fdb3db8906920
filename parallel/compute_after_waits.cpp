#include "parallel/compute_after_waits.h"

#include <ctime>

namespace pipelane {

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::vector<TrainingAfterGap> compute_after_waits(const std::vector<InstrRecord>& records) {
  std::vector<TrainingAfterGap> out;
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (!is_wait(records[i].instr.op)) continue;
    double compute_s = 0;
    bool computed = false;
    for (std::size_t k = i + 1; k < records.size() && !is_wait(records[k].instr.op); ++k)
      if (is_compute(records[k].instr.op)) {
        compute_s += records[k].cpu_s >= 0 ? records[k].cpu_s : records[k].end_s - records[k].start_s;
        computed = true;
      }
    if (computed) out.push_back({static_cast<int>(i), compute_s});
  }
  return out;
}

}  // namespace pipelane
