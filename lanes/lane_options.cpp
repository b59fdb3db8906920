#include <cerrno>
#include <cstdlib>

#include "lanes/lane.h"

namespace pipelane {

std::string LaneOptions::where(const std::string& key) const {
  return (source_.empty() ? std::string("config") : source_) + ": [lane." + lane_ + "] " + key;
}

std::string LaneOptions::get_string(const std::string& key, const std::string& fallback) const {
  used_.insert(key);
  const auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

std::int64_t LaneOptions::get_int(const std::string& key, std::int64_t fallback,
                                  std::int64_t min_value, std::int64_t max_value) const {
  used_.insert(key);
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || errno != 0)
    throw LaneError(where(key) + " = '" + it->second + "': expected an integer");
  if (v < min_value || v > max_value)
    throw LaneError(where(key) + " = " + it->second + ": expected an integer in [" +
                    std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  return v;
}

double LaneOptions::get_double(const std::string& key, double fallback, double min_value,
                               double max_value) const {
  used_.insert(key);
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || errno != 0)
    throw LaneError(where(key) + " = '" + it->second + "': expected a number");
  if (v < min_value || v > max_value)
    throw LaneError(where(key) + " = " + it->second + ": expected a number in [" +
                    std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  return v;
}

bool LaneOptions::get_bool(const std::string& key, bool fallback) const {
  used_.insert(key);
  const auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (it->second == "true" || it->second == "on" || it->second == "1") return true;
  if (it->second == "false" || it->second == "off" || it->second == "0") return false;
  throw LaneError(where(key) + " = '" + it->second + "': expected true or false");
}

void LaneOptions::reject_unknown() const {
  for (const auto& [key, value] : values_)
    if (!used_.count(key)) throw LaneError(where(key) + ": unknown key for lane '" + lane_ + "'");
}

}  // namespace pipelane
