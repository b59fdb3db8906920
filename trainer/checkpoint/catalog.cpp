#include "trainer/checkpoint/catalog.h"

#include <algorithm>
#include <filesystem>

#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/durable_file.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStagingSuffix = ".saving";
constexpr const char* kReplacedSuffix = ".replaced";
constexpr const char* kDamagedSuffix = ".damaged";

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<CheckpointEntry> list_checkpoints(const std::string& root) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& item : fs::directory_iterator(root, ec)) {
    CheckpointEntry e;
    if (!item.is_directory(ec) || !parse_checkpoint_dir_name(item.path().filename().string(), &e.step)) continue;
    e.dir = item.path().string();
    if (!fs::exists(item.path() / kManifestName, ec)) {
      e.state = CheckpointState::Interrupted;
    } else {
      try {
        read_manifest(e.dir);
        e.state = CheckpointState::Complete;
      } catch (const CheckpointError& err) {
        e.state = CheckpointState::Damaged;
        e.problem = err.what();
      }
    }
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::vector<std::pair<int, std::string>> complete_checkpoints(const std::string& root) {
  std::vector<std::pair<int, std::string>> out;
  for (const CheckpointEntry& e : list_checkpoints(root))
    if (e.state == CheckpointState::Complete) out.emplace_back(e.step, e.dir);
  return out;
}

std::optional<std::string> newest_complete_checkpoint(const std::string& root) {
  auto all = complete_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::string checkpoint_of(const std::string& path) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / kManifestName, ec)) return path;
  return newest_complete_checkpoint(checkpoints_root(path)).value_or(path);
}

std::string checkpoints_root(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoints").string(); }

std::string staging_dir_name(int step) { return checkpoint_dir_name(step) + kStagingSuffix; }

std::vector<std::string> clean_interrupted_saves(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  std::vector<fs::path> items;
  for (const auto& item : fs::directory_iterator(root, ec)) items.push_back(item.path());
  std::sort(items.begin(), items.end());
  const auto remove = [&](const fs::path& p) {
    std::error_code rc;
    if (fs::remove_all(p, rc) > 0 && !rc) removed.push_back(p.string());
  };
  for (const fs::path& p : items) {
    const std::string name = p.filename().string();
    int step = 0;
    if (has_suffix(name, kReplacedSuffix)) {
      const fs::path original = fs::path(root) / (name.substr(0, name.size() - std::string(kReplacedSuffix).size()));
      if (!fs::exists(original, ec)) {
        fs::rename(p, original, ec);  // the replacement never arrived: the old checkpoint is back
        if (!ec) continue;
      }
      remove(p);
    } else if (has_suffix(name, kStagingSuffix)) {
      remove(p);
    } else if (parse_checkpoint_dir_name(name, &step) && fs::is_directory(p, ec) &&
               !fs::exists(p / kManifestName, ec)) {
      remove(p);
    }
  }
  if (!removed.empty()) fsync_directory(root);
  return removed;
}

std::string move_aside_damaged(const std::string& dir) {
  std::string aside = dir + kDamagedSuffix;
  std::error_code ec;
  for (int n = 2; fs::exists(aside, ec); ++n) aside = dir + kDamagedSuffix + "-" + std::to_string(n);
  rename_durably(dir, aside);
  return aside;
}

}  // namespace pipelane
