#!/usr/bin/env python3
"""mxsim.torch on the GPU beside its peers, in one process (issue 30, item 5):

  overhead  host time of one mxsim.torch call whose GEMM is empty (m_splits all 0: the
            Python, ctypes and C layers only) and of a quantize of a 32 x 32 tensor;
  gemm      mt.grouped_gemm from Python on pre-quantized operands of (8 x 2048, 4096, 7168),
            CUDA-event median, beside the same C++ call timed by mxsim_gpu_gemm_bench: with
            --cpp-bench BINARY that bench runs right before and right after each Python case
            (--shapes large --cases <case>), so a drift of the card's clocks (a BF16 GEMM at
            this size runs at its power limit) shows as a before / after gap instead of
            biasing the ratio; the Python operands are drawn as the bench draws its own
            (random sign and mantissa, exponents 2^-4 .. 2^4), not from randn, since the
            bits toggled move the power and so the clocks. --cpp-csv FILE: one earlier run's
            CSV instead;
  layer     forward + backward of the large expert layer (examples/large.toml: 8 experts,
            d_model 2048, d_ff 4096, 8192 expert rows per micro-batch; fc1 shapes) as
            mt.GroupedLinear(recipe=mxfp4 / mxfp8 / bf16) beside bench/peers/moe_step_peer.py's
            torch._grouped_mm BF16 layer and its MXFP4 fake quantization (torch ops).

Prints a Markdown table per part.
Usage: torch_layer_bench.py [--cpp-bench BINARY | --cpp-csv FILE] [--reps N]
Needs CUDA and MXSIM_C_LIBRARY (or the package's libmxsim_c.so) built with the GPU backend.
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time

import torch

import mxsim.torch as mt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import moe_step_peer as peer  # noqa: E402


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def batched_ms(fn, reps, batch=10):
    """Median over reps of `batch` calls enqueued back to back, per call: the GPU's time with the
    host's per-call overhead hidden behind the previous call's kernels (single calls in median_ms
    include it whenever the GPU waits for the host)."""
    return median_ms(lambda: [fn() for _ in range(batch)], reps) / batch


def host_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def in_c_us(fn, n=2000):
    """Host time per call spent inside the C entry points (mxsim.torch's _capi.call timed): the
    rest of host_us is Python (argument checks, ctypes structs, torch allocations)."""
    from mxsim.torch import _capi
    orig, spent = _capi.call, [0.0]

    def timed(f, *args):
        t0 = time.perf_counter()
        try:
            return orig(f, *args)
        finally:
            spent[0] += time.perf_counter() - t0
    _capi.call = timed
    try:
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        spent[0] = 0.0
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    finally:
        _capi.call = orig
    return spent[0] / n * 1e6


def overhead():
    dev = "cuda"
    w = mt.quantize(torch.randn(4, 128, 256, device=dev), "mxfp8")
    x = torch.randn(32, 32, device=dev)
    s = mt.spec("mxfp8")
    calls = [("grouped_gemm, M = 0 (4 empty groups)",
              lambda: (lambda q: lambda: mt.grouped_gemm(q, w, [0, 0, 0, 0]))(
                  mt.quantize(torch.zeros(0, 256, device=dev), "mxfp8"))),
             ("grouped_gemm, M = 32 (one group of 32 rows, K 256, N 128)",
              lambda: (lambda q: lambda: mt.grouped_gemm(q, w, [32, 0, 0, 0]))(
                  mt.quantize(torch.randn(32, 256, device=dev), "mxfp8"))),
             ("quantize 32 x 32 mxfp8", lambda: lambda: mt.quantize(x, spec=s)),
             ("torch.empty(32, 32) (reference: one torch allocation)", lambda: lambda: torch.empty(32, 32, device=dev))]
    print("\n## Per-call host overhead (Python + ctypes + C layer)\n\n| call | us per call | of which in C |\n|---|---|---|")
    for name, make in calls:
        try:
            fn = make()
            print(f"| {name} | {host_us(fn):.1f} | {in_c_us(fn):.1f} |")
        except Exception as e:  # noqa: BLE001 -- a row says what failed; the other rows still run
            print(f"| {name} | failed: {type(e).__name__}: {str(e)[:200]} |")


CASES = {"mxfp4-fprop": ("mxfp4", "mxfp4_2d"), "mxfp8-fprop": ("mxfp8", "mxfp8"), "bf16-fprop": ("bf16", "bf16")}


def bench_floats(*shape):
    """FP32 values drawn as mxsim_gpu_gemm_bench's fill_random draws them: random sign and
    mantissa, exponent uniform in 2^-4 .. 2^4 (not the same words: the same distribution)."""
    n = 1
    for d in shape:
        n *= d
    bits = torch.randint(0, 1 << 23, (n,), device="cuda", dtype=torch.int32)
    bits |= torch.randint(123, 132, (n,), device="cuda", dtype=torch.int32) << 23
    bits |= torch.randint(0, 2, (n,), device="cuda", dtype=torch.int32) << 31
    return bits.view(torch.float32).reshape(shape)


def cpp_ms(cpp_bench, case, shape, reps):
    """The C++ call's median ms (mxsim_gpu_gemm_bench, kernel auto) on the large shape, now."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as f:
        subprocess.run([cpp_bench, "--shapes", "large", "--cases", case, "--no-check", "--reps", str(reps),
                        "--csv", f.name], check=True, stdout=subprocess.DEVNULL, timeout=120)
        for row in csv.DictReader(open(f.name)):
            if row["shape"] == shape and row["kernel"].startswith("auto"):
                return float(row["ms"])
    raise RuntimeError(f"{cpp_bench} printed no auto row for {case} {shape}")


def gemm(cpp_bench, cpp_csv, reps):
    G, R, N, K = 8, 2048, 4096, 7168
    shape = f"{G}x{R}:{N}:{K}"
    cpp = {}
    if cpp_csv and os.path.exists(cpp_csv):
        with open(cpp_csv) as f:
            for row in csv.DictReader(f):
                if row["shape"] == shape and row["kernel"].startswith("auto"):
                    cpp[row["case"]] = float(row["ms"])
    x = bench_floats(G * R, K)
    w = bench_floats(G, N, K)
    splits = [R] * G
    print(f"\n## grouped_gemm from Python vs the same C++ call ({shape}, CUDA-event median of {reps})\n")
    if cpp_bench:
        print("C++: mxsim_gpu_gemm_bench run right before and right after each Python case.\n")
    print("| case | Python ms (one call) | Python ms (10 back to back, per call) | C++ ms (before / after) "
          "| Python / C++ (their mean) | TFLOP/s |")
    print("|---|---|---|---|---|---|")
    for case, (sa, sb) in CASES.items():
        if sa == "bf16":
            a, b = x.bfloat16(), w.bfloat16()
        else:
            a, b = mt.quantize(x, sa), mt.quantize(w, sb)
        out = torch.empty(G * R, N, device="cuda")
        torch.cuda.synchronize()
        before = cpp_ms(cpp_bench, case, shape, reps) if cpp_bench else cpp.get(case)
        ms = median_ms(lambda: mt.grouped_gemm(a, b, splits, out=out), reps)
        mb = batched_ms(lambda: mt.grouped_gemm(a, b, splits, out=out), max(3, reps // 4)) if ms < 100 else ms
        torch.cuda.synchronize()
        after = cpp_ms(cpp_bench, case, shape, reps) if cpp_bench else None
        c = (before + after) / 2 if before and after else before
        shown = f"{before:.3f} / {after:.3f}" if after else (f"{before:.3f}" if before else "-")
        ratio = f"{ms / c:.3f}" if c else "-"
        print(f"| {case} | {ms:.3f} | {mb:.3f} | {shown} | {ratio} | {2 * G * R * N * K / ms / 1e9:.0f} |")


def layer(reps):
    E, d, dff, M = 8, 2048, 4096, 8192
    splits = [M // E] * E
    offs = torch.cumsum(torch.tensor(splits, device="cuda"), 0).to(torch.int32)
    x = torch.randn(M, d, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(M, dff, device="cuda", dtype=torch.bfloat16)
    w = (torch.randn(E, dff, d, device="cuda", dtype=torch.bfloat16) / d ** 0.5).requires_grad_(True)
    rows = []

    def peer_step(fake):
        xi = x.detach().requires_grad_(True)
        peer.GroupedLinear.apply(xi, w, offs, fake).backward(dy)

    rows.append(("torch._grouped_mm BF16 (peer)", median_ms(lambda: peer_step(False), reps)))
    rows.append(("torch ops MXFP4 fake quantization + _grouped_mm (peer)", median_ms(lambda: peer_step(True), reps)))
    for recipe in ["bf16", "mxfp8", "mxfp4"]:
        m = mt.GroupedLinear(E, d, dff, bias=False, recipe=recipe, params_dtype=torch.bfloat16, device="cuda")

        def step():
            xi = x.detach().requires_grad_(True)
            m(xi, splits).backward(dy)
        rows.append((f"mxsim.torch.GroupedLinear recipe={recipe} (bit-exact)", median_ms(step, reps)))
    base = rows[0][1]
    print(f"\n## Expert layer forward + backward ({E} experts x {M // E} rows, {d} -> {dff}; median of {reps})\n")
    print("| layer | ms | vs BF16 _grouped_mm |\n|---|---|---|")
    for name, ms in rows:
        print(f"| {name} | {ms:.2f} | {ms / base:.2f}x |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpp-bench", help="mxsim_gpu_gemm_bench, run before and after each Python GEMM case")
    ap.add_argument("--cpp-csv", help="an earlier mxsim_gpu_gemm_bench CSV (without --cpp-bench)")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    print(f"# mxsim.torch on {torch.cuda.get_device_name()}, torch {torch.__version__}, mxsim {mt.version()}")
    overhead()
    gemm(a.cpp_bench, a.cpp_csv, a.reps)
    layer(a.reps)


if __name__ == "__main__":
    main()
