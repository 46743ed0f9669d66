// Operand packing of the fused-group kernels (gemm_fused_pack.hpp).
#include "gemm_fused_pack.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"

namespace mxsim::emu::gemm::fused {

namespace {

struct ElemLut {
  float v[256];
  int32_t e[256];
  uint8_t sp[256];
};

ElemLut make_lut(Format f) {
  ElemLut l{};
  const FormatSpec fs = spec_of(f);
  const uint32_t ncode = 1u << fs.bits;
  for (uint32_t c = 0; c < 256; ++c) {
    const float x = c < ncode ? decode(fs, c) : 0.0f;
    const bool fin = std::isfinite(x);
    l.sp[c] = !fin;
    l.v[c] = fin ? x : 0.0f;
    l.e[c] = (!fin || x == 0.0f) ? kZeroExp : std::ilogb(x);
  }
  return l;
}

/// Decoded element: value, exponent (sentinel for zero), special flag.
struct Dec {
  const ElemLut* lut = nullptr;  // FP8/FP6/FP4; null for BF16
  inline void operator()(uint32_t code, float& v, int32_t& e, bool& sp) const {
    if (lut) {
      v = lut->v[code & 0xFF];
      e = lut->e[code & 0xFF];
      sp = lut->sp[code & 0xFF];
      return;
    }
    const uint32_t b = code << 16;
    const uint32_t ef = (b >> 23) & 0xFF;
    if (ef == 0xFF) { v = 0.0f; e = kZeroExp; sp = true; return; }
    v = std::bit_cast<float>(b);
    // A subnormal BF16 element aligns at -126 in bf16-f25's group
    // (hd::hopper_bf16_edges), which the vector kernels do not model: its
    // row / column takes the scalar path, as a special does.
    sp = ef == 0 && (b & 0x7FFFFF);
    e = ef ? int32_t(ef) - 127 : kZeroExp;
  }
};

// E8M0 scales the vector kernels take (others: the scalar path). A's factor
// 2^(sa-127) is only the final FMA's multiplicand (exact product, one
// rounding): any byte but NaN. B's must keep D * 2^(sb-127) exact: with
// FP8/FP6/FP4 group values D in [2^-33, 2^24] (or 0), 2^(+-50) leaves margin.
bool safe_a(uint8_t s) { return s != 0xFF; }
// An all-zero block adds exactly 0 whatever its (finite) scale.
bool zero_block(const float* v, size_t n, size_t stride) {
  for (size_t k = 0; k < n; ++k)
    if (v[k * stride] != 0.0f) return false;
  return true;
}
bool safe_e8m0(uint8_t s) { return s != 0xFF && int(s) >= 127 - 50 && int(s) <= 127 + 50; }

}  // namespace

Packed pack(GemmClass kind, const Panel& A, const Panel& B) {
  const size_t I = A.R, J = B.R, K = A.K;
  Packed P;
  const size_t L = kind == GemmClass::Bf16F25 ? 16 : 32;
  P.Kp = (K + L - 1) / L * L;
  P.KB = A.kb();
  P.KC = A.kc();
  P.NP = (J + 15) / 16;
  const size_t Kp = P.Kp, NP = P.NP;
  ElemLut la{}, lb{};
  Dec da, db;
  if (kind != GemmClass::Bf16F25) {
    la = make_lut(A.elem);
    lb = make_lut(B.elem);
    da.lut = &la;
    db.lut = &lb;
  }
  P.av.assign(I * Kp, 0.0f);
  const bool x8 = kind != GemmClass::Bf16F25;
  const size_t kpd = x8 ? 4 : 2, esz = x8 ? 1 : 2;
  P.ae.assign(I * Kp / kpd, x8 ? int32_t(0xC0C0C0C0u) : int32_t((uint32_t(uint16_t(kZeroExp)) << 16) | uint16_t(kZeroExp)));
  static_assert(int8_t(0xC0) == kZero8);
  P.ai.assign(I, RowInfo{});
  P.bv.assign(NP * Kp * 16, 0.0f);
  P.be.resize(NP * Kp * 16 * esz);
  if (x8) std::fill(P.be.begin(), P.be.end(), int8_t(kZero8));
  else std::fill_n(reinterpret_cast<int16_t*>(P.be.data()), NP * Kp * 16, int16_t(kZeroExp));
  P.blo.assign(NP * 16, 1000);
  P.bhi.assign(NP * 16, -1000);
  P.bsp.assign(NP * 16, 0);
  const bool mx = kind == GemmClass::MxF13, ch = kind == GemmClass::Fp8Chunk128;
  if (mx) {
    P.as.assign(I * P.KB, 0.0f);
    P.bs.assign(NP * P.KB * 16, 0.0f);
  } else if (ch) {
    P.as.assign(I * P.KC, 0.0f);
    P.bs.assign(NP * P.KC * 16, 0.0f);
  }
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (size_t i = 0; i < I; ++i) {
      RowInfo ri;
      const uint32_t* c = A.code.data() + i * K;
      float* v = at(P.av, i * Kp);
      int16_t* e16 = reinterpret_cast<int16_t*>(at(P.ae, i * Kp / kpd));
      int8_t* e8 = reinterpret_cast<int8_t*>(at(P.ae, i * Kp / kpd));
      for (size_t k = 0; k < K; ++k) {
        bool sp;
        int32_t e;
        da(c[k], v[k], e, sp);
        if (x8) e8[k] = int8_t(e == kZeroExp ? kZero8 : e);
        else e16[k] = int16_t(e);
        ri.sp |= sp;
        if (e != kZeroExp) ri.lo = std::min(ri.lo, e), ri.hi = std::max(ri.hi, e);
      }
      if (mx)
        for (size_t kb = 0; kb < P.KB; ++kb) {
          const uint8_t s = A.sbyte[i * P.KB + kb];
          if (s != 0xFF && zero_block(v + kb * 32, std::min<size_t>(32, K - kb * 32), 1)) {
            P.as[i * P.KB + kb] = 1.0f;  // adds exactly 0 whatever its scale (0x00 from the quantizer)
            continue;
          }
          if (!safe_a(s)) ri.sp = 1;
          P.as[i * P.KB + kb] = safe_a(s) ? std::ldexp(1.0f, int(s) - 127) : 0.0f;
        }
      if (ch)
        for (size_t c2 = 0; c2 < P.KC; ++c2) P.as[i * P.KC + c2] = A.sinv[i * P.KC + c2];
      P.ai[i] = ri;
    }
#pragma omp for schedule(static)
    for (size_t j = 0; j < J; ++j) {
      const size_t p = j / 16, jj = j % 16;
      RowInfo ri;
      const uint32_t* c = B.code.data() + j * K;
      float* v = at(P.bv, p * Kp * 16 + jj);
      int16_t* e16 = reinterpret_cast<int16_t*>(at(P.be, 2 * (p * Kp * 16 + jj * 2)));
      int8_t* e8 = at(P.be, p * Kp * 16 + jj * 4);
      for (size_t k = 0; k < K; ++k) {
        bool sp;
        int32_t e;
        db(c[k], v[k * 16], e, sp);
        if (x8) e8[(k / 4) * 64 + (k & 3)] = int8_t(e == kZeroExp ? kZero8 : e);
        else e16[(k / 2) * 32 + (k & 1)] = int16_t(e);
        ri.sp |= sp;
        if (e != kZeroExp) ri.lo = std::min(ri.lo, e), ri.hi = std::max(ri.hi, e);
      }
      if (mx)
        for (size_t kb = 0; kb < P.KB; ++kb) {
          const uint8_t s = B.sbyte[j * P.KB + kb];
          if (s != 0xFF && zero_block(v + kb * 32 * 16, std::min<size_t>(32, K - kb * 32), 16)) {
            P.bs[(p * P.KB + kb) * 16 + jj] = 1.0f;
            continue;
          }
          if (!safe_e8m0(s)) ri.sp = 1;
          P.bs[(p * P.KB + kb) * 16 + jj] = safe_e8m0(s) ? std::ldexp(1.0f, int(s) - 127) : 0.0f;
        }
      if (ch)
        for (size_t c2 = 0; c2 < P.KC; ++c2) P.bs[(p * P.KC + c2) * 16 + jj] = B.sinv[j * P.KC + c2];
      P.blo[j] = ri.lo;
      P.bhi[j] = ri.hi;
      P.bsp[j] = ri.sp;
    }
  }
  return P;
}

}  // namespace mxsim::emu::gemm::fused
