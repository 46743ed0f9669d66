// Fast bit-exact kernels for MX (E8M0-scaled) block quantization with RNE.
//
// Per block the reference (quantize.cpp) does: amax = max |x| by FP32 bits,
// byte = e8m0_scale(rule, amax), then encode(x, s = byte - 127) per element.
// Here the same three steps run on whole rows at a time with loops the
// compiler vectorizes (compiled for AVX-512, AVX2 and the baseline; the
// dispatch point of cpu_path.hpp picks one), and the element rounding uses FP32 arithmetic instead of the integer
// routine. Why that gives the same bits:
//
// 1. Scaling. a = |x| * 2^-s is formed by one FP32 multiply with m = 2^-s,
//    s in [-127, 127], so m is exact (2^-127 as an FP32 subnormal, pow2f).
//    The real product has the <= 24 significant bits of x, so it is exact
//    whenever it is >= 2^-126 (normal, below overflow: |x| <= amax and every
//    rule gives amax * 2^-s < 2^(emax+1); the lower clamp s >= -127 only makes
//    m smaller). When the real product is < 2^-126 the FP32 result may be
//    rounded, but RNE is monotone and 2^-126 is representable, so it stays
//    <= 2^-126. Every element format taken here rounds anything below half its
//    smallest subnormal to zero, and that half is >= 2^-17 (E5M2) >> 2^-126:
//    the code is a signed zero on both sides. The sign is taken from x, so -0
//    and negative values that round to zero keep their sign, as in encode().
// 2. Saturation. RNE with Overflow::Saturate sends everything above the
//    largest finite value maxe to maxe (values that round up past maxe give
//    the overflow code = max; values in between round down to maxe), so
//    clamping a to maxe before rounding is the same.
// 3. Rounding a (finite, 0 <= a <= maxe) to a format with M >= 1 mantissa
//    bits, smallest normal 2^emin: let E = max(floor(log2 a), emin) and
//    magic = 2^(E + 23 - M). Then magic + a lies in [magic, 2 magic] (a <
//    2^(E+1) <= magic as M <= 22), where the FP32 ulp is 2^(E-M): exactly the
//    element's spacing in binade E (its subnormal spacing when E = emin). One
//    FP32 add (RNE) therefore rounds a onto the element grid, ties to even
//    (magic's mantissa is 0, so r's last bit is k's parity below), and
//    k = bits(r) - bits(magic) = RNE(a) / 2^(E-M) in [0, 2^(M+1)] (r stays in
//    magic's binade, where bit patterns step by one per ulp). The code is ((E - emin) << M) + k: for E = emin that is k (a
//    subnormal, or 2^M = the smallest normal after rounding up); above, k
//    in [2^M, 2^(M+1)] adds the implicit bit, so a carry to 2^(M+1) lands on
//    the next binade's first code. All of it is on FP32 bit patterns:
//    bits(2^E) = max(a & 0x7F800000, bits(2^emin)).
// 4. Blocks whose amax is NaN or Inf get the NaN scale 0xFF and zero codes,
//    as in the reference. Ragged edges: missing elements count as zeros and
//    are never written; an odd row leaves its last high nibble 0.
#include "quantize_fast.hpp"

#include "cpu_dispatch.hpp"
#include "quantize_fast_enc.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

namespace mxsim::emu {
namespace fast {
namespace {

std::atomic<bool> g_enabled{true};

constexpr size_t kBlock = 32;

/// max |x| over 32 elements, as FP32 bits (NaN/Inf compare above all finite).
[[gnu::always_inline]] inline uint32_t block_amax(const float* x) {
  uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (size_t i = 0; i < kBlock; ++i) m = std::max(m, f32_bits(x[i]) & 0x7FFFFFFFu);
  return m;
}
/// BF16: the same on the 16-bit patterns (twice the lanes per vector).
[[gnu::always_inline]] inline uint32_t block_amax(const uint16_t* x) {
  uint16_t m = 0;
#pragma omp simd reduction(max : m)
  for (size_t i = 0; i < kBlock; ++i) m = std::max(m, uint16_t(x[i] & 0x7FFFu));
  return uint32_t(m) << 16;
}

/// Bytes one block of 32 codes takes.
template <bool Packed>
constexpr size_t kOutBlock = Packed ? kBlock / 2 : kBlock;

/// 32 codes of FP32 input into dst (kOutBlock bytes).
template <bool Packed>
[[gnu::always_inline]] inline void block_encode(const float* x, float mul, const Enc enc, uint8_t* dst) {
  uint32_t c[kBlock];  // 32-bit lanes: GCC sizes vectors by the narrowest type in the loop
#pragma omp simd
  for (size_t i = 0; i < kBlock; ++i) c[i] = enc(f32_bits(x[i]), mul);
  if constexpr (Packed) {
    // float4_e2m1fn_x2: element 2i in the low nibble.
    for (size_t i = 0; i < kBlock / 2; ++i) dst[i] = uint8_t(c[2 * i] | (c[2 * i + 1] << 4));
  } else {
    for (size_t i = 0; i < kBlock; ++i) dst[i] = uint8_t(c[i]);
  }
}

/// 32 codes of BF16 input. The input is read as 32-bit words: word i holds
/// element 2i in its low half and 2i+1 in its high half (little endian), so
/// (w << 16) and (w & 0xFFFF0000) are both elements' FP32 bits with no
/// shuffles, and the pair's codes come out side by side for the store
/// (element 2i in the low nibble / low byte).
template <bool Packed>
[[gnu::always_inline]] inline void block_encode(const uint16_t* x, float mul, const Enc enc, uint8_t* dst) {
  static_assert(std::endian::native == std::endian::little);
  constexpr uint32_t hi_shift = Packed ? 4 : 8;
  uint32_t w[kBlock / 2], pair[kBlock / 2];
  std::memcpy(w, x, sizeof w);
#pragma omp simd
  for (size_t i = 0; i < kBlock / 2; ++i) pair[i] = enc(w[i] << 16, mul) | (enc(w[i] & 0xFFFF0000u, mul) << hi_shift);
  if constexpr (Packed) {
    for (size_t i = 0; i < kBlock / 2; ++i) dst[i] = uint8_t(pair[i]);
  } else {
    uint16_t out[kBlock / 2];
    for (size_t i = 0; i < kBlock / 2; ++i) out[i] = uint16_t(pair[i]);
    std::memcpy(dst, out, sizeof out);
  }
}

/// Scale bytes for BF16 input. A BF16 block's amax is one of 2^15 patterns,
/// so e8m0_scale (the shared rule; RCEIL's per-call reciprocal and CEIL's
/// tests are slow next to 32 element codes) is evaluated once per pattern
/// into a table per (rule, format), filled on first use. FP32 input calls
/// the rule per block.
const uint8_t* bf16_scale_table(ScaleRule rule, Format f) {
  constexpr int kRules = 4;
  static std::once_flag once[kRules][kNumFormats];
  static std::array<uint8_t, 1u << 15> table[kRules][kNumFormats];
  const int r = int(rule), fi = int(f);
  if (r >= kRules) return nullptr;  // a rule added later: call it per block
  std::call_once(once[r][fi], [&] {
    const FormatSpec fs = spec_of(f);
    for (uint32_t h = 0; h < (1u << 15); ++h) table[r][fi][h] = e8m0_scale(rule, h << 16, fs);
  });
  return table[r][fi].data();
}

/// Quantize one band of `nrows` rows (1 for 1x32 blocks, <= 32 for 32x32
/// tiles) sharing one row of scale bytes. `amax` and `mul` are scratch of
/// nb entries. Packed (E2M1) is a template parameter so every store has a
/// constant size.
template <bool Packed, class T>
[[gnu::always_inline]] inline void band(const T* x, size_t nrows, size_t cols, const Elem& e, ScaleRule rule,
                                        const uint8_t* table, uint8_t* data, size_t row_bytes, uint8_t* scales,
                                        uint32_t* amax, float* mul) {
  constexpr size_t OB = kOutBlock<Packed>;
  const size_t nb = (cols + kBlock - 1) / kBlock, full = cols / kBlock, tail = cols - full * kBlock;
  const Enc enc = enc_of(e);
  T pad[kBlock];
  // Pass 1: amax per block (per column of blocks for tiles).
  std::fill(amax, amax + nb, 0u);
  for (size_t r = 0; r < nrows; ++r) {
    const T* row = x + r * cols;
    for (size_t b = 0; b < full; ++b) amax[b] = std::max(amax[b], block_amax(row + b * kBlock));
    if (tail) {
      std::fill(pad, pad + kBlock, T(0));
      std::copy(row + full * kBlock, row + cols, pad);
      amax[full] = std::max(amax[full], block_amax(pad));
    }
  }
  // Scale bytes from the shared rule (scale_rule.hpp), directly or through
  // its BF16 table, and the exact multipliers 2^-s (note 1).
  for (size_t b = 0; b < nb; ++b) {
    scales[b] = table ? table[amax[b] >> 16] : e8m0_scale(rule, amax[b], e.spec);
    mul[b] = pow2f(127 - int(scales[b]));
  }
  // Pass 2: codes; NaN-scale blocks keep zero codes (note 4). The ragged last
  // block goes through a zero-padded copy and stores only its own bytes.
  for (size_t r = 0; r < nrows; ++r) {
    const T* row = x + r * cols;
    uint8_t* out = data + r * row_bytes;
    for (size_t b = 0; b < full; ++b) {
      if (scales[b] == kE8M0Nan)
        std::memset(out + b * OB, 0, OB);
      else
        block_encode<Packed>(row + b * kBlock, mul[b], enc, out + b * OB);
    }
    if (tail) {
      uint8_t codes[OB] = {};
      std::fill(pad, pad + kBlock, T(0));
      std::copy(row + full * kBlock, row + cols, pad);
      if (scales[full] != kE8M0Nan) block_encode<Packed>(pad, mul[full], enc, codes);
      std::memcpy(out + full * OB, codes, Packed ? (tail + 1) / 2 : tail);
    }
  }
}

template <bool Packed, class T>
[[gnu::always_inline]] inline void run_as(const T* x, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                                          uint8_t* data, uint8_t* scales) {
  const Elem e = elem_of(spec.elem);
  const size_t br = size_t(spec.block_rows);
  const size_t nb = (cols + kBlock - 1) / kBlock, nbr = (rows + br - 1) / br;
  const size_t row_bytes = Packed ? (cols + 1) / 2 : cols;
  std::vector<uint32_t> amax(nb);
  std::vector<float> mul(nb);
  const uint8_t* table = std::is_same_v<T, uint16_t> ? bf16_scale_table(spec.rule, spec.elem) : nullptr;
  for (size_t g = 0; g < groups; ++g)
    for (size_t bi = 0; bi < nbr; ++bi) {
      const size_t r0 = bi * br, nrows = std::min(br, rows - r0);
      band<Packed>(x + (g * rows + r0) * cols, nrows, cols, e, spec.rule, table, data + (g * rows + r0) * row_bytes,
                   row_bytes, scales + (g * nbr + bi) * nb, amax.data(), mul.data());
    }
}

template <class T>
[[gnu::always_inline]] inline void run(const T* x, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                                       uint8_t* data, uint8_t* scales) {
  if (spec.elem == Format::E2M1)
    run_as<true>(x, groups, rows, cols, spec, data, scales);
  else
    run_as<false>(x, groups, rows, cols, spec, data, scales);
}

}  // namespace

bool takes(const QuantSpec& s, Axis axis) {
  if (!g_enabled.load(std::memory_order_relaxed)) return false;
  const bool fmt = has_role(s.elem, kRoleOcpMx);
  const bool rowwise = s.block_rows == 1 && s.block_cols == 32 && axis == Axis::Cols;
  const bool tile = s.block_rows == 32 && s.block_cols == 32;
  return fmt && (rowwise || tile) && s.scale_kind == ScaleKind::E8M0 && s.round == RoundMode::RNE &&
         !s.hadamard16 && s.fixed_scale == 0.0f;
}

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

// One body per CPU path (cpu_path.hpp): the same loops compiled for AVX-512,
// AVX2 and the baseline, chosen by the dispatch point, so that a forced path
// (MXSIM_CPU_PATH) is the code that runs and the tests can run all three.
#define MXSIM_QUANT_PATH(NAME, TARGET)                                                                   \
  TARGET void NAME##_bf16(const uint16_t* x, size_t groups, size_t rows, size_t cols, const QuantSpec& spec, \
                          uint8_t* data, uint8_t* scales) {                                             \
    run(x, groups, rows, cols, spec, data, scales);                                                     \
  }                                                                                                     \
  TARGET void NAME##_f32(const float* x, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,   \
                         uint8_t* data, uint8_t* scales) {                                              \
    run(x, groups, rows, cols, spec, data, scales);                                                     \
  }
namespace {
MXSIM_QUANT_PATH(q_avx512, __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
MXSIM_QUANT_PATH(q_avx2, __attribute__((target("avx2,fma"))))
MXSIM_QUANT_PATH(q_scalar, )
}  // namespace
#undef MXSIM_QUANT_PATH

void quantize_bf16_raw(const uint16_t* x, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                       uint8_t* data, uint8_t* scales) {
  switch (cpu_path()) {
    case CpuPath::Avx512: q_avx512_bf16(x, groups, rows, cols, spec, data, scales); break;
    case CpuPath::Avx2: q_avx2_bf16(x, groups, rows, cols, spec, data, scales); break;
    case CpuPath::Scalar: q_scalar_bf16(x, groups, rows, cols, spec, data, scales); break;
  }
  note_kernel(KernelSlot::Quantize, kernel_name(KernelSlot::Quantize, cpu_path()));
}

void quantize_f32_raw(const float* x, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                      uint8_t* data, uint8_t* scales) {
  switch (cpu_path()) {
    case CpuPath::Avx512: q_avx512_f32(x, groups, rows, cols, spec, data, scales); break;
    case CpuPath::Avx2: q_avx2_f32(x, groups, rows, cols, spec, data, scales); break;
    case CpuPath::Scalar: q_scalar_f32(x, groups, rows, cols, spec, data, scales); break;
  }
  note_kernel(KernelSlot::Quantize, kernel_name(KernelSlot::Quantize, cpu_path()));
}

namespace {
QuantizedTensor make_result(size_t G, size_t R, size_t C, const QuantSpec& spec) {
  QuantizedTensor q;
  q.spec = spec;
  q.groups = G;
  q.rows = R;
  q.cols = C;
  q.transposed = false;
  const size_t br = size_t(spec.block_rows);
  q.data = Bytes3::from_shape({G, R, q.row_bytes()});
  q.scale_bytes = Bytes3::from_shape({G, (R + br - 1) / br, (C + kBlock - 1) / kBlock});
  return q;
}
}  // namespace

bool takes_staged(const QuantSpec& s, Axis axis) {
  if (!g_enabled.load(std::memory_order_relaxed)) return false;
  const bool fmt = has_role(s.elem, kRoleOcpMx);
  return fmt && s.block_rows == 1 && s.block_cols == 32 && (axis == Axis::Rows || s.hadamard16) &&
         s.scale_kind == ScaleKind::E8M0 && s.round == RoundMode::RNE && s.fixed_scale == 0.0f;
}

std::optional<QuantizedTensor> try_quantize(const Tensor3f& x, const QuantSpec& spec, Axis axis) {
  if (takes(spec, axis)) {
    QuantizedTensor q = make_result(x.shape(0), x.shape(1), x.shape(2), spec);
    quantize_f32_raw(x.data(), q.groups, q.rows, q.cols, spec, q.data.data(), q.scale_bytes.data());
    return q;
  }
  if (!takes_staged(spec, axis)) return std::nullopt;
  // 1x32 blocks along the logical rows (wgrad operands) and/or with the
  // Hadamard transform: the reference quantizes a storage-ordered copy (the
  // transpose for Axis::Rows) after hadamard16_inplace on every 16 storage
  // columns (quantize.cpp). The same copy, made here with the same
  // hadamard16_inplace, goes through the row kernel: the same bits.
  const size_t G = x.shape(0), R = x.shape(1), C = x.shape(2);
  const bool tr = axis == Axis::Rows;
  const size_t SR = tr ? C : R, SC = tr ? R : C;
  if (spec.hadamard16 && SC % 16 != 0) return std::nullopt;  // the reference reports the error
  std::vector<float> buf(G * SR * SC);
  const float* src = x.data();
  for (size_t g = 0; g < G; ++g) {
    float* dst = buf.data() + g * SR * SC;
    const float* sg = src + g * R * C;
    if (tr) {
      constexpr size_t T = 32;  // blocked transpose
      for (size_t r0 = 0; r0 < R; r0 += T)
        for (size_t c0 = 0; c0 < C; c0 += T)
          for (size_t r = r0; r < std::min(R, r0 + T); ++r)
            for (size_t c = c0; c < std::min(C, c0 + T); ++c) dst[c * SC + r] = sg[r * C + c];
    } else {
      std::copy(sg, sg + R * C, dst);
    }
    if (spec.hadamard16)
      for (size_t r = 0; r < SR; ++r)
        for (size_t c = 0; c < SC; c += 16) hadamard16_inplace(dst + r * SC + c, spec.hadamard16_signs);
  }
  QuantizedTensor q;
  q.spec = spec;
  q.groups = G;
  q.rows = R;
  q.cols = C;
  q.transposed = tr;
  q.data = Bytes3::from_shape({G, SR, q.row_bytes()});
  q.scale_bytes = Bytes3::from_shape({G, SR, (SC + kBlock - 1) / kBlock});
  quantize_f32_raw(buf.data(), G, SR, SC, spec, q.data.data(), q.scale_bytes.data());
  return q;
}

}  // namespace fast

QuantizedTensor quantize_bf16(const uint16_t* data, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                              Axis axis) {
  // The tensors built for this shape (the FP32 copy of the reference path, the codes and
  // scales) index with signed strides: the product of the extents, zero extents counted as 1
  // (an empty [0, R, C] still gets the strides R * C and C), must fit, in bytes of FP32, in a
  // ptrdiff_t. Anything larger is no tensor a machine can hold; reject it before building.
  {
    constexpr uint64_t kMaxElems = uint64_t(PTRDIFF_MAX) / sizeof(float);
    uint64_t prod = 1;
    bool over = false;
    for (const size_t e : {groups, rows, cols}) {
      const uint64_t f = e == 0 ? 1 : uint64_t(e);
      if (f > kMaxElems / prod) over = true;
      else prod *= f;
    }
    if (over)
      throw std::invalid_argument("quantize_bf16: shape [" + std::to_string(groups) + ", " + std::to_string(rows) +
                                  ", " + std::to_string(cols) +
                                  "] overflows: its extents (zeros counted as 1) multiply to more than 2^61 elements");
  }
  const size_t n = groups * rows * cols;
  if (data == nullptr && n != 0) throw std::invalid_argument("quantize_bf16: null data for a non-empty tensor");
  if (fast::takes(spec, axis)) {
    QuantizedTensor q = fast::make_result(groups, rows, cols, spec);
    fast::quantize_bf16_raw(data, groups, rows, cols, spec, q.data.data(), q.scale_bytes.data());
    return q;
  }
  // Reference path: BF16 widens to FP32 exactly.
  Tensor3f x = Tensor3f::from_shape({groups, rows, cols});
  float* p = x.data();
  for (size_t i = 0; i < n; ++i) p[i] = bf16_value(data[i]);
  return quantize(x, spec, axis);
}

}  // namespace mxsim::emu
