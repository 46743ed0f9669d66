"""mxsim.encode / decode: against ml_dtypes' published conversions (tests/golden, recorded
from ml_dtypes 0.6.0) and bit for bit against the C++ library through `mxsim cast`."""
import gzip
import os
import subprocess

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
@pytest.mark.parametrize("rounding", ["rne", "rz", "ru"])
@pytest.mark.parametrize("overflow", ["saturate", "ieee"])
@pytest.mark.parametrize("scale_exp", [0, -3, 5])
def test_encode_equals_cpp_cast(fmt, rounding, overflow, scale_exp):
    j = mxsim_json("cast", "--to", fmt, "--round", rounding, "--overflow", overflow, "--scale-exp", scale_exp, *SAMPLE)
    # The CLI reads each value as FP64 (strtod) and rounds it once; so does encode for float64.
    x = np.array([float.fromhex(v) if v.startswith("0x") else float(v) for v in SAMPLE])
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


def decode_oracle():
    """{format: uint32 array of what each code decodes to}: the oracle table of
    tests/test_formats_oracle.hpp (from the published definitions; every NaN code
    the canonical 0x7FC00000), printed by tests/python/decode_oracle.cpp."""
    exe = os.environ.get("MXSIM_DECODE_ORACLE", "")
    assert exe and os.path.exists(exe), f"MXSIM_DECODE_ORACLE={exe!r}: the oracle table's program (ctest sets it)"
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    return {ln.split()[0]: np.array(ln.split()[1:], np.uint64).astype(np.uint32) for ln in out.splitlines()}


def test_decode_every_code_of_every_format_equals_the_oracle():
    """Every code of every format of at most 16 bits, FNUZ's NaN 0x80 included: the oracle's bits,
    the same table `mxsim cast --from` and `mxsim dequantize` are checked against (C++ suites)."""
    table = decode_oracle()
    assert set(FORMATS_8) <= set(table)
    for fmt, want in table.items():
        codes = np.arange(len(want), dtype=np.uint32)
        got = mxsim.decode(codes, fmt).view(np.uint32)
        bad = np.nonzero(got != want)[0]
        assert bad.size == 0, f"{fmt}: codes {bad[:8]} decode to {got[bad[:8]]}, the oracle says {want[bad[:8]]}"


def test_encode_widening_keeps_inf_under_saturate():
    """float16 into fp16 / fp32 and float32 into fp32 widen: exact under either overflow policy
    (docs/numerics.md §2.3); float32 into fp16 narrows and saturates."""
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    not_nan = ~np.isnan(h)
    for overflow in ["saturate", "ieee"]:
        np.testing.assert_array_equal(mxsim.encode(h, "fp16", overflow=overflow)[not_nan], np.arange(65536)[not_nan])
        np.testing.assert_array_equal(mxsim.encode(h, "fp32", overflow=overflow)[not_nan],
                                      h[not_nan].astype(np.float32).view(np.uint32))
        inf32 = np.array([np.inf, -np.inf], np.float32)
        np.testing.assert_array_equal(mxsim.encode(inf32, "fp32", overflow=overflow), [0x7F800000, 0xFF800000])
    assert mxsim.encode(np.array([np.inf], np.float32), "fp16")[0] == 0x7BFF


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


def f64(e, frac):
    """The float64 (1 + frac / 2^52) * 2^e, built from its bit pattern."""
    return np.array([((e + 1023) << 52) | frac], np.uint64).view(np.float64)[0]


def bit(i):
    return 1 << (52 - i)


# (format, rounding, float64 input, code): each value sits just above / below a tie of the target
# (or just below a grid value, for RZ) by 2^-40, which a rounding to float32 first would erase;
# the codes are worked out by hand (tests/test_round_f64.cpp has the same cases with comments).
HAND_F64 = [
    ("e4m3", "rne", f64(0, bit(4) + bit(40)), 0x39),           # 1.0625+: above the tie -> 1.125
    ("e4m3", "rne", f64(0, bit(4) + bit(3) - bit(40)), 0x39),  # 1.1875-: below the tie -> 1.125
    ("e4m3", "rz", f64(0, bit(2) - bit(40)), 0x39),            # 1.25-: -> 1.125
    ("e2m1", "rne", f64(0, bit(2) + bit(40)), 0x3),            # 1.25+: -> 1.5
    ("e2m1", "rne", f64(0, bit(1) + bit(2) - bit(40)), 0x3),   # 1.75-: -> 1.5
    ("e2m1", "rz", f64(0, (1 << 52) - bit(40)), 0x3),          # 2-: -> 1.5
    ("bf16", "rne", f64(0, bit(8) + bit(40)), 0x3F81),
    ("bf16", "rz", f64(0, bit(6) - bit(40)), 0x3F81),
    ("fp16", "rne", f64(0, bit(11) + bit(40)), 0x3C01),
    ("fp16", "rz", f64(0, bit(9) - bit(40)), 0x3C01),
    ("fp32", "rne", f64(0, bit(24) + bit(50)), 0x3F800001),
    ("fp32", "rz", f64(0, bit(23) - bit(50)), 0x3F800000),
]


@pytest.mark.parametrize("fmt,rounding,x,code", HAND_F64)
def test_encode_float64_rounds_once(fmt, rounding, x, code):
    got = mxsim.encode(np.array([x]), fmt, rounding=rounding)
    assert int(got[0]) == code
    if fmt != "fp32":  # the same value made float32 first lands on a tie / grid point: another code
        assert int(mxsim.encode(np.array([x], np.float32), fmt, rounding=rounding)[0]) != code


def test_e8m0_scale_bytes():
    # Hand-derived (docs/numerics.md §3.1-3.2; E4M3 emax 8, max 448; E2M1 emax 2, max 6).
    amax = np.array([256.0, np.nextafter(np.float32(256), np.float32(0)), np.nextafter(np.float32(256), np.float32(1e9)),
                     448.0, 0.0, 2.0 ** -140, np.nan, np.inf], np.float32)
    np.testing.assert_array_equal(mxsim.e8m0_scale(amax, "float8_e4m3fn", "floor"),
                                  [127, 126, 127, 127, 0, 0, 255, 255])
    np.testing.assert_array_equal(mxsim.e8m0_scale(amax, "e4m3", "ceil"), [127, 127, 128, 128, 0, 0, 255, 255])
    np.testing.assert_array_equal(mxsim.e8m0_scale(np.array([448, 449, 224], np.float32), "e4m3", "rceil"),
                                  [127, 128, 126])
    np.testing.assert_array_equal(mxsim.e8m0_scale(np.array([6, 7], np.float32), "float4_e2m1fn_x2", "EVEN"), [127, 128])
    assert mxsim.e8m0_scale(np.array([[7.0]], np.float32), "e2m1").dtype == np.uint8  # floor by default
    assert mxsim.e8m0_scale(np.array([[7.0]], np.float32), "e2m1").shape == (1, 1)
    # float64 amax is rounded to float32 first: 256 (1 + 2^-28) -> 256 -> CEIL 0.
    assert mxsim.e8m0_scale(np.array([f64(8, bit(28))]), "e4m3", "ceil")[0] == 127
    # The same bytes as `mxsim cast --scale-rule`.
    j = mxsim_json("cast", "--to", "e8m0", "--scale-rule", "rceil", "--elem", "e4m3", *[repr(float(v)) for v in amax])
    np.testing.assert_array_equal(mxsim.e8m0_scale(amax, "e4m3", "rceil"), [v["code"] for v in j["values"]])
    with pytest.raises(ValueError, match="not an element format"):
        mxsim.e8m0_scale(amax, "bf16")
    with pytest.raises(ValueError, match="unknown scale rule"):
        mxsim.e8m0_scale(amax, "e4m3", "nearest")


def test_encode_round_up():
    np.testing.assert_array_equal(mxsim.encode(np.array([1.01, 2.0, 3.0]), "e8m0", rounding="ru"), [128, 128, 129])
    np.testing.assert_array_equal(mxsim.encode(np.array([1.01, -1.01], np.float32), "e4m3", rounding="ru"), [0x39, 0xB8])
