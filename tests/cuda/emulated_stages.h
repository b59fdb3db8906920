// Pipeline stages as threads of one process on the emulated CUDA backend: each rank gets its
// topology of one ThreadJob and a backend of its own. Streams are immediate meanwhile (the thread
// planes copy buffers at call time), deferred again afterwards.
#pragma once
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "parallel/thread_planes.h"
#include "runtime/cuda/emu/emulated_backend.h"
#include "runtime/cuda/emu/fake_cuda_runtime.h"

namespace pipelane::cuda_test {

// Runs stage(rank, topology, backend) for every rank of `dims`, each backend of `compute` precision;
// returns each rank's error ("" when it returned).
template <typename Stage>
std::vector<std::string> run_emulated_stages(const ParallelDims& dims, Stage&& stage, DType compute = DType::F32) {
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Immediate);
  ThreadJob job(dims);
  std::vector<std::string> errors(dims.world());
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < dims.world(); ++rank)
    ranks.emplace_back([&, rank] {
      try {
        Topology topo = job.topology(rank);
        cuda::CudaBackendConfig config = cuda_emu::emulated_backend_config();
        config.compute = compute;
        const auto backend = cuda_emu::make_emulated_cuda_backend(config);
        stage(rank, topo, *backend);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (std::thread& t : ranks) t.join();
  cuda_emu::set_stream_mode(cuda_emu::StreamMode::Deferred);
  return errors;
}

}  // namespace pipelane::cuda_test
