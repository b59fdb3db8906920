#include "parallel/device_planes.h"

#include <mpi.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "parallel/device_comm_plan.h"

namespace pipelane {

namespace {

// An event recorded on `stream` now.
std::unique_ptr<Event> recorded(Backend& backend, Stream& stream) {
  std::unique_ptr<Event> e = backend.create_event();
  e->record(stream);
  return e;
}

class DeviceSelfPlane final : public DataPlane {
 public:
  explicit DeviceSelfPlane(Backend& backend) : backend_(backend) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::unique_ptr<Event> send(const void*, std::size_t, int, Stream&) override {
    throw std::logic_error("device self plane: no peer to send to");
  }
  std::unique_ptr<Event> recv(void*, std::size_t, int, Stream&) override {
    throw std::logic_error("device self plane: no peer to receive from");
  }
  void all_reduce_sum(float*, std::size_t, Stream&) override {}
  void all_reduce_max(float*, std::size_t, Stream&) override {}
  std::unique_ptr<Event> all_reduce_sum_async(float*, std::size_t, Stream& stream) override {
    return recorded(backend_, stream);
  }
  void all_gather(const float* in, float* out, std::size_t n, Stream& stream) override {
    backend_.copy(out, in, n * sizeof(float), stream);
  }
  std::unique_ptr<Event> reduce_scatter_sum_async(float*, std::size_t, Stream& stream) override {
    return recorded(backend_, stream);
  }
  std::unique_ptr<Event> all_gather_in_place_async(float*, std::size_t, Stream& stream) override {
    return recorded(backend_, stream);
  }

 private:
  Backend& backend_;
};

class DeviceCollectivePlane final : public DataPlane {
 public:
  DeviceCollectivePlane(Backend& backend, std::unique_ptr<DeviceComm> comm)
      : backend_(backend), comm_(std::move(comm)) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::unique_ptr<Event> send(const void* data, std::size_t bytes, int peer, Stream& stream) override {
    comm_->send(data, bytes, peer, stream);
    return recorded(backend_, stream);
  }
  std::unique_ptr<Event> recv(void* data, std::size_t bytes, int peer, Stream& stream) override {
    comm_->recv(data, bytes, peer, stream);
    return recorded(backend_, stream);
  }
  void all_reduce_sum(float* data, std::size_t n, Stream& stream) override { comm_->all_reduce_sum(data, n, stream); }
  void all_reduce_max(float* data, std::size_t n, Stream& stream) override { comm_->all_reduce_max(data, n, stream); }
  std::unique_ptr<Event> all_reduce_sum_async(float* data, std::size_t n, Stream& stream) override {
    comm_->all_reduce_sum(data, n, stream);
    return recorded(backend_, stream);
  }
  void all_gather(const float* in, float* out, std::size_t n, Stream& stream) override {
    comm_->all_gather(in, out, n, stream);
  }
  // NCCL reduces in place into the rank's own block; the data plane's convention is the first
  // block, one stream-ordered copy away (blocks 0 and rank() do not overlap).
  std::unique_ptr<Event> reduce_scatter_sum_async(float* data, std::size_t n, Stream& stream) override {
    comm_->reduce_scatter_sum(data, n, stream);
    if (rank() > 0) backend_.copy(data, data + static_cast<std::size_t>(rank()) * n, n * sizeof(float), stream);
    return recorded(backend_, stream);
  }
  std::unique_ptr<Event> all_gather_in_place_async(float* data, std::size_t n, Stream& stream) override {
    comm_->all_gather(data + static_cast<std::size_t>(rank()) * n, data, n, stream);
    return recorded(backend_, stream);
  }

 private:
  Backend& backend_;
  std::unique_ptr<DeviceComm> comm_;
};

// Point-to-point between pipeline stages: a link (communicator + stream) per peer and direction.
class DeviceLinkPlane final : public DataPlane {
 public:
  struct Link {
    std::unique_ptr<DeviceComm> comm;  // rank 0 sends, rank 1 receives
    std::unique_ptr<Stream> stream;
  };
  DeviceLinkPlane(Backend& backend, int rank, int size) : backend_(backend), rank_(rank), size_(size) {}
  void add_send_link(int peer, Link link) { sends_[peer] = std::move(link); }
  void add_recv_link(int peer, Link link) { recvs_[peer] = std::move(link); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::unique_ptr<Event> send(const void* data, std::size_t bytes, int peer, Stream& stream) override {
    Link& link = find(sends_, peer, "to");
    recorded(backend_, stream)->wait_on(*link.stream);  // after what `stream` produced
    link.comm->send(data, bytes, 1, *link.stream);
    return recorded(backend_, *link.stream);
  }
  std::unique_ptr<Event> recv(void* data, std::size_t bytes, int peer, Stream& stream) override {
    Link& link = find(recvs_, peer, "from");
    recorded(backend_, stream)->wait_on(*link.stream);
    link.comm->recv(data, bytes, 0, *link.stream);
    return recorded(backend_, *link.stream);
  }
  void all_reduce_sum(float*, std::size_t, Stream&) override { no_collectives(); }
  void all_reduce_max(float*, std::size_t, Stream&) override { no_collectives(); }
  std::unique_ptr<Event> all_reduce_sum_async(float*, std::size_t, Stream&) override { no_collectives(); }
  void all_gather(const float*, float*, std::size_t, Stream&) override { no_collectives(); }
  std::unique_ptr<Event> reduce_scatter_sum_async(float*, std::size_t, Stream&) override { no_collectives(); }
  std::unique_ptr<Event> all_gather_in_place_async(float*, std::size_t, Stream&) override { no_collectives(); }

 private:
  [[noreturn]] static void no_collectives() {
    throw std::logic_error("a pipeline plane of device links carries point-to-point transfers only");
  }
  Link& find(std::map<int, Link>& links, int peer, const char* dir) {
    const auto it = links.find(peer);
    if (it == links.end())
      throw std::logic_error("device pipeline plane: no link " + std::string(dir) + " stage " + std::to_string(peer));
    return it->second;
  }
  Backend& backend_;
  int rank_, size_;
  std::map<int, Link> sends_, recvs_;
};

}  // namespace

void install_device_self_planes(Topology& topo, Backend& backend) {
  topo.tp = std::make_unique<DeviceSelfPlane>(backend);
  topo.dp = std::make_unique<DeviceSelfPlane>(backend);
  topo.pp_forward = std::make_unique<DeviceSelfPlane>(backend);
  topo.pp_backward = std::make_unique<DeviceSelfPlane>(backend);
  topo.embedding = nullptr;
}

void install_device_planes(Topology& topo, Backend& backend, int device) {
  using Kind = DeviceCommGroup::Kind;
  const ParallelDims dims = topo.grid.dims();
  const std::vector<DeviceCommGroup> plan = device_comm_plan(dims);
  // One id per communicator, all made by world rank 0 and broadcast in plan order.
  std::vector<char> ids;
  std::size_t id_len = 0;
  if (topo.world_rank == 0)
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const std::vector<char> id = cuda_comm_unique_id();
      id_len = id.size();
      ids.insert(ids.end(), id.begin(), id.end());
    }
  topo.world->broadcast(&id_len, sizeof id_len, 0);
  ids.resize(id_len * plan.size());
  if (!ids.empty()) topo.world->broadcast(ids.data(), ids.size(), 0);

  const std::vector<int> mine = device_comms_of(plan, topo.world_rank);
  std::vector<DeviceCommSpec> specs;
  for (int index : mine) {
    const DeviceCommGroup& g = plan[static_cast<std::size_t>(index)];
    DeviceCommSpec s;
    s.id.assign(ids.begin() + static_cast<std::ptrdiff_t>(index * id_len),
                ids.begin() + static_cast<std::ptrdiff_t>((index + 1) * id_len));
    s.size = static_cast<int>(g.members.size());
    s.rank = static_cast<int>(std::find(g.members.begin(), g.members.end(), topo.world_rank) - g.members.begin());
    specs.push_back(std::move(s));
  }
  std::vector<std::unique_ptr<DeviceComm>> comms = create_cuda_comms(specs, device);

  install_device_self_planes(topo, backend);  // groups of one keep these
  auto forward = std::make_unique<DeviceLinkPlane>(backend, topo.me.pp, dims.pp);
  auto backward = std::make_unique<DeviceLinkPlane>(backend, topo.me.pp, dims.pp);
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const DeviceCommGroup& g = plan[static_cast<std::size_t>(mine[k])];
    std::unique_ptr<DeviceComm>& comm = comms[k];
    switch (g.kind) {
      case Kind::TensorParallel: topo.tp = std::make_unique<DeviceCollectivePlane>(backend, std::move(comm)); break;
      case Kind::DataParallel: topo.dp = std::make_unique<DeviceCollectivePlane>(backend, std::move(comm)); break;
      case Kind::Embedding:
        topo.embedding = std::make_unique<DeviceCollectivePlane>(backend, std::move(comm));
        break;
      case Kind::ForwardLink:
      case Kind::BackwardLink: {
        DeviceLinkPlane& plane = g.kind == Kind::ForwardLink ? *forward : *backward;
        const bool sender = g.members[0] == topo.world_rank;
        const int peer = topo.grid.coords(g.members[sender ? 1 : 0]).pp;
        DeviceLinkPlane::Link link{std::move(comm), backend.create_stream(StreamPriority::Normal)};
        if (sender)
          plane.add_send_link(peer, std::move(link));
        else
          plane.add_recv_link(peer, std::move(link));
        break;
      }
    }
  }
  if (dims.pp > 1) {
    topo.pp_forward = std::move(forward);
    topo.pp_backward = std::move(backward);
  }
}

int local_rank_on_this_host() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return 0;
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int rank = 0;
  MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  return rank;
}

}  // namespace pipelane
