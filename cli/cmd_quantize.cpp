// mxsim quantize: read tensors from .npy / .safetensors files or a sharded
// checkpoint, quantize them with a named recipe (mxsim::tensor_recipe), write
// packed codes + scales, print the error statistics (mxsim::emu::quant_stats)
// and, on request, per-block statistics. docs/cli.md describes it.
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "mxsim/build_info.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/checked_size.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"
#include "mxsim/layouts.hpp"
#include "mxsim/quant_spec.hpp"
#include "tensor_io.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace mxsim::cli {
namespace {

/// One row of --per-block (storage coordinates), formed when written.
struct BlockRow {
  size_t group, block_row, block_col;
  double scale;   ///< E8M0 / UE4M3: the scale byte; FP32: scale_inv
  int scale_exp;  ///< emu::BlockStat::scale_exp (INT_MIN: NaN scale)
  double amax;
  size_t count;   ///< elements with a finite source and a non-NaN result (those the errors are taken over)
  double mse, sqnr_db;
  uint64_t saturated, underflow;
};

/// One quantized tensor, ready to write.
struct Result {
  std::string name;                // source tensor name
  fs::path file;                   // the input it came from
  std::vector<size_t> src_shape;   // as in the file
  io::DType src_dtype;
  emu::QuantStats stats;
  size_t rounded_from_f64 = 0;     // F64 values the rounding to FP32 changed
  std::vector<io::RawTensor> outs;  // .data, .scale / .scale_inv, .tensor_scale_inv (names without the base)
  std::vector<io::DType> st_dtypes; // the dtype of each out in a .safetensors file
  std::vector<std::vector<size_t>> st_shapes;  // and its shape there
  json meta;
  std::vector<emu::BlockStat> blocks;  // --per-block: one per block, storage order
  size_t nbr = 0, nbc = 0;             // blocks per group down / across the storage rows
  /// --per-block of a tensor whose written scales are not in storage order
  /// (torchao layouts of columnwise blocks): the FP32 values in storage order.
  std::vector<float> storage_scale_inv;
};

std::string layout_of(const QuantizedTensor& q, bool grouped) {
  const std::string g = grouped ? "per group, " : "";
  std::string s;
  if (q.spec.per_tensor())
    s = "per-tensor scale; data " + g + "in the logical [rows, cols] layout";
  else if (q.spec.is_2d_tile())
    s = std::to_string(q.block_rows()) + "x" + std::to_string(q.block_cols()) + " tiles; data " + g +
        "in the logical [rows, cols] layout, scales one per tile";
  else if (q.transposed)
    s = "columnwise: blocks of " + std::to_string(q.block_cols()) + " run down the columns; data " + g +
        "stored transposed [cols, rows], scales [cols, ceil(rows/" + std::to_string(q.block_cols()) + ")]";
  else
    s = "rowwise: blocks of " + (q.spec.block_cols == 0 ? std::string("a whole row") : std::to_string(q.block_cols())) +
        " along the last axis; data " + g + "[rows, cols], scales [rows, ceil(cols/block)]";
  s += q.spec.elem == Format::E2M1 ? "; E2M1 packed two per byte, element 2i in the low nibble (float4_e2m1fn_x2)"
                                   : "; one code per byte";
  return s;
}

/// The safetensors dtype of the codes: the format's own where safetensors has
/// one with this byte layout (FP6 is bit-packed there, so it stays U8 here).
io::DType code_dtype(Format f) {
  switch (f) {
    case Format::E2M1: return io::DType::F4;
    case Format::E4M3: return io::DType::F8_E4M3;
    case Format::E5M2: return io::DType::F8_E5M2;
    case Format::E4M3FNUZ: return io::DType::F8_E4M3FNUZ;
    case Format::E5M2FNUZ: return io::DType::F8_E5M2FNUZ;
    default: return io::DType::U8;
  }
}

/// The codes and scales of one tensor in storage order, as they are written.
struct Outputs {
  std::vector<uint8_t> data;      ///< [G, SR, row_bytes]
  std::vector<uint8_t> scale;     ///< E8M0 / UE4M3 [G, nbr, nbc]
  std::vector<float> scale_inv;   ///< FP32 [G, nbr, nbc]
  float tensor_scale_inv = 1.0f;
};

/// q's shape, spec and layout without its storage (layout_of, metadata).
QuantizedTensor shape_only(const QuantizedTensor& q) {
  QuantizedTensor s;
  s.spec = q.spec;
  s.groups = q.groups;
  s.rows = q.rows;
  s.cols = q.cols;
  s.transposed = q.transposed;
  s.tensor_scale_inv = q.tensor_scale_inv;
  return s;
}

size_t ceil_div(size_t a, size_t b) { return size_t(io::ceil_div(a, b)); }

/// The outputs of a tensor quantized with a torchao scale convention, in
/// torchao's layout (docs/cli.md "Output"): codes in the logical layout (a
/// columnwise tensor's storage transposed back) as `.qdata` (Float8Tensor) or
/// `._data` (Float8TrainingTensor), FP32 `.scale` / `._scale` of the codes'
/// rank holding one value per block of the logical layout (per row [R, 1], per
/// column [1, C], blocks [R/b, C] ...; a 1-D tensor's [n]; tensorwise training
/// scales 0-D, as torchao's), the values as the quantizer stored them.
void finish_torchao(Result& r, const QuantizedTensor& q, size_t rank, Outputs& o) {
  const size_t G = q.groups, R = q.rows, C = q.cols;
  const bool training = q.spec.scale_convention == ScaleConvention::TorchaoTraining;
  const size_t nbr = r.nbr, nbc = r.nbc;
  if (q.transposed) {  // storage [G, C, R] -> logical [G, R, C]; scales [G, C, nbc] -> [G, nbc, C]
    o.data = layout::transpose_groups<uint8_t>(o.data, G, C, R);
    if (!r.blocks.empty()) r.storage_scale_inv = o.scale_inv;
    o.scale_inv = layout::transpose_groups<float>(o.scale_inv, G, nbr, nbc);
  }
  const size_t lr = q.transposed ? nbc : nbr, lc = q.transposed ? nbr : nbc;  // logical scale grid per group
  std::vector<size_t> dshape = rank == 3 ? std::vector<size_t>{G, R, C} : rank == 2 ? std::vector<size_t>{R, C}
                                                                                     : std::vector<size_t>{C};
  std::vector<size_t> sshape = rank == 3 ? std::vector<size_t>{G, lr, lc} : rank == 2 ? std::vector<size_t>{lr, lc}
                                                                                      : std::vector<size_t>{lc};
  if (training && q.spec.per_tensor() && rank < 3) sshape.clear();  // torchao's tensorwise _scale is 0-D
  const std::string dn = training ? "._data" : ".qdata", sn = training ? "._scale" : ".scale";
  r.outs.push_back(io::RawTensor{dn, io::DType::U8, dshape, std::move(o.data)});
  r.st_dtypes.push_back(code_dtype(q.spec.elem));
  r.st_shapes.push_back(dshape);
  r.outs.push_back(io::from_f32(sn, sshape, o.scale_inv.data()));
  o.scale_inv = {};
  r.st_dtypes.push_back(io::DType::F32);
  r.st_shapes.push_back(sshape);
}

/// torchao's block_size of the written layout (Float8Tensor's attribute): the
/// block extent along each axis of the codes' shape.
std::vector<size_t> torchao_block_size(const QuantizedTensor& q, size_t rank) {
  const size_t bl_r = q.transposed ? q.block_cols() : q.block_rows(), bl_c = q.transposed ? q.block_rows() : q.block_cols();
  if (rank == 3) return {1, bl_r, bl_c};
  if (rank == 2) return {bl_r, bl_c};
  return {bl_c};
}

/// Fill r.outs, st_dtypes, st_shapes and meta from the tensor's codes and
/// scales (r.name, file, src_shape, src_dtype already set).
void finish(Result& r, const QuantizedTensor& q, size_t rank, Outputs&& o, const std::string& recipe) {
  const QuantSpec& spec = q.spec;
  const size_t G = q.groups, R = q.rows, C = q.cols;
  const bool grouped = rank == 3;
  auto dims = [&](size_t a, size_t b) { return grouped ? std::vector<size_t>{G, a, b} : std::vector<size_t>{a, b}; };
  const size_t dr = q.srows(), dc = q.row_bytes();
  const size_t nbr = ceil_div(q.srows(), q.block_rows()), nbc = ceil_div(q.scols(), q.block_cols());
  r.nbr = nbr;
  r.nbc = nbc;
  const bool torchao = spec.scale_kind == ScaleKind::FP32 && is_torchao(spec.scale_convention);
  if (torchao) {
    finish_torchao(r, q, rank, o);
  } else {
    r.outs.push_back(io::RawTensor{".data", io::DType::U8, dims(dr, dc), std::move(o.data)});
    r.st_dtypes.push_back(code_dtype(spec.elem));
    // F4 counts 4-bit elements: the packed bytes of [.., dc] are [.., 2 dc] of F4.
    r.st_shapes.push_back(spec.elem == Format::E2M1 ? dims(dr, 2 * dc) : dims(dr, dc));
    const auto sdims = dims(nbr, nbc);
    if (spec.scale_kind == ScaleKind::FP32) {
      r.outs.push_back(io::from_f32(".scale_inv", sdims, o.scale_inv.data()));
      o.scale_inv = {};
      r.st_dtypes.push_back(io::DType::F32);
      r.st_shapes.push_back(sdims);
    } else {
      r.outs.push_back(io::RawTensor{".scale", io::DType::U8, sdims, std::move(o.scale)});
      r.st_dtypes.push_back(spec.scale_kind == ScaleKind::E8M0 ? io::DType::F8_E8M0 : io::DType::F8_E4M3);
      r.st_shapes.push_back(sdims);
    }
    if (has_tensor_scale(spec.scale_kind)) {
      r.outs.push_back(io::from_f32(".tensor_scale_inv", {1}, &o.tensor_scale_inv));
      r.st_dtypes.push_back(io::DType::F32);
      r.st_shapes.push_back({1});
    }
  }

  json& m = r.meta;
  m["recipe"] = recipe;
  m["spec"] = spec.describe();
  m["elem_format"] = short_name(spec.elem);
  m["scale_kind"] = name_of(spec.scale_kind);
  if (spec.scale_kind == ScaleKind::E8M0) m["scale_rule"] = name_of(spec.rule);
  m["round"] = name_of(spec.round);
  if (spec.scale_kind == ScaleKind::FP32) {
    m["amax_epsilon"] = double(spec.amax_epsilon);
    m["pow2_scale"] = spec.pow2_scale;
    m["scale_convention"] = name_of(spec.scale_convention);
    if (spec.scale_convention == ScaleConvention::Torchao || spec.scale_convention == ScaleConvention::TorchaoCuda)
      m["hp_dtype"] = spec_of(spec.hp_dtype).name;
  }
  m["hadamard"] = spec.hadamard16;
  if (spec.hadamard16_signs) m["hadamard_signs"] = spec.hadamard16_signs;
  m["shape"] = r.src_shape;
  m["logical_shape"] = {G, R, C};
  m["grouped"] = grouped;
  m["source_dtype"] = io::name_of(r.src_dtype);
  if (torchao) {  // the written layout is torchao's: logical, never transposed
    const bool training = spec.scale_convention == ScaleConvention::TorchaoTraining;
    m["layout"] = std::string(training ? "torchao Float8TrainingTensor: _data" : "torchao Float8Tensor: qdata") +
                  " in the logical layout" + (grouped ? " [G, rows, cols]" : "") + ", FP32 " +
                  (training ? "_scale (the quantization scale: x = code / _scale)"
                            : "scale (x = code * scale)") +
                  " one per block, of the codes' rank" + (q.transposed ? "; blocks run down the columns" : "");
    m["transposed"] = false;
    m["block"] = {q.transposed ? q.block_cols() : q.block_rows(), q.transposed ? q.block_rows() : q.block_cols()};
    m["block_size"] = torchao_block_size(q, rank);
  } else {
    m["layout"] = layout_of(q, grouped);
    m["transposed"] = q.transposed;
    m["block"] = {q.block_rows(), q.block_cols()};
  }
  if (spec.round == RoundMode::Stochastic) {
    m["sr_seed"] = spec.sr.seed;
    m["sr_stream"] = spec.sr.stream;
  }
}

/// Refuses, from its header, a tensor quantize cannot take: a dtype other
/// than F32 / F16 / BF16 / F64, a rank other than 1..3, no elements.
void check_quantizable(const fs::path& file, const io::RawTensor& t) {
  const std::string where = file.string() + ": tensor '" + t.name + "'";
  if (!io::is_quantizable(t.dtype) && !io::is_quantizable_after_rounding(t.dtype))
    throw std::runtime_error(where + ": dtype " + io::name_of(t.dtype) +
                             " cannot be quantized (input dtypes: F32, F16, BF16; F64 after rounding to F32)");
  const size_t rank = t.shape.size();
  if (rank == 0 || rank > 3)
    throw std::runtime_error(where + ": shape " + t.shape_str() + " is " + std::to_string(rank) +
                             "-D; quantize takes 1-D (one row), 2-D [rows, cols] or 3-D [groups, rows, cols]");
  if (t.numel() == 0) throw std::runtime_error(where + ": shape " + t.shape_str() + " is empty");
}

/// A tensor of one slice, quantized whole: emu::quantize (F64:
/// emu::quantize_f64), emu::quant_stats and emu::block_stats of the whole
/// tensor, the definitions the streamed path must reproduce bit for bit.
Result quantize_one(const io::RawTensor& t, const fs::path& file, const QuantSpec& spec, Axis axis,
                    const std::string& recipe, bool per_block) {
  const std::string where = file.string() + ": tensor '" + t.name + "'";
  check_quantizable(file, t);
  const size_t rank = t.shape.size();
  const size_t G = rank == 3 ? t.shape[0] : 1;
  const size_t R = rank == 1 ? 1 : t.shape[rank - 2];
  const size_t C = t.shape[rank - 1];
  Result r;
  const std::vector<float> v = io::to_f32(t, &r.rounded_from_f64);
  Tensor3f x = Tensor3f::from_shape({G, R, C});
  std::copy(v.begin(), v.end(), x.begin());

  QuantizedTensor q;
  try {
    if (t.dtype == io::DType::F64)  // elements rounded once from FP64 where the recipe allows (numerics §4.7)
      q = emu::quantize_f64(reinterpret_cast<const double*>(t.bytes.data()), G, R, C, spec, axis);
    else
      q = emu::quantize(x, spec, axis);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(where + " (shape " + t.shape_str() + "): recipe " + recipe + " cannot take it: " + e.what());
  }
  r.name = t.name;
  r.file = file;
  r.src_shape = t.shape;
  r.src_dtype = t.dtype;
  // With hadamard16 the codes hold H x, and quant_stats / block_stats compare
  // them with H x formed from the untransformed source (numerics §4.6): x is
  // passed as read. (H16/4 is orthonormal, so MSE and SQNR match the original
  // domain up to the FP32 rounding of the transform.)
  r.stats = emu::quant_stats(x, q);
  if (per_block) r.blocks = emu::block_stats(x, q);
  Outputs o;
  o.data.assign(q.data.begin(), q.data.end());
  if (spec.scale_kind == ScaleKind::FP32) o.scale_inv.assign(q.scale_inv.begin(), q.scale_inv.end());
  else o.scale.assign(q.scale_bytes.begin(), q.scale_bytes.end());
  o.tensor_scale_inv = q.tensor_scale_inv;
  const QuantizedTensor shape_q = shape_only(q);
  q = QuantizedTensor{};  // the codes live on in o alone
  finish(r, shape_q, rank, std::move(o), recipe);
  return r;
}

/// Source bytes one streamed slice reads at most: MXSIM_QUANTIZE_CHUNK_BYTES
/// (a hidden setting, bytes, for tests that force many small slices), else
/// 256 MiB. A slice is at least one row (one tile row for 2-D tiles).
uint64_t chunk_bytes() {
  if (const char* e = std::getenv("MXSIM_QUANTIZE_CHUNK_BYTES"))
    return uint64_t(parse_int("MXSIM_QUANTIZE_CHUNK_BYTES", e, 1, INT64_MAX));
  return uint64_t(256) << 20;
}

/// [G, R, C] of a 1-D, 2-D or 3-D shape.
std::array<size_t, 3> logical_gRC(const std::vector<size_t>& shape) {
  const size_t rank = shape.size();
  return {rank == 3 ? shape[0] : 1, rank == 1 ? 1 : shape[rank - 2], shape[rank - 1]};
}

/// The shape, spec and storage layout of a [G, R, C] tensor quantized with
/// `spec` along `axis` (no storage): what its outputs and blocks are.
QuantizedTensor geometry(const io::RawTensor& h, const QuantSpec& spec, Axis axis) {
  const auto [G, R, C] = logical_gRC(h.shape);
  QuantizedTensor q;
  q.spec = spec;
  q.groups = G;
  q.rows = R;
  q.cols = C;
  q.transposed = !spec.is_2d_tile() && !spec.per_tensor() && axis == Axis::Rows;
  return q;
}

/// Columnwise blocks of a whole column (per-column scaling, fp8_row with
/// --axis rows): each band needs every column's amax of the whole group.
bool whole_columns(const QuantizedTensor& g) { return g.transposed && g.spec.block_cols == 0; }

/// Elements one slice reads at most: chunk_bytes() of source.
uint64_t slice_elems(io::DType d) { return std::max<uint64_t>(1, chunk_bytes() / io::byte_count(d, 1)); }

/// Whether `quantize` streams tensor h in slices (emu::row_slices): when its
/// source is more than one slice reads (chunk_bytes()). Every input kind,
/// dtype, axis and recipe streams; a smaller tensor is read and quantized whole.
bool streams(const io::RawTensor& h) { return io::byte_count(h.dtype, h.numel()) > chunk_bytes(); }

/// Bytes the outputs of a [G, R, C] tensor take (codes + scales).
uint64_t output_bytes(const QuantizedTensor& q) {
  const uint64_t nb = uint64_t(q.groups) * ceil_div(q.srows(), q.block_rows()) * ceil_div(q.scols(), q.block_cols());
  return uint64_t(q.groups) * q.srows() * q.row_bytes() + nb * (q.spec.scale_kind == ScaleKind::FP32 ? 4 : 1);
}

/// What quantizing one tensor holds (check_memory, the out-of-memory message).
struct MemoryNeed {
  uint64_t outputs = 0;  ///< codes, scales and (--per-block) the per-block statistics, held until written
  uint64_t work = 0;     ///< the working set while it is quantized, freed after
  uint64_t source = 0;   ///< source bytes one slice reads (the whole tensor when it is not streamed)
};
MemoryNeed memory_need(const io::RawTensor& h, const QuantSpec& spec, Axis axis, bool per_block);

/// Copy the codes and scales of slice `sl` (q, from emu::quantize_slice) to
/// their storage positions in the outputs `o` of the whole tensor `whole`.
void place(const QuantizedTensor& q, const emu::RowSlice& sl, const QuantizedTensor& whole, Outputs& o) {
  const size_t nbr = ceil_div(whole.srows(), whole.block_rows()), nbc = ceil_div(whole.scols(), whole.block_cols());
  const bool fp32 = whole.spec.scale_kind == ScaleKind::FP32;
  const size_t qnbc = ceil_div(q.scols(), q.block_cols());
  auto put_scales = [&](uint64_t dst, size_t src, size_t n) {
    if (fp32)
      std::copy_n(q.scale_inv.data() + src, n, o.scale_inv.begin() + std::ptrdiff_t(dst));
    else
      std::copy_n(q.scale_bytes.data() + src, n, o.scale.begin() + std::ptrdiff_t(dst));
  };
  if (!whole.transposed) {  // storage rows are the logical rows [row0, row0 + rows) of the flat [G * R] view
    std::copy(q.data.begin(), q.data.end(), o.data.begin() + std::ptrdiff_t(sl.row0 * q.row_bytes()));
    const uint64_t srow = sl.group * nbr + (sl.row0 - sl.group * whole.rows) / whole.block_rows();
    put_scales(srow * nbc, 0, q.scale_inv.size() + q.scale_bytes.size());
    return;
  }
  // Columnwise: the band of rows [lr0, lr0 + rows) of group g is the columns
  // [lr0, lr0 + rows) of each storage row c of that group's [C, R] codes.
  const uint64_t lr0 = sl.row0 - sl.group * whole.rows;
  const size_t wrb = whole.row_bytes(), qrb = q.row_bytes();
  const uint64_t byte0 = whole.spec.elem == Format::E2M1 ? lr0 / 2 : lr0;  // lr0 is even for E2M1 (slice_unit)
  const uint64_t bcol0 = lr0 / whole.block_cols();
  for (size_t c = 0; c < whole.cols; ++c) {
    const uint64_t srow = sl.group * whole.cols + c;
    std::copy_n(q.data.data() + c * qrb, qrb, o.data.begin() + std::ptrdiff_t(srow * wrb + byte0));
    put_scales(srow * nbc + bcol0, c * qnbc, qnbc);
  }
}

/// quantize_one of a tensor streamed from its file in slices of whole block
/// rows (emu::row_slices; columnwise: bands of whole blocks down the columns),
/// read at its offset with pread: a first pass folds the whole-tensor amaxes
/// the spec needs (per-tensor scales: each group's; NVFP4: the global one;
/// whole-column blocks: each column's), a second quantizes each slice with
/// emu::quantize_slice (F64: quantize_slice_f64), its first logical index as
/// spec.sr_index_base (so SR draws the words of the whole tensor), copies
/// codes and scales into place and feeds QuantStatsAccumulator (and for
/// --per-block BlockStatsAccumulator) in flat order: the same bits as the
/// unsliced path.
Result quantize_streamed(const InputFile& in, const TensorRef& ref, const QuantSpec& spec, Axis axis,
                         const std::string& recipe, bool per_block) {
  const io::RawTensor& h = ref.header;
  const std::string where = in.path.string() + ": tensor '" + h.name + "'";
  // Named copies, not a structured binding: the lambdas below use C, and
  // Clang 15 (the sanitizer build) cannot capture structured bindings.
  const auto gRC = logical_gRC(h.shape);
  const size_t G = gRC[0], R = gRC[1], C = gRC[2];
  const uint64_t esize = io::byte_count(h.dtype, 1);
  const bool f64 = h.dtype == io::DType::F64;
  QuantizedTensor shape_q = geometry(h, spec, axis);
  const bool by_column = whole_columns(shape_q);
  const std::vector<emu::RowSlice> slices = emu::row_slices(G, R, C, spec, slice_elems(h.dtype), axis);
  const io::FileReader f(in.path);
  io::RawTensor chunk{h.name, h.dtype, {}, {}};
  Tensor3f x;
  size_t rounded = 0;
  auto read = [&](const emu::RowSlice& sl, bool count) {
    const uint64_t n = sl.rows * C;
    chunk.shape = {size_t(n)};
    chunk.bytes.resize(size_t(n * esize));
    f.read(ref.offset + sl.index_base * esize, chunk.bytes.data(), chunk.bytes.size());
    size_t changed = 0;
    const std::vector<float> v = io::to_f32(chunk, &changed);
    if (count) rounded += changed;
    x = Tensor3f::from_shape({1, size_t(sl.rows), C});
    std::copy(v.begin(), v.end(), x.begin());
  };

  std::vector<uint32_t> group_amax(G, 0);
  std::vector<std::vector<uint32_t>> column_amax(by_column ? G : 0);
  uint32_t tensor_amax = 0;
  const bool tensor_scaled = has_tensor_scale(spec.scale_kind);  // its tensor amax first
  try {
    // The whole tensor's extent, so that a spec it cannot take fails as unsliced.
    hd::validate_quant_spec(spec, shape_q.scols());
    if (spec.per_tensor() || tensor_scaled || by_column)  // pass 1: the whole-tensor amaxes
      for (const auto& sl : slices) {
        read(sl, false);
        if (spec.per_tensor()) group_amax[sl.group] = emu::amax_bits(x, spec, true, group_amax[sl.group]);
        if (tensor_scaled) tensor_amax = emu::tensor_amax_bits(x, spec, shape_q.transposed, tensor_amax);
        if (by_column) emu::fold_column_amax(x, spec, column_amax[sl.group]);
      }
    Outputs o;
    o.data.assign(size_t(uint64_t(G) * shape_q.srows() * shape_q.row_bytes()), 0);
    const size_t nb = G * ceil_div(shape_q.srows(), shape_q.block_rows()) * ceil_div(shape_q.scols(), shape_q.block_cols());
    if (spec.scale_kind == ScaleKind::FP32) o.scale_inv.assign(nb, 0.0f);
    else o.scale.assign(nb, 0);
    emu::QuantStatsAccumulator acc;
    std::optional<emu::BlockStatsAccumulator> blocks;
    if (per_block) blocks.emplace(shape_q);
    for (const auto& sl : slices) {  // pass 2: quantize slice by slice
      read(sl, true);
      QuantSpec s = spec;
      s.sr_index_base = spec.sr_index_base + sl.index_base;
      emu::SliceAmax a;
      if (spec.per_tensor()) a.group_amax_bits = group_amax[sl.group];
      if (tensor_scaled) a.tensor_amax_bits = tensor_amax;
      if (by_column) a.column_amax_bits = column_amax[sl.group];
      const QuantizedTensor q =
          f64 ? emu::quantize_slice_f64(reinterpret_cast<const double*>(chunk.bytes.data()), size_t(sl.rows), C, s,
                                        axis, a)
              : emu::quantize_slice(x, s, axis, a);
      acc.add(x, q);
      if (blocks) blocks->add(x, q, sl.row0);
      place(q, sl, shape_q, o);
      o.tensor_scale_inv = q.tensor_scale_inv;
    }
    Result r;
    r.name = h.name;
    r.file = in.path;
    r.src_shape = h.shape;
    r.src_dtype = h.dtype;
    r.rounded_from_f64 = rounded;
    r.stats = acc.result();
    if (blocks) r.blocks = blocks->take();
    shape_q.tensor_scale_inv = o.tensor_scale_inv;
    finish(r, shape_q, h.shape.size(), std::move(o), recipe);
    return r;
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(where + " (shape " + h.shape_str() + "): recipe " + recipe + " cannot take it: " + e.what());
  }
}

/// One tensor of the inputs, quantized: read whole (quantize_one) when it
/// fits in one slice, else streamed (quantize_streamed, with a note). An
/// allocation that fails is the error naming the tensor and what it needs.
Result quantize_tensor(const InputFile& in, const TensorRef& ref, const QuantSpec& spec, Axis axis,
                       const std::string& recipe, bool per_block, Notes& notes) {
  const io::RawTensor& h = ref.header;
  check_quantizable(in.path, h);
  try {
    if (!streams(h)) return quantize_one(read_tensor(in, ref), in.path, spec, axis, recipe, per_block);
    Result r = quantize_streamed(in, ref, spec, axis, recipe, per_block);
    const auto [G, R, C] = logical_gRC(h.shape);
    const QuantizedTensor g = geometry(h, spec, axis);
    const size_t n = emu::row_slices(G, R, C, spec, slice_elems(h.dtype), axis).size();
    notes.add(in.path.string() + ": tensor '" + h.name + "' streamed in " + std::to_string(n) +
              (g.transposed ? " slices of whole blocks down the columns (bands of " +
                                  std::to_string(emu::slice_unit(R, spec, axis)) + "-row multiples)"
                            : std::string(" slices of whole block rows")) +
              (spec.per_tensor() || has_tensor_scale(spec.scale_kind) || whole_columns(g)
                   ? " (two passes: amax, then quantize)"
                   : ""));
    return r;
  } catch (const std::bad_alloc&) {
    const MemoryNeed m = memory_need(h, spec, axis, per_block);
    throw std::runtime_error(in.path.string() + ": tensor '" + h.name + "': needs " + bytes_str(m.outputs + m.work) +
                             " of memory to quantize" + (streams(h) ? " streamed" : "") +
                             ", and an allocation failed (out of memory)");
  }
}

std::string fmt_sqnr(double d) { return num(d, "%.2f"); }

std::string shape_x(const std::vector<size_t>& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) o += 'x';
    o += std::to_string(s[i]);
  }
  return o;
}

json stats_json(const Result& r) {
  const auto& s = r.stats;
  json j{{"name", r.name},
         {"file", r.file.string()},
         {"shape", r.src_shape},
         {"dtype", io::name_of(r.src_dtype)},
         {"elements", s.count},
         {"mse", json_number(s.mse)},
         {"sqnr_db", json_number(s.sqnr_db)},
         {"max_abs_err", json_number(s.max_abs_err)},
         {"underflow", s.underflow},
         {"saturated", s.saturated},
         {"nan_out", s.nan_out},
         {"nonfinite_in", s.nonfinite_in},
         {"mean_err", json_number(s.mean_err)},
         {"rounded", s.rounded},
         {"rounded_up", s.rounded_up},
         {"expected_up", json_number(s.expected_up)},
         {"tensor_scale_inv", json_number(s.tensor_scale_inv)}};
  if (r.src_dtype == io::DType::F64) j["rounded_from_f64"] = r.rounded_from_f64;
  return j;
}

/// --per-block FILE: CSV with a tensor column, or (one tensor) a 2-D F64 .npy.
constexpr const char* kBlockColumns[] = {"group", "block_row", "block_col", "scale", "scale_exp", "amax",
                                         "count", "mse", "sqnr_db", "saturated", "underflow"};

/// Block i (storage order) of r as a --per-block row: its statistics, and
/// its scale from the written scales.
BlockRow block_row(const Result& r, size_t i) {
  const emu::BlockStat& s = r.blocks[i];
  BlockRow b{i / (r.nbr * r.nbc), i / r.nbc % r.nbr, i % r.nbc, 0, s.scale_exp, double(s.amax), size_t(s.count),
             NAN, NAN, s.saturated, s.underflow};
  const io::RawTensor& sc = r.outs[1];  // .scale (U8) or .scale_inv (F32)
  if (!r.storage_scale_inv.empty()) {
    b.scale = double(r.storage_scale_inv[i]);
  } else if (sc.dtype == io::DType::F32) {
    float v;
    std::memcpy(&v, sc.bytes.data() + 4 * i, 4);
    b.scale = double(v);
  } else {
    b.scale = double(sc.bytes[i]);
  }
  if (s.count) {
    b.mse = s.sq_err / double(s.count);
    b.sqnr_db = s.sq_err == 0 ? INFINITY : 10.0 * std::log10(s.sq_src / s.sq_err);
  }
  return b;
}

/// Text or bytes written through a buffer of about 1 MiB (millions of rows,
/// without holding them all).
struct BufferedWriter {
  io::FileWriter w;
  std::string buf;
  explicit BufferedWriter(const fs::path& p) : w(p) {}
  void add(std::string_view s) {
    buf += s;
    if (buf.size() >= (size_t(1) << 20)) flush();
  }
  void flush() {
    w.write(buf);
    buf.clear();
  }
  void close() {
    flush();
    w.close();
  }
};

/// The rows are formed and written one at a time: the file is never held whole.
void write_per_block_csv(const fs::path& file, const std::vector<Result>& results) {
  std::vector<std::string> head{"tensor"};
  for (const char* c : kBlockColumns) head.push_back(c);
  BufferedWriter w(file);
  w.add(csv_row(head));
  for (const auto& r : results)
    for (size_t i = 0; i < r.blocks.size(); ++i) {
      const BlockRow b = block_row(r, i);
      w.add(csv_row({r.name, std::to_string(b.group), std::to_string(b.block_row), std::to_string(b.block_col),
                     num(b.scale), b.scale_exp == INT_MIN ? "nan" : std::to_string(b.scale_exp), num(b.amax),
                     std::to_string(b.count), num(b.mse), num(b.sqnr_db), std::to_string(b.saturated),
                     std::to_string(b.underflow)}));
    }
  w.close();
}
void write_per_block_npy(const fs::path& file, const Result& r) {
  BufferedWriter w(file);
  const std::vector<uint8_t> head = io::npy_header(io::DType::F64, {r.blocks.size(), std::size(kBlockColumns)});
  w.add(std::string_view(reinterpret_cast<const char*>(head.data()), head.size()));
  for (size_t i = 0; i < r.blocks.size(); ++i) {
    const BlockRow b = block_row(r, i);
    const double v[] = {double(b.group), double(b.block_row), double(b.block_col), b.scale,
                        b.scale_exp == INT_MIN ? double(NAN) : double(b.scale_exp), b.amax, double(b.count), b.mse,
                        b.sqnr_db, double(b.saturated), double(b.underflow)};
    w.add(std::string_view(reinterpret_cast<const char*>(v), sizeof v));
  }
  w.close();
}

const CommandHelp& help() {
  static const CommandHelp h{
      "quantize", "--recipe NAME IN... [-o OUT] [options]",
      "Quantizes tensors with the CPU reference quantizer (the definition of docs/numerics.md), writes\n"
      "codes + scales and prints error statistics. IN: .npy files, .safetensors files (several shards\n"
      "too) or a sharded checkpoint's *.index.json (F32, F16, BF16; F64: MX elements rounded once from F64,\n"
      "other recipes after one RNE rounding to F32, with a note; 1-D, 2-D or 3-D [G, N, K]). Without -o (or with -o /dev/null) nothing is written: the\n"
      "statistics only.",
      "OUT:  *.safetensors: one file holding <name>.data, <name>.scale | <name>.scale_inv (dtypes F4,\n"
      "      F8_E4M3, F8_E5M2, F8_E8M0 where they exist, else U8 / F32); with --scale-convention torchao*\n"
      "      torchao's layouts instead: <name>.qdata + <name>.scale (Float8Tensor) or <name>._data +\n"
      "      <name>._scale (Float8TrainingTensor), codes in the logical layout;\n"
      "      an existing folder (or a path ending in '/'): <folder>/<name>.data.npy, ..., <name>.meta.json;\n"
      "      otherwise a new prefix: OUT.data.npy, ... (several tensors: OUT.<name>.data.npy, ...).\n"
      "      Tensor names are made file names by percent-encoding '/', '\\\\', '%', control bytes and a\n"
      "      leading '.'. An existing OUT that is a file but no .safetensors is refused.\n"
      "--per-block FILE: FILE.csv (tensor, group, block_row, block_col, scale, scale_exp, amax, count,\n"
      "      mse, sqnr_db, saturated, underflow) or FILE.npy (one tensor: F64 [blocks, 11], same columns).\n\n"
      "recipes: " + [] {
        std::string s;
        for (const auto& n : tensor_recipe_names()) s += (s.empty() ? "" : " ") + n;
        return s;
      }(),
      ""};
  return h;
}

/// Bytes per element of the working set of quantizing one slice beside its
/// source bytes: its FP32 values (and a transient converted copy), the
/// reference and dequantized values of the statistics, the slice's codes (at
/// most one byte) and scales (at most 4 bytes per element in the finest FP32
/// recipe, usually far less); F64 adds the FP32 rounding quantize_slice_f64
/// takes. An upper estimate of the peak.
constexpr uint64_t kQuantizeBytesPerElement = 17;
constexpr uint64_t kF64RoundingBytesPerElement = 4;

MemoryNeed memory_need(const io::RawTensor& h, const QuantSpec& spec, Axis axis, bool per_block) {
  const auto [G, R, C] = logical_gRC(h.shape);
  const QuantizedTensor q = geometry(h, spec, axis);
  const uint64_t n = h.numel();
  const uint64_t esize = io::byte_count(h.dtype, 1);
  const uint64_t nb = uint64_t(G) * ceil_div(q.srows(), q.block_rows()) * ceil_div(q.scols(), q.block_cols());
  MemoryNeed m;
  m.outputs = output_bytes(q) + (per_block ? nb * sizeof(emu::BlockStat) : 0);
  // One slice of whole units (emu::row_slices), or the whole tensor when it is not streamed.
  const uint64_t unit = emu::slice_unit(R, spec, axis);
  const uint64_t slice = streams(h) ? std::min<uint64_t>(n, std::max<uint64_t>(1, slice_elems(h.dtype) / C / unit) * unit * C) : n;
  const uint64_t per_elem =
      esize + kQuantizeBytesPerElement + (h.dtype == io::DType::F64 ? kF64RoundingBytesPerElement : 0);
  m.source = slice * esize;
  // the statistics' tree-sum partials (two FP64 per 256 elements, with room
  // for their vectors to grow); whole-column blocks: each column's amax
  m.work = slice * per_elem + (n / 256 + 1) * 64 + (whole_columns(q) ? uint64_t(G) * C * 4 : 0);
  return m;
}

/// Refuses, before any data is read, inputs whose quantization would not fit
/// in memory under memory_limit(): quantizing tensor k holds the outputs of
/// tensors 0..k (codes, scales and --per-block statistics are kept until
/// written) plus tensor k's working set (one slice of at most chunk_bytes()
/// of source, or the whole tensor when it fits in one slice). Without this
/// check a large tensor ends in std::bad_alloc or the kernel's OOM killer.
void check_memory(const std::vector<std::pair<const InputFile*, TensorRef>>& refs, const QuantSpec& spec, Axis axis,
                  bool per_block) {
  std::string source;
  const uint64_t limit = memory_limit(source);
  uint64_t held = 0;
  size_t before = 0;
  for (const auto& [in, ref] : refs) {
    const io::RawTensor& t = ref.header;
    const bool floating = io::is_quantizable(t.dtype) || io::is_quantizable_after_rounding(t.dtype);
    if (!floating || t.shape.empty() || t.shape.size() > 3 || t.numel() == 0) continue;  // refused or skipped later
    const MemoryNeed m = memory_need(t, spec, axis, per_block);
    const uint64_t need = held + m.outputs + m.work;
    if (need > limit) {
      const bool streamed = streams(t);
      throw std::runtime_error(
          in->path.string() + ": tensor '" + t.name + "' " + t.shape_str() + " " + io::name_of(t.dtype) + " (" +
          std::to_string(t.numel()) + " elements) needs " + bytes_str(need) + " of memory to quantize" +
          (streamed ? " streamed" : "") + " (its codes and scales" + (per_block ? " and per-block statistics" : "") +
          ", held until written" +
          (before ? ", with those of the " + std::to_string(before) + " tensor" + (before > 1 ? "s" : "") +
                        " before it"
                  : std::string()) +
          ", and " +
          (streamed ? "one slice of " + bytes_str(chunk_bytes()) : "its " + bytes_str(m.source)) +
          " of source with its working set), above the limit of " + bytes_str(limit) + " (" + source +
          "); split the tensor into several files, or raise MXSIM_MEMORY_LIMIT");
    }
    held += m.outputs;
    ++before;
  }
}

/// What the command line asks for: the spec and its label, the axis, the tensors, the outputs.
struct Request {
  OutputFormat outfmt;
  QuantSpec spec;
  std::string label;  ///< the recipe and every override, as the reports name it
  Axis axis = Axis::Cols;
  bool all_tensors = false;
  std::vector<std::string> tensor_args;
  OutPlan plan;
  std::optional<fs::path> per_block;
};

void add_options(po::options_description& opts) {
  opts.add_options()                                                                                 //
      ("help,h", "show this help")                                                                   //
      ("recipe,r", po::value<std::string>(), "recipe name (see the list below); required")           //
      ("output,o", po::value<std::string>(), "output: .safetensors file, folder, or new prefix (none: statistics only)")  //
      ("axis", po::value<std::string>()->default_value("cols"),
       "1-D blocks along: cols = the last axis (rowwise, fprop), rows = down the columns (columnwise, wgrad; "
       "data stored transposed)")                                                                    //
      ("scale-rule", po::value<std::string>(), "E8M0 scale rule: floor, rceil, even, ceil (default: the recipe's)")  //
      ("elem", po::value<std::string>(), "element format instead of the recipe's (e.g. e4m3fnuz with fp8_tensor / "
       "fp8_row / fp8_block; MX recipes: any MX or FP8 element)")  //
      ("round", po::value<std::string>(), "element rounding: rne, rz, sr (default: the recipe's, rne)")  //
      ("amax-epsilon", po::value<std::string>(),
       "FP32-scale recipes: amax used = max(amax, E), E >= 0 as FP32 (default: the recipe's, 0 = TE)")  //
      ("pow2-scale", po::value<std::string>(),
       "FP32-scale recipes: on | off, round the scale down to a power of two (default: the recipe's)")  //
      ("scale-convention", po::value<std::string>(),
       "FP32-scale recipes: te (default), torchao, torchao_cuda (torchao Float8Tensor as PyTorch computes it "
       "on the CPU / on CUDA), torchao_training (Float8TrainingTensor); torchao layouts written")  //
      ("seed", po::value<std::string>(), "Philox seed for --round sr, 0 to 2^64-1 (default 0)")        //
      ("hadamard", po::bool_switch(), "apply the 16-point Hadamard transform along the blocks first")  //
      ("hadamard-signs", po::value<std::string>(),
       "with --hadamard: random signs, a 16-bit mask, 0 to 65535 (bit k negates element k of each run; "
       "TE's NVFP4 wgrad vector is 55272 = 0xD7E8)")  //
      ("tensor", po::value<std::vector<std::string>>(), "safetensors input: a tensor to quantize (repeatable)")  //
      ("all-tensors", po::bool_switch(), "quantize every F32/F16/BF16/F64 tensor of the inputs")        //
      ("per-block", po::value<std::string>(), "write per-block statistics to FILE.csv or FILE.npy");
  add_format_options(opts, true, "the statistics");
}

/// The request of parsed options (UsageError for a combination the command refuses).
Request parse_request(const Parsed& p) {
  const OutputFormat outfmt = output_format(p, true);
  if (!p.has("recipe")) throw UsageError("--recipe is required");
  if (p.positional.empty()) throw UsageError("an input file is required");
  if (p.has("output") && p.str("output").empty()) throw UsageError("-o OUT is empty");
  if (p.has("seed") && !(p.has("round") && p.str("round") == "sr"))
    throw UsageError("--seed applies to --round sr only (it would be ignored)");
  const bool all_tensors = p.flag("all-tensors");
  std::vector<std::string> tensor_args;
  if (p.has("tensor")) tensor_args = p.vm["tensor"].as<std::vector<std::string>>();
  if (all_tensors && !tensor_args.empty()) throw UsageError("--tensor and --all-tensors exclude each other");

  QuantSpec spec = spec_option("--recipe", p.str("recipe"));
  const std::string recipe = canonical_spec_name(p.str("recipe"));  // an alias is labelled as its spec
  const std::string axis_name = p.str("axis");
  Axis axis;
  if (axis_name == "cols") axis = Axis::Cols;
  else if (axis_name == "rows") axis = Axis::Rows;
  else throw UsageError("--axis must be rows or cols, not '" + axis_name + "'");
  std::string label = recipe;
  try {
    if (p.has("scale-rule")) {
      if (spec.scale_kind != ScaleKind::E8M0)
        throw UsageError("--scale-rule applies to E8M0-scaled recipes; " + recipe + " has " + name_of(spec.scale_kind) +
                         " scales");
      spec.rule = scale_rule_from_name(p.str("scale-rule"));
      label += std::string(" scale-rule=") + name_of(spec.rule);
    }
    if (p.has("elem")) {
      // The recipe's blocks and scales with another element format: FNUZ (AMD CDNA3 FP8) per tensor,
      // per row, per 1x128 block, or as MX elements.
      Format f;
      if (!format_from_name(p.str("elem"), f)) throw UsageError("--elem: unknown element format '" + p.str("elem") + "'");
      const bool fp8 = has_role(f, kRoleFp8), mx = has_role(f, kRoleMxElem);
      if (spec.scale_kind == ScaleKind::UE4M3 || (spec.scale_kind == ScaleKind::FP32 && !fp8) ||
          (spec.scale_kind == ScaleKind::E8M0 && !mx))
        throw UsageError("--elem " + p.str("elem") + ": recipe " + recipe + " (" + name_of(spec.scale_kind) +
                         " scales) takes " + (spec.scale_kind == ScaleKind::FP32 ? "e4m3, e5m2, e4m3fnuz or e5m2fnuz"
                                              : spec.scale_kind == ScaleKind::E8M0
                                                  ? "e2m1, e2m3, e3m2, e4m3, e5m2, e4m3fnuz or e5m2fnuz"
                                                  : "no other element format (NVFP4 is E2M1)"));
      spec.elem = f;
      label += std::string(" elem=") + short_name(f);
    }
    if (p.has("round")) {
      spec.round = round_mode_from_name(p.str("round"));
      label += std::string(" round=") + name_of(spec.round);
    }
    if (p.has("scale-convention")) {  // first: it resets pow2_scale, and epsilon / pow2 are checked against it
      set_scale_convention(spec, scale_convention_from_name(p.str("scale-convention")), "--scale-convention");
      label += std::string(" scale-convention=") + name_of(spec.scale_convention);
    }
    if (p.has("amax-epsilon")) {
      const std::string v = p.str("amax-epsilon");
      char* end = nullptr;
      const double e = std::strtod(v.c_str(), &end);
      if (v.empty() || end != v.c_str() + v.size()) throw UsageError("--amax-epsilon: '" + v + "' is not a number");
      set_amax_epsilon(spec, e, "--amax-epsilon");
      label += " amax-epsilon=" + v;
    }
    if (p.has("pow2-scale")) {
      const std::string v = p.str("pow2-scale");
      if (v != "on" && v != "off") throw UsageError("--pow2-scale must be on or off, not '" + v + "'");
      set_pow2_scale(spec, v == "on", "--pow2-scale");
      label += " pow2-scale=" + v;
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  spec.sr.seed = uint_option(p, "seed", 0, UINT64_MAX, 0);
  if (p.flag("hadamard")) {
    spec.hadamard16 = true;
    label += " hadamard";
  }
  if (p.has("hadamard-signs")) {
    if (!spec.hadamard16) throw UsageError("--hadamard-signs needs --hadamard");
    spec.hadamard16_signs = uint16_t(uint_option(p, "hadamard-signs", 0, 0xFFFF, 0));
    label += " signs=" + std::to_string(spec.hadamard16_signs);
  }
  if (axis == Axis::Rows) label += " axis=rows";
  if (is_torchao(spec.scale_convention)) {  // a combination torchao has no counterpart for is a usage error
    try {
      hd::validate_quant_spec(spec, 0, "--scale-convention");
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  const OutPlan plan = OutPlan::resolve(p.has("output") ? p.str("output") : "");
  std::optional<fs::path> per_block;
  if (p.has("per-block")) {
    per_block = p.str("per-block");
    const auto ext = per_block->extension();
    if (ext != ".csv" && ext != ".npy") throw UsageError("--per-block " + per_block->string() + ": name a .csv or .npy file");
  }

  return Request{outfmt, spec, label, axis, all_tensors, tensor_args, plan, per_block};
}

/// The inputs' tensors as the request chooses them, from the headers only (no data read):
/// `wanted` is the named tensors (empty: every floating one, or the one there is).
std::set<std::string> select_tensors(const Request& rq, const std::vector<InputFile>& inputs) {
  const std::vector<std::string>& tensor_args = rq.tensor_args;
  const bool all_tensors = rq.all_tensors;
  // List the inputs (headers only) and choose the tensors before reading any data.
  std::vector<std::pair<std::string, io::DType>> listed;  // every tensor of every input, in order
  std::set<std::string> wanted(tensor_args.begin(), tensor_args.end());
  std::set<std::string> indexed_only;  // names an index places in shards not read (none wanted there)
  for (const auto& in : inputs) {
    if (!wanted.empty() && !in.from_index.empty() &&
        std::none_of(in.from_index.begin(), in.from_index.end(), [&](const std::string& n) { return wanted.count(n); })) {
      indexed_only.insert(in.from_index.begin(), in.from_index.end());
      continue;
    }
    if (in.npy) {
      listed.emplace_back(npy_tensor_name(in.path), io::read_npy_header(in.path).dtype);
      continue;
    }
    const io::SafetensorsFile h = io::read_safetensors_header(in.path);
    for (const auto& t : h.tensors)
      if (in.from_index.empty() || std::find(in.from_index.begin(), in.from_index.end(), t.name) != in.from_index.end())
        listed.emplace_back(t.name, t.dtype);
  }
  if (inputs.size() == 1 && inputs[0].npy && (!tensor_args.empty() || all_tensors))
    throw UsageError("--tensor and --all-tensors need a .safetensors input; " + inputs[0].path.string() +
                     " is a .npy file");
  for (const auto& name : tensor_args) {
    bool found = indexed_only.count(name) > 0;
    for (const auto& [n, d] : listed) found = found || n == name;
    if (!found) {
      std::string names;
      for (const auto& [n, d] : listed) names += (names.empty() ? "" : ", ") + n;
      const std::string where = inputs.size() == 1 ? inputs[0].path.string() : std::string("the inputs");
      throw std::runtime_error(where + ": no tensor '" + name + "' (tensors: " + (names.empty() ? "none" : names) + ")");
    }
  }
  if (wanted.empty() && !all_tensors) {
    std::vector<std::string> floats;
    for (const auto& [n, d] : listed)
      if (io::is_quantizable(d) || io::is_quantizable_after_rounding(d)) floats.push_back(n);
    if (floats.size() > 1) {
      std::string names;
      for (const auto& n : floats) names += (names.empty() ? "" : ", ") + n;
      throw UsageError(std::string(inputs.size() > 1 ? "the inputs hold " : inputs[0].path.string() + " holds ") +
                       std::to_string(floats.size()) +
                       " floating tensors; choose with --tensor NAME (repeatable) or use --all-tensors (" + names + ")");
    }
  }

  return wanted;
}

/// Every chosen tensor quantized (streamed when large) after the memory they need is checked,
/// before anything is written; `skipped` names the non-floating tensors left out.
std::vector<Result> quantize_all(const Request& rq, const std::vector<InputFile>& inputs,
                                 const std::set<std::string>& wanted, std::vector<std::string>& skipped, Notes& notes) {
  const QuantSpec& spec = rq.spec;
  const Axis axis = rq.axis;
  const std::string& label = rq.label;
  const std::optional<fs::path>& per_block = rq.per_block;
  // Every tensor from the headers (no data read yet), the memory they need
  // checked, then each quantized (streamed when large) before anything is written.
  std::vector<std::pair<const InputFile*, TensorRef>> refs;
  for_each_tensor_ref(inputs, wanted, notes, [&](const InputFile& in, const TensorRef& r) { refs.emplace_back(&in, r); });
  check_memory(refs, spec, axis, per_block.has_value());
  std::vector<Result> results;
  for (const auto& [in, ref] : refs) {
    const io::RawTensor& t = ref.header;
    const bool floating = io::is_quantizable(t.dtype) || io::is_quantizable_after_rounding(t.dtype);
    if (!floating && wanted.empty() && !in->npy) {
      skipped.push_back(t.name + " (" + io::name_of(t.dtype) + ")");
      continue;
    }
    QuantSpec s = spec;
    s.sr.stream = results.size();  // one Philox stream per tensor, in input order
    // torchao's Float8Tensor computes the scale in the dtype of the tensor it is given (BF16 / FP16 sources)
    if (s.scale_convention == ScaleConvention::Torchao || s.scale_convention == ScaleConvention::TorchaoCuda)
      s.hp_dtype = t.dtype == io::DType::BF16 ? Format::BF16 : t.dtype == io::DType::F16 ? Format::FP16 : Format::FP32;
    results.push_back(quantize_tensor(*in, ref, s, axis, label, per_block.has_value(), notes));
    if (t.dtype == io::DType::F64)
      notes.add(in->path.string() + ": tensor '" + t.name + "' is F64: " +
                (emu::f64_rounds_once(s) ? "elements rounded once from FP64 to " + std::string(short_name(s.elem)) +
                                               ", amax and scales from the values rounded to FP32 (RNE); "
                                         : std::string("rounded once to FP32 (RNE) first, as the recipe's FP32 "
                                                       "arithmetic takes it; ")) +
                std::to_string(results.back().rounded_from_f64) + " of " + std::to_string(t.numel()) +
                " values are not FP32 values; statistics compare with the FP32-rounded values");
  }
  if (results.empty()) throw std::runtime_error("no F32, F16, BF16 or F64 tensor to quantize in the input" +
                                                std::string(inputs.size() > 1 ? "s" : ""));
  if (per_block && per_block->extension() == ".npy" && results.size() > 1)
    throw UsageError("--per-block " + per_block->string() + ": a .npy holds the blocks of one tensor; " +
                     std::to_string(results.size()) + " were quantized (use a .csv file)");

  return results;
}

/// Every output registered with one AtomicOutputs and committed together; the files written.
std::vector<fs::path> write_outputs(const Request& rq, const std::vector<InputFile>& inputs, std::vector<Result>& results,
                                    Notes& notes) {
  const OutPlan& plan = rq.plan;
  const std::optional<fs::path>& per_block = rq.per_block;
  io::AtomicOutputs outputs;
  std::vector<fs::path> written;
  auto add = [&](const fs::path& f) { return add_output(outputs, f, inputs); };
  const std::string src_name = inputs.size() == 1 ? inputs[0].path.filename().string() : std::string();
  if (plan.kind == OutPlan::Safetensors) {
    std::vector<io::RawTensor> tensors;
    std::map<std::string, std::string> meta{{"format", "mxsim.quantized"},
                                            {"mxsim_version", mxsim::version()},
                                            {"mxsim_commit", mxsim::build_commit()}};
    if (!src_name.empty()) meta["source"] = src_name;
    for (auto& r : results) {
      for (size_t i = 0; i < r.outs.size(); ++i) {
        // the codes moved, not copied (they are held once); the scales copied, --per-block reads them after
        io::RawTensor o = i == 0 ? std::move(r.outs[i]) : r.outs[i];
        o.name = r.name + o.name;
        o.dtype = r.st_dtypes[i];
        o.shape = r.st_shapes[i];
        tensors.push_back(std::move(o));
      }
      json m = r.meta;
      m["source"] = r.file.filename().string();
      for (const auto& [k, v] : m.items())
        meta[r.name + "." + k] = v.is_string() ? v.get<std::string>() : v.dump();
    }
    io::write_safetensors(add(plan.path), tensors, meta, plan.path.string());
  } else if (plan.kind == OutPlan::Folder || plan.kind == OutPlan::Prefix) {
    for (const auto& r : results) {
      const fs::path stem = plan.stem_for(r.name, results.size() == 1);
      for (const auto& o : r.outs) io::write_npy(add(stem.string() + o.name + ".npy"), o);
      json j;
      j["format"] = "mxsim.quantized";
      j["mxsim_version"] = mxsim::version();
      j["mxsim_commit"] = mxsim::build_commit();
      j["source"] = r.file.filename().string();
      j["tensor"] = r.name;
      for (const auto& [k, v] : r.meta.items()) j[k] = v;
      io::write_file(add(stem.string() + ".meta.json"),
                     j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
    }
  }
  if (per_block) {
    const fs::path tmp = add_output(outputs, *per_block, inputs, "--per-block");
    if (per_block->extension() == ".csv") write_per_block_csv(tmp, results);
    else write_per_block_npy(tmp, results[0]);
  }
  outputs.commit();
  written = outputs.finals();
  if (plan.kind == OutPlan::Discard) notes.add("-o " + plan.path.string() + ": nothing written (statistics only)");

  return written;
}

/// The report: JSON, CSV or text.
void report(const Request& rq, const std::vector<InputFile>& inputs, const std::vector<Result>& results,
            const std::vector<std::string>& skipped, const std::vector<fs::path>& written, const Notes& notes) {
  const QuantSpec& spec = rq.spec;
  const std::string& label = rq.label;
  if (rq.outfmt == OutputFormat::Json) {
    json j;
    j["command"] = "quantize";
    j["recipe"] = label;
    j["spec"] = spec.describe();
    j["inputs"] = json::array();
    for (const auto& in : inputs) j["inputs"].push_back(in.path.string());
    j["outputs"] = json::array();
    for (const auto& f : written) j["outputs"].push_back(f.string());
    j["skipped"] = skipped;
    j["notes"] = notes.items;
    j["tensors"] = json::array();
    for (const auto& r : results) j["tensors"].push_back(stats_json(r));
    print_json(j);
    return;
  }
  if (rq.outfmt == OutputFormat::Csv) {
    std::printf("%s", csv_row({"tensor", "file", "shape", "dtype", "elements", "mse", "sqnr_db", "max_abs_err",
                               "underflow", "saturated", "nan_out", "nonfinite_in"})
                          .c_str());
    for (const auto& r : results) {
      const auto& s = r.stats;
      std::printf("%s", csv_row({r.name, r.file.string(), shape_x(r.src_shape), io::name_of(r.src_dtype),
                                 std::to_string(s.count), num(s.mse), num(s.sqnr_db), num(s.max_abs_err),
                                 std::to_string(s.underflow), std::to_string(s.saturated), std::to_string(s.nan_out),
                                 std::to_string(s.nonfinite_in)})
                            .c_str());
    }
    return;
  }
  std::printf("input:  ");
  for (size_t i = 0; i < inputs.size(); ++i)
    std::printf("%s%s (%s)", i ? ", " : "", inputs[i].path.string().c_str(), inputs[i].npy ? "npy" : "safetensors");
  std::printf("\nrecipe: %s  [%s]\n", label.c_str(), spec.describe().c_str());
  std::printf("output:");
  if (written.empty()) std::printf(" none (statistics only)");
  for (const auto& f : written) std::printf(" %s", f.string().c_str());
  std::printf("\n");
  if (!skipped.empty()) {
    std::printf("skipped (not F32/F16/BF16/F64):");
    for (const auto& s : skipped) std::printf(" %s", s.c_str());
    std::printf("\n");
  }
  if (results.size() == 1 && !rq.all_tensors) {
    const auto& r = results[0];
    const auto& s = r.stats;
    std::printf("tensor %s %s %s: %zu elements\n", r.name.c_str(), io::shape_str(r.src_shape).c_str(),
                io::name_of(r.src_dtype), s.count);
    std::printf("  MSE           %s\n  SQNR          %s dB\n  max abs err   %s\n", num(s.mse, "%.6e").c_str(),
                fmt_sqnr(s.sqnr_db).c_str(), num(s.max_abs_err, "%.6e").c_str());
    std::printf("  underflow     %zu\n  saturated     %zu\n  NaN out       %zu\n  non-finite in %zu\n", s.underflow,
                s.saturated, s.nan_out, s.nonfinite_in);
  } else {
    size_t w = 6;
    for (const auto& r : results) w = std::max(w, r.name.size());
    std::printf("%-*s  %-18s %-5s %12s %9s %12s %10s %10s %8s\n", int(w), "tensor", "shape", "dtype", "MSE", "SQNR_dB",
                "max_abs_err", "underflow", "saturated", "NaN_out");
    for (const auto& r : results) {
      const auto& s = r.stats;
      std::printf("%-*s  %-18s %-5s %12s %9s %12s %10zu %10zu %8zu\n", int(w), r.name.c_str(),
                  io::shape_str(r.src_shape).c_str(), io::name_of(r.src_dtype), num(s.mse, "%.4e").c_str(),
                  fmt_sqnr(s.sqnr_db).c_str(), num(s.max_abs_err, "%.4e").c_str(), s.underflow, s.saturated, s.nan_out);
    }
  }
}

int run(const Args& args) {
  po::options_description opts("options");
  add_options(opts);
  const Parsed p = parse(args, opts, "IN");
  if (p.has("help")) {
    print_help(stdout, help(), opts);
    return kExitOk;
  }
  const Request rq = parse_request(p);
  Notes notes{"quantize", {}};
  const std::vector<InputFile> inputs = expand_inputs(p.positional);
  const std::set<std::string> wanted = select_tensors(rq, inputs);
  std::vector<std::string> skipped;
  std::vector<Result> results = quantize_all(rq, inputs, wanted, skipped, notes);
  const std::vector<fs::path> written = write_outputs(rq, inputs, results, notes);
  report(rq, inputs, results, skipped, written, notes);
  return kExitOk;
}

}  // namespace

int cmd_quantize(const Args& args) { return guarded("quantize", [&] { return run(args); }); }

}  // namespace mxsim::cli
