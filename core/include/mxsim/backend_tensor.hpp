// Backend-owned tensors: the handles the training simulator holds.
//
// A backend allocates and owns the storage (ggml's backend buffers are the
// model: ggml_backend_buffer / ggml_tensor); the simulator only holds handles
// that carry the logical shape, the element type and a shared reference to
// the backend's buffer. Data moves between host and backend only through the
// explicit Backend::upload / Backend::download calls (trace rows, snapshots,
// checkpoints, the host-side m_splits of a grouped launch) -- never through a
// pointer into the buffer. The emu backend's buffers are host memory that its
// ops read in place; a GPU backend's are device memory.
//
// Life cycle:
//   Tensor t = be.alloc(DType::f32, {G, N, K});   // contents unspecified
//   be.upload(t, host_span);                       // host -> backend
//   be.some_op(t, ...);                            // ops read / write in place
//   std::vector<float> h = be.download<float>(t);  // backend -> host
//   // the storage is freed when the last handle to it goes away
// Copying a handle shares the storage (as torch.Tensor does); a deep copy is
// Backend::copy. Handles of one backend must not reach another backend's ops
// (they throw std::invalid_argument naming the op).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mxsim/quant_spec.hpp"

namespace mxsim {

class Backend;

/// Element type of a backend tensor.
enum class DType : uint8_t {
  f32,  ///< FP32 (also FP32 containers of BF16-representable values)
  u8,   ///< bytes (labels, int8 direction bits stored as their byte)
  i32,  ///< top-k expert indices
  u32,  ///< counters (oscillation flips)
  i64,  ///< routing metadata (token counts, permuted rows)
  /// BF16 bit patterns (uint16: the top half of an FP32), the operands of the BF16 GEMMs as the
  /// GPU reads them (round_bf16 writes them from f32; an f32 tensor of BF16 values reads the same)
  bf16,
};
/// Bytes of one element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::u32: return 4;
    case DType::i64: return 8;
    case DType::bf16: return 2;
  }
  return 0;
}
const char* name_of(DType t);

/// The DType of a C++ element type (f32 float, u8 uint8_t, ...).
template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::u32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }

/// Logical shape, rank 1 to 3, row-major (the last index fastest).
struct Shape {
  std::array<size_t, 3> dim{0, 0, 0};
  int rank = 0;
  Shape() = default;
  Shape(std::initializer_list<size_t> d);
  size_t operator[](int i) const { return dim[size_t(i)]; }
  size_t numel() const;
  bool operator==(const Shape& o) const { return rank == o.rank && dim == o.dim; }
  std::string str() const;  ///< "[2, 3]"
};

/// Storage owned by a backend. Each backend derives its own buffer type; only
/// that backend looks inside.
class BackendBuffer {
 public:
  explicit BackendBuffer(const Backend* owner) : owner_(owner) {}
  virtual ~BackendBuffer() = default;
  const Backend* owner() const { return owner_; }

 private:
  const Backend* owner_;
};

/// Handle of a dense backend tensor. Empty when default-constructed.
class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<BackendBuffer> buf, DType dtype, Shape shape)
      : buf_(std::move(buf)), dtype_(dtype), shape_(shape) {}
  bool empty() const { return !buf_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t dim(int i) const { return shape_[i]; }
  int rank() const { return shape_.rank; }
  size_t numel() const { return shape_.numel(); }
  size_t bytes() const { return numel() * dtype_size(dtype_); }
  /// The backend's buffer (for that backend's op implementations only).
  BackendBuffer* buffer() const { return buf_.get(); }

 private:
  std::shared_ptr<BackendBuffer> buf_;
  DType dtype_ = DType::f32;
  Shape shape_;
};

/// Handle of a quantized tensor in backend memory: packed codes, block
/// scales, and (NVFP4) the tensor scale, laid out as QuantizedTensor
/// (quantized_tensor.hpp) describes. The spec and the logical shape
/// [groups, rows, cols] are host metadata; Backend::download gives the host
/// QuantizedTensor (files, tests). Created only by Backend ops.
class QTensor {
 public:
  QTensor() = default;
  QTensor(std::shared_ptr<BackendBuffer> buf, const QuantSpec& spec, size_t groups, size_t rows, size_t cols,
          bool transposed)
      : buf_(std::move(buf)), spec_(spec), groups_(groups), rows_(rows), cols_(cols), transposed_(transposed) {}
  bool empty() const { return !buf_; }
  const QuantSpec& spec() const { return spec_; }
  size_t groups() const { return groups_; }
  size_t rows() const { return rows_; }
  size_t cols() const { return cols_; }
  bool transposed() const { return transposed_; }
  BackendBuffer* buffer() const { return buf_.get(); }

 private:
  std::shared_ptr<BackendBuffer> buf_;
  QuantSpec spec_;
  size_t groups_ = 0, rows_ = 0, cols_ = 0;
  bool transposed_ = false;
};

/// A wgrad operand quantized per group: an [M, C] tensor cut into the
/// m_splits row slices, slice g quantized on its own along M (Axis::Rows),
/// so no block crosses a group boundary (Backend::quantize_grouped_colwise).
/// One backend buffer holds every group.
class GroupedQTensor {
 public:
  GroupedQTensor() = default;
  GroupedQTensor(std::shared_ptr<BackendBuffer> buf, const QuantSpec& spec, std::vector<int64_t> m_splits,
                 size_t cols)
      : buf_(std::move(buf)), spec_(spec), m_splits_(std::move(m_splits)), cols_(cols) {}
  bool empty() const { return !buf_; }
  const QuantSpec& spec() const { return spec_; }
  const std::vector<int64_t>& m_splits() const { return m_splits_; }
  size_t groups() const { return m_splits_.size(); }
  size_t cols() const { return cols_; }
  BackendBuffer* buffer() const { return buf_.get(); }

 private:
  std::shared_ptr<BackendBuffer> buf_;
  QuantSpec spec_;
  std::vector<int64_t> m_splits_;
  size_t cols_ = 0;
};

}  // namespace mxsim
