#include "parallel/mpi_communicator.h"

#include <cstdlib>
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
    throw std::invalid_argument("MpiCommunicator: message over 2 GiB");
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

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) {
    check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override { MPI_Comm_free(&comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::unique_ptr<CommRequest> isend(const void* data, std::size_t bytes, int dest, int tag) override {
    auto r = std::make_unique<MpiRequest>();
    check(MPI_Isend(data, count_of(bytes), MPI_BYTE, dest, tag, comm_, r->handle()), "MPI_Isend");
    return r;
  }
  std::unique_ptr<CommRequest> irecv(void* data, std::size_t bytes, int src, int tag) override {
    auto r = std::make_unique<MpiRequest>();
    check(MPI_Irecv(data, count_of(bytes), MPI_BYTE, src, tag, comm_, r->handle()), "MPI_Irecv");
    return r;
  }
  void all_reduce_sum(float* data, std::size_t n) override {
    if (size_ > 1) reduce(data, n, MPI_FLOAT, MPI_SUM);
  }
  std::unique_ptr<CommRequest> iall_reduce_sum(float* data, std::size_t n) override {
    auto r = std::make_unique<MpiRequest>();
    check(MPI_Iallreduce(MPI_IN_PLACE, data, count_of(n * sizeof(float)) / 4, MPI_FLOAT, MPI_SUM, comm_,
                         r->handle()),
          "MPI_Iallreduce");
    return r;
  }
  void all_reduce_sum(double* data, std::size_t n) override {
    if (size_ > 1) reduce(data, n, MPI_DOUBLE, MPI_SUM);
  }
  void all_reduce_max(float* data, std::size_t n) override {
    if (size_ > 1) reduce(data, n, MPI_FLOAT, MPI_MAX);
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    if (size_ > 1) check(MPI_Bcast(data, count_of(bytes), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }
  std::unique_ptr<CommRequest> ibarrier() override {
    auto r = std::make_unique<MpiRequest>();
    check(MPI_Ibarrier(comm_, r->handle()), "MPI_Ibarrier");
    return r;
  }

 private:
  void reduce(void* data, std::size_t n, MPI_Datatype type, MPI_Op op) {
    // Large buffers go in pieces so counts stay within int.
    constexpr std::size_t kPiece = std::size_t{1} << 28;
    const std::size_t elem = type == MPI_DOUBLE ? 8 : 4;
    for (std::size_t off = 0; off < n; off += kPiece) {
      const std::size_t len = n - off < kPiece ? n - off : kPiece;
      check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + off * elem, static_cast<int>(len),
                          type, op, comm_),
            "MPI_Allreduce");
    }
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
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
