#include "trainer/checkpoint/manifest.h"

#include <hdf5.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>

#include "trainer/checkpoint/checkpoint_json.h"
#include "trainer/checkpoint/durable_file.h"
#include "trainer/checkpoint/model_json.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
// Far above any real file or grid, far below where sizes could overflow.
constexpr std::int64_t kMaxFileBytes = std::int64_t{1} << 50;
constexpr std::int64_t kMaxGridSide = 1 << 16;

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::uint32_t parse_hex32(const nlohmann::json& j, const char* key) {
  const std::string s = j.at(key).get<std::string>();
  if (s.size() != 8 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw std::out_of_range(std::string("'") + key + "' = " + brief(s) + " is not 8 hex digits");
  return static_cast<std::uint32_t>(std::stoul(s, nullptr, 16));
}

std::string plain_file_name(const nlohmann::json& j) {
  const std::string name = j.at("file").get<std::string>();
  if (!is_plain_file_name(name))
    throw std::out_of_range("file name " + brief(name) +
                            " is not a plain name inside the checkpoint directory");
  return name;
}

std::vector<std::string> string_list(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out = j.at(key).get<std::vector<std::string>>();
  for (const std::string& s : out)
    if (!is_plain_file_name(s)) throw std::out_of_range(std::string("'") + key + "' holds the name " + brief(s));
  return out;
}

// Parameters, both AdamW moments, 4 bytes each: the least the shard files must hold for `c`.
// (Padding rows, replicated tensors and the file format only add to it.)
double least_bytes_for(const GptConfig& c) {
  const double C = c.d_model;
  const double tables = double(c.vocab_size) * (c.tie_embeddings ? 1 : 2) + (c.has_learned_positions() ? c.max_seq_len : 0);
  const double params = static_cast<double>(c.non_embedding_params()) + tables * C;
  return 12.0 * params;
}

}  // namespace

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

bool parse_checkpoint_dir_name(const std::string& name, int* step) {
  if (name.rfind("step_", 0) != 0 || name.size() <= 5 || name.size() > 5 + 9) return false;
  for (std::size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  *step = std::stoi(name.substr(5));
  return true;
}

bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  for (unsigned char ch : name)
    if (ch == '/' || ch == '\\' || ch < 0x20 || ch == 0x7f) return false;
  return true;
}

nlohmann::json to_json(const ShardRecord& r) {
  return {{"file", r.file}, {"pp", r.pp}, {"tp", r.tp}, {"bytes", r.bytes}, {"crc32", hex32(r.crc32)},
          {"tensors", r.tensors}};
}

nlohmann::json to_json(const LaneFileRecord& r) {
  return {{"file", r.file}, {"rank", r.rank}, {"bytes", r.bytes}, {"crc32", hex32(r.crc32)}, {"lanes", r.lanes}};
}

ShardRecord shard_record_from_json(const nlohmann::json& j) {
  ShardRecord r;
  r.file = plain_file_name(j);
  r.pp = static_cast<int>(json_integer(j, "pp", 0, kMaxGridSide - 1));
  r.tp = static_cast<int>(json_integer(j, "tp", 0, kMaxGridSide - 1));
  r.bytes = static_cast<std::uint64_t>(json_integer(j, "bytes", 0, kMaxFileBytes));
  r.crc32 = parse_hex32(j, "crc32");
  r.tensors = string_list(j, "tensors");
  return r;
}

LaneFileRecord lane_file_record_from_json(const nlohmann::json& j) {
  LaneFileRecord r;
  r.file = plain_file_name(j);
  r.rank = static_cast<int>(json_integer(j, "rank", 0, kMaxInt));
  r.bytes = static_cast<std::uint64_t>(json_integer(j, "bytes", 0, kMaxFileBytes));
  r.crc32 = parse_hex32(j, "crc32");
  r.lanes = string_list(j, "lanes");
  return r;
}

nlohmann::json to_json(const CheckpointTopology& t) {
  nlohmann::json out = {{"tp", t.tp}, {"pp", t.pp}, {"dp", t.dp}, {"schedule", t.schedule},
                        {"virtual_stages", t.virtual_stages}, {"layers_per_stage", t.layers_per_stage}};
  if (!t.imported_from.empty()) out["imported_from"] = t.imported_from;
  return out;
}

nlohmann::json make_manifest(int step, const GptConfig& model, const CheckpointTopology& topology,
                             const std::string& config_ini, const std::vector<ShardRecord>& shards,
                             const std::vector<LaneFileRecord>& lane_files) {
  nlohmann::json files = nlohmann::json::array();
  for (const ShardRecord& r : shards) files.push_back(to_json(r));
  nlohmann::json lanes = nlohmann::json::array();
  for (const LaneFileRecord& r : lane_files) lanes.push_back(to_json(r));
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  return {{"format", kCheckpointFormat},
          {"version", kCheckpointVersion},
          {"step", step},
          {"model", model_to_json(model)},
          {"topology", to_json(topology)},
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

Manifest parse_manifest(const nlohmann::json& j, const std::string& where) {
  Manifest m;
  try {
    if (!j.is_object()) throw CheckpointError(where + ": not a JSON object");
    if (!j.contains("format") || j.at("format") != kCheckpointFormat)
      throw CheckpointError(where + ": not a pipelane checkpoint manifest");
    const std::int64_t version = json_integer(j, "version", 0, kMaxInt);
    if (version != kCheckpointVersion)
      throw CheckpointError(where + ": checkpoint format version " + std::to_string(version) +
                            ", this pipelane reads version " + std::to_string(kCheckpointVersion));
    if (j.value("complete", nlohmann::json(false)) != true)
      throw CheckpointError(where + ": the manifest is not marked complete");
    m.step = static_cast<int>(json_integer(j, "step", 0, kMaxInt));
    m.model = model_from_json(j.at("model"));
    const nlohmann::json& topo = j.at("topology");
    m.pp = static_cast<int>(json_integer(topo, "pp", 1, kMaxGridSide));
    m.tp = static_cast<int>(json_integer(topo, "tp", 1, kMaxGridSide));
    std::set<std::string> names;
    std::set<std::pair<int, int>> cells;
    double bytes = 0;
    for (const auto& f : j.at("files")) {
      ShardRecord r = shard_record_from_json(f);
      if (r.pp >= m.pp || r.tp >= m.tp)
        throw CheckpointError(where + ": shard " + r.file + " is at pp " + std::to_string(r.pp) + ", tp " +
                              std::to_string(r.tp) + ", outside the saving grid pp " + std::to_string(m.pp) +
                              " x tp " + std::to_string(m.tp));
      if (!cells.insert({r.pp, r.tp}).second)
        throw CheckpointError(where + ": two shards are listed for pp " + std::to_string(r.pp) + ", tp " +
                              std::to_string(r.tp));
      if (!names.insert(r.file).second) throw CheckpointError(where + ": file " + r.file + " is listed twice");
      bytes += static_cast<double>(r.bytes);
      m.shards.push_back(std::move(r));
    }
    const std::size_t expected = static_cast<std::size_t>(m.pp) * static_cast<std::size_t>(m.tp);
    if (m.shards.size() != expected)
      throw CheckpointError(where + ": the manifest lists " + std::to_string(m.shards.size()) +
                            " shard files, expected pp x tp = " + std::to_string(expected));
    if (bytes < least_bytes_for(m.model))
      throw CheckpointError(where + ": its shard files hold " + std::to_string(static_cast<std::uint64_t>(bytes)) +
                            " bytes, too few for the model it describes (" +
                            std::to_string(m.model.layers) + " layers, d_model " + std::to_string(m.model.d_model) + ")");
    if (j.contains("lane_files")) {  // absent in checkpoints saved before lane files
      std::set<int> ranks;
      for (const auto& f : j.at("lane_files")) {
        LaneFileRecord r = lane_file_record_from_json(f);
        if (!ranks.insert(r.rank).second)
          throw CheckpointError(where + ": two lane files are listed for rank " + std::to_string(r.rank));
        if (!names.insert(r.file).second) throw CheckpointError(where + ": file " + r.file + " is listed twice");
        m.lane_files.push_back(std::move(r));
      }
    }
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(where + ": malformed manifest (" + e.what() + ")");
  }
  m.json = j;
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) throw CheckpointError(dir + ": not a complete checkpoint (no manifest.json)");
  std::string text;
  try {
    text = read_whole_file(path);
  } catch (const FileError& e) {
    throw CheckpointError(e.what());
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception&) {
    throw CheckpointError(path + ": not valid JSON (truncated or damaged)");
  }
  return parse_manifest(j, path);
}

}  // namespace pipelane
