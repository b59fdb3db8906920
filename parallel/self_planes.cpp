// A group of one, and gather_to_root (written once over any ControlPlane).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "parallel/communicator.h"

namespace pipelane {

namespace {

class DoneRequest final : public CommRequest {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class DoneBarrier final : public BarrierRequest {
 public:
  bool test() override { return true; }
  void wait() override {}
  std::string missing() const override { return ""; }
};

class SelfControlPlane final : public ControlPlane {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::unique_ptr<CommRequest> isend(const void*, std::size_t, int, int) override {
    throw std::logic_error("self control plane: no peer to send to");
  }
  std::unique_ptr<CommRequest> irecv(void*, std::size_t, int, int) override {
    throw std::logic_error("self control plane: no peer to receive from");
  }
  void all_reduce_sum(double*, std::size_t) override {}
  void all_reduce_max(float*, std::size_t) override {}
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}
  std::unique_ptr<BarrierRequest> ibarrier() override { return std::make_unique<DoneBarrier>(); }
};

class SelfDataPlane final : public DataPlane {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::unique_ptr<Event> send(const void*, std::size_t, int, Stream&) override {
    throw std::logic_error("self data plane: no peer to send to");
  }
  std::unique_ptr<Event> recv(void*, std::size_t, int, Stream&) override {
    throw std::logic_error("self data plane: no peer to receive from");
  }
  void all_reduce_sum(float*, std::size_t, Stream&) override {}
  void all_reduce_max(float*, std::size_t, Stream&) override {}
  std::unique_ptr<Event> all_reduce_sum_async(float*, std::size_t, Stream&) override {
    return std::make_unique<CompletedEvent>();
  }
  void all_gather(const float* in, float* out, std::size_t n, Stream&) override {
    for (std::size_t i = 0; i < n; ++i) out[i] = in[i];
  }
  // A group of one: its block is the sum, and the gathered whole.
  std::unique_ptr<Event> reduce_scatter_sum_async(float*, std::size_t, Stream&) override {
    return std::make_unique<CompletedEvent>();
  }
  std::unique_ptr<Event> all_gather_in_place_async(float*, std::size_t, Stream&) override {
    return std::make_unique<CompletedEvent>();
  }
};

}  // namespace

std::unique_ptr<ControlPlane> make_self_control_plane() {
  return std::make_unique<SelfControlPlane>();
}
std::unique_ptr<DataPlane> make_self_data_plane() { return std::make_unique<SelfDataPlane>(); }

std::vector<std::string> gather_to_root(ControlPlane& plane, const std::string& mine) {
  // Tags of their own, so a gather never matches another exchange's messages.
  constexpr int kLengthTag = 7001, kDataTag = 7002;
  std::vector<std::string> out;
  if (plane.rank() == 0) {
    out.push_back(mine);
    for (int r = 1; r < plane.size(); ++r) {
      std::uint64_t len = 0;
      plane.irecv(&len, sizeof len, r, kLengthTag)->wait();
      std::string buf(len, ' ');
      plane.irecv(buf.data(), len, r, kDataTag)->wait();
      out.push_back(std::move(buf));
    }
  } else {
    const std::uint64_t len = mine.size();
    plane.isend(&len, sizeof len, 0, kLengthTag)->wait();
    plane.isend(mine.data(), len, 0, kDataTag)->wait();
  }
  return out;
}

}  // namespace pipelane
