"""mxsim.torch.Recorder on CPU tensors: the trace of a user's model, checked against values
computed without the recorder: main_grad norms of integer gradients (exact sums, so the
norm is sqrt of a hand-summed integer, correctly rounded), quantization statistics equal
to the NumPy API's on the same tensors, oscillation metrics of a hand-built weight history
(Nagel et al. 2022's definitions worked by hand), the layer names and attributes, and
`mxsim compare` / `mxsim report` on the file."""
import math
import os

import h5py
import numpy as np
import pytest

import mxsim
from conftest import run_mxsim

torch = pytest.importorskip("torch", reason="mxsim.torch needs PyTorch (Debian: python3-torch)")
import mxsim.torch as mt  # noqa: E402


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


class Experts(torch.nn.Module):
    """Two expert layers under module paths with dots (as a real model's)."""

    def __init__(self, recipe="mxfp8", fused=True, G=2, d=32, f=64):
        super().__init__()
        self.block = torch.nn.Module()
        self.block.fc1 = mt.GroupedLinear(G, d, f, bias=False, recipe=recipe, fuse_wgrad_accumulation=fused)
        self.block.fc2 = mt.GroupedLinear(G, f, d, bias=False, recipe=recipe, fuse_wgrad_accumulation=fused)
        if fused:
            for m in (self.block.fc1, self.block.fc2):
                for w in m.weights():
                    w.main_grad = torch.zeros(w.shape, dtype=torch.float32)

    def forward(self, x, splits, first=None):
        return self.block.fc2(torch.relu(self.block.fc1(x, splits, first)), splits, first)


def test_layers_attributes_and_provenance(tmp):
    torch.manual_seed(0)
    m = Experts()
    path = tmp / "run.h5"
    with mt.Recorder(m, path) as rec:
        assert rec.layers == ["block.fc1", "block.fc2"]
        for step in (1, 2):
            m(torch.randn(16, 32), [8, 8]).sum().backward()
            rec.log(step, loss=0.5 * step, lr=1e-3, tokens=16.0)
    with h5py.File(path, "r") as f:
        assert f.attrs["producer"] == b"mxsim.torch.Recorder" or f.attrs["producer"] == "mxsim.torch.Recorder"
        assert f["/layers/block.fc1"].attrs["recipe"] in (b"mxfp8", "mxfp8")
        assert list(f["/layers/block.fc2"].attrs["weight_shape"]) == [2, 32, 64]
        assert list(f["/train/step"][:]) == [1, 2]
        assert list(f["/train/loss"][:]) == [0.5, 1.0]
        assert list(f["/train/tokens"][:]) == [16.0, 16.0]
        assert f["/train/lr"].dtype == np.float32 and f["/train/lr"][0] == np.float32(1e-3)
        assert f["/layers/block.fc1/main_grad_norm"].shape == (2, 1)
        assert len(f["/steps"]) == 2


def int_operands(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-3, 4, (rows, cols), generator=g).float()


@pytest.mark.parametrize("fused", [True, False])
def test_main_grad_norm_after_each_micro_batch(tmp, fused):
    """bf16 layers with integer inputs and output gradients: every wgrad is exact, so the norm
    after micro-batch k is sqrt(sum of squares of the hand-accumulated integer sums)."""
    G, K, N = 2, 8, 4
    lin = mt.GroupedLinear(G, K, N, bias=False, recipe="bf16", fuse_wgrad_accumulation=fused)
    with torch.no_grad():
        for w in lin.weights():
            w.copy_(int_operands(N, K, 7))
    if fused:
        for w in lin.weights():
            w.main_grad = torch.zeros(N, K)
    model = torch.nn.Sequential(lin)
    splits = [3, 5]
    acc = torch.zeros(G, N, K, dtype=torch.float64)
    want = []
    with mt.Recorder(model, tmp / "n.h5") as rec:
        for mb in range(3):
            x, dy = int_operands(8, K, 10 + mb), int_operands(8, N, 20 + mb)
            lin(x, splits).backward(dy)
            m0 = 0
            for g, m in enumerate(splits):
                acc[g] += dy[m0:m0 + m].double().T @ x[m0:m0 + m].double()
                m0 += m
            want.append(math.sqrt(int(acc.square().sum().item())))  # integers: exact
        rec.log(1, loss=0.0)
    with h5py.File(tmp / "n.h5", "r") as f:
        got = f["/layers/0/main_grad_norm"][0]
        # Megatron's flag: only the fused bridge sets it, and only where the weight carries it (here
        # main_grad exists but grad_added_to_main_grad was never given: 0)
        assert ("/layers/0/grad_added_to_main_grad" in f) == fused
        if fused:
            assert f["/layers/0/grad_added_to_main_grad"][0].tolist() == [0, 0, 0]
    assert [float(v) for v in got] == want


def test_quant_stats_equal_the_numpy_api(tmp):
    """W and x of micro-batch 0's fprop: the NumPy API's quant_stats of mxsim.quantize on the same
    arrays, bit for bit; dy: mxsim.torch's ops on the same tensor with the recipe's dgrad spec."""
    torch.manual_seed(3)
    m = Experts(recipe="mxfp8", fused=False)
    fc1 = m.block.fc1
    # the recipe's fprop operands: E4M3, E8M0 by the "even" rule, 1 x 32 (x) and 32 x 32 tiles (W)
    assert fc1.recipe.spec("x_fprop").describe() == "e4m3 1x32 scale=e8m0/even round=rne"
    assert fc1.recipe.spec("w").describe() == "e4m3 32x32 scale=e8m0/even round=rne"
    np_x = mxsim.spec("mxfp8", scaling_mode="even")
    np_w = mxsim.spec("mxfp8", scaling_mode="even", block_size=(32, 32))
    x0, x1 = torch.randn(16, 32), torch.randn(16, 32)
    W = torch.stack([w.detach() for w in fc1.weights()]).numpy()
    captured = {}
    def keep_dy(mod, grad_in, grad_out):
        captured.setdefault("dy", grad_out[0].detach().clone())
    fc1.register_full_backward_hook(keep_dy)
    with mt.Recorder(m, tmp / "q.h5") as rec:
        m(x0, [8, 8]).square().sum().backward()
        m(x1, [8, 8]).square().sum().backward()
        rec.log(1)
    want_x = mxsim.quant_stats(x0.numpy(), mxsim.quantize(x0.numpy(), spec=np_x))
    want_w = mxsim.quant_stats(W, mxsim.quantize(W, spec=np_w))
    dy = captured["dy"]
    want_dy = mt.quant_stats(dy, mt.quantize(dy, spec=fc1.recipe.spec("dy_dgrad")))
    with h5py.File(tmp / "q.h5", "r") as f:
        for op, want in (("x", want_x), ("w", want_w), ("dy", want_dy)):
            for k in ("mse", "sqnr_db", "underflow", "saturated", "count", "mean_err", "rounded", "rounded_up",
                      "expected_up"):
                got = f[f"/layers/block.fc1/quant/{op}/{k}"][0]
                w = want[k] if isinstance(want, dict) else getattr(want, k)
                assert np.array_equal(np.float64(got).view(np.uint64), np.float64(w).view(np.uint64)) \
                    if k in ("mse", "sqnr_db", "mean_err", "expected_up") else int(got) == int(w), (op, k, got, w)
            assert f[f"/layers/block.fc1/quant/{op}/rounded"][0] > 0, op  # MXFP8: E8M0 scales record choices
        # scale exponent histogram of x: E8M0 bytes of the NumPy API's quantization, counted here
        q = mxsim.quantize(x0.numpy(), spec=np_x)
        hist = np.bincount(np.asarray(q.scale).reshape(-1), minlength=256)
        assert np.array_equal(f["/layers/block.fc1/quant/x/scale_exp_hist"][0], hist)


def test_nvfp4_tensor_scale_is_recorded_for_its_operands_only(tmp):
    """NVFP4's second scale level is a series of its own, quant/<op>/tensor_scale_inv, equal to the
    NumPy API's S_dec of the same W and x; an MXFP8 trace has none (one-level scales)."""
    torch.manual_seed(5)
    for recipe in ("nvfp4", "mxfp8"):
        m = Experts(recipe=recipe, fused=False)
        fc1 = m.block.fc1
        x0 = torch.randn(32, 32) * 3  # 16 rows an expert: NVFP4's wgrad transform runs along M in 16s
        W = torch.stack([w.detach() for w in fc1.weights()]).numpy()
        with mt.Recorder(m, tmp / f"{recipe}.h5") as rec:
            m(x0, [16, 16]).square().sum().backward()
            rec.log(1)
        with h5py.File(tmp / f"{recipe}.h5", "r") as f:
            names = [f"/layers/block.{l}/quant/{op}/tensor_scale_inv" for l in ("fc1", "fc2") for op in ("w", "x", "dy")]
            if recipe == "mxfp8":
                assert not any(n in f for n in names)
                continue
            assert all(n in f and f[n].dtype == np.float32 for n in names)
            want_x = mxsim.quantize(x0.numpy(), spec=mxsim.spec("nvfp4")).tensor_scale_inv
            want_w = mxsim.quantize(W, spec=mxsim.spec("nvfp4_2d")).tensor_scale_inv  # 16 x 16 tiles, one amax
            assert f["/layers/block.fc1/quant/x/tensor_scale_inv"][0] == np.float32(want_x)
            assert f["/layers/block.fc1/quant/w/tensor_scale_inv"][0] == np.float32(want_w)
            assert want_x != 1.0 and want_w != 1.0


def test_oscillation_metrics_of_a_hand_built_weight_history(tmp):
    """One MXFP4 block [1, 32]: element 0 fixes the E8M0 scale at 1 (amax 6); element 1 moves
    1.0 -> 1.5 -> 1.0 -> 1.5 on the E2M1 grid. Steps (Nagel et al. 2022): seed, an up move (no
    oscillation: no earlier direction), a down move (oscillation 1), an up move (2). EMA with
    momentum 1/2: 0, 0, 1/2, 3/4 for element 1, 0 elsewhere; DistRatio |dq| / |dw| = 1."""
    lin = mt.Linear(32, 1, bias=False, recipe="mxfp4")
    model = torch.nn.Sequential(lin)
    values = [1.0, 1.5, 1.0, 1.5]
    with mt.Recorder(model, tmp / "o.h5", osc_momentum=0.5) as rec:
        for step, v in enumerate(values, 1):
            lin(torch.zeros(32, 32)).sum().backward()
            with torch.no_grad():  # the "optimizer step": the hand-built history
                w = torch.zeros(1, 32)
                w[0, 0], w[0, 1] = 6.0, v
                lin.weight.copy_(w)
            rec.log(step)
    with h5py.File(tmp / "o.h5", "r") as f:
        o = "/layers/0/osc/"
        assert list(f[o + "flips"][:]) == [0, 0, 1, 1]
        assert list(f[o + "flips_total"][:]) == [0, 0, 1, 2]
        assert list(f[o + "ema_mean"][:]) == [0.0, 0.0, 0.5 / 32, 0.75 / 32]
        assert list(f[o + "ema_frac_above"][:]) == [0.0, 0.0, 1 / 32, 1 / 32]
        assert list(f[o + "dist_ratio_mean"][:]) == [0.0, 1.0, 1.0, 1.0]


def test_errors_name_what_was_wrong(tmp):
    with pytest.raises(ValueError, match="holds no mxsim.torch linear"):
        mt.Recorder(torch.nn.Linear(4, 4), tmp / "e.h5")
    torch.manual_seed(0)
    m = Experts()
    rec = mt.Recorder(m, tmp / "e.h5")
    with pytest.raises(ValueError, match="already recorded"):
        mt.Recorder(m, tmp / "f.h5")
    m(torch.randn(16, 32), [8, 8]).sum().backward()
    rec.log(1, loss=1.0)
    for _ in range(2):
        m(torch.randn(16, 32), [8, 8]).sum().backward()
    with pytest.raises(ValueError, match="2 micro-batches, the trace's first step 1"):
        rec.log(2)  # the refused step's row is dropped; the next step starts afresh
    m(torch.randn(16, 32), [8, 8]).sum().backward()
    with pytest.raises(ValueError, match=r"scalar\(s\) \['grad_norm'\]"):
        rec.log(2, grad_norm=1.0)
    # the refused steps' deferred values still arrive (into objects the recorder keeps), and the
    # next step is recorded whole
    m(torch.randn(16, 32), [8, 8]).sum().backward()
    rec.log(2, loss=2.0)
    rec.close()
    with h5py.File(tmp / "e.h5", "r") as f:  # the refused steps left the written ones intact
        assert len(f["/steps"]) == 2 and list(f["/train/loss"][:]) == [1.0, 2.0]
        assert (f["/layers/block.fc1/main_grad_norm"][:] > 0).all()
    with pytest.raises(ValueError, match="must be non-empty and hold no '/'"):
        _bad_scalar(tmp)
    assert not os.path.exists(tmp / "g.h5.partial") and not os.path.exists(tmp / "g.h5")


def _bad_scalar(tmp):
    lin = mt.Linear(32, 8, bias=False)
    rec = mt.Recorder(torch.nn.Sequential(lin), tmp / "g.h5", scalars=["a/b"])
    lin(torch.randn(16, 32)).sum().backward()
    try:
        rec.log(1)
    finally:
        rec.close()


def test_compare_and_report_read_the_trace(tmp):
    torch.manual_seed(0)
    m = Experts(recipe="mxfp4")
    with mt.Recorder(m, tmp / "r.h5") as rec:
        for step in range(1, 4):
            for mb in range(2):
                m(torch.randn(32, 32), [16, 16], mb == 0).sum().backward()
            rec.log(step, loss=1.0 / step, lr=0.1)
    rc, out, _ = run_mxsim("compare", tmp / "r.h5", tmp / "r.h5")
    assert "result: identical" in out
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    import subprocess
    from conftest import MXSIM_BIN
    p = subprocess.run([MXSIM_BIN, "report", str(tmp / "r.h5"), "-o", str(tmp / "rep")], capture_output=True,
                       text=True, env=env)
    if "no inspector" in (p.stderr + p.stdout).lower() or p.returncode == 2 and "report" in p.stderr and \
            "not built" in p.stderr:
        pytest.skip("mxsim report needs the inspector build (Qt)")
    assert p.returncode == 0, p.stderr
    for name in ("quant-block.fc1-w.png", "osc-block.fc2.png", "curves.png"):
        assert (tmp / "rep" / name).exists(), sorted(os.listdir(tmp / "rep"))


def test_weight_deosc_of_a_hand_built_history_and_its_snaps_in_the_trace(tmp):
    """One MXFP4 linear [1, 32] whose element 1 oscillates around the E2M1 grid point 1.25 (the
    tile's scale fixed at 1 by element 0 = 6): W 1.125 (Q 1), 1.375 (Q 1.5), 1.125 (Q 1) ...
    Each observation moves W by 0.25 and Q by 0.5, so dist_q / dist_w = 2. Element 2 drifts
    upward inside one grid cell (2.125, 2.25, 2.375: Q stays 2, no snap). Period 2, ratio 2:
    the window ending at the third observation snaps element 1 to its Q (1.0); one element.
    With ratio 2.5 nothing snaps. Primus's rule (weight_deosc.py), worked by hand."""
    for ratio, want_snaps, want_w1 in ((2.0, 1, 1.0), (2.5, 0, 1.125)):
        lin = mt.Linear(32, 1, bias=False, recipe="mxfp4")
        model = torch.nn.Sequential(lin)
        deosc = mt.WeightDeOsc(model, period=2, ratio=ratio)
        path = tmp / f"d{ratio}.h5"
        ended = []
        with mt.Recorder(model, path) as rec:
            for step, (w1, w2) in enumerate([(1.125, 2.125), (1.375, 2.25), (1.125, 2.375)], 1):
                lin(torch.zeros(32, 32)).sum().backward()
                with torch.no_grad():  # the "optimizer step"
                    w = torch.zeros(1, 32)
                    w[0, 0], w[0, 1], w[0, 2] = 6.0, w1, w2
                    lin.weight.copy_(w)
                ended.append(deosc.step())
                rec.log(step)
        assert ended == [{}, {}, {"0": want_snaps}]
        assert lin.weight[0, 1].item() == want_w1 and lin.weight[0, 2].item() == 2.375
        with h5py.File(path, "r") as f:
            assert list(f["/layers/0/deosc/snapped"][:]) == [0, 0, want_snaps]
        deosc.close()


def test_weight_deosc_is_eligible_by_recipe_only():
    fp8 = torch.nn.Sequential(mt.Linear(32, 8, recipe="mxfp8"))
    with pytest.raises(ValueError, match="no MXFP4 mxsim.torch linear"):
        mt.WeightDeOsc(fp8)
    mixed = torch.nn.Sequential(mt.Linear(32, 8, recipe="mxfp8"), mt.Linear(8, 8, recipe="mxfp4"))
    with pytest.raises(ValueError, match="a master must be float32"):
        mt.WeightDeOsc(mixed, masters={mixed[1].weight: torch.zeros(8, 8, dtype=torch.float64)})
    assert mixed[1]._deosc is None  # a refused de-oscillation marks no module
    assert [n for n, _ in mt.WeightDeOsc(mixed).modules] == ["1"]


def test_plain_linears_are_recorded_through_mxsims_qdq(tmp):
    """Recorder(linears="mxfp8") records plain nn.Linear layers without changing them: the layer's
    output is PyTorch's, its W / x statistics are the NumPy API's quantization of the same arrays,
    and its gradient norm after each micro-batch is the norm of the accumulated .grad (integers:
    exact)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 32, bias=False)
    with torch.no_grad():
        lin.weight.copy_(int_operands(32, 64, 3))
    model = torch.nn.Sequential(lin)
    x0, x1 = int_operands(8, 64, 4), int_operands(8, 64, 5)
    dys = [int_operands(8, 32, 6), int_operands(8, 32, 7)]
    with mt.Recorder(model, tmp / "p.h5", linears="mxfp8") as rec:
        y = model(x0)
        assert torch.equal(y, x0 @ lin.weight.detach().T)  # PyTorch's own arithmetic
        y.backward(dys[0])
        model(x1).backward(dys[1])
        rec.log(1)
    g0 = dys[0].double().T @ x0.double()
    g1 = g0 + dys[1].double().T @ x1.double()
    spec_x = mxsim.spec("mxfp8", scaling_mode="even")
    want_x = mxsim.quant_stats(x0.numpy(), mxsim.quantize(x0.numpy(), spec=spec_x))
    with h5py.File(tmp / "p.h5", "r") as f:
        assert f["/layers/0"].attrs["module"] in (b"Linear", "Linear")
        assert [float(v) for v in f["/layers/0/main_grad_norm"][0]] == \
            [math.sqrt(int(g0.square().sum())), math.sqrt(int(g1.square().sum()))]
        got = f["/layers/0/quant/x/sqnr_db"][0]
        assert np.float64(got).view(np.uint64) == np.float64(want_x["sqnr_db"]).view(np.uint64)
        assert f["/layers/0/osc/flips"][0] == 0
    assert not lin._forward_hooks and not lin._backward_hooks  # close() removed the hooks


def test_snapshots_hold_the_step_before_its_optimizer_update_and_the_maps(tmp):
    """snapshot_steps=[2]: at step 2, master is W as micro-batch 0's fprop used it (before that
    step's update), weight_q its dequantized quantization, main_grad the buffer after the last
    micro-batch, the block maps mxsim's of that quantization (MSE by hand from master and
    weight_q for one block), the element maps the oscillation state after step 1. The inspector's
    maps read them (mxsim report draws the quantization view of the layer)."""
    torch.manual_seed(2)
    lin = mt.GroupedLinear(2, 64, 32, bias=False, recipe="mxfp8", fuse_wgrad_accumulation=True)
    for w in lin.weights():
        w.main_grad = torch.zeros(w.shape)
    model = torch.nn.Sequential(lin)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    seen = {"mg": []}
    with mt.Recorder(model, tmp / "s.h5", snapshot_steps=[2]) as rec:
        for step in (1, 2, 3):
            for w in lin.weights():
                w.main_grad.zero_()
            if step == 2:
                seen["W"] = torch.stack([w.detach().clone() for w in lin.weights()])
            for mb in range(2):
                lin(torch.randn(32, 64), [16, 16], mb == 0).square().sum().backward()
                if step == 2:
                    seen["mg"].append(torch.stack([w.main_grad.clone() for w in lin.weights()]))
            if step == 2:
                seen["main_grad"] = torch.stack([w.main_grad.clone() for w in lin.weights()])
            for w in lin.weights():
                w.grad = w.main_grad.clone()
            opt.step()
            rec.log(step)
    q = mt.quantize(seen["W"], spec=lin.recipe.spec("w"))
    with h5py.File(tmp / "s.h5", "r") as f:
        snap = f["/snap/0"]
        assert list(snap["master"].attrs["steps"]) == [1]  # trace row 1 = global step 2
        assert np.array_equal(snap["master"][0], seen["W"].numpy())
        assert np.array_equal(snap["weight_q"][0], mt.dequantize(q).numpy())
        assert np.array_equal(snap["main_grad"][0], seen["main_grad"].numpy())
        # mxfp8 bridges unfused: main_grad = fl32(fl32(0 + c0) + c1) with c_k the BF16 dW of micro-batch k
        c = snap["wgrad_mb"][0]
        assert c.shape == (2, 2, 32, 64)
        assert np.array_equal(c[0], seen["mg"][0].numpy())
        assert np.array_equal((c[0] + c[1]).astype(np.float32), seen["mg"][1].numpy())
        err = (snap["master"][0] - snap["weight_q"][0]).astype(np.float64)[0, :32, :32]
        assert np.float32(snap["quant/w/block_mse"][0][0, 0, 0]) == np.float32(np.mean(err ** 2))
        assert snap["quant/w/codes"][0].shape == (2, 32, 64)
        assert snap["osc/flips"][0].dtype == np.uint32 and snap["osc/ema"][0].shape == (2, 32, 64)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    import subprocess
    from conftest import MXSIM_BIN
    p = subprocess.run([MXSIM_BIN, "report", str(tmp / "s.h5"), "-o", str(tmp / "rep"), "--row", "1"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr


def test_watched_elements_every_step(tmp):
    """watch_elements=[1] on one MXFP4 block [1, 32] (element 0 = 6 fixes the E8M0 scale at 1,
    byte 127): element 1 is 1.125, 1.375, 1.125, 1.375 when micro-batch 0 runs, so its E2M1 value
    is 1, 1.5, 1, 1.5 (codes 2, 3, 2, 3: OCP MX v1.0's E2M1 table), and its cumulative flips as of
    each row (before that step's update: Nagel et al. 2022, worked as in the oscillation test) are
    0, 0, 0, 1."""
    lin = mt.Linear(32, 1, bias=False, recipe="mxfp4")
    model = torch.nn.Sequential(lin)
    values = [1.125, 1.375, 1.125, 1.375]
    with mt.Recorder(model, tmp / "w.h5", watch_elements=[1], osc_momentum=0.5) as rec:
        for step, v in enumerate(values, 1):
            with torch.no_grad():
                w = torch.zeros(1, 32)
                w[0, 0], w[0, 1] = 6.0, v
                lin.weight.copy_(w)
            lin(torch.zeros(32, 32)).sum().backward()
            rec.log(step)
    with h5py.File(tmp / "w.h5", "r") as f:
        wt = "/layers/0/watch/"
        assert f[wt + "element"][:, 0].tolist() == [1, 1, 1, 1]
        assert f[wt + "master"][:, 0].tolist() == values
        assert f[wt + "weight_q"][:, 0].tolist() == [1.0, 1.5, 1.0, 1.5]
        assert f[wt + "code"][:, 0].tolist() == [2, 3, 2, 3]
        assert f[wt + "scale"][:, 0].tolist() == [127] * 4
        assert f[wt + "flips"][:, 0].tolist() == [0, 0, 0, 1]
    with pytest.raises(ValueError, match="reach outside"):
        mt.Recorder(model, tmp / "x.h5", watch_elements=[32])
    mt.Recorder(model, tmp / "y.h5").close()  # the refused recorder left the module free


def test_grad_added_to_main_grad_per_micro_batch(tmp):
    """Megatron's contract, recorded per micro-batch: a fused module sets grad_added_to_main_grad
    on every weight that carries it (1 after each backward, the flag reset in between as Megatron's
    hook does); a module without fusion never does (0): its wgrad went to .grad, not main_grad."""
    for fused, want in ((True, [1, 1]), (False, [0, 0])):
        lin = mt.GroupedLinear(2, 32, 16, bias=False, recipe="bf16", fuse_wgrad_accumulation=fused)
        for w in lin.weights():
            w.main_grad = torch.zeros(w.shape)
            w.grad_added_to_main_grad = False
        with mt.Recorder(torch.nn.Sequential(lin), tmp / f"a{fused}.h5") as rec:
            for mb in range(2):
                lin(torch.randn(16, 32), [8, 8]).sum().backward()
                for w in lin.weights():
                    w.grad_added_to_main_grad = False  # Megatron resets it once it has seen it
            rec.log(1)
        with h5py.File(tmp / f"a{fused}.h5", "r") as f:
            assert f["/layers/0/grad_added_to_main_grad"][0].tolist() == want


def test_an_unfused_modules_snapshots_read_the_gradient_it_writes(tmp):
    """Without fuse_wgrad_accumulation the wgrad goes to .grad even where the weights carry a
    main_grad (untouched): the main_grad snapshot, like the norms, is then the accumulated .grad,
    the chain of the wgrad_mb contributions, never the untouched buffer."""
    torch.manual_seed(4)
    lin = mt.GroupedLinear(2, 64, 32, bias=False, recipe="mxfp8", fuse_wgrad_accumulation=False)
    for w in lin.weights():
        w.main_grad = torch.zeros(w.shape)  # present but not this module's destination
    with mt.Recorder(torch.nn.Sequential(lin), tmp / "u.h5", snapshot_steps=[1]) as rec:
        for mb in range(2):
            lin(torch.randn(32, 64), [16, 16], mb == 0).square().sum().backward()
        rec.log(1)
    grad = torch.stack([w.grad for w in lin.weights()]).numpy()
    with h5py.File(tmp / "u.h5", "r") as f:
        c = f["/snap/0/wgrad_mb"][0]
        assert np.array_equal(f["/snap/0/main_grad"][0], grad)
        assert np.array_equal((c[0] + c[1]).astype(np.float32), grad) and np.any(grad != 0)
        norm = f["/layers/0/main_grad_norm"][0][1]
        assert norm > 0


def test_a_per_gemm_recipe_records_the_operands_its_gemms_quantize(tmp):
    """FP4 in fprop only (dgrad and wgrad in BF16): the layer's recipe attribute spells it as the
    simulator's trace does, x and W have statistics (equal to the NumPy API's), dy has none (NaN:
    not recorded, as the simulator's trace for an operand no GEMM quantizes), and the layer has its
    oscillation series (W is quantized, by fprop)."""
    torch.manual_seed(5)
    m = Experts(recipe=mt.LinearRecipe("mxfp4", dgrad="bf16", wgrad="bf16"), fused=True)
    x0 = torch.randn(16, 32)
    with mt.Recorder(m, tmp / "g.h5") as rec:
        for step in (1, 2):
            m(x0 if step == 1 else torch.randn(16, 32), [8, 8]).square().sum().backward()
            rec.log(step)
    want_x = mxsim.quant_stats(x0.numpy(), mxsim.quantize(x0.numpy(), "mxfp4"))
    with h5py.File(tmp / "g.h5", "r") as f:
        fc1 = f["/layers/block.fc1"]
        assert fc1.attrs["recipe"] in (b"mxfp4,dgrad=bf16,wgrad=bf16", "mxfp4,dgrad=bf16,wgrad=bf16")
        assert fc1["quant/x/mse"][0] == want_x["mse"] and fc1["quant/x/count"][0] == want_x["count"]
        assert np.isfinite(fc1["quant/w/mse"][:]).all()
        assert np.isnan(fc1["quant/dy/mse"][:]).all() and np.isnan(fc1["quant/dy/sqnr_db"][:]).all()
        assert fc1["osc/flips_total"].shape[0] == 2


def test_the_bf16_shadow_of_each_quantized_gemm_by_hand(tmp):
    """Recorder(shadow=[...]): per micro-batch, each quantized GEMM's output against the same GEMM on
    BF16 operands. x = 1.25 e_0 and W = e_00 (MXFP4 in fprop and dgrad, wgrad in BF16): fprop's x
    rounds to 1.0 (the block scale 2^-2 puts 1.25 at the E2M1 tie 5, even: 4), so y = 1.0 against
    1.25: rel_l2 = sqrt(0.0625 / 1.5625), max |err| 0.25 at element 0; dgrad of dy = e_0 is exact
    (no error: max_index -1, SQNR +inf); wgrad runs in BF16 and has no shadow."""
    m = mt.GroupedLinear(1, 32, 32, bias=False, recipe=mt.LinearRecipe("mxfp4", wgrad="bf16"))
    with torch.no_grad():
        m.weight0.zero_()
        m.weight0[0, 0] = 1.0
    x = torch.zeros(1, 32)
    x[0, 0] = 1.25
    dy = torch.zeros(1, 32)
    dy[0, 0] = 1.0
    with pytest.raises(ValueError, match="not recorded mxsim.torch layers"):
        mt.Recorder(m, tmp / "bad.h5", shadow=["fc9"])
    with mt.Recorder(m, tmp / "h.h5", shadow=True) as rec:
        for _ in range(2):  # two micro-batches
            xi = x.clone().requires_grad_(True)
            m(xi, [1]).backward(dy)
        rec.log(1)
    with h5py.File(tmp / "h.h5", "r") as f:
        L = f["/layers/GroupedLinear/shadow"]
        assert sorted(L.keys()) == ["dgrad", "fprop"]
        assert list(L["fprop/rel_l2"][0]) == [math.sqrt(0.0625 / 1.5625)] * 2
        assert list(L["fprop/max_abs_err"][0]) == [0.25] * 2 and list(L["fprop/max_index"][0]) == [0, 0]
        assert list(L["fprop/nonfinite"][0]) == [0, 0]
        assert list(L["dgrad/max_abs_err"][0]) == [0.0, 0.0] and list(L["dgrad/max_index"][0]) == [-1, -1]
        assert np.isinf(L["dgrad/sqnr_db"][0]).all() and list(L["dgrad/rel_l2"][0]) == [0.0, 0.0]


def test_the_shadow_covers_exactly_the_quantized_gemms_of_the_named_layers(tmp):
    torch.manual_seed(6)
    m = Experts(recipe="mxfp8", fused=True)
    m.block.fc2.recipe = mt.LinearRecipe("bf16")  # a layer without quantized GEMMs: nothing to shadow
    m.block.fc2.deosc_eligible = False
    with mt.Recorder(m, tmp / "c.h5", shadow=["block.fc1", "block.fc2"]) as rec:
        for step in (1, 2):
            m(torch.randn(32, 32, requires_grad=True), [16, 16]).square().sum().backward()  # fc1's dgrad runs
            rec.log(step)
    with h5py.File(tmp / "c.h5", "r") as f:
        fc1 = f["/layers/block.fc1/shadow"]
        assert sorted(fc1.keys()) == ["dgrad", "fprop", "wgrad"]
        for g in ("fprop", "dgrad", "wgrad"):
            e = fc1[f"{g}/rel_l2"][:]
            assert e.shape == (2, 1) and (e > 0).all() and (e < 0.2).all(), (g, e)  # MXFP8: small, not zero
        assert "shadow" not in f["/layers/block.fc2"]
