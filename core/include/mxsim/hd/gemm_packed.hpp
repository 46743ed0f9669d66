// The truncated fused group of docs/numerics.md §5.3 over elements decoded
// once into 32 bits: the form the tiled GPU kernels stage in shared memory
// (backends/hip/src/gemm_panel.hpp), so that each product costs a few integer
// instructions instead of a decode, an ExactVal and 64-bit shifts.
//
// The result is hd::fused_group's, bit for bit: the same E (the products'
// alignment exponents and c's, with the same FusedEdges), the same
// truncation of every term and of c to a multiple of 2^(E - F), the same
// exact sum and rounding (hd::rz_to_frac). A group with a special (a NaN or
// Inf element or c) takes hd::fused_group itself. tests/test_gemm_block.cpp
// (GemmPacked.*) checks it against exact arithmetic.
#pragma once
#include <cstdint>

#include "mxsim/hd/gemm_block.hpp"

namespace mxsim::hd {

/// An element's exact value sig * 2^exp with |sig| < 2^15, or a special
/// (exp == kPackedSpecial, sig holding its ExKind). Every element format of
/// the GEMM contract (BF16, E5M2, E4M3, E3M2, E2M3, E2M1) has at most 8
/// significant bits, so the value fits.
struct PackedVal {  // trivial (no member initialisers): GPU kernels keep arrays of it in shared memory
  int16_t sig;
  int16_t exp;
};
constexpr int16_t kPackedSpecial = 0x7FFF;

/// Number of trailing zero bits of a non-zero 64-bit word.
MXSIM_HD inline int ctz64(uint64_t v) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return __ffsll((long long)v) - 1;
#else
  return __builtin_ctzll(v);
#endif
}

/// Packs an element's exact value (hd::exact_elem). Trailing zero bits of the
/// significand move into the exponent; precondition: the value has at most
/// 15 significant bits (true of every GEMM element format).
MXSIM_HD inline PackedVal pack_value(const ExactVal& v) {
  PackedVal p{0, 0};
  if (v.kind != ExKind::Finite) {
    p.sig = int16_t(v.kind);
    p.exp = kPackedSpecial;
    return p;
  }
  int64_t s = v.sig;
  int e = v.exp;
  if (s == 0) return p;  // +0 and -0 alike: the group's sums see the value only
  const int tz = ctz64(uint64_t(s < 0 ? -s : s));  // trailing zeros move into the exponent (exact)
  s = s < 0 ? -int64_t(uint64_t(-s) >> tz) : int64_t(uint64_t(s) >> tz);
  e += tz;
  p.sig = int16_t(s);
  p.exp = int16_t(e);
  return p;
}

MXSIM_HD inline ExactVal unpack_value(PackedVal p) {
  ExactVal v;
  if (p.exp == kPackedSpecial) {
    v.kind = ExKind(p.sig);
    return v;
  }
  v.sig = p.sig;
  v.exp = p.exp;
  return v;
}

/// floor(log2 |sig|) of a non-zero 32-bit integer.
MXSIM_HD inline int msb32(uint32_t v) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return 31 - __clz(int(v));
#else
  return 31 - __builtin_clz(v);
#endif
}

/// floor(log2 |v|) of a packed non-zero finite value, at least align_floor.
MXSIM_HD inline int packed_exp(PackedVal v, int align_floor) {
  const int e = v.exp + msb32(uint32_t(v.sig < 0 ? -v.sig : v.sig));
  return e > align_floor ? e : align_floor;
}

/// The alignment exponent of a product of two packed finite values
/// (e(a) + e(b), as hd::product_term with x.align_floor); a zero product's
/// is -126, or kNoTerm where zeros take no part (hd::fused_group).
MXSIM_HD inline int packed_align(PackedVal a, PackedVal b, int32_t prod, const FusedEdges& x) {
  if (prod == 0) return zero_align(x);
  return packed_exp(a, x.align_floor) + packed_exp(b, x.align_floor);
}

/// sign(prod) * floor(|prod| * 2^(exp - lsb)): trunc_units of the product.
MXSIM_HD inline int64_t packed_trunc(int32_t prod, int exp, int lsb) {
  if (prod == 0) return 0;  // a zero element's exponent is arbitrary: no shift of it is defined
  const uint32_t m = uint32_t(prod < 0 ? -prod : prod);
  const int sh = exp - lsb;
  // A non-zero term's units are below 2^(F + 2) <= 2^27 (gemm_block.hpp), so
  // a left shift stays inside 64 bits; a right shift of 32 or more leaves nothing.
  const uint64_t r = sh >= 0 ? uint64_t(m) << sh : (sh <= -32 ? 0u : uint64_t(m >> -sh));
  return prod < 0 ? -int64_t(r) : int64_t(r);
}

/// hd::fused_group(n, products of a(k) and b(k), c, F, e8m13, x) for
/// elements given packed: a(k), b(k) return PackedVal for k < n.
template <class A, class B>
MXSIM_HD inline float fused_group_packed(int n, const A& a, const B& b, float c, int F, bool e8m13,
                                         FusedEdges x = mma_sim_edges()) {
  const ExactVal cx = exact_of_float(c);
  bool special = cx.kind != ExKind::Finite;
  int E = special ? -126 : c_align(cx, x);
  for (int k = 0; k < n; ++k) {
    const PackedVal pa = a(k), pb = b(k);
    special |= pa.exp == kPackedSpecial || pb.exp == kPackedSpecial;
    const int32_t prod = int32_t(pa.sig) * int32_t(pb.sig);
    const int ek = packed_align(pa, pb, prod, x);
    E = ek > E ? ek : E;
  }
  if (special)  // rare: the generic group decides NaN / Inf (and nothing else can happen)
    return fused_group(
        n, [&](int k) { return product_term(unpack_value(a(k)), unpack_value(b(k)), x.align_floor); }, c, F, e8m13,
        x);
  if (E == kNoTerm) return 0.0f;  // every term is zero
  const int lsb = group_lsb(E, F, x);
  int64_t S = trunc_units(cx, lsb);
  for (int k = 0; k < n; ++k) {
    const PackedVal pa = a(k), pb = b(k);
    S += packed_trunc(int32_t(pa.sig) * int32_t(pb.sig), pa.exp + pb.exp, lsb);
  }
  return rz_to_frac(S, lsb, e8m13 ? 13 : 23, x.overflow_inf, x.underflow_pos);
}

}  // namespace mxsim::hd
