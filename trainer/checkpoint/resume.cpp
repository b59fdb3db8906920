#include "trainer/checkpoint/resume.h"

#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "parallel/checkpoint_gather.h"
#include "trainer/checkpoint/catalog.h"
#include "trainer/checkpoint/reader.h"
#include "trainer/checkpoint/durable_file.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

// The files a run leaves at the top of its directory, archived with its checkpoints when a fresh
// run takes the directory over.
constexpr const char* kRunFiles[] = {"metrics.jsonl", "metrics.jsonl.resume", "config.ini", "summary.json",
                                     "trace.json", "samples.jsonl"};

std::string step_range(const std::vector<CheckpointEntry>& entries) {
  const std::string first = fs::path(entries.front().dir).filename().string();
  const std::string last = fs::path(entries.back().dir).filename().string();
  return entries.size() == 1 ? first : first + " .. " + last;
}

std::string count_text(std::size_t n) { return std::to_string(n) + (n == 1 ? " checkpoint" : " checkpoints"); }

// A new <run dir>/archive/<UTC time>[-N] directory.
std::string new_archive_dir(const std::string& run_dir) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
  const fs::path base = fs::path(run_dir) / "archive" / stamp;
  fs::path dir = base;
  std::error_code ec;
  for (int n = 2; fs::exists(dir, ec); ++n) dir = base.string() + "-" + std::to_string(n);
  fs::create_directories(checkpoints_root(dir.string()), ec);
  if (ec) throw CheckpointError(dir.string() + ": cannot create the archive (" + ec.message() + ")");
  return dir.string();
}

// Moves `entries` (and, for a run taking the directory over, everything else under the
// checkpoints root and the earlier run's files) into a new archive directory; returns the note.
std::string archive(const std::string& run_dir, const std::vector<CheckpointEntry>& entries, bool whole_run) {
  const std::string dest = new_archive_dir(run_dir);
  const auto move = [&](const fs::path& from, const fs::path& to) {
    std::error_code ec;
    fs::rename(from, to, ec);
    if (ec) throw CheckpointError(from.string() + ": cannot move it into the archive " + dest + " (" + ec.message() + ")");
  };
  std::vector<std::string> moved;
  if (whole_run) {
    std::error_code ec;
    for (const auto& item : fs::directory_iterator(checkpoints_root(run_dir), ec))
      move(item.path(), fs::path(checkpoints_root(dest)) / item.path().filename());
    for (const char* name : kRunFiles)
      if (fs::exists(fs::path(run_dir) / name, ec)) {
        move(fs::path(run_dir) / name, fs::path(dest) / name);
        moved.push_back(name);
      }
  } else {
    for (const CheckpointEntry& e : entries) move(e.dir, fs::path(checkpoints_root(dest)) / fs::path(e.dir).filename());
  }
  fsync_directory(run_dir);
  std::string note = "archived " + count_text(entries.size()) + " (" + step_range(entries) + ")";
  if (!moved.empty()) {
    note += " and the earlier run's";
    for (std::size_t i = 0; i < moved.size(); ++i) note += (i ? ", " : " ") + moved[i];
  }
  return note + " to " + dest;
}

std::string fallback_from(const std::vector<CheckpointEntry>& older) {
  for (auto it = older.rbegin(); it != older.rend(); ++it)
    if (it->state == CheckpointState::Complete)
      return "--run.resume=auto-skip-damaged moves damaged checkpoints aside (keeping them) and resumes from the "
             "newest intact one (" + it->dir + " is the previous complete checkpoint)";
  return "there is no earlier complete checkpoint to fall back on";
}

ResumePlan newest(const ResumeRequest& q, const std::string& root, std::vector<CheckpointEntry> entries,
                  ResumePlan plan) {
  const bool skip_damaged = q.resume == "auto-skip-damaged";
  const std::size_t found = entries.size();
  while (!entries.empty()) {
    const CheckpointEntry newest = entries.back();
    entries.pop_back();
    if (skip_damaged) {
      try {
        verify_checkpoint(newest.dir);
      } catch (const CheckpointError& e) {
        const std::string aside = move_aside_damaged(newest.dir);
        plan.notes.push_back("skipped damaged checkpoint " + newest.dir + " (" + e.what() + "); kept it as " + aside);
        continue;
      }
    } else if (newest.state == CheckpointState::Damaged) {
      throw CheckpointError(newest.problem + "; resume = auto stops here instead of starting over (nothing was "
                            "changed); " + fallback_from(entries));
    }
    plan.dir = newest.dir;
    plan.fallback = fallback_from(entries);
    return plan;
  }
  if (found > 0)
    throw CheckpointError("[run] resume = " + q.resume + ": no intact checkpoint left under " + root +
                          " (the damaged ones were moved aside); resume = none starts over");
  return plan;
}

// Before anything is cleaned up: an interrupted save named here is an error, not a leftover.
void check_resume_path(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw CheckpointError("[run] resume = " + path + ": no such checkpoint directory");
  if (!fs::exists(fs::path(path) / kManifestName, ec))
    throw CheckpointError("[run] resume = " + path +
                          ": not a complete checkpoint (no manifest.json; an interrupted save?)");
}

ResumePlan from_path(const ResumeRequest& q, const std::string& root, const std::vector<CheckpointEntry>& entries,
                     ResumePlan plan) {
  const std::string& path = q.resume;
  std::error_code ec;
  const int step = read_manifest(path).step;
  const bool inside = fs::equivalent(fs::path(path).parent_path(), root, ec);
  std::vector<CheckpointEntry> conflicts;
  for (const CheckpointEntry& e : entries)
    if (!fs::equivalent(e.dir, path, ec) && (!inside || e.step > step)) conflicts.push_back(e);
  if (!conflicts.empty()) {
    if (q.overwrite != "archive")
      throw CheckpointError("[run] resume = " + path + ", but " + root + " holds " + count_text(conflicts.size()) +
                            " (" + step_range(conflicts) + ") that this run would overwrite or mix with: resume = "
                            "auto continues the run they belong to; use another [run] dir, or "
                            "--run.overwrite=archive to move them into " + q.run_dir + "/archive/");
    plan.notes.push_back(archive(q.run_dir, conflicts, false));
  }
  plan.dir = path;
  plan.fallback = "choose another checkpoint with --run.resume=PATH";
  return plan;
}

}  // namespace

void verify_checkpoint(const std::string& dir) { CheckpointReader(dir).verify_files(); }

ResumePlan decide_resume(const ResumeRequest& q) {
  const std::string root = checkpoints_root(q.run_dir);
  const bool auto_mode = q.resume == "auto" || q.resume == "auto-skip-damaged" || q.resume.empty();
  if (!auto_mode && q.resume != "none") check_resume_path(q.resume);
  ResumePlan plan;
  for (const std::string& left : clean_interrupted_saves(root))
    plan.notes.push_back("removed " + left + " (left by an interrupted save)");
  const std::vector<CheckpointEntry> entries = list_checkpoints(root);
  if (q.resume == "none") {
    if (entries.empty()) return plan;
    if (q.overwrite != "archive")
      throw CheckpointError("[run] resume = none, but " + root + " holds " + count_text(entries.size()) + " (" +
                            step_range(entries) + ") of an earlier run: resume = auto continues it; use another "
                            "[run] dir, or --run.overwrite=archive to move them (with that run's metrics) into " +
                            q.run_dir + "/archive/");
    plan.notes.push_back(archive(q.run_dir, entries, true));
    return plan;
  }
  if (auto_mode) return newest(q, root, entries, std::move(plan));
  return from_path(q, root, entries, std::move(plan));
}

ResumePlan plan_resume(const ResumeRequest& request, ControlPlane& world) {
  nlohmann::json decided;
  if (world.rank() == 0) {
    try {
      const ResumePlan p = decide_resume(request);
      decided = {{"dir", p.dir ? nlohmann::json(*p.dir) : nlohmann::json(nullptr)},
                 {"fallback", p.fallback},
                 {"notes", p.notes}};
    } catch (const std::exception& e) {
      decided = {{"error", e.what()}};
    }
  }
  decided = nlohmann::json::parse(broadcast_from_root(world, world.rank() == 0 ? decided.dump() : ""));
  if (decided.contains("error")) throw CheckpointError(decided["error"].get<std::string>());
  ResumePlan plan;
  if (!decided["dir"].is_null()) plan.dir = decided["dir"].get<std::string>();
  plan.fallback = decided["fallback"].get<std::string>();
  plan.notes = decided["notes"].get<std::vector<std::string>>();
  return plan;
}

}  // namespace pipelane
