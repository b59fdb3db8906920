// The shard file of one (pp, tp) rank: an HDF5 file holding that rank's slice of every tensor it
// owns (parameters and both AdamW moments) with its tensor-parallel slicing, and the training
// progress. The layout is described at the top of trainer/checkpoint/checkpoint.h.
//
// Writing goes through a StageTensorOut: the only way tensor data leaves training memory is a
// copy into a host staging buffer (trainer/checkpoint/staging.h), so training state that lives in
// device memory needs a device-to-host copy there and nowhere else.
//
// Reading trusts nothing: every attribute is type-, count- and range-checked, the stored shape must
// agree with the slicing the attributes claim, and the stored bytes must cover the declared shape,
// all before anything is allocated or copied.
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers
#include <functional>
#include <string>
#include <vector>

#include "datasets/hdf5_handle.h"
#include "model/gpt_layout.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/progress.h"

namespace pipelane {

enum class TensorGroup { Params, AdamM, AdamV };
inline constexpr TensorGroup kTensorGroups[] = {TensorGroup::Params, TensorGroup::AdamM, TensorGroup::AdamV};
const char* group_name(TensorGroup g);  // "params", "adam_m", "adam_v": the HDF5 group
// "params" -> Params...; CheckpointError for any other name.
TensorGroup parse_tensor_group(const std::string& name);

// Copies this rank's slice of tensor `e` in group `g` into `staging` (e.numel floats).
using StageTensorOut = std::function<void(TensorGroup g, const ParamEntry& e, float* staging)>;

// Writes DIR/model_ppXX_tpYY.h5 (fsync'd) holding `tensors` (each once, in order) and describes it
// for the manifest. On failure the partial file is removed and CheckpointError names the file and
// the system's reason (a full disk says "No space left on device").
ShardRecord write_shard(const std::string& dir, int pp_rank, int tp_rank,
                        const std::vector<const ParamEntry*>& tensors, const StageTensorOut& stage_out,
                        const TrainingProgress& progress);

// One tensor as a shard stores it: its slicing (ParamEntry fields from the attributes, offset 0)
// and this rank's data (entry.numel floats).
struct StoredTensor {
  ParamEntry entry;
  std::vector<float> data;
};

// Errors are CheckpointError with one line naming the file and object.
class ShardFileReader {
 public:
  explicit ShardFileReader(const std::string& path);
  const std::string& path() const { return path_; }
  TrainingProgress progress() const;
  StoredTensor tensor(TensorGroup g, const std::string& name) const;

 private:
  std::string path_;
  hdf5::File file_;
};

}  // namespace pipelane
