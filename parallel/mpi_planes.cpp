#include "parallel/mpi_communicator.h"


#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>
#include <limits>
#include <stdexcept>
#include <string>

namespace pipelane {

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(what) + ": " + std::string(msg, len));
}

int count_of(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument("MPI plane: message over 2 GiB");
  return static_cast<int>(bytes);
}

class MpiRequest final : public CommRequest {
 public:
  MpiRequest() = default;
  ~MpiRequest() override {
    // A request must not outlive its buffer unfinished; waiting here keeps that true on errors.
    if (req_ != MPI_REQUEST_NULL) MPI_Wait(&req_, MPI_STATUS_IGNORE);
  }
  MPI_Request* handle() { return &req_; }
  bool test() override {
    if (req_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    check(MPI_Test(&req_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }
  void wait() override {
    if (req_ != MPI_REQUEST_NULL) check(MPI_Wait(&req_, MPI_STATUS_IGNORE), "MPI_Wait");
  }

 private:
  MPI_Request req_ = MPI_REQUEST_NULL;
};

// A data-plane completion: on the CPU a stream is the calling thread, so the transfer's MPI
// request is the whole event. It is created complete-pending; record() has nothing to order.
class MpiTransferEvent final : public Event {
 public:
  MPI_Request* handle() { return request_.handle(); }
  void record(Stream&) override {
    throw std::logic_error("an MPI transfer's completion event cannot be re-recorded");
  }
  bool query() const override { return request_.test(); }
  void synchronize() override { request_.wait(); }
  void wait_on(Stream&) override { request_.wait(); }
  double elapsed_ms_since(const Event&) const override {
    throw std::logic_error("an MPI transfer's completion event carries no timestamp");
  }

 private:
  mutable MpiRequest request_;
};

void reduce_in_pieces(MPI_Comm comm, void* data, std::size_t n, MPI_Datatype type, MPI_Op op) {
  // Large buffers go in pieces so counts stay within int.
  constexpr std::size_t kPiece = std::size_t{1} << 28;
  const std::size_t elem = type == MPI_DOUBLE ? 8 : 4;
  for (std::size_t off = 0; off < n; off += kPiece) {
    const std::size_t len = n - off < kPiece ? n - off : kPiece;
    check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + off * elem, static_cast<int>(len),
                        type, op, comm),
          "MPI_Allreduce");
  }
}

// Owns a duplicate of an MPI communicator.
class MpiComm {
 public:
  explicit MpiComm(MPI_Comm comm) {
    check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiComm() { MPI_Comm_free(&comm_); }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

// The control plane's pollable barrier: every rank sends rank 0 an arrival, rank 0 answers each
// with a release once all have arrived. Rank 0 therefore knows who is missing. The flags are
// atomics so a watchdog thread may read them while the owning thread polls.
class MpiArrivalBarrier final : public BarrierRequest {
 public:
  static constexpr int kArriveTag = 7101, kReleaseTag = 7102;

  MpiArrivalBarrier(MPI_Comm comm, int rank, int size)
      : comm_(comm), rank_(rank), size_(size), arrived_(static_cast<std::size_t>(size)) {
    if (rank_ == 0) {
      arrived_[0] = true;
      for (int r = 1; r < size_; ++r) {
        arrivals_.emplace_back(std::make_unique<MpiRequest>());
        check(MPI_Irecv(&token_, 0, MPI_BYTE, r, kArriveTag, comm_, arrivals_.back()->handle()), "MPI_Irecv");
      }
    } else {
      auto arrive = std::make_unique<MpiRequest>();
      check(MPI_Isend(&token_, 0, MPI_BYTE, 0, kArriveTag, comm_, arrive->handle()), "MPI_Isend");
      sends_.push_back(std::move(arrive));
      release_ = std::make_unique<MpiRequest>();
      check(MPI_Irecv(&token_, 0, MPI_BYTE, 0, kReleaseTag, comm_, release_->handle()), "MPI_Irecv");
    }
  }

  bool test() override {
    if (done_) return true;
    if (rank_ != 0) {
      done_ = release_->test();
      return done_;
    }
    bool all = true;
    for (int r = 1; r < size_; ++r) {
      if (!arrived_[r] && arrivals_[r - 1]->test()) arrived_[r] = true;
      all = all && arrived_[r];
    }
    if (!all) return false;
    for (int r = 1; r < size_; ++r) {
      sends_.emplace_back(std::make_unique<MpiRequest>());
      check(MPI_Isend(&token_, 0, MPI_BYTE, r, kReleaseTag, comm_, sends_.back()->handle()), "MPI_Isend");
    }
    done_ = true;
    return true;
  }
  void wait() override {
    while (!test()) std::this_thread::yield();
  }
  std::string missing() const override {
    // Only rank 0 sees the arrivals; the others wait for its release.
    if (rank_ != 0) return "0 (which collects the arrivals and has not released this barrier)";
    std::string out;
    for (int r = 0; r < size_; ++r)
      if (!arrived_[r]) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out;
  }

 private:
  MPI_Comm comm_;
  int rank_, size_;
  char token_ = 0;
  std::vector<std::atomic<bool>> arrived_;
  std::vector<std::unique_ptr<MpiRequest>> arrivals_, sends_;
  std::unique_ptr<MpiRequest> release_;
  bool done_ = false;
};

class MpiControlPlane final : public ControlPlane {
 public:
  explicit MpiControlPlane(MPI_Comm comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  std::unique_ptr<CommRequest> isend(const void* data, std::size_t bytes, int dest, int tag) override {
    auto r = std::make_unique<MpiRequest>();
    check(MPI_Isend(data, count_of(bytes), MPI_BYTE, dest, tag, comm_.get(), r->handle()), "MPI_Isend");
    return r;
  }
  std::unique_ptr<CommRequest> irecv(void* data, std::size_t bytes, int src, int tag) override {
    auto r = std::make_unique<MpiRequest>();
    check(MPI_Irecv(data, count_of(bytes), MPI_BYTE, src, tag, comm_.get(), r->handle()), "MPI_Irecv");
    return r;
  }
  void all_reduce_sum(double* data, std::size_t n) override {
    if (size() > 1) reduce_in_pieces(comm_.get(), data, n, MPI_DOUBLE, MPI_SUM);
  }
  void all_reduce_max(float* data, std::size_t n) override {
    if (size() > 1) reduce_in_pieces(comm_.get(), data, n, MPI_FLOAT, MPI_MAX);
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    if (size() > 1) check(MPI_Bcast(data, count_of(bytes), MPI_BYTE, root, comm_.get()), "MPI_Bcast");
  }
  void barrier() override { check(MPI_Barrier(comm_.get()), "MPI_Barrier"); }
  std::unique_ptr<BarrierRequest> ibarrier() override {
    return std::make_unique<MpiArrivalBarrier>(comm_.get(), rank(), size());
  }

 private:
  MpiComm comm_;
};

// Point-to-point without tags: MPI matches messages of one (communicator, source, tag) in the
// order they were posted, which is exactly the data plane's contract.
class MpiDataPlane final : public DataPlane {
 public:
  explicit MpiDataPlane(MPI_Comm comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  std::unique_ptr<Event> send(const void* data, std::size_t bytes, int peer, Stream&) override {
    auto e = std::make_unique<MpiTransferEvent>();
    check(MPI_Isend(data, count_of(bytes), MPI_BYTE, peer, 0, comm_.get(), e->handle()), "MPI_Isend");
    return e;
  }
  std::unique_ptr<Event> recv(void* data, std::size_t bytes, int peer, Stream&) override {
    auto e = std::make_unique<MpiTransferEvent>();
    check(MPI_Irecv(data, count_of(bytes), MPI_BYTE, peer, 0, comm_.get(), e->handle()), "MPI_Irecv");
    return e;
  }
  void all_reduce_sum(float* data, std::size_t n, Stream&) override {
    if (size() > 1) reduce_in_pieces(comm_.get(), data, n, MPI_FLOAT, MPI_SUM);
  }
  void all_reduce_max(float* data, std::size_t n, Stream&) override {
    if (size() > 1) reduce_in_pieces(comm_.get(), data, n, MPI_FLOAT, MPI_MAX);
  }
  std::unique_ptr<Event> all_reduce_sum_async(float* data, std::size_t n, Stream&) override {
    auto e = std::make_unique<MpiTransferEvent>();
    check(MPI_Iallreduce(MPI_IN_PLACE, data, count_of(n * sizeof(float)) / 4, MPI_FLOAT, MPI_SUM,
                         comm_.get(), e->handle()),
          "MPI_Iallreduce");
    return e;
  }
  void all_gather(const float* in, float* out, std::size_t n, Stream&) override {
    check(MPI_Allgather(in, count_of(n * sizeof(float)) / 4, MPI_FLOAT, out,
                        count_of(n * sizeof(float)) / 4, MPI_FLOAT, comm_.get()),
          "MPI_Allgather");
  }
  // In place, the input is the whole buffer and the rank's block of the sum lands at its start.
  std::unique_ptr<Event> reduce_scatter_sum_async(float* data, std::size_t n, Stream&) override {
    auto e = std::make_unique<MpiTransferEvent>();
    check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, data, count_of(n * sizeof(float)) / 4, MPI_FLOAT, MPI_SUM,
                                    comm_.get(), e->handle()),
          "MPI_Ireduce_scatter_block");
    return e;
  }
  std::unique_ptr<Event> all_gather_in_place_async(float* data, std::size_t n, Stream&) override {
    auto e = std::make_unique<MpiTransferEvent>();
    check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, count_of(n * sizeof(float)) / 4, MPI_FLOAT,
                         comm_.get(), e->handle()),
          "MPI_Iallgather");
    return e;
  }

 private:
  MpiComm comm_;
};

}  // namespace

std::unique_ptr<ControlPlane> make_mpi_control_plane(MPI_Comm comm) {
  return std::make_unique<MpiControlPlane>(comm);
}
std::unique_ptr<DataPlane> make_mpi_data_plane(MPI_Comm comm) {
  return std::make_unique<MpiDataPlane>(comm);
}

bool launched_by_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "SLURM_STEP_ID"})
    if (std::getenv(v)) return true;
  return false;
}

RankFailure first_failure(const std::string& my_error) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int mine = my_error.empty() ? size : rank, lowest = size;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  RankFailure f;
  if (lowest == size) return f;
  f.rank = lowest;
  int len = lowest == rank ? static_cast<int>(my_error.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT, lowest, MPI_COMM_WORLD);
  f.message = lowest == rank ? my_error : std::string(static_cast<std::size_t>(len), ' ');
  MPI_Bcast(f.message.data(), len, MPI_CHAR, lowest, MPI_COMM_WORLD);
  return f;
}

int ranks_on_this_host() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return 1;
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int n = 1;
  MPI_Comm_size(local, &n);
  MPI_Comm_free(&local);
  return n;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiSession::~MpiSession() { MPI_Finalize(); }

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace pipelane
