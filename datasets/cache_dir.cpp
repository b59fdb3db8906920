#include "datasets/cache_dir.h"

#include <cstdlib>
#include <filesystem>

namespace pipelane {

std::string pipelane_cache_dir(const char* env_var, const std::string& leaf) {
  if (const char* dir = std::getenv(env_var); dir && *dir) return dir;
  std::filesystem::path cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) cache = xdg;
  else if (const char* home = std::getenv("HOME"); home && *home) cache = std::filesystem::path(home) / ".cache";
  else cache = ".cache";
  return (cache / "pipelane" / leaf).string();
}

}  // namespace pipelane
