// Checkpoints: one HDF5 file per (pp, tp) shard plus a JSON manifest, written crash-safely, read
// back at any (pp, tp) by tensor name.
//
// A checkpoint is a directory <run dir>/checkpoints/step_00000120/ holding
//   model_pp00_tp00.h5 ...   one per (pp, tp) rank of the saving grid (dp rank 0 writes it)
//   lanes_rank0003.bin ...   one per world rank that runs side-task lanes (that rank writes it)
//   manifest.json            written last: config, topology, versions, every file's size + CRC-32
// Every file is written as NAME.tmp, fsync'd, renamed and the directory fsync'd, so a crash leaves
// either the old file or the complete new one. The checkpoint exists only once manifest.json
// exists: a directory without one is an interrupted save, ignored by `resume = auto` and removed by
// the next save. Older checkpoints are pruned (keep_last) only after a newer manifest is durable.
//
// Shard file (HDF5):
//   /            attributes format = "pipelane-checkpoint", version = 1, step, pp_rank, tp_rank
//   /params/NAME, /adam_m/NAME, /adam_v/NAME
//                float32 datasets, this rank's slice, NAME as in model/gpt_layout.h
//                ("h.3.attn.c_attn.weight"); attributes full_shape, shard_dim, shard_blocks,
//                tp_rank, tp_size (the ParamEntry fields, so any reader can reassemble the full
//                tensor with gather_full_tensor). A tensor held by two chunks of one rank (the tied
//                wte) is stored once.
//   /state       attribute progress: JSON of TrainingProgress (step, LR-schedule parameters and
//                the LR of the next step, sampler state, numerical-fault counters)
//   /lanes       reserved, empty: lane state is per world rank (dp replicas run their own lanes),
//                so it lives in the lane files below, not in the per-(pp, tp) shards.
//
// Lane file lanes_rankNNNN.bin (NNNN = world rank), written by every rank whose lanes are on:
//   "PLLANES1"   8-byte magic
//   u32 count, then count x (u32 length + bytes): the lane names configured on the rank, in order
//   u32 count, then count x (u32 name length + name, u64 state length + state): Lane::save() of
//                every lane that was set up and not quarantined (GapScheduler::save_lanes()); the
//                state bytes are opaque. Integers little-endian.
// The manifest lists them under "lane_files" ({file, rank, bytes, crc32, lanes}); rank 0 writes
// the manifest only after every rank reported its lane file durable, so a complete checkpoint has
// all of them. Checkpoints without "lane_files" (older, or saved with lanes off) carry no lane
// state. On restore a rank loads its own file (same world rank) only when the grid (tp, pp, dp) and
// its configured lane names equal the saving run's; otherwise lane state is skipped with one logged
// line per rank and the lanes start fresh (training state restores either way).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gpt_config.h"
#include "model/gpt_layout.h"
#include "parallel/pipeline_executor.h"

namespace pipelane {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where a data sampler is, as opaque words its owner can restore from. `kind` names the format
// so a different sampler refuses a state it cannot read.
struct CheckpointSamplerState {
  std::string kind;
  std::vector<std::uint64_t> words;
};

// Numerical-fault bookkeeping (trainer/checkpoint_numerics.h), saved so resume is exact.
struct StepGuardState {
  std::int64_t consecutive_bad = 0;
  std::int64_t skipped_nonfinite = 0;
  std::int64_t skipped_spike = 0;
  std::int64_t loss_count = 0;  // applied steps seen by the spike detector
  double loss_mean = 0, loss_var = 0;
};

// Everything besides tensors a resumed run needs to continue exactly.
struct TrainingProgress {
  int step = 0;  // optimizer steps completed; AdamW's next t is step + 1
  nlohmann::json lr_schedule;  // {lr, min_lr, warmup_steps, steps, next_lr}: informational
  CheckpointSamplerState sampler;
  StepGuardState guard;
};
nlohmann::json to_json(const TrainingProgress& p);
TrainingProgress progress_from_json(const nlohmann::json& j);

std::string checkpoint_dir_name(int step);        // "step_00000120"
std::string shard_file_name(int pp, int tp);      // "model_pp00_tp00.h5"
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr int kCheckpointVersion = 1;

// Complete checkpoints under `root` (manifest present and parsable), oldest first: (step, dir).
std::vector<std::pair<int, std::string>> complete_checkpoints(const std::string& root);
std::optional<std::string> newest_complete_checkpoint(const std::string& root);

// Durable small-file write: PATH.tmp, fsync, rename, fsync the directory.
void write_file_durably(const std::string& path, const std::string& bytes);
std::uint32_t file_crc32(const std::string& path);

struct ShardRecord {
  std::string file;  // name inside the checkpoint directory
  int pp = 0, tp = 0;
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
  std::vector<std::string> tensors;
};

// Writes one shard file durably (tmp + fsync + rename) and describes it for the manifest.
ShardRecord write_shard(const std::string& dir, int pp_rank, int tp_rank,
                        const std::vector<ChunkState>& chunks, const TrainingProgress& progress);

// One rank's lanes: the lane names configured on it (in order) and lane name -> Lane::save().
struct LaneStates {
  std::vector<std::string> lanes;
  std::map<std::string, std::string> states;
};

std::string lane_file_name(int world_rank);  // "lanes_rank0003.bin"

struct LaneFileRecord {
  std::string file;  // name inside the checkpoint directory
  int rank = 0;      // world rank
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
  std::vector<std::string> lanes;  // configured lane names
};

// Writes one rank's lane file durably (tmp + fsync + rename) and describes it for the manifest.
LaneFileRecord write_lane_file(const std::string& dir, int world_rank, const LaneStates& lanes);
std::string encode_lane_states(const LaneStates& lanes);
LaneStates decode_lane_states(const std::string& bytes);  // CheckpointError when malformed

// The manifest: written last, by one process, once every shard and lane file listed is durable.
nlohmann::json make_manifest(int step, const GptConfig& model, const nlohmann::json& topology,
                             const std::string& config_ini, const std::vector<ShardRecord>& shards,
                             const std::vector<LaneFileRecord>& lane_files = {});
void write_manifest(const std::string& dir, const nlohmann::json& manifest);

// Reads a checkpoint by tensor name, whatever grid saved it. The constructor checks the manifest
// and that every listed shard file exists with the recorded size; each file's CRC is checked the
// first time it is opened. Errors are CheckpointError with one line naming the directory.
class CheckpointReader {
 public:
  explicit CheckpointReader(std::string dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& dir() const { return dir_; }
  const nlohmann::json& manifest() const { return manifest_; }
  int step() const;
  GptConfig model() const;
  // CheckpointError naming the first differing key ("saved with d_model = 32 but [model] d_model = 64").
  void check_model(const GptConfig& expected) const;
  TrainingProgress progress();
  std::vector<std::string> tensor_names() const;
  // The full (unsharded) tensor; `group` is "params", "adam_m" or "adam_v".
  std::vector<float> full_tensor(const std::string& group, const std::string& name,
                                 std::vector<std::int64_t>* full_shape = nullptr);
  // Fills this layout's params / moments (any of them may be null) by name, slicing for its tp.
  void load_into(const ParamLayout& layout, float* params, float* adam_m, float* adam_v);
  // The lane state saved by `world_rank` (its CRC checked); nullopt when that rank saved none.
  bool has_lane_state() const { return !lane_files_.empty(); }
  std::optional<LaneStates> lane_states(int world_rank) const;

 private:
  struct OpenFile;
  OpenFile& open(const std::string& file);
  std::string dir_;
  nlohmann::json manifest_;
  std::vector<ShardRecord> shards_;
  std::vector<LaneFileRecord> lane_files_;
  std::vector<std::unique_ptr<OpenFile>> open_;
};

// Collective over `topo.world`: every (pp, tp) rank with dp rank 0 writes its shard into
// root/step_XXXXXXXX, every rank with `lanes` writes its lane file, rank 0 writes the manifest
// after all shards and lane files are durable, then prunes to `keep_last` complete checkpoints
// (never the new one). An existing complete checkpoint of the same step is left as it is. Returns
// the checkpoint directory. `lanes`: this rank's lane state, null when its lanes are off.
std::string save_checkpoint(const std::string& root, int step, PipelineExecutor& exec,
                            Topology& topo, const TrainingProgress& progress,
                            const GptConfig& model, const nlohmann::json& topology,
                            const std::string& config_ini, int keep_last,
                            const LaneStates* lanes = nullptr);

// `resume` is "auto" (newest complete checkpoint under root, if any), "none", or a checkpoint
// directory (CheckpointError when it is not a complete checkpoint). nullopt: start fresh.
std::optional<std::string> resolve_resume(const std::string& resume, const std::string& root);

}  // namespace pipelane
