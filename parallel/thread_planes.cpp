#include "parallel/thread_planes.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace pipelane {

namespace {

// One group of ranks (a plane): mailboxes for point-to-point and a rendezvous for collectives.
// Members are indexed by their rank in the group.
class Group {
 public:
  explicit Group(int size) : size_(size), slots_(size, nullptr) {}
  int size() const { return size_; }

  // --- point-to-point: a FIFO per (source, destination, tag) ---
  void post(int src, int dst, int tag, const void* data, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    const char* p = static_cast<const char*>(data);
    boxes_[{src, dst, tag}].emplace_back(p, p + bytes);
    changed_.notify_all();
  }
  // Takes the oldest message into `data`; false when none is there yet.
  bool take(int src, int dst, int tag, void* data, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    auto it = boxes_.find({src, dst, tag});
    if (it == boxes_.end() || it->second.empty()) return false;
    const std::vector<char>& m = it->second.front();
    if (m.size() != bytes)
      throw std::logic_error("thread plane: a message of " + std::to_string(m.size()) +
                             " bytes met a receive of " + std::to_string(bytes));
    std::memcpy(data, m.data(), bytes);
    it->second.pop_front();
    return true;
  }
  void wait_take(int src, int dst, int tag, void* data, std::size_t bytes) {
    std::unique_lock lock(mutex_);
    for (;;) {
      auto it = boxes_.find({src, dst, tag});
      if (it != boxes_.end() && !it->second.empty()) {
        lock.unlock();
        if (take(src, dst, tag, data, bytes)) return;
        lock.lock();
        continue;
      }
      changed_.wait(lock);
    }
  }

  // --- collectives: every member deposits a pointer, then all read them in rank order ---
  template <typename T, typename Combine>
  void all_reduce(int me, T* data, std::size_t n, Combine combine) {
    std::vector<T> result(n);
    slots_[me] = data;
    arrive_and_wait();
    for (std::size_t i = 0; i < n; ++i) result[i] = static_cast<const T*>(slots_[0])[i];
    for (int r = 1; r < size_; ++r)
      for (std::size_t i = 0; i < n; ++i) result[i] = combine(result[i], static_cast<const T*>(slots_[r])[i]);
    arrive_and_wait();  // everyone has read every slot
    std::memcpy(data, result.data(), n * sizeof(T));
  }
  void all_gather(int me, const float* in, float* out, std::size_t n) {
    slots_[me] = const_cast<float*>(in);
    arrive_and_wait();
    for (int r = 0; r < size_; ++r) std::memcpy(out + r * n, slots_[r], n * sizeof(float));
    arrive_and_wait();
  }
  // Block `me` of the sum, summed in rank order like all_reduce, lands at data[0, n).
  void reduce_scatter(int me, float* data, std::size_t n) {
    std::vector<float> block(n);
    slots_[me] = data;
    arrive_and_wait();
    const std::size_t at = static_cast<std::size_t>(me) * n;
    for (std::size_t i = 0; i < n; ++i) block[i] = static_cast<const float*>(slots_[0])[at + i];
    for (int r = 1; r < size_; ++r)
      for (std::size_t i = 0; i < n; ++i) block[i] = block[i] + static_cast<const float*>(slots_[r])[at + i];
    arrive_and_wait();  // everyone has read every slot
    std::memcpy(data, block.data(), n * sizeof(float));
  }
  void all_gather_in_place(int me, float* data, std::size_t n) {
    slots_[me] = data;
    arrive_and_wait();
    for (int r = 0; r < size_; ++r)
      if (r != me) std::memcpy(data + r * n, static_cast<const float*>(slots_[r]) + r * n, n * sizeof(float));
    arrive_and_wait();
  }
  void broadcast(int me, void* data, std::size_t bytes, int root) {
    slots_[me] = data;
    arrive_and_wait();
    if (me != root) std::memcpy(data, slots_[root], bytes);
    arrive_and_wait();
  }
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    const long generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
      return;
    }
    changed_.wait(lock, [&] { return generation_ != generation; });
  }
  // A barrier that can be polled: member `me`'s k-th arrival completes once every member has
  // arrived k times.
  long arrive_polled(int me) {
    std::lock_guard lock(mutex_);
    if (polled_.empty()) polled_.assign(size_, 0);
    return ++polled_[me];
  }
  bool all_arrived(long count) {
    std::lock_guard lock(mutex_);
    for (long c : polled_)
      if (c < count) return false;
    return true;
  }
  std::string not_arrived(long count) {
    std::lock_guard lock(mutex_);
    std::string out;
    for (std::size_t r = 0; r < polled_.size(); ++r)
      if (polled_[r] < count) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out;
  }

 private:
  struct Key {
    int src, dst, tag;
    bool operator<(const Key& o) const {
      return std::tie(src, dst, tag) < std::tie(o.src, o.dst, o.tag);
    }
  };
  int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<Key, std::deque<std::vector<char>>> boxes_;
  std::vector<void*> slots_;
  int arrived_ = 0;
  long generation_ = 0;
  std::vector<long> polled_;
};

// A receive completes when its message is taken from the mailbox.
class ReceiveEvent final : public Event {
 public:
  ReceiveEvent(Group& g, int src, int dst, int tag, void* data, std::size_t bytes)
      : g_(g), src_(src), dst_(dst), tag_(tag), data_(data), bytes_(bytes) {}
  void record(Stream&) override { throw std::logic_error("a receive's event cannot be re-recorded"); }
  bool query() const override {
    if (!done_) done_ = g_.take(src_, dst_, tag_, data_, bytes_);
    return done_;
  }
  void synchronize() override {
    if (!done_) g_.wait_take(src_, dst_, tag_, data_, bytes_);
    done_ = true;
  }
  void wait_on(Stream&) override { synchronize(); }
  double elapsed_ms_since(const Event&) const override {
    throw std::logic_error("a receive's event carries no timestamp");
  }

 private:
  Group& g_;
  int src_, dst_, tag_;
  void* data_;
  std::size_t bytes_;
  mutable bool done_ = false;
};

class ThreadDataPlane final : public DataPlane {
 public:
  ThreadDataPlane(Group& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size(); }
  std::unique_ptr<Event> send(const void* data, std::size_t bytes, int peer, Stream&) override {
    g_.post(rank_, peer, 0, data, bytes);
    return std::make_unique<CompletedEvent>();
  }
  std::unique_ptr<Event> recv(void* data, std::size_t bytes, int peer, Stream&) override {
    return std::make_unique<ReceiveEvent>(g_, peer, rank_, 0, data, bytes);
  }
  void all_reduce_sum(float* data, std::size_t n, Stream&) override {
    g_.all_reduce(rank_, data, n, [](float a, float b) { return a + b; });
  }
  void all_reduce_max(float* data, std::size_t n, Stream&) override {
    g_.all_reduce(rank_, data, n, [](float a, float b) { return a > b ? a : b; });
  }
  // Every member reaches its asynchronous all-reduces at the same instruction of the same
  // schedule, so doing them at once cannot deadlock.
  std::unique_ptr<Event> all_reduce_sum_async(float* data, std::size_t n, Stream& s) override {
    all_reduce_sum(data, n, s);
    return std::make_unique<CompletedEvent>();
  }
  void all_gather(const float* in, float* out, std::size_t n, Stream&) override {
    g_.all_gather(rank_, in, out, n);
  }
  std::unique_ptr<Event> reduce_scatter_sum_async(float* data, std::size_t n, Stream&) override {
    g_.reduce_scatter(rank_, data, n);
    return std::make_unique<CompletedEvent>();
  }
  std::unique_ptr<Event> all_gather_in_place_async(float* data, std::size_t n, Stream&) override {
    g_.all_gather_in_place(rank_, data, n);
    return std::make_unique<CompletedEvent>();
  }

 private:
  Group& g_;
  int rank_;
};

class ThreadRequest final : public CommRequest {
 public:
  explicit ThreadRequest(std::function<bool()> poll, std::function<void()> finish = {})
      : poll_(std::move(poll)), finish_(std::move(finish)) {}
  bool test() override { return done_ || (done_ = poll_()); }
  void wait() override {
    while (!test()) std::this_thread::yield();
    if (finish_) finish_();
  }

 private:
  std::function<bool()> poll_;
  std::function<void()> finish_;
  bool done_ = false;
};

class ThreadBarrier final : public BarrierRequest {
 public:
  ThreadBarrier(Group& g, long count) : g_(g), count_(count) {}
  bool test() override { return done_ || (done_ = g_.all_arrived(count_)); }
  void wait() override {
    while (!test()) std::this_thread::yield();
  }
  std::string missing() const override { return g_.not_arrived(count_); }

 private:
  Group& g_;
  long count_;
  bool done_ = false;
};

class ThreadControlPlane final : public ControlPlane {
 public:
  ThreadControlPlane(Group& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size(); }
  std::unique_ptr<CommRequest> isend(const void* data, std::size_t bytes, int dest, int tag) override {
    g_.post(rank_, dest, tag, data, bytes);
    return std::make_unique<ThreadRequest>([] { return true; });
  }
  std::unique_ptr<CommRequest> irecv(void* data, std::size_t bytes, int src, int tag) override {
    Group* g = &g_;
    const int me = rank_;
    return std::make_unique<ThreadRequest>(
        [g, src, me, tag, data, bytes] { return g->take(src, me, tag, data, bytes); });
  }
  void all_reduce_sum(double* data, std::size_t n) override {
    g_.all_reduce(rank_, data, n, [](double a, double b) { return a + b; });
  }
  void all_reduce_max(float* data, std::size_t n) override {
    g_.all_reduce(rank_, data, n, [](float a, float b) { return a > b ? a : b; });
  }
  void broadcast(void* data, std::size_t bytes, int root) override {
    g_.broadcast(rank_, data, bytes, root);
  }
  void barrier() override { g_.arrive_and_wait(); }
  std::unique_ptr<BarrierRequest> ibarrier() override {
    return std::make_unique<ThreadBarrier>(g_, g_.arrive_polled(rank_));
  }

 private:
  Group& g_;
  int rank_;
};

}  // namespace

struct ThreadJob::Shared {
  RankGrid grid;
  std::mutex mutex;
  // Groups by (plane name, color): the same key for every member, like MPI_Comm_split.
  std::map<std::pair<std::string, int>, std::unique_ptr<Group>> groups;
  explicit Shared(ParallelDims dims) : grid(dims) {}
  Group& group(const std::string& plane, int color, int size) {
    std::lock_guard lock(mutex);
    auto& g = groups[{plane, color}];
    if (!g) g = std::make_unique<Group>(size);
    return *g;
  }
};

ThreadJob::ThreadJob(ParallelDims dims) : shared_(std::make_unique<Shared>(dims)) {}
ThreadJob::~ThreadJob() = default;
const RankGrid& ThreadJob::grid() const { return shared_->grid; }

Topology ThreadJob::topology(int rank) {
  const ParallelDims dims = shared_->grid.dims();
  if (rank < 0 || rank >= dims.world())
    throw std::invalid_argument("ThreadJob: rank " + std::to_string(rank) + " outside the world of " +
                                std::to_string(dims.world()));
  Topology t;
  t.grid = shared_->grid;
  t.world_rank = rank;
  t.me = t.grid.coords(rank);
  const RankCoords c = t.me;
  Shared& s = *shared_;
  // The same colors and orders as Topology::from_mpi_world.
  t.world = std::make_unique<ThreadControlPlane>(s.group("world", 0, dims.world()), rank);
  t.tp = std::make_unique<ThreadDataPlane>(s.group("tp", c.dp + dims.dp * c.pp, dims.tp), c.tp);
  t.dp = std::make_unique<ThreadDataPlane>(s.group("dp", c.tp + dims.tp * c.pp, dims.dp), c.dp);
  t.pp_forward = std::make_unique<ThreadDataPlane>(s.group("ppf", c.tp + dims.tp * c.dp, dims.pp), c.pp);
  t.pp_backward = std::make_unique<ThreadDataPlane>(s.group("ppb", c.tp + dims.tp * c.dp, dims.pp), c.pp);
  if (dims.pp > 1 && (c.pp == 0 || c.pp == dims.pp - 1))
    t.embedding = std::make_unique<ThreadDataPlane>(s.group("emb", c.tp + dims.tp * c.dp, 2),
                                                    c.pp == 0 ? 0 : 1);
  return t;
}

}  // namespace pipelane
