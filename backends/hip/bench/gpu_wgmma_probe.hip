// mxsim_gpu_wgmma_probe: designed BF16 dot products on the Hopper tensor
// cores (GemmKernel::WgmmaHardware, a chain of k16 wgmma groups) beside the
// bf16-f25 contract (docs/numerics.md §5.2-5.3, hd::bf16_f25_dot on the
// host), to pin down where the silicon and the MMA-Sim model part.
//
// Usage: mxsim_gpu_wgmma_probe OUT_DIR [--rows R]
// Each dataset is A [R, K] x W [R, K]^T (+ C when accumulating), R = 256 by
// default; its elements are BF16 codes drawn with a chosen exponent range,
// random sign and mantissa (subnormal codes where the range reaches below
// 2^-126; Inf / zero codes where the dataset says). Prints CSV
//   dataset,K,outputs,mismatches,first_mismatch(want,got)
// and writes OUT_DIR/<dataset>.bin: int32 R, N, K; uint16 A [R*K], W [N*K];
// float C [R*N], hardware [R*N], contract [R*N] (scripts/wgmma-bf16-fit.py
// reads it). Exit 1 without an sm_90 GPU.
#include "gpu.h"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "mxsim/hd/gemm_block.hpp"
#include "mxsim/hip/gemm.hpp"
#include "mxsim/hip/gemm_testing.hpp"

namespace {
using namespace mxsim;

/// A BF16 code with exponent e (subnormal codes below -126; e = -127 and
/// below shrink the subnormal's mantissa), random sign and mantissa.
uint16_t bf16_with_exp(std::mt19937& g, int e) {
  const uint32_t sign = (g() & 1u) << 15;
  const uint32_t mant = g() & 0x7Fu;
  if (e >= -126) return uint16_t(sign | uint32_t(e + 127) << 7 | mant);
  const int sh = -126 - e;  // 1 .. 7: leading bit at 2^(e)
  if (sh > 7) return uint16_t(sign);
  return uint16_t(sign | ((0x80u | mant) >> sh));
}

struct Dataset {
  std::string name;
  int K;
  std::function<uint16_t(std::mt19937&, bool is_a, size_t row, size_t k)> elem;
  std::function<float(std::mt19937&)> c;  // nullptr: C = +0, no accumulate
};

std::function<uint16_t(std::mt19937&, bool, size_t, size_t)> uniform_exp(int lo, int hi) {
  return [lo, hi](std::mt19937& g, bool, size_t, size_t) {
    return bf16_with_exp(g, lo + int(g() % unsigned(hi - lo + 1)));
  };
}

float f32_with_exp(std::mt19937& g, int lo, int hi) {
  // One draw per statement: the order of draws does not depend on the compiler.
  const int e = lo + int(g() % unsigned(hi - lo + 1));
  const uint32_t sign = g() & 0x80000000u;
  const uint32_t mant = g() & 0x7FFFFFu;
  return f32_from_bits(sign | uint32_t(e + 127) << 23 | mant);
}

struct RowView {
  const uint16_t* p;
  MXSIM_HD uint32_t code(size_t k) const { return p[k]; }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: mxsim_gpu_wgmma_probe OUT_DIR [--rows R]\n");
    return 2;
  }
  const std::string out_dir = argv[1];
  size_t R = 256;
  for (int i = 2; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--rows") R = size_t(std::atol(argv[i + 1]));
  std::string why;
  if (!hip::available(&why)) {
    std::fprintf(stderr, "no GPU: %s\n", why.c_str());
    return 1;
  }
  const hip::DeviceInfo d = hip::device_info();
  if (d.cc_major != 9 || d.cc_minor != 0) {
    std::fprintf(stderr, "needs an sm_90 GPU (H100/H200)\n");
    return 1;
  }

  // One element with probability pct of `special` codes (Inf / zero), else `base`.
  const auto with = [](auto base, int pct, std::vector<uint16_t> special) {
    return [=](std::mt19937& g, bool a, size_t r, size_t k) {
      if (int(g() % 100) < pct) return special[g() % special.size()];
      return base(g, a, r, k);
    };
  };
  const std::vector<Dataset> sets = {
      {"narrow_k16", 16, uniform_exp(-4, 4), nullptr},
      {"wide12_k16", 16, uniform_exp(-12, 12), nullptr},
      {"wide30_k16", 16, uniform_exp(-30, 30), nullptr},
      {"c_wide_k16", 16, uniform_exp(-6, 6), [](std::mt19937& g) { return f32_with_exp(g, -40, 40); }},
      {"c_near_k16", 16, uniform_exp(-6, 6), [](std::mt19937& g) { return f32_with_exp(g, -3, 14); }},
      {"sub_k16", 16,
       [](std::mt19937& g, bool a, size_t, size_t) {
         return a ? bf16_with_exp(g, -133 + int(g() % 16)) : bf16_with_exp(g, -8 + int(g() % 17));
       },
       nullptr},
      {"tiny_k16", 16, uniform_exp(-72, -58), nullptr},
      {"tiny_c_k16", 16, uniform_exp(-72, -58), [](std::mt19937& g) { return f32_with_exp(g, -149 + 23, -110); }},
      {"huge_k16", 16, uniform_exp(58, 66), nullptr},
      {"inf_k16", 16, with(uniform_exp(-4, 4), 3, {0x7F80, 0xFF80, 0x0000, 0x8000}), nullptr},
      {"inf_c_k16", 16, with(uniform_exp(-4, 4), 2, {0x7F80, 0xFF80}),
       [](std::mt19937& g) {
         const unsigned r = g() % 10;
         return r == 0 ? INFINITY : r == 1 ? -INFINITY : f32_with_exp(g, -4, 8);
       }},
      {"wide12_k64", 64, uniform_exp(-12, 12), nullptr},
      // C subnormal (exponent field 0) against small products.
      {"c_sub_k16", 16, uniform_exp(-70, -60),
       [](std::mt19937& g) {
         const uint32_t sign = g() & 0x80000000u;
         const uint32_t mant = g() & 0x7FFFFFu;
         return f32_from_bits(sign | mant >> (g() % 20));
       }},
      // C = -0 with products that are all zero or cancel exactly.
      {"neg0_k16", 16,
       [](std::mt19937& g, bool a, size_t r, size_t k) {
         if (r % 2 == 0) return uint16_t(g() & 0x8000u);  // zeros of either sign
         const uint16_t v = uint16_t(0x3F80u | (r * 7 + k / 2) % 128u);  // pairs k, k+1 equal
         return uint16_t(a && k % 2 ? v ^ 0x8000u : v);
       },
       [](std::mt19937&) { return -0.0f; }},
      // Products beyond 2^128 that cancel, and sums at the overflow edge.
      {"ovf_cancel_k16", 16,
       [](std::mt19937& g, bool a, size_t r, size_t k) {
         const uint16_t big = uint16_t(0x7F00u | ((r + k / 2) % 128u));  // about 2^127
         if (k < 2) return uint16_t(a && k == 1 ? big ^ 0x8000u : big);   // +p - p: p ~ 2^254, exact cancel
         return bf16_with_exp(g, 60 + int(g() % 4));
       },
       nullptr},
      {"partial_k40", 40, with(uniform_exp(-130, -110), 10, {0x0000, 0x8000}),
       [](std::mt19937& g) { return g() % 2 ? 0.0f : f32_with_exp(g, -126, -100); }},
      {"c_wide_k256", 256, uniform_exp(-8, 8), [](std::mt19937& g) { return f32_with_exp(g, -30, 30); }},
  };

  std::printf("dataset,K,outputs,mismatches,first_mismatch\n");
  std::mt19937 g(20261202);
  int status = 0;
  for (const Dataset& ds : sets) {
    const size_t K = size_t(ds.K), N = R;
    std::vector<uint16_t> a(R * K), w(N * K);
    for (size_t r = 0; r < R; ++r)
      for (size_t k = 0; k < K; ++k) a[r * K + k] = ds.elem(g, true, r, k);
    for (size_t r = 0; r < N; ++r)
      for (size_t k = 0; k < K; ++k) w[r * K + k] = ds.elem(g, false, r, k);
    std::vector<float> c(R * N, 0.0f), hw(R * N), ref(R * N);
    if (ds.c)
      for (float& v : c) v = ds.c(g);

    hip::DeviceBuffer da(a.size() * 2, "A"), dw(w.size() * 2, "W"), dout(c.size() * 4, "out");
    da.upload(a.data(), a.size() * 2);
    dw.upload(w.data(), w.size() * 2);
    dout.upload(c.data(), c.size() * 4);
    hip::GemmParams gp;
    gp.kernel = hip::GemmKernel::WgmmaHardware;
    gp.accumulate = true;  // C = +0 where the dataset has none
    const std::vector<int64_t> ms = {int64_t(R)};
    const hip::GemmLaunchCounts before = hip::gemm_launch_counts();
    hip::grouped_fprop(hip::GemmOperand::from_bf16(da.as<uint16_t>(), 1, R, K),
                       hip::GemmOperand::from_bf16(dw.as<uint16_t>(), 1, N, K), ms, dout.as<float>(), gp);
    hip::synchronize();
    if (hip::gemm_launch_counts().wgmma == before.wgmma) {
      std::fprintf(stderr, "%s: the tensor-core kernel did not run\n", ds.name.c_str());
      return 1;
    }
    dout.download(hw.data(), hw.size() * 4);

    size_t bad = 0;
    std::string first;
    for (size_t i = 0; i < R; ++i)
      for (size_t j = 0; j < N; ++j) {
        const float want = hd::bf16_f25_dot(c[i * N + j], K, RowView{&a[i * K]}, RowView{&w[j * K]});
        ref[i * N + j] = want;
        if (f32_bits(want) != f32_bits(hw[i * N + j]) && ++bad == 1) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "%08x,%08x", f32_bits(want), f32_bits(hw[i * N + j]));
          first = buf;
        }
      }
    std::printf("%s,%zu,%zu,%zu,%s\n", ds.name.c_str(), K, R * N, bad, first.c_str());
    std::fflush(stdout);

    const std::string path = out_dir + "/" + ds.name + ".bin";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      status = 1;
      continue;
    }
    const int32_t hdr[3] = {int32_t(R), int32_t(N), int32_t(K)};
    std::fwrite(hdr, 4, 3, f);
    std::fwrite(a.data(), 2, a.size(), f);
    std::fwrite(w.data(), 2, w.size(), f);
    std::fwrite(c.data(), 4, c.size(), f);
    std::fwrite(hw.data(), 4, hw.size(), f);
    std::fwrite(ref.data(), 4, ref.size(), f);
    std::fclose(f);
  }
  return status;
}
