#include "trainer/cli/run_summary_console.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace pipelane {

namespace {

// 123, 45.6k, 819.20M: small runs are not "0.00M tokens".
std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e4) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

// The overhead with both runs' step-time spread: a difference inside it is noise (issue #25: a
// priced run reported -4.6% on a machine where repeated runs vary ~2x).
void print_overhead(const TrainingOverhead& o) {
  std::printf("    overhead   %+.1f%% training time vs the lanes-off run (median step %+.1f%%)", 100 * o.fraction(),
              100 * o.step_median_fraction());
  if (const auto inside = o.inside_noise())
    std::printf(": %s the noise\n", *inside ? "inside" : "outside");
  else
    std::printf(" (noise unknown: the baseline has no metrics.jsonl beside its summary.json)\n");
  if (o.baseline_step_quartiles && o.step_quartiles)
    std::printf("    noise      middle half of the steady steps: lanes off %.0f-%.0f ms, lanes on %.0f-%.0f ms "
                "(the wider interquartile range: %.1f%% of the lanes-off median)\n",
                o.baseline_step_quartiles->p25_ms, o.baseline_step_quartiles->p75_ms, o.step_quartiles->p25_ms,
                o.step_quartiles->p75_ms, 100 * *o.noise_fraction());
}

// The cost a run can see by itself: overrun, and what the control gaps say of the rest (issue
// #26: overrun alone showed about a tenth of what alternated lanes-off runs measured).
void print_estimated_cost(const CombinedLaneSummary& t, const InterferenceEstimate& e,
                          const std::optional<EstimatedOverhead>& overhead) {
  std::printf("    cost       overrun %.3f s + interference ", t.overrun_s);
  if (e.estimated)
    std::printf("%.3f s +- %.3f s", e.extra_s, e.stderr_s);
  else
    std::printf("unknown: %s", why_not_estimated(e).c_str());
  std::printf(" (%ld control gaps against %ld left to the lanes)\n", e.control_gaps, e.lane_gaps);
  if (overhead)
    std::printf("               estimated overhead %+.1f%% +- %.1f%% training time (no lanes-off run needed)\n",
                100 * overhead->fraction(), 100 * overhead->fraction_stderr());
}

void print_lanes(const TrainingLanes& lanes) {
  const CombinedLaneSummary& t = lanes.total;
  std::printf("  lanes        harvested %.2f s of %.2f s of waits (%.0f%%; %.0f%% after the profile iterations), "
              "overrun %.3f s\n",
              t.harvested_s, t.bubble_s, 100 * t.harvest_fraction(), 100 * t.harvest_fraction_after_profiling(),
              t.overrun_s);
  for (const auto& [name, l] : t.lanes)
    std::printf("    %-10s %.4g %s in %.2f s of lane time\n", name.c_str(), l.units,
                l.work_unit.empty() ? "units" : l.work_unit.c_str(), l.lane_s);
  if (t.interference) print_estimated_cost(t, *t.interference, lanes.valuation.estimated_overhead);
  const auto& o = lanes.valuation.overhead;
  if (o) print_overhead(*o);
  if (const auto& c = lanes.valuation.cost_saving) {
    char net[64] = "unknown (no [lanes] baseline, no interference estimate)";
    if (const auto n = c->net_fraction())
      std::snprintf(net, sizeof net, "%.1f%%%s", 100 * *n, c->estimated ? " (estimated: no [lanes] baseline)" : "");
    std::printf("    saving     gross %.1f%%, net %s: lane work worth %.1f device-s alone (at %.3gx the training "
                "device's price), over %.1f device-s of training\n",
                100 * c->gross_fraction(), net, c->value_device_s, c->price_ratio, c->training_device_s);
    if (c->net_above_gross())
      std::printf("               net above gross: the lanes run took %.1f device-s less than the lanes-off run%s\n",
                  -*c->extra_device_s,
                  o && o->inside_noise().value_or(false) ? ", a difference inside the noise, not lanes speeding training up"
                                                         : "");
  }
  for (const QuarantinedLane& q : t.quarantined)
    std::printf("    quarantined: %s on rank %d: %s\n", q.lane.c_str(), q.rank, q.reason.c_str());
}

}  // namespace

void print_run_summary(const TrainOptions& opts, const RunSummary& summary) {
  const TrainingPart& run = *summary.training;
  std::printf("\nSummary\n");
  const int ran = summary.steps, first = run.first_step, last = run.last_step;
  std::string which;
  if (first > 1 || last < opts.train.steps)
    which = " (steps " + std::to_string(first) + "-" + std::to_string(last) + " of " + std::to_string(opts.train.steps) +
            (first > 1 ? ", resumed from step " + std::to_string(first - 1) : "") +
            (last < opts.train.steps ? ", stopped early" : "") + ")";
  std::printf("  trained      %d step%s%s, %s tokens in %.1f s: %.0f tokens/s\n", ran, ran == 1 ? "" : "s", which.c_str(),
              human_count(summary.tokens).c_str(), summary.train_seconds, summary.tokens_per_s);
  std::printf("  MFU          %.1f%% of %s (%.0f GFLOP/s per rank)", 100.0 * summary.mfu, run.peak_source.c_str(),
              summary.peak_gflops);
  if (run.mfu_sgemm && !run.peak_source.starts_with("the measured sgemm"))  // else the same figure twice
    std::printf("; %.1f%% of a measured sgemm (%.0f GFLOP/s)", 100.0 * *run.mfu_sgemm, *run.peak_gflops_sgemm);
  std::printf("\n");
  const ParallelShape& par = summary.parallel;
  if (par.world() > 1 || par.pp > 1) {
    std::printf("  parallel     tp %d x dp %d x pp %d, %s, %d microbatches: bubble %.1f%% measured, %.1f%% theoretical\n",
                par.tp, par.dp, par.pp, par.schedule.c_str(), par.microbatches, 100 * summary.bubble_fraction_measured,
                100 * summary.bubble_fraction_theoretical);
    // The idle time split by cause: what the schedule itself leaves (its theoretical bubble), the
    // rest stages waiting on a slower stage or a transfer (issue #25: the demo's was mostly the head).
    if (par.pp > 1 && summary.bubble_fraction_measured > 0) {
      const double schedule = std::min(summary.bubble_fraction_theoretical, summary.bubble_fraction_measured);
      std::printf("  idle         %.1f%% of stage time: %.1f points the schedule's bubble, %.1f points imbalance "
                  "and transfer waits\n",
                  100 * summary.bubble_fraction_measured, 100 * schedule,
                  100 * (summary.bubble_fraction_measured - schedule));
    }
  }
  if (run.straggler) std::printf("  straggler    %s\n", run.straggler->message.c_str());
  if (!run.memory.empty()) {  // the largest arena's prediction against what it really took
    const ArenaMemory* most = &run.memory.front();
    for (const ArenaMemory& a : run.memory)
      if (a.high_water_bytes > most->high_water_bytes) most = &a;
    std::printf("  memory       largest training arena (rank %d): %.1f MiB used, %.1f MiB predicted (%+.2f%%)\n",
                most->rank, most->high_water_bytes / 1048576.0, most->predicted_bytes / 1048576.0,
                most->predicted_bytes > 0 ? 100.0 * (most->high_water_bytes / most->predicted_bytes - 1) : 0.0);
  }
  if (summary.lanes) print_lanes(*summary.lanes);
  std::printf("  train loss   %.4f (final step)\n", *summary.final_loss);
  if (summary.final_val_loss) {
    const double val = *summary.final_val_loss, unigram = *run.unigram_val_loss;
    std::printf("  val loss     %.4f nats/token vs unigram baseline %.4f: %s\n", val, unigram,
                val < unigram ? "the model beats the unigram model" : "NOT below the unigram model");
    // Two definitions meet here (issue #25): training's is a sample, `pipelane eval`'s the split.
    const long long windows = static_cast<long long>(opts.train.eval_batches) * opts.train.micro_batch;
    std::printf("               over the validation split's first %lld windows of %d tokens ([train] eval_batches x "
                "micro_batch); `pipelane eval` covers the whole split (--max-tokens %lld: these windows)\n",
                windows, opts.model.seq_len, windows * opts.model.seq_len);
  }
  std::printf("  run dir      %s (config.ini, metrics.jsonl, trace.json, summary.json%s)\n", opts.run.dir.c_str(),
              opts.train.sample_every > 0 ? ", samples.jsonl" : "");
  if (run.traced_steps)
    std::printf("  trace.json   steps %d-%d ([run] trace_steps)\n", run.traced_steps->first, run.traced_steps->second);
}

}  // namespace pipelane
