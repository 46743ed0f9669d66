// The block-dot classes of docs/numerics.md §5, written once for the CPU
// emulator (emu/src/gemm_reference.cpp, gemm_exact.hpp) and the GPU kernels
// (backends/hip/src/gemm_*.hip).
//
// Two layers:
//  * per-block steps: the exact integer MX block scaled into the FP32
//    accumulator (mx-exact), the truncated fused group of §5.3 (mx-f13,
//    fp8-chunk128, bf16-f25), the mx-f13 block add, the fp8-chunk128
//    promotion, the output rounding; plus the facts the fast paths share
//    (which elements are MX GEMM elements, int_shift, the safe-scale test);
//  * per-output-element walks over K in the contract's order (ascending, in
//    blocks of 32 / chunks of 128 / groups of 16), templated on operand row
//    accessors, which the emulator's reference and the simple GPU kernels
//    call as they are.
//
// All arithmetic is integer or IEEE FP32 with explicit fmaf where the
// contract says so: the results do not depend on the compiler (host
// -ffp-contract=off, device -fmad=false). The exact values fit fixed-width
// integers: E2M1/E2M3 block dots are below 2^17, fused-group terms truncated
// to 2^(E - F) are below 2^(F + 2), so a group of <= 32 terms sums in int64.
// tests/test_gemm_block.cpp checks every step against arbitrary-precision
// arithmetic (Boost.Multiprecision) on adversarial inputs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <math.h>  // fmaf on the host; a builtin on the device

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"
#include "mxsim/hd.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"

#include <string>

namespace mxsim::hd {

// ---- operand facts ---------------------------------------------------------

// Which element formats each class takes is the format table's roles
// (format.hpp): E8M0-scaled operands have OCP MX elements (kRoleOcpMx; the
// quantizer takes the AMD FNUZ formats too, the GEMM contract does not define
// them yet), mx-exact pairs kRoleMxExact elements, FP32-scaled operands OCP FP8.

/// v * 2^int_shift(f) is an integer for every value v of an mx-exact element
/// format: 2 x E2M1 lies in [-12, 12], 8 x E2M3 in [-60, 60].
MXSIM_HD constexpr int int_shift(Format f) { return f == Format::E2M1 ? 1 : 3; }

/// The integer image decode(code) * 2^int_shift of an mx-exact element.
MXSIM_HD inline int32_t mx_int_value(const FormatSpec& f, int shift, uint32_t code) {
  return int32_t(decode(f, code) * pow2f(shift));  // exact: a small integer
}

/// E8M0 bytes whose 2^(s - 127) times any block dot or element scaling the
/// fast paths use stays a normal FP32 power of two (|s - 127| <= 50, not NaN):
/// there a plain multiply is exact, outside it they take the exact step below.
MXSIM_HD constexpr bool e8m0_scale_safe(uint8_t s) { return s != 0xFF && s >= 127 - 50 && s <= 127 + 50; }

/// The block-dot class of an operand pair (numerics.md §5.2).
enum class GemmClass : uint8_t { MxExact, MxF13, Fp8Chunk128, Bf16F25, Nvfp4Exact };

MXSIM_HD constexpr const char* gemm_class_name(GemmClass c) {
  switch (c) {
    case GemmClass::MxExact: return "mx-exact";
    case GemmClass::MxF13: return "mx-f13";
    case GemmClass::Fp8Chunk128: return "fp8-chunk128";
    case GemmClass::Bf16F25: return "bf16-f25";
    case GemmClass::Nvfp4Exact: return "nvfp4-exact";
  }
  return "?";
}

/// Host: the class of a pair of operand specs (elem == BF16 means an unscaled
/// BF16 operand). Returns false and sets *why for pairs the contract does not
/// define (BF16 with a quantized operand, NVFP4 with anything but NVFP4, E8M0
/// with FP32 scales, FP32 scales on other than E4M3/E5M2, MX elements that
/// are not OCP MX formats).
inline bool gemm_class_of(const QuantSpec& a, const QuantSpec& b, GemmClass& out, std::string* why = nullptr) {
  auto no = [&](const std::string& m) {
    if (why) *why = m;
    return false;
  };
  const bool ab = a.elem == Format::BF16, bb = b.elem == Format::BF16;
  if (ab || bb) {
    if (!(ab && bb)) return no("BF16 operands pair only with BF16 operands");
    out = GemmClass::Bf16F25;
    return true;
  }
  if (a.scale_kind == ScaleKind::UE4M3 || b.scale_kind == ScaleKind::UE4M3) {
    if (a.scale_kind != b.scale_kind) return no("NVFP4 operands (UE4M3 scales) pair only with NVFP4 operands");
    if (a.elem != Format::E2M1 || b.elem != Format::E2M1) return no("UE4M3-scaled (NVFP4) elements must be E2M1");
    out = GemmClass::Nvfp4Exact;
    return true;
  }
  if (a.scale_kind == ScaleKind::E8M0 && b.scale_kind == ScaleKind::E8M0) {
    if (!has_role(a.elem, kRoleOcpMx) || !has_role(b.elem, kRoleOcpMx))
      return no("E8M0-scaled elements must be E2M1, E2M3, E3M2, E4M3 or E5M2");
    out = has_role(a.elem, kRoleMxExact) && has_role(b.elem, kRoleMxExact) ? GemmClass::MxExact : GemmClass::MxF13;
    return true;
  }
  if (a.scale_kind == ScaleKind::FP32 && b.scale_kind == ScaleKind::FP32) {
    const unsigned ocp_fp8 = kRoleOcpMx | kRoleFp8;
    if (!has_role(a.elem, ocp_fp8) || !has_role(b.elem, ocp_fp8)) return no("FP32-scaled operands must be E4M3 or E5M2");
    out = GemmClass::Fp8Chunk128;
    return true;
  }
  return no("operand recipes do not form a pair the contract defines (both E8M0-scaled MX, both FP32-scaled FP8, "
            "or both BF16)");
}

// ---- exact values ----------------------------------------------------------

MXSIM_HD inline bool f32_is_nan(float x) { return (f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }

/// Index of the highest set bit of a non-zero 64-bit word.
MXSIM_HD inline int msb64(uint64_t v) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return 63 - __clzll((long long)v);
#else
  return 63 - __builtin_clzll(v);
#endif
}

enum class ExKind : uint8_t { Finite, NaN, PosInf, NegInf };

/// An exact binary value sig * 2^exp (zero is sig = 0, unsigned), or a special.
struct ExactVal {
  int64_t sig = 0;
  int exp = 0;
  ExKind kind = ExKind::Finite;
};

MXSIM_HD inline ExactVal exact_of_float(float x) {
  const uint32_t b = f32_bits(x);
  const uint32_t ef = (b >> 23) & 0xFFu, mf = b & 0x7FFFFFu;
  ExactVal v;
  if (ef == 0xFFu) {
    v.kind = mf ? ExKind::NaN : ((b >> 31) ? ExKind::NegInf : ExKind::PosInf);
    return v;
  }
  v.sig = int64_t(ef ? (mf | 0x800000u) : mf);
  v.exp = (ef ? int(ef) : 1) - 150;
  if (b >> 31) v.sig = -v.sig;
  return v;
}

/// Exact value of an element code (BF16: its 16-bit pattern).
MXSIM_HD inline ExactVal exact_elem(const FormatSpec& f, uint32_t code) { return exact_of_float(decode(f, code)); }

/// floor(log2 |v|) of a finite value, -126 for zero (MMA-Sim's placeholder).
MXSIM_HD inline int exact_log2(const ExactVal& v) {
  if (v.sig == 0) return -126;
  return v.exp + msb64(uint64_t(v.sig < 0 ? -v.sig : v.sig));
}

/// The edges of a fused group, where readings of the hardware differ
/// (numerics.md §5.3): where a subnormal input aligns, whether zeros take
/// part in E, how low the window may reach, and what the RZ gives at the two
/// ends of the FP32 range.
struct FusedEdges {
  int align_floor;     ///< a finite input's alignment exponent is at least this; kNoAlignFloor: floor(log2 |x|)
  bool zeros_in_max;   ///< zero products and a zero C count as -126 in E; false: they take no part
  bool overflow_inf;   ///< a result of magnitude >= 2^128 is +-Inf; false: the largest finite value
  bool underflow_pos;  ///< a non-zero sum that truncates to zero is +0; false: a zero of its sign
  int e_floor;         ///< E is at least this where a term takes part (window lsb >= e_floor - F); kNoAlignFloor: none
};
constexpr int kNoAlignFloor = -(1 << 20);
/// E before any input is seen (no input takes part): every term is zero.
constexpr int kNoTerm = -(1 << 22);

/// MMA-Sim's reading (arXiv:2511.10909, mmasim/simulator/arithmetic.py):
/// subnormals normalized, zeros at the placeholder -126, RZ overflow to the
/// largest finite value. The FP8 classes (mx-f13, fp8-chunk128) use it. There
/// only the subnormal rule can change a result: their non-zero products are
/// at least 2^-32, so the zero rule never sets E, and their group sums stay
/// far below 2^128 (32 x 57344^2 < 2^37), so RZ never overflows. Subnormal
/// E4M3 / E5M2 elements have not been probed on the silicon yet.
MXSIM_HD constexpr FusedEdges mma_sim_edges() { return {kNoAlignFloor, true, false, false, kNoAlignFloor}; }

/// Hopper wgmma BF16 as an H200 computes it (mxsim_gpu_wgmma_probe,
/// 2026-12-02; docs/numerics.md §5.3): a subnormal BF16 element or FP32 C
/// aligns at -126, its exponent field, not at floor(log2 |x|); zeros take no
/// part in E; |result| >= 2^128 is +-Inf; a sum that truncates to zero is +0;
/// E is at least -133 (BF16's smallest subnormal exponent), so the window's
/// lsb never goes below 2^-158 (measured on groups of subnormal elements
/// whose exact sum lay just below a multiple of 2^-149: test_gemm_bf16_h200).
/// The class bf16-f25.
MXSIM_HD constexpr FusedEdges hopper_bf16_edges() { return {-126, false, true, true, -133}; }

/// The alignment exponent of a zero product or a zero C: MMA-Sim's
/// placeholder -126, or kNoTerm where zeros take no part in E.
MXSIM_HD constexpr int zero_align(const FusedEdges& x) { return x.zeros_in_max ? -126 : kNoTerm; }

/// The window lsb of a group whose largest alignment is E (not kNoTerm): every
/// term and C are truncated to multiples of 2^lsb.
MXSIM_HD constexpr int group_lsb(int E, int F, const FusedEdges& x) { return (E > x.e_floor ? E : x.e_floor) - F; }

/// One product of a fused group: its exact value and its alignment exponent
/// e(a) + e(b) (numerics.md §5.3; not floor(log2 |a b|), which may be one more),
/// each e at least `align_floor` (FusedEdges).
struct Term {
  ExactVal v;
  int align = -126;
};

MXSIM_HD inline Term product_term(const ExactVal& a, const ExactVal& b, int align_floor = kNoAlignFloor) {
  Term t;
  if (a.kind == ExKind::NaN || b.kind == ExKind::NaN) {
    t.v.kind = ExKind::NaN;
    return t;
  }
  if (a.kind != ExKind::Finite || b.kind != ExKind::Finite) {
    const auto sgn = [](const ExactVal& x) {
      return x.kind == ExKind::PosInf ? 1 : x.kind == ExKind::NegInf ? -1 : (x.sig > 0) - (x.sig < 0);
    };
    const int s = sgn(a) * sgn(b);
    t.v.kind = s == 0 ? ExKind::NaN : (s > 0 ? ExKind::PosInf : ExKind::NegInf);  // Inf x 0 is NaN
    return t;
  }
  t.v.sig = a.sig * b.sig;
  t.v.exp = a.exp + b.exp;
  const int ea = exact_log2(a), eb = exact_log2(b);
  t.align = (ea > align_floor ? ea : align_floor) + (eb > align_floor ? eb : align_floor);
  return t;
}

/// sign(v) * floor(|v| / 2^lsb) (truncation toward zero to a multiple of
/// 2^lsb, in units of 2^lsb). Precondition: |v| < 2^(lsb + 62).
MXSIM_HD inline int64_t trunc_units(const ExactVal& v, int lsb) {
  if (v.sig == 0) return 0;
  const uint64_t m = uint64_t(v.sig < 0 ? -v.sig : v.sig);
  uint64_t r;
  if (v.exp >= lsb) {
    r = m << (v.exp - lsb);
  } else {
    const int sh = lsb - v.exp;
    r = sh >= 64 ? 0 : m >> sh;
  }
  return v.sig < 0 ? -int64_t(r) : int64_t(r);
}

/// S * 2^lsb rounded toward zero to `frac` fraction bits in FP32's exponent
/// range (frac = 23: FP32 with its subnormals; 13: e8m13, subnormal quantum
/// 2^-139). Exact zero is +0; a non-zero value below the quantum is a zero of
/// its sign (+0 with underflow_pos); from 2^128 on, the largest finite value
/// of that precision (+-Inf with overflow_inf).
MXSIM_HD inline float rz_to_frac(int64_t S, int lsb, int frac, bool overflow_inf = false, bool underflow_pos = false) {
  if (S == 0) return 0.0f;
  const uint32_t sign = S < 0 ? 0x80000000u : 0u;
  const uint64_t m = uint64_t(S < 0 ? -S : S);
  const int e = lsb + msb64(m);
  const int drop = 23 - frac;
  if (e > 127) return f32_from_bits(sign | (overflow_inf ? 0x7F800000u : 0x7F7FFFFFu & ~((1u << drop) - 1u)));
  const int q = (e > -126 ? e : -126) - frac;  // exponent of one unit of the result
  const int shift = q - lsb;
  const uint64_t kept = shift > 0 ? (shift >= 64 ? 0 : m >> shift) : m << -shift;
  if (kept == 0) return f32_from_bits(underflow_pos ? 0u : sign);
  if (e >= -126)  // normal: kept has its top bit at position frac
    return f32_from_bits(sign | (uint32_t(e + 127) << 23) | (uint32_t(kept - (uint64_t(1) << frac)) << drop));
  return f32_from_bits(sign | (uint32_t(kept) << drop));  // subnormal: kept * 2^-149 after the shift
}

/// The alignment exponent of the FP32 input c of a fused group (finite):
/// floor(log2 |c|) but at least x.align_floor; a zero c: -126, or kNoTerm
/// where zeros take no part.
MXSIM_HD inline int c_align(const ExactVal& cx, const FusedEdges& x) {
  if (cx.sig == 0) return zero_align(x);
  const int e = exact_log2(cx);
  return e > x.align_floor ? e : x.align_floor;
}

/// The truncated fused dot-product group (MMA-Sim; numerics.md §5.3): n
/// products term_at(0 .. n-1) (their alignment exponents built with
/// x.align_floor: product_term) and the FP32 input c. E = max of the
/// products' alignment exponents and c's (zeros: FusedEdges); every product
/// and c truncated toward zero to a multiple of 2^lsb (group_lsb: E - F, or
/// less deep under x.e_floor), summed exactly,
/// rounded toward zero to e8m13 (e8m13) or FP32 (ends: FusedEdges); all
/// terms zero gives +0. Specials: a NaN, Inf x 0, or +Inf with -Inf give
/// NaN; otherwise an Inf gives that Inf. term_at is called twice per
/// product (one pass for E, one for the sum).
template <class TermAt>
MXSIM_HD inline float fused_group(int n, const TermAt& term_at, float c, int F, bool e8m13,
                                  FusedEdges x = mma_sim_edges()) {
  const ExactVal cx = exact_of_float(c);
  bool nan = cx.kind == ExKind::NaN, pinf = cx.kind == ExKind::PosInf, ninf = cx.kind == ExKind::NegInf;
  const int zero_e = zero_align(x);
  int E = cx.kind == ExKind::Finite ? c_align(cx, x) : zero_e;
  for (int k = 0; k < n; ++k) {
    const Term t = term_at(k);
    nan |= t.v.kind == ExKind::NaN;
    pinf |= t.v.kind == ExKind::PosInf;
    ninf |= t.v.kind == ExKind::NegInf;
    const int ek = t.v.sig != 0 ? t.align : zero_e;
    if (t.v.kind == ExKind::Finite && ek > E) E = ek;
  }
  if (nan || (pinf && ninf)) return f32_from_bits(kCanonicalNan32);
  if (pinf) return f32_from_bits(0x7F800000u);
  if (ninf) return f32_from_bits(0xFF800000u);
  if (E == kNoTerm) return 0.0f;  // every term is zero: the exact zero
  const int lsb = group_lsb(E, F, x);
  int64_t S = trunc_units(cx, lsb);
  for (int k = 0; k < n; ++k) S += trunc_units(term_at(k).v, lsb);
  return rz_to_frac(S, lsb, e8m13 ? 13 : 23, x.overflow_inf, x.underflow_pos);
}

// ---- accumulator steps -----------------------------------------------------

/// RNE_fp32(acc + m * 2^e) with one rounding, for |m| < 2^24 and any e: the
/// value m * 2^e is never formed on its own. It is split as t * 2^e2 with
/// t = m * 2^e1 exact in FP32 and 2^e2 an FP32 power of two, and fmaf adds the
/// exact product to acc with one rounding. Exponents beyond [-298, 230] are
/// clamped: there |m * 2^e| is below a quarter of FP32's smallest subnormal
/// (the sum rounds as acc plus a tiny value of that sign) or above FLT_MAX
/// (it overflows), whatever the exact size.
MXSIM_HD inline float add_scaled_rne(float acc, int64_t m, int e) {
  if (m == 0) return acc + 0.0f;  // -0 becomes +0, as adding the exact zero does
  e = e < -298 ? -298 : (e > 230 ? 230 : e);
  const int e1 = e < -149 ? -149 : (e > 103 ? 103 : e);
  const float t = float(m) * pow2f(e1);  // exact: |m| < 2^24, 2^-149 <= quantum, below 2^127
  return fmaf(t, pow2f(e - e1), acc);
}

/// mx-exact block (numerics.md §5.2.1): acc + dot * 2^(sa + sb - 254 - shift),
/// one RNE; dot is the block's integer sum of int_shift-scaled products, shift
/// the sum of the two operands' int_shift. A NaN scale (0xFF) gives NaN.
MXSIM_HD inline float mx_exact_block(float acc, int32_t dot, uint8_t sa, uint8_t sb, int shift) {
  if (sa == 0xFF || sb == 0xFF) return f32_from_bits(kCanonicalNan32);
  return add_scaled_rne(acc, dot, int(sa) + int(sb) - 254 - shift);
}

/// mx-f13 block (numerics.md §5.2.2): acc + d * 2^(sa + sb - 254), one RNE,
/// d the block's e8m13 fused-group value. NaN scale gives NaN; a non-finite d
/// adds as IEEE arithmetic does (Inf, or NaN against the opposite Inf).
MXSIM_HD inline float mx_f13_block(float acc, float d, uint8_t sa, uint8_t sb) {
  if (sa == 0xFF || sb == 0xFF) return f32_from_bits(kCanonicalNan32);
  const ExactVal v = exact_of_float(d);
  if (v.kind != ExKind::Finite) return acc + d;
  return add_scaled_rne(acc, v.sig, v.exp + int(sa) + int(sb) - 254);
}

/// A UE4M3 block scale as nvfp4-exact multiplies it: m * 2^e with a 4-bit
/// significand m (0 for a zero scale), or NaN. The byte decodes as E4M3 (a
/// UE4M3 byte never has its sign bit set by mxsim; a foreign one decodes as
/// E4M3 does). Every E4M3 value is an FP32 normal with 3 fraction bits, so
/// its FP32 significand has 20 trailing zeros.
struct Nvfp4Scale {  // (no member initializers: GPU kernels keep these in shared memory)
  int32_t m;
  int e;
  bool nan;
};
MXSIM_HD inline Nvfp4Scale nvfp4_scale_of(uint8_t byte) {
  const ExactVal v = exact_elem(spec_of(Format::E4M3), byte);
  Nvfp4Scale s{};
  s.nan = v.kind == ExKind::NaN;
  s.m = int32_t(v.sig >> 20);
  s.e = v.exp + 20;
  return s;
}

/// nvfp4-exact block (numerics.md §5.2.5): acc + dot / 4 * sa * sb, one RNE;
/// dot is the block's integer sum of 2a x 2b over 16 E2M1 pairs
/// (|dot| <= 2304), so dot * m_a * m_b < 2304 * 15 * 15 < 2^24 and the block
/// value is exact. A NaN scale gives NaN.
MXSIM_HD inline float nvfp4_block(float acc, int32_t dot, const Nvfp4Scale& sa, const Nvfp4Scale& sb) {
  if (sa.nan || sb.nan) return f32_from_bits(kCanonicalNan32);
  return add_scaled_rne(acc, int64_t(dot) * sa.m * sb.m, sa.e + sb.e - 2);
}

/// nvfp4-exact's tensor-level step (numerics.md §5.2.5): the block sum acc
/// times alpha = fl32(ta * tb), the two operands' tensor_scale_inv (S_dec),
/// added to c (the existing output when accumulating, else +0) with one
/// rounding: fmaf(acc, alpha, c), as a GEMM epilogue D = alpha * acc + C.
/// K = 0 leaves c as it is (no block: nothing is added, as in every class).
MXSIM_HD inline float nvfp4_tensor_step(float acc, size_t K, float ta, float tb, float c) {
  if (K == 0) return c;
  const float alpha = ta * tb;
  return fmaf(acc, alpha, c);
}

/// fp8-chunk128 promotion (numerics.md §5.2.3, DeepGEMM / DeepSeek-V3 §3.3):
/// acc = fmaf(chunk, fl32(sa * sb), acc).
MXSIM_HD inline float fp8_chunk_promote(float acc, float chunk, float sa, float sb) {
  const float s = sa * sb;
  return fmaf(chunk, s, acc);
}

/// The stored output (numerics.md §5.4): FP32 acc, or BF16 = RNE(acc); every
/// NaN becomes the canonical 0x7FC00000.
MXSIM_HD inline float gemm_output(float acc, bool bf16) {
  if (bf16) acc = round_bf16(acc);
  return f32_is_nan(acc) ? f32_from_bits(kCanonicalNan32) : acc;
}

// ---- per-output-element walks ----------------------------------------------
//
// An operand row accessor gives, for one row of an operand panel (the output
// row i of A, or the output column j of B) with the contraction index k:
//   uint32_t code(size_t k)     element code (BF16: the 16-bit pattern)
//   uint8_t  e8m0(size_t b)     E8M0 byte of K-block b = k / 32 (MX classes)
//   float    sinv(size_t c)     FP32 scale_inv of chunk c = k / 128 (fp8-chunk128)
//   uint8_t  ue4m3(size_t b)    UE4M3 byte of K-block b = k / 16 (nvfp4-exact)
// Each walk starts from acc (+0, or the existing output when accumulating) and
// returns the accumulator before gemm_output.

template <class RowA, class RowB>
MXSIM_HD inline float mx_exact_dot(float acc, size_t K, const FormatSpec& fa, const FormatSpec& fb, int sha, int shb,
                                   const RowA& a, const RowB& b) {
  for (size_t k0 = 0; k0 < K; k0 += 32) {
    const size_t k1 = K < k0 + 32 ? K : k0 + 32;
    int32_t d = 0;
    for (size_t k = k0; k < k1; ++k) d += mx_int_value(fa, sha, a.code(k)) * mx_int_value(fb, shb, b.code(k));
    acc = mx_exact_block(acc, d, a.e8m0(k0 / 32), b.e8m0(k0 / 32), sha + shb);
  }
  return acc;
}

template <class RowA, class RowB>
MXSIM_HD inline float mx_f13_dot(float acc, size_t K, const FormatSpec& fa, const FormatSpec& fb, const RowA& a,
                                 const RowB& b) {
  for (size_t k0 = 0; k0 < K; k0 += 32) {
    const int n = int((K < k0 + 32 ? K : k0 + 32) - k0);
    const auto term = [&](int t) { return product_term(exact_elem(fa, a.code(k0 + t)), exact_elem(fb, b.code(k0 + t))); };
    const float d = fused_group(n, term, 0.0f, 13, true);
    acc = mx_f13_block(acc, d, a.e8m0(k0 / 32), b.e8m0(k0 / 32));
  }
  return acc;
}

template <class RowA, class RowB>
MXSIM_HD inline float fp8_chunk128_dot(float acc, size_t K, const FormatSpec& fa, const FormatSpec& fb, const RowA& a,
                                       const RowB& b) {
  for (size_t c0 = 0; c0 < K; c0 += 128) {
    const size_t c1 = K < c0 + 128 ? K : c0 + 128;
    float chunk = 0.0f;  // the k32 groups of a chunk are chained through C
    for (size_t q = c0; q < c1; q += 32) {
      const int n = int((c1 < q + 32 ? c1 : q + 32) - q);
      const auto term = [&](int t) { return product_term(exact_elem(fa, a.code(q + t)), exact_elem(fb, b.code(q + t))); };
      chunk = fused_group(n, term, chunk, 13, true);
    }
    acc = fp8_chunk_promote(acc, chunk, a.sinv(c0 / 128), b.sinv(c0 / 128));
  }
  return acc;
}

template <class RowA, class RowB>
MXSIM_HD inline float bf16_f25_dot(float acc, size_t K, const RowA& a, const RowB& b) {
  const FormatSpec f = spec_of(Format::BF16);
  constexpr FusedEdges x = hopper_bf16_edges();
  for (size_t q = 0; q < K; q += 16) {
    const int n = int((K < q + 16 ? K : q + 16) - q);
    const auto term = [&](int t) {
      return product_term(exact_elem(f, a.code(q + t)), exact_elem(f, b.code(q + t)), x.align_floor);
    };
    acc = fused_group(n, term, acc, 25, false, x);
  }
  return acc;
}

/// nvfp4-exact (numerics.md §5.2.5): the blocks of 16 summed from +0, then
/// the tensor-level step with c0 (the existing output, or +0); ta, tb the
/// operands' tensor_scale_inv.
template <class RowA, class RowB>
MXSIM_HD inline float nvfp4_exact_dot(float c0, size_t K, float ta, float tb, const RowA& a, const RowB& b) {
  const FormatSpec f = spec_of(Format::E2M1);
  float acc = 0.0f;
  for (size_t k0 = 0; k0 < K; k0 += 16) {
    const size_t k1 = K < k0 + 16 ? K : k0 + 16;
    int32_t d = 0;
    for (size_t k = k0; k < k1; ++k) d += mx_int_value(f, 1, a.code(k)) * mx_int_value(f, 1, b.code(k));
    acc = nvfp4_block(acc, d, nvfp4_scale_of(a.ue4m3(k0 / 16)), nvfp4_scale_of(b.ue4m3(k0 / 16)));
  }
  return nvfp4_tensor_step(acc, K, ta, tb, c0);
}

}  // namespace mxsim::hd
