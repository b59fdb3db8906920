#include "trainer/checkpoint/progress.h"

#include <limits>

#include "trainer/checkpoint/checkpoint_json.h"

namespace pipelane {

nlohmann::json to_json(const TrainingProgress& p) {
  return {{"step", p.step},
          {"lr_schedule", p.lr_schedule},
          {"sampler", {{"kind", p.sampler.kind}, {"words", p.sampler.words}}},
          {"guard",
           {{"consecutive_bad", p.guard.consecutive_bad},
            {"skipped_nonfinite", p.guard.skipped_nonfinite},
            {"skipped_spike", p.guard.skipped_spike},
            {"loss_count", p.guard.loss_count},
            {"loss_mean", p.guard.loss_mean},
            {"loss_var", p.guard.loss_var}}}};
}

TrainingProgress progress_from_json(const nlohmann::json& j) {
  TrainingProgress p;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  p.step = static_cast<int>(json_integer(j, "step", 0, std::numeric_limits<int>::max()));
  p.lr_schedule = j.value("lr_schedule", nlohmann::json::object());
  p.sampler.kind = j.at("sampler").at("kind").get<std::string>();
  p.sampler.words = j.at("sampler").at("words").get<std::vector<std::uint64_t>>();
  const auto& g = j.at("guard");
  p.guard.consecutive_bad = json_integer(g, "consecutive_bad", 0, kMax);
  p.guard.skipped_nonfinite = json_integer(g, "skipped_nonfinite", 0, kMax);
  p.guard.skipped_spike = json_integer(g, "skipped_spike", 0, kMax);
  p.guard.loss_count = json_integer(g, "loss_count", 0, kMax);
  p.guard.loss_mean = json_finite(g, "loss_mean");
  p.guard.loss_var = json_finite(g, "loss_var");
  return p;
}

}  // namespace pipelane
