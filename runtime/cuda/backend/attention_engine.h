// Who runs `[model] attention = cudnn`'s graphs (plans/attention_graph.h): cuDNN's backend API in
// the library (libs/cudnn_graph.h), the graph interpreter in the emulated build
// (emu/graph_interpreter.h). Either way a call is enqueued on the stream and returns without
// waiting. An engine keeps what it built per shape (cuDNN plans take milliseconds to build).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <string>
#include <tuple>

#include "runtime/cuda/plans/attention_graph.h"

namespace pipelane::cuda {

// One of the two attention graphs at one shape and storage type.
struct AttentionGraphKey {
  bool backward;
  int B, T, C, NH;
  DataType io;
  bool operator<(const AttentionGraphKey& o) const {
    return std::tie(backward, B, T, C, NH, io) < std::tie(o.backward, o.B, o.T, o.C, o.NH, o.io);
  }
};

inline Graph attention_graph(const AttentionGraphKey& k) {
  return k.backward ? causal_attention_backward_graph(k.B, k.T, k.C, k.NH, k.io)
                    : causal_attention_forward_graph(k.B, k.T, k.C, k.NH, k.io);
}

class AttentionEngine {
 public:
  virtual ~AttentionEngine() = default;
  virtual std::string name() const = 0;
  // Builds (once per key) what runs the graph; throws std::runtime_error with one line when
  // nothing can (no cuDNN engine for it on this GPU). Returns the workspace bytes a run needs.
  virtual std::size_t prepare(const AttentionGraphKey& key) = 0;
  // `buffers` holds every buffer the graph names; `workspace` has prepare(key) bytes and belongs
  // to `stream` until the stream passes this call.
  virtual void run(const AttentionGraphKey& key, const std::map<GraphBuffer, void*>& buffers,
                   void* workspace, cudaStream_t stream) = 0;
};

}  // namespace pipelane::cuda
