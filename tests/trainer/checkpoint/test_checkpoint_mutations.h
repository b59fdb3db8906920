// Crafting hostile checkpoints for the tests: a small model written as a checkpoint at any pp x tp,
// HDF5 attributes and datasets rewritten to lie, and the manifest's size and CRC brought back in
// line with a changed file (so the lie gets past the checksums and reaches the readers).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/hdf5_handle.h"
#include "model/gpt_layout.h"
#include "trainer/checkpoint/lane_file.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/shard_file.h"
#include "trainer/checkpoint/durable_file.h"

namespace pipelane::test_support {

// Deterministic values per (group, tensor element): a mix-up of tensors or groups shows.
inline float model_value(TensorGroup g, const ParamEntry& e, std::size_t full_index) {
  return 0.001f * static_cast<float>((full_index * 7 + e.name.size() * 13) % 1009) + static_cast<float>(g);
}

// Stage s of pp, layers split evenly (the last stage takes the remainder).
inline StageRange even_stage(const GptConfig& c, int pp, int s) {
  const int per = c.layers / pp;
  return {s * per, s == pp - 1 ? c.layers : (s + 1) * per, s == 0, s == pp - 1};
}

// The whole model `c` written as a checkpoint saved on pp x tp into `dir` (created), like a save
// of pipelane train; with lane files for world ranks `lane_ranks`.
inline void write_model_checkpoint(const std::string& dir, const GptConfig& c, int pp, int tp, int step = 7,
                                   const std::vector<int>& lane_ranks = {}) {
  std::filesystem::create_directories(dir);
  TrainingProgress progress;
  progress.step = step;
  progress.sampler = {"test", {1, 2}};
  std::vector<ShardRecord> records;
  for (int s = 0; s < pp; ++s)
    for (int r = 0; r < tp; ++r) {
      ParamLayout layout(c, even_stage(c, pp, s), {r, tp});
      std::vector<const ParamEntry*> tensors;
      for (const ParamEntry& e : layout.entries()) tensors.push_back(&e);
      records.push_back(write_shard(dir, s, r, tensors, [](TensorGroup g, const ParamEntry& e, float* staging) {
        for (std::size_t i = 0; i < e.numel; ++i) staging[i] = model_value(g, e, full_index_of(e, i));
      }, progress));
    }
  std::vector<LaneFileRecord> lanes;
  for (int rank : lane_ranks) {
    LaneStates st;
    st.lanes = {"pagerank"};
    st.states["pagerank"] = "{\"iteration\": " + std::to_string(rank) + "}";
    lanes.push_back(write_lane_file(dir, rank, st));
  }
  write_manifest(dir, make_manifest(step, c, [&] { CheckpointTopology t; t.tp = tp; t.pp = pp; return t; }(), "[model]\n", records, lanes));
}

inline nlohmann::json read_json_file(const std::string& path) { return nlohmann::json::parse(read_whole_file(path)); }
inline void write_json_file(const std::string& path, const nlohmann::json& j) { write_file_durably(path, j.dump(1)); }

// The manifest entry of `file` (under "files" or "lane_files") gets the file's current size and CRC.
inline void refresh_manifest_record(const std::string& dir, const std::string& file) {
  const std::string mpath = dir + "/" + kManifestName;
  nlohmann::json m = read_json_file(mpath);
  const std::string path = dir + "/" + file;
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", file_crc32(path));
  for (const char* list : {"files", "lane_files"})
    for (auto& f : m[list])
      if (f["file"] == file) {
        f["bytes"] = std::filesystem::file_size(path);
        f["crc32"] = crc;
      }
  write_json_file(mpath, m);
}

// Replaces attribute `name` of `object` ("/params/wte", "/" for the file) in an HDF5 file by what
// `write(object_id)` creates.
template <class Write>
void replace_attribute(const std::string& path, const std::string& object, const std::string& name, Write&& write) {
  hdf5::ErrorSilencer quiet;
  hdf5::File f = hdf5::open_file(path, H5F_ACC_RDWR);
  {
    const hdf5::Handle<H5Oclose> handle(H5Oopen(f.get(), object.c_str(), H5P_DEFAULT));
    if (!handle.valid()) throw std::runtime_error(path + ": no object " + object);
    if (H5Aexists(handle.get(), name.c_str()) > 0) H5Adelete(handle.get(), name.c_str());
    write(handle.get());
  }
  hdf5::close_file(f, path);
}

// Integers (a scalar for one value, an empty 1-D attribute for none), a string, a double.
inline void set_int_attribute(const std::string& path, const std::string& object, const std::string& name,
                              const std::vector<std::int64_t>& values) {
  replace_attribute(path, object, name, [&](hid_t obj) {
    if (!values.empty()) return hdf5::write_int64_attribute(obj, name, values);
    const hsize_t zero = 0;
    const hdf5::Dataspace space(H5Screate_simple(1, &zero, nullptr));
    const hdf5::Attribute a(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  });
}

inline void set_string_attribute(const std::string& path, const std::string& object, const std::string& name,
                                 const std::string& text) {
  replace_attribute(path, object, name, [&](hid_t obj) { hdf5::write_string_attribute(obj, name, text); });
}

inline void set_double_attribute(const std::string& path, const std::string& object, const std::string& name,
                                 double value) {
  replace_attribute(path, object, name, [&](hid_t obj) {
    hdf5::write_scalar_attribute(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
  });
}

// Replaces dataset `object` by one of shape `dims` and `type`, its attributes copied over; with
// `write_data` false its storage is never allocated (a shape declared but not stored).
inline void replace_dataset(const std::string& path, const std::string& object, const std::vector<hsize_t>& dims,
                            hid_t type, bool write_data) {
  hdf5::ErrorSilencer quiet;
  hdf5::File f = hdf5::open_file(path, H5F_ACC_RDWR);
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> attrs;
  {
    hdf5::Dataset old = hdf5::open_dataset(f.get(), object);
    for (const char* a : {"full_shape", "shard_dim", "shard_blocks", "tp_rank", "tp_size"})
      if (hdf5::has_attribute(old.get(), a)) attrs.emplace_back(a, hdf5::read_integer_attribute_values(old.get(), a, 64));
  }
  H5Ldelete(f.get(), object.c_str(), H5P_DEFAULT);
  hdf5::Dataset ds = hdf5::create_dataset(f.get(), object, type, dims);
  std::uint64_t n = 1;
  for (hsize_t d : dims) n *= d;
  if (write_data && n > 0 && n < (1u << 16)) {
    std::vector<double> zeros(n, 0.5);
    hdf5::write_dataset(ds, H5T_NATIVE_DOUBLE, zeros.data());
  }
  for (const auto& [name, values] : attrs) hdf5::write_int64_attribute(ds.get(), name, values);
  ds.close();
  hdf5::close_file(f, path);
}

}  // namespace pipelane::test_support
