"""QuantizedTensor from torchao and TransformerEngine arrays (mxsim/layouts.hpp): values
computed by hand from the layout definitions, padding ignored, and the CLI's
`mxsim dequantize --layout` giving the same bits."""
import numpy as np
import pytest

import mxsim
from conftest import mxsim_json, run_mxsim


def test_torchao_fp4_hand_values():
    # one row of 64 E2M1 codes 0..15 repeated, packed low nibble first; scales 2^0 and 2^-3
    codes = np.tile(np.arange(16, dtype=np.uint8), 4)
    qdata = mxsim.pack_fp4(codes)[None, :]          # [1, 32] float4_e2m1fn_x2 bytes
    scale = np.array([[127, 124]], np.uint8)        # [1, 2] E8M0
    q = mxsim.from_torchao(qdata, scale, "float4_e2m1fn_x2", 32)
    e2m1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    want = np.concatenate([np.tile(e2m1, 2), np.tile(e2m1, 2) / 8])[None, :]
    np.testing.assert_array_equal(mxsim.dequantize(q), want)
    np.testing.assert_array_equal(mxsim.unpack_fp4(qdata)[0], codes)


def test_te_mxfp8_padding_is_not_read():
    M, K = 3, 40  # rowwise scales [roundup(3, 128), roundup(2, 4)] = [128, 4]
    data = np.full((M, K), 0x38, np.uint8)          # E4M3 0x38 = 1.0
    sc = np.full((128, 4), 0xFF, np.uint8)          # padding: NaN scales that must not be read
    sc[:M, :2] = [[127, 128], [126, 127], [127, 127]]
    q = mxsim.from_te_mxfp8(data, sc, "e4m3")
    d = mxsim.dequantize(q)
    assert d[0, 0] == 1 and d[0, 32] == 2 and d[1, 0] == 0.5 and not np.isnan(d).any()
    # columnwise: blocks of 32 down the columns, scales [roundup(ceil(M/32), 4), roundup(K, 128)]
    cs = np.full((4, 128), 0xFF, np.uint8)
    cs[0, :K] = 126
    dc = mxsim.dequantize(mxsim.from_te_mxfp8(data, cs, "e4m3", columnwise=True))
    np.testing.assert_array_equal(dc, np.full((M, K), 0.5, np.float32))
    with pytest.raises(ValueError, match="TE pads it"):
        mxsim.from_te_mxfp8(data, sc[:, :2], "e4m3")


def test_cli_dequantize_torchao_and_te_layouts_equal_python(tmp):
    rng = np.random.default_rng(5)
    qdata = rng.integers(0, 256, size=(4, 64), dtype=np.uint8)
    qdata[(qdata & 0x7F) == 0x7F] = 0  # no NaN codes
    scale = rng.integers(110, 140, size=(4, 2), dtype=np.uint8)
    np.save(tmp / "w.qdata.npy", qdata)
    np.save(tmp / "w.scale.npy", scale)
    run_mxsim("dequantize", "--layout", "torchao", "--elem-dtype", "float8_e4m3fn", tmp / "w.qdata.npy",
              tmp / "w.scale.npy", "-o", tmp / "w.npy")
    py = mxsim.dequantize(mxsim.from_torchao(qdata, scale, "float8_e4m3fn", 32))
    np.testing.assert_array_equal(np.load(tmp / "w.npy").view(np.uint32), py.view(np.uint32))
    sc = np.zeros((128, 4), np.uint8)
    sc[:4, :2] = scale
    np.save(tmp / "t._rowwise_data.npy", qdata)
    np.save(tmp / "t._rowwise_scale_inv.npy", sc)
    run_mxsim("dequantize", "--elem-dtype", "e4m3", tmp / "t._rowwise_data.npy", tmp / "t._rowwise_scale_inv.npy",
              "-o", tmp / "t.npy")
    np.testing.assert_array_equal(np.load(tmp / "t.npy"), py)


def _to_blocked(plain):
    """torchao's to_blocked (torchao/prototype/mx_formats/utils.py), restated with NumPy
    reshapes: pad to 128 x 4 multiples, tiles (row block, col block), each 128 x 4 tile as
    [4, 32, 4] -> [32, 4, 4] (rows r, r + 32, r + 64, r + 96 side by side). Padding: 0xFF."""
    rows, cols = plain.shape
    nr, nc = -(-rows // 128), -(-cols // 4)
    padded = np.full((nr * 128, nc * 4), 0xFF, np.uint8)
    padded[:rows, :cols] = plain
    blocks = padded.reshape(nr, 128, nc, 4).transpose(0, 2, 1, 3)
    return blocks.reshape(-1, 4, 32, 4).transpose(0, 2, 1, 3).reshape(-1)


def test_torchao_blocked_scales_equal_plain_and_padding_is_not_read():
    rng = np.random.default_rng(11)
    for shape in [(3, 96), (130, 160), (2, 5, 64)]:  # one partial tile; two row tiles, two col tiles; 3-D groups
        qdata = rng.integers(0, 256, size=shape, dtype=np.uint8)
        qdata[(qdata & 0x7F) == 0x7F] = 0x38  # no NaN codes
        plain = rng.integers(100, 150, size=shape[:-1] + (shape[-1] // 32,), dtype=np.uint8)
        groups = plain.reshape(-1, *plain.shape[-2:]) if plain.ndim == 3 else plain[None]
        blocked = np.concatenate([_to_blocked(g) for g in groups])
        want = mxsim.dequantize(mxsim.from_torchao(qdata, plain, "float8_e4m3fn", 32))
        got = mxsim.dequantize(mxsim.from_torchao(qdata, blocked, "float8_e4m3fn", 32, blocked_scales=True))
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        assert not np.isnan(got).any()  # the 0xFF (NaN) padding was never read
        # the same bytes as a 2-D array of any shape
        got2 = mxsim.dequantize(mxsim.from_torchao(qdata, blocked.reshape(-1, 4), "float8_e4m3fn", 32,
                                                   blocked_scales=True))
        np.testing.assert_array_equal(got2.view(np.uint32), want.view(np.uint32))
        with pytest.raises(ValueError, match="swizzled scales hold"):
            mxsim.from_torchao(qdata, blocked[:-1], "float8_e4m3fn", 32, blocked_scales=True)
    # one poisoned byte in the data region does change the result (the test can fail)
    qdata = np.full((3, 32), 0x38, np.uint8)
    plain = np.full((3, 1), 127, np.uint8)
    blocked = _to_blocked(plain)
    blocked[16] = 128  # row 1, col 0: byte (1 % 32) * 16
    d = mxsim.dequantize(mxsim.from_torchao(qdata, blocked, "float8_e4m3fn", 32, blocked_scales=True))
    np.testing.assert_array_equal(d[:, 0], np.array([1, 2, 1], np.float32))


E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def test_torchao_nvfp4_hand_values_and_swizzled_padding():
    # 3 rows x 32: codes cycle 0..15; E4M3 block scales 1.0 (0x38) and 0.5 (0x30); per_tensor_scale 0.25
    codes = (np.arange(96) % 16).astype(np.uint8).reshape(3, 32)
    qdata = mxsim.pack_fp4(codes.reshape(-1)).reshape(3, 16)
    scale = np.array([[0x38, 0x30]] * 3, np.uint8)
    want = E2M1[codes] * np.repeat(np.array([1.0, 0.5], np.float32), 16)[None, :] * np.float32(0.25)
    q = mxsim.from_torchao_nvfp4(qdata, scale, 0.25)
    np.testing.assert_array_equal(mxsim.dequantize(q).view(np.uint32), want.astype(np.float32).view(np.uint32))
    blocked = _to_blocked(scale)  # 0xFF (E4M3 NaN) padding
    qb = mxsim.from_torchao_nvfp4(qdata, blocked, 0.25, blocked_scales=True)
    np.testing.assert_array_equal(mxsim.dequantize(qb), mxsim.dequantize(q))
    # no per_tensor_scale: single-level, tensor scale 1
    np.testing.assert_array_equal(mxsim.dequantize(mxsim.from_torchao_nvfp4(qdata, scale)), want * 4)
    with pytest.raises(ValueError, match="float32: UE4M3 scale bytes"):
        mxsim.from_torchao_nvfp4(qdata, scale.astype(np.float32))


def test_te_nvfp4_rowwise_columnwise_and_amax():
    M, K = 2, 32
    codes = (np.arange(M * K) * 3 % 16).astype(np.uint8).reshape(M, K)
    sc = np.full((128, 4), 0xFF, np.uint8)
    sc[:M, :2] = [[0x38, 0x40], [0x30, 0x3C]]  # 1, 2; 0.5, 1.5
    s = np.array([[1, 2], [0.5, 1.5]], np.float32)
    q = mxsim.from_te_nvfp4(mxsim.pack_fp4(codes.reshape(-1)).reshape(M, K // 2), sc, 10752.0)  # S_dec = 4
    want = E2M1[codes] * np.repeat(s, 16, axis=1) * 4
    np.testing.assert_array_equal(mxsim.dequantize(q), want)
    # columnwise: data [K, M/2] is the transpose, scale of (k, m) at [k, m / 16]
    Mc, Kc = 32, 2
    cc = (np.arange(Kc * Mc) % 16).astype(np.uint8).reshape(Kc, Mc)
    cs = np.full((128, 4), 0xFF, np.uint8)
    cs[:Kc, :2] = [[0x38, 0x30], [0x40, 0x38]]
    csv = np.array([[1, 0.5], [2, 1]], np.float32)
    qc = mxsim.from_te_nvfp4(mxsim.pack_fp4(cc.reshape(-1)).reshape(Kc, Mc // 2), cs, 2688.0, columnwise=True)
    wantc = (E2M1[cc] * np.repeat(csv, 16, axis=1)).T  # S_dec = 1
    np.testing.assert_array_equal(mxsim.dequantize(qc), wantc)
    cdata = mxsim.pack_fp4(cc.reshape(-1)).reshape(Kc, Mc // 2)
    assert np.isnan(mxsim.dequantize(mxsim.from_te_nvfp4(cdata, cs, float("nan"), columnwise=True))).all()
    with pytest.raises(ValueError, match="negative"):
        mxsim.from_te_nvfp4(cdata, cs, -1.0, columnwise=True)


def test_te_fp8_blockwise_1x128_and_128x128():
    nan = np.float32(np.nan)
    d = np.full((2, 256), 0x38, np.uint8)  # E4M3 1.0
    si1 = np.array([[1, 2, nan, nan], [4, 8, nan, nan]], np.float32)  # [kb, m]
    np.testing.assert_array_equal(mxsim.dequantize(mxsim.from_te_fp8_blockwise(d, si1)),
                                  np.repeat(si1[:, :2].T, 128, axis=1))
    si2 = np.array([[0.5, 0.25, nan, nan]], np.float32)  # one row tile, two column tiles
    np.testing.assert_array_equal(mxsim.dequantize(mxsim.from_te_fp8_blockwise(d, si2)),
                                  np.repeat(np.array([[0.5, 0.25]] * 2, np.float32), 128, axis=1))
    with pytest.raises(ValueError, match="float32 scale_inv"):
        mxsim.from_te_fp8_blockwise(d, si1.astype(np.float64))
    with pytest.raises(ValueError, match="block_scaling_dim"):
        mxsim.from_te_fp8_blockwise(np.full((4, 128), 0x38, np.uint8), np.ones((1, 4), np.float32))
    a = mxsim.from_te_fp8_blockwise(np.full((4, 128), 0x38, np.uint8), np.array([[1, 2, 4, 8]], np.float32),
                                    block_scaling_dim=1)
    np.testing.assert_array_equal(mxsim.dequantize(a)[:, 0], [1, 2, 4, 8])


def test_scale_dtype_of_mx_layouts_is_checked():
    # 1-byte arrays of another kind were once read as E8M0 bytes; the dtype is checked now
    qdata = np.full((1, 32), 0x38, np.uint8)
    with pytest.raises(ValueError, match="scale is bool: E8M0 scale bytes"):
        mxsim.from_torchao(qdata, np.ones((1, 1), np.bool_), "e4m3", 32)
    with pytest.raises(ValueError, match="scale_inv is bool: E8M0 scale bytes"):
        mxsim.from_te_mxfp8(qdata, np.ones((128, 4), np.bool_), "e4m3")
    with pytest.raises(ValueError, match="qdata is bool: packed E2M1 bytes"):
        mxsim.from_torchao(qdata[:, :16].astype(np.bool_), np.full((1, 1), 127, np.uint8), "float4_e2m1fn_x2", 32)


def test_cli_dequantize_te_blockwise_and_nvfp4_equal_python(tmp):
    rng = np.random.default_rng(3)
    d = rng.integers(0, 256, size=(3, 200), dtype=np.uint8)
    d[(d & 0x7F) == 0x7F] = 0x38
    si = np.zeros((2, 4), np.float32)
    si[:, :3] = rng.choice(np.array([0.5, 1, 2, 0.125], np.float32), size=(2, 3))
    np.save(tmp / "g._rowwise_data.npy", d)
    np.save(tmp / "g._rowwise_scale_inv.npy", si)
    run_mxsim("dequantize", tmp / "g._rowwise_data.npy", tmp / "g._rowwise_scale_inv.npy", "-o", tmp / "g.npy")
    py = mxsim.dequantize(mxsim.from_te_fp8_blockwise(d, si))
    np.testing.assert_array_equal(np.load(tmp / "g.npy").view(np.uint32), py.view(np.uint32))
    codes = rng.integers(0, 16, size=(4, 32), dtype=np.uint8)
    data = mxsim.pack_fp4(codes.reshape(-1)).reshape(4, 16)
    sc = np.full((128, 4), 0xFF, np.uint8)
    sc[:4, :2] = rng.choice(np.array([0x30, 0x38, 0x40, 0x3C], np.uint8), size=(4, 2))
    np.save(tmp / "n._rowwise_data.npy", data)
    np.save(tmp / "n._rowwise_scale_inv.npy", sc)
    np.save(tmp / "n._amax_rowwise.npy", np.array([3.0], np.float32))
    run_mxsim("dequantize", tmp / "n._rowwise_data.npy", tmp / "n._rowwise_scale_inv.npy", tmp / "n._amax_rowwise.npy",
              "-o", tmp / "n.npy")
    pyn = mxsim.dequantize(mxsim.from_te_nvfp4(data, sc, 3.0))
    np.testing.assert_array_equal(np.load(tmp / "n.npy").view(np.uint32), pyn.view(np.uint32))


# torchao's FP8 tensors. E4M3 code bytes: 0x38 = 1, 0x40 = 2, 0x44 = 3, 0x4A = 0.1001.010 = 5,
# 0x4C = 0.1001.100 = 6, 0x30 = 0.5, 0xB8 = -1; E5M2: 0x3C = 1, 0x42 = 0.10000.10 = 3, 0x7C = +Inf.
# fl32(0.1) = 13421773 * 2^-27 (0x3DCCCCCD); fl32(1/3) = round(2^25 / 3) * 2^-25 = 11184811 * 2^-25
# (0x3EAAAAAB).
def _bits(a):
    return [int(b) for b in np.ascontiguousarray(a, np.float32).reshape(-1).view(np.uint32)]


def test_torchao_float8_tensor_per_tensor_row_and_block():
    # Float8Tensor.dequantize: qdata.to(float32) * scale. Per tensor with fl32(0.1):
    #   5 * s = (2^26 + 1) * 2^-27 = 0.5 + 2^-27 -> 0.5 (1/8 of the spacing 2^-24 in [0.5, 1));
    #   6 * s = 80530638 * 2^-27 = 10066329.75 * 2^-24 -> 10066330 * 2^-24 = 0x3F19999A.
    q = np.array([[0x38, 0x4A], [0x4C, 0xB8]], np.uint8)
    want = [0x3DCCCCCD, 0x3F000000, 0x3F19999A, 0xBDCCCCCD]
    for s in (np.array([[0.1]], np.float32), np.array(0.1, np.float32), np.array([0.1], np.float32)):
        t = mxsim.from_torchao_float8(q, s, elem_dtype="float8_e4m3fn")
        assert _bits(mxsim.dequantize(t)) == want
        assert t.fp32_scale_use == "multiply_scale_inv"
    for bs in ([], [2, 2]):  # torchao's block_size for per tensor
        assert _bits(mxsim.dequantize(mxsim.from_torchao_float8(q, np.array([[0.1]], np.float32), bs,
                                                                 elem_dtype="e4m3"))) == want
    # per row (PerRow, scale [2, 1] = 2, 0.5): 1 * 2, 5 * 2; 6 * 0.5, -1 * 0.5, exact
    d = mxsim.dequantize(mxsim.from_torchao_float8(q, np.array([[2], [0.5]], np.float32), elem_dtype="e4m3"))
    np.testing.assert_array_equal(d, np.array([[2, 10], [3, -0.5]], np.float32))
    # 1 x 128 blocks (PerBlock([1, 128])): qdata [2, 256] all 1.0, scale [2, 2]: element (r, c) = scale[r, c // 128]
    sb = np.array([[1, 2], [4, 8]], np.float32)
    d = mxsim.dequantize(mxsim.from_torchao_float8(np.full((2, 256), 0x38, np.uint8), sb, [1, 128], elem_dtype="e4m3"))
    np.testing.assert_array_equal(d, np.repeat(sb, 128, axis=1))
    with pytest.raises(ValueError, match=r"torchao's is \[2, 2\]"):
        mxsim.from_torchao_float8(np.full((2, 256), 0x38, np.uint8), sb[:, :1], [1, 128], elem_dtype="e4m3")
    # E5M2 per tensor, scale 3: 1, 3, +Inf -> 3, 9, +Inf
    d = mxsim.dequantize(mxsim.from_torchao_float8(np.array([0x3C, 0x42, 0x7C], np.uint8), np.array([3], np.float32),
                                                   elem_dtype="float8_e5m2"))
    np.testing.assert_array_equal(d, np.array([3, 9, np.inf], np.float32))


def test_torchao_float8_training_tensor_divides_once():
    # Float8TrainingTensor.to_original_precision: _data / _scale. 5 / 3: 5 * 2^23 / 3 = 13981013.33
    # -> 13981013 * 2^-23 = 0x3FD55555; 1 / 3 = 0x3EAAAAAB; 3 / 3 = 1.
    t = mxsim.from_torchao_float8_training(np.array([[0x4A, 0x38, 0x44]], np.uint8), np.array(3, np.float32),
                                           elem_dtype="e4m3")
    assert _bits(mxsim.dequantize(t)) == [0x3FD55555, 0x3EAAAAAB, 0x3F800000]
    assert t.fp32_scale_use == "divide_by_scale" and "divide_by_scale" in repr(t)
    np.testing.assert_array_equal(t.scale, np.array([[3]], np.float32))  # the divisor as given
    # a multiply by fl32(1/3) instead: 5 * 11184811 * 2^-25 = 13981013.75 * 2^-23 -> 0x3FD55556
    m = mxsim.from_torchao_float8(np.array([[0x4A]], np.uint8), np.array([[1 / 3]], np.float32), elem_dtype="e4m3")
    assert _bits(mxsim.dequantize(m)) == [0x3FD55556]
    # axiswise_dim 0 (_scale [1, 3] = 2, 4, 0.5): codes 1, 2, 3; 5, 6, 0.5 -> 0.5, 0.5, 6; 2.5, 1.5, 1
    c = mxsim.from_torchao_float8_training(np.array([[0x38, 0x40, 0x44], [0x4A, 0x4C, 0x30]], np.uint8),
                                           np.array([[2, 4, 0.5]], np.float32), elem_dtype="e4m3")
    np.testing.assert_array_equal(mxsim.dequantize(c), np.array([[0.5, 0.5, 6], [2.5, 1.5, 1]], np.float32))
    # IEEE division by 0, Inf, NaN (rowwise _scale [3, 1]): 1/0 = +Inf, -1/0 = -Inf; 1/Inf = +0, -1/Inf = -0; NaN
    z = mxsim.from_torchao_float8_training(np.array([[0x38, 0xB8]] * 3, np.uint8),
                                           np.array([[0], [np.inf], [np.nan]], np.float32), elem_dtype="e4m3")
    assert _bits(mxsim.dequantize(z)) == [0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x7FC00000, 0x7FC00000]
    # GEMM: torchao's matmul uses _scale.reciprocal(): fl32(5 * fl32(1/3)) = 0x3FD55556 (fp8-chunk128, K = 1)
    x = mxsim.from_torchao_float8_training(np.array([[0x4A]], np.uint8), np.array(3, np.float32), elem_dtype="e4m3")
    w = mxsim.from_torchao_float8(np.array([[[0x38]]], np.uint8), np.array([[[1]]], np.float32), elem_dtype="e4m3")
    assert _bits(mxsim.grouped_fprop(x, w, [1])) == [0x3FD55556]


def test_torchao_float8_errors_name_the_shapes_and_dtypes():
    q = np.full((4, 6), 0x38, np.uint8)
    with pytest.raises(ValueError, match=r"scale shape \[3, 2\] does not fit qdata shape \[4, 6\]"):
        mxsim.from_torchao_float8(q, np.ones((3, 2), np.float32), elem_dtype="e4m3")
    with pytest.raises(ValueError, match=r"_scale shape \[2, 3\] does not fit _data shape \[4, 6\]"):
        mxsim.from_torchao_float8_training(q, np.ones((2, 3), np.float32), elem_dtype="e4m3")
    with pytest.raises(ValueError, match="float64: float32 expected"):
        mxsim.from_torchao_float8(q, np.ones((1, 1)), elem_dtype="e4m3")
    with pytest.raises(ValueError, match="give elem_dtype"):
        mxsim.from_torchao_float8(q, np.ones((1, 1), np.float32))
    with pytest.raises(ValueError, match="elements are FP8"):
        mxsim.from_torchao_float8(q, np.ones((1, 1), np.float32), elem_dtype="float4_e2m1fn_x2")


def test_cli_dequantize_torchao_float8_equal_python(tmp):
    rng = np.random.default_rng(7)
    qdata = rng.integers(0, 256, size=(4, 256), dtype=np.uint8)
    qdata[(qdata & 0x7F) == 0x7F] = 0x38  # no NaN codes
    scale = rng.choice(np.array([0.1, 3, 0.7, 1e-3], np.float32), size=(4, 2))  # 1 x 128 blocks
    np.save(tmp / "w.qdata.npy", qdata)
    np.save(tmp / "w.scale.npy", scale)
    out = mxsim_json("dequantize", "--elem-dtype", "float8_e4m3fn", tmp / "w.qdata.npy", tmp / "w.scale.npy",
                     "-o", tmp / "w.npy")
    assert out["tensors"][0]["layout"] == "torchao-float8"
    py = mxsim.dequantize(mxsim.from_torchao_float8(qdata, scale, elem_dtype="float8_e4m3fn"))
    np.testing.assert_array_equal(np.load(tmp / "w.npy").view(np.uint32), py.view(np.uint32))
    s = rng.choice(np.array([0.1, 3, 7, 1e-3], np.float32), size=(4, 1))  # rowwise divisors
    np.save(tmp / "x._data.npy", qdata)
    np.save(tmp / "x._scale.npy", s)
    out = mxsim_json("dequantize", "--elem-dtype", "e4m3", tmp / "x._data.npy", tmp / "x._scale.npy",
                     "-o", tmp / "x.npy")
    assert out["tensors"][0]["layout"] == "torchao-float8-training"
    pyt = mxsim.dequantize(mxsim.from_torchao_float8_training(qdata, s, elem_dtype="e4m3"))
    np.testing.assert_array_equal(np.load(tmp / "x.npy").view(np.uint32), pyt.view(np.uint32))
    # and the division differs from a multiply by the reciprocal somewhere in this tensor
    recip = mxsim.dequantize(mxsim.from_torchao_float8(qdata, (1 / s).astype(np.float32), elem_dtype="e4m3"))
    assert (recip.view(np.uint32) != pyt.view(np.uint32)).any()


def test_element_format_wider_than_a_byte_is_refused():
    """Codes are one per byte: an elem_dtype of fp32 / bf16 / fp16 over uint8 codes would decode
    garbage (fp32 "code" 0x38 is 7.8e-44); refused naming elem_dtype, the format and the dtype."""
    qdata = np.full((1, 32), 0x38, np.uint8)
    scale = np.full((1, 1), 127, np.uint8)
    for fmt in ["fp32", "float32", "bf16", "fp16"]:
        with pytest.raises(ValueError, match=r"elem_dtype .*-bit format, but qdata \(uint8\)"):
            mxsim.from_torchao(qdata, scale, fmt, 32)
        with pytest.raises(ValueError, match=r"element format .*-bit format"):  # the layouts' own check
            mxsim.from_te_fp8(qdata, 1.0, fmt)
        with pytest.raises(ValueError, match=r"elem_dtype .*-bit format"):
            mxsim.quantize(np.ones((1, 32), np.float32), elem_dtype=fmt)
