#include "runtime/backend.h"

namespace pipelane {

const char* stream_priority_name(StreamPriority p) {
  switch (p) {
    case StreamPriority::High: return "high";
    case StreamPriority::Normal: return "normal";
    case StreamPriority::Low: return "low";
  }
  return "?";
}

const char* op_kind_name(OpKind op) {
  switch (op) {
    case OpKind::EmbeddingForward: return "embedding_forward";
    case OpKind::EmbeddingBackward: return "embedding_backward";
    case OpKind::EmbeddingLookupLocal: return "embedding_lookup_local";
    case OpKind::AddPositions: return "add_positions";
    case OpKind::EmbeddingBackwardLocal: return "embedding_backward_local";
    case OpKind::LayerNormForward: return "layernorm_forward";
    case OpKind::LayerNormBackward: return "layernorm_backward";
    case OpKind::LayerNormBackwardInput: return "layernorm_backward_input";
    case OpKind::LayerNormBackwardParams: return "layernorm_backward_params";
    case OpKind::MatmulForward: return "matmul_forward";
    case OpKind::MatmulBackward: return "matmul_backward";
    case OpKind::MatmulBackwardInput: return "matmul_backward_input";
    case OpKind::MatmulGeluForward: return "matmul_gelu_forward";
    case OpKind::MatmulBackwardInputDgelu: return "matmul_backward_input_dgelu";
    case OpKind::AttentionForward: return "attention_forward";
    case OpKind::AttentionBackward: return "attention_backward";
    case OpKind::AttentionForwardKv: return "attention_forward_kv";
    case OpKind::GeluForward: return "gelu_forward";
    case OpKind::GeluBackward: return "gelu_backward";
    case OpKind::Add: return "add";
    case OpKind::AddInplace: return "add_inplace";
    case OpKind::AddBias: return "add_bias";
    case OpKind::Scale: return "scale";
    case OpKind::SumSquares: return "sum_squares";
    case OpKind::LmHeadLogits: return "lm_head_logits";
    case OpKind::LmHeadCrossEntropy: return "lm_head_cross_entropy";
    case OpKind::LmHeadCrossEntropyVocabParallel: return "lm_head_cross_entropy_vocab_parallel";
    case OpKind::AdamW: return "adamw_update";
    case OpKind::PagerankStep: return "pagerank_step";
    case OpKind::BfsStep: return "bfs_step";
    case OpKind::GraphSgdStep: return "graphsgd_step";
    case OpKind::RmsNormForward: return "rmsnorm_forward";
    case OpKind::RmsNormBackward: return "rmsnorm_backward";
    case OpKind::RmsNormBackwardInput: return "rmsnorm_backward_input";
    case OpKind::RmsNormBackwardParams: return "rmsnorm_backward_params";
    case OpKind::RopeForward: return "rope_forward";
    case OpKind::RopeBackward: return "rope_backward";
    case OpKind::SwigluForward: return "swiglu_forward";
    case OpKind::SwigluBackward: return "swiglu_backward";
    case OpKind::AttentionForwardGqa: return "attention_forward_gqa";
    case OpKind::AttentionBackwardGqa: return "attention_backward_gqa";
    case OpKind::AttentionForwardKvGqa: return "attention_forward_kv_gqa";
    case OpKind::EmbeddingBackwardTokens: return "embedding_backward_tokens";
    case OpKind::CnnIm2col: return "cnn_im2col";
    case OpKind::CnnCol2im: return "cnn_col2im";
    case OpKind::BatchNormForward: return "batch_norm_forward";
    case OpKind::BatchNormBackward: return "batch_norm_backward";
    case OpKind::BatchNormStatistics: return "batch_norm_update_statistics";
    case OpKind::MaxPoolForward: return "max_pool_forward";
    case OpKind::MaxPoolBackward: return "max_pool_backward";
    case OpKind::AvgPoolForward: return "adaptive_avg_pool_forward";
    case OpKind::AvgPoolBackward: return "adaptive_avg_pool_backward";
    case OpKind::ReluForward: return "relu_forward";
    case OpKind::ReluBackward: return "relu_backward";
    case OpKind::Dropout: return "dropout";
    case OpKind::ClassifierCrossEntropy: return "classifier_cross_entropy";
    case OpKind::SgdMomentum: return "sgd_momentum_update";
    case OpKind::CastToBf16: return "cast_to_bf16";
    case OpKind::CastFromBf16: return "cast_from_bf16";
    case OpKind::RoundToBf16: return "round_to_bf16";
    case OpKind::Count: break;
  }
  return "?";
}

}  // namespace pipelane
