#include "parallel/gap_fit.h"

namespace pipelane {

GapFitChoice next_fitting_step(std::size_t lanes, std::size_t cursor, double elapsed_s, double budget_s,
                               const std::function<std::optional<double>(std::size_t)>& step_cost) {
  for (std::size_t k = 0; k < lanes; ++k) {
    const std::size_t index = (cursor + k) % lanes;
    const std::optional<double> cost = step_cost(index);
    if (cost && elapsed_s + *cost <= budget_s) return {index, (index + 1) % lanes, true};
  }
  return {0, cursor, false};
}

}  // namespace pipelane
