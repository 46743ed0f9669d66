// Internal: the CPU emulator's mxsim::Backend, its buffers and their accessors.
// One source file per op family: backend_emu.cpp (memory), backend_emu_quant.cpp,
// backend_emu_gemm.cpp, backend_emu_moe.cpp, backend_emu_train.cpp.
//
// Buffers are host memory this backend reads in place: f32 tensors are xtensor
// containers (so the emu grouped GEMM and quantizer take them without a copy),
// quantized tensors are the host QuantizedTensor itself, other dtypes raw bytes.
#pragma once
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"

namespace mxsim::emu {

/// Storage of one dense tensor.
struct EmuBuffer final : BackendBuffer {
  using BackendBuffer::BackendBuffer;
  Tensor2f f2;                       ///< f32 of rank 1 (as [1, n]) and rank 2
  Tensor3f f3;                       ///< f32 of rank 3
  std::unique_ptr<std::byte[]> raw;  ///< every other dtype
};
/// Storage of one quantized tensor: the host layout itself.
struct EmuQBuffer final : BackendBuffer {
  EmuQBuffer(const Backend* b, QuantizedTensor q) : BackendBuffer(b), q(std::move(q)) {}
  QuantizedTensor q;
};
/// Storage of a per-group quantized wgrad operand.
struct EmuGroupedQBuffer final : BackendBuffer {
  EmuGroupedQBuffer(const Backend* b, std::vector<QuantizedTensor> q) : BackendBuffer(b), q(std::move(q)) {}
  std::vector<QuantizedTensor> q;
};

class EmuBackend final : public Backend {
 public:
  std::string name() const override { return "emu"; }
  std::string device() const override;
  void set_threads(int n) override;
 protected:
  MXSIM_BACKEND_OPS(MXSIM_BACKEND_DECLARE_IMPL)
  // The watched elements, read in place (Backend's defaults copy the whole tensor).
  void gather_deferred_impl(const Tensor& t, std::span<const int64_t> idx, void* dst) override;
  void quant_elements_deferred_impl(const QTensor& q, std::span<const int64_t> idx, QuantElements* dst) override;
  void copy_range_impl(const Tensor& src, size_t src_offset, Tensor& dst, size_t dst_offset, size_t count) override;

 public:
  // ---- accessors for the op files (check owner, dtype, rank; throw naming op and operand)
  EmuBuffer& buf(const Tensor& t, const char* op, const char* what) const;
  const QuantizedTensor& host(const QTensor& q, const char* op, const char* what) const;
  const std::vector<QuantizedTensor>& host(const GroupedQTensor& q, const char* op, const char* what) const;
  /// f32 data of any rank.
  float* f32(const Tensor& t, const char* op, const char* what) const;
  /// f32 tensor of rank 2 as its container.
  Tensor2f& mat(const Tensor& t, const char* op, const char* what) const;
  /// f32 tensor of rank 3 as its container.
  Tensor3f& ten3(const Tensor& t, const char* op, const char* what) const;
  /// The bit patterns of a bf16 tensor.
  uint16_t* bf16(const Tensor& t, const char* op, const char* what) const;
  /// A BF16 GEMM operand of rank 2 / 3 as f32 values: an f32 tensor's own container, or for a
  /// bf16 tensor `widened` filled with the values of its bit patterns (exact).
  const Tensor2f& operand2(const Tensor& t, Tensor2f& widened, const char* op, const char* what) const;
  const Tensor3f& operand3(const Tensor& t, Tensor3f& widened, const char* op, const char* what) const;
  template <class T>
  T* data(const Tensor& t, const char* op, const char* what) const {
    if (t.dtype() != dtype_of<T>()) dtype_error(t, dtype_of<T>(), op, what);
    if constexpr (std::is_same_v<T, float>) return f32(t, op, what);
    else return reinterpret_cast<T*>(buf(t, op, what).raw.get());
  }
  [[noreturn]] static void dtype_error(const Tensor& t, DType want, const char* op, const char* what);
};

}  // namespace mxsim::emu
