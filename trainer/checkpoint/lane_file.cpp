#include "trainer/checkpoint/lane_file.h"

#include <unistd.h>

#include <filesystem>

#include "trainer/checkpoint/durable_file.h"

namespace pipelane {

namespace fs = std::filesystem;

namespace {

constexpr char kLaneMagic[8] = {'P', 'L', 'L', 'A', 'N', 'E', 'S', '1'};

void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// Every read is checked against the bytes left, so a count or a length that lies ends in
// "truncated" instead of reading past the buffer or allocating what the file does not hold.
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
  const std::string bytes = encode_lane_states(lanes);
  try {
    write_file_durably(path, bytes);
    // Verify after write: read back, the file is what was meant (found now, not at resume).
    if (read_whole_file(path) != bytes)
      throw CheckpointError(path + ": read back after writing, it differs from what was written (a damaged write)");
  } catch (const FileError& e) {
    throw CheckpointError(e.what());
  }
  rec.bytes = bytes.size();
  rec.crc32 = crc32_of(bytes);
  return rec;
}

LaneStates read_lane_file(const std::string& dir, const LaneFileRecord& record) {
  const std::string path = (fs::path(dir) / record.file).string();
  std::string bytes;
  try {
    bytes = read_whole_file(path);
  } catch (const FileError& e) {
    throw CheckpointError(e.what());
  }
  if (bytes.size() != record.bytes)
    throw CheckpointError(path + ": truncated or damaged: " + std::to_string(bytes.size()) +
                          " bytes, the manifest records " + std::to_string(record.bytes));
  if (crc32_of(bytes) != record.crc32)
    throw CheckpointError(path + ": checksum mismatch with the manifest (damaged file)");
  try {
    return decode_lane_states(bytes);
  } catch (const CheckpointError& e) {
    throw CheckpointError(path + ": " + e.what());
  }
}

}  // namespace pipelane
