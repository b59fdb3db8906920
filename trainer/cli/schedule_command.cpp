#include "trainer/cli/schedule_command.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/schedule.h"
#include "parallel/schedule_sim.h"
#include "trainer/cli/command_options.h"

namespace pipelane {
namespace {

namespace po = boost::program_options;

constexpr int kMaxTimelineColumns = 240;

struct ScheduleOptions {
  int pp = 0;
  int microbatches = 0;
  std::string schedule;
  int virtual_stages = 0;  // 0: not given (1, or 2 for interleaved)
  std::string costs = "1,2,1";
  int stage = -1;          // -1: every stage
  int columns_per_unit = 0;  // 0: automatic
  bool no_lists = false;
};

void describe(SubcommandOptions& d, ScheduleOptions& o) {
  d.add_options()
      ("pp", po::value(&o.pp)->required(), "pipeline stages p (>= 1); required")
      ("microbatches", po::value(&o.microbatches)->required(),
       "microbatches m per iteration (>= 1; a multiple of p for interleaved); required")
      ("schedule", po::value(&o.schedule)->required(),
       "gpipe (all forwards, then all backwards), 1f1b (Megatron non-interleaved), interleaved "
       "(Megatron interleaved 1F1B over --virtual-stages model chunks per stage) or zb-h1 "
       "(zero-bubble H1: backward split into B = input gradient and W = weight gradient, W "
       "deferred into the drain); required")
      ("virtual-stages", po::value(&o.virtual_stages),
       "model chunks v per stage: >= 2 for interleaved (default 2), 1 for the others (default 1)")
      ("costs", value_with_default(&o.costs),
       "t_f,t_b,t_w: forward, full backward and weight-gradient cost in time units (t_f, t_b > 0, "
       "t_w >= 0). zb-h1 runs B = t_b - t_w and W = t_w (needs t_w <= t_b); the others run one "
       "backward of t_b and ignore t_w")
      ("stage", po::value(&o.stage), "print only this stage's instruction list (default: all)")
      ("no-lists", po::bool_switch(&o.no_lists), "print only the timeline and the bubble report")
      ("columns-per-unit", po::value(&o.columns_per_unit),
       "timeline columns per time unit (default: the fewest that give the shortest instruction "
       "room for its label, at most 240 columns in all; 1 if even that is too wide)");
}

SimCosts parse_costs(const std::string& text) {
  std::vector<double> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    double value = 0;
    try {
      value = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !std::isfinite(value))
      throw std::invalid_argument("--costs: '" + item + "' is not a number (expected t_f,t_b,t_w)");
    values.push_back(value);
  }
  if (values.size() != 3)
    throw std::invalid_argument("--costs: expected three numbers t_f,t_b,t_w, got '" + text + "'");
  if (!(values[0] > 0) || !(values[1] > 0) || values[2] < 0)
    throw std::invalid_argument("--costs: need t_f > 0, t_b > 0 and t_w >= 0, got '" + text + "'");
  SimCosts costs;
  costs.t_f = values[0];
  costs.t_b = values[1];
  costs.t_w = values[2];
  return costs;
}

// Timeline label: op letter, microbatch, and for interleaved the chunk as a letter (a = chunk 0).
std::string label(const Instr& instr, const ScheduleSpec& spec) {
  std::string s;
  switch (instr.op) {
    case Op::Fwd: s = "F"; break;
    case Op::Bwd: s = "B"; break;
    case Op::BwdWeight: s = "W"; break;
    case Op::GradSync: return "S";
    case Op::OptimizerStep: return "O";
    default: return "";
  }
  s += std::to_string(instr.microbatch);
  if (spec.virtual_stages > 1) s += static_cast<char>('a' + instr.chunk % 26);
  return s;
}

std::string format_time(double t) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", t);
  return buffer;
}

int choose_columns_per_unit(const ScheduleSpec& spec, const SimCosts& costs, double makespan) {
  std::vector<double> durations = {costs.t_f};
  if (spec.kind == ScheduleKind::ZeroBubbleH1) {
    if (costs.t_b - costs.t_w > 0) durations.push_back(costs.t_b - costs.t_w);
    if (costs.t_w > 0) durations.push_back(costs.t_w);
  } else {
    durations.push_back(costs.t_b);
  }
  const double shortest = *std::min_element(durations.begin(), durations.end());
  const int want_chars = spec.virtual_stages > 1 ? 3 : 2;
  const int columns = std::max(1, static_cast<int>(std::ceil(want_chars / shortest - 1e-9)));
  if (makespan * columns <= kMaxTimelineColumns) return columns;
  return 1;
}

void print_timeline(const ScheduleSpec& spec, const SimCosts& costs, const SimResult& result,
                    int columns_per_unit) {
  const int width = static_cast<int>(std::lround(result.makespan * columns_per_unit));
  std::cout << "timeline (1 column = " << format_time(1.0 / columns_per_unit)
            << " time units; F forward, B backward" << (spec.kind == ScheduleKind::ZeroBubbleH1 ? " (input gradient), W weight gradient" : "")
            << ", then the microbatch" << (spec.virtual_stages > 1 ? " and the chunk (a = chunk 0)" : "")
            << "; '-' continues an instruction, '.' idle):\n";
  for (int s = 0; s < spec.pp; ++s) {
    std::string row(static_cast<std::size_t>(width), '.');
    for (const SimEvent& e : result.stages[s].events) {
      const std::string text = label(e.instr, spec);
      // A GradSync event spans its wait at the barrier (idle) and then the sync itself.
      const double start = e.instr.op == Op::GradSync ? e.end - costs.t_sync : e.start;
      if (text.empty() || !(e.end > start)) continue;
      const int c0 = static_cast<int>(std::lround(start * columns_per_unit));
      const int c1 = std::min(width, static_cast<int>(std::lround(e.end * columns_per_unit)));
      for (int c = c0; c < c1; ++c) {
        const std::size_t k = static_cast<std::size_t>(c - c0);
        row[static_cast<std::size_t>(c)] = k < text.size() ? text[k] : '-';
      }
    }
    std::printf("  stage %-3d |%s|\n", s, row.c_str());
  }
}

void print_lists(const ScheduleSpec& spec, const std::vector<std::vector<Instr>>& lists, int only) {
  for (int s = 0; s < spec.pp; ++s) {
    if (only >= 0 && s != only) continue;
    std::cout << "stage " << s << ": " << lists[s].size() << " instructions (warmup forwards "
              << warmup_forwards(spec, s) << ")\n";
    for (std::size_t i = 0; i < lists[s].size(); ++i)
      std::printf("  %4zu  %s\n", i, instr_to_string(lists[s][i]).c_str());
  }
  std::cout << "\n";
}

void print_report(const ScheduleSpec& spec, const SimCosts& costs, const SimResult& result) {
  const double theory = theoretical_bubble_fraction(spec, costs.t_f, costs.t_b, costs.t_w);
  double idle = 0;
  for (const StageTimeline& tl : result.stages) idle += tl.idle_total;
  std::printf("\nbubble fraction: theoretical %.4f, simulated %.4f (makespan %s, idle %s of %s "
              "stage-time units)\n",
              theory, result.bubble_fraction, format_time(result.makespan).c_str(),
              format_time(idle).c_str(), format_time(result.makespan * spec.pp).c_str());
  switch (spec.kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB: std::printf("  theoretical: (p-1)/(m+p-1)\n"); break;
    case ScheduleKind::Interleaved: std::printf("  theoretical: (p-1)/(v*m+p-1)\n"); break;
    case ScheduleKind::ZeroBubbleH1:
      std::printf("  theoretical: idle (p-1)(t_f + B - W) with B = t_b - t_w, W = t_w, over idle + "
                  "m(t_f + t_b)%s\n",
                  spec.microbatches < spec.pp ? "; needs m >= p to be reached (too few W to fill the drain)" : "");
      break;
  }
  std::printf("\nidle time per stage by kind (time units):\n");
  std::printf("  %-6s %8s %8s %8s %8s %8s %8s  %s\n", "stage", "Warmup", "Cooldown", "P2PWait",
              "SyncWait", "idle", "busy", "activations max/bound");
  for (int s = 0; s < spec.pp; ++s) {
    const StageTimeline& tl = result.stages[s];
    const auto k = [&](WaitKind w) { return format_time(tl.idle_by_kind[static_cast<int>(w)]); };
    std::printf("  %-6d %8s %8s %8s %8s %8s %8s  %d/%d\n", s, k(WaitKind::Warmup).c_str(),
                k(WaitKind::Cooldown).c_str(), k(WaitKind::P2PWait).c_str(),
                k(WaitKind::SyncWait).c_str(), format_time(tl.idle_total).c_str(),
                format_time(tl.busy).c_str(), result.max_in_flight[s], activation_bound(spec, s));
  }
}

int run(const ScheduleOptions& o) {
  ScheduleSpec spec{parse_schedule_kind(o.schedule), o.pp, 1, o.microbatches};
  spec.virtual_stages = o.virtual_stages != 0 ? o.virtual_stages
                        : spec.kind == ScheduleKind::Interleaved ? 2 : 1;
  validate_schedule_spec(spec);
  if (o.stage != -1 && (o.stage < 0 || o.stage >= spec.pp))
    throw std::invalid_argument("--stage " + std::to_string(o.stage) + " is out of range [0, " +
                                std::to_string(spec.pp) + ")");
  if (o.columns_per_unit < 0 || o.columns_per_unit > 100)
    throw std::invalid_argument("--columns-per-unit must be in [1, 100]");
  const SimCosts costs = parse_costs(o.costs);
  validate_sim_costs(costs, spec.kind);

  std::vector<std::vector<Instr>> lists;
  for (int s = 0; s < spec.pp; ++s) lists.push_back(build_schedule(spec, s));
  const SimResult result = simulate_schedule(spec, lists, costs);

  std::cout << "schedule " << schedule_kind_name(spec.kind) << ": pp=" << spec.pp
            << " virtual-stages=" << spec.virtual_stages << " microbatches=" << spec.microbatches
            << "; costs t_f=" << format_time(costs.t_f) << " t_b=" << format_time(costs.t_b);
  if (spec.kind == ScheduleKind::ZeroBubbleH1)
    std::cout << " (B=" << format_time(costs.t_b - costs.t_w) << " W=" << format_time(costs.t_w) << ")";
  std::cout << "\n\n";
  if (!o.no_lists) print_lists(spec, lists, o.stage);
  const int columns = o.columns_per_unit > 0 ? o.columns_per_unit
                                             : choose_columns_per_unit(spec, costs, result.makespan);
  print_timeline(spec, costs, result, columns);
  print_report(spec, costs, result);
  return 0;
}

}  // namespace

int schedule_command(int argc, char** argv) {
  ScheduleOptions options;
  SubcommandOptions description(
      "schedule", "--pp P --microbatches M --schedule KIND [options]",
      "Prints a pipeline schedule's per-stage instruction lists, a text timeline of all stages under a\n"
      "unit-cost model (zero-cost transfers, blocking receives), and its theoretical and simulated\n"
      "bubble fractions with per-stage idle time by kind.");
  describe(description, options);
  if (const auto code = description.parse(argc, argv)) return *code;
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::cerr << "pipelane schedule: " << error.what() << "\n";
  }
  return 2;
}

}  // namespace pipelane
