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
#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"
#include "mxsim/quant_spec.hpp"
#include "tensor_io.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace mxsim::cli {
namespace {

/// Statistics of one block (storage coordinates), for --per-block.
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
  std::vector<BlockRow> blocks;
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

/// H x along the blocks (the values the codes of a hadamard16 spec hold),
/// in place. emu::quant_stats and emu::block_stats form H x from the source
/// themselves; this copy serves only the per-block signal power below.
void apply_hadamard(Tensor3f& x, bool down_columns) {
  const size_t G = x.shape(0), R = x.shape(1), C = x.shape(2);
  float run[16];
  for (size_t g = 0; g < G; ++g) {
    if (down_columns) {
      for (size_t c = 0; c < C; ++c)
        for (size_t r0 = 0; r0 + 16 <= R; r0 += 16) {
          for (int k = 0; k < 16; ++k) run[k] = x(g, r0 + size_t(k), c);
          emu::hadamard16_inplace(run);
          for (int k = 0; k < 16; ++k) x(g, r0 + size_t(k), c) = run[k];
        }
    } else {
      for (size_t r = 0; r < R; ++r)
        for (size_t c0 = 0; c0 + 16 <= C; c0 += 16) emu::hadamard16_inplace(&x(g, r, c0));
    }
  }
}

/// emu::block_stats plus what it leaves out (the scale value, the element
/// count and signal power, hence MSE and SQNR per block), over the same
/// elements as emu::quant_stats: finite source, non-NaN result.
std::vector<BlockRow> block_rows(const Tensor3f& x_src, const QuantizedTensor& q) {
  const std::vector<emu::BlockStat> bs = emu::block_stats(x_src, q);  // applies H itself
  // the signal in the domain of the codes and of block_stats' errors: H x for hadamard16
  Tensor3f x = x_src;
  if (q.spec.hadamard16) apply_hadamard(x, q.transposed);
  const Tensor3f d = emu::dequantize3(q);
  const size_t br = q.block_rows(), bc = q.block_cols();
  const size_t nbr = (q.srows() + br - 1) / br, nbc = (q.scols() + bc - 1) / bc;
  std::vector<BlockRow> out;
  out.reserve(bs.size());
  for (size_t g = 0; g < q.groups; ++g)
    for (size_t bi = 0; bi < nbr; ++bi)
      for (size_t bj = 0; bj < nbc; ++bj) {
        const emu::BlockStat& s = bs[(g * nbr + bi) * nbc + bj];
        double sig = 0;
        size_t cnt = 0;
        for (size_t r = bi * br; r < std::min(q.srows(), (bi + 1) * br); ++r)
          for (size_t c = bj * bc; c < std::min(q.scols(), (bj + 1) * bc); ++c) {
            const size_t lr = q.transposed ? c : r, lc = q.transposed ? r : c;
            const float xv = x(g, lr, lc), dv = d(g, lr, lc);
            if (std::isfinite(xv) && !std::isnan(dv)) {
              sig += double(xv) * double(xv);
              ++cnt;
            }
          }
        BlockRow b{g, bi, bj, 0, s.scale_exp, double(s.amax), cnt, NAN, NAN, s.saturated, s.underflow};
        b.scale = q.spec.scale_kind == ScaleKind::FP32 ? double(q.scale_inv(g, bi, bj)) : double(q.scale_bytes(g, bi, bj));
        if (cnt) {
          b.mse = s.sq_err / double(cnt);
          b.sqnr_db = s.sq_err == 0 ? INFINITY : 10.0 * std::log10(sig / s.sq_err);
        }
        out.push_back(b);
      }
  return out;
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

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

/// Fill r.outs, st_dtypes, st_shapes and meta from the tensor's codes and
/// scales (r.name, file, src_shape, src_dtype already set).
void finish(Result& r, const QuantizedTensor& q, size_t rank, Outputs&& o, const std::string& recipe) {
  const QuantSpec& spec = q.spec;
  const size_t G = q.groups, R = q.rows, C = q.cols;
  const bool grouped = rank == 3;
  auto dims = [&](size_t a, size_t b) { return grouped ? std::vector<size_t>{G, a, b} : std::vector<size_t>{a, b}; };
  const size_t dr = q.srows(), dc = q.row_bytes();
  const size_t nbr = ceil_div(q.srows(), q.block_rows()), nbc = ceil_div(q.scols(), q.block_cols());
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
  if (spec.scale_kind == ScaleKind::UE4M3) {
    r.outs.push_back(io::from_f32(".tensor_scale_inv", {1}, &o.tensor_scale_inv));
    r.st_dtypes.push_back(io::DType::F32);
    r.st_shapes.push_back({1});
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
  }
  m["hadamard"] = spec.hadamard16;
  m["shape"] = r.src_shape;
  m["logical_shape"] = {G, R, C};
  m["grouped"] = grouped;
  m["source_dtype"] = io::name_of(r.src_dtype);
  m["layout"] = layout_of(q, grouped);
  m["transposed"] = q.transposed;
  m["block"] = {q.block_rows(), q.block_cols()};
  if (spec.round == RoundMode::Stochastic) {
    m["sr_seed"] = spec.sr.seed;
    m["sr_stream"] = spec.sr.stream;
  }
}

Result quantize_one(const io::RawTensor& t, const fs::path& file, const QuantSpec& spec, Axis axis,
                    const std::string& recipe, bool per_block) {
  const std::string where = file.string() + ": tensor '" + t.name + "'";
  if (!io::is_quantizable(t.dtype) && !io::is_quantizable_after_rounding(t.dtype))
    throw std::runtime_error(where + ": dtype " + io::name_of(t.dtype) +
                             " cannot be quantized (input dtypes: F32, F16, BF16; F64 after rounding to F32)");
  const size_t rank = t.shape.size();
  if (rank == 0 || rank > 3)
    throw std::runtime_error(where + ": shape " + t.shape_str() + " is " + std::to_string(rank) +
                             "-D; quantize takes 1-D (one row), 2-D [rows, cols] or 3-D [groups, rows, cols]");
  if (t.numel() == 0) throw std::runtime_error(where + ": shape " + t.shape_str() + " is empty");
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
  if (per_block) r.blocks = block_rows(x, q);
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

/// Whether `quantize` streams tensor h (a .npy header) in slices of whole
/// block rows: F32 / F16 / BF16, 1-D..3-D, rowwise 1-D blocks, 2-D tiles or
/// per-tensor scaling, no --per-block, and more source bytes than one slice
/// reads (chunk_bytes(); smaller tensors are read whole). Columnwise
/// blocks (--axis rows) run down whole columns, F64 goes through
/// quantize_f64's whole-tensor re-encoding: those are held whole.
bool streams(const io::RawTensor& h, const QuantSpec& spec, Axis axis, bool per_block) {
  if (per_block || !io::is_quantizable(h.dtype)) return false;
  if (h.shape.empty() || h.shape.size() > 3 || h.numel() == 0) return false;
  if (!spec.is_2d_tile() && !spec.per_tensor() && axis == Axis::Rows) return false;
  return io::byte_count(h.dtype, h.numel()) > chunk_bytes();
}

/// Bytes the outputs of a [G, R, C] tensor take (codes + scales).
uint64_t output_bytes(const QuantizedTensor& q) {
  const uint64_t nb = uint64_t(q.groups) * ceil_div(q.srows(), q.block_rows()) * ceil_div(q.scols(), q.block_cols());
  return uint64_t(q.groups) * q.srows() * q.row_bytes() + nb * (q.spec.scale_kind == ScaleKind::FP32 ? 4 : 1);
}

/// Bytes streaming h holds: the outputs, one slice's source bytes and its
/// per-element working set (kQuantizeBytesPerElement, below), and the
/// statistics' tree-sum partials (two FP64 per 256 elements, with room for their vectors to grow).
uint64_t stream_bytes(const io::RawTensor& h, const QuantSpec& spec, Axis axis);

/// quantize_one of a .npy tensor streamed from its file in slices of whole
/// block rows (emu::row_slices): a first pass folds the whole-tensor amax the
/// spec needs (per-tensor scales: each group's; NVFP4: the global one), a
/// second quantizes each slice with emu::quantize_slice, its first logical
/// index as spec.sr_index_base (so SR draws the words of the whole tensor),
/// copies codes and scales into place and feeds QuantStatsAccumulator in flat
/// order: the same bits as the unsliced path.
Result quantize_streamed(const InputFile& in, const io::RawTensor& h, const QuantSpec& spec, Axis axis,
                         const std::string& recipe) {
  const std::string where = in.path.string() + ": tensor '" + h.name + "'";
  // Named copies, not a structured binding: the lambdas below use C, and
  // Clang 15 (the sanitizer build) cannot capture structured bindings.
  const auto gRC = logical_gRC(h.shape);
  const size_t G = gRC[0], R = gRC[1], C = gRC[2];
  const uint64_t esize = io::byte_count(h.dtype, 1);
  const uint64_t data_bytes = io::byte_count(h.dtype, h.numel());
  // read_npy_header checked that the data end the file: they start file_size - data_bytes in.
  const uint64_t data_off = fs::file_size(in.path) - data_bytes;
  const std::vector<emu::RowSlice> slices = emu::row_slices(G, R, C, spec, std::max<uint64_t>(1, chunk_bytes() / esize));
  std::ifstream f(in.path, std::ios::binary);
  if (!f) throw std::runtime_error(in.path.string() + ": cannot open");
  io::RawTensor chunk{h.name, h.dtype, {}, {}};
  Tensor3f x;
  auto read = [&](const emu::RowSlice& sl) {
    const uint64_t n = sl.rows * C;
    chunk.shape = {size_t(n)};
    chunk.bytes.resize(size_t(n * esize));
    f.seekg(std::streamoff(data_off + sl.index_base * esize));
    if (!f.read(reinterpret_cast<char*>(chunk.bytes.data()), std::streamsize(chunk.bytes.size())))
      throw std::runtime_error(where + ": read failed at element " + std::to_string(sl.index_base));
    const std::vector<float> v = io::to_f32(chunk);
    x = Tensor3f::from_shape({1, size_t(sl.rows), C});
    std::copy(v.begin(), v.end(), x.begin());
  };

  QuantizedTensor shape_q;
  shape_q.spec = spec;
  shape_q.groups = G;
  shape_q.rows = R;
  shape_q.cols = C;
  std::vector<uint32_t> group_amax(G, 0);
  uint32_t tensor_amax = 0;
  const bool ue4m3 = spec.scale_kind == ScaleKind::UE4M3;
  try {
    if (spec.per_tensor() || ue4m3)  // pass 1: the whole-tensor amaxes
      for (const auto& sl : slices) {
        read(sl);
        if (spec.per_tensor()) group_amax[sl.group] = emu::amax_bits(x, spec, true, group_amax[sl.group]);
        if (ue4m3) tensor_amax = emu::amax_bits(x, spec, false, tensor_amax);
      }
    Outputs o;
    o.data.assign(size_t(uint64_t(G) * R * shape_q.row_bytes()), 0);
    const size_t nbr = ceil_div(R, shape_q.block_rows()), nbc = ceil_div(C, shape_q.block_cols());
    if (spec.scale_kind == ScaleKind::FP32) o.scale_inv.assign(G * nbr * nbc, 0.0f);
    else o.scale.assign(G * nbr * nbc, 0);
    emu::QuantStatsAccumulator acc;
    for (const auto& sl : slices) {  // pass 2: quantize slice by slice
      read(sl);
      QuantSpec s = spec;
      s.sr_index_base = spec.sr_index_base + sl.index_base;
      emu::SliceAmax a;
      if (spec.per_tensor()) a.group_amax_bits = group_amax[sl.group];
      if (ue4m3) a.tensor_amax_bits = tensor_amax;
      const QuantizedTensor q = emu::quantize_slice(x, s, axis, a);
      acc.add(x, q);
      std::copy(q.data.begin(), q.data.end(), o.data.begin() + std::ptrdiff_t(sl.row0 * q.row_bytes()));
      const uint64_t srow = uint64_t(sl.group) * nbr + (sl.row0 - uint64_t(sl.group) * R) / shape_q.block_rows();
      if (spec.scale_kind == ScaleKind::FP32)
        std::copy(q.scale_inv.begin(), q.scale_inv.end(), o.scale_inv.begin() + std::ptrdiff_t(srow * nbc));
      else
        std::copy(q.scale_bytes.begin(), q.scale_bytes.end(), o.scale.begin() + std::ptrdiff_t(srow * nbc));
      o.tensor_scale_inv = q.tensor_scale_inv;
    }
    Result r;
    r.name = h.name;
    r.file = in.path;
    r.src_shape = h.shape;
    r.src_dtype = h.dtype;
    r.stats = acc.result();
    shape_q.tensor_scale_inv = o.tensor_scale_inv;
    finish(r, shape_q, h.shape.size(), std::move(o), recipe);
    return r;
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(where + " (shape " + h.shape_str() + "): recipe " + recipe + " cannot take it: " + e.what());
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(where + ": needs " + bytes_str(stream_bytes(h, spec, axis)) +
                             " of memory to quantize streamed, and an allocation failed (out of memory)");
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
         {"nonfinite_in", s.nonfinite_in}};
  if (r.src_dtype == io::DType::F64) j["rounded_from_f64"] = r.rounded_from_f64;
  return j;
}

/// --per-block FILE: CSV with a tensor column, or (one tensor) a 2-D F64 .npy.
constexpr const char* kBlockColumns[] = {"group", "block_row", "block_col", "scale", "scale_exp", "amax",
                                         "count", "mse", "sqnr_db", "saturated", "underflow"};
std::string per_block_csv(const std::vector<Result>& results) {
  std::vector<std::string> head{"tensor"};
  for (const char* c : kBlockColumns) head.push_back(c);
  std::string s = csv_row(head);
  for (const auto& r : results)
    for (const auto& b : r.blocks)
      s += csv_row({r.name, std::to_string(b.group), std::to_string(b.block_row), std::to_string(b.block_col),
                    num(b.scale), b.scale_exp == INT_MIN ? "nan" : std::to_string(b.scale_exp), num(b.amax),
                    std::to_string(b.count), num(b.mse), num(b.sqnr_db), std::to_string(b.saturated),
                    std::to_string(b.underflow)});
  return s;
}
io::RawTensor per_block_npy(const Result& r) {
  std::vector<double> v;
  for (const auto& b : r.blocks)
    for (double x : {double(b.group), double(b.block_row), double(b.block_col), b.scale,
                     b.scale_exp == INT_MIN ? double(NAN) : double(b.scale_exp), b.amax, double(b.count), b.mse,
                     b.sqnr_db, double(b.saturated), double(b.underflow)})
      v.push_back(x);
  io::RawTensor t{r.name, io::DType::F64, {r.blocks.size(), std::size(kBlockColumns)}, {}};
  t.bytes.resize(v.size() * 8);
  if (!v.empty()) std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
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
      "      F8_E4M3, F8_E5M2, F8_E8M0 where they exist, else U8 / F32);\n"
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

/// Bytes per element that quantizing one tensor holds beside the input file's
/// data: its FP32 values twice (the converted copy and the [G, R, C] tensor),
/// the dequantized values of the statistics, the codes (at most one byte) and
/// the scales (at most 4 bytes per element in the finest FP32 recipe, usually
/// far less): an upper estimate of quantize_one's peak.
constexpr uint64_t kQuantizeBytesPerElement = 17;

uint64_t stream_bytes(const io::RawTensor& h, const QuantSpec& spec, Axis axis) {
  const auto [G, R, C] = logical_gRC(h.shape);
  QuantizedTensor q;
  q.spec = spec;
  q.groups = G;
  q.rows = R;
  q.cols = C;
  q.transposed = !spec.is_2d_tile() && !spec.per_tensor() && axis == Axis::Rows;
  const uint64_t esize = io::byte_count(h.dtype, 1);
  const uint64_t unit = spec.is_2d_tile() && spec.block_rows > 0 ? uint64_t(spec.block_rows) : 1;
  const uint64_t slice = std::max(std::max<uint64_t>(1, chunk_bytes() / esize / C / unit) * unit, unit) * C;
  return output_bytes(q) + slice * (esize + kQuantizeBytesPerElement) + (uint64_t(h.numel()) / 256 + 1) * 64;
}

/// Refuses, before any data is read, an input whose quantization would not fit
/// in memory. A streamed .npy tensor (streams()) holds its outputs, one slice
/// and its working set (stream_bytes); any other input file is held whole, so
/// its data plus the per-element working set of its largest floating tensor
/// must fit under memory_limit(). Without this check a large tensor ends in
/// std::bad_alloc or the kernel's OOM killer.
void check_memory(const std::vector<InputFile>& inputs, const std::set<std::string>& wanted, const QuantSpec& spec,
                  Axis axis, bool per_block) {
  std::string source;
  const uint64_t limit = memory_limit(source);
  for (const auto& in : inputs) {
    if (!wanted.empty() && !in.from_index.empty() &&
        std::none_of(in.from_index.begin(), in.from_index.end(), [&](const std::string& n) { return wanted.count(n); }))
      continue;  // a shard holding no wanted tensor is not read
    std::vector<io::RawTensor> ts;
    uint64_t data_bytes = 0;
    if (in.npy) {
      if (!wanted.empty() && !wanted.count(npy_tensor_name(in.path))) continue;
      ts.push_back(io::read_npy_header(in.path));
      data_bytes = io::byte_count(ts[0].dtype, ts[0].numel());
      if (streams(ts[0], spec, axis, per_block)) {
        const uint64_t need = stream_bytes(ts[0], spec, axis);
        if (need <= limit) continue;
        const io::RawTensor& t = ts[0];
        throw std::runtime_error(in.path.string() + ": tensor '" + t.name + "' " + t.shape_str() + " " +
                                 io::name_of(t.dtype) + " (" + std::to_string(t.numel()) + " elements) needs " +
                                 bytes_str(need) + " of memory to quantize streamed (its codes and scales, held "
                                 "until written, and one slice of " + bytes_str(chunk_bytes()) +
                                 " of source with its working set), above the limit of " + bytes_str(limit) + " (" +
                                 source + "); split the tensor into several files, or raise MXSIM_MEMORY_LIMIT");
      }
    } else {
      io::SafetensorsFile h = io::read_safetensors_header(in.path);
      data_bytes = fs::file_size(in.path);
      ts = std::move(h.tensors);
    }
    const io::RawTensor* big = nullptr;
    for (const auto& t : ts)
      if ((io::is_quantizable(t.dtype) || io::is_quantizable_after_rounding(t.dtype)) &&
          (wanted.empty() || wanted.count(t.name)) && (!big || t.numel() > big->numel()))
        big = &t;
    if (!big) continue;
    const uint64_t n = big->numel();
    const uint64_t work = n > (UINT64_MAX - data_bytes) / kQuantizeBytesPerElement ? UINT64_MAX
                                                                                    : data_bytes + n * kQuantizeBytesPerElement;
    if (work <= limit) continue;
    throw std::runtime_error(in.path.string() + ": tensor '" + big->name + "' " + big->shape_str() + " " +
                             io::name_of(big->dtype) + " (" + std::to_string(n) + " elements) needs about " +
                             bytes_str(work) + " of memory to quantize (the file's " + bytes_str(data_bytes) +
                             " of data, then " + std::to_string(kQuantizeBytesPerElement) +
                             " bytes per element), above the limit of " + bytes_str(limit) + " (" + source +
                             "); mxsim quantize holds this input whole: it streams only .npy tensors of F32, F16 or "
                             "BF16 with rowwise blocks, 2-D tiles or per-tensor scales and no --per-block (it does "
                             "not stream .safetensors inputs, columnwise --axis rows or F64): split the tensor (e.g. "
                             "by rows) into several files, or raise MXSIM_MEMORY_LIMIT");
  }
}

int run(const Args& args) {
  po::options_description opts("options");
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
      ("seed", po::value<std::string>(), "Philox seed for --round sr, 0 to 2^64-1 (default 0)")        //
      ("hadamard", po::bool_switch(), "apply the 16-point Hadamard transform along the blocks first")  //
      ("tensor", po::value<std::vector<std::string>>(), "safetensors input: a tensor to quantize (repeatable)")  //
      ("all-tensors", po::bool_switch(), "quantize every F32/F16/BF16/F64 tensor of the inputs")        //
      ("per-block", po::value<std::string>(), "write per-block statistics to FILE.csv or FILE.npy");
  add_format_options(opts, true, "the statistics");
  const Parsed p = parse(args, opts, "IN");
  if (p.has("help")) {
    print_help(stdout, help(), opts);
    return kExitOk;
  }
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

  const std::string recipe = p.str("recipe");
  QuantSpec spec;
  try {
    spec = tensor_recipe(recipe);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
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
      const bool fp8 = f == Format::E4M3 || f == Format::E5M2 || f == Format::E4M3FNUZ || f == Format::E5M2FNUZ;
      const bool mx = fp8 || f == Format::E2M1 || f == Format::E2M3 || f == Format::E3M2;
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
  if (axis == Axis::Rows) label += " axis=rows";
  const OutPlan plan = OutPlan::resolve(p.has("output") ? p.str("output") : "");
  std::optional<fs::path> per_block;
  if (p.has("per-block")) {
    per_block = p.str("per-block");
    const auto ext = per_block->extension();
    if (ext != ".csv" && ext != ".npy") throw UsageError("--per-block " + per_block->string() + ": name a .csv or .npy file");
  }

  // List the inputs (headers only) and choose the tensors before reading any data.
  Notes notes{"quantize", {}};
  const std::vector<InputFile> inputs = expand_inputs(p.positional);
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
  check_memory(inputs, wanted, spec, axis, per_block.has_value());
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

  // Quantize everything before writing anything, one input file in memory at a time.
  std::vector<Result> results;
  std::vector<std::string> skipped;
  for_each_tensor(inputs, wanted, notes, [&](const InputFile& in, io::RawTensor&& t) {
    const bool floating = io::is_quantizable(t.dtype) || io::is_quantizable_after_rounding(t.dtype);
    if (!floating && wanted.empty() && !in.npy) {
      skipped.push_back(t.name + " (" + io::name_of(t.dtype) + ")");
      return;
    }
    QuantSpec s = spec;
    s.sr.stream = results.size();  // one Philox stream per tensor, in input order
    results.push_back(quantize_one(t, in.path, s, axis, label, per_block.has_value()));
    if (t.dtype == io::DType::F64)
      notes.add(in.path.string() + ": tensor '" + t.name + "' is F64: " +
                (emu::f64_rounds_once(s) ? "elements rounded once from FP64 to " + std::string(short_name(s.elem)) +
                                               ", amax and scales from the values rounded to FP32 (RNE); "
                                         : std::string("rounded once to FP32 (RNE) first, as the recipe's FP32 "
                                                       "arithmetic takes it; ")) +
                std::to_string(results.back().rounded_from_f64) + " of " + std::to_string(t.numel()) +
                " values are not FP32 values; statistics compare with the FP32-rounded values");
  }, [&](const InputFile& in) {
    const io::RawTensor h = io::read_npy_header(in.path);
    if (!streams(h, spec, axis, per_block.has_value())) return false;
    QuantSpec s = spec;
    s.sr.stream = results.size();
    results.push_back(quantize_streamed(in, h, s, axis, label));
    const auto [G, R, C] = logical_gRC(h.shape);
    notes.add(in.path.string() + ": tensor '" + h.name + "' streamed in " +
              std::to_string(emu::row_slices(G, R, C, s, std::max<uint64_t>(1, chunk_bytes() / io::byte_count(h.dtype, 1))).size()) +
              " slices of whole block rows" + (s.per_tensor() || s.scale_kind == ScaleKind::UE4M3 ? " (two passes: amax, then quantize)" : ""));
    return true;
  });
  if (results.empty()) throw std::runtime_error("no F32, F16, BF16 or F64 tensor to quantize in the input" +
                                                std::string(inputs.size() > 1 ? "s" : ""));
  if (per_block && per_block->extension() == ".npy" && results.size() > 1)
    throw UsageError("--per-block " + per_block->string() + ": a .npy holds the blocks of one tensor; " +
                     std::to_string(results.size()) + " were quantized (use a .csv file)");

  // Write: every output registered with one AtomicOutputs, committed together.
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
        io::RawTensor o = r.outs[i];
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
    io::write_safetensors(add(plan.path), tensors, meta);
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
    if (per_block->extension() == ".csv") io::write_file(add(*per_block), per_block_csv(results));
    else io::write_npy(add(*per_block), per_block_npy(results[0]));
  }
  outputs.commit();
  written = outputs.finals();
  if (plan.kind == OutPlan::Discard) notes.add("-o " + plan.path.string() + ": nothing written (statistics only)");

  // Report.
  if (outfmt == OutputFormat::Json) {
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
    return kExitOk;
  }
  if (outfmt == OutputFormat::Csv) {
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
    return kExitOk;
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
  if (results.size() == 1 && !all_tensors) {
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
  return kExitOk;
}

}  // namespace

int cmd_quantize(const Args& args) { return guarded("quantize", [&] { return run(args); }); }

}  // namespace mxsim::cli
