#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <utility>

namespace pipelane {

namespace fs = std::filesystem;

namespace {

// ---- small utilities ----

std::uint32_t crc32_update(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw CheckpointError(path + ": cannot open to sync (" + std::strerror(errno) + ")");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && !directory) throw CheckpointError(path + ": fsync failed (" + std::strerror(err) + ")");
}

void rename_durably(const std::string& tmp, const std::string& final_path) {
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec) throw CheckpointError(final_path + ": cannot rename into place (" + ec.message() + ")");
  fsync_path(fs::path(final_path).parent_path().string(), true);
}

bool parse_step_dir(const std::string& name, int* step) {
  if (name.rfind("step_", 0) != 0 || name.size() <= 5) return false;
  for (std::size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  *step = std::stoi(name.substr(5));
  return true;
}

std::optional<nlohmann::json> read_manifest_if_complete(const std::string& dir) {
  std::ifstream in(fs::path(dir) / kManifestName);
  if (!in) return std::nullopt;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (!j.is_object() || !j.value("complete", false)) return std::nullopt;
    return j;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// ---- HDF5 ----

class H5Id {
 public:
  H5Id(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close) {
    if (id_ < 0) throw CheckpointError(what);
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  void close_checked(const std::string& what) {
    const herr_t s = close_(std::exchange(id_, -1));
    if (s < 0) throw CheckpointError(what);
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void check(herr_t status, const std::string& what) {
  if (status < 0) throw CheckpointError(what);
}

void silence_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void write_string_attr(hid_t obj, const char* name, const std::string& value) {
  H5Id type(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create string type");
  check(H5Tset_size(type.get(), H5T_VARIABLE), "cannot size string type");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "cannot set string charset");
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose, "cannot create dataspace");
  H5Id attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
            std::string("cannot create attribute ") + name);
  const char* data = value.c_str();
  check(H5Awrite(attr.get(), type.get(), &data), std::string("cannot write attribute ") + name);
}

void write_int_attrs(hid_t obj, const char* name, const std::vector<std::int64_t>& values) {
  const hsize_t n = values.size();
  H5Id space(n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose,
             "cannot create dataspace");
  H5Id attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
            std::string("cannot create attribute ") + name);
  check(H5Awrite(attr.get(), H5T_NATIVE_INT64, values.data()), std::string("cannot write attribute ") + name);
}

std::string read_string_attr(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) throw CheckpointError(std::string("attribute ") + name + " is missing");
  H5Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose, std::string("cannot open attribute ") + name);
  H5Id type(H5Aget_type(attr.get()), H5Tclose, "cannot read attribute type");
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) <= 0)
    throw CheckpointError(std::string("attribute ") + name + " is not a string");
  char* data = nullptr;
  check(H5Aread(attr.get(), type.get(), &data), std::string("cannot read attribute ") + name);
  std::string out = data ? data : "";
  H5free_memory(data);
  return out;
}

std::vector<std::int64_t> read_int_attrs(hid_t obj, const char* name) {
  if (H5Aexists(obj, name) <= 0) throw CheckpointError(std::string("attribute ") + name + " is missing");
  H5Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose, std::string("cannot open attribute ") + name);
  H5Id space(H5Aget_space(attr.get()), H5Sclose, "cannot read attribute shape");
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max<hssize_t>(n, 0)));
  check(H5Aread(attr.get(), H5T_NATIVE_INT64, out.data()), std::string("cannot read attribute ") + name);
  return out;
}

void write_tensor(hid_t group, const ParamEntry& e, const float* data) {
  std::vector<hsize_t> dims(e.shape.begin(), e.shape.end());
  H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose,
             "cannot create dataspace for " + e.name);
  // No modification times in the file: the same state gives the same bytes.
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "cannot create dataset properties");
  check(H5Pset_obj_track_times(dcpl.get(), false), "cannot turn off time tracking");
  H5Id ds(H5Dcreate2(group, e.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(),
                     H5P_DEFAULT),
          H5Dclose, "cannot create dataset " + e.name);
  check(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "cannot write " + e.name);
  write_int_attrs(ds.get(), "full_shape", e.full_shape);
  write_int_attrs(ds.get(), "shard_dim", {e.shard_dim});
  write_int_attrs(ds.get(), "shard_blocks", {e.shard_blocks});
  write_int_attrs(ds.get(), "tp_rank", {e.tp_rank});
  write_int_attrs(ds.get(), "tp_size", {e.tp_size});
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

}  // namespace

// ---- progress ----

nlohmann::json to_json(const TrainingProgress& p) {
  return {{"step", p.step},
          {"lr_schedule", p.lr_schedule},
          {"sampler", {{"kind", p.sampler.kind}, {"words", p.sampler.words}}},
          {"guard",
           {{"consecutive_bad", p.guard.consecutive_bad},
            {"skipped_nonfinite", p.guard.skipped_nonfinite},
            {"skipped_spike", p.guard.skipped_spike},
            {"loss_count", p.guard.loss_count},
            {"loss_mean", p.guard.loss_mean},
            {"loss_var", p.guard.loss_var}}}};
}

TrainingProgress progress_from_json(const nlohmann::json& j) {
  TrainingProgress p;
  p.step = j.at("step").get<int>();
  p.lr_schedule = j.value("lr_schedule", nlohmann::json::object());
  p.sampler.kind = j.at("sampler").at("kind").get<std::string>();
  p.sampler.words = j.at("sampler").at("words").get<std::vector<std::uint64_t>>();
  const auto& g = j.at("guard");
  p.guard.consecutive_bad = g.at("consecutive_bad").get<std::int64_t>();
  p.guard.skipped_nonfinite = g.at("skipped_nonfinite").get<std::int64_t>();
  p.guard.skipped_spike = g.at("skipped_spike").get<std::int64_t>();
  p.guard.loss_count = g.at("loss_count").get<std::int64_t>();
  p.guard.loss_mean = g.at("loss_mean").get<double>();
  p.guard.loss_var = g.at("loss_var").get<double>();
  return p;
}

// ---- names and discovery ----

std::string checkpoint_dir_name(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08d", step);
  return buf;
}

std::string shard_file_name(int pp, int tp) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "model_pp%02d_tp%02d.h5", pp, tp);
  return buf;
}

std::string lane_file_name(int world_rank) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "lanes_rank%04d.bin", world_rank);
  return buf;
}

std::vector<std::pair<int, std::string>> complete_checkpoints(const std::string& root) {
  std::vector<std::pair<int, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    int step = 0;
    if (!entry.is_directory() || !parse_step_dir(entry.path().filename().string(), &step)) continue;
    if (read_manifest_if_complete(entry.path().string())) out.emplace_back(step, entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> newest_complete_checkpoint(const std::string& root) {
  auto all = complete_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::optional<std::string> resolve_resume(const std::string& resume, const std::string& root) {
  if (resume == "none") return std::nullopt;
  if (resume == "auto" || resume.empty()) return newest_complete_checkpoint(root);
  std::error_code ec;
  if (!fs::is_directory(resume, ec))
    throw CheckpointError("[run] resume = " + resume + ": no such checkpoint directory");
  if (!fs::exists(fs::path(resume) / kManifestName, ec))
    throw CheckpointError("[run] resume = " + resume +
                          ": not a complete checkpoint (no manifest.json; an interrupted save?)");
  return resume;
}

// ---- writing ----

void write_file_durably(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw CheckpointError(tmp + ": cannot write");
  }
  fsync_path(tmp, false);
  rename_durably(tmp, path);
}

std::uint32_t file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot read");
  std::vector<char> buf(1 << 20);
  std::uint32_t crc = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    crc = crc32_update(crc, reinterpret_cast<const unsigned char*>(buf.data()),
                       static_cast<std::size_t>(in.gcount()));
  }
  return crc;
}

ShardRecord write_shard(const std::string& dir, int pp_rank, int tp_rank,
                        const std::vector<ChunkState>& chunks, const TrainingProgress& progress) {
  silence_hdf5();
  ShardRecord rec;
  rec.file = shard_file_name(pp_rank, tp_rank);
  rec.pp = pp_rank;
  rec.tp = tp_rank;
  const std::string final_path = (fs::path(dir) / rec.file).string();
  const std::string tmp = final_path + ".tmp";
  const std::string where = tmp + ": ";
  {
    H5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose,
              where + "cannot create");
    write_string_attr(file.get(), "format", "pipelane-checkpoint");
    write_int_attrs(file.get(), "version", {kCheckpointVersion});
    write_int_attrs(file.get(), "step", {progress.step});
    write_int_attrs(file.get(), "pp_rank", {pp_rank});
    write_int_attrs(file.get(), "tp_rank", {tp_rank});
    H5Id gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, where + "cannot create group properties");
    check(H5Pset_obj_track_times(gcpl.get(), false), where + "cannot turn off time tracking");
    const char* groups[3] = {"params", "adam_m", "adam_v"};
    std::vector<std::unique_ptr<H5Id>> g;
    for (const char* name : groups)
      g.push_back(std::make_unique<H5Id>(H5Gcreate2(file.get(), name, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT),
                                         H5Gclose, where + "cannot create group " + name));
    std::set<std::string> written;
    for (const ChunkState& ch : chunks)
      for (const ParamEntry& e : ch.layout->entries()) {
        if (!written.insert(e.name).second) continue;  // the tied wte held by two chunks
        write_tensor(g[0]->get(), e, ch.params + e.offset);
        write_tensor(g[1]->get(), e, ch.adam_m + e.offset);
        write_tensor(g[2]->get(), e, ch.adam_v + e.offset);
        rec.tensors.push_back(e.name);
      }
    H5Id state(H5Gcreate2(file.get(), "state", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
               where + "cannot create group state");
    write_string_attr(state.get(), "progress", to_json(progress).dump());
    H5Id lanes(H5Gcreate2(file.get(), "lanes", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
               where + "cannot create group lanes");
    write_string_attr(lanes.get(), "note", "reserved; lane state is per world rank, in lanes_rankNNNN.bin");
    lanes.close_checked(where + "cannot close group lanes");
    state.close_checked(where + "cannot close group state");
    for (auto& grp : g) grp->close_checked(where + "cannot close a group");
    file.close_checked(where + "cannot close (disk full?)");
  }
  fsync_path(tmp, false);
  rename_durably(tmp, final_path);
  std::error_code ec;
  rec.bytes = fs::file_size(final_path, ec);
  rec.crc32 = file_crc32(final_path);
  return rec;
}

// ---- lane files ----

namespace {
constexpr char kLaneMagic[8] = {'P', 'L', 'L', 'A', 'N', 'E', 'S', '1'};

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

class LaneFileParser {
 public:
  explicit LaneFileParser(const std::string& bytes) : b_(bytes) {}
  std::uint64_t le(int bytes) {
    need(static_cast<std::size_t>(bytes));
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(b_[at_ + i])) << (8 * i);
    at_ += static_cast<std::size_t>(bytes);
    return v;
  }
  std::string text(std::uint64_t n) {
    need(n);
    std::string out = b_.substr(at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return out;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  void need(std::uint64_t n) const {
    if (n > b_.size() - at_) throw CheckpointError("lane file is truncated");
  }
  const std::string& b_;
  std::size_t at_ = 0;
};
}  // namespace

std::string encode_lane_states(const LaneStates& lanes) {
  std::string out(kLaneMagic, sizeof kLaneMagic);
  put_le(out, lanes.lanes.size(), 4);
  for (const std::string& name : lanes.lanes) {
    put_le(out, name.size(), 4);
    out += name;
  }
  put_le(out, lanes.states.size(), 4);
  for (const auto& [name, state] : lanes.states) {
    put_le(out, name.size(), 4);
    out += name;
    put_le(out, state.size(), 8);
    out += state;
  }
  return out;
}

LaneStates decode_lane_states(const std::string& bytes) {
  if (bytes.size() < sizeof kLaneMagic || bytes.compare(0, sizeof kLaneMagic, kLaneMagic, sizeof kLaneMagic) != 0)
    throw CheckpointError("not a pipelane lane file");
  LaneFileParser in(bytes);
  in.text(sizeof kLaneMagic);
  LaneStates out;
  for (std::uint64_t n = in.le(4), i = 0; i < n; ++i) out.lanes.push_back(in.text(in.le(4)));
  for (std::uint64_t n = in.le(4), i = 0; i < n; ++i) {
    std::string name = in.text(in.le(4));
    out.states[name] = in.text(in.le(8));
  }
  if (!in.done()) throw CheckpointError("lane file has trailing bytes");
  return out;
}

LaneFileRecord write_lane_file(const std::string& dir, int world_rank, const LaneStates& lanes) {
  LaneFileRecord rec;
  rec.file = lane_file_name(world_rank);
  rec.rank = world_rank;
  rec.lanes = lanes.lanes;
  const std::string path = (fs::path(dir) / rec.file).string();
  write_file_durably(path, encode_lane_states(lanes));
  std::error_code ec;
  rec.bytes = fs::file_size(path, ec);
  rec.crc32 = file_crc32(path);
  return rec;
}

nlohmann::json make_manifest(int step, const GptConfig& model, const nlohmann::json& topology,
                             const std::string& config_ini, const std::vector<ShardRecord>& shards,
                             const std::vector<LaneFileRecord>& lane_files) {
  nlohmann::json files = nlohmann::json::array();
  for (const ShardRecord& r : shards)
    files.push_back({{"file", r.file}, {"pp", r.pp}, {"tp", r.tp}, {"bytes", r.bytes},
                     {"crc32", hex32(r.crc32)}, {"tensors", r.tensors}});
  nlohmann::json lanes = nlohmann::json::array();
  for (const LaneFileRecord& r : lane_files)
    lanes.push_back({{"file", r.file}, {"rank", r.rank}, {"bytes", r.bytes}, {"crc32", hex32(r.crc32)},
                     {"lanes", r.lanes}});
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  return {{"format", "pipelane-checkpoint"},
          {"version", kCheckpointVersion},
          {"step", step},
          {"model", {{"layers", model.layers}, {"d_model", model.d_model}, {"heads", model.heads},
                     {"max_seq_len", model.max_seq_len}, {"vocab_size", model.vocab_size}}},
          {"topology", topology},
          {"versions", {{"pipelane", "0.1.0"}, {"checkpoint_format", kCheckpointVersion},
                        {"hdf5", std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel)}}},
          {"created_unix", static_cast<std::int64_t>(std::time(nullptr))},
          {"config", config_ini},
          {"files", files},
          {"lane_files", lanes},
          {"complete", true}};
}

void write_manifest(const std::string& dir, const nlohmann::json& manifest) {
  write_file_durably((fs::path(dir) / kManifestName).string(), manifest.dump(2) + "\n");
}

// ---- reading ----

struct CheckpointReader::OpenFile {
  std::string name;
  std::unique_ptr<H5Id> file;
};

CheckpointReader::CheckpointReader(std::string dir) : dir_(std::move(dir)) {
  silence_hdf5();
  const fs::path mpath = fs::path(dir_) / kManifestName;
  std::ifstream in(mpath);
  if (!in) throw CheckpointError(dir_ + ": not a complete checkpoint (no manifest.json)");
  try {
    manifest_ = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    throw CheckpointError(mpath.string() + ": not valid JSON (truncated or damaged)");
  }
  try {
    if (manifest_.at("format").get<std::string>() != "pipelane-checkpoint")
      throw CheckpointError(mpath.string() + ": not a pipelane checkpoint manifest");
    const int version = manifest_.at("version").get<int>();
    if (version != kCheckpointVersion)
      throw CheckpointError(mpath.string() + ": checkpoint format version " + std::to_string(version) +
                            ", this pipelane reads version " + std::to_string(kCheckpointVersion));
    if (!manifest_.value("complete", false))
      throw CheckpointError(mpath.string() + ": the manifest is not marked complete");
    for (const auto& f : manifest_.at("files")) {
      ShardRecord r;
      r.file = f.at("file").get<std::string>();
      r.pp = f.at("pp").get<int>();
      r.tp = f.at("tp").get<int>();
      r.bytes = f.at("bytes").get<std::uint64_t>();
      r.crc32 = static_cast<std::uint32_t>(std::stoul(f.at("crc32").get<std::string>(), nullptr, 16));
      r.tensors = f.at("tensors").get<std::vector<std::string>>();
      shards_.push_back(std::move(r));
    }
    if (manifest_.contains("lane_files"))  // absent in checkpoints saved before lane files
      for (const auto& f : manifest_.at("lane_files")) {
        LaneFileRecord r;
        r.file = f.at("file").get<std::string>();
        r.rank = f.at("rank").get<int>();
        r.bytes = f.at("bytes").get<std::uint64_t>();
        r.crc32 = static_cast<std::uint32_t>(std::stoul(f.at("crc32").get<std::string>(), nullptr, 16));
        r.lanes = f.at("lanes").get<std::vector<std::string>>();
        lane_files_.push_back(std::move(r));
      }
    const auto& topo = manifest_.at("topology");
    const std::size_t expected = topo.at("pp").get<std::size_t>() * topo.at("tp").get<std::size_t>();
    if (shards_.size() != expected)
      throw CheckpointError(dir_ + ": the manifest lists " + std::to_string(shards_.size()) +
                            " shard files, expected pp x tp = " + std::to_string(expected));
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(mpath.string() + ": malformed manifest (" + e.what() + ")");
  }
  for (const ShardRecord& r : shards_) {
    const fs::path p = fs::path(dir_) / r.file;
    std::error_code ec;
    if (!fs::exists(p, ec))
      throw CheckpointError(dir_ + ": shard " + r.file + " is missing (the manifest lists " +
                            std::to_string(shards_.size()) + " shard files)");
    const std::uint64_t size = fs::file_size(p, ec);
    if (size != r.bytes)
      throw CheckpointError(p.string() + ": truncated or damaged: " + std::to_string(size) +
                            " bytes, the manifest records " + std::to_string(r.bytes));
  }
  for (const LaneFileRecord& r : lane_files_) {
    const fs::path p = fs::path(dir_) / r.file;
    std::error_code ec;
    if (!fs::exists(p, ec))
      throw CheckpointError(dir_ + ": lane file " + r.file + " is missing (the manifest lists " +
                            std::to_string(lane_files_.size()) + " lane files)");
    const std::uint64_t size = fs::file_size(p, ec);
    if (size != r.bytes)
      throw CheckpointError(p.string() + ": truncated or damaged: " + std::to_string(size) +
                            " bytes, the manifest records " + std::to_string(r.bytes));
  }
}

std::optional<LaneStates> CheckpointReader::lane_states(int world_rank) const {
  for (const LaneFileRecord& r : lane_files_) {
    if (r.rank != world_rank) continue;
    const std::string path = (fs::path(dir_) / r.file).string();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw CheckpointError(path + ": cannot read");
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    if (crc32_update(0, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()) != r.crc32)
      throw CheckpointError(path + ": checksum mismatch with the manifest (damaged file)");
    try {
      return decode_lane_states(bytes);
    } catch (const CheckpointError& e) {
      throw CheckpointError(path + ": " + e.what());
    }
  }
  return std::nullopt;
}

CheckpointReader::~CheckpointReader() = default;

int CheckpointReader::step() const { return manifest_.at("step").get<int>(); }

GptConfig CheckpointReader::model() const {
  const auto& m = manifest_.at("model");
  GptConfig c;
  c.layers = m.at("layers").get<int>();
  c.d_model = m.at("d_model").get<int>();
  c.heads = m.at("heads").get<int>();
  c.max_seq_len = m.at("max_seq_len").get<int>();
  c.vocab_size = m.at("vocab_size").get<int>();
  return c;
}

void CheckpointReader::check_model(const GptConfig& e) const {
  const GptConfig s = model();
  const std::pair<const char*, std::pair<int, int>> keys[] = {
      {"layers", {s.layers, e.layers}},       {"d_model", {s.d_model, e.d_model}},
      {"heads", {s.heads, e.heads}},          {"seq_len", {s.max_seq_len, e.max_seq_len}},
      {"vocab_size", {s.vocab_size, e.vocab_size}}};
  for (const auto& [key, v] : keys)
    if (v.first != v.second)
      throw CheckpointError("checkpoint " + dir_ + " was saved with " + key + " = " + std::to_string(v.first) +
                            " but [model] " + key + " = " + std::to_string(v.second) +
                            " (a different model shape)");
}

CheckpointReader::OpenFile& CheckpointReader::open(const std::string& file) {
  for (auto& f : open_)
    if (f->name == file) return *f;
  const std::string path = (fs::path(dir_) / file).string();
  std::uint32_t expected = 0;
  for (const ShardRecord& r : shards_)
    if (r.file == file) expected = r.crc32;
  if (file_crc32(path) != expected)
    throw CheckpointError(path + ": checksum mismatch with the manifest (damaged file)");
  auto f = std::make_unique<OpenFile>();
  f->name = file;
  f->file = std::make_unique<H5Id>(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose,
                                   path + ": cannot open as HDF5 (truncated or damaged)");
  open_.push_back(std::move(f));
  return *open_.back();
}

TrainingProgress CheckpointReader::progress() {
  OpenFile& f = open(shards_.at(0).file);
  try {
    H5Id state(H5Gopen2(f.file->get(), "state", H5P_DEFAULT), H5Gclose, "group state is missing");
    return progress_from_json(nlohmann::json::parse(read_string_attr(state.get(), "progress")));
  } catch (const std::exception& e) {
    throw CheckpointError(dir_ + "/" + f.name + ": cannot read the training state (" + e.what() + ")");
  }
}

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const ShardRecord& r : shards_)
    for (const std::string& n : r.tensors)
      if (seen.insert(n).second) out.push_back(n);
  return out;
}

std::vector<float> CheckpointReader::full_tensor(const std::string& group, const std::string& name,
                                                 std::vector<std::int64_t>* full_shape) {
  // The shards holding `name`: those of the first pipeline stage that has it, one per tp rank.
  int pp = -1;
  for (const ShardRecord& r : shards_)
    if (std::find(r.tensors.begin(), r.tensors.end(), name) != r.tensors.end() && (pp < 0 || r.pp < pp))
      pp = r.pp;
  if (pp < 0) throw CheckpointError(dir_ + ": no shard holds tensor " + name);
  std::vector<const ShardRecord*> holders;
  for (const ShardRecord& r : shards_)
    if (r.pp == pp && std::find(r.tensors.begin(), r.tensors.end(), name) != r.tensors.end())
      holders.push_back(&r);
  std::sort(holders.begin(), holders.end(), [](auto* a, auto* b) { return a->tp < b->tp; });

  std::vector<ParamEntry> entries(holders.size());
  std::vector<std::vector<float>> data(holders.size());
  for (std::size_t i = 0; i < holders.size(); ++i) {
    OpenFile& f = open(holders[i]->file);
    const std::string where = dir_ + "/" + f.name + ": /" + group + "/" + name;
    try {
      H5Id ds(H5Dopen2(f.file->get(), (group + "/" + name).c_str(), H5P_DEFAULT), H5Dclose, "missing");
      H5Id space(H5Dget_space(ds.get()), H5Sclose, "cannot read its shape");
      const int nd = H5Sget_simple_extent_ndims(space.get());
      std::vector<hsize_t> dims(static_cast<std::size_t>(std::max(nd, 0)));
      H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
      ParamEntry& e = entries[i];
      e.name = name;
      e.numel = 1;
      for (hsize_t d : dims) {
        e.shape.push_back(static_cast<std::int64_t>(d));
        e.numel *= d;
      }
      e.full_shape = read_int_attrs(ds.get(), "full_shape");
      e.shard_dim = static_cast<int>(read_int_attrs(ds.get(), "shard_dim").at(0));
      e.shard_blocks = static_cast<int>(read_int_attrs(ds.get(), "shard_blocks").at(0));
      e.tp_rank = static_cast<int>(read_int_attrs(ds.get(), "tp_rank").at(0));
      e.tp_size = static_cast<int>(read_int_attrs(ds.get(), "tp_size").at(0));
      data[i].resize(e.numel);
      check(H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data[i].data()),
            "cannot read its data");
    } catch (const std::exception& ex) {
      throw CheckpointError(where + ": " + ex.what());
    }
  }
  const ParamEntry& e0 = entries[0];
  if (full_shape) *full_shape = e0.full_shape;
  std::vector<float> full(e0.full_numel());
  if (holders.size() == 1 && e0.tp_size == 1) {
    if (data[0].size() != full.size()) throw CheckpointError(dir_ + ": tensor " + name + " has an inconsistent shape");
    return std::move(data[0]);
  }
  std::vector<const ParamEntry*> eps;
  std::vector<const float*> dps;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    eps.push_back(&entries[i]);
    dps.push_back(data[i].data());
  }
  try {
    gather_full_tensor(eps, dps, full.data());
  } catch (const std::exception& ex) {
    throw CheckpointError(dir_ + ": cannot reassemble " + name + " from its shards (" + ex.what() + ")");
  }
  return full;
}

namespace {
std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}
}  // namespace

void CheckpointReader::load_into(const ParamLayout& layout, float* params, float* adam_m, float* adam_v) {
  const std::pair<const char*, float*> targets[] = {{"params", params}, {"adam_m", adam_m}, {"adam_v", adam_v}};
  for (const ParamEntry& e : layout.entries()) {
    for (const auto& [group, dst] : targets) {
      if (!dst) continue;
      std::vector<std::int64_t> shape;
      std::vector<float> full = full_tensor(group, e.name, &shape);
      if (shape != e.full_shape) {
        // The padded vocabulary may differ between tp degrees (GptConfig::padded_vocab_for_tp):
        // the real rows are the same, padding rows beyond either size are zero.
        if (e.name == "wte" && shape.size() == 2 && shape[1] == e.full_shape[1]) {
          std::vector<float> adapted(e.full_numel(), 0.0f);
          const std::size_t rows = static_cast<std::size_t>(std::min(shape[0], e.full_shape[0]));
          std::copy(full.begin(), full.begin() + rows * shape[1], adapted.begin());
          full = std::move(adapted);
        } else {
          throw CheckpointError("checkpoint " + dir_ + ": tensor " + e.name + " has shape " + shape_text(shape) +
                                " but the model expects " + shape_text(e.full_shape));
        }
      }
      slice_from_full(e, full.data(), dst + e.offset);
    }
  }
}

// ---- the collective save ----

std::string save_checkpoint(const std::string& root, int step, PipelineExecutor& exec, Topology& topo,
                            const TrainingProgress& progress, const GptConfig& model,
                            const nlohmann::json& topology, const std::string& config_ini, int keep_last,
                            const LaneStates* lanes) {
  const std::string dir = (fs::path(root) / checkpoint_dir_name(step)).string();
  const bool leader = topo.world_rank == 0;
  // Rank 0 prepares the directory: an existing complete checkpoint of this step is kept as is; an
  // interrupted save's leftovers are removed.
  std::int32_t skip = 0;
  std::string error;
  if (leader) {
    try {
      if (read_manifest_if_complete(dir)) {
        skip = 1;
      } else {
        std::error_code ec;
        fs::remove_all(dir, ec);
        fs::create_directories(dir, ec);
        if (ec) throw CheckpointError(dir + ": cannot create (" + ec.message() + ")");
        fsync_path(root, true);
      }
    } catch (const std::exception& e) {
      error = e.what();
      skip = 2;
    }
  }
  topo.world->broadcast(&skip, sizeof skip, 0);
  if (skip == 1) return dir;
  if (skip == 2) throw CheckpointError(leader ? error : "rank 0 could not prepare " + dir);

  const bool writer = topo.me.dp == 0;
  std::string mine;
  if (writer) {
    const ShardRecord r = write_shard(dir, topo.me.pp, topo.me.tp, exec.chunk_states(), progress);
    mine = nlohmann::json{{"file", r.file}, {"pp", r.pp}, {"tp", r.tp}, {"bytes", r.bytes},
                          {"crc32", r.crc32}, {"tensors", r.tensors}}.dump();
  }
  // Every rank's lane file (or "null": lanes off there), durable before it is reported.
  std::string my_lanes = "null";
  if (lanes) {
    const LaneFileRecord r = write_lane_file(dir, topo.world_rank, *lanes);
    my_lanes = nlohmann::json{{"file", r.file}, {"rank", r.rank}, {"bytes", r.bytes},
                              {"crc32", r.crc32}, {"lanes", r.lanes}}.dump();
  }
  constexpr int kLenTag = 7101, kDataTag = 7102, kLaneLenTag = 7103, kLaneDataTag = 7104;
  if (leader) {
    std::vector<ShardRecord> records;
    const ParallelDims d = topo.grid.dims();
    for (int p = 0; p < d.pp; ++p)
      for (int t = 0; t < d.tp; ++t) {
        const int r = topo.grid.rank_of({t, 0, p});
        std::string text = mine;
        if (r != 0) {
          std::uint64_t len = 0;
          topo.world->irecv(&len, sizeof len, r, kLenTag)->wait();
          text.assign(len, ' ');
          topo.world->irecv(text.data(), len, r, kDataTag)->wait();
        }
        const auto j = nlohmann::json::parse(text);
        records.push_back({j["file"], j["pp"], j["tp"], j["bytes"], j["crc32"], j["tensors"]});
      }
    std::vector<LaneFileRecord> lane_records;
    for (int r = 0; r < topo.world->size(); ++r) {
      std::string text = my_lanes;
      if (r != 0) {
        std::uint64_t len = 0;
        topo.world->irecv(&len, sizeof len, r, kLaneLenTag)->wait();
        text.assign(len, ' ');
        topo.world->irecv(text.data(), len, r, kLaneDataTag)->wait();
      }
      const auto j = nlohmann::json::parse(text);
      if (j.is_null()) continue;
      lane_records.push_back({j["file"], j["rank"], j["bytes"], j["crc32"], j["lanes"]});
    }
    write_manifest(dir, make_manifest(step, model, topology, config_ini, records, lane_records));
    // Prune only now that the new checkpoint is complete; never the new one.
    auto all = complete_checkpoints(root);
    int kept = 1;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      if (it->second == dir || fs::path(it->second) == fs::path(dir)) continue;
      if (kept < keep_last) {
        ++kept;
        continue;
      }
      std::error_code ec;
      fs::remove_all(it->second, ec);
    }
    // Interrupted saves older than this one.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      int s = 0;
      if (entry.is_directory() && parse_step_dir(entry.path().filename().string(), &s) && s < step &&
          !fs::exists(entry.path() / kManifestName))
        fs::remove_all(entry.path(), ec);
    }
  } else {
    if (writer) {
      const std::uint64_t len = mine.size();
      topo.world->isend(&len, sizeof len, 0, kLenTag)->wait();
      topo.world->isend(mine.data(), len, 0, kDataTag)->wait();
    }
    const std::uint64_t len = my_lanes.size();
    topo.world->isend(&len, sizeof len, 0, kLaneLenTag)->wait();
    topo.world->isend(my_lanes.data(), len, 0, kLaneDataTag)->wait();
  }
  topo.world->barrier();
  return dir;
}

}  // namespace pipelane
