// Reads a checkpoint by tensor name, whatever grid saved it: tensors are reassembled from their
// tensor-parallel slices and sliced again for the reader's layout.
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gpt_config.h"
#include "model/gpt_layout.h"
#include "trainer/checkpoint/lane_file.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/progress.h"
#include "trainer/checkpoint/shard_file.h"

namespace pipelane {

// Receives this rank's slice of tensor `e` of group `g` in a host staging buffer (e.numel floats):
// the one door through which checkpoint data enters training memory (trainer/checkpoint/staging.h).
using StageTensorIn = std::function<void(TensorGroup g, const ParamEntry& e, const float* staging)>;

// The constructor checks the manifest (trainer/checkpoint/manifest.h) and that every listed file
// is a regular file inside the directory with the recorded size; each shard's CRC is checked the
// first time it is opened, a lane file's when it is read. Every tensor's metadata is checked
// against its stored shape and against the reader's layout before anything is copied. Errors are
// CheckpointError with one line naming the directory or file.
class CheckpointReader {
 public:
  explicit CheckpointReader(std::string dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& dir() const { return dir_; }
  const nlohmann::json& manifest() const { return manifest_.json; }
  int step() const { return manifest_.step; }
  GptConfig model() const { return manifest_.model; }
  // CheckpointError naming the first differing key ("saved with d_model = 32 but [model] d_model = 64").
  void check_model(const GptConfig& expected) const;
  TrainingProgress progress();
  std::vector<std::string> tensor_names() const;
  // The full (unsharded) tensor; `group` is "params", "adam_m" or "adam_v".
  std::vector<float> full_tensor(const std::string& group, const std::string& name,
                                 std::vector<std::int64_t>* full_shape = nullptr);
  // Every tensor of `layout` in `groups`, sliced for the layout's tp, handed to `stage_in`.
  void load_into(const ParamLayout& layout, const std::vector<TensorGroup>& groups, const StageTensorIn& stage_in);
  // The same into host buffers laid out by `layout` (any of them may be null).
  void load_into(const ParamLayout& layout, float* params, float* adam_m, float* adam_v);
  // CheckpointError unless every listed file has its recorded CRC-32 (reads every byte).
  void verify_files() const;
  // The lane state saved by `world_rank` (its CRC checked); nullopt when that rank saved none.
  bool has_lane_state() const { return !manifest_.lane_files.empty(); }
  std::optional<LaneStates> lane_states(int world_rank) const;

 private:
  const ShardFileReader& open(const ShardRecord& shard);
  std::string dir_;
  Manifest manifest_;
  std::vector<std::pair<std::string, std::unique_ptr<ShardFileReader>>> open_;
};

}  // namespace pipelane
