#include "trainer/run/chrome_trace.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace pipelane {

TraceEvent track_name_event(int tid, const std::string& name) { return {"thread_name", "", tid, 0, 0, {text_arg("name", name)}}; }

std::vector<TraceEvent> trace_events(const std::vector<StepStats>& steps, const std::vector<int>& step_numbers,
                                     int world_rank, const std::string& track_name) {
  std::vector<TraceEvent> events{track_name_event(world_rank, track_name)};
  const auto us = [](double s) { return s * 1e6; };
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const StepStats& st = steps[k];
    events.push_back({"step", "step", world_rank, us(st.start_s), us(st.end_s - st.start_s),
                      {integer_arg("index", static_cast<std::int64_t>(k)), integer_arg("step", step_numbers.at(k))}});
    for (const InstrRecord& r : st.records) {
      std::vector<TraceArg> args{integer_arg("microbatch", r.instr.microbatch), integer_arg("chunk", r.instr.chunk)};
      if (r.bytes > 0) args.push_back(integer_arg("bytes", static_cast<std::int64_t>(r.bytes)));
      events.push_back({op_name(r.instr.op), "instr", world_rank, us(r.start_s), us(r.end_s - r.start_s), args});
      if (r.wait_s > 0)  // the wait ends when the instruction does (the transfer arrived, then it returned)
        events.push_back({std::string("wait: ") + wait_kind_name(r.instr.wait), "wait", world_rank,
                          us(r.end_s - r.wait_s), us(r.wait_s), {text_arg("kind", wait_kind_name(r.instr.wait))}});
    }
  }
  return events;
}

nlohmann::json to_json(const TraceEvent& e) {
  nlohmann::json args = nlohmann::json::object();
  for (const TraceArg& a : e.args) std::visit([&](const auto& v) { args[a.key] = v; }, a.value);
  if (e.category.empty()) return {{"name", e.name}, {"ph", "M"}, {"pid", 0}, {"tid", e.tid}, {"args", args}};
  return {{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"pid", 0}, {"tid", e.tid},
          {"ts", e.ts_us},  {"dur", e.dur_us},   {"args", args}};
}

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events) {
  nlohmann::json list = nlohmann::json::array();
  for (const TraceEvent& e : events) list.push_back(to_json(e));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump() << '\n';
    if (!out) throw std::runtime_error(tmp + ": cannot write");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace pipelane
