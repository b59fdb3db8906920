// wan_message_probe: what one pipeline message costs on the emulated WAN, as MPI moves it. Run under
// scripts/wan/emulate.sh like a training job; the first rank of the first site and the rank
// `--peer` (default: the first of the second site, world size / 2 when the sites have equal
// ranks) exchange `--bytes` messages, both ways at once by default (a pipeline sends activations
// one way while gradients come back), one exchange after the other with the receives posted
// first, as the executor posts them. With --all-pairs every rank r of the first half exchanges
// with r + world size / 2 at the same time (the data-parallel pipelines sending at once, as under
// concurrent sharing). Each message's time runs from its send being posted to its receive
// completing, on the machine's monotonic clock (one clock for every namespace).
//
//   wan_message_probe --bytes N [--rounds K] [--peer R | --all-pairs] [--one-way]
//
// Prints one JSON line: {"bytes", "rounds", "bidirectional", "pairs", "message_ms": [...], "median_ms",
// "p10_ms", "p90_ms"} (the first two exchanges are warm-up and left out). scripts/bench/wan.sh
// turns the median into the link's effective bandwidth for the simulator.
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double now_s() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

constexpr const char* kUsage =
    "usage: wan_message_probe --bytes N [--rounds K] [--peer R | --all-pairs] [--one-way]\n"
    "  (run under scripts/wan/emulate.sh like a job; prints one JSON line of message times)\n"
    "  --bytes N      message size (1..2^30)\n"
    "  --rounds K     exchanges, the first two left out (default 12, at least 3)\n"
    "  --peer R       the rank that exchanges with rank 0 (default: world size / 2)\n"
    "  --all-pairs    every rank r < size/2 with r + size/2, all at once\n"
    "  --one-way      rank 0 (or the first half) sends, its peer receives\n";

// Every rank parses the same arguments and stops alike; rank 0 says why.
[[noreturn]] void usage(const char* why) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::fprintf(stderr, "wan_message_probe: %s\n%s", why, kUsage);
  MPI_Finalize();
  std::exit(2);
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t i = static_cast<std::size_t>(pos);
  return i + 1 < v.size() ? v[i] + (pos - static_cast<double>(i)) * (v[i + 1] - v[i]) : v[i];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long bytes = 0;
  int rounds = 12, peer = size / 2;
  bool both_ways = true, all_pairs = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return std::atol(argv[++i]);
    };
    if (a == "--bytes") bytes = value();
    else if (a == "--rounds") rounds = static_cast<int>(value());
    else if (a == "--peer") peer = static_cast<int>(value());
    else if (a == "--one-way") both_ways = false;
    else if (a == "--all-pairs") all_pairs = true;
    else if (a == "-h" || a == "--help") {
      if (rank == 0) std::printf("wan_message_probe: what one message costs between ranks of two sites\n%s", kUsage);
      MPI_Finalize();
      return 0;
    }
    else usage(("unknown option '" + a + "'").c_str());
  }
  if (bytes <= 0 || bytes > (1L << 30)) usage("--bytes must be in 1..2^30");
  if (rounds < 3) usage("--rounds must be at least 3");
  if (size < 2 || peer <= 0 || peer >= size) usage("needs 2+ ranks and 0 < --peer < world size");

  std::vector<char> out(static_cast<std::size_t>(bytes), 1), in(static_cast<std::size_t>(bytes));
  std::vector<double> message_ms;
  if (all_pairs && size % 2) usage("--all-pairs needs an even world size");
  const int half = size / 2;
  const bool active = all_pairs || rank == 0 || rank == peer;
  const int other = all_pairs ? (rank < half ? rank + half : rank - half) : rank == 0 ? peer : 0;
  const bool first_side = all_pairs ? rank < half : rank == 0;
  for (int k = 0; k < rounds; ++k) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (!active) continue;
    const bool sends = both_ways || first_side, receives = both_ways || !first_side;
    MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
    if (receives) MPI_Irecv(in.data(), static_cast<int>(bytes), MPI_BYTE, other, k, MPI_COMM_WORLD, &recv);
    // The peer's receive is posted before this rank sends (the case the executor aims for): a
    // zero-byte "posted" note each way (a barrier's exits may be a WAN latency apart).
    char note = 0;
    MPI_Sendrecv(&note, 0, MPI_BYTE, other, 1 << 19, &note, 0, MPI_BYTE, other, 1 << 19, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    double times[2] = {0, 0};  // [send posted, receive done]
    times[0] = now_s();
    if (sends) MPI_Isend(out.data(), static_cast<int>(bytes), MPI_BYTE, other, k, MPI_COMM_WORLD, &send);
    int recv_done = !receives, send_done = !sends;
    while (!recv_done || !send_done) {
      if (!recv_done) {
        MPI_Test(&recv, &recv_done, MPI_STATUS_IGNORE);
        if (recv_done) times[1] = now_s();
      }
      if (!send_done) MPI_Test(&send, &send_done, MPI_STATUS_IGNORE);
    }
    // The peer's send time, to measure this rank's receive from it.
    double peer_times[2] = {0, 0};
    MPI_Sendrecv(times, 2, MPI_DOUBLE, other, 1 << 20, peer_times, 2, MPI_DOUBLE, other, 1 << 20, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (receives && k >= 2) message_ms.push_back(1e3 * (times[1] - peer_times[0]));
  }
  // Rank 0 reports every rank's received messages.
  int count = static_cast<int>(message_ms.size());
  if (rank != 0) {
    MPI_Send(&count, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
    MPI_Send(message_ms.data(), count, MPI_DOUBLE, 0, 8, MPI_COMM_WORLD);
  } else {
    for (int r = 1; r < size; ++r) {
      int theirs = 0;
      MPI_Recv(&theirs, 1, MPI_INT, r, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      std::vector<double> more(static_cast<std::size_t>(theirs));
      MPI_Recv(more.data(), theirs, MPI_DOUBLE, r, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      message_ms.insert(message_ms.end(), more.begin(), more.end());
    }
    std::printf("{\"bytes\": %ld, \"rounds\": %d, \"bidirectional\": %s, \"pairs\": %d, \"message_ms\": [",
                bytes, rounds, both_ways ? "true" : "false", all_pairs ? half : 1);
    for (std::size_t i = 0; i < message_ms.size(); ++i) std::printf("%s%.3f", i ? ", " : "", message_ms[i]);
    std::printf("], \"median_ms\": %.3f, \"p10_ms\": %.3f, \"p90_ms\": %.3f}\n", quantile(message_ms, 0.5),
                quantile(message_ms, 0.1), quantile(message_ms, 0.9));
  }
  MPI_Finalize();
  return 0;
}
