// wan_delay: the WAN's latency for scripts/wan/emulate.sh, from user space (this kernel has no
// netem). It owns a tun device in the emulation's router namespace; the router sends every packet
// going from one site to another into it, and this program writes each back after the one-way
// delay of its pair of sites, in arrival order per pair. The kernel then forwards it to the
// destination site (whose link's bandwidth a tc qdisc limits).
//
//   wan_delay --tun NAME --pair FROM:TO:MICROSECONDS [--pair ...] [--site-octet-divisor D]
//             [--max-queue-mb N]
//
// Sites are told apart by the third octet of the IPv4 addresses divided by D (default 1: the
// emulation gives site i the subnets 10.213.(8i + k).0/24, one per interface k, with D = 8). A
// pair not listed gets no delay. On SIGTERM/SIGINT it prints what it
// forwarded and how late packets left against their due time (p50, p99, max), then exits.
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

struct Packet {
  std::int64_t due_ns;
  std::vector<unsigned char> bytes;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "wan_delay: %s\nusage: wan_delay --tun NAME --pair FROM:TO:MICROSECONDS [--pair ...] "
               "[--site-octet-divisor D] [--max-queue-mb N]\n", why);
  std::exit(2);
}

int open_tun(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK);
  if (fd < 0) {
    std::perror("wan_delay: /dev/net/tun");
    std::exit(1);
  }
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    std::perror(("wan_delay: attach to tun " + name).c_str());
    std::exit(1);
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tun;
  std::map<std::pair<int, int>, std::int64_t> delay_ns;
  std::size_t max_queue = std::size_t{256} << 20;
  int divisor = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing the value of " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--tun") {
      tun = v;
    } else if (a == "--pair") {
      int from = -1, to = -1;
      long long us = -1;
      if (std::sscanf(v.c_str(), "%d:%d:%lld", &from, &to, &us) != 3 || from < 0 || from > 255 || to < 0 ||
          to > 255 || us < 0)
        usage(("--pair " + v + ": expected FROM:TO:MICROSECONDS").c_str());
      delay_ns[{from, to}] = us * 1000;
    } else if (a == "--site-octet-divisor") {
      divisor = std::atoi(v.c_str());
      if (divisor < 1 || divisor > 255) usage(("--site-octet-divisor " + v + ": expected 1 to 255").c_str());
    } else if (a == "--max-queue-mb") {
      max_queue = static_cast<std::size_t>(std::atol(v.c_str())) << 20;
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  if (tun.empty()) usage("give --tun NAME");
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  const int fd = open_tun(tun);

  // One FIFO per pair: a pair's delay is constant, so its packets are due in arrival order.
  std::map<std::pair<int, int>, std::deque<Packet>> queues;
  std::size_t queued_bytes = 0, most_queued = 0;
  std::uint64_t packets = 0, bytes = 0, dropped = 0;
  std::vector<std::int64_t> lateness;  // ns past due when written (a sample of up to 1M)
  std::vector<unsigned char> buffer(65536);
  while (!g_stop) {
    std::int64_t next_due = -1;
    for (const auto& [pair, q] : queues)
      if (!q.empty() && (next_due < 0 || q.front().due_ns < next_due)) next_due = q.front().due_ns;
    timespec timeout{1, 0};
    if (next_due >= 0) {
      const std::int64_t wait = std::max<std::int64_t>(0, next_due - now_ns());
      timeout = {static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ppoll(&p, 1, &timeout, nullptr);
    if (ready < 0 && errno != EINTR) {
      std::perror("wan_delay: ppoll");
      return 1;
    }
    if (ready > 0 && (p.revents & POLLIN)) {
      for (;;) {
        const ssize_t n = read(fd, buffer.data(), buffer.size());
        if (n <= 0) break;
        const std::int64_t t = now_ns();
        int from = -1, to = -1;
        if (n >= 20 && (buffer[0] >> 4) == 4) {
          from = buffer[14] / divisor;  // third octet of the source address
          to = buffer[18] / divisor;    // ... of the destination
        }
        const auto d = delay_ns.find({from, to});
        const std::int64_t delay = d == delay_ns.end() ? 0 : d->second;
        if (queued_bytes + static_cast<std::size_t>(n) > max_queue) {
          ++dropped;
          continue;
        }
        queues[{from, to}].push_back({t + delay, std::vector<unsigned char>(buffer.begin(), buffer.begin() + n)});
        queued_bytes += static_cast<std::size_t>(n);
        most_queued = std::max(most_queued, queued_bytes);
      }
    }
    const std::int64_t t = now_ns();
    for (auto& [pair, q] : queues)
      while (!q.empty() && q.front().due_ns <= t) {
        const Packet& pk = q.front();
        if (write(fd, pk.bytes.data(), pk.bytes.size()) > 0) {
          ++packets;
          bytes += pk.bytes.size();
          if (lateness.size() < 1000000) lateness.push_back(t - pk.due_ns);
        }
        queued_bytes -= pk.bytes.size();
        q.pop_front();
      }
  }
  std::sort(lateness.begin(), lateness.end());
  const auto at = [&](double q) {
    return lateness.empty() ? 0.0 : lateness[static_cast<std::size_t>(q * (lateness.size() - 1))] / 1e3;
  };
  std::fprintf(stderr,
               "wan_delay: forwarded %llu packets (%.1f MB), dropped %llu, most queued %.2f MB; left after their "
               "due time by p50 %.0f us, p99 %.0f us, max %.0f us\n",
               static_cast<unsigned long long>(packets), bytes / 1e6, static_cast<unsigned long long>(dropped),
               most_queued / 1e6, at(0.5), at(0.99), at(1.0));
  close(fd);
  return 0;
}
