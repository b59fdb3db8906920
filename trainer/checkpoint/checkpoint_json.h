// Reading numbers out of checkpoint JSON (manifests, the training progress) without trusting it:
// an integer must be an integer in range, a number must be finite. Throws std::out_of_range with
// the key named; the caller adds the file.
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace pipelane {

// A value as JSON text, cut short: error messages stay one short line whatever the file holds.
inline std::string brief(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

inline std::int64_t json_integer(const nlohmann::json& j, const char* key, std::int64_t lo, std::int64_t hi) {
  const nlohmann::json& v = j.at(key);
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (hi >= 0 && u <= static_cast<std::uint64_t>(hi) && (lo <= 0 || u >= static_cast<std::uint64_t>(lo)))
      return static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    const std::int64_t i = v.get<std::int64_t>();
    if (i >= lo && i <= hi) return i;
  } else {
    throw std::out_of_range(std::string("'") + key + "' is not an integer");
  }
  throw std::out_of_range(std::string("'") + key + "' = " + brief(v) + " is outside [" + std::to_string(lo) +
                          ", " + std::to_string(hi) + "]");
}

inline double json_finite(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    throw std::out_of_range(std::string("'") + key + "' is not a finite number");
  return v.get<double>();
}

}  // namespace pipelane
