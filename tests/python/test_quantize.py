"""mxsim.quantize / dequantize: bit for bit the bytes `mxsim quantize` and `mxsim dequantize`
(the C++ library) write, for every recipe, both block axes, grouped input and stochastic
rounding; and a hand-computed MXFP4 row (an independent oracle)."""
import numpy as np
import pytest

import mxsim
from conftest import read_safetensors, run_mxsim

RECIPES = mxsim.recipes()


def sample(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * np.exp2(rng.integers(-6, 7, size=shape)).astype(np.float32)
    x.flat[3] = 0.0
    return x


def cpp_quantize(tmp, x, *args):
    np.save(tmp / "x.npy", x)
    run_mxsim("quantize", *args, tmp / "x.npy", "-o", tmp / "q.safetensors")
    t, meta = read_safetensors(tmp / "q.safetensors")
    return t, meta


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("axis", ["cols", "rows"])
def test_quantize_equals_cpp(tmp, recipe, axis):
    x = sample((64, 256))
    t, meta = cpp_quantize(tmp, x, "--recipe", recipe, "--axis", axis)
    q = mxsim.quantize(x, recipe, axis=axis)
    np.testing.assert_array_equal(q.qdata, t["x.data"][2])
    scale_name = "x.scale_inv" if q.scale_kind == "fp32" else "x.scale"
    np.testing.assert_array_equal(q.scale.view(np.uint8), t[scale_name][2].view(np.uint8))
    assert meta["x.elem_format"] == q.elem_dtype
    if "x.tensor_scale_inv" in t:
        assert np.float32(q.tensor_scale_inv).tobytes() == t["x.tensor_scale_inv"][2].tobytes()
    # dequantize: the Python values equal what `mxsim dequantize` writes from those files
    run_mxsim("dequantize", tmp / "q.safetensors", "-o", tmp / "d.npy")
    np.testing.assert_array_equal(mxsim.dequantize(q).view(np.uint32), np.load(tmp / "d.npy").view(np.uint32))


@pytest.mark.parametrize("recipe", ["mxfp4", "mxfp4_2d", "mxfp8", "fp8_block", "nvfp4"])
def test_grouped_3d_equals_cpp(tmp, recipe):
    x = sample((3, 32, 64), seed=1)
    t, _ = cpp_quantize(tmp, x, "--recipe", recipe)
    q = mxsim.quantize(x, recipe)
    assert q.qdata.shape[0] == 3
    np.testing.assert_array_equal(q.qdata, t["x.data"][2])


@pytest.mark.parametrize("rule", ["floor", "rceil", "even", "ceil"])
def test_scaling_modes_and_sr_equal_cpp(tmp, rule):
    x = sample((16, 96), seed=2)
    t, _ = cpp_quantize(tmp, x, "--recipe", "mxfp4", "--scale-rule", rule, "--round", "sr", "--seed", 99)
    q = mxsim.quantize(x, "mxfp4", scaling_mode=rule, rounding="sr", seed=99)
    np.testing.assert_array_equal(q.qdata, t["x.data"][2])
    np.testing.assert_array_equal(q.scale, t["x.scale"][2])
    # the torchao-style spelling of the same spec gives the same bytes
    q2 = mxsim.quantize(x, elem_dtype="float4_e2m1fn_x2", block_size=32, scaling_mode=rule, rounding="sr", seed=99)
    np.testing.assert_array_equal(q2.qdata, q.qdata)


def test_hadamard_equals_cpp(tmp):
    x = sample((32, 64), seed=3)
    t, _ = cpp_quantize(tmp, x, "--recipe", "mxfp4", "--axis", "rows", "--hadamard")
    q = mxsim.quantize(x, "mxfp4", axis="rows", hadamard=True)
    np.testing.assert_array_equal(q.qdata, t["x.data"][2])


def test_hand_computed_mxfp4_row():
    # Values in units of 2^-4: amax 6 units = 1.5 * 2^-2 -> s = -2 - 2 = -4 (EVEN and FLOOR),
    # E8M0 byte 123. E2M1 codes: 6->7, 3->5, 1.5->3, 0.5->1, -0.75->0xA (tie to even), 0.25->0,
    # 0->0, -6->0xF, 5->6 (tie), 2.5->4 (tie), -0.25->8 (-0), 1.25->2 (tie); packed low nibble first.
    u = np.array([6, 3, 1.5, 0.5, -0.75, 0.25, 0, -6, 5, 2.5, -0.25, 1.25] + [0] * 20, np.float32) / 16
    for kw in [dict(recipe="mxfp4"), dict(elem_dtype="float4_e2m1fn_x2", scaling_mode="floor")]:
        q = mxsim.quantize(u, **kw)
        assert q.qdata.tolist() == [0x57, 0x13, 0x0A, 0xF0, 0x46, 0x28] + [0] * 10
        assert q.scale.tolist() == [123]
    scale, qdata = mxsim.to_mx(u, "float4_e2m1fn_x2", 32, "floor")  # torchao's (scale, data) order
    assert scale.tolist() == [123] and qdata[0] == 0x57
    d = mxsim.dequantize(mxsim.quantize(u, "mxfp4"))
    assert d[:12].tolist() == [6 / 16, 3 / 16, 1.5 / 16, .5 / 16, -1 / 16, 0, 0, -6 / 16, 4 / 16, 2 / 16, -0.0, 1 / 16]


def test_stats_equal_cpp(tmp):
    x = sample((8, 64), seed=4)
    np.save(tmp / "x.npy", x)
    j = __import__("json").loads(run_mxsim("quantize", "--recipe", "mxfp8", tmp / "x.npy", "--json")[1])
    s = mxsim.quant_stats(x, mxsim.quantize(x, "mxfp8"))
    cpp = j["tensors"][0]
    assert s["mse"] == cpp["mse"] and s["underflow"] == cpp["underflow"] and s["saturated"] == cpp["saturated"]


def test_qdq_and_spec_errors():
    x = sample((4, 32))
    np.testing.assert_array_equal(mxsim.qdq(x, "mxfp8"), mxsim.dequantize(mxsim.quantize(x, "mxfp8")))
    with pytest.raises(ValueError, match="unknown recipe"):
        mxsim.quantize(x, "mxfp9")
    with pytest.raises(ValueError, match="scaling_mode applies"):
        mxsim.quantize(x, "fp8_block", scaling_mode="floor")
    with pytest.raises(ValueError, match="not a float dtype"):
        mxsim.quantize(np.zeros((2, 32), np.int32), "mxfp8")
    assert mxsim.spec("mxfp4").block_size == (1, 32)


def test_assert_same_bytes_names_the_first_difference():
    a = np.arange(8, dtype=np.uint8)
    mxsim.assert_same_bytes(a, a.reshape(2, 4))
    b = a.copy()
    b[5] = 0
    with pytest.raises(AssertionError, match="1 of 8 bytes differ; the first at byte 5"):
        mxsim.assert_same_bytes(b, a)
    with pytest.raises(AssertionError, match="8 bytes vs 4 bytes"):
        mxsim.assert_same_bytes(a, a[:4])


def test_quantize_float64_rounds_mx_elements_once():
    # mxfp8 (E4M3 1x32 RCEIL): amax 448 gives s = 0, so elements are the values themselves.
    # 1.0625 + 2^-40 -> 0x39 and 1.1875 - 2^-40 -> 0x39 when rounded once; through float32 they
    # are ties (0x38, 0x3A). The bytes equal `mxsim quantize` of the same F64 .npy.
    x = np.zeros((1, 32))
    x[0, 0] = 1.0625 + 2.0 ** -40
    x[0, 1] = 1.1875 - 2.0 ** -40
    x[0, 2] = 448.0
    q = mxsim.quantize(x, "mxfp8")
    assert list(q.qdata[0, :4]) == [0x39, 0x39, 0x7E, 0]
    assert q.scale[0, 0] == 127
    q32 = mxsim.quantize(x.astype(np.float32), "mxfp8")
    assert list(q32.qdata[0, :3]) == [0x38, 0x3A, 0x7E]


def test_amax_epsilon_and_pow2_scale_by_hand():
    # x = [0.25, -0.5, 0.125, 0] (amax 0.5), E4M3 current scaling (docs/numerics.md §3.3):
    # eps 1 -> scale 448: codes 112 0x6E, -224 0xF6, 56 0x66, 0; scale_inv fl32(1/448) = 0x3B124925.
    # eps 3 + pow2 -> 448/3 rounded down to 128: 0x60, 0xE8, 0x58, 0; scale_inv 2^-7.
    x = np.array([[0.25, -0.5, 0.125, 0]], np.float32)
    q = mxsim.quantize(x, "fp8_tensor", amax_epsilon=1.0)
    assert q.qdata.tolist() == [[0x6E, 0xF6, 0x66, 0x00]]
    assert q.scale.view(np.uint32).tolist() == [[0x3B124925]]
    s = mxsim.spec("fp8_tensor", amax_epsilon=3.0, pow2_scale=True)
    assert s.pow2_scale and s.amax_epsilon == 3.0
    q = mxsim.quantize(x, spec=s)
    assert q.qdata.tolist() == [[0x60, 0xE8, 0x58, 0x00]]
    assert q.scale.view(np.uint32).tolist() == [[0x3C000000]]
    # on top of a given spec; fp8_block off its default power of two: scale 896, scale_inv fl32(1/896)
    q = mxsim.quantize(x, spec=mxsim.spec("fp8_block"), pow2_scale=False)
    assert q.qdata.tolist() == [[0x76, 0xFE, 0x6E, 0x00]]
    assert q.scale.view(np.uint32).tolist() == [[0x3A924925]]
    np.testing.assert_array_equal(mxsim.qdq(x, "fp8_tensor", amax_epsilon=1.0),
                                  mxsim.dequantize(mxsim.quantize(x, "fp8_tensor", amax_epsilon=1.0)))
    for bad, msg in [(dict(recipe="mxfp4", amax_epsilon=1.0), "applies to FP32-scaled"),
                     (dict(recipe="fp8_tensor", amax_epsilon=-1.0), "finite number >= 0"),
                     (dict(recipe="fp8_tensor", amax_epsilon=1e-50), "becomes 0 in FP32")]:
        with pytest.raises(ValueError, match=msg):
            mxsim.spec(**bad)


def _f32(bits):
    return np.array(bits, np.uint32).view(np.float32)


def test_torchao_scale_conventions_by_hand(tmp):
    # docs/numerics.md §3.4; the bytes are derived in tests/test_quantize_torchao.cpp. Row 0 =
    # [1.5, X, -X, 0], X = 0x3D392492 = 12133522 * 2^-28; row 1 zeros. fp8_max 448.
    # torchao (CPU): scale fl32(1.5 / 448) = 14380471 * 2^-32 = 0x3B5B6DB7; X / it = 13.5 - 0.47 ulp
    #   -> 13.5, the tie of 13 and 14: 0x56. Zero row: scale 0, 0 / 0 NaN -> 0x7F.
    # torchao_cuda: fl32(1.5 * fl32(1/448)) = fl32(1.5 * 9586981 * 2^-32), the tie 14380471.5 -> even:
    #   0x3B5B6DB8; X / it = 13.5 - 1.46 ulp -> 13: 0x55.
    # torchao_training: _scale fl32(448 / 1.5) = 0x43955555, X * it -> 13 (0x55); zero row
    #   fl32(448 * (1 / 1e-12)) = 0x57CBBA10, codes 0 (fp32_scale_use divide_by_scale).
    # te: scale 0x43955555, scale_inv fl32(1 / it) = 0x3B5B6DB7, codes as training; zero row scale 1.
    x = _f32([[0x3FC00000, 0x3D392492, 0xBD392492, 0], [0, 0, 0, 0x80000000]])
    want = {
        "torchao": ([[0x7E, 0x56, 0xD6, 0], [0x7F] * 4], [[0x3B5B6DB7], [0]], "multiply_scale_inv"),
        "torchao_cuda": ([[0x7E, 0x55, 0xD5, 0], [0x7F] * 4], [[0x3B5B6DB8], [0]], "multiply_scale_inv"),
        "torchao_training": ([[0x7E, 0x55, 0xD5, 0], [0, 0, 0, 0x80]], [[0x43955555], [0x57CBBA10]], "divide_by_scale"),
        "te": ([[0x7E, 0x55, 0xD5, 0], [0, 0, 0, 0x80]], [[0x3B5B6DB7], [0x3F800000]], "multiply_scale_inv"),
    }
    for conv, (codes, scales, use) in want.items():
        q = mxsim.quantize(x, "fp8_row", scale_convention=conv)
        assert q.qdata.tolist() == codes, conv
        assert q.scale.view(np.uint32).tolist() == scales, conv
        assert q.fp32_scale_use == use and q.spec.scale_convention == conv
    # dequantize = torchao's: Float8Tensor code * scale (14 * 0x3B5B6DB7 -> 0.046875), training
    # code / _scale (13 / 0x43955555 -> 0x3D324925); the layout readers agree from the same arrays.
    q = mxsim.quantize(x, "fp8_row", scale_convention="torchao")
    d = mxsim.dequantize(q)
    assert d.view(np.uint32)[0].tolist() == [0x3FC00000, 0x3D400000, 0xBD400000, 0]
    assert np.isnan(d[1]).all()
    r = mxsim.from_torchao_float8(q.qdata, q.scale, elem_dtype="float8_e4m3fn")
    np.testing.assert_array_equal(mxsim.dequantize(r).view(np.uint32), d.view(np.uint32))
    t = mxsim.quantize(x, "fp8_row", scale_convention="torchao_training")
    dt = mxsim.qdq(x, "fp8_row", scale_convention="torchao_training")
    assert dt.view(np.uint32)[0].tolist() == [0x3FC00000, 0x3D324925, 0xBD324925, 0]
    rt = mxsim.from_torchao_float8_training(t.qdata, t.scale, elem_dtype="float8_e4m3fn")
    np.testing.assert_array_equal(mxsim.dequantize(rt).view(np.uint32), dt.view(np.uint32))
    # the same bytes as `mxsim quantize --scale-convention`
    np.save(tmp / "x.npy", x)
    run_mxsim("quantize", "-r", "fp8_row", "--scale-convention", "torchao_cuda", tmp / "x.npy", "-o", tmp / "q.safetensors")
    tt, meta = read_safetensors(tmp / "q.safetensors")
    c = mxsim.quantize(x, "fp8_row", scale_convention="torchao_cuda")
    assert tt["x.qdata"][2].view(np.uint8).tolist() == c.qdata.tolist()
    assert tt["x.scale"][2].view(np.uint32).tolist() == c.scale.view(np.uint32).tolist()
    assert meta["x.scale_convention"] == "torchao_cuda"


def test_torchao_hp_dtype_and_pow2_by_hand():
    # BF16 tensor [1.5, 9 * 2^-10]: torchao's scale in BF16: 0x3B5B6DB7 -> 0x3B5B0000 = 219 * 2^-16;
    # 9 * 2^-10 / it = 576 / 219 = 2.63 -> 2.75 (0x43). In FP32: 2.625 - 2.6e-8 -> 2.625, tie -> 2.5 (0x42).
    x = _f32([[0x3FC00000, 0x3C100000]])
    q = mxsim.quantize(x, "fp8_tensor", scale_convention="torchao", hp_dtype="bfloat16")
    assert q.qdata.tolist() == [[0x7E, 0x43]] and q.scale.view(np.uint32).tolist() == [[0x3B5B0000]]
    assert q.spec.hp_dtype == "bfloat16"
    q = mxsim.quantize(x, "fp8_tensor", scale_convention="torchao")
    assert q.qdata.tolist() == [[0x7E, 0x42]] and q.scale.view(np.uint32).tolist() == [[0x3B5B6DB7]]
    # a float16 array: hp_dtype float16 by default: 0x3B5B6DB7 to FP16 (10 bits) -> 0x3B5B6000
    q = mxsim.quantize(x.astype(np.float16), "fp8_tensor", scale_convention="torchao")
    assert q.spec.hp_dtype == "float16" and q.scale.view(np.uint32).tolist() == [[0x3B5B6000]]
    with pytest.raises(ValueError, match="not a bfloat16 value"):
        mxsim.quantize(_f32([[0x3D392492]]), "fp8_tensor", scale_convention="torchao", hp_dtype="bfloat16")
    # training pow2: A = 0x3F600001, 448 / A = 0x43FFFFFF (512 - 2^-15); torchao's exp2(floor(log2)):
    # log2 = 9 - 8.6e-8 rounds to 9.0 in FP32, so 512 (not 256); A * 512 -> clamp 448 (0x7E).
    y = _f32([[0x3F600001, 0x3F000000]])
    q = mxsim.quantize(y, "fp8_tensor", scale_convention="torchao_training", pow2_scale=True)
    assert q.scale.view(np.uint32).tolist() == [[0x44000000]] and q.qdata.tolist() == [[0x7E, 0x78]]
    s = mxsim.spec("fp8_block", scale_convention="torchao")
    assert not s.pow2_scale and s.scale_convention == "torchao"
    for bad, msg in [(dict(recipe="fp8_tensor", scale_convention="torchao", pow2_scale=True), "no power-of-two"),
                     (dict(recipe="fp8_tensor", scale_convention="torchao_training", amax_epsilon=1e-4), "EPS"),
                     (dict(recipe="fp8_tensor", scale_convention="torchao_training", hp_dtype="bfloat16"),
                      "applies to scale conventions torchao and torchao_cuda"),
                     (dict(recipe="mxfp8", scale_convention="torchao"), "applies to FP32-scaled"),
                     (dict(recipe="fp8_tensor", scale_convention="nope"), "unknown scale convention")]:
        with pytest.raises(ValueError, match=msg):
            mxsim.spec(**bad)
    with pytest.raises(ValueError, match="float64"):
        mxsim.quantize(x.astype(np.float64), "fp8_tensor", scale_convention="torchao")


def test_hadamard_signs_in_a_spec_negate_the_inputs_first():
    # mxsim.spec(..., hadamard=True, hadamard_signs=mask): H (D x) equals H of x negated by hand
    # (the negation is exact), here for NVFP4, whose tensor amax is then the transformed one's.
    x = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32)
    mask = 0xD7E8  # TransformerEngine's NVFP4 wgrad sign vector
    d = np.array([-1.0 if (mask >> k) & 1 else 1.0 for k in range(16)], np.float32)
    s = mxsim.spec("nvfp4", hadamard=True, hadamard_signs=mask)
    assert s.hadamard_signs == mask and s.hadamard
    q = mxsim.quantize(x, spec=s)
    r = mxsim.quantize(x * np.tile(d, 2), "nvfp4", hadamard=True)
    assert np.array_equal(q.qdata, r.qdata) and np.array_equal(q.scale, r.scale)
    with pytest.raises(ValueError, match="hadamard_signs applies to hadamard=True only"):
        mxsim.spec("nvfp4", hadamard_signs=mask)
