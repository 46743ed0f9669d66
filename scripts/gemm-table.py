#!/usr/bin/env python3
"""Joins mxsim_gpu_gemm_bench's CSV with bench/peers/gemm_peers.py's CSV (the
same GPU, the same device call) into a Markdown table of TFLOP/s, the ratio
to each case's PyTorch peer and the target the GPU-speed issue sets.

Usage: gemm-table.py GEMM_CSV PEERS_CSV
"""
import csv
import sys

# case -> (peer, target ratio)
PEER = {
    "mxfp4-fprop": ("grouped_mm_bf16", 1.0),
    "mxfp4-dgrad": ("grouped_mm_bf16", 0.9),
    "mxfp4-wgrad": ("grouped_mm_bf16", 0.9),
    "mxfp8-fprop": ("scaled_grouped_mm_fp8_rowwise", 0.6),
    "fp8block-fprop": ("scaled_grouped_mm_fp8_rowwise", 0.6),
    "bf16-fprop": ("grouped_mm_bf16", 0.95),
}


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    peers = {}
    with open(sys.argv[2]) as f:
        for row in csv.reader(l for l in f if l.count(",") >= 3 and not l.startswith("peer,")):
            try:
                peers[(row[0], row[1])] = float(row[3])
            except ValueError:
                pass
    print("| case | shape (G x rows : N : K) | mxsim ms | mxsim TFLOP/s | peer | peer TFLOP/s | ratio | target | bits vs tiled |")
    print("|---|---|---|---|---|---|---|---|---|")
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            peer, target = PEER.get(r["case"], ("?", 0))
            if not r["kernel"].startswith("auto"):
                target = float("nan")  # not the contract's bits: no target applies
            p = peers.get((peer, r["shape"]))
            ratio = float(r["tflops"]) / p if p else float("nan")
            mism = r["mismatches"]
            bits = "identical" if mism == "0" else ("not checked" if mism == "-1" else f"{mism} differ")
            met = "met" if ratio >= target else "not met"
            tgt = f">= {target} ({met})" if target == target else "n/a (not bit-exact)"
            print(f"| {r['case']} ({r['kernel']}) | {r['shape']} | {float(r['ms']):.3f} | {float(r['tflops']):.1f} | {peer} | "
                  f"{p if p else 'n/a'} | {ratio:.2f} | {tgt} | {bits} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
