#include "trainer/run/run_directory.h"

#include <filesystem>

namespace pipelane {

namespace fs = std::filesystem;

RunDirectory::RunDirectory(const std::string& path, const std::string& resolved_config_ini) : path_(path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw FileError(path + ": cannot create the run directory (" + ec.message() + ")");
  fs::remove(fs::path(path) / "summary.json", ec);
  for (const auto& item : fs::directory_iterator(path, ec))
    if (item.path().extension() == ".tmp" && item.is_regular_file(ec)) fs::remove(item.path(), ec);
  write_file_durably((fs::path(path) / "config.ini").string(), resolved_config_ini);
  metrics_ = AppendFile((fs::path(path) / "metrics.jsonl").string(), /*truncate=*/true);
}

void RunDirectory::append_metrics(const nlohmann::json& row) { metrics_.append(row.dump() + '\n'); }

void RunDirectory::write_summary(const RunSummary& summary) {
  write_file_durably((fs::path(path_) / "summary.json").string(), to_json(summary).dump(2) + '\n');
}

}  // namespace pipelane
