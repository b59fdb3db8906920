#include "lanes/builtin/graph/edge_source.h"

#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "lanes/builtin/graph/rmat.h"

namespace pipelane {
namespace {

// Lines of a plain or gzip file (gzread passes a plain file through unchanged).
class LineReader {
 public:
  LineReader(const std::string& path, const std::string& lane) : path_(path), lane_(lane) {
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_)
      throw LaneError(lane + ": cannot open graph '" + path + "': " +
                      (errno ? std::strerror(errno) : "out of memory"));
    gzbuffer(file_, 1 << 17);
  }
  ~LineReader() { gzclose(file_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its '\n' (a final line need not end in one); false at the end.
  bool next(std::string& line) {
    line.clear();
    char buf[4096];
    while (gzgets(file_, buf, sizeof buf)) {
      const std::size_t n = std::strlen(buf);
      line.append(buf, n);
      if (n > 0 && buf[n - 1] == '\n') return true;
    }
    int code = 0;
    const char* message = gzerror(file_, &code);
    if (code != Z_OK)  // Z_BUF_ERROR here is a gzip stream cut short: an error, not a shorter graph
      throw LaneError(lane_ + ": error reading graph '" + path_ + "': " + message);
    return !line.empty();
  }

 private:
  std::string path_, lane_;
  gzFile file_ = nullptr;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Parses "src dst [weight]"; false if the line is not one.
bool parse_edge(const char* p, SourceEdge& edge) {
  std::uint64_t ids[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    while (*p == ' ' || *p == '\t') ++p;
    if (*p < '0' || *p > '9') return false;
    std::uint64_t v = 0;
    while (*p >= '0' && *p <= '9') {
      v = v * 10 + static_cast<std::uint64_t>(*p - '0');
      if (v > kMaxGraphVertexId) return false;
      ++p;
    }
    if (*p != '\0' && !is_space(*p)) return false;
    ids[k] = v;
  }
  while (*p == ' ' || *p == '\t') ++p;
  edge.has_weight = false;
  if (*p != '\0' && !is_space(*p)) {
    char* end = nullptr;
    errno = 0;
    const float w = std::strtof(p, &end);
    if (end == p || errno == ERANGE) return false;
    p = end;
    edge.has_weight = true;
    edge.weight = w;
  }
  while (is_space(*p)) ++p;
  if (*p != '\0') return false;
  edge.src = static_cast<std::uint32_t>(ids[0]);
  edge.dst = static_cast<std::uint32_t>(ids[1]);
  return true;
}

void read_edge_file(const EdgeSource& source, const std::function<void(const SourceEdge&)>& emit) {
  LineReader reader(source.path, source.lane);
  std::string line;
  std::uint64_t lineno = 0;
  SourceEdge edge;
  while (reader.next(line)) {
    ++lineno;
    const char* p = line.c_str();
    while (is_space(*p)) ++p;
    if (*p == '\0' || *p == '#') continue;
    if (!parse_edge(p, edge)) {
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      if (line.size() > 80) line = line.substr(0, 80) + "...";
      throw LaneError(source.lane + ": " + source.path + ":" + std::to_string(lineno) + ": malformed edge '" +
                      line + "' (expected 'src dst [weight]', non-negative integer ids up to " +
                      std::to_string(kMaxGraphVertexId) + ", a number for the weight)");
    }
    emit(edge);
  }
}

}  // namespace

std::string EdgeSource::describe() const {
  if (!generated()) return path;
  return "rmat scale " + std::to_string(scale) + " edge_factor " + std::to_string(edge_factor) + " seed " +
         std::to_string(seed);
}

EdgeSource read_edge_source(const LaneOptions& o) {
  EdgeSource s;
  s.lane = o.lane();
  s.path = o.get_string("graph", "");
  const std::string generate = o.get_string("generate", "");
  s.scale = static_cast<int>(o.get_int("scale", 16, 1, 31));
  s.edge_factor = o.get_int("edge_factor", 16, 1, 1024);
  s.seed = static_cast<std::uint64_t>(o.get_int("seed", 1, 0, INT64_MAX));
  const std::string section = "[lane." + o.lane() + "]";
  if (s.path.empty() == generate.empty())
    throw LaneError(section + ": set exactly one of 'graph = PATH' or 'generate = rmat'");
  if (!generate.empty() && generate != "rmat")
    throw LaneError(section + " generate = '" + generate + "': expected 'rmat'");
  if (generate.empty() && (o.has("scale") || o.has("edge_factor") || o.has("seed")))
    throw LaneError(section + ": scale/edge_factor/seed apply only to 'generate = rmat'");
  return s;
}

void for_each_source_edge(const EdgeSource& source, const std::function<void(const SourceEdge&)>& emit) {
  if (!source.generated()) return read_edge_file(source, emit);
  SourceEdge edge;
  for_each_rmat_edge(source.scale, source.edge_factor, source.seed, [&](std::uint32_t s, std::uint32_t d) {
    edge.src = s;
    edge.dst = d;
    emit(edge);
  });
}

}  // namespace pipelane
