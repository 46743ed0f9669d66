// Fast grouped GEMM: the contract of docs/numerics.md §5 with machine
// arithmetic. MX-exact blocks (E2M1/E2M3 pairs) run as int8 dot products
// (AVX-512 VNNI kernel in gemm_vnni.cpp when the CPU has it, else the portable
// loop below); the truncated fused groups (FP8, BF16) use int64 sums of
// exactly scaled double products. Every output element is computed by one
// thread in the contract's K order, so results do not depend on the number of
// threads. Rare cases (NaN/Inf elements, scales outside a safe range) take the
// exact path of gemm_exact.hpp.
#include <bit>
#include <cstdlib>
#include <string_view>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_dispatch.hpp"
#include "gemm_exact.hpp"
#include "gemm_internal.hpp"
#include "gemm_fused_avx2.hpp"
#include "gemm_fused_avx512.hpp"
#include "gemm_vnni.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::emu::gemm {

namespace {

struct Decoded {
  std::vector<double> v;     // exact element values
  std::vector<int16_t> e;    // floor(log2|v|); -126 for zero
  std::vector<uint8_t> sp;   // 1 if NaN/Inf
  std::vector<uint8_t> row_sp;  // per row: any special
};

Decoded decode_panel(const Panel& p) {
  Decoded d;
  const FormatSpec f = spec_of(p.elem);
  const size_t n = p.R * p.K;
  d.v.resize(n);
  d.e.resize(n);
  d.sp.resize(n);
  d.row_sp.assign(p.R, 0);
  for (size_t r = 0; r < p.R; ++r)
    for (size_t k = 0; k < p.K; ++k) {
      const size_t i = r * p.K + k;
      const float x = f.bits == 16 ? f32_from_bits(p.code[i] << 16) : decode(f, p.code[i]);
      d.v[i] = x;
      d.sp[i] = !std::isfinite(x);
      d.row_sp[r] |= d.sp[i];
      d.e[i] = (x == 0 || !std::isfinite(x)) ? int16_t(-126) : int16_t(std::ilogb(x));
    }
  return d;
}

/// Fused group over k in [k0, k1) with accumulator input c (finite operands
/// only), edges x (hd::fused_group). Products are exact in double (at most
/// 16 significant bits, exponents above -300), and so are their scaled
/// values: 2^(F - E) stays below 2^350.
inline float fused_fast(const Decoded& a, size_t ia, const Decoded& b, size_t ib, size_t n, float c, int F, bool e8m13,
                        const hd::FusedEdges& x) {
  const int zero_e = hd::zero_align(x);
  const auto al = [&](int e) { return std::max(e, x.align_floor); };
  int E = c == 0.0f ? zero_e : al(std::ilogb(c));
  for (size_t k = 0; k < n; ++k) {
    const double p = a.v[ia + k] * b.v[ib + k];
    E = std::max(E, p == 0 ? zero_e : al(a.e[ia + k]) + al(b.e[ib + k]));
  }
  if (E == hd::kNoTerm) return 0.0f;  // every term is zero
  const int lsb = hd::group_lsb(E, F, x);
  const double sc = std::ldexp(1.0, -lsb);
  int64_t S = int64_t(double(c) * sc);  // truncation toward zero
  for (size_t k = 0; k < n; ++k) S += int64_t(a.v[ia + k] * b.v[ib + k] * sc);
  return hd::rz_to_frac(S, lsb, e8m13 ? 13 : 23, x.overflow_inf, x.underflow_pos);
}

bool any_sp(const Decoded& a, size_t ia, const Decoded& b, size_t ib, size_t n) {
  for (size_t k = 0; k < n; ++k)
    if (a.sp[ia + k] | b.sp[ib + k]) return true;
  return false;
}

float fused_exact(const Panel& A, size_t i, const Panel& B, size_t j, size_t k0, size_t k1, float c, int F, bool e8m13,
                  const hd::FusedEdges& x) {
  const FormatSpec fa = spec_of(A.elem), fb = spec_of(B.elem);
  std::vector<Term> t;
  for (size_t k = k0; k < k1; ++k)
    t.push_back({ex_mul(ex_elem(fa, A.c(i, k)), ex_elem(fb, B.c(j, k))),
                 std::max(elem_exp(fa, A.c(i, k)), x.align_floor) + std::max(elem_exp(fb, B.c(j, k)), x.align_floor)});
  return fused_group(t, c, F, e8m13, x);
}


}  // namespace

/// acc + blk * 2^(sa + sb - 254 + extra), one RNE; exact fallback outside the safe range.
float mx_add(float acc, float blk, int sa, int sb, int extra) {
  if (sa == 0xFF || sb == 0xFF) return std::bit_cast<float>(kCanonicalNan32);
  const int c = sa + sb - 254 + extra;
  if (c >= -80 && c <= 80) return acc + blk * std::ldexp(1.0f, c);
  Ex s;
  s.sig = 1;
  s.exp = c;
  return round_f32(ex_add(ex_from_float(acc), ex_mul(ex_from_float(blk), s)), false, 23);
}

void finish(float& o, float acc, Format out_fmt) {
  if (out_fmt == Format::BF16) acc = round_bf16(acc);
  if (std::isnan(acc)) acc = std::bit_cast<float>(kCanonicalNan32);
  o = acc;
}

void run_mx_exact_portable(const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt) {
  const size_t K = A.K, KB = A.kb();
  const int fa = hd::int_shift(A.elem), fb = hd::int_shift(B.elem);
  std::vector<int8_t> ia(A.R * K), ib(B.R * K);
  for (size_t n = 0; n < ia.size(); ++n) ia[n] = int8_t(std::ldexp(decode(A.elem, A.code[n]), fa));
  for (size_t n = 0; n < ib.size(); ++n) ib[n] = int8_t(std::ldexp(decode(B.elem, B.code[n]), fb));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < A.R; ++i)
    for (size_t j = 0; j < B.R; ++j) {
      float& o = out.p[i * out.ld + j];
      float acc = accumulate ? o : 0.0f;
      for (size_t b = 0; b < KB; ++b) {
        int32_t s = 0;
        for (size_t k = b * 32; k < std::min(K, b * 32 + 32); ++k) s += int32_t(ia[i * K + k]) * ib[j * K + k];
        acc = mx_add(acc, float(s), A.sbyte[i * KB + b], B.sbyte[j * KB + b], -fa - fb);
      }
      finish(o, acc, out_fmt);
    }
}

namespace {

/// One output element of an F class (mx-f13, fp8-chunk128, bf16-f25) by the
/// scalar path: double products, int64 sums, exact code for specials.
void scalar_element(GemmClass kind, const Panel& A, const Panel& B, const Decoded& da, const Decoded& db, size_t i, size_t j,
                    Out out, bool accumulate, Format out_fmt) {
  const size_t K = A.K;
  float& o = out.p[i * out.ld + j];
  float acc = accumulate ? o : 0.0f;
  const bool sp = da.row_sp[i] | db.row_sp[j];
  // The edges of the class's group (hd::FusedEdges): bf16-f25 is the
  // measured Hopper BF16 group, the FP8 classes MMA-Sim's reading.
  const hd::FusedEdges x = kind == GemmClass::Bf16F25 ? hd::hopper_bf16_edges() : hd::mma_sim_edges();
  auto group = [&](size_t k0, size_t k1, float c, int F, bool e8) {
    if (sp && any_sp(da, i * K + k0, db, j * K + k0, k1 - k0)) return fused_exact(A, i, B, j, k0, k1, c, F, e8, x);
    if (!std::isfinite(c)) return fused_exact(A, i, B, j, k0, k1, c, F, e8, x);
    return fused_fast(da, i * K + k0, db, j * K + k0, k1 - k0, c, F, e8, x);
  };
  switch (kind) {
    case GemmClass::MxF13:
      for (size_t b = 0; b * 32 < K; ++b) {
        const float blk = group(b * 32, std::min(K, b * 32 + 32), 0.0f, 13, true);
        acc = mx_add(acc, blk, A.sbyte[i * A.kb() + b], B.sbyte[j * B.kb() + b], 0);
      }
      break;
    case GemmClass::Fp8Chunk128:
      for (size_t c = 0; c * 128 < K; ++c) {
        float chunk = 0.0f;
        for (size_t q = c * 128; q < std::min(K, c * 128 + 128); q += 32) chunk = group(q, std::min(K, q + 32), chunk, 13, true);
        const float s = A.sinv[i * A.kc() + c] * B.sinv[j * B.kc() + c];
        acc = std::fmaf(chunk, s, acc);
      }
      break;
    case GemmClass::Bf16F25:
      for (size_t q = 0; q < K; q += 16) acc = group(q, std::min(K, q + 16), acc, 25, false);
      break;
    case GemmClass::MxExact:
    case GemmClass::Nvfp4Exact: break;  // (not F classes)
  }
  finish(o, acc, out_fmt);
}

}  // namespace

namespace {
KernelSlot slot_of(GemmClass k) {
  switch (k) {
    case GemmClass::MxExact: return KernelSlot::MxExact;
    case GemmClass::MxF13: return KernelSlot::MxF13;
    case GemmClass::Fp8Chunk128: return KernelSlot::Fp8Chunk;
    case GemmClass::Bf16F25: return KernelSlot::Bf16;
    case GemmClass::Nvfp4Exact: return KernelSlot::Nvfp4;
  }
  return KernelSlot::MxExact;
}
}  // namespace

void run_fast(GemmClass kind, const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt) {
  const CpuPath path = cpu_path();
  const KernelSlot slot = slot_of(kind);
  if (kind == GemmClass::Nvfp4Exact) return run_nvfp4(A, B, out, accumulate, out_fmt);
  if (kind == GemmClass::MxExact) {
    // Panels reach here when the direct path is not taken (AVX-512 VNNI
    // without VBMI, or the scalar path).
    if (path == CpuPath::Avx512 && cpu_has_avx512_vnni() && run_mx_exact_vnni(A, B, out, accumulate, out_fmt)) {
      note_kernel(slot, kernel::kMxVnniPanel);
      return;
    }
    run_mx_exact_portable(A, B, out, accumulate, out_fmt);
    note_kernel(slot, kernel::kMxScalar);
    return;
  }
  if (path != CpuPath::Scalar) {
    std::vector<std::pair<uint32_t, uint32_t>> bad;
    if (path == CpuPath::Avx512) run_fused_avx512(kind, A, B, out, accumulate, out_fmt, bad);
    else run_fused_avx2(kind, A, B, out, accumulate, out_fmt, bad);
    note_kernel(slot, path == CpuPath::Avx512 ? kernel::kFusedAvx512 : kernel::kFusedAvx2);
    if (bad.empty()) return;
    const Decoded da = decode_panel(A), db = decode_panel(B);
#pragma omp parallel for schedule(dynamic, 64)
    for (size_t n = 0; n < bad.size(); ++n)
      scalar_element(kind, A, B, da, db, bad[n].first, bad[n].second, out, accumulate, out_fmt);
    return;
  }
  const Decoded da = decode_panel(A), db = decode_panel(B);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < A.R; ++i)
    for (size_t j = 0; j < B.R; ++j) scalar_element(kind, A, B, da, db, i, j, out, accumulate, out_fmt);
  note_kernel(slot, kernel::kFusedScalar);
}

}  // namespace mxsim::emu::gemm
