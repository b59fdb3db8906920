// An in-process tensor-parallel group for tests: one std::thread per rank, a barrier, and
// all-reduces (and reduce-scatters) that combine the ranks' buffers in rank order, so every rank
// gets bit-identical results and runs are deterministic.
#pragma once
#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "model/tensor_parallel.h"

namespace pipelane::testing {

class ThreadTpGroup {
 public:
  explicit ThreadTpGroup(int size) : size_(size), bufs_(size), counts_(size) {
    for (int r = 0; r < size; ++r) comms_.push_back(std::make_unique<Comm>(this, r));
  }
  int size() const { return size_; }
  TensorParallelComm& comm(int rank) { return *comms_[rank]; }

  // Runs fn(rank, comm) on one thread per rank (each with OpenMP at 1 thread, so tp threads on a
  // small machine do not oversubscribe it) and rethrows the first exception. A rank that throws
  // breaks the barrier, so the others fail instead of waiting forever.
  void run(const std::function<void(int rank, TensorParallelComm& comm)>& fn) {
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(size_);
    for (int r = 0; r < size_; ++r)
      threads.emplace_back([&, r] {
        omp_set_num_threads(1);
        try {
          fn(r, comm(r));
        } catch (...) {
          errors[r] = std::current_exception();
          std::lock_guard<std::mutex> lock(mu_);
          broken_ = true;
          cv_.notify_all();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

 private:
  class Comm final : public TensorParallelComm {
   public:
    Comm(ThreadTpGroup* g, int rank) : g_(g), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return g_->size_; }
    void all_reduce_sum(float* data, std::size_t n) override {
      g_->all_reduce(rank_, data, n, [](float a, float b) { return a + b; });
    }
    void all_reduce_max(float* data, std::size_t n) override {
      g_->all_reduce(rank_, data, n, [](float a, float b) { return std::max(a, b); });
    }
    void all_gather(const float* in, float* out, std::size_t n) override { g_->all_gather(rank_, in, out, n); }
    void reduce_scatter_sum(float* data, std::size_t n) override { g_->reduce_scatter_sum(rank_, data, n); }

   private:
    ThreadTpGroup* g_;
    int rank_;
  };

  void barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    if (broken_) throw std::runtime_error("ThreadTpGroup: another rank failed");
    const std::uint64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || broken_; });
    if (generation_ == gen) throw std::runtime_error("ThreadTpGroup: another rank failed");
  }

  template <typename Op>
  void all_reduce(int rank, float* data, std::size_t n, Op op) {
    bufs_[rank] = data;
    counts_[rank] = n;
    barrier();  // every rank's buffer is published
    for (int r = 0; r < size_; ++r)
      if (counts_[r] != n)
        throw std::logic_error("ThreadTpGroup: mismatched all-reduce sizes (" + std::to_string(n) +
                               " vs " + std::to_string(counts_[r]) + ")");
    // Each rank combines every buffer in rank order into its own copy: identical bits everywhere.
    std::vector<float> out(n);
    for (std::size_t i = 0; i < n; ++i) {
      float acc = bufs_[0][i];
      for (int r = 1; r < size_; ++r) acc = op(acc, bufs_[r][i]);
      out[i] = acc;
    }
    barrier();  // nobody reads the inputs any more
    std::copy(out.begin(), out.end(), data);
  }

  void publish(int rank, const float* data, std::size_t n, const char* what) {
    bufs_[rank] = const_cast<float*>(data);
    counts_[rank] = n;
    barrier();  // every rank's buffer is published
    for (int r = 0; r < size_; ++r)
      if (counts_[r] != n)
        throw std::logic_error(std::string("ThreadTpGroup: mismatched ") + what + " sizes (" + std::to_string(n) +
                               " vs " + std::to_string(counts_[r]) + ")");
  }

  void all_gather(int rank, const float* in, float* out, std::size_t n) {
    publish(rank, in, n, "all-gather");
    for (int r = 0; r < size_; ++r) std::copy(bufs_[r], bufs_[r] + n, out + static_cast<std::size_t>(r) * n);
    barrier();  // nobody reads the inputs any more
  }

  // Block `rank` of the sum, in rank order as all_reduce, lands at data[0, n).
  void reduce_scatter_sum(int rank, float* data, std::size_t n) {
    publish(rank, data, n, "reduce-scatter");
    const std::size_t at = static_cast<std::size_t>(rank) * n;
    std::vector<float> out(n);
    for (std::size_t i = 0; i < n; ++i) {
      float acc = bufs_[0][at + i];
      for (int r = 1; r < size_; ++r) acc = acc + bufs_[r][at + i];
      out[i] = acc;
    }
    barrier();
    std::copy(out.begin(), out.end(), data);
  }

  int size_;
  std::vector<std::unique_ptr<Comm>> comms_;
  std::vector<float*> bufs_;
  std::vector<std::size_t> counts_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool broken_ = false;
};

}  // namespace pipelane::testing
