"""mxsim.grouped_fprop / dgrad / wgrad: bit for bit the C++ library (tests/python/gemm_oracle.cpp
runs emu::grouped_* on the same .npy operands) for every contract class, and the mx-exact
class against an exact rational oracle written here from docs/numerics.md §5."""
import subprocess
from fractions import Fraction

import numpy as np
import pytest

import mxsim
from conftest import GEMM_ORACLE

# One pair per block-dot class of the contract (docs/numerics.md §5.2), plus a tile / mixed pair.
PAIRS = [("mxfp4", "mxfp4"), ("mxfp6_e2m3", "mxfp4"), ("mxfp8", "mxfp8"), ("mxfp8_e5m2", "mxfp8"),
         ("mxfp8", "mxfp8_2d"), ("mxfp4", "mxfp4_2d"), ("fp8_tensor", "fp8_tensor"), ("fp8_row", "fp8_row"),
         ("fp8_block", "fp8_block2d"), ("bf16", "bf16")]


def oracle(tmp, op, a, b, splits, sa, sb, out="fp32", impl="fast", main_grad=None):
    np.save(tmp / "a.npy", a)
    np.save(tmp / "b.npy", b)
    args = [GEMM_ORACLE, op, tmp / "a.npy", tmp / "b.npy", ",".join(map(str, splits)), sa, sb, out, impl, tmp / "o.npy"]
    if main_grad is not None:
        np.save(tmp / "g.npy", main_grad)
        args.append(tmp / "g.npy")
    subprocess.run(list(map(str, args)), check=True)
    return np.load(tmp / "o.npy")


def operands(M, N, K, G, seed):
    rng = np.random.default_rng(seed)
    f = lambda *s: (rng.standard_normal(s) * np.exp2(rng.integers(-3, 4, size=s))).astype(np.float32)
    return f(M, K), f(G, N, K), f(M, N)


@pytest.mark.parametrize("sa,sb", PAIRS)
def test_fprop_dgrad_wgrad_equal_cpp(tmp, sa, sb):
    splits = [32, 0, 96]
    x, w, dy = operands(128, 64, 256, 3, seed=hash((sa, sb)) % 1000)
    cls = mxsim.gemm_class(sa, sb)
    y = mxsim.grouped_fprop(x, w, splits, sa, sb)
    np.testing.assert_array_equal(y.view(np.uint32), oracle(tmp, "fprop", x, w, splits, sa, sb).view(np.uint32), err_msg=cls)
    dx = mxsim.grouped_dgrad(dy, w, splits, sa, sb, out_dtype="bfloat16")
    np.testing.assert_array_equal(dx.view(np.uint32), oracle(tmp, "dgrad", dy, w, splits, sa, sb, "bf16").view(np.uint32))
    if sb.endswith("2d"):
        return  # wgrad operands are quantized along M (1-D blocks): tile recipes are for weights
    g = np.random.default_rng(1).standard_normal((3, 64, 256)).astype(np.float32)
    dw = mxsim.grouped_wgrad(dy, x, splits, sa, sb, main_grad=g)
    np.testing.assert_array_equal(dw.view(np.uint32), oracle(tmp, "wgrad", dy, x, splits, sa, sb, main_grad=g).view(np.uint32))


def test_fast_and_reference_agree_through_python():
    x, w, _ = operands(8, 8, 64, 1, seed=7)
    for pair in [("mxfp4", "mxfp4"), ("mxfp8", "mxfp8"), ("fp8_block", "fp8_block")]:
        a = mxsim.grouped_fprop(x, w, [8], *pair, impl="fast")
        b = mxsim.grouped_fprop(x, w, [8], *pair, impl="reference")
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def round_fp32(q: Fraction) -> np.float32:
    """The FP32 value nearest q, ties to even (an exact rational rounding)."""
    if q == 0:
        return np.float32(0)
    s = -1 if q < 0 else 1
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    e = max(e, -126)
    ulp = Fraction(2) ** (e - 23)
    n, r = divmod(q, ulp)
    n = int(n)
    if r > ulp / 2 or (r == ulp / 2 and n % 2):
        n += 1
    return np.float32(s * float(n * ulp))


def test_mx_exact_fprop_equals_rational_oracle():
    # mx-exact (E2M1 x E2M1): each 32-block dot is exact, times 2^(sa+sb) exactly, then one
    # RNE add into the FP32 accumulator, blocks in ascending K (docs/numerics.md §5).
    x, w, _ = operands(4, 3, 96, 1, seed=11)
    qx, qw = mxsim.quantize(x, "mxfp4"), mxsim.quantize(w[0], "mxfp4")
    cx, cw = mxsim.unpack_fp4(qx.qdata), mxsim.unpack_fp4(qw.qdata)
    vx, vw = mxsim.decode(cx, "e2m1"), mxsim.decode(cw, "e2m1")
    y = mxsim.grouped_fprop(x, w, [4], "mxfp4")
    for i in range(4):
        for j in range(3):
            acc = np.float32(0)
            for b in range(3):
                dot = sum(Fraction(float(vx[i, k])) * Fraction(float(vw[j, k])) for k in range(32 * b, 32 * b + 32))
                sc = Fraction(2) ** (int(qx.scale[i, b]) + int(qw.scale[j, b]) - 254)
                acc = round_fp32(Fraction(float(acc)) + dot * sc)
            assert y[i, j].tobytes() == acc.tobytes(), (i, j, y[i, j], acc)


def test_gemm_on_given_quantized_operands_equals_rational_oracle():
    # A user's own codes and scales (torchao MXTensor layout: packed E2M1 qdata, E8M0 scale
    # bytes), multiplied as given: the same exact rational oracle as above, computed from the
    # hand-made codes, not from anything mxsim quantized.
    rng = np.random.default_rng(5)
    M, N, K = 3, 2, 64
    cx = rng.integers(0, 16, size=(M, K), dtype=np.uint8)
    cw = rng.integers(0, 16, size=(N, K), dtype=np.uint8)
    sx = rng.integers(120, 135, size=(M, K // 32), dtype=np.uint8)
    sw = rng.integers(120, 135, size=(N, K // 32), dtype=np.uint8)
    pack = lambda c: (c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8)
    qx = mxsim.from_torchao(pack(cx), sx, "float4_e2m1fn_x2", 32)
    qw = mxsim.from_torchao(pack(cw)[None], sw[None], "float4_e2m1fn_x2", 32)
    y = mxsim.grouped_fprop(qx, qw, [M])
    vx, vw = mxsim.decode(cx, "e2m1"), mxsim.decode(cw, "e2m1")
    for i in range(M):
        for j in range(N):
            acc = np.float32(0)
            for b in range(K // 32):
                dot = sum(Fraction(float(vx[i, k])) * Fraction(float(vw[j, k])) for k in range(32 * b, 32 * b + 32))
                acc = round_fp32(Fraction(float(acc)) + dot * Fraction(2) ** (int(sx[i, b]) + int(sw[j, b]) - 254))
            assert y[i, j].tobytes() == acc.tobytes(), (i, j, y[i, j], acc)


@pytest.mark.parametrize("spec", ["mxfp4", "mxfp8", "fp8_block"])
def test_gemm_on_quantized_operands_equals_the_array_form(spec):
    # Operands quantized by mxsim.quantize and passed as QuantizedTensors give the bits of the
    # array form, which quantizes the same arrays with the same spec on the way in.
    splits = [32, 0, 96]
    x, w, dy = operands(128, 64, 256, 3, seed=3)
    y = mxsim.grouped_fprop(mxsim.quantize(x, spec), mxsim.quantize(w, spec), splits)
    np.testing.assert_array_equal(y.view(np.uint32), mxsim.grouped_fprop(x, w, splits, spec).view(np.uint32))
    dx = mxsim.grouped_dgrad(mxsim.quantize(dy, spec), mxsim.quantize(w, spec, axis="rows"), splits,
                             out_dtype="bfloat16")
    np.testing.assert_array_equal(dx.view(np.uint32),
                                  mxsim.grouped_dgrad(dy, w, splits, spec, out_dtype="bfloat16").view(np.uint32))
    ends = np.cumsum([0] + splits)
    per_group = lambda a: [mxsim.quantize(a[ends[g]:ends[g + 1]], spec, axis="rows") for g in range(len(splits))]
    g = np.random.default_rng(1).standard_normal((3, 64, 256)).astype(np.float32)
    dw = mxsim.grouped_wgrad(per_group(dy), per_group(x), splits, main_grad=g)
    np.testing.assert_array_equal(dw.view(np.uint32), mxsim.grouped_wgrad(dy, x, splits, spec, main_grad=g).view(np.uint32))
