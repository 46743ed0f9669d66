#!/usr/bin/env python3
"""PyTorch peers of mxsim's GPU kernels, timed on the same GPU in the same run:
BF16 torch._grouped_mm, FP8 E4M3 torch._scaled_grouped_mm with rowwise FP32
scales (with and without fast accumulation), and a device-to-device copy.

Shapes are MoE grouped GEMMs (groups x rows per group, N, K):
  (8 x 2048, 4096, 7168), (32 x 512, 4096, 2048), (16 x 1024, 2048, 7168).
FLOPs = 2 * M * N * K with M = groups * rows; copy bandwidth counts bytes read
plus bytes written. Timing: triton.testing.do_bench median (ms) where Triton
is present, else CUDA events over repetitions.
Prints CSV: peer,shape,ms,tflops_or_tbps
Usage: gemm_peers.py [--copy-bytes N]
"""
import argparse
import sys

import torch

SHAPES = [(8, 2048, 4096, 7168), (32, 512, 4096, 2048), (16, 1024, 2048, 7168)]


def bench(fn):
    try:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    except ImportError:
        for _ in range(5):
            fn()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0.record()
        for _ in range(50):
            fn()
        t1.record()
        torch.cuda.synchronize()
        return t0.elapsed_time(t1) / 50


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copy-bytes", type=int, default=1 << 30)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("gemm_peers: no CUDA device", file=sys.stderr)
        return 1
    dev = "cuda"
    print("peer,shape,ms,tflops_or_tbps")
    for g, rows, n, k in SHAPES:
        m = g * rows
        shape = f"{g}x{rows}:{n}:{k}"
        flops = 2.0 * m * n * k
        offs = torch.arange(rows, m + 1, rows, device=dev, dtype=torch.int32)
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(g, n, k, device=dev, dtype=torch.bfloat16)
        ms = bench(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs))
        print(f"grouped_mm_bf16,{shape},{ms:.4f},{flops / ms / 1e9:.1f}", flush=True)
        x8 = x.to(torch.float8_e4m3fn)
        w8 = w.to(torch.float8_e4m3fn)
        sx = torch.ones(m, device=dev, dtype=torch.float32)
        sw = torch.ones(g, n, device=dev, dtype=torch.float32)
        for fast in (False, True):
            try:
                ms = bench(lambda: torch._scaled_grouped_mm(x8, w8.transpose(-2, -1), sx, sw, offs=offs,
                                                            out_dtype=torch.bfloat16, use_fast_accum=fast))
                print(f"scaled_grouped_mm_fp8_rowwise{'_fastacc' if fast else ''},{shape},{ms:.4f},"
                      f"{flops / ms / 1e9:.1f}", flush=True)
            except RuntimeError as e:
                print(f"scaled_grouped_mm_fp8_rowwise{'_fastacc' if fast else ''},{shape},nan,nan  # {e}",
                      flush=True)
    src = torch.empty(a.copy_bytes, device=dev, dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    print(f"copy_d2d,{a.copy_bytes}B,{ms:.4f},{2.0 * a.copy_bytes / ms / 1e9:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
