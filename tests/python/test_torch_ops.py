"""mxsim.torch on CPU tensors (torch >= 1.13; Debian's 1.13 here): the C interface
(libmxsim_c.so) reads and writes torch memory in place and gives the bytes of the
command line and the NumPy API, for every recipe, both axes, grouped 3-D input,
16-bit inputs, stochastic rounding and every GEMM contract class; independent
oracles (a hand-computed MXFP4 row, the exact rational block dot of
docs/numerics.md §5) check the values themselves; bad input raises naming the
argument and writes nothing. CUDA tensors are test_torch_cuda.py's."""
import ctypes
import threading
from fractions import Fraction

import numpy as np
import pytest

import mxsim
from conftest import read_safetensors, run_mxsim

torch = pytest.importorskip("torch", reason="mxsim.torch needs PyTorch (Debian: python3-torch)")
import mxsim.torch as mt  # noqa: E402
from mxsim.torch import _capi  # noqa: E402

RECIPES = mxsim.recipes()


def sample(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-6, 7, shape, generator=g).float())
    x.view(-1)[3] = 0.0
    return x


def u8(t):
    """The raw bytes of a torch tensor as a NumPy uint8 array (C order)."""
    return t.contiguous().view(torch.uint8).numpy().reshape(-1)


def same_bytes(t, a):
    np.testing.assert_array_equal(u8(t), np.ascontiguousarray(a).view(np.uint8).reshape(-1))


# ------------------------------------------------------------------ quantize / dequantize

@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("axis", ["cols", "rows"])
def test_quantize_equals_cli(tmp, recipe, axis):
    x = sample((64, 256))
    np.save(tmp / "x.npy", x.numpy())
    run_mxsim("quantize", "--recipe", recipe, "--axis", axis, tmp / "x.npy", "-o", tmp / "q.safetensors")
    t, _ = read_safetensors(tmp / "q.safetensors")
    q = mt.quantize(x, recipe, axis=axis)
    same_bytes(q.qdata, t["x.data"][2])
    same_bytes(q.scale, t["x.scale_inv" if q.layout.scale_kind == _capi.SCALE_FP32 else "x.scale"][2])
    if "x.tensor_scale_inv" in t:
        same_bytes(q.tensor_scale, t["x.tensor_scale_inv"][2])
    assert q.transposed == (axis == "rows" and q.spec.info.block_rows == 1 and recipe != "bf16")
    run_mxsim("dequantize", tmp / "q.safetensors", "-o", tmp / "d.npy")
    d = mt.dequantize(q)
    assert d.shape == x.shape and d.dtype == torch.float32
    same_bytes(d, np.load(tmp / "d.npy"))


@pytest.mark.parametrize("recipe", ["mxfp4", "mxfp4_2d", "mxfp8", "fp8_block", "nvfp4", "fp8_tensor"])
def test_grouped_3d_and_16_bit_inputs_equal_numpy_api(recipe):
    x = sample((3, 32, 64), seed=1)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        xd = x.to(dtype)
        q = mt.quantize(xd, recipe)
        ref = mxsim.quantize(xd.float().numpy() if dtype != torch.float16 else xd.numpy(), recipe)
        assert q.qdata.shape[0] == 3
        same_bytes(q.qdata, ref.qdata)
        same_bytes(q.scale, ref.scale)
        same_bytes(mt.dequantize(q), mxsim.dequantize(ref))
        # bfloat16 output: the exact values rounded once (RNE), as the NumPy API's bfloat16_bits
        same_bytes(mt.dequantize(q, torch.bfloat16), mxsim.dequantize(ref, "bfloat16_bits"))


def test_hand_computed_mxfp4_row():
    # Values in units of 2^-4: amax 6 units = 1.5 * 2^-2 -> scale exponent -4 (FLOOR and EVEN), E8M0
    # byte 123. E2M1 codes: 6->7, 3->5, 1.5->3, 0.5->1, -0.75->0xA (tie to even), 0.25->0 (tie),
    # 0->0, -6->0xF, 5->6 (tie), 2.5->4 (tie), -0.25->8 (-0), 1.25->2 (tie); low nibble first.
    u = torch.tensor([[6, 3, 1.5, 0.5, -0.75, 0.25, 0, -6, 5, 2.5, -0.25, 1.25] + [0] * 20]) / 16
    for kw in [dict(recipe="mxfp4"), dict(elem_dtype="float4_e2m1fn_x2", scaling_mode="floor")]:
        q = mt.quantize(u, **kw)
        assert u8(q.qdata).tolist() == [0x57, 0x13, 0x0A, 0xF0, 0x46, 0x28] + [0] * 10
        assert u8(q.scale).tolist() == [123]
        assert q.qdata.shape == (1, 16) and q.scale.shape == (1, 1)
    d = mt.dequantize(mt.quantize(u, "mxfp4"))[0, :12].tolist()
    assert d == [6 / 16, 3 / 16, 1.5 / 16, .5 / 16, -1 / 16, 0, 0, -6 / 16, 4 / 16, 2 / 16, -0.0, 1 / 16]


def test_torch_dtypes_of_the_views():
    q = mt.quantize(sample((4, 64)), "mxfp4")
    for name, t in [("float4_e2m1fn_x2", q.qdata), ("float8_e8m0fnu", q.scale)]:
        assert t.dtype == getattr(torch, name, torch.uint8), name  # uint8 where torch lacks the dtype
    q8 = mt.quantize(sample((4, 64)), "fp8_row")
    assert q8.qdata.dtype == getattr(torch, "float8_e4m3fn", torch.uint8) and q8.scale.dtype == torch.float32


@pytest.mark.parametrize("rule", ["floor", "rceil", "even", "ceil"])
def test_scaling_modes_and_sr_equal_cli(tmp, rule):
    x = sample((16, 96), seed=2)
    np.save(tmp / "x.npy", x.numpy())
    run_mxsim("quantize", "--recipe", "mxfp4", "--scale-rule", rule, "--round", "sr", "--seed", 99, tmp / "x.npy",
              "-o", tmp / "q.safetensors")
    t, _ = read_safetensors(tmp / "q.safetensors")
    q = mt.quantize(x, "mxfp4", scaling_mode=rule, rounding="sr", seed=99)
    same_bytes(q.qdata, t["x.data"][2])
    same_bytes(q.scale, t["x.scale"][2])
    q2 = mt.quantize(x, elem_dtype=getattr(torch, "float4_e2m1fn_x2", "float4_e2m1fn_x2"), block_size=32,
                     scaling_mode=rule, rounding="sr", seed=99)
    same_bytes(q2.qdata, t["x.data"][2])


def test_torchao_conventions_take_the_inputs_dtype():
    # torchao's Float8Tensor computes a bfloat16 tensor's scale in bfloat16 (docs/numerics.md §3.4):
    # a bfloat16 input behaves as hp_dtype='bfloat16' on float32 values, and a float32 input that
    # holds a value bfloat16 cannot is refused when hp_dtype='bfloat16' is asked for.
    x = sample((8, 64), seed=5).bfloat16()
    q = mt.quantize(x, "fp8_row", scale_convention="torchao")
    ref = mxsim.quantize(x.float().numpy(), "fp8_row", scale_convention="torchao", hp_dtype="bfloat16")
    same_bytes(q.qdata, ref.qdata)
    same_bytes(q.scale, ref.scale)
    with pytest.raises(ValueError, match="not a bfloat16 value"):
        mt.quantize(torch.full((1, 32), 1 + 2 ** -20), "fp8_row", scale_convention="torchao", hp_dtype="bfloat16")


# ------------------------------------------------------------------ grouped GEMM

PAIRS = [("mxfp4", "mxfp4"), ("mxfp6_e2m3", "mxfp4"), ("mxfp8", "mxfp8"), ("mxfp8_e5m2", "mxfp8"),
         ("mxfp8", "mxfp8_2d"), ("fp8_tensor", "fp8_tensor"), ("fp8_row", "fp8_row"), ("fp8_block", "fp8_block2d")]


def operands(M, N, K, G, seed):
    g = torch.Generator().manual_seed(seed)
    f = lambda *s: torch.randn(s, generator=g) * torch.exp2(torch.randint(-3, 4, s, generator=g).float())
    return f(M, K), f(G, N, K), f(M, N)


@pytest.mark.parametrize("sa,sb", PAIRS)
def test_fprop_dgrad_wgrad_equal_numpy_api(sa, sb):
    splits = [32, 0, 96]
    x, w, dy = operands(128, 64, 256, 3, seed=len(sa) * 31 + len(sb))
    xn, wn, dyn = x.numpy(), w.numpy(), dy.numpy()
    y = mt.grouped_gemm(mt.quantize(x, sa), mt.quantize(w, sb), splits)
    same_bytes(y, mxsim.grouped_fprop(xn, wn, splits, sa, sb))
    dx = mt.grouped_gemm(mt.quantize(dy, sa), mt.quantize(w, sb, axis="rows"), splits, form="dgrad",
                         out_dtype=torch.bfloat16)
    assert dx.dtype == torch.bfloat16 and dx.shape == (128, 256)
    same_bytes(dx.float(), mxsim.grouped_dgrad(dyn, wn, splits, sa, sb, out_dtype="bfloat16"))
    if sb.endswith("2d"):
        return  # wgrad operands are quantized along M: tile recipes are for weights
    main_grad = torch.randn(3, 64, 256)
    g0 = main_grad.clone()
    qdy, qx = mt.quantize_grouped_colwise(dy, splits, sa), mt.quantize_grouped_colwise(x, splits, sb)
    out = mt.grouped_gemm(qdy, qx, splits, form="wgrad", out=main_grad, accumulate=True)
    assert out is main_grad  # in place: Megatron's FP32 main_grad
    same_bytes(main_grad, mxsim.grouped_wgrad(dyn, xn, splits, sa, sb, main_grad=g0.numpy().copy()))
    same_bytes(main_grad[1], g0[1])  # a group without tokens keeps its main_grad


def test_bf16_operands_equal_numpy_api():
    splits = [8, 24]
    x, w, dy = operands(32, 16, 64, 2, seed=3)
    xb, wb = x.bfloat16(), w.bfloat16()
    y = mt.grouped_gemm(xb, wb, splits)
    same_bytes(y, mxsim.grouped_fprop(xb.float().numpy(), wb.float().numpy(), splits, "bf16"))
    same_bytes(mt.grouped_gemm(x, w, splits), y)  # float32 operands are rounded to BF16 (RNE) first
    dw = mt.grouped_gemm([dy[:8].bfloat16(), dy[8:].bfloat16()], [xb[:8], xb[8:]], splits, form="wgrad")
    same_bytes(dw, mxsim.grouped_wgrad(dy.bfloat16().float().numpy(), xb.float().numpy(), splits, "bf16"))


def library_out_shape(form, A, B, splits):
    """The output shape core's plan gives (mxsim_grouped_gemm_out_shape), asked directly."""
    keep = []
    ca = (_capi.GemmOperand * len(A))(*[mt._operand(o, "a", keep) for o in A])
    cb = (_capi.GemmOperand * len(B))(*[mt._operand(o, "b", keep) for o in B])
    ms = (ctypes.c_int64 * len(splits))(*splits)
    shape, ndim = (ctypes.c_int64 * 3)(), ctypes.c_int32()
    _capi.call(_capi.lib().mxsim_grouped_gemm_out_shape, mt._FORMS[form], ca, len(A), cb, len(B), ms, len(splits),
               shape, ctypes.byref(ndim))
    return tuple(shape[:ndim.value])


@pytest.mark.parametrize("sb", ["mxfp4", "mxfp8_2d", "bf16", "bf16_2d", "nvfp4"])
def test_the_output_shape_grouped_gemm_allocates_is_the_plans(sb):
    # grouped_gemm sizes its output from the operands' shapes without asking the library (one C
    # call less per call); the library checks it. Here the two agree for every form.
    splits = [16, 0, 48]
    x, w, dy = operands(64, 32, 96, 3, seed=5)
    if sb == "bf16_2d":  # one [N, K] weight: one group
        splits = [64]
        qx, qw, qdy, qwt = x.bfloat16(), w[0].bfloat16(), dy.bfloat16(), w[0].bfloat16()
        gx, gdy = [qx], [qdy]
    elif sb == "bf16":
        qx, qw, qdy, qwt = x.bfloat16(), w.bfloat16(), dy.bfloat16(), w.bfloat16()
        gx = [qx[:16], qx[16:16], qx[16:]]
        gdy = [qdy[:16], qdy[16:16], qdy[16:]]
    else:
        sa = "mxfp8" if sb.startswith("mxfp8") else sb
        qx, qw, qdy = mt.quantize(x, sa), mt.quantize(w, sb), mt.quantize(dy, sa)
        qwt = mt.quantize(w, sb, axis="rows")
        gx, gdy = mt.quantize_grouped_colwise(x, splits, sa), mt.quantize_grouped_colwise(dy, splits, sa)
    for form, A, B in [("fprop", [qx], [qw]), ("dgrad", [qdy], [qwt]), ("wgrad", gdy, gx)]:
        out = mt.grouped_gemm(A if form == "wgrad" else A[0], B if form == "wgrad" else B[0], splits, form=form)
        assert tuple(out.shape) == library_out_shape(form, A, B, splits), form


def test_empty_calls_are_checked_then_write_what_the_contract_says():
    # Every group empty: the call is checked in full and then returns at once (nothing to compute),
    # except a wgrad that overwrites, which still writes +0 to every group (the sum over no tokens).
    splits = [0, 0, 0]
    x, w, dy = torch.zeros(0, 64), sample((3, 32, 64)), torch.zeros(0, 32)
    qx, qw = mt.quantize(x, "mxfp4"), mt.quantize(w, "mxfp4")
    assert tuple(mt.grouped_gemm(qx, qw, splits).shape) == (0, 32)
    with pytest.raises(ValueError, match="out has shape"):
        mt.grouped_gemm(qx, qw, splits, out=torch.zeros(1, 32))
    with pytest.raises(ValueError, match="W has 2 groups but m_splits has 3"):
        mt.grouped_gemm(qx, mt.quantize(sample((2, 32, 64)), "mxfp4"), splits)
    gdy, gx = mt.quantize_grouped_colwise(dy, splits, "mxfp4"), mt.quantize_grouped_colwise(x, splits, "mxfp4")
    main_grad = torch.full((3, 32, 64), 7.0)
    mt.grouped_gemm(gdy, gx, splits, form="wgrad", out=main_grad, accumulate=True)
    assert torch.equal(main_grad, torch.full((3, 32, 64), 7.0))  # accumulating nothing: unchanged
    mt.grouped_gemm(gdy, gx, splits, form="wgrad", out=main_grad)
    assert torch.equal(main_grad, torch.zeros(3, 32, 64)) and not main_grad.signbit().any()  # overwritten: +0


def round_fp32(q: Fraction) -> float:
    """The FP32 value nearest q, ties to even (exact rational rounding)."""
    if q == 0:
        return 0.0
    s, q = (-1 if q < 0 else 1), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    ulp = Fraction(2) ** (max(e, -126) - 23)
    n, r = divmod(q, ulp)
    n = int(n) + (1 if r > ulp / 2 or (r == ulp / 2 and int(n) % 2) else 0)
    return s * float(n * ulp)


E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def test_mx_exact_fprop_on_hand_made_codes_equals_rational_oracle():
    # Codes and scales written here (torchao's MXTensor layout), not quantized by mxsim: each
    # 32-block dot is exact, times 2^(sa + sb - 254), then one RNE add into the FP32 accumulator,
    # blocks in ascending K (docs/numerics.md §5, class mx-exact).
    g = torch.Generator().manual_seed(9)
    M, N, K = 3, 2, 96
    ca, cb = torch.randint(0, 16, (M, K), generator=g), torch.randint(0, 16, (1, N, K), generator=g)
    sa, sb = torch.randint(110, 140, (M, K // 32), generator=g), torch.randint(110, 140, (1, N, K // 32), generator=g)
    pack = lambda c: (c[..., 0::2] | (c[..., 1::2] << 4)).to(torch.uint8)
    qa = mt.quantize(torch.zeros(M, K), "mxfp4")
    qb = mt.quantize(torch.zeros(1, N, K), "mxfp4")
    qa._data.copy_(pack(ca)), qa._scale.copy_(sa.to(torch.uint8))
    qb._data.copy_(pack(cb)), qb._scale.copy_(sb.to(torch.uint8))
    y = mt.grouped_gemm(qa, qb, [M])
    val = lambda c: (-1 if c & 8 else 1) * Fraction(E2M1[c & 7])
    for i in range(M):
        for j in range(N):
            acc = 0.0
            for b in range(K // 32):
                dot = sum(val(int(ca[i, k])) * val(int(cb[0, j, k])) for k in range(32 * b, 32 * b + 32))
                acc = round_fp32(Fraction(acc) + dot * Fraction(2) ** (int(sa[i, b]) + int(sb[0, j, b]) - 254))
            assert y[i, j].item() == acc and np.float32(acc).tobytes() == y[i, j].numpy().tobytes(), (i, j)


def e4m3(b):
    """An E4M3 byte's value from its fields (bias 7; 0x7F is NaN, not drawn here)."""
    e, m = (b >> 3) & 15, b & 7
    v = Fraction(m, 8) * Fraction(2) ** -6 if e == 0 else (1 + Fraction(m, 8)) * Fraction(2) ** (e - 7)
    return -v if b & 0x80 else v


def test_nvfp4_exact_on_hand_made_codes_equals_rational_oracle():
    # Codes, UE4M3 block scales and tensor scales written here (torchao's NVFP4Tensor layout: qdata
    # [.., K/2], one scale byte per 16): each 16-block's dot times both block scales is exact, one RNE
    # add per block into an FP32 sum from 0, then one RNE of sum * fl32(S_a * S_b) + C (docs/numerics.md
    # §5.2.5, class nvfp4-exact), here with C the existing output (accumulate).
    g = torch.Generator().manual_seed(12)
    M, N, K = 3, 4, 80
    ca, cb = torch.randint(0, 16, (M, K), generator=g), torch.randint(0, 16, (1, N, K), generator=g)
    sa, sb = torch.randint(1, 0x7F, (M, K // 16), generator=g), torch.randint(1, 0x7F, (1, N, K // 16), generator=g)
    pack = lambda c: (c[..., 0::2] | (c[..., 1::2] << 4)).to(torch.uint8)
    qa = mt.quantize(torch.zeros(M, K), "nvfp4")
    qb = mt.quantize(torch.zeros(1, N, K), "nvfp4")
    qa._data.copy_(pack(ca)), qa._scale.copy_(sa.to(torch.uint8)), qa.tensor_scale.fill_(0.3)
    qb._data.copy_(pack(cb)), qb._scale.copy_(sb.to(torch.uint8)), qb.tensor_scale.fill_(7e-5)
    c = torch.randn(M, N, generator=g)
    y = c.clone()
    mt.grouped_gemm(qa, qb, [M], out=y, accumulate=True)
    alpha = np.float32(0.3) * np.float32(7e-5)  # fl32 of the two float32 tensor scales' product
    val = lambda c: (-1 if c & 8 else 1) * Fraction(E2M1[c & 7])
    for i in range(M):
        for j in range(N):
            acc = 0.0
            for b in range(K // 16):
                dot = sum(val(int(ca[i, k])) * val(int(cb[0, j, k])) for k in range(16 * b, 16 * b + 16))
                acc = round_fp32(Fraction(acc) + dot * e4m3(int(sa[i, b])) * e4m3(int(sb[0, j, b])))
            want = round_fp32(Fraction(acc) * Fraction(float(alpha)) + Fraction(float(c[i, j])))
            assert np.float32(want).tobytes() == y[i, j].numpy().tobytes(), (i, j, want, y[i, j].item())


def test_hadamard_signs_negate_the_inputs_before_the_transform():
    # H (D x) = H (x'), x' = D x: negating the inputs by hand and quantizing without signs gives the
    # same bytes (the negation is exact), for NVFP4 (whose tensor amax is then the transformed
    # tensor's) along both axes; and the signs do change the result.
    x = torch.randn(48, 64, generator=torch.Generator().manual_seed(21))
    mask = 0xD7E8  # TE's NVFP4 wgrad sign vector
    d = torch.tensor([-1.0 if (mask >> k) & 1 else 1.0 for k in range(16)])
    for axis, xd in [("cols", x * d.repeat(4)), ("rows", x * d.repeat(3)[:, None])]:
        q = mt.quantize(x, "nvfp4", axis=axis, hadamard=True, hadamard_signs=mask)
        r = mt.quantize(xd, "nvfp4", axis=axis, hadamard=True)
        assert torch.equal(q._data, r._data) and torch.equal(q._scale, r._scale), axis
        assert torch.equal(q.tensor_scale, r.tensor_scale), axis
        assert not torch.equal(q._data, mt.quantize(x, "nvfp4", axis=axis, hadamard=True)._data), axis
    with pytest.raises(ValueError, match="hadamard_signs applies to hadamard=True only"):
        mt.quantize(x, "nvfp4", hadamard_signs=mask)


def test_wgrad_with_stochastic_rounding_draws_the_whole_tensors_words():
    # Each group's slice draws the Philox words of its elements' indices in [M, C] (§2.5), as the
    # NumPy API (and so the simulator) quantizes wgrad operands.
    splits = [16, 0, 48]
    x, _, dy = operands(64, 32, 64, 3, seed=4)
    s = mt.spec("mxfp8", rounding="sr", seed=11)
    dw = mt.grouped_gemm(mt.quantize_grouped_colwise(dy, splits, spec=s), mt.quantize_grouped_colwise(x, splits, spec=s),
                         splits, form="wgrad")
    ns = mxsim.spec("mxfp8", rounding="sr", seed=11)
    same_bytes(dw, mxsim.grouped_wgrad(dy.numpy(), x.numpy(), splits, ns, ns))
    # and differs from quantizing each slice as if it were the whole tensor
    alone = mt.quantize(x[16:], spec=s, axis="rows")
    assert not torch.equal(alone._data, mt.quantize_grouped_colwise(x, splits, spec=s)[2]._data)


# ------------------------------------------------------------------ errors: named, nothing written

def test_errors_name_the_argument_and_write_nothing():
    x = sample((8, 64))
    with pytest.raises(ValueError, match="unknown recipe"):
        mt.quantize(x, "mxfp9")
    with pytest.raises(ValueError, match="spec argument|unknown"):
        mt.quantize(x, "mxfp4", no_such_argument=1)
    with pytest.raises(TypeError, match="dtype torch.int32"):
        mt.quantize(x.int(), "mxfp4")
    with pytest.raises(ValueError, match="not contiguous"):
        mt.quantize(x.t(), "mxfp4")
    sq = sample((64, 64))
    mt.quantize(sq, "mxfp4")  # its shape's DLTensor is now cached (_dl): the transpose, of the same
    with pytest.raises(ValueError, match="not contiguous"):  # shape, must still pass its strides
        mt.quantize(sq.t(), "mxfp4")
    with pytest.raises(ValueError, match="2-D .* or 3-D"):
        mt.quantize(x.reshape(-1), "mxfp4")
    with pytest.raises(ValueError, match="axis"):
        mt.quantize(x, "mxfp4", axis="diagonal")
    q, w = mt.quantize(x, "mxfp4"), mt.quantize(sample((2, 16, 64)), "mxfp4")
    out = torch.full((8, 16), 7.0)
    with pytest.raises(ValueError, match="m_splits sum to 7"):
        mt.grouped_gemm(q, w, [3, 4], out=out)
    with pytest.raises(ValueError, match="m_splits\\[1\\] = -1 is negative"):
        mt.grouped_gemm(q, w, [9, -1], out=out)
    with pytest.raises(ValueError, match="out has shape \\[8, 15\\], expected \\[8, 16\\]"):
        mt.grouped_gemm(q, w, [4, 4], out=torch.zeros(8, 15))
    with pytest.raises(ValueError, match="accumulate .* bfloat16"):
        mt.grouped_gemm(q, w, [4, 4], out=torch.zeros(8, 16, dtype=torch.bfloat16), accumulate=True)
    with pytest.raises(ValueError, match="form"):
        mt.grouped_gemm(q, w, [4, 4], form="xgrad")
    with pytest.raises(ValueError, match="m_splits has 2 groups but dy has 1 and x 1"):
        mt.grouped_gemm([q], [q], [4, 4], form="wgrad")
    with pytest.raises(ValueError, match="do not form a pair the contract defines"):  # MX codes with FP8
        mt.grouped_gemm(q, mt.quantize(sample((2, 16, 64)), "fp8_tensor"), [4, 4], out=out)
    assert torch.equal(out, torch.full((8, 16), 7.0))  # every refused call left out untouched


def test_a_cuda_tensor_without_a_gpu_backend_is_refused():
    # A DLTensor on kDLCUDA built by hand (this torch may have no CUDA): the CPU-only library says
    # it has no GPU backend instead of reading device memory as host memory.
    if mt.has_gpu():
        pytest.skip("this libmxsim_c.so has a GPU backend (tests/gpu/test_torch_cuda.py covers it)")
    s = mt.spec("mxfp8")
    x = torch.zeros(4, 32)
    dl = mt._dl(x, "x")
    dl.device = _capi.DLDevice(_capi.KDL_CUDA, 0)
    q = mt.quantize(x, spec=s)
    cq = q._c()
    for f in ("data", "scale"):
        d = getattr(cq, f)
        d.device = _capi.DLDevice(_capi.KDL_CUDA, 0)
    with pytest.raises(RuntimeError, match="no GPU backend"):
        _capi.call(s._lib.mxsim_quantize, ctypes.byref(dl), s.handle, 0, ctypes.byref(cq), None)
    with pytest.raises(ValueError, match="cuda:0, the call's other tensors on cpu"):
        _capi.call(s._lib.mxsim_quantize, ctypes.byref(mt._dl(x, "x")), s.handle, 0, ctypes.byref(cq), None)


def test_spec_describes_itself_and_is_cached():
    s = mt.spec("mxfp4")
    assert s is mt.spec("mxfp4") and s.elem == "e2m1" and s.info.block_cols == 32
    assert "e2m1" in repr(s) and s.info.scale_kind == _capi.SCALE_E8M0
    assert mt.spec(s) is s
    assert mt.Spec(elem_dtype="float8_e4m3fn").describe().startswith("e4m3 1x32 scale=e8m0/floor")


def test_threads_share_nothing():
    # Calls on several threads at once give each its own bytes (no global state; docs/torch.md).
    xs = [sample((64, 128), seed=s) for s in range(8)]
    want = [u8(mt.quantize(x, "mxfp4", rounding="sr", seed=3).qdata) for x in xs]
    got = [None] * len(xs)

    def work(i):
        for _ in range(5):
            got[i] = u8(mt.quantize(xs[i], "mxfp4", rounding="sr", seed=3).qdata)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w, g in zip(want, got):
        np.testing.assert_array_equal(w, g)


# ------------------------------------------------------------------ statistics

def test_quant_stats_by_hand_and_equal_to_the_cli(tmp):
    # One OCP MX block (FLOOR): amax 7 -> scale 2^(floor(log2 7) - 2) = 1, so 7 saturates to 6 and
    # 0.01 (below half of E2M1's smallest subnormal 0.5) underflows to 0; 30 zeros are exact.
    u = torch.zeros(1, 32)
    u[0, 0], u[0, 1] = 7.0, 0.01
    s = mt.quant_stats(u, mt.quantize(u, elem_dtype="float4_e2m1fn_x2"))
    assert (s["count"], s["saturated"], s["underflow"], s["nonfinite_in"]) == (32, 1, 1, 0)
    assert s["max_abs_err"] == 1.0  # |7 - 6|; the mse sums 1 and fl32(0.01)^2 in FP64
    b = mt.block_stats(u, mt.quantize(u, elem_dtype="float4_e2m1fn_x2"))
    assert b["amax"].tolist() == [7.0] and b["scale_exp"].tolist() == [0] and b["saturated"].tolist() == [1]
    x = sample((8, 64), seed=4)
    np.save(tmp / "x.npy", x.numpy())
    cpp = __import__("json").loads(run_mxsim("quantize", "--recipe", "mxfp8", tmp / "x.npy", "--json")[1])["tensors"][0]
    s = mt.quant_stats(x, mt.quantize(x, "mxfp8"))
    assert s["mse"] == cpp["mse"] and s["underflow"] == cpp["underflow"] and s["saturated"] == cpp["saturated"]
    ref = mxsim.block_stats(x.numpy(), mxsim.quantize(x.numpy(), "mxfp8"))
    b = mt.block_stats(x, mt.quantize(x, "mxfp8"))
    for k in ref:
        np.testing.assert_array_equal(b[k].numpy(), np.asarray(ref[k]), err_msg=k)
    assert s["tensor_scale_inv"] == 1.0  # one-level scales


def test_quant_stats_carry_nvfp4s_tensor_scale(tmp):
    # S_enc = fl32(2688 / amax) (2688 = 6 x 448), S_dec = fl32(1 / S_enc): exact for these amaxes,
    # none of them 2688 itself (S_dec = 1 is the one-level default the field starts at). The second
    # scale level rides with the statistics (numerics.md §3.3, §4.6), in mxsim quantize --json too.
    for amax, s_dec in ((10752.0, 4.0), (5376.0, 2.0), (1344.0, 0.5)):
        x = sample((4, 32), seed=9).clamp(-1, 1)
        x[1, 3] = -amax
        s = mt.quant_stats(x, mt.quantize(x, "nvfp4"))
        assert s["tensor_scale_inv"] == s_dec, amax
        np.save(tmp / "x.npy", x.numpy())
        cli = __import__("json").loads(run_mxsim("quantize", "--recipe", "nvfp4", tmp / "x.npy", "--json")[1])
        assert cli["tensors"][0]["tensor_scale_inv"] == s_dec, amax


# ------------------------------------------------------------------ the peers' tensors, by attribute

class MXTensor:  # torchao's attributes (mx_tensor.py), built here: torchao is not imported
    def __init__(self, qdata, scale, elem_dtype, block_size):
        self.qdata, self.scale, self.elem_dtype, self.block_size = qdata, scale, elem_dtype, block_size


class Float8Tensor:  # torchao's (float8_tensor.py)
    def __init__(self, qdata, scale, elem):
        self.qdata, self.scale, self._elem_dtype = qdata, scale, elem


class Float8TrainingTensor:  # torchao float8 training's
    def __init__(self, data, scale, elem):
        self._data, self._scale, self._data_dtype = data, scale, elem


class MXFP8Tensor:  # TransformerEngine's
    pass


def test_from_torchao_reads_mxtensor_in_place():
    x = sample((3, 32, 64), seed=12)
    q = mt.quantize(x, elem_dtype="float4_e2m1fn_x2", scaling_mode="floor")
    t = MXTensor(q.qdata, q.scale, "torch.float4_e2m1fn_x2", 32)
    r = mt.from_torchao(t)
    assert r._data.data_ptr() == q._data.data_ptr()  # shares the peer's memory
    same_bytes(mt.dequantize(r), mxsim.dequantize(mxsim.quantize(x.numpy(), elem_dtype="float4_e2m1fn_x2")))
    t.scale = q.scale[:, :, :1]
    with pytest.raises(ValueError, match="not the layout of"):
        mt.from_torchao(t)


def test_from_torchao_float8_values_by_hand():
    # torchao's Float8Tensor `scale` multiplies (a scale_inv); Float8TrainingTensor's `_scale` divides.
    codes = torch.tensor([[0x38, 0x40], [0xB8, 0x00]], dtype=torch.uint8)  # E4M3: 1.0, 2.0, -1.0, 0
    d = mt.dequantize(mt.from_torchao(Float8Tensor(codes, torch.tensor(0.5), "float8_e4m3fn")))
    assert d.tolist() == [[0.5, 1.0], [-0.5, 0.0]]
    d = mt.dequantize(mt.from_torchao(Float8Tensor(codes, torch.tensor([[0.5], [4.0]]), "float8_e4m3fn")))
    assert d.tolist() == [[0.5, 1.0], [-4.0, 0.0]]
    d = mt.dequantize(mt.from_torchao(Float8TrainingTensor(codes, torch.tensor(3.0), "float8_e4m3fn")))
    assert d.tolist() == [[float(np.float32(1) / np.float32(3)), float(np.float32(2) / np.float32(3))],
                          [float(np.float32(-1) / np.float32(3)), 0.0]]


def test_from_te_mxfp8_cuts_the_padding_and_transposes_columnwise():
    x = sample((40, 96), seed=13)
    t = MXFP8Tensor()
    t._fp8_dtype = "DType.kFloat8E4M3"
    q = mt.quantize(x, "mxfp8")
    pad = torch.full((128, 4), 0x7F, dtype=torch.uint8)  # rowwise 128 x 4 padding (TE's mxfp8 recipe)
    pad[:40, :3] = q.scale
    t._rowwise_data, t._rowwise_scale_inv = q.qdata, pad
    same_bytes(mt.dequantize(mt.from_te(t)), mt.dequantize(q))
    qc = mt.quantize(x, "mxfp8", axis="rows")  # mxsim: codes [96, 40], scales [96, 2]
    cpad = torch.full((4, 128), 0x7F, dtype=torch.uint8)
    cpad[:2, :96] = qc.scale.t()
    t._columnwise_data, t._columnwise_scale_inv = qc.qdata.t().contiguous(), cpad  # TE: [M, K], not transposed
    same_bytes(mt.dequantize(mt.from_te(t, columnwise=True)), mt.dequantize(qc))
    t._rowwise_scale_inv = q.scale
    with pytest.raises(ValueError, match="TE pads \\[40, 96\\] data's to \\[128, 4\\]"):
        mt.from_te(t)


def test_layout_te_is_transformer_engines_storage():
    x = sample((40, 96), seed=14)
    for axis, side in (("cols", "rowwise"), ("rows", "columnwise")):
        t = mt.quantize(x, "mxfp8", axis=axis, layout="te")
        data, sc = getattr(t, f"_{side}_data"), getattr(t, f"_{side}_scale_inv")
        assert tuple(data.shape) == (40, 96)  # TE keeps [M, K] on both sides
        assert tuple(sc.shape) == ((128, 4) if side == "rowwise" else (4, 128))  # TE's padding
        q = mt.quantize(x, "mxfp8", axis=axis)
        same_bytes(mt.dequantize(mt.from_te(t, columnwise=side == "columnwise")), mt.dequantize(q))
    # the columnwise E8M0 scale of column k, block b sits at [b, k]: block 0 of column 5 by hand
    t = mt.quantize(x, "mxfp8", axis="rows", layout="te")
    # RCEIL (spec mxfp8, TE's rule): the smallest 2^e with amax / 2^e <= 448, E4M3's largest value
    r = Fraction(float(x[:32, 5].abs().max())) / 448
    e = r.numerator.bit_length() - r.denominator.bit_length()
    e += Fraction(2) ** e < r
    e -= Fraction(2) ** (e - 1) >= r
    assert int(t._columnwise_scale_inv[0, 5]) == 127 + e
    t8 = mt.quantize(x, "fp8_tensor", layout="te")
    assert t8._scale_inv.shape == (1,) and t8._data.shape == (40, 96)
    with pytest.raises(ValueError, match="no TransformerEngine tensor"):
        mt.quantize(x, "mxfp4", layout="te")
    with pytest.raises(ValueError, match="layout must be"):
        mt.quantize(x, "mxfp8", layout="cutlass")


class NVFP4Tensor:  # torchao's and TE's attribute names (nvfp4_tensor.py of each)
    pass


def test_nvfp4_peers_read_by_attribute():
    x = sample((40, 96), seed=17)
    q = mt.quantize(x, "nvfp4")
    t = NVFP4Tensor()  # torchao: qdata, _scale_e4m3 (here flattened, as slicing leaves it), _per_tensor_scale
    t.qdata, t._scale_e4m3, t._per_tensor_scale = q.qdata, q.scale.reshape(-1), q.tensor_scale
    same_bytes(mt.dequantize(mt.from_torchao(t)), mt.dequantize(q))
    for axis, side in (("cols", "rowwise"), ("rows", "columnwise")):
        q = mt.quantize(x, "nvfp4", axis=axis)
        R, C = q._data.shape[0], q._data.shape[1] * 2  # TE's rowwise [M, K/2]; columnwise [K, M/2]
        nb = (C + 15) // 16
        pad = torch.zeros(((R + 127) // 128) * 128, ((nb + 3) // 4) * 4, dtype=torch.uint8)
        pad[:R, :nb] = q.scale
        te = NVFP4Tensor()  # TE: the amax of the copy; its decode scale is S_dec (docs/numerics.md §3.3)
        setattr(te, f"_{side}_data", q.qdata)
        setattr(te, f"_{side}_scale_inv", pad)
        setattr(te, f"_amax_{side}", x.abs().max().reshape(1))
        r = mt.from_te(te, columnwise=side == "columnwise")
        same_bytes(r.tensor_scale, q.tensor_scale)
        same_bytes(mt.dequantize(r), mt.dequantize(q))


class Float8BlockwiseQTensor:  # TE's attribute names
    pass


def test_te_fp8_blockwise_read_by_attribute():
    x = sample((40, 256), seed=18)
    for axis, side in (("cols", "rowwise"), ("rows", "columnwise")):
        q = mt.quantize(x, "fp8_block", axis=axis)  # mxsim: storage [R, C], scale_inv [R, ceil(C/128)]
        R, C = q._data.shape
        te = Float8BlockwiseQTensor()  # TE: scale_inv [ceil(C/128), roundup(R, 4)], padding not read
        te._fp8_dtype, te._is_2D_scaled = "DType.kFloat8E4M3", False
        pad = torch.full(((C + 127) // 128, (R + 3) // 4 * 4), float("nan"))
        pad[:, :R] = q.scale.t()
        setattr(te, f"_{side}_data", q.qdata)
        setattr(te, f"_{side}_scale_inv", pad)
        same_bytes(mt.dequantize(mt.from_te(te, columnwise=side == "columnwise")), mt.dequantize(q))
    q = mt.quantize(x, "fp8_block2d")  # 128 x 128 tiles: scale_inv [1, 2] of [40, 256]
    te = Float8BlockwiseQTensor()
    te._fp8_dtype, te._is_2D_scaled = "DType.kFloat8E4M3", True
    pad = torch.full((1, 4), float("nan"))
    pad[:, :2] = q.scale
    te._rowwise_data, te._rowwise_scale_inv = q.qdata, pad
    same_bytes(mt.dequantize(mt.from_te(te)), mt.dequantize(q))


def test_an_older_library_is_refused_naming_what_it_lacks():
    """A libmxsim_c.so built from an older commit (the same ABI version, fewer entry points) is an
    ImportError that names the missing functions, not an AttributeError deep inside a call."""
    from mxsim.torch import _capi

    class Old:  # a library handle with every entry point but one
        _name = "/old/libmxsim_c.so"

        def __init__(self):
            self._real = _capi.lib()

        def __getattr__(self, name):
            if name == "mxsim_recorder_create":
                raise AttributeError(name)
            return getattr(self._real, name)

    with pytest.raises(ImportError, match="/old/libmxsim_c.so lacks mxsim_recorder_create: it is older"):
        _capi._declare(Old())
