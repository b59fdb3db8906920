// A tensor view: pointer, shape, dtype, device. It never owns memory; arenas do.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace pipelane {

enum class DType : std::uint8_t { F32, BF16, U16, U32, I32 };
enum class DeviceKind : std::uint8_t { Cpu, Cuda };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);

struct TensorView {
  static constexpr int kMaxDims = 4;
  void* data = nullptr;
  std::array<std::int64_t, kMaxDims> shape{};
  int ndim = 0;
  DType dtype = DType::F32;
  DeviceKind device = DeviceKind::Cpu;

  TensorView() = default;
  TensorView(void* p, std::initializer_list<std::int64_t> dims, DType t = DType::F32,
             DeviceKind d = DeviceKind::Cpu);

  std::int64_t numel() const;
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  float* f32() const;  // throws unless dtype is F32
  std::string describe() const;  // "f32[4,64]"
};

}  // namespace pipelane
