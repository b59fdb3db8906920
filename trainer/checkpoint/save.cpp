#include "trainer/checkpoint/save.h"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <filesystem>

#include "parallel/checkpoint_gather.h"
#include "trainer/checkpoint/catalog.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/staging.h"
#include "trainer/checkpoint/durable_file.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

// Rank 0, before anyone writes: an empty staging directory.
void prepare_staging(const std::string& root, const std::string& staging) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw FileError(root + ": cannot create (" + ec.message() + ")");
  clean_interrupted_saves(root);
  fs::remove_all(staging, ec);
  if (!fs::create_directory(staging, ec) || ec)
    throw FileError(staging + ": cannot create (" + (ec ? ec.message() : "exists") + ")");
  fsync_directory(root);
}

// This rank's part: what it wrote, as the JSON rank 0 lists in the manifest, or its error.
nlohmann::json write_my_files(const std::string& staging, const TrainingMemory& memory, Topology& topo,
                              const TrainingProgress& progress, const LaneStates* lanes) {
  nlohmann::json mine = nlohmann::json::object();
  try {
    if (writes_shard(topo))
      mine["shard"] = to_json(write_shard(staging, topo.me.pp, topo.me.tp, memory, progress));
    if (lanes) mine["lanes"] = to_json(write_lane_file(staging, topo.world_rank, *lanes));
  } catch (const std::exception& e) {
    mine["error"] = e.what();
  }
  return mine;
}

// Moves the complete staging directory to `final_dir`. An existing checkpoint there (a resumed
// run saving the step it resumed at, or a run resumed from an earlier checkpoint) is replaced
// atomically where the file system can exchange two names, else through final_dir.replaced
// (clean_interrupted_saves puts it back if a crash comes in between). A damaged one is kept aside.
void publish(const std::string& staging, const std::string& final_dir, const std::string& root) {
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    const bool damaged = fs::exists(fs::path(final_dir) / kManifestName, ec) && [&] {
      try {
        read_manifest(final_dir);
        return false;
      } catch (const CheckpointError&) {
        return true;
      }
    }();
    if (damaged) {
      move_aside_damaged(final_dir);
    } else if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(staging, ec);  // now the old checkpoint
      fsync_directory(root);
      return;
    } else {
      const std::string replaced = final_dir + ".replaced";
      fs::remove_all(replaced, ec);
      rename_durably(final_dir, replaced);
      rename_durably(staging, final_dir);
      fs::remove_all(replaced, ec);
      return;
    }
  }
  rename_durably(staging, final_dir);
}

// Only complete checkpoints count and only they are removed, oldest first, never `keep`.
void prune(const std::string& root, const std::string& keep, int keep_last) {
  auto all = complete_checkpoints(root);
  int kept = 1;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (fs::path(it->second) == fs::path(keep)) continue;
    if (kept < keep_last) {
      ++kept;
      continue;
    }
    std::error_code ec;
    fs::remove_all(it->second, ec);
  }
}

std::string where_to_resume(const std::string& root) {
  const auto newest = newest_complete_checkpoint(root);
  return newest ? "the newest complete checkpoint is " + *newest + " (resume = auto continues from it)"
                : "there is no complete checkpoint yet";
}

}  // namespace

std::string save_checkpoint(const std::string& root, int step, PipelineExecutor& exec, Topology& topo,
                            const TrainingProgress& progress, const GptConfig& model,
                            const CheckpointTopology& topology, const std::string& config_ini, int keep_last,
                            const LaneStates* lanes) {
  ControlPlane& world = *topo.world;
  const bool leader = topo.world_rank == 0;
  const std::string dir = (fs::path(root) / checkpoint_dir_name(step)).string();
  const std::string staging = (fs::path(root) / staging_dir_name(step)).string();
  const std::string failed = "cannot save checkpoint " + dir + ": ";

  std::string outcome;
  if (leader) {
    try {
      prepare_staging(root, staging);
    } catch (const std::exception& e) {
      outcome = failed + e.what();
    }
  }
  outcome = broadcast_from_root(world, outcome);
  if (!outcome.empty()) throw CheckpointSaveError(outcome + "; " + where_to_resume(root));

  // Under the distributed optimizer every dp rank takes part in gathering the moments, which the
  // shard files keep in the replicated layout (so any dp resumes them).
  const CheckpointView state = exec.checkpoint_view(/*gather=*/true);
  const nlohmann::json mine = write_my_files(staging, training_memory(exec, state), topo, progress, lanes);
  const std::vector<std::string> parts = gather_to_root(world, mine.dump());
  if (leader) {
    try {
      std::vector<nlohmann::json> by_rank;
      for (std::size_t r = 0; r < parts.size(); ++r) {
        by_rank.push_back(nlohmann::json::parse(parts[r]));
        if (by_rank.back().contains("error") && outcome.empty())
          outcome = failed + (parts.size() > 1 ? "rank " + std::to_string(r) + ": " : "") +
                    by_rank.back()["error"].get<std::string>();
      }
      if (outcome.empty()) {
        std::vector<ShardRecord> shards;
        for (int r : shard_writer_ranks(topo)) shards.push_back(shard_record_from_json(by_rank.at(r).at("shard")));
        std::vector<LaneFileRecord> lane_files;
        for (const nlohmann::json& part : by_rank)
          if (part.contains("lanes")) lane_files.push_back(lane_file_record_from_json(part["lanes"]));
        write_manifest(staging, make_manifest(step, model, topology, config_ini, shards, lane_files));
        fsync_directory(staging);
        publish(staging, dir, root);
        prune(root, dir, keep_last);
      }
    } catch (const std::exception& e) {
      if (outcome.empty()) outcome = failed + e.what();
    }
    if (!outcome.empty()) {
      std::error_code ec;
      fs::remove_all(staging, ec);  // every rank's partial files with it
      outcome += "; its partial files were removed; " + where_to_resume(root);
    }
  }
  outcome = broadcast_from_root(world, outcome);
  if (!outcome.empty()) throw CheckpointSaveError(outcome);
  return dir;
}

}  // namespace pipelane
