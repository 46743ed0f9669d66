#!/usr/bin/env python3
"""Record what ml_dtypes and PyTorch do when they convert FP32 to each narrow format.

Runs where ml_dtypes and torch are installed (the device machine has both; Debian
does not package them). Inputs: every BF16 bit pattern and every FP16 bit pattern,
widened exactly to FP32 (131072 values, BF16 first). For each (library, format) it
writes the codes, one per byte (two bytes little-endian for 16-bit formats), as
gzip files under the output folder, plus MANIFEST.txt with the versions. The
CI test tests/test_golden_libraries.cpp compares mxsim's encode() with them.
"""
import gzip
import os
import sys

import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "golden"
os.makedirs(out, exist_ok=True)

bf16 = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
fp16 = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
x = np.concatenate([bf16, fp16])
assert x.dtype == np.float32 and x.size == 131072

manifest = []


def save(lib, fmt, codes):
    codes = np.ascontiguousarray(codes)
    path = os.path.join(out, f"{lib}_{fmt}.bin.gz")
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(codes.tobytes())
    manifest.append(f"{lib} {fmt} {codes.dtype} {codes.size}")


with np.errstate(all="ignore"):
    try:
        import ml_dtypes

        manifest.append(f"# ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}")
        for fmt, dt in [("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2),
                        ("e4m3fnuz", ml_dtypes.float8_e4m3fnuz), ("e5m2fnuz", ml_dtypes.float8_e5m2fnuz),
                        ("e3m2", ml_dtypes.float6_e3m2fn), ("e2m3", ml_dtypes.float6_e2m3fn),
                        ("e2m1", ml_dtypes.float4_e2m1fn), ("e8m0", ml_dtypes.float8_e8m0fnu),
                        ("bf16", ml_dtypes.bfloat16)]:
            y = x.astype(dt)
            save("ml_dtypes", fmt, y.view(np.uint16 if y.itemsize == 2 else np.uint8))
    except Exception as e:  # noqa: BLE001 - record and go on to torch
        manifest.append(f"# ml_dtypes failed: {e!r}")

    try:
        import torch

        manifest.append(f"# torch {torch.__version__}")
        t = torch.from_numpy(x.copy())
        for fmt, dt in [("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2),
                        ("e4m3fnuz", torch.float8_e4m3fnuz), ("e5m2fnuz", torch.float8_e5m2fnuz),
                        ("e8m0", getattr(torch, "float8_e8m0fnu", None)), ("bf16", torch.bfloat16),
                        ("fp16", torch.float16)]:
            if dt is None:
                continue
            y = t.to(dt)
            view = torch.int16 if y.element_size() == 2 else torch.uint8
            codes = y.view(view).numpy()
            save("torch_cpu", fmt, codes.view(np.uint16) if codes.dtype == np.int16 else codes)
            if torch.cuda.is_available():
                yc = t.cuda().to(dt).view(view).cpu().numpy()
                save("torch_cuda", fmt, yc.view(np.uint16) if yc.dtype == np.int16 else yc)
    except Exception as e:  # noqa: BLE001
        manifest.append(f"# torch failed: {e!r}")

with open(os.path.join(out, "MANIFEST.txt"), "w") as f:
    f.write("\n".join(manifest) + "\n")
print("\n".join(manifest))
