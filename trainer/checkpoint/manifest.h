// The manifest of a checkpoint (manifest.json, written last): what the checkpoint holds, every
// file with its size and CRC-32, and the names of those files. Reading it trusts nothing: every
// field is type- and range-checked, file names must be plain names inside the checkpoint
// directory (no '/', no "..", no absolute paths), every (pp, tp) shard is listed exactly once and
// the model it claims must fit in the bytes its files hold.
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gpt_config.h"
#include "trainer/checkpoint/checkpoint_error.h"

namespace pipelane {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kCheckpointFormat = "pipelane-checkpoint";
inline constexpr int kCheckpointVersion = 1;

std::string checkpoint_dir_name(int step);    // "step_00000120"
std::string shard_file_name(int pp, int tp);  // "model_pp00_tp00.h5"
std::string lane_file_name(int world_rank);   // "lanes_rank0003.bin"
// "step_00000120" -> 120; false for any other name (also "step_00000120.saving").
bool parse_checkpoint_dir_name(const std::string& name, int* step);
// A name that stays inside the directory it is joined to: not empty, no '/', not "." or "..",
// no control characters.
bool is_plain_file_name(const std::string& name);

struct ShardRecord {
  std::string file;  // name inside the checkpoint directory
  int pp = 0, tp = 0;
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
  std::vector<std::string> tensors;
};

struct LaneFileRecord {
  std::string file;  // name inside the checkpoint directory
  int rank = 0;      // world rank
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
  std::vector<std::string> lanes;  // configured lane names
};

// As listed in the manifest (crc32 as 8 hex digits). The *_from_json readers check every field and
// throw std::exception subclasses naming the key; the caller names the file.
nlohmann::json to_json(const ShardRecord& r);
nlohmann::json to_json(const LaneFileRecord& r);
ShardRecord shard_record_from_json(const nlohmann::json& j);
LaneFileRecord lane_file_record_from_json(const nlohmann::json& j);

// The grid and schedule that saved a checkpoint: the manifest's "topology".
struct CheckpointTopology {
  int tp = 1, pp = 1, dp = 1;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  std::string layers_per_stage;  // [parallel] layers_per_stage as configured ("" when even)
  std::string imported_from;     // `pipelane import`'s source directory; "" (not written) otherwise
};
nlohmann::json to_json(const CheckpointTopology& t);

// The manifest: written last, by one process, once every shard and lane file listed is durable.
nlohmann::json make_manifest(int step, const GptConfig& model, const CheckpointTopology& topology,
                             const std::string& config_ini, const std::vector<ShardRecord>& shards,
                             const std::vector<LaneFileRecord>& lane_files = {});
void write_manifest(const std::string& dir, const nlohmann::json& manifest);

struct Manifest {
  nlohmann::json json;  // as read, for what the typed fields leave out (config, topology, versions)
  int step = 0;
  GptConfig model;
  int pp = 1, tp = 1;  // the grid that saved it
  std::vector<ShardRecord> shards;
  std::vector<LaneFileRecord> lane_files;  // empty in checkpoints saved with lanes off (or older)
};

// Reads and checks DIR/manifest.json (not the files it lists). CheckpointError naming the manifest
// when it is missing, not JSON, not marked complete or malformed in any field.
Manifest read_manifest(const std::string& dir);
// The same checks on an already parsed manifest; `where` names it in errors.
Manifest parse_manifest(const nlohmann::json& j, const std::string& where);

}  // namespace pipelane
