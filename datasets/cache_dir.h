// Where fetched tokenizer files live: outside git, per user.
#pragma once
#include <string>

namespace pipelane {

// ${env_var} if set and not empty, else ${XDG_CACHE_HOME:-$HOME/.cache}/pipelane/<leaf>.
std::string pipelane_cache_dir(const char* env_var, const std::string& leaf);

}  // namespace pipelane
