#include "trainer/hf/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

namespace pipelane {

namespace fs = std::filesystem;

namespace {

std::uint64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "F64") return 8;
  return 0;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      const float v = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

std::uint64_t SafetensorInfo::numel() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  const auto fail = [&](const std::string& why) { throw SafetensorsError(path_ + ": " + why); };
  std::error_code ec;
  const std::uint64_t file_size = fs::file_size(path_, ec);
  if (ec) fail("cannot read (" + ec.message() + ")");
  std::ifstream in(path_, std::ios::binary);
  if (!in) fail("cannot open");
  if (file_size < 8) fail("truncated: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  unsigned char le[8];
  in.read(reinterpret_cast<char*>(le), 8);
  std::uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<std::uint64_t>(le[i]) << (8 * i);
  if (header_len == 0) fail("the header length is 0");
  if (header_len > kSafetensorsMaxHeaderBytes)
    fail("the header length " + std::to_string(header_len) + " exceeds the format's limit of " +
         std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
  if (header_len > file_size - 8)
    fail("truncated: the header claims " + std::to_string(header_len) + " bytes but the file has " +
         std::to_string(file_size - 8) + " after the length");
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  if (!in) fail("cannot read the header");
  data_start_ = 8 + header_len;
  const std::uint64_t data_size = file_size - data_start_;

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail("the header is not a JSON object");
  std::vector<std::pair<std::uint64_t, std::string>> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail("__metadata__." + k + " is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!entry.is_object()) fail(where + "not an object");
    SafetensorInfo t;
    if (!entry.contains("dtype") || !entry["dtype"].is_string()) fail(where + "no dtype");
    t.dtype = entry["dtype"].get<std::string>();
    const std::uint64_t elem = dtype_bytes(t.dtype);
    if (elem == 0) fail(where + "dtype " + t.dtype + " is not a float type this reader converts (F32, F16, BF16, F64)");
    if (!entry.contains("shape") || !entry["shape"].is_array() || entry["shape"].size() > 8)
      fail(where + "shape is not an array of at most 8 sizes");
    std::uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) fail(where + "shape holds " + d.dump() + ", not a size");
      const std::uint64_t v = d.get<std::uint64_t>();
      // Bounded by the data section before multiplying, so the product cannot overflow.
      if (v > data_size || (v != 0 && numel > data_size / v)) fail(where + "shape " + entry["shape"].dump() + " is larger than the file");
      numel *= v;
      t.shape.push_back(static_cast<std::int64_t>(v));
    }
    const auto& off = entry.contains("data_offsets") ? entry["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(where + "data_offsets is not [begin, end]");
    t.begin = off[0].get<std::uint64_t>();
    t.end = off[1].get<std::uint64_t>();
    if (t.begin > t.end || t.end > data_size)
      fail(where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
           "] lie outside the " + std::to_string(data_size) + " data bytes");
    if (numel > data_size / elem || t.end - t.begin != numel * elem)
      fail(where + "data_offsets span " + std::to_string(t.end - t.begin) + " bytes but " + t.dtype + " x shape " +
           entry["shape"].dump() + " needs " + std::to_string(numel) + " x " + std::to_string(elem));
    spans.push_back({t.begin, name});
    tensors_.emplace(name, std::move(t));
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    const SafetensorInfo& prev = tensors_.at(spans[i - 1].second);
    if (spans[i].first < prev.end && prev.end > prev.begin)
      fail("tensors '" + spans[i - 1].second + "' and '" + spans[i].second + "' overlap in the data section");
  }
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw SafetensorsError(path_ + ": no tensor '" + name + "'");
  const SafetensorInfo& t = it->second;
  std::string bytes(t.end - t.begin, '\0');  // bounded by the file size (checked when the header was read)
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + t.begin));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw SafetensorsError(path_ + ": tensor '" + name + "': cannot read its bytes (file changed or truncated?)");
  const std::uint64_t n = t.numel();
  std::vector<float> out(n);
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  for (std::uint64_t i = 0; i < n; ++i) {  // little-endian, whatever the host
    if (t.dtype == "F32") {
      const std::uint32_t u = b[4 * i] | b[4 * i + 1] << 8 | b[4 * i + 2] << 16 | static_cast<std::uint32_t>(b[4 * i + 3]) << 24;
      std::memcpy(&out[i], &u, 4);
    } else if (t.dtype == "F16") {
      out[i] = half_to_float(static_cast<std::uint16_t>(b[2 * i] | b[2 * i + 1] << 8));
    } else if (t.dtype == "BF16") {
      const std::uint32_t u = static_cast<std::uint32_t>(b[2 * i] | b[2 * i + 1] << 8) << 16;
      std::memcpy(&out[i], &u, 4);
    } else {  // F64
      std::uint64_t u = 0;
      for (int k = 0; k < 8; ++k) u |= static_cast<std::uint64_t>(b[8 * i + k]) << (8 * k);
      double d;
      std::memcpy(&d, &u, 8);
      out[i] = static_cast<float>(d);
    }
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const SafetensorOut& t : tensors) {
    const std::uint64_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');  // the data starts 8-byte aligned
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::uint64_t n = text.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(n >> (8 * i));
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const SafetensorOut& t : tensors)  // little-endian float32 (x86/ARM hosts)
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size() * sizeof(float)));
    if (!out) throw std::runtime_error(tmp + ": cannot write");
  }
  fs::rename(tmp, path);
}

}  // namespace pipelane
