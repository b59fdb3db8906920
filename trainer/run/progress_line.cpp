#include "trainer/run/progress_line.h"

#include <poll.h>
#include <unistd.h>

#include <cmath>

namespace pipelane {

ProgressLine::ProgressLine(std::FILE* out, int total_steps, int log_every, bool allow_live)
    : out_(out), total_(total_steps), log_every_(log_every),
      live_(allow_live && isatty(fileno(out)) != 0) {}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 86400)
    std::snprintf(buf, sizeof buf, "%ldd %02ld:%02ld:%02ld", s / 86400, (s / 3600) % 24, (s / 60) % 60, s % 60);
  else if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

void ProgressLine::update(int step, double loss, double lr, double tokens_per_s, double eta_s) {
  const int shown = step + 1;
  if (!live_ && shown % log_every_ != 0 && shown != total_ && shown != 1) return;
  // A console that stopped reading (mpirun after a SIGTERM stops forwarding output; a paused
  // terminal) must not stall training: a step line that would block is skipped and counted.
  // A line is far below PIPE_BUF, and POLLOUT on a pipe means a free page, so a write never blocks.
  pollfd ready{fileno(out_), POLLOUT, 0};
  if (poll(&ready, 1, 0) != 1 || (ready.revents & POLLOUT) == 0) {
    ++skipped_;
    return;
  }
  char rate[32], line[192];
  if (tokens_per_s >= 1000) std::snprintf(rate, sizeof rate, "%.1fk", tokens_per_s / 1e3);
  else std::snprintf(rate, sizeof rate, "%.0f", tokens_per_s);  // a slow run is not "0.0k"
  std::snprintf(line, sizeof line, "step %*d/%d | loss %.4f | lr %.2e | %s tok/s | ETA %s",
                static_cast<int>(std::to_string(total_).size()), shown, total_, loss, lr, rate,
                format_duration(eta_s).c_str());
  // A live line replaces the skipped ones anyway; plain lines say how many are missing.
  if (skipped_ > 0 && !live_)
    std::fprintf(out_, "(%ld step lines skipped: the console was not reading)\n", skipped_);
  skipped_ = 0;
  if (live_) {
    std::fprintf(out_, "\r\033[2K%s", line);
    dirty_ = true;
  } else {
    std::fprintf(out_, "%s\n", line);
  }
  std::fflush(out_);
}

void ProgressLine::note(const std::string& line) {
  if (dirty_) std::fprintf(out_, "\r\033[2K");
  dirty_ = false;
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void ProgressLine::finish() {
  if (dirty_) std::fprintf(out_, "\n");
  dirty_ = false;
  std::fflush(out_);
}

}  // namespace pipelane
