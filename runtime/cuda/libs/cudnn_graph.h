// cuDNN's backend (graph) API behind the attention graphs of plans/attention_graph.h. Building
// and finalizing the tensors, operations and operation graph needs no device (cuDNN >= 9.8
// compiles plans from device properties); choosing an engine and running need a handle.
// Errors throw std::runtime_error naming the call and cuDNN's status.
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "runtime/cuda/plans/attention_graph.h"

namespace pipelane::cuda {

// One backend descriptor, destroyed with the object.
class CudnnDescriptor {
 public:
  explicit CudnnDescriptor(cudnnBackendDescriptorType_t type);
  ~CudnnDescriptor();
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename V>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const V* values,
           std::int64_t count, const char* what);
  void finalize(const char* what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The finalized operation graph of a Graph, with every descriptor it references.
struct CudnnOperationGraph {
  std::vector<std::unique_ptr<CudnnDescriptor>> parts;  // tensors, operators, operations
  std::unique_ptr<CudnnDescriptor> graph;
  std::vector<std::int64_t> by_value_uids;
  std::vector<float> by_value_values;
};
CudnnOperationGraph build_operation_graph(const Graph& g);

class Cudnn {
 public:
  Cudnn();  // throws (cudnnCreate's status) when no usable device is present
  ~Cudnn();
  Cudnn(const Cudnn&) = delete;
  Cudnn& operator=(const Cudnn&) = delete;
  cudnnHandle_t handle() const { return handle_; }

 private:
  cudnnHandle_t handle_ = nullptr;
};

// An execution plan for an operation graph: the heuristics' first engine that accepts it.
class CudnnPlan {
 public:
  CudnnPlan(const Cudnn& cudnn, const Graph& g);
  std::int64_t workspace_bytes() const { return workspace_; }
  // Runs on `stream` with the graph's buffers (element offsets applied here).
  void run(const Cudnn& cudnn, const std::map<GraphBuffer, void*>& buffers, void* workspace,
           cudaStream_t stream) const;

 private:
  Graph graph_;
  CudnnOperationGraph op_graph_;
  // The plan refers to the device properties and its engine configuration: they live as long.
  std::unique_ptr<CudnnDescriptor> device_;
  std::vector<std::unique_ptr<CudnnDescriptor>> configs_;
  std::unique_ptr<CudnnDescriptor> plan_;
  std::int64_t workspace_ = 0;
};

}  // namespace pipelane::cuda
