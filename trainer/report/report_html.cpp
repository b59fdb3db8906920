#include "trainer/report/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "datasets/utf8.h"
#include "trainer/report/report_svg.h"

namespace pipelane::report {

namespace {

const char* const kStyle = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1000px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:20px 0 6px}p.sub{color:#666;margin-top:0}
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:right}
th{background:#f6f6f6}td:first-child,th:first-child{text-align:left;white-space:nowrap}
.legend{display:flex;flex-wrap:wrap;gap:6px;margin:4px 0 2px;font-size:12px}
.legend .key{border:1px solid #ddd;background:#fff;border-radius:3px;padding:2px 6px;cursor:pointer;font:inherit}
.legend .key.off{opacity:.35}.legend .sw{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:-1px}
.legend .sw.dash{height:0;border-top:2px dashed;width:14px;vertical-align:3px}
table{display:block;overflow-x:auto;max-width:100%}pre{overflow-x:auto;font-size:12px;background:#f8f8f8;padding:8px}
.sample{font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;background:#f8f8f8;padding:6px;margin:4px 0}
figure{margin:0 0 12px}.note{color:#8a5a00;font-size:13px}.muted{color:#777;font-size:13px}svg.chart{display:block;max-width:100%;height:auto}
)";

// Toggles what a legend key names; marks the page as rendered and records how wide it laid out
// against the window (the browser tests read both: the page must fit a 1280-pixel laptop screen).
const char* const kScript = R"(
document.querySelectorAll('.legend').forEach(function (legend) {
  var target = document.getElementById(legend.getAttribute('data-for'));
  legend.querySelectorAll('.key').forEach(function (key) {
    key.addEventListener('click', function () {
      var off = key.classList.toggle('off');
      target.querySelectorAll('[data-series="' + key.getAttribute('data-series') + '"]').forEach(function (e) {
        e.style.display = off ? 'none' : '';
      });
    });
  });
});
document.body.setAttribute('data-page-width', String(document.documentElement.scrollWidth));
document.body.setAttribute('data-window-width', String(window.innerWidth));
document.body.setAttribute('data-rendered', 'yes');
)";

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string human(double v) {
  if (!std::isfinite(v)) return "-";
  if (std::fabs(v) >= 1e9) return fmt("%.2fG", v / 1e9);
  if (std::fabs(v) >= 1e6) return fmt("%.2fM", v / 1e6);
  if (std::fabs(v) >= 1e4) return fmt("%.1fk", v / 1e3);
  return fmt("%.4g", v);
}

std::string percent(const std::optional<double>& v) { return v ? fmt("%.1f%%", 100 * *v) : "-"; }
std::string opt(const std::optional<double>& v, const char* format = "%.4f") { return v ? fmt(format, *v) : "-"; }

struct LegendKey {
  std::string key, name, color;
  bool dashed = false;
};

std::string legend(const std::string& target, const std::vector<LegendKey>& keys) {
  std::string s = "<div class=\"legend\" data-for=\"" + escape_xml(target) + "\">";
  for (const LegendKey& k : keys)
    s += "<button type=\"button\" class=\"key\" data-series=\"" + escape_xml(k.key) + "\"><span class=\"sw" +
         (k.dashed ? " dash\" style=\"border-color:" + k.color : "\" style=\"background:" + k.color) + "\"></span>" +
         escape_xml(k.name) + "</button>";
  return s + "</div>";
}

std::string figure(const std::string& title, const std::string& body) {
  return "<figure><h3>" + escape_xml(title) + "</h3>" + body + "</figure>";
}

std::string summary_table(const std::vector<RunData>& runs) {
  std::string s =
      "<table id=\"summary-table\"><tr><th>run</th><th>steps</th><th>tokens</th><th>time s</th><th>tokens/s</th>"
      "<th>MFU (peak)</th><th>MFU (sgemm)</th><th>train loss</th><th>val loss</th><th>unigram</th><th>grid</th>"
      "<th>bubble measured / theory</th></tr>";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    s += "<tr><td><span class=\"legend\"><span class=\"sw\" style=\"background:" + palette_color(static_cast<int>(i)) +
         "\"></span></span>" + escape_xml(r.name) + "</td>";
    if (!r.summary) {
      const double last = r.steps.empty() ? NAN : r.steps.back().loss;
      s += "<td>" + (r.steps.empty() ? std::string("-") : std::to_string(r.steps.back().step)) +
           "</td><td colspan=\"5\" class=\"muted\">unfinished: no summary.json</td><td>" + fmt("%.4f", last) +
           "</td><td>-</td><td>-</td><td>-</td><td>-</td></tr>";
      continue;
    }
    const SummaryView& m = *r.summary;
    s += "<td>" + std::to_string(m.steps_run) + "</td><td>" + human(m.tokens) + "</td><td>" +
         fmt("%.1f", m.train_seconds) + "</td><td>" + human(m.tokens_per_s) + "</td><td>" + percent(m.mfu) +
         "</td><td>" + percent(m.mfu_sgemm) + "</td><td>" + fmt("%.4f", m.final_loss) + "</td><td>" +
         opt(m.final_val_loss) + "</td><td>" + opt(m.unigram_val_loss) + "</td><td>tp " + std::to_string(m.tp) +
         " &times; dp " + std::to_string(m.dp) + " &times; pp " + std::to_string(m.pp) + "</td><td>" +
         (m.pp > 1 ? percent(m.bubble_measured) + " / " + percent(m.bubble_theoretical) : std::string("-")) +
         "</td></tr>";
  }
  return s + "</table>";
}

std::string curves(const std::vector<RunData>& runs) {
  const auto chart = [](const char* id, const char* y_label) {
    LineChart c;
    c.id = id;
    c.x_label = "step";
    c.y_label = y_label;
    return c;
  };
  const auto series = [](const std::string& key, const std::string& name, const std::string& color) {
    Series s;
    s.key = key;
    s.name = name;
    s.color = color;
    return s;
  };
  LineChart loss = chart("chart-loss", "loss (nats/token)"), tokens = chart("chart-tokens", "tokens/s"),
            mfu = chart("chart-mfu", "MFU"), lr = chart("chart-lr", "learning rate"),
            grad = chart("chart-grad-norm", "global gradient norm");
  tokens.y_from_zero = mfu.y_from_zero = lr.y_from_zero = grad.y_from_zero = true;
  mfu.y_percent = true;
  std::vector<LegendKey> loss_keys, run_keys;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const std::string color = palette_color(static_cast<int>(i)), id = "r" + std::to_string(i);
    Series train = series(id + "-train", r.name + " train loss", color),
           val = series(id + "-val", r.name + " validation loss", color), tps = series(id, r.name, color),
           util = series(id, r.name + " MFU", color), rate = series(id, r.name + " learning rate", color),
           norm = series(id, r.name + " gradient norm", color);
    for (const StepMetrics& m : r.steps) {
      if (m.lr) rate.points.push_back({static_cast<double>(m.step), *m.lr});
      if (m.grad_norm && std::isfinite(*m.grad_norm)) norm.points.push_back({static_cast<double>(m.step), *m.grad_norm});
      if (!m.skipped) train.points.push_back({static_cast<double>(m.step), m.loss});
      tps.points.push_back({static_cast<double>(m.step), m.tokens_per_s});
      if (m.mfu) util.points.push_back({static_cast<double>(m.step), *m.mfu});
    }
    for (const ValidationPoint& v : r.validation) val.points.push_back({static_cast<double>(v.step), v.loss});
    val.dashed = val.markers = true;
    loss.series.push_back(train);
    loss.series.push_back(val);
    tokens.series.push_back(tps);
    mfu.series.push_back(util);
    lr.series.push_back(rate);
    grad.series.push_back(norm);
    loss_keys.push_back({id + "-train", r.name + " train", color});
    loss_keys.push_back({id + "-val", r.name + " validation", color, true});
    run_keys.push_back({id, r.name, color});
  }
  std::string peak_note;
  if (!runs.empty() && runs.front().summary && !runs.front().summary->peak_source.empty())
    peak_note = " (against " + runs.front().summary->peak_source + ")";
  return "<h2>Curves</h2>" + figure("Loss: training (solid) and validation (dashed)", legend("chart-loss", loss_keys) + render_line_chart(loss)) +
         figure("Throughput", legend("chart-tokens", run_keys) + render_line_chart(tokens)) +
         figure("Model FLOPs utilisation" + peak_note, legend("chart-mfu", run_keys) + render_line_chart(mfu)) +
         figure("Learning rate", legend("chart-lr", run_keys) + render_line_chart(lr)) +
         figure("Gradient norm (before clipping)", legend("chart-grad-norm", run_keys) + render_line_chart(grad));
}

// The run's text samples (samples.jsonl), its memory as summary.json records it, and its resolved
// config.ini, folded.
std::string run_details(const RunData& r, int i) {
  std::string s;
  if (!r.samples.empty()) {
    s += "<h3>Text samples</h3><div id=\"samples-" + std::to_string(i) + "\">";
    for (const TextSample& t : r.samples)
      s += "<p class=\"muted\">step " + std::to_string(t.step) + "</p><div class=\"sample\"><b>" +
           escape_xml(repair_utf8(t.prompt, InvalidUtf8::kReplace, "prompt")) + "</b>" +
           escape_xml(repair_utf8(t.text, InvalidUtf8::kReplace, "sample")) + "</div>";
    s += "</div>";
  }
  if (r.summary && r.summary->training_arena_bytes_rank0)
    s += "<h3>Memory</h3><p class=\"muted\">training arena of rank 0 (parameters, gradients, AdamW moments, "
         "activations): " + human(*r.summary->training_arena_bytes_rank0) + "B; summary.json records no other rank's, "
         "which `pipelane train` prints before step 1 (the largest rank and the total)</p>";
  if (!r.config_ini.empty())
    s += "<h3>Configuration</h3><details id=\"config-" + std::to_string(i) +
         "\"><summary>config.ini, as resolved</summary><pre>" +
         escape_xml(repair_utf8(r.config_ini, InvalidUtf8::kReplace, "config.ini")) + "</pre></details>";
  return s;
}

const std::vector<std::string>& wait_kinds() {
  static const std::vector<std::string> kinds = {"Warmup", "Cooldown", "P2PWait", "SyncWait"};
  return kinds;
}
std::string wait_color(const std::string& kind) {
  if (kind == "Warmup") return "#f28e2b";
  if (kind == "Cooldown") return "#edc948";
  if (kind == "P2PWait") return "#e15759";
  if (kind == "SyncWait") return "#b07aa1";
  return "#bab0ac";
}
std::string op_color(const std::string& op) {
  if (op == "Fwd") return "#4e79a7";
  if (op == "Bwd") return "#59a14f";
  if (op == "BwdWeight") return "#76b7b2";
  return "#8f8f8f";
}
std::string lane_color(int i) {
  static const char* const kLanes[] = {"#9c755f", "#ff9da7", "#17becf", "#bcbd22", "#8c564b", "#e377c2"};
  return kLanes[i % 6];
}

std::string stages_section(const RunData& r, int i) {
  if (r.stage_times.empty()) return "";
  StackedBarChart chart;
  chart.id = "stages-" + std::to_string(i);
  chart.unit = "ms per traced step (mean of the stage's ranks)";
  chart.segments.push_back({"compute", "compute (Fwd, Bwd, BwdWeight)", op_color("Fwd")});
  for (const std::string& k : wait_kinds()) chart.segments.push_back({k, "wait: " + k, wait_color(k)});
  chart.segments.push_back({"other", "other (sends, optimizer)", "#cfcfcf"});
  for (const StageTime& t : r.stage_times) {
    Bar bar{"stage " + std::to_string(t.stage), {t.compute_ms}};
    for (const std::string& k : wait_kinds()) bar.values.push_back(t.wait_ms.count(k) ? t.wait_ms.at(k) : 0.0);
    bar.values.push_back(t.other_ms);
    chart.bars.push_back(bar);
  }
  std::vector<LegendKey> keys;
  for (const BarSegment& s : chart.segments) keys.push_back({s.key, s.name, s.color});
  std::string s = figure("Pipeline stages: busy and idle by wait kind", legend(chart.id, keys) + render_stacked_bars(chart));
  if (r.summary && !r.summary->straggler.empty()) s += "<p class=\"note\">" + escape_xml(r.summary->straggler) + "</p>";
  return s;
}

// "1.234 s +- 0.321 s" or why there is no number.
std::string interference_text(const InterferenceView& v) {
  return v.estimated_s ? fmt("%.3f", *v.estimated_s) + " s &plusmn; " + fmt("%.3f", *v.stderr_s) + " s"
                       : "unknown, " + escape_xml(v.why_not);
}

// The cost overrun does not show, next to it: in total and per stage, with the control gaps it rests on.
std::string interference_paragraph(const LanesSummary& l, int i) {
  if (!l.interference) return "";
  const InterferenceView& v = *l.interference;
  std::string s = "<p class=\"muted\" id=\"interference-" + std::to_string(i) + "\">cost to training beyond the overrun (interference, "
                  "estimated from " + std::to_string(v.control_gaps) + " control gaps left empty against " +
                  std::to_string(v.lane_gaps) + " left to the lanes): " + interference_text(v);
  if (l.estimated_overhead_fraction)
    s += "; estimated overhead with the overrun: " + fmt("%+.1f%%", 100 * *l.estimated_overhead_fraction) + " &plusmn; " +
         fmt("%.1f%%", 100 * *l.estimated_overhead_fraction_stderr) + " of training time";
  s += "</p><table><tr><th>stage</th><th>overrun s</th><th>interference s (estimated)</th><th>control gaps</th></tr>";
  for (const LaneStage& st : l.stages)
    if (st.interference)
      s += "<tr><td>" + std::to_string(st.stage) + "</td><td>" + fmt("%.4f", st.overrun_s) + "</td><td>" +
           interference_text(*st.interference) + "</td><td>" + std::to_string(st.interference->control_gaps) + "</td></tr>";
  return s + "</table>";
}

std::string lanes_section(const RunData& r, int i) {
  if (!r.summary || !r.summary->lanes) return "";
  const LanesSummary& l = *r.summary->lanes;
  std::vector<std::string> names;
  for (const auto& [name, n] : l.lanes) names.push_back(name);
  StackedBarChart chart;
  chart.id = "lanes-" + std::to_string(i);
  chart.unit = "seconds of waits over the run (summed over the stage's ranks)";
  for (std::size_t k = 0; k < names.size(); ++k)
    chart.segments.push_back({"lane-" + names[k], names[k] + " (harvested)", lane_color(static_cast<int>(k))});
  chart.segments.push_back({"unfilled", "waits left idle", "#e3e3e3"});
  chart.segments.push_back({"overrun", "overrun (cost to training)", "#d62728"});
  for (const LaneStage& st : l.stages) {
    Bar bar{"stage " + std::to_string(st.stage), {}};
    for (const std::string& n : names) bar.values.push_back(st.lanes.count(n) ? st.lanes.at(n).harvested_s : 0.0);
    bar.values.push_back(std::max(0.0, st.bubble_s - st.harvested_s));
    bar.values.push_back(st.overrun_s);
    chart.bars.push_back(bar);
  }
  std::vector<LegendKey> keys;
  for (const BarSegment& s : chart.segments) keys.push_back({s.key, s.name, s.color});
  std::string s = figure("Lanes: harvest and overrun per stage", legend(chart.id, keys) + render_stacked_bars(chart));
  s += "<p class=\"muted\">harvested " + fmt("%.2f", l.harvested_s) + " s of " + fmt("%.2f", l.bubble_s) +
       " s of waits (" + fmt("%.0f%%", 100 * l.harvest_fraction) + "; " +
       fmt("%.0f%%", 100 * l.harvest_fraction_after_profiling) + " after the profile iterations), overrun " +
       fmt("%.3f", l.overrun_s) + " s; training overhead vs a lanes-off run: " +
       (l.overhead_fraction ? fmt("%+.1f%%", 100 * *l.overhead_fraction) : std::string("not measured ([lanes] baseline)")) +
       "; cost saving: " +
       (l.cost_saving_fraction ? fmt("%.1f%%", 100 * *l.cost_saving_fraction) +
                                     (l.cost_saving_estimated ? std::string(" (estimated: net of the estimated overhead)") : "")
                               : std::string("not measured ([lanes] dedicated)")) +
       "</p>";
  s += interference_paragraph(l, i);
  s += "<table id=\"lanes-table-" + std::to_string(i) +
       "\"><tr><th>stage</th><th>lane</th><th>units</th><th>steps</th><th>lane s</th><th>harvested s</th>"
       "<th>overrun s</th><th>units per lane-s</th></tr>";
  const auto row = [&](const std::string& stage, const std::string& name, const LaneNumbers& n) {
    s += "<tr><td>" + stage + "</td><td>" + escape_xml(name) + "</td><td>" + human(n.units) + " " +
         escape_xml(n.work_unit) + "</td><td>" + fmt("%.0f", n.steps) + "</td><td>" + fmt("%.3f", n.lane_s) +
         "</td><td>" + fmt("%.3f", n.harvested_s) + "</td><td>" + fmt("%.4f", n.overrun_s) + "</td><td>" +
         (n.lane_s > 0 ? human(n.units / n.lane_s) : std::string("-")) + "</td></tr>";
  };
  for (const LaneStage& st : l.stages)
    for (const auto& [name, n] : st.lanes) row(std::to_string(st.stage), name, n);
  for (const auto& [name, n] : l.lanes) row("all", name, n);
  s += "</table>";
  for (const std::string& q : l.quarantined) s += "<p class=\"note\">quarantined: " + escape_xml(q) + "</p>";
  return s;
}

std::string timeline_section(const RunData& r, int i) {
  if (!r.timeline) return "";
  const IterationTimeline& it = *r.timeline;
  Timeline tl;
  tl.id = "timeline-" + std::to_string(i);
  tl.span_s = it.span_s;
  std::vector<std::string> lane_names;
  for (const RankTimeline& rank : it.ranks)
    for (const TraceSlice& s : rank.lane_steps)
      if (std::find(lane_names.begin(), lane_names.end(), s.name) == lane_names.end()) lane_names.push_back(s.name);
  std::set<std::string> ops_seen, waits_seen;
  for (const RankTimeline& rank : it.ranks) {
    TimelineRow row;
    row.label = "rank " + std::to_string(rank.rank);
    const std::size_t paren = rank.track.find('(');
    if (paren != std::string::npos) {  // "rank 1 (tp 0/1, dp 0/1, pp 1/2)" -> "rank 1 pp 1/2"
      const std::size_t pp = rank.track.find("pp ", paren);
      if (pp != std::string::npos) row.label += " " + rank.track.substr(pp, rank.track.find(')', pp) - pp);
    }
    for (const TraceSlice& s : rank.instructions) {
      if (s.name == "RecvFwd" || s.name == "RecvBwd" || s.name == "GradSync") continue;  // drawn as waits
      const bool compute = s.name == "Fwd" || s.name == "Bwd" || s.name == "BwdWeight";
      const std::string key = compute ? s.name : "op-other";
      ops_seen.insert(key);
      row.boxes.push_back({s.start_s, s.end_s, key, op_color(s.name),
                           s.name + (s.microbatch >= 0 ? " microbatch " + std::to_string(s.microbatch) : "") + ": " +
                               fmt("%.2f ms", (s.end_s - s.start_s) * 1e3)});
    }
    for (const TraceSlice& s : rank.waits) {
      waits_seen.insert(s.name);
      TimelineBox b{s.start_s, s.end_s, "wait-" + s.name, wait_color(s.name),
                    "wait (" + s.name + "): " + fmt("%.2f ms", (s.end_s - s.start_s) * 1e3)};
      b.faint = true;
      row.boxes.push_back(b);
    }
    for (const TraceSlice& s : rank.lane_steps) {
      const int k = static_cast<int>(std::find(lane_names.begin(), lane_names.end(), s.name) - lane_names.begin());
      TimelineBox b{s.start_s, s.end_s, "lane-" + s.name, lane_color(k),
                    "lane " + s.name + ": " + fmt("%.2f ms", (s.end_s - s.start_s) * 1e3) + ", " + human(s.units) +
                        " units"};
      b.inset = true;
      row.boxes.push_back(b);
    }
    tl.rows.push_back(std::move(row));
  }
  std::vector<LegendKey> keys;
  for (const char* op : {"Fwd", "Bwd", "BwdWeight"})
    if (ops_seen.count(op)) keys.push_back({op, op, op_color(op)});
  if (ops_seen.count("op-other")) keys.push_back({"op-other", "sends, optimizer", op_color("")});
  for (const std::string& k : wait_kinds())
    if (waits_seen.count(k)) keys.push_back({"wait-" + k, "wait: " + k, wait_color(k)});
  for (std::size_t k = 0; k < lane_names.size(); ++k)
    keys.push_back({"lane-" + lane_names[k], "lane " + lane_names[k], lane_color(static_cast<int>(k))});
  const std::string which = it.step > 0 ? "step " + std::to_string(it.step) : "traced step " + std::to_string(it.step_index + 1);
  return figure("One iteration per rank (" + which + "): lane steps inside the waits",
                legend(tl.id, keys) + render_timeline(tl));
}

}  // namespace

std::string render_report(const std::vector<RunData>& runs, const std::string& title) {
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape_xml(title) +
                  "</title><style>" + kStyle + "</style></head><body>";
  s += "<h1>" + escape_xml(title) + "</h1><p class=\"sub\">" + std::to_string(runs.size()) + " run" +
       (runs.size() == 1 ? "" : "s") + ": ";
  for (std::size_t i = 0; i < runs.size(); ++i) s += (i ? ", " : "") + escape_xml(runs[i].dir);
  s += "</p><h2>Summary</h2>" + summary_table(runs) + curves(runs);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const RunData& r = runs[i];
    const int n = static_cast<int>(i);
    s += "<section id=\"run-" + std::to_string(i) + "\"><h2>Run " + escape_xml(r.name) + "</h2>";
    if (r.summary) {
      const SummaryView& m = *r.summary;
      s += "<p class=\"muted\">" + std::to_string(m.steps_run) + " steps, " + human(m.tokens) + " tokens in " +
           fmt("%.1f", m.train_seconds) + " s; tp " + std::to_string(m.tp) + " &times; dp " + std::to_string(m.dp) +
           " &times; pp " + std::to_string(m.pp) + (m.schedule.empty() ? "" : ", " + escape_xml(m.schedule)) +
           (m.microbatches > 0 ? ", " + std::to_string(m.microbatches) + " microbatches" : "") + "</p>";
    }
    for (const std::string& note : r.notes) s += "<p class=\"note\">" + escape_xml(note) + "</p>";
    s += stages_section(r, n) + lanes_section(r, n) + timeline_section(r, n) + run_details(r, n) + "</section>";
  }
  s += "<p class=\"muted\">Written by pipelane report. Self-contained: no scripts or fonts are fetched.</p>";
  s += std::string("<script>") + kScript + "</script></body></html>\n";
  return s;
}

}  // namespace pipelane::report
