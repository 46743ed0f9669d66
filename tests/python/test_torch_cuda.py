"""mxsim.torch on CUDA tensors: every op runs on the GPU backend, on the tensor's device and
torch's current stream, and gives the CPU emulator's bytes (docs/numerics.md's contract on
both devices). Skips where torch has no CUDA or libmxsim_c.so no GPU backend (CI, the dev
machines); scripts/gpu-device-run.sh runs it on the GPU machine (stage torch).
MXSIM_REAL_SIZE=1 adds the real-size case of issue 30 (8 groups x 2048 rows, N 4096, K 7168)."""
import os

import pytest

torch = pytest.importorskip("torch", reason="mxsim.torch needs PyTorch")
import mxsim.torch as mt  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device in this torch", allow_module_level=True)
if not mt.has_gpu():
    pytest.skip("libmxsim_c.so was built without a GPU backend", allow_module_level=True)

RECIPES = ["mxfp4", "mxfp4_2d", "mxfp6_e2m3", "mxfp8", "mxfp8_2d", "mxfp8_e5m2", "nvfp4", "fp8_tensor", "fp8_row",
           "fp8_block", "fp8_block2d"]
PAIRS = [("mxfp4", "mxfp4"), ("mxfp4", "mxfp4_2d"), ("mxfp8", "mxfp8"), ("mxfp8", "mxfp8_2d"), ("fp8_tensor", "fp8_tensor"),
         ("fp8_row", "fp8_row"), ("fp8_block", "fp8_block2d"), ("nvfp4", "nvfp4"), ("nvfp4", "nvfp4_2d")]


def sample(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * torch.exp2(torch.randint(-6, 7, shape, generator=g).float())


def same(a, b, what=""):
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
    ua, ub = a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8)
    bad = (ua != ub).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.numel()} bytes differ, first at byte {int(bad[0])}"


def same_q(q, r, what):
    same(q._data, r._data, what + " codes")
    same(q._scale, r._scale, what + " scales")
    if r.tensor_scale is not None:
        same(q.tensor_scale, r.tensor_scale, what + " tensor scale")


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("axis", ["cols", "rows"])
def test_quantize_and_dequantize_equal_the_emulator(recipe, axis):
    for shape in [(256, 512), (3, 64, 256)]:
        x = sample(shape, 1)
        try:
            r = mt.quantize(x, recipe, axis=axis)
        except ValueError:
            continue  # a spec the shape cannot take: the same refusal is test_torch_ops'
        q = mt.quantize(x.cuda(), recipe, axis=axis)
        assert q.device.type == "cuda"
        same_q(q, r, f"{recipe} {axis} {shape}")
        same(mt.dequantize(q), mt.dequantize(r), "dequantize")
        same(mt.dequantize(q, torch.bfloat16), mt.dequantize(r, torch.bfloat16), "dequantize bf16")


def test_stochastic_rounding_and_grouped_colwise_equal_the_emulator():
    x = sample((320, 256), 2)
    splits = [64, 0, 192, 64]
    for spec in [mt.spec("mxfp4", rounding="sr", seed=7), mt.spec("mxfp8", rounding="sr", seed=9, sr_stream=3),
                 mt.spec("mxfp4", hadamard=True)]:
        same_q(mt.quantize(x.cuda(), spec=spec), mt.quantize(x, spec=spec), "sr")
        for q, r in zip(mt.quantize_grouped_colwise(x.cuda(), splits, spec=spec),
                        mt.quantize_grouped_colwise(x, splits, spec=spec)):
            same_q(q, r, "grouped colwise")


@pytest.mark.parametrize("sa,sb", PAIRS)
def test_grouped_gemm_equals_the_emulator(sa, sb):
    splits = [64, 0, 192]
    x, w, dy = sample((256, 512), 3), sample((3, 128, 512), 4), sample((256, 128), 5)
    dev = lambda t: t.cuda()
    y = mt.grouped_gemm(mt.quantize(dev(x), sa), mt.quantize(dev(w), sb), splits)
    same(y, mt.grouped_gemm(mt.quantize(x, sa), mt.quantize(w, sb), splits), "fprop")
    dx = mt.grouped_gemm(mt.quantize(dev(dy), sa), mt.quantize(dev(w), sb, axis="rows"), splits, form="dgrad",
                         out_dtype=torch.bfloat16)
    same(dx, mt.grouped_gemm(mt.quantize(dy, sa), mt.quantize(w, sb, axis="rows"), splits, form="dgrad",
                             out_dtype=torch.bfloat16), "dgrad")
    if sb.endswith("2d"):
        return
    mg = sample((3, 128, 512), 6)
    mgc = mg.cuda()
    mt.grouped_gemm(mt.quantize_grouped_colwise(dev(dy), splits, sa), mt.quantize_grouped_colwise(dev(x), splits, sb),
                    splits, form="wgrad", out=mgc, accumulate=True)
    mt.grouped_gemm(mt.quantize_grouped_colwise(dy, splits, sa), mt.quantize_grouped_colwise(x, splits, sb), splits,
                    form="wgrad", out=mg, accumulate=True)
    same(mgc, mg, "wgrad into main_grad")


def test_bf16_operands_and_a_side_stream():
    # The op must run on torch's current stream: its input is written there behind a long sleep,
    # so an op on another stream would read the zeros that are there before.
    splits = [32, 96]
    x, w = sample((128, 256), 7).bfloat16(), sample((2, 64, 256), 8).bfloat16()
    want = mt.grouped_gemm(x, w, splits)
    xc, wc = torch.zeros_like(x, device="cuda"), w.cuda()
    src = x.cuda()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time before the copy
        xc.copy_(src)
        y = mt.grouped_gemm(xc, wc, splits)
        q = mt.quantize(xc, "mxfp8")
    s.synchronize()
    same(y, want, "bf16 fprop on a side stream")
    same_q(q, mt.quantize(x, "mxfp8"), "quantize on a side stream")


@pytest.mark.parametrize("recipe,options", [("bf16", {}), ("mxfp4", {}), ("mxfp4", {"mxfp4_sr_grad": True}),
                                            ("mxfp8", {}), ("fp8_current", {}), ("fp8_delayed", {}), ("fp8_block", {})])
def test_grouped_linear_on_cuda_equals_cpu(recipe, options):
    torch.manual_seed(4)
    cpu = mt.GroupedLinear(3, 256, 128, recipe=recipe, recipe_options=options,
                           fuse_wgrad_accumulation=True, name="experts")
    gpu = mt.GroupedLinear(3, 256, 128, recipe=recipe, recipe_options=options,
                           fuse_wgrad_accumulation=True, device="cuda", name="experts")
    with torch.no_grad():
        for a, b in zip(cpu.parameters(), gpu.parameters()):
            b.copy_(a)
    for m in (cpu, gpu):
        for w in m.weights():
            w.main_grad = torch.zeros(w.shape, device=w.device)
    splits = [64, 0, 192]
    for mb in range(2):
        x, dy = sample((256, 256), 10 + mb).bfloat16(), sample((256, 128), 20 + mb).bfloat16()
        xc, xg = x.clone().requires_grad_(True), x.cuda().requires_grad_(True)
        yc, yg = cpu(xc, splits, is_first_microbatch=mb == 0), gpu(xg, splits, is_first_microbatch=mb == 0)
        same(yg, yc, f"{recipe} y")
        yc.backward(dy)
        yg.backward(dy.cuda())
        same(xg.grad, xc.grad, f"{recipe} dx")
    for a, b in zip(cpu.weights(), gpu.weights()):
        same(b.main_grad, a.main_grad, f"{recipe} main_grad")


def test_the_callers_current_device_is_kept():
    before = torch.cuda.current_device()
    mt.quantize(sample((64, 64), 1).cuda(before), "mxfp8")
    assert torch.cuda.current_device() == before


def test_bf16_and_fp16_cuda_inputs_are_widened_on_the_device():
    x = sample((64, 128), 41)
    for dt in (torch.bfloat16, torch.float16):
        same_q(mt.quantize(x.to(dt).cuda(), "mxfp4"), mt.quantize(x.to(dt), "mxfp4"), f"{dt} input")
    # torchao's scale conventions are the CPU quantizer's only: the GPU says so
    with pytest.raises(ValueError, match="not supported by the GPU quantizer"):
        mt.quantize(x.bfloat16().cuda(), "fp8_row", scale_convention="torchao")


def test_mixed_devices_are_refused():
    q = mt.quantize(sample((64, 64), 1), "mxfp8")
    w = mt.quantize(sample((1, 32, 64), 2).cuda(), "mxfp8")
    with pytest.raises(ValueError, match="cuda:0, the call's other tensors on cpu|cpu, the call's other tensors on cuda"):
        mt.grouped_gemm(q, w, [64])


@pytest.mark.skipif(os.environ.get("MXSIM_REAL_SIZE") != "1", reason="MXSIM_REAL_SIZE=1: minutes of CPU emulation")
def test_real_size_fprop_cpu_equals_gpu():
    # 8 groups x 2048 rows, N 4096, K 7168 (DeepSeek-V3's expert shape), MXFP8 x MXFP8 2-D.
    x, w = sample((16384, 7168), 31), sample((8, 4096, 7168), 32)
    splits = [2048] * 8
    y = mt.grouped_gemm(mt.quantize(x.cuda(), "mxfp8"), mt.quantize(w.cuda(), "mxfp8_2d"), splits)
    same(y, mt.grouped_gemm(mt.quantize(x, "mxfp8"), mt.quantize(w, "mxfp8_2d"), splits), "real-size fprop")


def test_statistics_of_cuda_tensors_equal_the_cpus():
    x = sample((64, 256), 40)
    q, r = mt.quantize(x.cuda(), "mxfp4"), mt.quantize(x, "mxfp4")
    assert mt.quant_stats(x.cuda(), q) == mt.quant_stats(x, r)
    for k, v in mt.block_stats(x.cuda(), q).items():
        assert torch.equal(v, mt.block_stats(x, r)[k]), k


def _recorded_run(device, path, recipe):
    """Three steps of two micro-batches of a two-layer expert block under the recorder."""
    torch.manual_seed(5)  # initialised on the CPU (one generator), then moved: the same weights on both devices
    block = torch.nn.Module()
    block.fc1 = mt.GroupedLinear(2, 64, 128, bias=False, recipe=recipe, fuse_wgrad_accumulation=True)
    block.fc2 = mt.GroupedLinear(2, 128, 64, bias=False, recipe=recipe)
    block.to(device)
    for w in block.fc1.weights():
        w.main_grad = torch.zeros(w.shape, device=device)
    opt = torch.optim.SGD(block.parameters(), lr=0.0625)  # a power of two: p - lr g rounds once on both devices
    # de-oscillation with a short window and a low threshold, so that elements snap (mxfp4 only)
    deosc = mt.WeightDeOsc(block, period=1, ratio=0.5) if recipe == "mxfp4" else None
    with mt.Recorder(block, path) as rec:
        for step in range(1, 4):
            for w in block.fc1.weights():
                w.main_grad.zero_()
            for mb in range(2):
                x = sample((64, 64), 10 * step + mb).to(device)
                y = block.fc2(torch.relu(block.fc1(x, [32, 32], mb == 0)), [32, 32], mb == 0)
                y.square().mean().backward()
            for w in block.fc1.weights():
                w.grad = w.main_grad.clone()
            opt.step()
            opt.zero_grad()
            if deosc is not None:
                deosc.step()
            rec.log(step, loss=float(step))
    return torch.cat([w.detach().cpu().reshape(-1) for w in block.parameters()])


@pytest.mark.parametrize("recipe", ["mxfp4", "mxfp8"])
def test_recorder_on_cuda_writes_the_cpus_trace(tmp_path, recipe):
    """Norms and oscillation metrics computed on the device (a context of the C interface) and
    the statistics: every series of the CUDA run's trace equals the CPU run's, bit for bit."""
    h5py = pytest.importorskip("h5py")
    w_cpu = _recorded_run("cpu", tmp_path / "cpu.h5", recipe)
    w_gpu = _recorded_run("cuda", tmp_path / "gpu.h5", recipe)
    same(w_gpu, w_cpu, "the weights after the run (de-oscillation's snaps written back on the device)")
    with h5py.File(tmp_path / "cpu.h5", "r") as a, h5py.File(tmp_path / "gpu.h5", "r") as b:
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert any(n.endswith("osc/flips_total") for n in names)
        if recipe == "mxfp4":
            assert a["layers/fc1/deosc/snapped"][()].sum() > 0  # the test saw snaps
        for n in names:
            va, vb = a[n][()], b[n][()]
            assert va.shape == vb.shape and va.tobytes() == vb.tobytes(), n


def test_kernel_checker_on_cuda_tensors(tmp_path):
    """The checker compares a CUDA kernel's results with mxsim's on the device's tensors: mxsim's own
    kernel passes, a planted one-bit difference is found at its index and written for replay."""
    x = sample((256, 512), 9).cuda()
    assert mt.check_quantize(lambda t: mt.quantize(t, "mxfp8"), x, "mxfp8").ok

    def kernel(t):
        q = mt.quantize(t, "mxfp8")
        data = q.qdata.view(torch.uint8).clone()
        data[7, 100] ^= 0x01
        return data, q.scale

    r = mt.check_quantize(kernel, x, "mxfp8", path=tmp_path / "m.safetensors")
    assert not r.ok and r.count == 1 and r.first == (7, 100) and (tmp_path / "m.safetensors").exists()
    a, b = sample((128, 256), 10).cuda(), sample((2, 64, 256), 11).cuda()
    rec = mt.LinearRecipe("mxfp4")

    def mxsim_kernel(a, b, ms):
        return mt.grouped_gemm(mt.quantize(a, spec=rec.spec("x_fprop")), mt.quantize(b, spec=rec.spec("w")), ms)

    assert mt.check_grouped_gemm(mxsim_kernel, a, b, [64, 64], "mxfp4").ok


def test_empty_calls_on_cuda_write_what_the_cpu_writes():
    # The C layer returns before any device call when every group is empty and there is nothing
    # to write; a wgrad that overwrites still writes +0 on the device.
    splits = [0, 0, 0]
    x, dy = torch.zeros(0, 64, device="cuda"), torch.zeros(0, 32, device="cuda")
    w = sample((3, 32, 64), 12).cuda()
    y = mt.grouped_gemm(mt.quantize(x, "mxfp4"), mt.quantize(w, "mxfp4"), splits)
    assert tuple(y.shape) == (0, 32) and y.device.type == "cuda"
    gdy, gx = mt.quantize_grouped_colwise(dy, splits, "mxfp4"), mt.quantize_grouped_colwise(x, splits, "mxfp4")
    mg = torch.full((3, 32, 64), 7.0, device="cuda")
    mt.grouped_gemm(gdy, gx, splits, form="wgrad", out=mg, accumulate=True)
    assert torch.equal(mg.cpu(), torch.full((3, 32, 64), 7.0))
    mt.grouped_gemm(gdy, gx, splits, form="wgrad", out=mg)
    assert torch.equal(mg.cpu(), torch.zeros(3, 32, 64)) and not mg.signbit().any()
