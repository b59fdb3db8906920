#include "trainer/checkpoint/shard_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "trainer/checkpoint/durable_file.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxTensorRank = 8;
constexpr std::int64_t kMaxTpSize = 1 << 16;
constexpr std::int64_t kMaxShardBlocks = 1 << 16;
// HDF5's bytes per dataset besides its data (object header, five attributes, link): about 630
// measured; a generous bound.
constexpr std::uint64_t kDatasetOverheadBound = 2048;

// HDF5 reports a failed write(2) on its error stack, which the next HDF5 call clears; errno still
// holds the system's reason (ENOSPC, EFBIG past a file size limit), so it is read right after.
template <class F>
void write_step(F&& step) {
  errno = 0;
  try {
    step();
  } catch (const hdf5::Hdf5Error& e) {
    const int err = errno;
    throw FileError(std::string(e.what()) + (err ? std::string(" (") + std::strerror(err) + ")" : ""));
  }
}

void write_shard_file(const std::string& path, int pp_rank, int tp_rank,
                      const std::vector<const ParamEntry*>& tensors, const StageTensorOut& stage_out,
                      const TrainingProgress& progress) {
  hdf5::File file;
  write_step([&] { file = hdf5::create_file(path); });
  const hid_t f = file.get();
  hdf5::write_string_attribute(f, "format", kCheckpointFormat);
  hdf5::write_int64_attribute(f, "version", {kCheckpointVersion});
  hdf5::write_int64_attribute(f, "step", {progress.step});
  hdf5::write_int64_attribute(f, "pp_rank", {pp_rank});
  hdf5::write_int64_attribute(f, "tp_rank", {tp_rank});
  // No modification times in the file: the same state gives the same bytes.
  hdf5::PropertyList gcpl = hdf5::create_properties(H5P_GROUP_CREATE);
  hdf5::PropertyList dcpl = hdf5::create_properties(H5P_DATASET_CREATE);
  hdf5::check(H5Pset_obj_track_times(gcpl.get(), false), f, "cannot turn off time tracking");
  hdf5::check(H5Pset_obj_track_times(dcpl.get(), false), f, "cannot turn off time tracking");
  std::vector<hdf5::Group> groups;
  for (TensorGroup g : kTensorGroups) groups.push_back(hdf5::create_group(f, group_name(g), gcpl.get()));
  std::vector<float> staging;
  for (const ParamEntry* e : tensors)
    for (TensorGroup g : kTensorGroups) {
      staging.resize(e->numel);
      stage_out(g, *e, staging.data());
      const hid_t group = groups[static_cast<int>(g)].get();
      const std::vector<hsize_t> dims(e->shape.begin(), e->shape.end());
      hdf5::Dataset ds = hdf5::create_dataset(group, e->name, H5T_IEEE_F32LE, dims, dcpl.get());
      write_step([&] { hdf5::write_dataset(ds, H5T_NATIVE_FLOAT, staging.data()); });
      hdf5::write_int64_attribute(ds.get(), "full_shape", e->full_shape);
      hdf5::write_int64_attribute(ds.get(), "shard_dim", {e->shard_dim});
      hdf5::write_int64_attribute(ds.get(), "shard_blocks", {e->shard_blocks});
      hdf5::write_int64_attribute(ds.get(), "tp_rank", {e->tp_rank});
      hdf5::write_int64_attribute(ds.get(), "tp_size", {e->tp_size});
    }
  hdf5::Group state = hdf5::create_group(f, "state", gcpl.get());
  hdf5::write_string_attribute(state.get(), "progress", to_json(progress).dump());
  hdf5::Group lanes = hdf5::create_group(f, "lanes", gcpl.get());
  hdf5::write_string_attribute(lanes.get(), "note", "reserved; lane state is per world rank, in lanes_rankNNNN.bin");
  lanes.close();
  state.close();
  groups.clear();
  write_step([&] { hdf5::close_file(file, path); });
}

std::int64_t integer_in(hid_t ds, const char* name, std::int64_t lo, std::int64_t hi) {
  const std::int64_t v = hdf5::read_integer_attribute(ds, name);
  if (v < lo || v > hi)
    hdf5::fail_format(ds, std::string("attribute '") + name + "' = " + std::to_string(v) + " is outside [" +
                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

}  // namespace

const char* group_name(TensorGroup g) {
  switch (g) {
    case TensorGroup::Params: return "params";
    case TensorGroup::AdamM: return "adam_m";
    case TensorGroup::AdamV: return "adam_v";
  }
  return "?";
}

TensorGroup parse_tensor_group(const std::string& name) {
  for (TensorGroup g : kTensorGroups)
    if (name == group_name(g)) return g;
  throw CheckpointError("no tensor group '" + name + "' (params, adam_m or adam_v)");
}

namespace {

// Verify after write: the file, read back as a resume would read it, holds exactly what training
// staged (every tensor of every group, bit for bit), so a write the disk or anything else spoiled
// is found now, while the state it came from is still in memory, not at the next resume.
void verify_shard(const std::string& path, const std::vector<const ParamEntry*>& tensors,
                  const StageTensorOut& stage_out) {
  const ShardFileReader reader(path);
  std::vector<float> expected;
  for (TensorGroup g : kTensorGroups)
    for (const ParamEntry* e : tensors) {
      expected.assign(e->numel, 0.0f);
      stage_out(g, *e, expected.data());
      const StoredTensor stored = reader.tensor(g, e->name);
      if (stored.data.size() != expected.size() ||
          std::memcmp(stored.data.data(), expected.data(), expected.size() * sizeof(float)) != 0)
        throw CheckpointError(path + ": read back after writing, " + group_name(g) + "/" + e->name +
                              " differs from what was written (a damaged write)");
    }
}

}  // namespace

ShardRecord write_shard(const std::string& dir, int pp_rank, int tp_rank,
                        const std::vector<const ParamEntry*>& tensors, const StageTensorOut& stage_out,
                        const TrainingProgress& progress) {
  hdf5::ErrorSilencer quiet;
  ShardRecord rec;
  rec.file = shard_file_name(pp_rank, tp_rank);
  rec.pp = pp_rank;
  rec.tp = tp_rank;
  for (const ParamEntry* e : tensors) rec.tensors.push_back(e->name);
  const std::string path = (fs::path(dir) / rec.file).string();
  try {
    // HDF5 1.10 cannot recover from a failed write (the process then crashes at exit), so a full
    // disk must be found before it writes: reserve a bound on the file's size first.
    std::uint64_t bytes = 64 << 10;
    for (const ParamEntry* e : tensors) bytes += 3 * (e->numel * sizeof(float) + kDatasetOverheadBound);
    reserve_file_space(path, bytes + to_json(progress).dump().size());
    write_shard_file(path, pp_rank, tp_rank, tensors, stage_out, progress);
    fsync_file(path);
    verify_shard(path, tensors, stage_out);
    std::error_code ec;
    rec.bytes = fs::file_size(path, ec);
    if (ec) throw FileError(path + ": cannot read its size (" + ec.message() + ")");
    rec.crc32 = file_crc32(path);
  } catch (const std::exception& e) {
    ::unlink(path.c_str());  // a partial shard must not take the space of the next attempt
    throw CheckpointError(e.what());
  }
  return rec;
}

ShardFileReader::ShardFileReader(const std::string& path) : path_(path) {
  hdf5::ErrorSilencer quiet;
  try {
    file_ = hdf5::open_file(path);
    if (hdf5::read_string_attribute(file_.get(), "format", 64) != kCheckpointFormat)
      hdf5::fail_format(file_.get(), "not a pipelane checkpoint shard (attribute 'format')");
    const std::int64_t version = hdf5::read_integer_attribute(file_.get(), "version");
    if (version != kCheckpointVersion)
      hdf5::fail_format(file_.get(), "shard format version " + std::to_string(version) +
                                         ", this pipelane reads version " + std::to_string(kCheckpointVersion));
  } catch (const hdf5::Hdf5Error& e) {
    throw CheckpointError(e.what());
  }
}

TrainingProgress ShardFileReader::progress() const {
  hdf5::ErrorSilencer quiet;
  try {
    hdf5::Group state = hdf5::open_group(file_.get(), "state");
    const std::string text = hdf5::read_string_attribute(state.get(), "progress", 1 << 20);
    try {
      return progress_from_json(nlohmann::json::parse(text));
    } catch (const std::exception& e) {
      hdf5::fail_format(state.get(), std::string("attribute 'progress': cannot read the training state (") + e.what() + ")");
    }
  } catch (const hdf5::Hdf5Error& e) {
    throw CheckpointError(e.what());
  }
}

StoredTensor ShardFileReader::tensor(TensorGroup g, const std::string& name) const {
  hdf5::ErrorSilencer quiet;
  StoredTensor out;
  ParamEntry& e = out.entry;
  try {
    hdf5::Dataset ds = hdf5::open_dataset(file_.get(), std::string(group_name(g)) + "/" + name);
    const hid_t d = ds.get();
    hdf5::Datatype type(H5Dget_type(d));
    if (!type.valid() || H5Tget_class(type.get()) != H5T_FLOAT) hdf5::fail_format(d, "is not floating point");
    const std::vector<hsize_t> dims = hdf5::dataset_dims(d, kMaxTensorRank);
    const std::uint64_t elements = hdf5::dataset_elements(d);
    e.name = name;
    for (hsize_t n : dims) {
      if (n > static_cast<hsize_t>(std::numeric_limits<std::int64_t>::max())) hdf5::fail_format(d, "a dimension is too large");
      e.shape.push_back(static_cast<std::int64_t>(n));
    }
    e.numel = static_cast<std::size_t>(elements);
    e.full_shape = hdf5::read_integer_attribute_values(d, "full_shape", kMaxTensorRank);
    e.shard_dim = static_cast<int>(integer_in(d, "shard_dim", -1, kMaxTensorRank - 1));
    e.shard_blocks = static_cast<int>(integer_in(d, "shard_blocks", 1, kMaxShardBlocks));
    e.tp_size = static_cast<int>(integer_in(d, "tp_size", 1, kMaxTpSize));
    e.tp_rank = static_cast<int>(integer_in(d, "tp_rank", 0, e.tp_size - 1));
    // The attributes must describe the stored shape before full_numel() sizes any buffer.
    try {
      check_param_entry(e);
    } catch (const std::invalid_argument& bad) {
      hdf5::fail_format(d, std::string("its attributes do not fit its shape (") + bad.what() + ")");
    }
    out.data = hdf5::read_dataset<float>(d, H5T_NATIVE_FLOAT, elements);
  } catch (const hdf5::Hdf5Error& ex) {
    throw CheckpointError(ex.what());
  }
  return out;
}

}  // namespace pipelane
