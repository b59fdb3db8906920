// The whole model on rank 0, from every (pp, tp) rank's slice of it, for what needs all of it in
// one place during training (text samples). Tensor-parallel shards are reassembled by name
// (gather_full_tensor); only dp rank 0 of each (pp, tp) sends.
#pragma once
#include "trainer/run/layer.h"  // trainer/README.md: the layers
#include <optional>

#include "parallel/pipeline_executor.h"
#include "parallel/topology.h"
#include "trainer/hf/model_source.h"

namespace pipelane {

// Collective over topo.world. Rank 0 gets the model (tokenizer and description left empty);
// other ranks get nullopt.
std::optional<LoadedModel> gather_model_on_rank0(PipelineExecutor& exec, Topology& topo, const GptConfig& cfg);

}  // namespace pipelane
