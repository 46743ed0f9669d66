"""mxsim.torch.GroupedLinear / Linear / convert on CPU tensors: each mechanic of
docs/simulator.md "Mechanics" as a promise with hand values. The recipe's specs
against the table of docs/simulator.md; fprop and dgrad equal mxsim's ops on the
same operands; main_grad after four micro-batches equals the hand-computed chain
of bridged wgrads (the NumPy API's wgrad, added in float32 here); the weight
cache (hits, the stale and missing errors); current scaling re-derived with one
scale over all experts; de-oscillation eligibility; convert on a small model."""
import numpy as np
import pytest

import mxsim

torch = pytest.importorskip("torch", reason="mxsim.torch needs PyTorch (Debian: python3-torch)")
import mxsim.torch as mt  # noqa: E402


def operands(M, K, N, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g), torch.randn(M, N, generator=g)


def same_bits(a, b):
    a = a.detach().contiguous().float().numpy() if isinstance(a, torch.Tensor) else np.asarray(a, np.float32)
    b = b.detach().contiguous().float().numpy() if isinstance(b, torch.Tensor) else np.asarray(b, np.float32)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def module(recipe, G=3, K=64, N=32, **kw):
    torch.manual_seed(1)
    return mt.GroupedLinear(G, K, N, bias=False, recipe=recipe, **kw)


# ------------------------------------------------------------------ the recipe table

@pytest.mark.parametrize("recipe,want", [
    # docs/simulator.md "Recipes per linear": fprop x, W, dgrad dy, wgrad dy, wgrad x
    ("mxfp4", ["e2m1 1x32 scale=e8m0/even", "e2m1 32x32 scale=e8m0/even", "e2m1 1x32 scale=e8m0/even",
               "e2m1 1x32 scale=e8m0/even round=rne hadamard16", "e2m1 1x32 scale=e8m0/even round=rne hadamard16"]),
    ("mxfp8", ["e4m3 1x32 scale=e8m0/even"] + ["e4m3 32x32 scale=e8m0/even"] + ["e4m3 1x32 scale=e8m0/even"] * 3),
    ("fp8_current", ["e4m3 per-tensor", "e4m3 per-tensor", "e5m2 per-tensor", "e5m2 per-tensor", "e4m3 per-tensor"]),
    ("fp8_block", ["e4m3 1x128", "e4m3 128x128", "e4m3 1x128", "e4m3 1x128", "e4m3 1x128"]),
])
def test_recipe_specs_are_the_documented_table(recipe, want):
    r = mt.LinearRecipe(recipe)
    for role, w in zip(["x_fprop", "w", "dy_dgrad", "dy_wgrad", "x_wgrad"], want):
        assert r.spec(role).describe().startswith(w), (role, r.spec(role).describe(), w)
    fused = {"mxfp4": False, "mxfp8": False, "fp8_current": True, "fp8_block": False}[recipe]
    assert r.fused_wgrad_accum == fused and r.transposed_cache_allowed == (recipe != "fp8_current")
    assert r.deosc_eligible == (recipe == "mxfp4")


def test_recipe_options_and_errors():
    assert mt.LinearRecipe("mxfp4", mxfp4_sr_grad=True).spec("dy_dgrad").info.stochastic == 1
    assert mt.LinearRecipe("mxfp4", mxfp4_hadamard_wgrad=False).spec("x_wgrad").info.hadamard == 0
    assert mt.LinearRecipe("fp8_tensor").name == "fp8_current"  # the alias
    with pytest.raises(ValueError, match="unknown recipe option 'mxfp4_sr'"):
        mt.LinearRecipe("mxfp4", mxfp4_sr=True)
    with pytest.raises(ValueError, match="that is a spec of one tensor"):
        mt.LinearRecipe("mxfp4_2d")
    with pytest.raises(ValueError, match="has no delayed scaling"):
        mt.LinearRecipe("mxfp8").delayed_state("x")


def test_fp8_delayed_scales_come_from_the_previous_steps_amax():
    # TE's delayed scaling (the simulator's): scale 1 in the first step; each step records every
    # quantization's amax; at the next step's first micro-batch scale = fl32(fp8_max / amax).
    m = module("fp8_delayed", G=2, K=64, N=32)
    x1, dy1 = operands(32, 64, 32, seed=21)
    x2, _ = operands(32, 64, 32, seed=22)
    m(x1, [16, 16], is_first_microbatch=True).backward(dy1)
    assert [m._delayed[r].scale for r in ("w", "x", "dy")] == [1.0, 1.0, 1.0]
    y2 = m(x2, [16, 16], is_first_microbatch=True)
    W = torch.stack([w.detach() for w in m.weights()])
    f32 = np.float32
    assert m._delayed["x"].scale == f32(448) / f32(x1.abs().max().item())  # E4M3; x2's amax not yet used
    assert m._delayed["w"].scale == f32(448) / f32(W.abs().max().item())
    assert m._delayed["dy"].scale == f32(57344) / f32(dy1.abs().max().item())  # E5M2 (HYBRID)
    # y2 is the GEMM of x2 and W quantized with those scales
    r = m.recipe
    sx = r.spec("x_fprop").with_amax(x1.abs().max().item())  # 448 / amax: the same scale, no epsilon
    sw = r.spec("w").with_amax(W.abs().max().item())
    same_bits(y2, mt.grouped_gemm(mt.quantize(x2, spec=sx), mt.quantize(W, spec=sw), [16, 16]))


# ------------------------------------------------------------------ fprop / dgrad against the ops

@pytest.mark.parametrize("recipe", ["bf16", "mxfp4", "mxfp8", "fp8_current", "fp8_block"])
def test_fprop_and_dgrad_are_the_grouped_gemms_of_the_recipe(recipe):
    m = module(recipe, K=128)
    splits = [32, 0, 96]
    x, dy = operands(128, 128, 32, seed=2)
    x.requires_grad_(True)
    y = m(x, splits)
    y.backward(dy)
    W = torch.stack([w.detach() for w in m.weights()])
    r = m.recipe
    if r.quantized:
        def spec(role, t):
            s = r.spec(role)
            return s.with_amax(t.abs().max().item()) if s.current_scaling else s
        qw = mt.quantize(W, spec=spec("w", W))
        want_y = mt.grouped_gemm(mt.quantize(x.detach(), spec=spec("x_fprop", x.detach())), qw, splits)
        want_dx = mt.grouped_gemm(mt.quantize(dy, spec=spec("dy_dgrad", dy)), qw, splits, form="dgrad")
    else:
        want_y = mt.grouped_gemm(x.detach().bfloat16(), W.bfloat16(), splits)
        want_dx = mt.grouped_gemm(dy.bfloat16(), W.bfloat16(), splits, form="dgrad")
    same_bits(y, want_y)
    same_bits(x.grad, want_dx)
    # .grad of each weight: the wgrad GEMM's FP32 accumulator (plain PyTorch semantics)
    if r.quantized:
        A = mt.quantize_grouped_colwise(dy, splits, spec=spec("dy_wgrad", dy))
        B = mt.quantize_grouped_colwise(x.detach(), splits, spec=spec("x_wgrad", x.detach()))
    else:
        A = [dy[:32].bfloat16(), dy[32:32].bfloat16(), dy[32:].bfloat16()]
        B = [x.detach()[:32].bfloat16(), x.detach()[32:32].bfloat16(), x.detach()[32:].bfloat16()]
    dw = mt.grouped_gemm(A, B, splits, form="wgrad")
    for g, w in enumerate(m.weights()):
        same_bits(w.grad, dw[g])
    assert torch.count_nonzero(m.weight1.grad) == 0  # no tokens: a zero gradient


def test_bf16_activations_give_bf16_outputs_rounded_once():
    m = module("mxfp8")
    x, dy = operands(64, 64, 32, seed=3)
    xb = x.bfloat16().requires_grad_(True)
    y = m(xb, [64, 0, 0])
    assert y.dtype == torch.bfloat16
    y32 = m(xb.detach().float(), [64, 0, 0])  # the FP32 accumulator of the same GEMM
    same_bits(y, y32.bfloat16())


def test_fp8_current_scales_all_experts_with_one_scale():
    m = module("fp8_current")
    W = torch.stack([w.detach() for w in m.weights()])
    qw = mt.quantize(W, spec=m.recipe.spec("w").with_amax(W.abs().max().item()))
    # one scale over all experts: the per-tensor quantization of the whole [G*N, K] weight
    whole = mxsim.quantize(W.reshape(-1, W.shape[-1]).numpy(), "fp8_tensor", amax_epsilon=1e-12)
    same_bits(qw.scale.reshape(-1), np.repeat(np.asarray(whole.scale, np.float32).reshape(-1)[:1], 3))
    np.testing.assert_array_equal(qw.qdata.reshape(-1).numpy(), np.asarray(whole.qdata).reshape(-1))


def test_whole_tensor_spec_is_with_amax_of_the_whole_tensor():
    # Spec.whole_tensor: the quantizer folds the amax of every group (and of every row slice of
    # the wgrad operand) itself; the bytes equal with_amax of the host's max |x| over all of it.
    g = torch.Generator().manual_seed(5)
    s = mt.LinearRecipe("fp8_current").spec("w")
    W = torch.randn(3, 32, 64, generator=g)
    W[1] *= 40  # one group's amax sets the scale of all
    q, want = mt.quantize(W, spec=s.whole_tensor()), mt.quantize(W, spec=s.with_amax(W.abs().max().item()))
    same_bits(q.scale, want.scale)
    assert torch.equal(q.qdata.view(torch.uint8), want.qdata.view(torch.uint8))
    x = torch.randn(48, 64, generator=g)
    x[40:] *= 100  # the largest values in the last slice only
    sx = mt.LinearRecipe("fp8_current").spec("x_wgrad")
    got = mt.quantize_grouped_colwise(x, [16, 0, 32], spec=sx.whole_tensor())
    ref = mt.quantize_grouped_colwise(x, [16, 0, 32], spec=sx.with_amax(x.abs().max().item()))
    for a, b in zip(got, ref):
        same_bits(a.scale, b.scale)
        assert torch.equal(a.qdata.view(torch.uint8), b.qdata.view(torch.uint8))
    assert s.whole_tensor() is s.whole_tensor()  # cached on the spec
    with pytest.raises(ValueError, match="whole_tensor_scale: a whole-tensor scale needs FP32 per-tensor current"):
        mt.LinearRecipe("mxfp4").spec("w").whole_tensor()
    with pytest.raises(ValueError, match="whole_tensor_scale: .*no Hadamard"):  # refused after any override
        s.whole_tensor().derive(hadamard=True)
    # a given amax's scale, or a delayed one, replaces the quantizer's own: the flag goes
    same_bits(mt.quantize(W, spec=s.whole_tensor().with_amax(W.abs().max().item())).scale, want.scale)
    d = mt.LinearRecipe("fp8_delayed").delayed_state("w")
    assert "whole-tensor" not in d.spec(s.whole_tensor()).describe()


def test_whole_tensor_scale_of_a_nan_tensor_is_nan():
    # docs/numerics.md §3.3: a non-finite amax has no scale; the quantizer marks the result
    # (scale_inv NaN, codes 0) instead of refusing, so that no host read of the amax is needed.
    x = torch.ones(4, 32)
    x[2, 7] = float("nan")
    q = mt.quantize(x, spec=mt.spec("fp8_tensor").whole_tensor())
    assert torch.isnan(q.scale).all()
    assert not q.qdata.view(torch.uint8).any()


def test_current_and_delayed_scaling_read_no_amax_on_the_host_per_operand(monkeypatch):
    # TransformerEngine's current scaling keeps amax and scale on the device; so do the modules:
    # no Tensor.item() and no host amax (Spec.with_amax) in forward or backward. fp8_delayed keeps
    # each use's amax as a tensor until the next step's first forward reads them all at once.
    x, dy = operands(48, 64, 32, seed=11)
    for recipe in ("fp8_current", "fp8_delayed"):
        m = module(recipe, fuse_wgrad_accumulation=True)
        for w in m.weights():
            w.main_grad = torch.zeros_like(w)
        with monkeypatch.context() as p:
            p.setattr(torch.Tensor, "item", lambda self: pytest.fail(f"{recipe}: Tensor.item() per operand"))
            p.setattr(mt.Spec, "with_amax", lambda self, a: pytest.fail(f"{recipe}: a host amax"))
            for first in (True, False):  # two micro-batches
                xi = x.clone().requires_grad_(True)
                m(xi, [16, 0, 32], is_first_microbatch=first).backward(dy)
    d = m._delayed["x"]
    assert len(d._pending) == 4  # fprop x and wgrad x of each micro-batch, kept as tensors
    m(x, [16, 0, 32], is_first_microbatch=True)  # the next step: recorded, then the scale updated
    assert len(d._pending) == 1  # this forward's own x only
    f32 = np.float32
    assert d.scale == f32(448) / f32(x.abs().max().item())


def test_delayed_scaling_records_a_tensor_as_its_value():
    # record(tensor) at the step's end is record(float) now: the same history and scales.
    r = mt.LinearRecipe("fp8_delayed", fp8_amax_history=2)
    a, b = r.delayed_state("x"), r.delayed_state("x")
    for step in ([3.0, 0.5], [1.0], [7.0, 2.0]):
        for v in step:
            a.record(v)
            b.record(torch.tensor(v))
        a.update()
        b.update()
        assert a.scale == b.scale
    assert a.scale == np.float32(448) / np.float32(7.0)
    a.record(np.float32(1.5))  # any number
    with pytest.raises(ValueError, match="one value"):
        a.record(torch.ones(2))


def test_a_non_finite_current_amax_is_named_by_the_next_step():
    # The simulator refuses a step with a non-finite current-scaling amax; the modules keep each
    # such operand's scale_inv (NaN exactly then) and check them all at once: when the next step
    # begins, or when asked (check_current_scaling) before optimizer.step().
    x, dy = operands(48, 64, 32, seed=12)
    m = module("fp8_current")
    xi = x.clone().requires_grad_(True)
    m(xi, [16, 0, 32], is_first_microbatch=True).backward(dy)
    m.check_current_scaling()  # finite: nothing to say
    bad = dy.clone()
    bad[5, 3] = float("inf")
    m(x.clone().requires_grad_(True), [16, 0, 32], is_first_microbatch=False).backward(bad)
    with pytest.raises(RuntimeError, match=r"micro-batch 1: operand dy_dgrad has a non-finite amax"):
        m.check_current_scaling()
    m.check_current_scaling()  # reported once
    xn = x.clone()
    xn[0, 0] = float("nan")
    m(xn, [16, 0, 32], is_first_microbatch=True)
    with pytest.raises(RuntimeError, match=r"micro-batch 0: operand x_fprop has a non-finite amax"):
        m(x, [16, 0, 32], is_first_microbatch=True)  # the next step's first forward checks


def test_the_first_module_of_a_step_settles_every_modules_last_step():
    # One wait per step for the model, not per layer: the first module to begin a step checks the
    # others' current-scaling operands and records their fp8_delayed amaxes.
    x, dy = operands(48, 64, 32, seed=13)
    a = mt.GroupedLinear(3, 64, 32, bias=False, recipe="fp8_current", name="first")
    b = mt.GroupedLinear(3, 64, 32, bias=False, recipe="fp8_current", name="second")
    c = mt.GroupedLinear(3, 64, 32, bias=False, recipe="fp8_delayed", name="third")
    xn = x.clone()
    xn[1, 1] = float("nan")
    a(x, [16, 0, 32], is_first_microbatch=True)
    b(xn, [16, 0, 32], is_first_microbatch=True)
    c(x, [16, 0, 32], is_first_microbatch=True).backward(dy)
    assert len(c._delayed["x"]._pending) == 2
    with pytest.raises(RuntimeError, match=r"^second: micro-batch 0: operand x_fprop"):
        a(x, [16, 0, 32], is_first_microbatch=True)  # the next step begins at the first module
    a(x, [16, 0, 32], is_first_microbatch=True)  # reported once; the delayed amaxes were recorded:
    assert not c._delayed["x"].__dict__.get("_pending")
    c(x, [16, 0, 32], is_first_microbatch=True)  # c's own step begins: its update uses them
    assert c._delayed["x"].scale == np.float32(448) / np.float32(x.abs().max().item())


# ------------------------------------------------------------------ main_grad through the bridge

# The NumPy module's specs of the recipes' wgrad operands (docs/simulator.md's table, which
# test_recipe_specs_are_the_documented_table holds the C recipes to).
NUMPY_WGRAD_SPECS = {"mxfp4": lambda: mxsim.spec("mxfp4", scaling_mode="even", hadamard=True),
                     "mxfp8": lambda: mxsim.spec("mxfp8", scaling_mode="even")}


def _bridged_by_hand(recipe, xs, dys, splits, G, N, K):
    """main_grad after the micro-batches, computed without the module: unfused recipes from the
    NumPy module's wgrad in BF16, added in float32 here (fl32(main_grad + bf16(dW)) per group with
    tokens); bf16 from the NumPy module's accumulating wgrad; fp8_current from the ops with the
    tensors' amax."""
    mg = np.zeros((G, N, K), np.float32)
    for x, dy in zip(xs, dys):
        if recipe == "bf16":
            mg = mxsim.grouped_wgrad(dy.numpy(), x.numpy(), splits, "bf16", main_grad=mg)
        elif recipe in NUMPY_WGRAD_SPECS:
            s = NUMPY_WGRAD_SPECS[recipe]()
            dw = mxsim.grouped_wgrad(dy.numpy(), x.numpy(), splits, s, s, out_dtype="bfloat16")
            for g in range(G):
                if splits[g]:
                    mg[g] = mg[g] + dw[g]  # float32 + float32: one IEEE add
        else:  # fp8_current: one scale per tensor from its amax; the GEMM accumulates into main_grad
            r = mt.LinearRecipe(recipe)
            sd = r.spec("dy_wgrad").with_amax(dy.abs().max().item())
            sx = r.spec("x_wgrad").with_amax(x.abs().max().item())
            out = torch.from_numpy(mg.copy())
            mt.grouped_gemm(mt.quantize_grouped_colwise(dy, splits, spec=sd), mt.quantize_grouped_colwise(x, splits, spec=sx),
                            splits, form="wgrad", out=out, accumulate=True)
            mg = out.numpy()
    return mg


@pytest.mark.parametrize("recipe", ["mxfp4", "bf16", "fp8_current", "mxfp8"])
def test_main_grad_after_four_microbatches_is_the_hand_sum(recipe):
    G, K, N = 3, 64, 32
    splits = [16, 0, 48]
    m = module(recipe, G, K, N, fuse_wgrad_accumulation=True)
    for w in m.weights():
        w.main_grad = torch.zeros(N, K)
        w.grad_added_to_main_grad = False  # Megatron's attributes
        w.zero_out_wgrad = True
    xs, dys = zip(*[operands(64, K, N, seed=10 + mb) for mb in range(4)])
    for mb in range(4):
        m(xs[mb], splits, is_first_microbatch=(mb == 0)).backward(dys[mb])
    want = _bridged_by_hand(recipe, xs, dys, splits, G, N, K)
    for g, w in enumerate(m.weights()):
        same_bits(w.main_grad, want[g])
        # TE's contract: the flag set, and a dummy (here zero) gradient so that grad hooks run
        assert w.grad_added_to_main_grad is True and torch.count_nonzero(w.grad) == 0
    assert torch.count_nonzero(m.weight1.main_grad) == 0  # an expert without tokens received nothing
    assert m.cache_hits == (3 if m.recipe.quantized else 0)  # BF16 weights are not quantized


def test_main_grads_of_one_buffer_in_order_are_one_view():
    # The bridge writes in place into main_grads that lie in order in one buffer; any other layout
    # (Megatron's buffer holds parameters in reverse order) is stacked and copied back.
    from mxsim.torch.modules import _stacked
    buf = torch.zeros(3 * 8 * 4)
    parts = [buf[g * 32:(g + 1) * 32].view(8, 4) for g in range(3)]
    v = _stacked(parts)
    assert v is not None and v.data_ptr() == buf.data_ptr() and v.shape == (3, 8, 4)
    v[1, 2, 3] = 5.0
    assert parts[1][2, 3] == 5.0
    assert _stacked(list(reversed(parts))) is None


@pytest.mark.parametrize("reverse", [False, True])
def test_main_grad_in_one_contiguous_buffer_is_written_in_place(reverse, monkeypatch):
    # Megatron's grad buffer: every weight's main_grad a view of one FP32 buffer, the parameters
    # in reverse order there. The fused wgrad writes into it, with no stacked copy of main_grad.
    G, K, N = 3, 32, 32
    m = module("fp8_current", G, K, N, fuse_wgrad_accumulation=True)
    buf = torch.zeros(G * N * K)
    for g, w in enumerate(m.weights()):
        slot = G - 1 - g if reverse else g
        w.main_grad = buf[slot * N * K:(slot + 1) * N * K].view(N, K)
    x, dy = operands(48, K, N, seed=5)
    mains, stacked_main, real_stack = {id(w.main_grad) for w in m.weights()}, [], torch.stack

    def spy(ts, *a, **k):  # records whether a stack copies main_grads
        ts = list(ts)
        stacked_main.append(any(id(t) in mains for t in ts))
        return real_stack(ts, *a, **k)
    monkeypatch.setattr(torch, "stack", spy)
    m(x, [16, 0, 32]).backward(dy)
    monkeypatch.undo()
    assert stacked_main and not any(stacked_main)  # weights were stacked, main_grads never
    want = _bridged_by_hand("fp8_current", [x], [dy], [16, 0, 32], G, N, K)
    for g, w in enumerate(m.weights()):
        same_bits(w.main_grad, want[g])


def test_missing_main_grad_names_the_weight_and_module():
    m = mt.GroupedLinear(2, 32, 32, recipe="mxfp4", fuse_wgrad_accumulation=True, name="layers.3.mlp.experts")
    x, dy = operands(32, 32, 32, seed=6)
    with pytest.raises(RuntimeError, match="layers.3.mlp.experts: fuse_wgrad_accumulation=True needs weight0.main_grad"):
        m(x, [16, 16]).backward(dy)


# ------------------------------------------------------------------ the weight cache

def test_stochastic_rounding_draws_a_new_stream_per_backward_call():
    # mxfp4_sr_grad: dy is rounded stochastically, with a stream per (module name, call, operand)
    # under the module's seed: the same call on a module of the same name repeats its bits, the
    # next call draws other words.
    x, dy = operands(64, 64, 32, seed=30)

    def dgrads(calls):
        torch.manual_seed(7)
        m = mt.GroupedLinear(2, 64, 32, bias=False, recipe="mxfp4", recipe_options={"mxfp4_sr_grad": True},
                             name="moe.experts", seed=3)
        out = []
        for _ in range(calls):
            xi = x.clone().requires_grad_(True)
            m(xi, [32, 32]).backward(dy)
            out.append(xi.grad)
        return out
    a, b = dgrads(2), dgrads(1)
    same_bits(a[0], b[0])
    assert not torch.equal(a[0], a[1])  # 2048 dy elements rounded with other words


def test_weight_cache_hits_and_stale_and_missing_errors():
    m = module("mxfp4", name="moe.fc1")
    x, _ = operands(64, 64, 32, seed=7)
    with pytest.raises(RuntimeError, match="moe.fc1: is_first_microbatch=False but there is no quantized weight cache"):
        m(x, [64, 0, 0], is_first_microbatch=False)
    y0 = m(x, [64, 0, 0], is_first_microbatch=True)
    y1 = m(x, [64, 0, 0], is_first_microbatch=False)
    same_bits(y0, y1)
    assert m.cache_hits == 1
    with torch.no_grad():
        m.weight0.add_(1.0)  # an optimizer step
    with pytest.raises(RuntimeError, match="moe.fc1: stale quantized weight cache"):
        m(x, [64, 0, 0], is_first_microbatch=False)
    # None: quantized inside the call, nothing cached, so the step is seen
    assert not torch.equal(m(x, [64, 0, 0]), y0)
    assert m.cache_hits == 1


# ------------------------------------------------------------------ eligibility, Linear, convert, errors

def test_deosc_eligibility_by_recipe_only():
    assert module("mxfp4").deosc_eligible is True
    for r in ["mxfp8", "fp8_current", "fp8_block", "bf16"]:
        m = module(r)
        assert m.deosc_eligible is False and not hasattr(m, "_mxfp4_marker")
    if hasattr(torch, "float4_e2m1fn_x2"):
        assert module("mxfp4")._mxfp4_marker.dtype == torch.float4_e2m1fn_x2


def test_linear_is_the_one_group_case():
    torch.manual_seed(2)
    lin = mt.Linear(64, 16, bias=True, recipe="mxfp8")
    assert set(n for n, _ in lin.named_parameters()) == {"weight", "bias"}
    x, _ = operands(8, 64, 16, seed=8)
    y = lin(x.reshape(2, 4, 64))
    assert y.shape == (2, 4, 16)
    s = lin.recipe
    want = mt.grouped_gemm(mt.quantize(x, spec=s.spec("x_fprop")), mt.quantize(lin.weight.detach()[None], spec=s.spec("w")),
                           [8]) + lin.bias.detach()
    same_bits(y.reshape(8, 16), want)


def test_convert_swaps_linears_keeping_their_parameters():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16, bias=False))
    params = [id(p) for p in model.parameters()]
    swapped = mt.convert(model, recipe="mxfp8", include=["0"])
    assert swapped == [("0", "Linear")]
    assert isinstance(model[0], mt.Linear) and type(model[2]) is torch.nn.Linear
    assert [id(p) for p in model.parameters()] == params  # an optimizer made before still works
    assert model[0].name == "0"
    swapped = mt.convert(model, recipe="mxfp8")
    assert swapped == [("2", "Linear")] and model[2].use_bias is False
    x, _ = operands(4, 64, 16, seed=9)
    model(x).sum().backward()
    assert model[0].weight.grad is not None


def test_bias_gradients_and_a_non_contiguous_input():
    torch.manual_seed(5)
    m = mt.GroupedLinear(2, 64, 32, bias=True, recipe="mxfp8")
    x, _ = operands(48, 64, 32, seed=15)
    dy = torch.randint(-8, 8, (48, 32), generator=torch.Generator().manual_seed(16)).float()  # sums exact in any order
    xt = x.t().contiguous().t().requires_grad_(True)  # same values, column-major storage
    assert not xt.is_contiguous()
    y = m(xt, [16, 32])
    y.backward(dy)
    same_bits(m.bias0.grad, dy[:16].sum(0))  # PyTorch's own sums (the bias is PyTorch's)
    same_bits(m.bias1.grad, dy[16:].sum(0))
    y2 = m(x, [16, 32])
    same_bits(y, y2)


def test_te_only_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="sequence_parallel is not supported"):
        mt.GroupedLinear(2, 32, 32, True)  # TE's 4th positional argument
    with pytest.raises(ValueError, match="ub_overlap_rs is not supported"):
        mt.GroupedLinear(2, 32, 32, ub_overlap_rs=True)
    m = mt.GroupedLinear(2, 32, 32, False, False, None, 1, None, None, torch.nn.init.zeros_, bias=False)
    assert torch.count_nonzero(m.weight0) == 0  # init_method applied to each weight, as TE does


def test_module_errors_name_the_module_and_argument():
    m = module("mxfp4", name="experts")
    x, _ = operands(64, 64, 32, seed=1)
    with pytest.raises(ValueError, match="experts.forward: inp has shape \\[64, 32\\]"):
        m(x[:, :32], [64, 0, 0])
    with pytest.raises(ValueError, match="experts.forward: m_splits has 2 entries, num_gemms is 3"):
        m(x, [32, 32])
    with pytest.raises(ValueError, match="experts.forward: grouped fprop: m_splits sum to 32 but the token operand has M = 64"):
        m(x, [32, 0, 0])
    with pytest.raises(ValueError, match="experts.forward: inp is torch.float16"):
        m(x.half(), [64, 0, 0])


# ------------------------------------------------------------------ per-GEMM recipes

def test_per_gemm_recipes_name_and_route_their_specs():
    r = mt.LinearRecipe("mxfp4", wgrad="mxfp8")
    assert r.name == "mxfp4,wgrad=mxfp8" and mt.LinearRecipe("mxfp4,wgrad=mxfp8").name == r.name  # the trace's spelling
    assert r.gemm_quantized == {"fprop": True, "dgrad": True, "wgrad": True}
    m8, m4 = mt.LinearRecipe("mxfp8"), mt.LinearRecipe("mxfp4")
    for role, ref in [("x_fprop", m4), ("w", m4), ("w_dgrad", m4), ("dy_dgrad", m4), ("dy_wgrad", m8),
                      ("x_wgrad", m8)]:
        assert r.spec(role).describe() == ref.spec(role).describe(), role
    assert r.fused_wgrad_accum == m8.fused_wgrad_accum and r.deosc_eligible and r.dgrad_reuses_fprop_w
    fp4_fprop = mt.LinearRecipe("mxfp4", dgrad="bf16", wgrad="bf16")  # FP4 in fprop only
    assert fp4_fprop.name == "mxfp4,dgrad=bf16,wgrad=bf16"
    assert fp4_fprop.gemm_quantized == {"fprop": True, "dgrad": False, "wgrad": False}
    assert fp4_fprop.fused_wgrad_accum and not fp4_fprop.dgrad_reuses_fprop_w and fp4_fprop.weight_role == "w"
    with pytest.raises(ValueError, match="runs dgrad in BF16"):
        fp4_fprop.spec("dy_dgrad")
    assert mt.LinearRecipe("mxfp4", fprop="bf16").name == "bf16,dgrad=mxfp4,wgrad=mxfp4"
    assert mt.LinearRecipe("bf16", dgrad="mxfp4").weight_role == "w_dgrad"  # W quantized by dgrad only
    assert not mt.LinearRecipe("mxfp4", dgrad="mxfp8").dgrad_reuses_fprop_w  # two W specs
    with pytest.raises(ValueError, match="fp8_delayed"):
        mt.LinearRecipe("fp8_delayed", wgrad="mxfp8")


@pytest.mark.parametrize("recipe,kw,gemms", [
    ("mxfp4", dict(dgrad="bf16", wgrad="bf16"), ("mxfp4", "bf16", "bf16")),  # FP4 in fprop only
    ("mxfp4", dict(wgrad="mxfp8"), ("mxfp4", "mxfp4", "mxfp8")),
    ("bf16", dict(dgrad="mxfp4"), ("bf16", "mxfp4", "bf16")),
    ("mxfp4", dict(dgrad="mxfp8"), ("mxfp4", "mxfp8", "mxfp4")),  # dgrad quantizes W by mxfp8's spec
])
def test_each_gemm_runs_by_its_own_recipe(recipe, kw, gemms):
    # The oracle of each GEMM is the one-recipe layer's GEMM: grouped_gemm on the operands that
    # recipe quantizes (or BF16 ones), computed here from the named recipes' own specs.
    m = module(mt.LinearRecipe(recipe, **kw), K=128)
    splits = [32, 0, 96]
    x, dy = operands(128, 128, 32, seed=5)
    x.requires_grad_(True)
    y = m(x, splits)
    y.backward(dy)
    W, xd = torch.stack([w.detach() for w in m.weights()]), x.detach()
    f, d, w = (mt.LinearRecipe(g) for g in gemms)
    if f.quantized:
        want_y = mt.grouped_gemm(mt.quantize(xd, spec=f.spec("x_fprop")), mt.quantize(W, spec=f.spec("w")), splits)
    else:
        want_y = mt.grouped_gemm(xd.bfloat16(), W.bfloat16(), splits)
    if d.quantized:
        want_dx = mt.grouped_gemm(mt.quantize(dy, spec=d.spec("dy_dgrad")), mt.quantize(W, spec=d.spec("w")), splits,
                                  form="dgrad")
    else:
        want_dx = mt.grouped_gemm(dy.bfloat16(), W.bfloat16(), splits, form="dgrad")
    if w.quantized:
        A = mt.quantize_grouped_colwise(dy, splits, spec=w.spec("dy_wgrad"))
        B = mt.quantize_grouped_colwise(xd, splits, spec=w.spec("x_wgrad"))
    else:
        A = [dy[:32].bfloat16(), dy[32:32].bfloat16(), dy[32:].bfloat16()]
        B = [xd[:32].bfloat16(), xd[32:32].bfloat16(), xd[32:].bfloat16()]
    same_bits(y, want_y)
    same_bits(x.grad, want_dx)
    dw = mt.grouped_gemm(A, B, splits, form="wgrad")
    for g, wt in enumerate(m.weights()):
        same_bits(wt.grad, dw[g])
