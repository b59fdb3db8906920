#include "runtime/cuda/libs/cudnn_graph.h"

#include <stdexcept>
#include <string>

namespace pipelane::cuda {

namespace {

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuDNN: ") + what +
                             " failed: " + cudnnGetErrorString(status));
}

cudnnDataType_t cudnn_type(GraphType t) {
  switch (t) {
    case GraphType::F32: return CUDNN_DATA_FLOAT;
    case GraphType::BF16: return CUDNN_DATA_BFLOAT16;
    case GraphType::I32: return CUDNN_DATA_INT32;
    case GraphType::Bool: return CUDNN_DATA_BOOLEAN;
  }
  throw std::invalid_argument("cuDNN: unknown tensor type");
}

std::int64_t element_bytes(GraphType t) {
  return t == GraphType::BF16 ? 2 : (t == GraphType::Bool ? 1 : 4);
}

cudnnPointwiseMode_t pointwise_mode(GraphOpKind k) {
  switch (k) {
    case GraphOpKind::Mul: return CUDNN_POINTWISE_MUL;
    case GraphOpKind::Sub: return CUDNN_POINTWISE_SUB;
    case GraphOpKind::Div: return CUDNN_POINTWISE_DIV;
    case GraphOpKind::Add: return CUDNN_POINTWISE_ADD;
    case GraphOpKind::Exp: return CUDNN_POINTWISE_EXP;
    case GraphOpKind::Log: return CUDNN_POINTWISE_LOG;
    case GraphOpKind::Identity: return CUDNN_POINTWISE_IDENTITY;
    case GraphOpKind::GenIndex: return CUDNN_POINTWISE_GEN_INDEX;
    case GraphOpKind::CmpGe: return CUDNN_POINTWISE_CMP_GE;
    case GraphOpKind::BinarySelect: return CUDNN_POINTWISE_BINARY_SELECT;
    default: throw std::invalid_argument("cuDNN: not a pointwise operation");
  }
}

}  // namespace

CudnnDescriptor::CudnnDescriptor(cudnnBackendDescriptorType_t type) {
  check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
}
CudnnDescriptor::~CudnnDescriptor() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}
template <typename V>
void CudnnDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                          const V* values, std::int64_t count, const char* what) {
  check(cudnnBackendSetAttribute(d_, name, type, count, values), what);
}
void CudnnDescriptor::finalize(const char* what) { check(cudnnBackendFinalize(d_), what); }

CudnnOperationGraph build_operation_graph(const Graph& g) {
  CudnnOperationGraph out;
  std::map<std::int64_t, cudnnBackendDescriptor_t> tensors;
  const auto make = [&](cudnnBackendDescriptorType_t type) -> CudnnDescriptor& {
    out.parts.push_back(std::make_unique<CudnnDescriptor>(type));
    return *out.parts.back();
  };
  for (const GraphTensor& t : g.tensors) {
    CudnnDescriptor& d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const cudnnDataType_t type = cudnn_type(t.type);
    // The alignment the tensor's address will have: 16 bytes unless its offset breaks it.
    const std::int64_t offset_bytes = t.offset * element_bytes(t.type);
    const std::int64_t alignment = offset_bytes % 16 == 0 ? 16 : element_bytes(t.type);
    const bool is_virtual = t.is_virtual, by_value = t.by_value;
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &t.uid, 1, "tensor uid");
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type, 1, "tensor type");
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t.dims.data(), 4, "tensor dims");
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t.strides.data(), 4, "tensor strides");
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment, 1, "tensor alignment");
    d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &is_virtual, 1, "tensor virtual");
    if (by_value) {
      d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &by_value, 1, "tensor by value");
      out.by_value_uids.push_back(t.uid);
      out.by_value_values.push_back(t.value);
    }
    d.finalize(("tensor " + t.name).c_str());
    tensors[t.uid] = d.get();
  }
  const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const GraphOp& op : g.ops) {
    const cudnnBackendDescriptor_t x = tensors.at(op.x), y = tensors.at(op.y);
    switch (op.kind) {
      case GraphOpKind::Matmul: {
        CudnnDescriptor& mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &fp32, 1, "matmul compute type");
        mm.finalize("matmul");
        const cudnnBackendDescriptor_t b = tensors.at(op.b), m = mm.get();
        CudnnDescriptor& o = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        o.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x, 1, "matmul a");
        o.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &b, 1, "matmul b");
        o.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y, 1, "matmul c");
        o.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &m, 1,
              "matmul desc");
        o.finalize("matmul operation");
        ops.push_back(o.get());
        break;
      }
      case GraphOpKind::ReduceMax:
      case GraphOpKind::ReduceAdd: {
        CudnnDescriptor& rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        const cudnnReduceTensorOp_t mode =
            op.kind == GraphOpKind::ReduceMax ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
        rd.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &mode, 1,
               "reduction mode");
        rd.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &fp32, 1,
               "reduction compute type");
        rd.finalize("reduction");
        const cudnnBackendDescriptor_t r = rd.get();
        CudnnDescriptor& o = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        o.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x, 1,
              "reduction x");
        o.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y, 1,
              "reduction y");
        o.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &r, 1,
              "reduction desc");
        o.finalize("reduction operation");
        ops.push_back(o.get());
        break;
      }
      case GraphOpKind::Transpose: {
        CudnnDescriptor& o = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        o.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x, 1,
              "reshape x");
        o.set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y, 1,
              "reshape y");
        o.finalize("reshape operation");
        ops.push_back(o.get());
        break;
      }
      default: {
        CudnnDescriptor& pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        const cudnnPointwiseMode_t mode = pointwise_mode(op.kind);
        pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode, 1, "pointwise mode");
        pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &fp32, 1,
               "pointwise precision");
        if (op.kind == GraphOpKind::GenIndex) {
          const std::int64_t axis = op.axis;
          pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis, 1, "gen_index axis");
        }
        pw.finalize("pointwise");
        const cudnnBackendDescriptor_t p = pw.get();
        CudnnDescriptor& o = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        o.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, &p, 1,
              "pointwise desc");
        o.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x, 1,
              "pointwise x");
        if (op.b >= 0) {
          const cudnnBackendDescriptor_t b = tensors.at(op.b);
          o.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &b, 1,
                "pointwise b");
        }
        if (op.t >= 0) {
          const cudnnBackendDescriptor_t t = tensors.at(op.t);
          o.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &t, 1,
                "pointwise t");
        }
        o.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y, 1,
              "pointwise y");
        o.finalize("pointwise operation");
        ops.push_back(o.get());
      }
    }
  }
  out.graph = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  out.graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
                 static_cast<std::int64_t>(ops.size()), "graph operations");
  out.graph->finalize("operation graph");
  return out;
}

Cudnn::Cudnn() { check(cudnnCreate(&handle_), "cudnnCreate"); }
Cudnn::~Cudnn() {
  if (handle_) cudnnDestroy(handle_);
}

CudnnPlan::CudnnPlan(const Cudnn& cudnn, const Graph& g)
    : graph_(g), op_graph_(build_operation_graph(g)) {
  device_ = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  const cudnnHandle_t handle = cudnn.handle();
  device_->set(CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, &handle, 1, "device handle");
  device_->finalize("device properties");
  const cudnnBackendDescriptor_t dev = device_->get(), graph = op_graph_.graph->get();
  CudnnDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &graph, 1,
                 "heuristics graph");
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode, 1, "heuristics mode");
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, &dev, 1,
                 "heuristics device");
  heuristics.finalize("engine heuristics");
  // The ranked engine configurations; the first one that builds a plan wins.
  constexpr int kCandidates = 8;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < kCandidates; ++i) {
    configs_.push_back(std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs_.back()->get());
  }
  std::int64_t found = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, kCandidates, &found, raw.data()),
        "engine heuristics results");
  for (std::int64_t i = 0; i < found; ++i) {
    auto plan = std::make_unique<CudnnDescriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw[i], 1,
              "plan engine");
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, &dev, 1,
              "plan device");
    if (cudnnBackendFinalize(plan->get()) != CUDNN_STATUS_SUCCESS) continue;
    std::int64_t count = 0;
    check(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                   CUDNN_TYPE_INT64, 1, &count, &workspace_),
          "plan workspace size");
    plan_ = std::move(plan);
    return;
  }
  throw std::runtime_error("cuDNN: no engine runs this attention graph (" + std::to_string(found) +
                           " candidates)");
}

void CudnnPlan::run(const Cudnn& cudnn, const std::map<GraphBuffer, void*>& buffers,
                    void* workspace, cudaStream_t stream) const {
  std::vector<std::int64_t> uids;
  std::vector<void*> pointers;
  for (const GraphTensor& t : graph_.tensors) {
    if (t.is_virtual || t.by_value) continue;
    uids.push_back(t.uid);
    pointers.push_back(static_cast<char*>(buffers.at(t.buffer)) + t.offset * element_bytes(t.type));
  }
  std::vector<float> values = op_graph_.by_value_values;  // cuDNN reads them through pointers
  for (std::size_t i = 0; i < values.size(); ++i) {
    uids.push_back(op_graph_.by_value_uids[i]);
    pointers.push_back(&values[i]);
  }
  CudnnDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(),
           static_cast<std::int64_t>(uids.size()), "variant pack uids");
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(),
           static_cast<std::int64_t>(pointers.size()), "variant pack pointers");
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace, 1,
           "variant pack workspace");
  pack.finalize("variant pack");
  check(cudnnSetStream(cudnn.handle(), stream), "cudnnSetStream");
  check(cudnnBackendExecute(cudnn.handle(), plan_->get(), pack.get()), "cudnnBackendExecute");
}

}  // namespace pipelane::cuda
