#include "trainer/run_directory.h"

#include <filesystem>
#include <stdexcept>

namespace pipelane {

namespace fs = std::filesystem;

RunDirectory::RunDirectory(const std::string& path, const std::string& resolved_config_ini)
    : path_(path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw std::runtime_error(path + ": cannot create the run directory (" + ec.message() + ")");
  fs::remove(fs::path(path) / "summary.json", ec);
  std::ofstream cfg(fs::path(path) / "config.ini");
  cfg << resolved_config_ini;
  if (!cfg) throw std::runtime_error(path + "/config.ini: cannot write");
  metrics_.open(fs::path(path) / "metrics.jsonl", std::ios::trunc);
  if (!metrics_) throw std::runtime_error(path + "/metrics.jsonl: cannot write");
}

void RunDirectory::append_metrics(const nlohmann::json& row) {
  metrics_ << row.dump() << '\n';
  metrics_.flush();
}

void RunDirectory::write_summary(const nlohmann::json& summary) {
  const fs::path final_path = fs::path(path_) / "summary.json";
  const fs::path tmp = fs::path(path_) / "summary.json.tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << summary.dump(2) << '\n';
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write");
  }
  fs::rename(tmp, final_path);
}

}  // namespace pipelane
