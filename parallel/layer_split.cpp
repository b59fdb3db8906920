#include "parallel/layer_split.h"

#include <sstream>
#include <stdexcept>

namespace pipelane {

std::vector<StageRange> split_layers(int layers, int pp, int virtual_stages,
                                     const std::string& explicit_counts) {
  const int parts = pp * virtual_stages;
  std::vector<int> counts;
  if (explicit_counts.empty()) {
    if (layers % parts != 0)
      throw std::invalid_argument(std::to_string(layers) + " layers cannot be split evenly over " +
                                  std::to_string(parts) + " virtual stages");
    counts.assign(parts, layers / parts);
  } else {
    std::stringstream in(explicit_counts);
    for (std::string item; std::getline(in, item, ',');) {
      try {
        std::size_t used = 0;
        const int n = std::stoi(item, &used);
        if (used != item.size() || n < 1) throw std::invalid_argument(item);
        counts.push_back(n);
      } catch (const std::exception&) {
        throw std::invalid_argument("layers_per_stage: '" + item + "' is not a positive integer");
      }
    }
    int total = 0;
    for (int n : counts) total += n;
    if (static_cast<int>(counts.size()) != parts || total != layers)
      throw std::invalid_argument("layers_per_stage = " + explicit_counts + ": expected " +
                                  std::to_string(parts) + " counts summing to " + std::to_string(layers));
  }
  std::vector<StageRange> out;
  int first = 0;
  for (int k = 0; k < parts; ++k) {
    out.push_back({first, first + counts[k], k == 0, k == parts - 1});
    first += counts[k];
  }
  return out;
}

}  // namespace pipelane
