// verify_backends: every Backend op on two backends, results compared bit for
// bit (verify.hpp). Only the abstract Backend interface is used here.
#include "mxsim/verify.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim {
namespace {

using Op = Backend::Op;

// ------------------------------------------------------------ random numbers
// splitmix64 with integer-only draws: the same seed gives the same inputs on
// every platform and standard library (std:: distributions do not promise that).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
  int64_t range(int64_t lo, int64_t hi) { return lo + int64_t(below(uint64_t(hi - lo + 1))); }
  bool chance(int pct) { return int(below(100)) < pct; }
  bool coin() { return next() & 1; }
  /// Uniform in [0, 1) on a 2^-24 grid.
  float unit() { return float(next() >> 40) * 0x1p-24f; }
};

/// A finite value of binade e with random sign and fraction bits.
float finite_value(Rng& r, int e) {
  const float m = f32_from_bits(0x3F800000u | (uint32_t(r.next()) & 0x7FFFFFu));
  const float v = std::ldexp(m, e);
  return r.coin() ? -v : v;
}

/// Values that break implementations: signed zeros, NaNs with payloads and
/// signs, infinities, subnormals, FP32's largest values, midpoints of coarse
/// grids (ties of every narrow format), exact powers of two (block maxima at
/// a scale boundary).
float special_value(Rng& r, int e) {
  switch (r.below(10)) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return f32_from_bits(0x7FC00000u | uint32_t(r.below(0x400000)));
    case 3: return f32_from_bits(0xFFC00000u);
    case 4: return r.coin() ? INFINITY : -INFINITY;
    case 5: return f32_from_bits(uint32_t(1 + r.below(0x7FFFFF)) | (r.coin() ? 0x80000000u : 0u));
    case 6: return r.coin() ? FLT_MAX : -3.0e38f;
    case 7: return std::ldexp(float(2 * r.below(8) + 1), e - 2) * (r.coin() ? 1.0f : -1.0f);
    case 8: return std::ldexp(1.0f, e);
    default: return std::ldexp(float(2 * r.below(64) + 1), e - 6);  // ties of 4- to 7-bit grids
  }
}

/// n values in rows of row_len: each row has its own binade in [-spread,
/// spread] (rows of very different magnitude), some rows are all zero or one
/// repeated value (exact ties, zero blocks), and special_pct percent of the
/// elements are special values.
std::vector<float> values(Rng& r, size_t n, size_t row_len, int spread, int special_pct) {
  std::vector<float> v(n);
  row_len = std::max<size_t>(1, row_len);
  for (size_t i0 = 0; i0 < n; i0 += row_len) {
    const int rs = int(r.range(-spread, spread));
    const int row_kind = int(r.below(20));  // 0: zeros, 1: one repeated value, else random
    const float same = finite_value(r, rs);
    for (size_t i = i0; i < std::min(n, i0 + row_len); ++i) {
      float x = row_kind == 0 ? 0.0f : row_kind == 1 ? same : finite_value(r, rs - int(r.below(5)));
      if (r.chance(special_pct)) x = special_value(r, rs);
      v[i] = x;
    }
  }
  return v;
}
/// Finite values of moderate size (|x| < 2^e), no specials.
std::vector<float> plain(Rng& r, size_t n, int e) {
  std::vector<float> v(n);
  for (float& x : v) x = finite_value(r, e - 1 - int(r.below(6)));
  return v;
}
/// BF16-representable copies (the BF16 GEMM operands' contract).
std::vector<float> to_bf16(std::vector<float> v) {
  for (float& x : v) x = round_bf16(x);
  return v;
}

// ------------------------------------------------------------ results
enum class Kind : uint8_t { F32, F64, U8, I32, U32, I64, U64, BF16 };
size_t kind_size(Kind k) {
  switch (k) {
    case Kind::U8: return 1;
    case Kind::BF16: return 2;
    case Kind::F32: case Kind::I32: case Kind::U32: return 4;
    default: return 8;
  }
}
/// One output of an op as raw bytes.
struct Part {
  Kind kind;
  std::vector<uint8_t> bytes;
  size_t count() const { return bytes.size() / kind_size(kind); }
};
using Result = std::vector<Part>;

template <class T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, float>) return Kind::F32;
  else if constexpr (std::is_same_v<T, double>) return Kind::F64;
  else if constexpr (std::is_same_v<T, uint8_t>) return Kind::U8;
  else if constexpr (std::is_same_v<T, int32_t>) return Kind::I32;
  else if constexpr (std::is_same_v<T, uint32_t>) return Kind::U32;
  else if constexpr (std::is_same_v<T, int64_t>) return Kind::I64;
  else return Kind::U64;
}
template <class T>
Part part(const T* p, size_t n) {
  Part r{kind_of<T>(), std::vector<uint8_t>(n * sizeof(T))};
  if (n) std::memcpy(r.bytes.data(), p, n * sizeof(T));
  return r;
}
template <class T>
Part part(const std::vector<T>& v) { return part(v.data(), v.size()); }
template <class T>
Part scalar(T v) { return part(&v, 1); }

Kind kind_of(DType t) {
  switch (t) {
    case DType::f32: return Kind::F32;
    case DType::u8: return Kind::U8;
    case DType::i32: return Kind::I32;
    case DType::u32: return Kind::U32;
    case DType::i64: return Kind::I64;
    case DType::bf16: return Kind::BF16;
  }
  return Kind::U8;
}

/// Bits of element i as an unsigned key whose order is the numeric order
/// (floats: every bit pattern, -0 just below +0; signed integers biased), so
/// that |key(a) - key(b)| is the ULP / integer distance.
uint64_t ordered_key(const Part& p, size_t i) {
  const uint8_t* b = p.bytes.data() + i * kind_size(p.kind);
  switch (p.kind) {
    case Kind::U8: return b[0];
    case Kind::BF16: {  // the top half of an FP32: the same order
      uint16_t u;
      std::memcpy(&u, b, 2);
      return (u & 0x8000u) ? uint64_t(uint16_t(~u)) : uint64_t(u | 0x8000u);
    }
    case Kind::F32: {
      uint32_t u;
      std::memcpy(&u, b, 4);
      return (u & 0x80000000u) ? uint64_t(~u) : uint64_t(u | 0x80000000u);
    }
    case Kind::I32: {
      uint32_t u;
      std::memcpy(&u, b, 4);
      return uint64_t(u ^ 0x80000000u);
    }
    case Kind::U32: {
      uint32_t u;
      std::memcpy(&u, b, 4);
      return u;
    }
    case Kind::F64: {
      uint64_t u;
      std::memcpy(&u, b, 8);
      return (u >> 63) ? ~u : (u | (uint64_t(1) << 63));
    }
    case Kind::I64: {
      uint64_t u;
      std::memcpy(&u, b, 8);
      return u ^ (uint64_t(1) << 63);
    }
    case Kind::U64: {
      uint64_t u;
      std::memcpy(&u, b, 8);
      return u;
    }
  }
  return 0;
}

void note_mismatch(VerifyRow& row, int64_t index, uint64_t dist) {
  ++row.mismatches;
  row.max_ulp = std::max(row.max_ulp, dist);
  if (row.first_mismatch < 0) row.first_mismatch = index;
}

/// Element-wise bit comparison of two results of the same op.
void compare(const Result& a, const Result& b, VerifyRow& row) {
  int64_t offset = 0;
  for (size_t pi = 0; pi < std::max(a.size(), b.size()); ++pi) {
    if (pi >= a.size() || pi >= b.size()) {
      row.note = "the backends returned different numbers of outputs";
      note_mismatch(row, offset, 0);
      return;
    }
    const Part& x = a[pi];
    const Part& y = b[pi];
    const size_t n = std::max(x.count(), y.count());
    row.compared += n;
    if (x.kind != y.kind || x.bytes.size() != y.bytes.size()) {
      // A size difference (a quantized layout of another shape): every element counts.
      row.note = "output " + std::to_string(pi) + " has " + std::to_string(x.count()) + " elements on the reference, " +
                 std::to_string(y.count()) + " on the candidate";
      for (size_t i = 0; i < n; ++i) note_mismatch(row, offset + int64_t(i), 0);
      offset += int64_t(n);
      continue;
    }
    const size_t es = kind_size(x.kind);
    for (size_t i = 0; i < n; ++i) {
      if (std::memcmp(x.bytes.data() + i * es, y.bytes.data() + i * es, es) == 0) continue;
      const uint64_t ka = ordered_key(x, i), kb = ordered_key(y, i);
      note_mismatch(row, offset + int64_t(i), ka > kb ? ka - kb : kb - ka);
    }
    offset += int64_t(n);
  }
}

// ------------------------------------------------------------ backend helpers
template <class T>
Tensor put(Backend& be, Shape s, const std::vector<T>& v) {
  Tensor t = be.alloc(dtype_of<T>(), s);
  uint8_t dummy = 0;
  be.upload(t, v.empty() ? static_cast<const void*>(&dummy) : v.data(), v.size() * sizeof(T));
  return t;
}
/// An output tensor prefilled with 0xFF bytes (NaN for f32): an element the
/// op leaves unwritten cannot agree with a backend that writes it.
Tensor poisoned(Backend& be, DType d, Shape s) {
  Tensor t = be.alloc(d, s);
  std::vector<uint8_t> ff(t.bytes(), 0xFF);
  uint8_t dummy = 0;
  be.upload(t, ff.empty() ? static_cast<const void*>(&dummy) : ff.data(), ff.size());
  return t;
}
Part get(Backend& be, const Tensor& t) {
  Part p{kind_of(t.dtype()), std::vector<uint8_t>(t.bytes())};
  uint8_t dummy = 0;
  be.download(t, p.bytes.empty() ? static_cast<void*>(&dummy) : p.bytes.data(), p.bytes.size());
  return p;
}

/// A quantized tensor's stored bytes: codes, scales (E8M0 / UE4M3 bytes or
/// FP32 scale_inv bits), tensor_scale_inv, then its layout fields. The
/// transposed flag of an empty tensor carries nothing (emu marks every empty
/// wgrad group transposed) and is left out.
void add_quantized(Result& r, const QuantizedTensor& q) {
  r.push_back(part(q.data.data(), q.data.size()));
  if (q.spec.scale_kind == ScaleKind::FP32) r.push_back(part(q.scale_inv.data(), q.scale_inv.size()));
  else r.push_back(part(q.scale_bytes.data(), q.scale_bytes.size()));
  r.push_back(scalar(q.tensor_scale_inv));
  const bool empty = q.groups * q.rows * q.cols == 0;
  const QuantSpec& s = q.spec;
  r.push_back(part(std::vector<int64_t>{int64_t(q.groups), int64_t(q.rows), int64_t(q.cols),
                                        empty ? 0 : int64_t(q.transposed), int64_t(s.elem), s.block_rows, s.block_cols,
                                        int64_t(s.scale_kind), int64_t(s.rule), int64_t(s.round), int64_t(s.hadamard16),
                                        int64_t(s.pow2_scale), int64_t(f32_bits(s.amax_epsilon)),
                                        int64_t(f32_bits(s.fixed_scale)), int64_t(s.sr.seed), int64_t(s.sr.stream),
                                        int64_t(s.sr_index_base)}));
}

std::string dims(std::initializer_list<size_t> d) {
  std::string s = "[";
  size_t i = 0;
  for (size_t v : d) s += (i++ ? ", " : "") + std::to_string(v);
  return s + "]";
}
Shape shape_of(const std::vector<size_t>& d) {
  if (d.size() == 1) return Shape{d[0]};
  if (d.size() == 2) return Shape{d[0], d[1]};
  return Shape{d[0], d[1], d[2]};
}
/// A random shape of rank 1 to 3 with at most about max_elems elements.
std::vector<size_t> random_dims(Rng& r, size_t max_elems, bool allow_empty) {
  const int rank = int(r.range(1, 3));
  std::vector<size_t> d(static_cast<size_t>(rank));
  size_t left = max_elems;
  for (int i = 0; i < rank; ++i) {
    const size_t cap = std::max<size_t>(1, i == rank - 1 ? left : std::min<size_t>(left, 12));
    d[size_t(i)] = size_t(r.range(allow_empty ? 0 : 1, int64_t(cap)));
    left = std::max<size_t>(1, left / std::max<size_t>(1, d[size_t(i)]));
  }
  return d;
}
size_t numel(const std::vector<size_t>& d) {
  size_t n = 1;
  for (size_t v : d) n *= v;
  return n;
}
std::string dims_str(const std::vector<size_t>& d) { return shape_of(d).str(); }

std::vector<int64_t> random_splits(Rng& r, size_t G, int64_t max_m, int64_t multiple = 1) {
  std::vector<int64_t> ms(G);
  for (auto& m : ms) m = r.chance(25) ? 0 : multiple * r.range(1, std::max<int64_t>(1, max_m / multiple));
  return ms;
}
size_t total(const std::vector<int64_t>& ms) {
  size_t t = 0;
  for (int64_t m : ms) t += size_t(m);
  return t;
}
std::string splits_str(const std::vector<int64_t>& ms) {
  std::string s = "m_splits {";
  for (size_t i = 0; i < ms.size(); ++i) s += (i ? "," : "") + std::to_string(ms[i]);
  return s + "}";
}

/// Per case: specials and magnitude spread cycle so that a few cases cover
/// plain data, rare specials and dense specials.
int special_pct(int k) {
  static constexpr int pct[] = {0, 3, 10, 1};
  return pct[k % 4];
}
int spread_of(int k) {
  static constexpr int spread[] = {3, 20, 40};
  return spread[k % 3];
}
/// One of a few listed values.
template <class T, size_t N>
T pick(Rng& r, const T (&v)[N]) {
  return v[r.below(N)];
}

// ------------------------------------------------------------ the run of one case
struct Ctx {
  Backend& ref;
  Backend& cand;
  std::vector<VerifyRow>& rows;
};
using Runner = std::function<Result(Backend&)>;

void run_case(Ctx& c, Op op, std::string shape, std::string recipe, const Runner& fn) {
  VerifyRow row;
  row.op = verify_op_name(op);
  row.shape = std::move(shape);
  row.recipe = std::move(recipe);
  Result ra, rb;
  std::string ea, eb;
  bool fa = false, fb = false;
  try {
    ra = fn(c.ref);
  } catch (const std::exception& e) {
    fa = true;
    ea = e.what();
  } catch (...) {
    fa = true;
    ea = "unknown exception";
  }
  try {
    rb = fn(c.cand);
  } catch (const std::exception& e) {
    fb = true;
    eb = e.what();
  } catch (...) {
    fb = true;
    eb = "unknown exception";
  }
  if (fa && fb) {
    row.note = "both refused the input: " + ea;  // an invalid input, not a disagreement
  } else if (fa || fb) {
    row.mismatches = 1;
    row.first_mismatch = 0;
    row.note = (fa ? "reference (" + c.ref.name() + ") threw: " + ea : "candidate (" + c.cand.name() + ") threw: " + eb);
  } else {
    compare(ra, rb, row);
  }
  c.rows.push_back(std::move(row));
}

// ------------------------------------------------------------ specs
struct NamedSpec {
  std::string name;
  QuantSpec spec;
};
QuantSpec with_rule(QuantSpec s, ScaleRule r) {
  s.rule = r;
  return s;
}
/// The simulator's operand specs (core/src/sim_recipe.cpp) and the contract's
/// variants: every E8M0 rule for E2M1 / E4M3 / E5M2 1x32, 32x32 tiles, RZ,
/// stochastic rounding with a Philox stream and sr_index_base, Hadamard16,
/// FP8 current (amax_epsilon 1e-12; per group and over the whole tensor), delayed (fixed_scale), 1x128 and
/// 128x128 (amax_epsilon 1e-4, general and power-of-two scales), per row,
/// NVFP4 1x16 and 16x16, NVFP4 with the random Hadamard transform (RNE and SR).
std::vector<NamedSpec> quantize_specs(Rng& r) {
  std::vector<NamedSpec> v;
  const std::pair<const char*, const char*> mx[] = {{"mxfp4", "mxfp4"}, {"mxfp8", "mxfp8"}, {"mxfp8_e5m2", "mxfp8_e5m2"}};
  for (const auto& [label, name] : mx)
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even, ScaleRule::Ceil})
      v.push_back({std::string(label) + "/" + name_of(rule), with_rule(named_spec(name), rule)});
  v.push_back({"mxfp4_2d/even", with_rule(named_spec("mxfp4_2d"), ScaleRule::Even)});
  v.push_back({"mxfp8_2d/even", with_rule(named_spec("mxfp8_2d"), ScaleRule::Even)});
  v.push_back({"mxfp8_2d/rceil", named_spec("mxfp8_2d")});
  QuantSpec rz = named_spec("mxfp4");
  rz.round = RoundMode::RZ;
  v.push_back({"mxfp4/even rz", rz});
  QuantSpec sr = named_spec("mxfp4");
  sr.round = RoundMode::Stochastic;
  sr.sr = PhiloxStream{r.next(), make_stream(uint32_t(r.below(64)), uint32_t(r.below(1000)))};
  sr.sr_index_base = r.below(1000);
  v.push_back({"mxfp4/even sr", sr});
  QuantSpec h = named_spec("mxfp4");
  h.hadamard16 = true;
  v.push_back({"mxfp4/even+h16", h});
  QuantSpec hsr = sr;
  hsr.hadamard16 = true;
  v.push_back({"mxfp4/even+h16 sr", hsr});
  QuantSpec f = named_spec("fp8_tensor");
  f.amax_epsilon = 1e-12f;
  v.push_back({"fp8_current e4m3", f});
  QuantSpec fw = f;
  fw.whole_tensor_scale = true;  // the simulator's fp8_current: one scale over every group and row slice
  v.push_back({"fp8_current e4m3 whole tensor", fw});
  QuantSpec b = named_spec("fp8_tensor_e5m2");
  b.amax_epsilon = 1e-12f;
  v.push_back({"fp8_current e5m2", b});
  QuantSpec d = named_spec("fp8_tensor");
  d.fixed_scale = std::ldexp(1.0f + float(r.below(8)) / 8.0f, int(r.range(-24, 24)));
  v.push_back({"fp8_delayed e4m3", d});
  QuantSpec d2 = named_spec("fp8_tensor_e5m2");
  d2.fixed_scale = std::ldexp(1.0f + float(r.below(8)) / 8.0f, int(r.range(-24, 24)));
  v.push_back({"fp8_delayed e5m2", d2});
  QuantSpec blk = named_spec("fp8_block");
  blk.amax_epsilon = 1e-4f;
  blk.pow2_scale = false;
  v.push_back({"fp8_block 1x128 eps", blk});
  v.push_back({"fp8_block 1x128 pow2", named_spec("fp8_block")});
  QuantSpec blk2 = named_spec("fp8_block2d");
  blk2.amax_epsilon = 1e-4f;
  blk2.pow2_scale = false;
  v.push_back({"fp8_block 128x128 eps", blk2});
  v.push_back({"fp8_row", named_spec("fp8_row")});
  v.push_back({"nvfp4 1x16", named_spec("nvfp4")});
  v.push_back({"nvfp4 16x16", named_spec("nvfp4_2d")});
  QuantSpec nsr = named_spec("nvfp4");
  nsr.round = RoundMode::Stochastic;
  nsr.sr = PhiloxStream{r.next(), make_stream(7, uint32_t(r.below(100)))};
  v.push_back({"nvfp4 1x16 sr", nsr});
  // The nvfp4 training recipe's wgrad operands: the random Hadamard transform (TE's signs; the
  // tensor amax of the transformed tensor), x under RNE, dy under SR.
  QuantSpec nh = named_spec("nvfp4");
  nh.hadamard16 = true;
  nh.hadamard16_signs = kTeNvfp4WgradSigns;
  v.push_back({"nvfp4 1x16+rht", nh});
  QuantSpec nhsr = nsr;
  nhsr.hadamard16 = true;
  nhsr.hadamard16_signs = kTeNvfp4WgradSigns;
  v.push_back({"nvfp4 1x16+rht sr", nhsr});
  return v;
}
/// 1-D specs block along the axis; 2-D tiles and per-tensor scaling ignore it.
bool axis_matters(const QuantSpec& s) { return !s.is_2d_tile() && !s.per_tensor(); }
bool is_fp32_scaled(const QuantSpec& s) { return s.scale_kind == ScaleKind::FP32; }

/// Specials written into a stored quantized tensor: NaN / Inf element codes
/// where the format has them, E8M0 bytes 0x00 / 0xFE / 0xFF, extreme FP32
/// scale_inv (0, subnormal, FLT_MAX, Inf, NaN), UE4M3 bytes 0 / max / NaN.
void poke(QuantizedTensor& q, Rng& r) {
  if (q.data.size()) {
    const FormatSpec f = spec_of(q.spec.elem);
    if (f.nan != NanKind::None) {
      q.data.data()[r.below(q.data.size())] = uint8_t(f.nan_code(0));
      if (f.has_inf) q.data.data()[r.below(q.data.size())] = uint8_t(f.inf_code());
      if (f.has_inf) q.data.data()[r.below(q.data.size())] = uint8_t(f.inf_code() | f.sign_bit());
    }
  }
  if (q.spec.scale_kind == ScaleKind::E8M0 && q.scale_bytes.size())
    for (uint8_t v : {0x00, 0xFE, 0xFE, 0xFF, 0x01, 0xFD}) q.scale_bytes.data()[r.below(q.scale_bytes.size())] = v;
  if (q.spec.scale_kind == ScaleKind::UE4M3 && q.scale_bytes.size())
    for (uint8_t v : {0x00, 0x7E, 0x7F, 0x01, 0x80}) q.scale_bytes.data()[r.below(q.scale_bytes.size())] = v;
  if (q.spec.scale_kind == ScaleKind::FP32 && q.scale_inv.size())
    for (float v : {0.0f, 0x1p-140f, FLT_MAX, INFINITY, NAN, 0x1p-126f}) q.scale_inv.data()[r.below(q.scale_inv.size())] = v;
}

/// A host quantized tensor made by the reference (the candidate's own
/// quantizer is checked by the quantize rows; here both get the same bytes).
/// Rank 3 when G > 1 or `rank3` (a GEMM weight [G, N, K] of one group).
QuantizedTensor reference_quantized(Backend& ref, const std::vector<float>& x, size_t G, size_t R, size_t C,
                                    const QuantSpec& s, Axis axis, bool rank3 = false) {
  const Tensor t = G > 1 || rank3 ? put(ref, {G, R, C}, x) : put(ref, {R, C}, x);
  return ref.download(ref.quantize(t, s, axis));
}

// ------------------------------------------------------------ op families
void verify_memory(Ctx& c, Rng& r, int k) {
  for (DType d : {DType::f32, DType::u8, DType::i32, DType::u32, DType::i64, DType::bf16}) {
    const std::vector<size_t> dm = random_dims(r, 600, true);
    const size_t n = numel(dm), es = dtype_size(d);
    std::vector<uint8_t> host(n * es), fill((n + 9) * es);
    if (d == DType::f32) {
      const std::vector<float> v = values(r, n, 16, spread_of(k), 20);
      if (n) std::memcpy(host.data(), v.data(), host.size());
    } else {
      for (auto& b : host) b = uint8_t(r.next());
    }
    for (auto& b : fill) b = uint8_t(r.next());
    const size_t off = size_t(r.below(10));
    const size_t cnt = size_t(r.below(n + 1));  // copy_range: cnt elements of t into big
    const size_t so = size_t(r.below(n - cnt + 1)), d_o = size_t(r.below(n + 9 - cnt + 1));
    run_case(c, Op::Memory, dims_str(dm),
             std::string(name_of(d)) + " upload/download/copy/copy_into/copy_range/fill_zero",
             [&](Backend& be) {
               Result res;
               Tensor t = be.alloc(d, shape_of(dm));
               be.upload(t, host.empty() ? static_cast<const void*>(&fill[0]) : host.data(), host.size());
               res.push_back(get(be, t));
               Tensor flat = poisoned(be, d, {n});  // same element count, another shape
               be.copy(t, flat);
               res.push_back(get(be, flat));
               Tensor big = be.alloc(d, {n + 9});
               be.upload(big, fill.data(), fill.size());
               be.copy_into(t, big, off);
               res.push_back(get(be, big));
               be.copy_range(t, so, big, d_o, cnt);
               res.push_back(get(be, big));
               be.fill_zero(t);
               res.push_back(get(be, t));
               return res;
             });
  }
  // Quantized tensors: host -> backend -> host keeps every byte.
  std::vector<NamedSpec> specs = quantize_specs(r);
  const NamedSpec& ns = specs[r.below(specs.size())];
  const size_t G = 1 + r.below(2), R = 1 + r.below(40), C = 16 * (1 + r.below(8));
  const Axis axis = r.coin() ? Axis::Cols : Axis::Rows;
  QuantSpec s = ns.spec;
  if (s.hadamard16 && axis == Axis::Rows) s.hadamard16 = false;
  QuantizedTensor q = reference_quantized(c.ref, values(r, G * R * C, C, spread_of(k), special_pct(k)), G, R, C, s, axis);
  poke(q, r);
  run_case(c, Op::Memory, dims({G, R, C}), ns.name + " QTensor upload/download", [&](Backend& be) {
    Result res;
    add_quantized(res, be.download(be.upload(q)));
    return res;
  });
}

void verify_quantize(Ctx& c, Rng& r, int k) {
  for (const NamedSpec& ns : quantize_specs(r)) {
    const bool fp8 = is_fp32_scaled(ns.spec);
    for (Axis axis : {Axis::Cols, Axis::Rows}) {
      if (axis == Axis::Rows && !axis_matters(ns.spec)) continue;
      const size_t G = r.chance(30) ? 1 + r.below(3) : 1;
      size_t R = 1 + r.below(fp8 ? 200 : 70), C = 1 + r.below(fp8 ? 260 : 160);
      if (ns.spec.hadamard16) (axis == Axis::Cols ? C : R) = 16 * (1 + r.below(8));  // the blocked extent
      const std::vector<float> x = values(r, G * R * C, C, spread_of(k), special_pct(k));
      const std::string shape = G > 1 ? dims({G, R, C}) : dims({R, C});
      run_case(c, Op::Quantize, shape, ns.name + (axis == Axis::Cols ? " cols" : " rows"), [&](Backend& be) {
        const Tensor t = G > 1 ? put(be, {G, R, C}, x) : put(be, {R, C}, x);
        Result res;
        add_quantized(res, be.download(be.quantize(t, ns.spec, axis)));
        return res;
      });
    }
  }
}

void verify_quantize_grouped(Ctx& c, Rng& r, int k) {
  std::vector<NamedSpec> all = quantize_specs(r), specs;
  for (const char* n : {"mxfp4/even", "mxfp4/even sr", "mxfp4/even+h16", "mxfp4/even+h16 sr", "mxfp8/even",
                        "mxfp8_e5m2/rceil", "fp8_current e4m3", "fp8_current e5m2", "fp8_delayed e5m2",
                        "fp8_block 1x128 eps", "nvfp4 1x16", "nvfp4 1x16+rht", "nvfp4 1x16+rht sr",
                        "fp8_current e4m3 whole tensor"})  // last: the earlier specs keep their draws
    for (const NamedSpec& s : all)
      if (s.name == n) specs.push_back(s);
  for (const NamedSpec& ns : specs) {
    const size_t G = r.chance(15) ? 17 + r.below(8) : 1 + r.below(5);  // > 16: several GPU launches
    std::vector<int64_t> ms = random_splits(r, G, G > 5 ? 24 : 90, ns.spec.hadamard16 ? 16 : 1);
    if (k % 5 == 4) std::fill(ms.begin(), ms.end(), 0);  // every group empty
    const size_t M = total(ms), C = 1 + r.below(90);
    const std::vector<float> x = values(r, M * C, C, spread_of(k), special_pct(k));
    run_case(c, Op::QuantizeGrouped, dims({M, C}) + " " + splits_str(ms), ns.name, [&](Backend& be) {
      const Tensor t = put(be, {M, C}, x);
      const std::vector<QuantizedTensor> qs = be.download(be.quantize_grouped_colwise(t, ms, ns.spec));
      Result res;
      res.push_back(scalar(int64_t(qs.size())));
      for (const QuantizedTensor& q : qs) add_quantized(res, q);
      return res;
    });
  }
}

/// Host inputs shared by the dequantize, quant_stats and histogram rows.
struct QuantCase {
  std::string name, shape;
  std::vector<float> x;
  size_t G, R, C;
  QuantizedTensor q;
};
std::vector<QuantCase> quant_cases(Ctx& c, Rng& r, int k, bool poke_specials) {
  std::vector<QuantCase> out;
  for (const NamedSpec& ns : quantize_specs(r)) {
    if (ns.name.find("/floor") != std::string::npos || ns.name.find("/ceil") != std::string::npos) continue;
    QuantCase qc;
    qc.name = ns.name;
    qc.G = r.chance(30) ? 1 + r.below(3) : 1;
    qc.R = 1 + r.below(70);
    qc.C = 1 + r.below(is_fp32_scaled(ns.spec) ? 260 : 130);
    const Axis axis = axis_matters(ns.spec) && r.coin() ? Axis::Rows : Axis::Cols;
    if (ns.spec.hadamard16) (axis == Axis::Cols ? qc.C : qc.R) = 16 * (1 + r.below(8));
    qc.x = values(r, qc.G * qc.R * qc.C, qc.C, spread_of(k), special_pct(k));
    qc.q = reference_quantized(c.ref, qc.x, qc.G, qc.R, qc.C, ns.spec, axis);
    if (poke_specials && k % 2 == 1) {
      poke(qc.q, r);
      qc.name += " +specials";
    }
    qc.name += axis == Axis::Rows ? " rows" : " cols";
    qc.shape = qc.G > 1 ? dims({qc.G, qc.R, qc.C}) : dims({qc.R, qc.C});
    out.push_back(std::move(qc));
  }
  return out;
}

void verify_dequantize(Ctx& c, Rng& r, int k) {
  for (const QuantCase& qc : quant_cases(c, r, k, true))
    run_case(c, Op::Dequantize, qc.shape, qc.name, [&](Backend& be) {
      const QTensor q = be.upload(qc.q);
      Tensor out = qc.G > 1 ? poisoned(be, DType::f32, {qc.G, qc.R, qc.C}) : poisoned(be, DType::f32, {qc.R, qc.C});
      be.dequantize(q, out);
      return Result{get(be, out)};
    });
}

void verify_quant_stats(Ctx& c, Rng& r, int k) {
  for (const QuantCase& qc : quant_cases(c, r, k, true))
    run_case(c, Op::QuantStats, qc.shape, qc.name, [&](Backend& be) {
      const Tensor x = qc.G > 1 ? put(be, {qc.G, qc.R, qc.C}, qc.x) : put(be, {qc.R, qc.C}, qc.x);
      const QuantStats s = be.quant_stats(x, be.upload(qc.q));
      return Result{part(std::vector<uint64_t>{s.count, s.nonfinite_in, s.nan_out, s.underflow, s.saturated,
                                               s.rounded, s.rounded_up}),
                    part(std::vector<double>{s.mse, s.max_abs_err, s.signal_power, s.sqnr_db, s.mean_err,
                                             s.expected_up}),
                    scalar(s.tensor_scale_inv)};  // copied after the sums on the GPU: its own fetch
    });
}

void verify_scale_exp_histogram(Ctx& c, Rng& r, int k) {
  for (const QuantCase& qc : quant_cases(c, r, k, true))
    run_case(c, Op::ScaleExpHistogram, qc.shape, qc.name, [&](Backend& be) {
      const ScaleExpCounts h = be.scale_exp_histogram(be.upload(qc.q));
      return Result{part(h.data(), h.size())};
    });
}

void verify_amax(Ctx& c, Rng& r, int k) {
  for (int variant = 0; variant < 3; ++variant) {
    const std::vector<size_t> dm = random_dims(r, 3000, variant == 0);
    std::vector<float> x = values(r, numel(dm), 64, spread_of(k), variant == 2 ? 0 : special_pct(k) + 1);
    if (variant == 1 && !x.empty()) x[r.below(x.size())] = f32_from_bits(0xFFC01234u);  // a signed NaN payload
    run_case(c, Op::Amax, dims_str(dm), variant == 2 ? "finite" : "with specials", [&](Backend& be) {
      return Result{scalar(be.amax(put(be, shape_of(dm), x)))};
    });
    run_case(c, Op::Amax, dims_str(dm), variant == 2 ? "deferred, finite" : "deferred, with specials", [&](Backend& be) {
      float a = 0;
      be.amax_deferred(put(be, shape_of(dm), x), &a);
      be.resolve_deferred();
      return Result{scalar(a)};
    });
  }
}

void verify_round_bf16(Ctx& c, Rng& r, int k) {
  const std::vector<size_t> dm = random_dims(r, 2000, false);
  const size_t n = numel(dm);
  // BF16 rounding boundaries: exact ties (low half 0x8000), one below and
  // above, overflow past BF16's largest value, NaNs whose payload lies only
  // in the dropped half, subnormals.
  std::vector<float> x = values(r, n, 32, spread_of(k), special_pct(k));
  for (float& v : x) {
    switch (r.below(8)) {
      case 0: v = f32_from_bits((f32_bits(v) & 0xFFFF0000u) | 0x8000u); break;
      case 1: v = f32_from_bits((f32_bits(v) & 0xFFFF0000u) | (r.coin() ? 0x7FFFu : 0x8001u)); break;
      case 2: v = f32_from_bits(0x7F7F8000u | (r.coin() ? 0x80000000u : 0u) | uint32_t(r.below(0x8000))); break;
      case 3: v = f32_from_bits(0x7F800001u | uint32_t(r.below(0xFFFF)) | (r.coin() ? 0x80000000u : 0u)); break;
      default: break;
    }
  }
  run_case(c, Op::RoundBf16, dims_str(dm), "in place, src -> dst (f32 and bf16)", [&](Backend& be) {
    Tensor a = put(be, shape_of(dm), x);
    be.round_bf16(a);
    const Tensor src = put(be, shape_of(dm), x);
    Tensor dst = poisoned(be, DType::f32, {n});
    be.round_bf16(src, dst);
    Tensor bits = poisoned(be, DType::bf16, {n});  // the bit patterns (a BF16 GEMM operand)
    be.round_bf16(src, bits);
    return Result{get(be, a), get(be, dst), get(be, bits)};
  });
}

// ---- grouped GEMM
struct GemmPair {
  const char* label;
  const char* cls;
  QuantSpec a, w;  // token operand (X, dY), weight
};
QuantSpec sim_spec(const char* name, ScaleRule rule) { return with_rule(named_spec(name), rule); }
QuantSpec with_eps(QuantSpec s, float eps, bool pow2) {
  s.amax_epsilon = eps;
  s.pow2_scale = pow2;
  return s;
}
/// One pair per block-dot class and simulator recipe (numerics.md §5.2).
std::vector<GemmPair> gemm_pairs() {
  return {
      {"mxfp4 x mxfp4_2d", "mx-exact", sim_spec("mxfp4", ScaleRule::Even), sim_spec("mxfp4_2d", ScaleRule::Even)},
      {"mxfp4 x mxfp4", "mx-exact", sim_spec("mxfp4", ScaleRule::Even), sim_spec("mxfp4", ScaleRule::Even)},
      {"mxfp8 x mxfp8_2d", "mx-f13", sim_spec("mxfp8", ScaleRule::Even), sim_spec("mxfp8_2d", ScaleRule::Even)},
      {"mxfp8_e5m2 x mxfp8", "mx-f13", named_spec("mxfp8_e5m2"), named_spec("mxfp8")},
      {"fp8_tensor x fp8_tensor", "fp8-chunk128", with_eps(named_spec("fp8_tensor"), 1e-12f, false),
       with_eps(named_spec("fp8_tensor"), 1e-12f, false)},
      {"fp8_tensor_e5m2 x fp8_tensor", "fp8-chunk128", with_eps(named_spec("fp8_tensor_e5m2"), 1e-12f, false),
       with_eps(named_spec("fp8_tensor"), 1e-12f, false)},
      {"fp8_block x fp8_block2d", "fp8-chunk128", with_eps(named_spec("fp8_block"), 1e-4f, false),
       with_eps(named_spec("fp8_block2d"), 1e-4f, false)},
      {"fp8_row x fp8_row", "fp8-chunk128", named_spec("fp8_row"), named_spec("fp8_row")},
      {"nvfp4 x nvfp4_2d", "nvfp4-exact", named_spec("nvfp4"), named_spec("nvfp4_2d")},
      {"nvfp4 x nvfp4", "nvfp4-exact", named_spec("nvfp4"), named_spec("nvfp4")},
  };
}
/// The 1-D spec of a wgrad operand quantized from a 2-D weight recipe's elements.
QuantSpec one_d(QuantSpec s) {
  if (s.is_2d_tile()) {
    s.block_rows = 1;
    if (s.scale_kind == ScaleKind::FP32) s.block_cols = 128;
  }
  return s;
}
const char* form_name(int form) { return form == 0 ? "fprop" : form == 1 ? "dgrad" : "wgrad"; }

struct GemmShape {
  size_t G, M, N, K;
  std::vector<int64_t> ms;
  std::string str() const {
    return "G" + std::to_string(G) + " M" + std::to_string(M) + " N" + std::to_string(N) + " K" + std::to_string(K) +
           " " + splits_str(ms);
  }
};
GemmShape gemm_shape(Rng& r, bool fp8, int64_t multiple) {
  GemmShape s;
  // Now and then more groups than one GPU launch takes (16): the batching across launches.
  s.G = r.chance(15) ? 17 + r.below(20) : 1 + r.below(4);
  s.ms = random_splits(r, s.G, s.G > 4 ? 12 : 40, multiple);
  s.M = total(s.ms);
  // Small enough that a case takes milliseconds on one CPU core; K crosses
  // several blocks of 32 / chunks of 128 / groups of 16 and is ragged.
  s.N = 1 + r.below(fp8 ? 96 : 80);
  s.K = (fp8 ? 64 : 1) + r.below(fp8 ? 260 : 200);
  return s;
}
std::string gemm_mode(bool acc, bool bf16_out) {
  return std::string(acc ? " accumulate" : " overwrite") + (bf16_out ? " bf16-out" : " fp32-out");
}
GemmOptions gemm_options(bool acc, bool bf16_out) {
  GemmOptions o;
  o.accumulate = acc;
  o.out = bf16_out ? Format::BF16 : Format::FP32;
  return o;
}
/// The output before the GEMM: random values (accumulate: they enter the
/// sum, and an empty wgrad group must keep them) or NaN bytes (overwrite: an
/// unwritten element shows).
Tensor gemm_output(Backend& be, Shape s, bool acc, const std::vector<float>& init) {
  return acc ? put(be, s, init) : poisoned(be, DType::f32, s);
}

void verify_gemm_quantized(Ctx& c, Rng& r, int k) {
  const bool specials = k % 2 == 1;
  for (const GemmPair& p : gemm_pairs()) {
    const bool fp8 = std::string(p.cls) == "fp8-chunk128";
    // Odd cases of the MXFP4 pair: the simulator's wgrad operands with
    // Hadamard16 and stochastic rounding (M_g multiples of 16).
    const bool h16_sr = specials && std::string(p.label) == "mxfp4 x mxfp4_2d";
    const GemmShape sh = gemm_shape(r, fp8, h16_sr ? 16 : 1);
    const int pct = specials ? 2 : 0, spread = spread_of(k);
    const std::vector<float> x = values(r, sh.M * sh.K, sh.K, spread, pct), dy = values(r, sh.M * sh.N, sh.N, spread, pct),
                             w = values(r, sh.G * sh.N * sh.K, sh.K, spread, pct);
    for (int form = 0; form < 3; ++form) {
      const size_t J = form == 0 ? sh.N : sh.K;  // fprop / dgrad output columns
      const size_t n_out = form == 2 ? sh.G * sh.N * sh.K : sh.M * J;
      const std::vector<float> init = values(r, n_out, form == 2 ? sh.K : J, 2, specials ? 3 : 0);
      const std::string base = std::string(p.label) + " (" + p.cls + ") " + form_name(form);
      if (form < 2) {
        QuantizedTensor qa = form == 0 ? reference_quantized(c.ref, x, 1, sh.M, sh.K, p.a, Axis::Cols)
                                       : reference_quantized(c.ref, dy, 1, sh.M, sh.N, p.a, Axis::Cols);
        QuantizedTensor qw = reference_quantized(c.ref, w, sh.G, sh.N, sh.K, p.w,
                                                 form == 0 || p.w.is_2d_tile() ? Axis::Cols : Axis::Rows, true);
        if (specials) {
          poke(qa, r);
          poke(qw, r);
        }
        for (int acc = 0; acc < 2; ++acc)
          for (int ob = 0; ob < 2; ++ob)
            run_case(c, Op::GemmQuantized, sh.str(), base + gemm_mode(acc, ob), [&](Backend& be) {
              const QTensor a = be.upload(qa), wq = be.upload(qw);
              Tensor out = gemm_output(be, {sh.M, J}, acc, init);
              if (form == 0) be.grouped_fprop(a, wq, sh.ms, out, gemm_options(acc, ob));
              else be.grouped_dgrad(a, wq, sh.ms, out, gemm_options(acc, ob));
              return Result{get(be, out)};
            });
      } else {
        QuantSpec sdy = one_d(p.a), sx = one_d(p.w);
        if (h16_sr) {
          sdy.round = RoundMode::Stochastic;
          sdy.sr = PhiloxStream{r.next(), make_stream(3, uint32_t(k))};
          sdy.hadamard16 = sx.hadamard16 = true;
        }
        // GroupedQTensor has no upload: each backend quantizes the operands
        // itself (those bytes are checked by the quantize_grouped rows).
        for (int acc = 0; acc < 2; ++acc)
          for (int ob = 0; ob < 2; ++ob)
            run_case(c, Op::GemmQuantized, sh.str(), base + (h16_sr ? " h16+sr" : "") + gemm_mode(acc, ob),
                     [&](Backend& be) {
                       const GroupedQTensor gdy = be.quantize_grouped_colwise(put(be, {sh.M, sh.N}, dy), sh.ms, sdy);
                       const GroupedQTensor gx = be.quantize_grouped_colwise(put(be, {sh.M, sh.K}, x), sh.ms, sx);
                       Tensor out = gemm_output(be, {sh.G, sh.N, sh.K}, acc, init);
                       be.grouped_wgrad(gdy, gx, sh.ms, out, gemm_options(acc, ob));
                       return Result{get(be, out)};
                     });
      }
    }
  }
}

void verify_gemm_bf16(Ctx& c, Rng& r, int k) {
  const bool specials = k % 2 == 1;
  const GemmShape sh = gemm_shape(r, false, 1);
  const int pct = specials ? 2 : 0, spread = spread_of(k);
  const std::vector<float> x = to_bf16(values(r, sh.M * sh.K, sh.K, spread, pct)),
                           dy = to_bf16(values(r, sh.M * sh.N, sh.N, spread, pct)),
                           w = to_bf16(values(r, sh.G * sh.N * sh.K, sh.K, spread, pct));
  for (int form = 0; form < 3; ++form) {
    const size_t J = form == 0 ? sh.N : sh.K;
    const size_t n_out = form == 2 ? sh.G * sh.N * sh.K : sh.M * J;
    const std::vector<float> init = values(r, n_out, form == 2 ? sh.K : J, 2, specials ? 3 : 0);
    for (int acc = 0; acc < 2; ++acc)
      for (int ob = 0; ob < 2; ++ob)
        for (bool b16 : {false, true}) {  // operands as f32 tensors of BF16 values, or bf16 tensors
          const std::string what = std::string("bf16 x bf16 (bf16-f25) ") + form_name(form) + gemm_mode(acc, ob) +
                                   (b16 ? " bf16 tensors" : "");
          run_case(c, Op::GemmBf16, sh.str(), what, [&](Backend& be) {
            auto in = [&](Shape s, const std::vector<float>& v) {
              Tensor t = put(be, s, v);
              if (!b16) return t;
              Tensor b = be.alloc(DType::bf16, s);
              be.round_bf16(t, b);  // exact: v holds BF16 values
              return b;
            };
            const GemmOptions o = gemm_options(acc, ob);
            if (form == 2) {
              Tensor out = gemm_output(be, {sh.G, sh.N, sh.K}, acc, init);
              be.grouped_wgrad(in({sh.M, sh.N}, dy), in({sh.M, sh.K}, x), sh.ms, out, o);
              return Result{get(be, out)};
            }
            Tensor out = gemm_output(be, {sh.M, J}, acc, init);
            const Tensor wt = in({sh.G, sh.N, sh.K}, w);
            if (form == 0) be.grouped_fprop(in({sh.M, sh.K}, x), wt, sh.ms, out, o);
            else be.grouped_dgrad(in({sh.M, sh.N}, dy), wt, sh.ms, out, o);
            return Result{get(be, out)};
          });
        }
  }
}

void verify_accumulate_groups(Ctx& c, Rng& r, int k) {
  const size_t G = 1 + r.below(5), N = 1 + r.below(20), K = 1 + r.below(40);
  const std::vector<int64_t> ms = random_splits(r, G, 50);
  const std::vector<float> acc = values(r, G * N * K, K, spread_of(k), special_pct(k)),
                           x = values(r, G * N * K, K, spread_of(k), special_pct(k));
  run_case(c, Op::AccumulateGroups, dims({G, N, K}) + " " + splits_str(ms), "main_grad += x", [&](Backend& be) {
    Tensor a = put(be, {G, N, K}, acc);
    be.accumulate_groups(a, put(be, {G, N, K}, x), ms);
    return Result{get(be, a)};
  });
}

// ---- router and MoE dispatch
/// A valid routing: top [T, k] distinct experts per row, the counts and
/// row_of of numerics.md §6 moe_route, M the padded row count.
struct Routing {
  size_t T, E, k;
  int64_t pad;
  std::vector<int32_t> top;
  std::vector<int64_t> counts, row_of;
  size_t M = 0;
};
Routing make_routing(Rng& r) {
  Routing rt;
  rt.T = 1 + r.below(40);
  rt.E = 1 + r.below(12);
  rt.k = 1 + r.below(std::min<size_t>(rt.E, 4));
  static constexpr int64_t pads[] = {1, 4, 16};
  rt.pad = pick(r, pads);
  std::vector<int32_t> perm(rt.E);
  for (size_t t = 0; t < rt.T; ++t) {
    for (size_t e = 0; e < rt.E; ++e) perm[e] = int32_t(e);
    for (size_t e = rt.E; e > 1; --e) std::swap(perm[e - 1], perm[r.below(e)]);
    if (r.chance(30)) std::sort(perm.begin(), perm.end());  // crowd the low experts: empty ones appear
    rt.top.insert(rt.top.end(), perm.begin(), perm.begin() + int64_t(rt.k));
  }
  rt.counts.assign(rt.E, 0);
  for (int32_t e : rt.top) ++rt.counts[size_t(e)];
  std::vector<int64_t> next(rt.E);
  int64_t M = 0;
  for (size_t e = 0; e < rt.E; ++e) {
    next[e] = M;
    M += (rt.counts[e] + rt.pad - 1) / rt.pad * rt.pad;
  }
  rt.M = size_t(M);
  for (int32_t e : rt.top) rt.row_of.push_back(next[size_t(e)]++);
  return rt;
}
std::string routing_str(const Routing& rt, size_t d) {
  return "T" + std::to_string(rt.T) + " E" + std::to_string(rt.E) + " k" + std::to_string(rt.k) + " M" +
         std::to_string(rt.M) + (d ? " d" + std::to_string(d) : "");
}
/// Router probabilities: rows of positive values below 1 (a softmax's range)
/// with exact ties, occasionally a special.
std::vector<float> probabilities(Rng& r, size_t n, int pct) {
  std::vector<float> p(n);
  for (float& v : p) v = r.chance(20) ? 0.25f : r.unit();
  for (float& v : p)
    if (r.chance(pct)) v = special_value(r, -1);
  return p;
}

void verify_softmax(Ctx& c, Rng& r, int k) {
  const size_t T = 1 + r.below(40), E = 1 + r.below(20);
  std::vector<float> l = values(r, T * E, E, std::min(spread_of(k), 6), special_pct(k));
  if (T > 1 && r.coin()) std::fill(l.begin(), l.begin() + int64_t(E), -INFINITY);  // a row of -inf: 0/0
  run_case(c, Op::Softmax, dims({T, E}), "fp32 rows", [&](Backend& be) {
    Tensor p = poisoned(be, DType::f32, {T, E});
    be.softmax_rows(put(be, {T, E}, l), p);
    return Result{get(be, p)};
  });
}

void verify_topk(Ctx& c, Rng& r, int k) {
  const size_t T = 1 + r.below(40), E = 1 + r.below(16);
  const int kk = int(1 + r.below(E));
  // A small value set: ties everywhere, -0 against +0, NaN, +-inf.
  const float set[] = {0.25f, 0.5f, 0.25f, 0.0f, -0.0f, NAN, INFINITY, -INFINITY, 0x1p-149f, 0.75f};
  std::vector<float> p(T * E);
  for (float& v : p) v = k % 2 ? set[r.below(10)] : (r.chance(40) ? set[r.below(10)] : r.unit());
  run_case(c, Op::Topk, dims({T, E}), "k = " + std::to_string(kk), [&](Backend& be) {
    Tensor top = poisoned(be, DType::i32, {T, size_t(kk)});
    be.topk_rows(put(be, {T, E}, p), kk, top);
    return Result{get(be, top)};
  });
}

void verify_route(Ctx& c, Rng& r, int) {
  const Routing rt = make_routing(r);
  run_case(c, Op::Route, routing_str(rt, 0), "pad " + std::to_string(rt.pad), [&](Backend& be) {
    Tensor counts = poisoned(be, DType::i64, {rt.E}), row_of = poisoned(be, DType::i64, {rt.T * rt.k});
    be.moe_route(put(be, {rt.T, rt.k}, rt.top), rt.E, rt.pad, counts, row_of);
    return Result{get(be, counts), get(be, row_of)};
  });
}

void verify_permute(Ctx& c, Rng& r, int k) {
  const Routing rt = make_routing(r);
  const size_t d = 1 + r.below(48);
  const std::vector<float> src = values(r, rt.T * d, d, spread_of(k), special_pct(k));
  run_case(c, Op::Permute, routing_str(rt, d), "pad " + std::to_string(rt.pad), [&](Backend& be) {
    Tensor dst = poisoned(be, DType::f32, {rt.M, d});
    be.permute_rows(put(be, {rt.T, d}, src), put(be, {rt.T * rt.k}, rt.row_of), rt.k, dst);
    return Result{get(be, dst)};
  });
}

void verify_combine(Ctx& c, Rng& r, int k) {
  const Routing rt = make_routing(r);
  const size_t d = 1 + r.below(48);
  const std::vector<float> yp = to_bf16(values(r, rt.M * d, d, std::min(spread_of(k), 8), special_pct(k))),
                           h0 = to_bf16(values(r, rt.T * d, d, 3, special_pct(k))),
                           p = probabilities(r, rt.T * rt.E, special_pct(k));
  run_case(c, Op::Combine, routing_str(rt, d), "unpermute_combine", [&](Backend& be) {
    Tensor h1 = poisoned(be, DType::f32, {rt.T, d});
    be.unpermute_combine(put(be, {rt.M, d}, yp), put(be, {rt.T, d}, h0), put(be, {rt.T, rt.E}, p),
                         put(be, {rt.T, rt.k}, rt.top), put(be, {rt.T * rt.k}, rt.row_of), rt.k, h1);
    return Result{get(be, h1)};
  });
}

void verify_combine_backward(Ctx& c, Rng& r, int k) {
  const Routing rt = make_routing(r);
  const size_t d = 1 + r.below(48);
  const std::vector<float> dh1 = to_bf16(values(r, rt.T * d, d, std::min(spread_of(k), 8), special_pct(k))),
                           yp = to_bf16(values(r, rt.M * d, d, 3, special_pct(k))),
                           p = probabilities(r, rt.T * rt.E, special_pct(k));
  run_case(c, Op::CombineBackward, routing_str(rt, d), "dyp, dgate", [&](Backend& be) {
    Tensor dyp = poisoned(be, DType::f32, {rt.M, d}), dgate = poisoned(be, DType::f32, {rt.T * rt.k});
    be.combine_backward(put(be, {rt.T, d}, dh1), put(be, {rt.M, d}, yp), put(be, {rt.T, rt.E}, p),
                        put(be, {rt.T, rt.k}, rt.top), put(be, {rt.T * rt.k}, rt.row_of), rt.k, dyp, dgate);
    return Result{get(be, dyp), get(be, dgate)};
  });
}

void verify_aux_loss(Ctx& c, Rng& r, int k) {
  const Routing rt = make_routing(r);
  const std::vector<float> p = probabilities(r, rt.T * rt.E, k % 2 ? 2 : 0);
  const float coeff = std::ldexp(1.0f + float(r.below(16)) / 16, -int(r.below(12)));
  run_case(c, Op::AuxLoss, routing_str(rt, 0), "coeff " + std::to_string(coeff), [&](Backend& be) {
    Tensor f = poisoned(be, DType::f32, {rt.E});
    const double aux = be.aux_loss(put(be, {rt.T, rt.E}, p), put(be, {rt.E}, rt.counts), rt.k, coeff, f);
    return Result{get(be, f), scalar(aux)};
  });
}

void verify_router_backward(Ctx& c, Rng& r, int k) {
  const Routing rt = make_routing(r);
  const std::vector<float> p = probabilities(r, rt.T * rt.E, special_pct(k)),
                           dgate = values(r, rt.T * rt.k, rt.k, std::min(spread_of(k), 10), special_pct(k)),
                           f = probabilities(r, rt.E, 0);
  const float aux_grad = std::ldexp(float(1 + r.below(64)), -int(r.below(16)));
  run_case(c, Op::RouterBackward, routing_str(rt, 0), "aux_grad " + std::to_string(aux_grad), [&](Backend& be) {
    Tensor dl = poisoned(be, DType::f32, {rt.T, rt.E});
    be.router_backward(put(be, {rt.T, rt.E}, p), put(be, {rt.T, rt.k}, rt.top), put(be, {rt.T * rt.k}, dgate),
                       put(be, {rt.E}, f), aux_grad, rt.k, dl);
    return Result{get(be, dl)};
  });
}

void verify_embed_grad_sum(Ctx& c, Rng& r, int k) {
  const Routing rt = make_routing(r);
  const size_t d = 1 + r.below(48);
  const int s = std::min(spread_of(k), 10);
  const std::vector<float> dh1 = to_bf16(values(r, rt.T * d, d, s, special_pct(k))),
                           dh0r = to_bf16(values(r, rt.T * d, d, s, special_pct(k))),
                           dxp = to_bf16(values(r, rt.M * d, d, s, special_pct(k)));
  run_case(c, Op::EmbedGradSum, routing_str(rt, d), "dh1 + dh0_router + sum dxp", [&](Backend& be) {
    Tensor dh0 = poisoned(be, DType::f32, {rt.T, d});
    be.embed_grad_sum(put(be, {rt.T, d}, dh1), put(be, {rt.T, d}, dh0r), put(be, {rt.M, d}, dxp),
                      put(be, {rt.T * rt.k}, rt.row_of), rt.k, dh0);
    return Result{get(be, dh0)};
  });
}

const std::pair<Activation, const char*> kActivations[] = {
    {Activation::Relu, "relu"}, {Activation::Gelu, "gelu"}, {Activation::Silu, "silu"}};

void verify_activation(Ctx& c, Rng& r, int k) {
  for (const auto& [kind_b, name] : kActivations) {
    const Activation kind = kind_b;  // a lambda may not capture a structured binding before Clang 16
    const std::vector<size_t> dm = random_dims(r, 1500, false);
    const std::vector<float> u = values(r, numel(dm), 32, std::min(spread_of(k), 8), special_pct(k));
    run_case(c, Op::Activation, dims_str(dm), name, [&](Backend& be) {
      Tensor a = poisoned(be, DType::f32, shape_of(dm));
      be.activation(kind, put(be, shape_of(dm), u), a);
      return Result{get(be, a)};
    });
  }
}

void verify_activation_grad(Ctx& c, Rng& r, int k) {
  for (const auto& [kind_b, name] : kActivations) {
    const Activation kind = kind_b;  // a lambda may not capture a structured binding before Clang 16
    const std::vector<size_t> dm = random_dims(r, 1500, false);
    const std::vector<float> u = values(r, numel(dm), 32, std::min(spread_of(k), 8), special_pct(k)),
                             da = to_bf16(values(r, numel(dm), 32, std::min(spread_of(k), 20), special_pct(k)));
    run_case(c, Op::ActivationGrad, dims_str(dm), name, [&](Backend& be) {
      Tensor du = poisoned(be, DType::f32, shape_of(dm));
      be.activation_grad(kind, put(be, shape_of(dm), u), put(be, shape_of(dm), da), du);
      return Result{get(be, du)};
    });
  }
}

// ---- loss, metrics
std::vector<uint8_t> labels(Rng& r, size_t T, size_t C) {
  std::vector<uint8_t> y(T);
  for (auto& v : y) v = uint8_t(r.below(C));
  return y;
}
/// Logits with exact ties (a small set of values) and, per case, specials.
std::vector<float> logits(Rng& r, size_t n, size_t C, int k) {
  std::vector<float> l = values(r, n, C, std::min(spread_of(k), 5), special_pct(k));
  for (float& v : l)
    if (r.chance(15)) v = float(r.below(3));
  return l;
}

void verify_cross_entropy(Ctx& c, Rng& r, int k) {
  const size_t T = 1 + r.below(40), C = 1 + r.below(20);
  const std::vector<float> l = logits(r, T * C, C, k);
  const std::vector<uint8_t> y = labels(r, T, C);
  const float grad_scale = 1.0f / float(1 + r.below(64));
  run_case(c, Op::CrossEntropy, dims({T, C}), "grad_scale " + std::to_string(grad_scale), [&](Backend& be) {
    Tensor dl = poisoned(be, DType::f32, {T, C});
    const double loss = be.cross_entropy(put(be, {T, C}, l), put(be, {T}, y), grad_scale, dl);
    return Result{get(be, dl), scalar(loss)};
  });
}

void verify_argmax_rows(Ctx& c, Rng& r, int k) {
  const size_t T = 1 + r.below(60), C = 1 + r.below(20);
  const std::vector<float> l = logits(r, T * C, C, k + 1);
  run_case(c, Op::ArgmaxRows, dims({T, C}), "ties, specials", [&](Backend& be) {
    Tensor pred = poisoned(be, DType::i32, {T});
    be.argmax_rows(put(be, {T, C}, l), pred);
    return Result{get(be, pred)};
  });
}

void verify_count_correct(Ctx& c, Rng& r, int k) {
  const size_t T = 1 + r.below(60), C = 1 + r.below(20);
  const std::vector<float> l = logits(r, T * C, C, k + 1);
  const std::vector<uint8_t> y = labels(r, T, C);
  run_case(c, Op::CountCorrect, dims({T, C}), "ties, specials", [&](Backend& be) {
    return Result{scalar(be.count_correct(put(be, {T, C}, l), put(be, {T}, y)))};
  });
}

void verify_l2_norm(Ctx& c, Rng& r, int k) {
  for (int variant = 0; variant < 2; ++variant) {
    const std::vector<size_t> dm = random_dims(r, 3000, variant == 0);
    const std::vector<float> x = values(r, numel(dm), 64, spread_of(k), variant ? special_pct(k) : 0);
    run_case(c, Op::L2Norm, dims_str(dm), variant ? "with specials" : "finite", [&](Backend& be) {
      return Result{scalar(be.l2_norm(put(be, shape_of(dm), x)))};
    });
  }
}

// A reference and a test that differ in a few elements (a tie of the largest error among them:
// the first index is reported), with specials in the second variant.
void verify_output_error(Ctx& c, Rng& r, int k) {
  for (int variant = 0; variant < 2; ++variant) {
    const std::vector<size_t> dm = random_dims(r, 3000, variant == 0);
    const size_t n = numel(dm);
    const std::vector<float> ref = values(r, n, 64, spread_of(k), variant ? special_pct(k) : 0);
    std::vector<float> test = ref;
    for (size_t i = 0; i < n; i += 1 + r.below(7)) test[i] = ref[i] + (r.coin() ? 0.5f : -0.25f);
    run_case(c, Op::OutputError, dims_str(dm), variant ? "with specials" : "finite", [&](Backend& be) {
      OutputError o;
      be.output_error_deferred(put(be, shape_of(dm), ref), put(be, shape_of(dm), test), &o);
      be.resolve_deferred();
      return Result{part(std::vector<uint64_t>{o.count, o.nonfinite, uint64_t(o.max_index)}),
                    part(std::vector<double>{o.rel_l2, o.sqnr_db, o.max_abs_err})};
    });
  }
}

// ---- optimizer, de-oscillation, oscillation metrics
std::vector<float> nonnegative(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

void verify_adamw(Ctx& c, Rng& r, int k) {
  const std::vector<size_t> dm = random_dims(r, 1500, false);
  const size_t n = numel(dm);
  Backend::AdamW h;
  static constexpr float lrs[] = {1e-3f, 3e-4f, 0.1f}, decays[] = {0.0f, 0.01f, 0.1f};
  h.lr = pick(r, lrs);
  h.beta1 = 0.9f;
  h.beta2 = r.coin() ? 0.999f : 0.95f;
  h.eps = r.coin() ? 1e-8f : 1e-6f;
  h.weight_decay = pick(r, decays);
  h.t = r.range(1, 5000);
  const std::vector<float> w = plain(r, n, 2), m = plain(r, n, -6), v = nonnegative(plain(r, n, -12)),
                           g = values(r, n, 32, std::min(spread_of(k), 12), k % 2 ? 1 : 0);
  char what[96];
  std::snprintf(what, sizeof what, "lr %g b2 %g eps %g wd %g t %lld", double(h.lr), double(h.beta2), double(h.eps),
                double(h.weight_decay), (long long)h.t);
  run_case(c, Op::AdamW, dims_str(dm), what, [&](Backend& be) {
    const Shape s = shape_of(dm);
    Tensor tw = put(be, s, w), tm = put(be, s, m), tv = put(be, s, v), model = poisoned(be, DType::f32, s);
    be.adamw(tw, tm, tv, put(be, s, g), h, model);
    return Result{get(be, tw), get(be, tm), get(be, tv), get(be, model)};
  });
}

/// A weight and its "quantized" value: q on a 2^-3 grid near w, prev and
/// prev_q one small step away, so snaps and direction changes happen.
struct OscInputs {
  std::vector<float> w, q, prev, prev_q, dist_w, dist_q;
};
OscInputs osc_inputs(Rng& r, size_t n) {
  OscInputs o;
  o.w = plain(r, n, 1);
  for (float x : o.w) {
    const float q = std::round(x * 8.0f) / 8.0f;
    o.q.push_back(q);
    o.prev.push_back(r.chance(20) ? x : x + finite_value(r, -6));
    o.prev_q.push_back(q + float(int(r.below(3)) - 1) / 8.0f);
  }
  o.dist_w = nonnegative(plain(r, n, -2));
  o.dist_q = nonnegative(plain(r, n, -1));
  for (size_t i = 0; i < n; ++i)
    if (r.chance(10)) o.dist_w[i] = 0.0f;
  return o;
}

void verify_deosc(Ctx& c, Rng& r, int) {
  const size_t G = 1 + r.below(3), N = 1 + r.below(16), K = 1 + r.below(40), n = G * N * K;
  const OscInputs in = osc_inputs(r, n);
  const bool window_end = r.coin();
  static constexpr float ratios[] = {0.5f, 1.0f, 2.0f};
  const float ratio = pick(r, ratios);
  run_case(c, Op::DeOsc, dims({G, N, K}), std::string(window_end ? "window end" : "observe") + " ratio " +
                                             std::to_string(ratio), [&](Backend& be) {
    const Shape s{G, N, K};
    Tensor w = put(be, s, in.w), prev = put(be, s, in.prev), prev_q = put(be, s, in.prev_q),
           dw = put(be, s, in.dist_w), dq = put(be, s, in.dist_q);
    Tensor snaps = be.alloc(DType::u32, s);
    be.fill_zero(snaps);
    const int64_t snapped = be.deosc_update(w, put(be, s, in.q), prev, prev_q, dw, dq, window_end, ratio, &snaps);
    return Result{scalar(snapped), get(be, w), get(be, prev), get(be, prev_q), get(be, dw), get(be, dq), get(be, snaps)};
  });
}

void verify_osc_metrics(Ctx& c, Rng& r, int k) {
  const size_t G = 1 + r.below(3), N = 1 + r.below(16), K = 1 + r.below(40), n = G * N * K;
  const OscInputs in = osc_inputs(r, n);
  std::vector<float> ema(n);
  std::vector<uint8_t> last_dir(n);
  std::vector<uint32_t> flips(n);
  for (size_t i = 0; i < n; ++i) {
    ema[i] = r.chance(30) ? 0.01f : r.unit() * 0.1f;  // 0.01: the ema_frac_above threshold itself
    static constexpr uint8_t dirs[] = {0xFF, 0, 1};  // int8 -1, 0, +1
    last_dir[i] = pick(r, dirs);
    flips[i] = uint32_t(r.below(20));
  }
  const bool window_end = r.coin();
  const float momentum = r.coin() ? 0.01f : 0.1f;
  const bool deferred = k % 2 == 1;  // odd cases: osc_update_deferred, delivered by resolve_deferred
  run_case(c, Op::OscMetrics, dims({G, N, K}), std::string(window_end ? "window end" : "step") + " momentum " +
                                                 std::to_string(momentum) + (deferred ? " deferred" : ""),
           [&](Backend& be) {
    const Shape s{G, N, K};
    Backend::OscState st{put(be, s, in.prev), put(be, s, in.prev_q), put(be, s, in.dist_w), put(be, s, in.dist_q),
                         put(be, s, ema),     put(be, s, last_dir),  put(be, s, flips)};
    Backend::OscStep o;
    if (deferred) {
      const DeferredScope scope(be);
      be.osc_update_deferred(put(be, s, in.w), put(be, s, in.q), st, momentum, window_end, &o);
      be.resolve_deferred();
    } else {
      o = be.osc_update(put(be, s, in.w), put(be, s, in.q), st, momentum, window_end);
    }
    return Result{part(std::vector<uint64_t>{o.flips, o.flips_total}),
                  part(std::vector<double>{o.ema_mean, o.ema_frac_above, o.dist_ratio_mean}),
                  get(be, st.prev_w), get(be, st.prev_q), get(be, st.dist_w), get(be, st.dist_q), get(be, st.ema),
                  get(be, st.last_dir), get(be, st.flips)};
  });
}

// ------------------------------------------------------------ the table of ops
struct Family {
  Op op;
  const char* name;
  void (*run)(Ctx&, Rng&, int);
};
// One family per Backend::Op, from the op list (backend_ops.hpp): a family
// without its verify_<name> does not compile.
const Family kFamilies[] = {
#define MXSIM_FAMILY(Family, name) {Op::Family, #name, verify_##name},
    MXSIM_BACKEND_FAMILIES(MXSIM_FAMILY)
#undef MXSIM_FAMILY
};
static_assert(sizeof(kFamilies) / sizeof(kFamilies[0]) == size_t(Op::kCount), "one family per Backend::Op");

/// The seed of case k of an op: inputs of one op do not depend on which other
/// ops run (--op NAME reproduces a row of a full run).
uint64_t case_seed(uint64_t seed, Op op, int k) {
  Rng r(seed ^ (uint64_t(op) << 40) ^ (uint64_t(uint32_t(k)) << 8));
  r.next();
  return r.next();
}

}  // namespace

const char* verify_op_name(Backend::Op op) {
  for (const Family& f : kFamilies)
    if (f.op == op) return f.name;
  return "?";
}
std::vector<std::string> verify_op_names() {
  std::vector<std::string> v;
  for (const Family& f : kFamilies) v.emplace_back(f.name);
  return v;
}
std::optional<Backend::Op> verify_op_from_name(std::string_view name) {
  for (const Family& f : kFamilies)
    if (name == f.name) return f.op;
  return std::nullopt;
}

std::vector<VerifyRow> verify_backends(Backend& reference, Backend& candidate, const VerifyOptions& o) {
  if (o.cases < 1) throw std::invalid_argument("verify_backends: cases must be >= 1, got " + std::to_string(o.cases));
  if (!o.op.empty() && !verify_op_from_name(o.op)) {
    std::string known;
    for (const std::string& n : verify_op_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("verify_backends: unknown op '" + o.op + "' (known: " + known + ")");
  }
  std::vector<VerifyRow> rows;
  Ctx c{reference, candidate, rows};
  for (const Family& f : kFamilies) {
    if (!o.op.empty() && o.op != f.name) continue;
    for (int k = 0; k < o.cases; ++k) {
      Rng r(case_seed(o.seed, f.op, k));
      try {
        f.run(c, r, k);
      } catch (const std::exception& e) {
        // Making the inputs goes through the reference (quantized operands):
        // its failure is a failure of the run, reported as one.
        VerifyRow row;
        row.op = f.name;
        row.shape = "case " + std::to_string(k);
        row.mismatches = 1;
        row.first_mismatch = 0;
        row.note = std::string("making the inputs failed on the reference: ") + e.what();
        rows.push_back(row);
      }
    }
  }
  return rows;
}

}  // namespace mxsim
