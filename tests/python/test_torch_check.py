"""mxsim.torch's kernel checker: assert_same, check_quantize, check_grouped_gemm. A kernel that is
mxsim's passes; a planted one-bit difference is found (count, first index, distance), and its
replay file, read back and run through the command line, reproduces mxsim's value beside the
kernel's."""
import numpy as np
import pytest

from conftest import read_safetensors, run_mxsim

torch = pytest.importorskip("torch", reason="mxsim.torch needs PyTorch (Debian: python3-torch)")
import mxsim.torch as mt  # noqa: E402


def sample(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * torch.exp2(torch.randint(-4, 5, shape, generator=g).float())


def test_assert_same_reports_values_and_ulps():
    x = torch.tensor([1.0, 2.0, -3.0])
    assert mt.assert_same(x.clone(), x).ok
    y = x.clone()
    y[2] = torch.nextafter(torch.tensor(-3.0), torch.tensor(-4.0)).item()  # one ULP away
    with pytest.raises(AssertionError, match=r"1 of 3 values differ; first at \(2,\).*largest distance 1.0 ULP"):
        mt.assert_same(y, x)
    y[0] = float("nan")
    with pytest.raises(AssertionError, match="2 of 3 values differ.*inf ULP"):
        mt.assert_same(y, x)


def test_check_quantize_passes_mxsims_own_kernel_and_finds_a_planted_bit(tmp_path):
    x = sample((64, 128), 1)
    assert mt.check_quantize(lambda t: mt.quantize(t, "mxfp4"), x, "mxfp4").ok

    def kernel(t):  # mxsim's codes with one bit of one nibble flipped: element [5, 70]
        q = mt.quantize(t, "mxfp4")
        data = q.qdata.view(torch.uint8).clone()
        data[5, 35] ^= 0x01  # byte 35 holds elements 70 (low nibble) and 71
        return data, q.scale

    path = tmp_path / "m.safetensors"
    r = mt.check_quantize(kernel, x, "mxfp4", path=path)
    assert not r.ok and r.what == "codes" and r.count == 1 and r.first == (5, 70) and r.max_ulp == 1.0
    assert r.path == str(path)
    tensors, meta = read_safetensors(path)
    block = tensors["x"][2].view(np.float32)
    assert block.shape == (1, 32)  # the 1 x 32 block of element [5, 70]: columns 64..95 of row 5
    np.testing.assert_array_equal(block[0], x[5, 64:96].numpy())
    # replay: the command line quantizes the block to the file's expected codes
    out = tmp_path / "replay.safetensors"
    run_mxsim("quantize", "--recipe", "mxfp4", path, "--tensor", "x", "-o", out)
    replayed, _ = read_safetensors(out)
    np.testing.assert_array_equal(replayed["x.data"][2].reshape(-1), tensors["expected.qdata"][2].reshape(-1))
    np.testing.assert_array_equal(replayed["x.scale"][2].reshape(-1), tensors["expected.scale"][2].reshape(-1))
    assert int(tensors["expected.qdata"][2].reshape(-1)[3] & 0xF) != int(kernel(x)[0][5, 35] & 0xF)


def test_check_grouped_gemm_finds_a_planted_bit_and_the_cli_replays_the_element(tmp_path):
    a, b = sample((64, 128), 2), sample((2, 48, 128), 3)
    splits = [32, 32]
    rec = mt.LinearRecipe("mxfp4")

    def mxsim_kernel(a, b, ms):
        return mt.grouped_gemm(mt.quantize(a, spec=rec.spec("x_fprop")), mt.quantize(b, spec=rec.spec("w")), ms)

    assert mt.check_grouped_gemm(mxsim_kernel, a, b, splits, "mxfp4").ok

    def kernel(a, b, ms):  # one bit of output [40, 7] flipped (group 1)
        y = mxsim_kernel(a, b, ms)
        y.view(torch.int32)[40, 7] ^= 1
        return y

    path = tmp_path / "g.safetensors"
    r = mt.check_grouped_gemm(kernel, a, b, splits, "mxfp4", path=path)
    assert not r.ok and r.count == 1 and r.first == (40, 7) and r.max_ulp == 1.0
    tensors, meta = read_safetensors(path)
    assert meta["group"] == "1" and meta["index"] == "[40, 7]"
    out = tmp_path / "element.npy"
    run_mxsim("gemm", "--op", "fprop", "--a", path, "--a-tensor", "a", "--b", path, "--b-tensor", "b",
              "--layout", "torchao", "--elem-dtype", "float4_e2m1fn_x2", "-o", out)
    v = np.load(out).reshape(-1)
    assert v.shape == (1,)
    assert np.float32(v[0]).view(np.uint32) == np.float32(r.expected).view(np.uint32)
    assert np.float32(v[0]).view(np.uint32) != np.float32(r.actual).view(np.uint32)
