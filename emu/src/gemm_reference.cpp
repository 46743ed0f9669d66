// Reference grouped GEMM: the contract of docs/numerics.md §5 followed
// literally, with exact arithmetic (Boost.Multiprecision cpp_int significands).
// Slow on purpose; the oracle for gemm_fast.cpp.
#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <vector>

#include "gemm_exact.hpp"
#include "gemm_internal.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::emu::gemm {

void run_reference(Kind kind, const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt) {
  const FormatSpec fa = spec_of(A.elem), fb = spec_of(B.elem);
  const size_t K = A.K;
  for (size_t i = 0; i < A.R; ++i)
    for (size_t j = 0; j < B.R; ++j) {
      float& o = out.p[i * out.ld + j];
      float acc = accumulate ? o : 0.0f;
      auto prod = [&](size_t k) { return ex_mul(ex_elem(fa, A.c(i, k)), ex_elem(fb, B.c(j, k))); };
      auto align = [&](size_t k) { return elem_exp(fa, A.c(i, k)) + elem_exp(fb, B.c(j, k)); };
      switch (kind) {
        case Kind::MxExact:
        case Kind::MxF13:
          for (size_t b = 0; b * 32 < K; ++b) {
            const size_t k1 = std::min(K, b * 32 + 32);
            Ex blk;
            if (kind == Kind::MxExact) {
              blk = Ex::zero();
              for (size_t k = b * 32; k < k1; ++k) blk = ex_add(blk, prod(k));
            } else {
              std::vector<Term> t;
              for (size_t k = b * 32; k < k1; ++k) t.push_back({prod(k), align(k)});
              blk = ex_from_float(fused_group(t, 0.0f, 13, true));
            }
            const Ex s = ex_mul(ex_e8m0(A.sbyte[i * A.kb() + b]), ex_e8m0(B.sbyte[j * B.kb() + b]));
            acc = round_f32(ex_add(ex_from_float(acc), ex_mul(blk, s)), false, 23);
          }
          break;
        case Kind::Fp8Chunk:
          for (size_t c = 0; c * 128 < K; ++c) {
            float chunk = 0.0f;
            for (size_t q = c * 128; q < std::min(K, c * 128 + 128); q += 32) {
              std::vector<Term> t;
              for (size_t k = q; k < std::min(K, q + 32); ++k) t.push_back({prod(k), align(k)});
              chunk = fused_group(t, chunk, 13, true);
            }
            const float s = round_f32(ex_mul(ex_from_float(A.sinv[i * A.kc() + c]), ex_from_float(B.sinv[j * B.kc() + c])),
                                      false, 23);
            acc = round_f32(ex_add(ex_from_float(acc), ex_mul(ex_from_float(chunk), ex_from_float(s))), false, 23);
          }
          break;
        case Kind::Bf16:
          for (size_t q = 0; q < K; q += 16) {
            std::vector<Term> t;
            for (size_t k = q; k < std::min(K, q + 16); ++k) t.push_back({prod(k), align(k)});
            acc = fused_group(t, acc, 25, false);
          }
          break;
      }
      if (out_fmt == Format::BF16) acc = round_bf16(acc);
      if (std::isnan(acc)) acc = std::bit_cast<float>(kCanonicalNaN);
      o = acc;
    }
}

}  // namespace mxsim::emu::gemm
