#include "runtime/tensor.h"

#include <stdexcept>

namespace pipelane {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::U16: return 2;
    case DType::U32: return 4;
    case DType::I32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::U16: return "u16";
    case DType::U32: return "u32";
    case DType::I32: return "i32";
  }
  return "?";
}

TensorView::TensorView(void* p, std::initializer_list<std::int64_t> dims, DType t, DeviceKind d)
    : data(p), dtype(t), device(d) {
  if (dims.size() > kMaxDims) throw std::invalid_argument("TensorView: more than 4 dimensions");
  for (std::int64_t v : dims) shape[ndim++] = v;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

float* TensorView::f32() const {
  if (dtype != DType::F32) throw std::logic_error("TensorView: " + describe() + " is not f32");
  return static_cast<float*>(data);
}

std::string TensorView::describe() const {
  std::string s = dtype_name(dtype);
  s += "[";
  for (int i = 0; i < ndim; ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace pipelane
