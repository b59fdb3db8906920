#include "trainer/checkpoint/reader.h"

#include "trainer/checkpoint/model_json.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "trainer/checkpoint/durable_file.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// A file the manifest lists: a regular file (not a link that could lead out of the directory)
// with the recorded size.
void check_listed_file(const std::string& dir, const std::string& file, std::uint64_t bytes, const std::string& kind,
                       const std::string& listed) {
  const fs::path p = fs::path(dir) / file;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  if (ec || st.type() == fs::file_type::not_found)
    throw CheckpointError(dir + ": " + kind + " " + file + " is missing (the manifest lists " + listed + ")");
  if (st.type() != fs::file_type::regular)
    throw CheckpointError(p.string() + ": not a regular file (checkpoint files may not be links or directories)");
  const std::uint64_t size = fs::file_size(p, ec);
  if (ec || size != bytes)
    throw CheckpointError(p.string() + ": truncated or damaged: " + std::to_string(size) +
                          " bytes, the manifest records " + std::to_string(bytes));
}

}  // namespace

CheckpointReader::CheckpointReader(std::string dir) : dir_(std::move(dir)) {
  manifest_ = read_manifest(dir_);
  for (const ShardRecord& r : manifest_.shards)
    check_listed_file(dir_, r.file, r.bytes, "shard", std::to_string(manifest_.shards.size()) + " shard files");
  for (const LaneFileRecord& r : manifest_.lane_files)
    check_listed_file(dir_, r.file, r.bytes, "lane file", std::to_string(manifest_.lane_files.size()) + " lane files");
}

CheckpointReader::~CheckpointReader() = default;

std::optional<LaneStates> CheckpointReader::lane_states(int world_rank) const {
  for (const LaneFileRecord& r : manifest_.lane_files)
    if (r.rank == world_rank) return read_lane_file(dir_, r);
  return std::nullopt;
}

void CheckpointReader::check_model(const GptConfig& e) const {
  if (const auto d = model_difference(model(), e))
    throw CheckpointError("checkpoint " + dir_ + " was saved with " + d->key + " = " + d->saved + " but [model] " +
                          d->key + " = " + d->expected + " (a different model shape)");
}

namespace {
void check_crc(const std::string& path, std::uint32_t expected) {
  try {
    if (file_crc32(path) != expected) throw CheckpointError(path + ": checksum mismatch with the manifest (damaged file)");
  } catch (const FileError& e) {
    throw CheckpointError(e.what());
  }
}
}  // namespace

void CheckpointReader::verify_files() const {
  for (const ShardRecord& r : manifest_.shards) check_crc((fs::path(dir_) / r.file).string(), r.crc32);
  for (const LaneFileRecord& r : manifest_.lane_files) read_lane_file(dir_, r);
}

const ShardFileReader& CheckpointReader::open(const ShardRecord& shard) {
  for (const auto& [name, reader] : open_)
    if (name == shard.file) return *reader;
  const std::string path = (fs::path(dir_) / shard.file).string();
  check_crc(path, shard.crc32);
  open_.emplace_back(shard.file, std::make_unique<ShardFileReader>(path));
  return *open_.back().second;
}

TrainingProgress CheckpointReader::progress() { return open(manifest_.shards.at(0)).progress(); }

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const ShardRecord& r : manifest_.shards)
    for (const std::string& n : r.tensors)
      if (seen.insert(n).second) out.push_back(n);
  return out;
}

std::vector<float> CheckpointReader::full_tensor(const std::string& group, const std::string& name,
                                                 std::vector<std::int64_t>* full_shape) {
  const TensorGroup g = parse_tensor_group(group);
  const auto holds = [&](const ShardRecord& r) {
    return std::find(r.tensors.begin(), r.tensors.end(), name) != r.tensors.end();
  };
  // The shards holding `name`: those of the first pipeline stage that has it, one per tp rank.
  int pp = -1;
  for (const ShardRecord& r : manifest_.shards)
    if (holds(r) && (pp < 0 || r.pp < pp)) pp = r.pp;
  if (pp < 0) throw CheckpointError(dir_ + ": no shard holds tensor " + name);
  std::vector<const ShardRecord*> holders;
  for (const ShardRecord& r : manifest_.shards)
    if (r.pp == pp && holds(r)) holders.push_back(&r);
  std::sort(holders.begin(), holders.end(), [](auto* a, auto* b) { return a->tp < b->tp; });

  std::vector<StoredTensor> stored;
  for (const ShardRecord* h : holders) stored.push_back(open(*h).tensor(g, name));
  const ParamEntry& e0 = stored[0].entry;
  // Each slice is consistent with its own data (ShardFileReader); together they must be one
  // whole tensor before its full size is allocated.
  if (static_cast<int>(stored.size()) != e0.tp_size)
    throw CheckpointError(dir_ + ": tensor " + name + " is stored by " + std::to_string(stored.size()) +
                          " shards of pipeline stage " + std::to_string(pp) + " but its attributes say tp_size " +
                          std::to_string(e0.tp_size));
  std::vector<const ParamEntry*> entries;
  std::vector<const float*> slices;
  for (const StoredTensor& s : stored) {
    entries.push_back(&s.entry);
    slices.push_back(s.data.data());
    if (s.entry.full_shape != e0.full_shape)
      throw CheckpointError(dir_ + ": tensor " + name + " has full shape " + shape_text(s.entry.full_shape) +
                            " in one shard and " + shape_text(e0.full_shape) + " in another");
  }
  if (full_shape) *full_shape = e0.full_shape;
  std::vector<float> full(e0.full_numel());
  try {
    gather_full_tensor(entries, slices, full.data());
  } catch (const std::exception& ex) {
    throw CheckpointError(dir_ + ": cannot reassemble " + name + " from its shards (" + ex.what() + ")");
  }
  return full;
}

void CheckpointReader::load_into(const ParamLayout& layout, const std::vector<TensorGroup>& groups,
                                 const StageTensorIn& stage_in) {
  std::vector<float> staging;
  for (const ParamEntry& e : layout.entries())
    for (TensorGroup g : groups) {
      std::vector<std::int64_t> shape;
      std::vector<float> full = full_tensor(group_name(g), e.name, &shape);
      if (shape != e.full_shape) {
        // The padded vocabulary may differ between tp degrees (GptConfig::padded_vocab_for_tp):
        // the real rows are the same, padding rows beyond either size are zero.
        if (layout.is_vocab_table(e.name) && shape.size() == 2 && e.full_shape.size() == 2 && shape[1] == e.full_shape[1]) {
          std::vector<float> adapted(e.full_numel(), 0.0f);
          const std::size_t rows = static_cast<std::size_t>(std::min(shape[0], e.full_shape[0]));
          std::copy(full.begin(), full.begin() + rows * shape[1], adapted.begin());
          full = std::move(adapted);
        } else {
          throw CheckpointError("checkpoint " + dir_ + ": tensor " + e.name + " has shape " + shape_text(shape) +
                                " but the model expects " + shape_text(e.full_shape));
        }
      }
      staging.resize(e.numel);
      slice_from_full(e, full.data(), staging.data());
      stage_in(g, e, staging.data());
    }
}

void CheckpointReader::load_into(const ParamLayout& layout, float* params, float* adam_m, float* adam_v) {
  float* const dst[] = {params, adam_m, adam_v};
  std::vector<TensorGroup> groups;
  for (TensorGroup g : kTensorGroups)
    if (dst[static_cast<int>(g)]) groups.push_back(g);
  load_into(layout, groups, [&](TensorGroup g, const ParamEntry& e, const float* staging) {
    std::copy(staging, staging + e.numel, dst[static_cast<int>(g)] + e.offset);
  });
}

}  // namespace pipelane
