"""Shared helpers of the Python tests: the paths ctest passes, running the C++
`mxsim` binary, and a safetensors reader written from the format's README
(8-byte little-endian header length, JSON header, raw buffer) so the tests need
no safetensors package."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

MXSIM_BIN = os.environ.get("MXSIM_BIN", "")
SOURCE_DIR = os.environ.get("MXSIM_SOURCE_DIR", "")
GEMM_ORACLE = os.environ.get("MXSIM_GEMM_ORACLE", "")
TRACE_WRITER = os.environ.get("MXSIM_TRACE_WRITER", "")


def run_mxsim(*args, check=True):
    """Run the mxsim binary; returns (returncode, stdout, stderr)."""
    assert MXSIM_BIN and os.path.exists(MXSIM_BIN), f"MXSIM_BIN={MXSIM_BIN!r}: the mxsim binary (ctest sets it)"
    p = subprocess.run([MXSIM_BIN, *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"mxsim {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}")
    return p.returncode, p.stdout, p.stderr


def mxsim_json(*args):
    return json.loads(run_mxsim(*args, "--json")[1])


_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "U8": np.uint8, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
              "F8_E8M0": np.uint8, "F4": np.uint8, "BF16": np.uint16, "F16": np.float16, "I64": np.int64}


def read_safetensors(path):
    """{name: (dtype string, shape, ndarray of the raw bytes as the dtype's storage)}, metadata."""
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    header = json.loads(b[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        s, t = e["data_offsets"]
        raw = np.frombuffer(b[8 + n + s:8 + n + t], dtype=_ST_DTYPES[e["dtype"]])
        shape = list(e["shape"])
        if e["dtype"] == "F4":  # two 4-bit elements per byte: the bytes of [.., K/2]
            shape[-1] //= 2
        out[name] = (e["dtype"], e["shape"], raw.reshape(shape))
    return out, meta


@pytest.fixture
def tmp(tmp_path):
    return tmp_path
