// TokenStore::open: the one place that knows every token file format, and sends a file to its
// reader by its name (importers.h: Megatron and llm.c files; else token_store.cpp: the HDF5 token
// store). Neither reader knows the other, nor this dispatch.
#include <filesystem>
#include <new>

#include "datasets/data_error.h"
#include "datasets/importers.h"
#include "datasets/token_store.h"

namespace pipelane {

TokenStore TokenStore::open(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !is_imported_format(path))
    throw DataError(path + ": no such file (run 'pipelane prepare-data' first)");
  try {
    if (is_imported_format(path)) return import_token_file(path);
    return open_hdf5(path);
  } catch (const std::bad_alloc&) {  // what HDF5 reads is checked before; this is the rest
    const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
    throw DataError(path + ": out of memory loading the token file" +
                    (ec ? std::string() : " (" + std::to_string(bytes >> 20) + " MiB on disk)"));
  }
}

}  // namespace pipelane
