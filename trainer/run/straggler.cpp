#include "trainer/run/straggler.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>

namespace pipelane {

namespace {

// Per-layer time c and each stage's extra work (head, embedding) under the model in straggler.h.
double per_layer_time(const std::vector<double>& busy, const std::vector<int>& layers) {
  double c = std::numeric_limits<double>::infinity();
  for (std::size_t p = 0; p < layers.size(); ++p)
    if (layers[p] > 0) c = std::min(c, busy[p] / layers[p]);
  return c;
}

// The slowest stage's estimated time with `split` instead of `layers`.
double slowest_stage(const std::vector<double>& busy, const std::vector<int>& layers, const std::vector<int>& split) {
  const double c = per_layer_time(busy, layers);
  double slowest = 0;
  for (std::size_t p = 0; p < layers.size(); ++p)
    slowest = std::max(slowest, split[p] * c + std::max(0.0, busy[p] - layers[p] * c));
  return slowest;
}

}  // namespace

std::vector<int> balanced_split(const std::vector<double>& busy, const std::vector<int>& layers) {
  const int P = static_cast<int>(layers.size());
  const int L = std::accumulate(layers.begin(), layers.end(), 0);
  if (P < 2 || L < P) return layers;
  const double c = per_layer_time(busy, layers);
  std::vector<double> extra(P);
  for (int p = 0; p < P; ++p) extra[p] = std::max(0.0, busy[p] - layers[p] * c);
  // best[p][l]: the smallest possible slowest-stage time of stages [0, p] holding l layers.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(P, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> choice(P, std::vector<int>(L + 1, 0));
  for (int l = 1; l <= L; ++l) best[0][l] = l * c + extra[0];
  for (int p = 1; p < P; ++p)
    for (int l = p + 1; l <= L; ++l)
      for (int mine = 1; mine <= l - p; ++mine) {
        const double t = std::max(best[p - 1][l - mine], mine * c + extra[p]);
        if (t < best[p][l]) {
          best[p][l] = t;
          choice[p][l] = mine;
        }
      }
  std::vector<int> split(P);
  int l = L;
  for (int p = P - 1; p > 0; --p) {
    split[p] = choice[p][l];
    l -= split[p];
  }
  split[0] = l;
  return split;
}

std::optional<StragglerReport> find_straggler(const std::vector<double>& busy, const std::vector<int>& layers,
                                              double measured, double theoretical) {
  const int P = static_cast<int>(busy.size());
  if (P < 2 || measured - theoretical <= kStragglerBubbleGap) return std::nullopt;
  StragglerReport r;
  r.stage = static_cast<int>(std::max_element(busy.begin(), busy.end()) - busy.begin());
  r.busy_s = busy[r.stage];
  double others = 0;
  for (int p = 0; p < P; ++p)
    if (p != r.stage) others += busy[p];
  r.others_mean_s = others / (P - 1);
  r.excess = r.others_mean_s > 0 ? r.busy_s / r.others_mean_s - 1 : 0;
  r.layers = layers;
  if (static_cast<int>(layers.size()) == P) {
    const std::vector<int> split = balanced_split(busy, layers);
    if (split != layers) r.suggested = split;
  }
  const auto join = [](const std::vector<int>& v) {
    std::string s;
    for (int x : v) {
      if (!s.empty()) s += ',';
      s += std::to_string(x);
    }
    return s;
  };
  char head[320];
  std::snprintf(head, sizeof head, "measured bubble %.1f%% is %.1f points above the theoretical %.1f%%", 100 * measured,
                100 * (measured - theoretical), 100 * theoretical);
  r.message = head;
  if (r.excess < kStragglerBubbleGap) {  // no stage computes notably more: the gap is waiting
    r.stage = -1;
    r.suggested.clear();
    std::snprintf(head, sizeof head,
                  "; the stages compute within %.0f%% of each other, so no stage is a straggler: the time goes to "
                  "waiting (transfers, or other work on the same cores)",
                  100 * r.excess);
    r.message += head;
    return r;
  }
  std::snprintf(head, sizeof head, ": stage %d is the straggler, computing %.0f%% more than the mean of the other stages "
                "(%.3g s vs %.3g s)", r.stage, 100 * r.excess, r.busy_s, r.others_mean_s);
  r.message += head;
  if (!r.suggested.empty()) {
    r.message += "; try [parallel] layers_per_stage = " + join(r.suggested) + " (now " + join(layers) + ")";
    std::snprintf(head, sizeof head, ": the slowest stage's estimated compute drops from %.3g s to %.3g s", r.busy_s,
                  slowest_stage(busy, layers, r.suggested));
    r.message += head;
  }
  else
    r.message += "; moving layers with [parallel] layers_per_stage may even the stages out";
  return r;
}

}  // namespace pipelane
