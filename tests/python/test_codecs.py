"""mxsim.encode / decode: against ml_dtypes' published conversions (tests/golden, recorded
from ml_dtypes 0.6.0) and bit for bit against the C++ library through `mxsim cast`."""
import gzip
import os

import numpy as np
import pytest

import mxsim
from conftest import SOURCE_DIR, mxsim_json

FORMATS_8 = ["e4m3", "e5m2", "e4m3fnuz", "e5m2fnuz", "e3m2", "e2m3", "e2m1", "e8m0"]


def golden_inputs():
    bf16 = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    fp16 = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)  # exact widening
    return np.concatenate([bf16, fp16])


@pytest.mark.parametrize("fmt", FORMATS_8)
def test_encode_matches_ml_dtypes_within_range(fmt):
    # ml_dtypes' astype is RNE with IEEE overflow. Inputs within the format's finite range
    # (ties, subnormals, both signs) must give ml_dtypes' codes exactly; out-of-range,
    # NaN and (E8M0) non-positive inputs follow conventions the C++ golden test covers.
    path = os.path.join(SOURCE_DIR, "tests", "golden", f"ml_dtypes_{fmt}.bin.gz")
    want = np.frombuffer(gzip.open(path).read(), dtype=np.uint8)
    x = golden_inputs()
    info = {f["name"]: f for f in mxsim.formats()}[fmt]
    keep = np.isfinite(x) & (np.abs(x) <= info["max"])
    if fmt == "e8m0":  # positive; FP32 subnormals in (2^-127, 1.5 * 2^-127) are a library quirk
        keep &= x >= 2.0 ** -126                  # (tests/test_golden_libraries.cpp checks it)
    got = mxsim.encode(x[keep], fmt, overflow="ieee")
    assert got.dtype == np.uint8
    bad = np.flatnonzero(got != want[keep])
    assert bad.size == 0, f"{fmt}: {bad.size} codes differ, first x={x[keep][bad[0]]!r}"
    assert keep.sum() > 10000


def test_bf16_encode_matches_ml_dtypes():
    path = os.path.join(SOURCE_DIR, "tests", "golden", "ml_dtypes_bf16.bin.gz")
    want = np.frombuffer(gzip.open(path).read(), dtype=np.uint16)
    x = golden_inputs()
    keep = ~np.isnan(x)
    np.testing.assert_array_equal(mxsim.encode(x[keep], "bf16", overflow="ieee"), want[keep])


SAMPLE = ["0", "-0", "1", "-0.75", "0.25", "3.5", "5", "7", "448", "464", "500", "57344", "61440", "1e-3", "-1e-7",
          "2.5e-39", "inf", "-inf", "nan", "0x1.8p-9", "6.1e-5", "-240", "1.0e38", "3.4028235e38", "1.1754943e-38"]


@pytest.mark.parametrize("fmt", FORMATS_8 + ["bf16", "fp16"])
@pytest.mark.parametrize("rounding", ["rne", "rz"])
@pytest.mark.parametrize("overflow", ["saturate", "ieee"])
@pytest.mark.parametrize("scale_exp", [0, -3, 5])
def test_encode_equals_cpp_cast(fmt, rounding, overflow, scale_exp):
    j = mxsim_json("cast", "--to", fmt, "--round", rounding, "--overflow", overflow, "--scale-exp", scale_exp, *SAMPLE)
    x = np.array([float.fromhex(v) if v.startswith("0x") else float(v) for v in SAMPLE]).astype(np.float32)
    got = mxsim.encode(x, fmt, rounding=rounding, overflow=overflow, scale_exp=scale_exp)
    want = np.array([v["code"] for v in j["values"]], dtype=got.dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fmt", ["e2m1", "e4m3", "e5m2", "e3m2"])
def test_stochastic_encode_equals_cpp_cast(fmt):
    x = np.array([0.3, -1.1, 2.6, 0.07], np.float32)
    for r in [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 123456789]:
        j = mxsim_json("cast", "--to", fmt, "--round", "sr", "--rand", r, *[repr(float(v)) for v in x])
        got = mxsim.encode(x, fmt, rounding="sr", rand=np.full(x.shape, r, np.uint32))
        np.testing.assert_array_equal(got, [v["code"] for v in j["values"]])


@pytest.mark.parametrize("fmt", FORMATS_8)
def test_decode_every_code_equals_cpp(fmt):
    bits = {f["name"]: f for f in mxsim.formats()}[fmt]["bits"]
    codes = np.arange(1 << bits, dtype=np.uint32)
    j = mxsim_json("cast", "--from", fmt, "--to", "fp32", *map(str, codes))
    want = np.array([int(v["fp32_bits"], 16) for v in j["values"]], np.uint32)
    np.testing.assert_array_equal(mxsim.decode(codes, fmt).view(np.uint32), want)


def test_decode_known_values():
    # OCP MX v1.0 Table 1 (E2M1): 0 0.5 1 1.5 2 3 4 6, then the negatives.
    np.testing.assert_array_equal(mxsim.decode(np.arange(16), "e2m1"),
                                  [0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])
    assert mxsim.decode(np.array([0x7E]), "e4m3")[0] == 448  # OFP8 E4M3 max
    assert np.isnan(mxsim.decode(np.array([0xFF]), "e8m0")[0])


def test_errors_are_python_exceptions():
    with pytest.raises(ValueError, match="unknown format"):
        mxsim.encode(np.zeros(2, np.float32), "e9m9")
    with pytest.raises(ValueError, match="needs rand"):
        mxsim.encode(np.zeros(2, np.float32), "e4m3", rounding="sr")
    with pytest.raises(ValueError, match="more than 4 bits"):
        mxsim.decode(np.array([16]), "e2m1")
