#include "lanes/isolation/output_quota.h"

#include <filesystem>

#include "lanes/lane.h"

namespace pipelane {
namespace {
std::string describe(std::uint64_t bytes) {
  return bytes >= (std::uint64_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}
}  // namespace

OutputQuota::OutputQuota(std::string dir, std::uint64_t bytes, double interval_s)
    : dir_(std::move(dir)), bytes_(bytes), interval_(interval_s) {}

std::uint64_t directory_bytes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::uint64_t total = 0;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code file_ec;
    if (it->is_regular_file(file_ec)) {
      const auto size = it->file_size(file_ec);
      if (!file_ec) total += size;
    }
  }
  return total;
}

void OutputQuota::check(bool now) {
  if (dir_.empty() || bytes_ == 0) return;
  const auto t = std::chrono::steady_clock::now();
  if (!now && walked_ && t - last_walk_ < interval_) return;
  walked_ = true;
  last_walk_ = t;
  last_size_ = directory_bytes(dir_);
  // Reaching it is enough: a file that hit the kernel's per-file cap (RLIMIT_FSIZE, the same
  // number in a worker) stops exactly there.
  if (last_size_ >= bytes_)
    throw LaneError("its output directory " + dir_ + " holds " + describe(last_size_) + ", its quota is " +
                    describe(bytes_) + " ([lanes] output_mb)");
}

}  // namespace pipelane
