// The disk quota of a lane's output directory ([lanes] output_mb): a lane that writes more than its
// share (a command flooding stdout, a plugin dumping state every step) is stopped before it fills
// the disk training's checkpoints need. The directory is walked at most once per interval, so the
// check costs a lane's steps little even when it writes many files.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace pipelane {

class OutputQuota {
 public:
  OutputQuota() = default;  // no directory or no quota: check() does nothing
  OutputQuota(std::string dir, std::uint64_t bytes, double interval_s = 1.0);
  // LaneError naming the directory, its size and the quota when it holds the quota or more.
  // Walks the directory only when `interval_s` passed since the last walk (or `now` is set).
  void check(bool now = false);
  std::uint64_t last_size() const { return last_size_; }

 private:
  std::string dir_;
  std::uint64_t bytes_ = 0;
  std::chrono::duration<double> interval_{1.0};
  std::chrono::steady_clock::time_point last_walk_{};
  bool walked_ = false;
  std::uint64_t last_size_ = 0;
};

// Bytes of the regular files under `dir` (not following links); 0 when it does not exist.
std::uint64_t directory_bytes(const std::string& dir);

}  // namespace pipelane
