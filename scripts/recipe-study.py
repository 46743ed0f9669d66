#!/usr/bin/env python3
"""The expert-recipe study of docs/simulator.md ("Study: mxfp4, nvfp4 and mxfp8 experts") from
traces of `mxsim train` (one per recipe, the default config otherwise):

    mxsim train --set recipe.fc1=R --set recipe.fc2=R --trace R.h5      (R = mxfp4, nvfp4, mxfp8)
    scripts/recipe-study.py mxfp4.h5 nvfp4.h5 mxfp8.h5

Prints one Markdown table (a column per trace): final test accuracy and loss; per expert layer and GEMM the BF16-shadow
error (rel_l2 of the GEMM's output against the same GEMM on BF16 operands, mean over micro-batches
of the last 100 steps); the quantization SQNR of W, x and dy (mean of the last 100 steps); the
oscillation flips over the run and the last 100 steps. Needs h5py."""
import sys

import h5py
import numpy as np

LAST = 100


def mean_last(d):
    a = np.asarray(d[()], dtype=np.float64)
    a = a[-LAST:]
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else float("nan")


def row(path):
    with h5py.File(path, "r") as f:
        recipe = f["layers/fc1"].attrs.get("recipe", b"?")
        recipe = recipe.decode() if isinstance(recipe, bytes) else str(recipe)
        acc = np.asarray(f["eval/test_accuracy"][()])
        acc = acc[np.isfinite(acc)]
        out = {"recipe": recipe, "steps": int(f["train/step"].shape[0]),
               "test_acc": float(acc[-1]) if acc.size else float("nan"),
               "loss": mean_last(f["train/loss"])}
        for layer in ("fc1", "fc2"):
            base = f"layers/{layer}"
            for g in ("fprop", "dgrad", "wgrad"):
                k = f"{base}/shadow/{g}/rel_l2"
                out[f"{layer} {g} rel_l2"] = mean_last(f[k]) if k in f else float("nan")
            for op in ("w", "x", "dy"):
                k = f"{base}/quant/{op}/sqnr_db"
                out[f"{layer} {op} SQNR dB"] = mean_last(f[k]) if k in f else float("nan")
            flips = np.asarray(f[f"{base}/osc/flips"][()], dtype=np.float64)
            out[f"{layer} flips (run / last {LAST})"] = f"{int(np.nansum(flips))} / {int(np.nansum(flips[-LAST:]))}"
        return out


def main(paths):
    rows = [row(p) for p in paths]
    keys = [k for k in rows[0] if k != "recipe"]
    print("| | " + " | ".join(r["recipe"] for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for k in keys:
        cells = [f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for r in rows]
        print(f"| {k} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
