// A LaneContext for the pagerank/imageproc/command lane tests: one-thread CPU backend, a low
// priority stream, an arena with the given quota and a fresh temporary output directory.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "lanes/lane.h"
#include "runtime/arena.h"
#include "runtime/cpu/cpu_backend.h"

namespace pipelane::testing_io {

inline std::string make_temp_dir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("pipelane_" + tag + "_XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

struct LaneEnv {
  LaneEnv(const std::string& lane, std::map<std::string, std::string> values,
          std::size_t arena_bytes = 64u << 20)
      : device(make_cpu_backend(1)),
        stream(device->create_stream(StreamPriority::Low)),
        arena(lane + "-arena", arena_bytes),
        options(lane, std::move(values), "test.ini"),
        dir(make_temp_dir(lane)),
        ctx{*device, *stream, arena, options, dir, 0, 1} {}
  ~LaneEnv() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::unique_ptr<Backend> device;
  std::unique_ptr<Stream> stream;
  Arena arena;
  LaneOptions options;
  std::string dir;
  LaneContext ctx;
};

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace pipelane::testing_io
