#include "trainer/chrome_trace.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace pipelane {

nlohmann::json trace_events(const std::vector<StepStats>& steps, int world_rank,
                            const std::string& track_name) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", world_rank},
                    {"args", {{"name", track_name}}}});
  const auto us = [](double s) { return s * 1e6; };
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const StepStats& st = steps[k];
    events.push_back({{"name", "step"}, {"cat", "step"}, {"ph", "X"}, {"pid", 0},
                      {"tid", world_rank}, {"ts", us(st.start_s)},
                      {"dur", us(st.end_s - st.start_s)}, {"args", {{"index", k}}}});
    for (const InstrRecord& r : st.records) {
      nlohmann::json args = {{"microbatch", r.instr.microbatch}, {"chunk", r.instr.chunk}};
      events.push_back({{"name", op_name(r.instr.op)}, {"cat", "instr"}, {"ph", "X"}, {"pid", 0},
                        {"tid", world_rank}, {"ts", us(r.start_s)},
                        {"dur", us(r.end_s - r.start_s)}, {"args", args}});
      if (r.wait_s > 0) {
        // The wait ends when the instruction does (the transfer arrived, then it returned).
        events.push_back({{"name", std::string("wait: ") + wait_kind_name(r.instr.wait)},
                          {"cat", "wait"}, {"ph", "X"}, {"pid", 0}, {"tid", world_rank},
                          {"ts", us(r.end_s - r.wait_s)}, {"dur", us(r.wait_s)},
                          {"args", {{"kind", wait_kind_name(r.instr.wait)}}}});
      }
    }
  }
  return events;
}

void write_chrome_trace(const std::string& path, const nlohmann::json& events) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << '\n';
    if (!out) throw std::runtime_error(tmp + ": cannot write");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace pipelane
