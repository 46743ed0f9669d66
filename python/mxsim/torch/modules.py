"""Drop-in linear layers whose GEMMs are mxsim's bit-exact grouped GEMMs.

``GroupedLinear`` has TransformerEngine's ``te.pytorch.GroupedLinear`` signature (which
Primus-Turbo's ``PrimusTurboGroupedLinear`` follows): parameters ``weight0`` ..
``weight{G-1}`` [out_features, in_features] and ``bias0`` .., ``forward(inp, m_splits,
is_first_microbatch=None)``. ``Linear`` is its one-group case with TE's ``weight`` / ``bias``.
The mechanics are the simulator's (docs/simulator.md "Mechanics"), each a tested promise:

- fprop / dgrad / wgrad through ``grouped_gemm`` with the recipe's operand specs
  (``LinearRecipe``: docs/simulator.md "Recipes per linear"), Hadamard and stochastic
  rounding as the recipe says;
- ``fuse_wgrad_accumulation=True``: every micro-batch's wgrad reaches ``weight.main_grad``
  (Megatron's FP32 buffer) through the bridge, fused where the recipe fuses (the wgrad GEMM's
  FP32 accumulator starts at main_grad) and else ``fl32(main_grad + bf16(dW))`` per group
  that had tokens. Where the weight carries ``grad_added_to_main_grad`` (Megatron sets it), it
  is set to True and autograd gets a dummy gradient (zeros with ``zero_out_wgrad``), as TE's
  GroupedLinear does, so that the parameter's grad hooks run. Otherwise ``.grad`` as plain
  PyTorch (dW in the parameter's dtype, from the FP32 accumulator);
- the quantized-weight cache keyed by ``is_first_microbatch`` (TE's meaning): True quantizes
  and caches, False reuses (an error naming the module when there is no cache or the weights
  changed since it was made: a stale cache), None quantizes inside the call and caches
  nothing. Under current scaling (fp8_current) dgrad re-derives W from the weight instead of
  keeping a transposed copy (Primus PR #891); fp8_delayed keeps TE's amax history per operand
  role and updates its scales at each step's first micro-batch;
- de-oscillation eligibility by recipe only: ``deosc_eligible`` is True for mxfp4 (and the
  module carries a ``float4_e2m1fn_x2`` marker buffer where torch has that dtype), never for an
  FP8 recipe (Primus PR #1081).

What is PyTorch's own arithmetic, not mxsim's contract: the bias add (in FP32 on the GEMM's FP32
output, then one rounding to the activation dtype, as TE's epilogue), the stacking of the weights
into [G, N, K] (a copy, where a GEMM needs them), dtype conversions (exact widenings; bfloat16
narrowing RNE), current scaling's amax (exact), and the bridge's FP32 add (IEEE, the simulator's
value except NaN payloads). The cache's staleness check sees in-place updates of the parameters
(their version counters), not writes through ``.data`` or into their storage by other views.
"""
import itertools
import weakref
import zlib

import torch

from . import DelayedScaling, LinearRecipe, grouped_gemm, quantize, quantize_grouped_colwise

__all__ = ["GroupedLinear", "Linear", "convert"]

_ids = itertools.count(1)

# Modules with work left to settle (current-scaling checks, fp8_delayed amaxes). A module that
# begins a step with work of its own left is the model's first of the step: it settles every
# module's, so a model waits once per step, not once per layer (a later layer then has none).
_UNSETTLED = weakref.WeakSet()


def _settle(modules):
    """The pending work of ``modules``' last steps, with one wait for the amaxes and one for the
    checks: every fp8_delayed amax recorded, then each module's current-scaling check
    (check_current_scaling raises naming the first non-finite operand of the first module that
    has one)."""
    DelayedScaling.flush([d for m in modules for d in m._delayed.values()])
    checks = [(m, m._scales_finite()) for m in modules if m._current_scales]
    if checks:
        dev = checks[0][1].device
        for (m, _), good in zip(checks, torch.stack([f.to(dev) for _, f in checks]).tolist()):
            if good:
                m._current_scales = []
            else:
                m.check_current_scaling()  # raises


class _WeightCache:
    """The quantized W of the current micro-batch series and the parameter versions it was made from."""

    def __init__(self):
        self.q, self.versions, self.hits = None, None, 0


class _GroupedLinearFn(torch.autograd.Function):
    """The three grouped GEMMs of the layer. forward returns the FP32 accumulator [M, N] (the
    module adds the bias in FP32 and narrows once); backward gives dx in inp's dtype and the
    weights' gradients (or bridges them into main_grad)."""

    @staticmethod
    def forward(ctx, inp, splits, mod, is_first_microbatch, *weights):
        x = inp.detach().reshape(-1, mod.in_features)
        if not x.is_contiguous():
            x = x.contiguous()  # mxsim reads row-major storage in place
        r = mod.recipe
        if r.gemm_quantized["fprop"]:
            qw = mod._weight_for_fprop(weights, is_first_microbatch)
            qx = mod._quantize("x_fprop", x)
            y = grouped_gemm(qx, qw, splits)
            if mod._tap is not None and mod._tap.shadowing("fprop"):  # a Recorder's BF16 shadow
                mod._tap.shadow("fprop", grouped_gemm(x.bfloat16(), _stack(weights).bfloat16(), splits), y)
        else:
            qw = qx = None
            y = grouped_gemm(x.bfloat16(), _stack(weights).bfloat16(), splits)
        if mod._tap is not None:  # a Recorder: the operands of this micro-batch's fprop
            mod._tap.fprop(x, qx, weights, qw)
        ctx.mod, ctx.splits, ctx.qw, ctx.mb = mod, splits, qw, mod._microbatch
        ctx.in_shape, ctx.in_dtype = inp.shape, inp.dtype
        ctx.weights = weights  # the parameters themselves: W is re-stacked only where dgrad needs it
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, dy):
        mod, splits, r = ctx.mod, ctx.splits, ctx.mod.recipe
        (x,) = ctx.saved_tensors
        dy = dy.reshape(-1, mod.out_features)
        if not dy.is_contiguous():
            dy = dy.contiguous()
        call = mod._next_backward()
        out_dtype = torch.bfloat16 if ctx.in_dtype == torch.bfloat16 else torch.float32
        # dgrad: dx = dy . W
        dx = None
        if ctx.needs_input_grad[0]:
            if r.gemm_quantized["dgrad"]:
                if r.dgrad_reuses_fprop_w and ctx.qw is not None:
                    qw = ctx.qw  # 2-D tiles / per tensor: the fprop bytes serve dgrad
                else:  # current scaling (re-derived from the weights: the same values) or dgrad's own W spec
                    qw = mod._quantize("w_dgrad", _stack(ctx.weights), mb=ctx.mb)
                qdy = mod._quantize("dy_dgrad", dy, call, 1, mb=ctx.mb)
                dx = grouped_gemm(qdy, qw, splits, form="dgrad", out_dtype=out_dtype)
                if mod._tap is not None and mod._tap.shadowing("dgrad"):  # a Recorder's BF16 shadow
                    ref = grouped_gemm(dy.bfloat16(), _stack(ctx.weights).bfloat16(), splits, form="dgrad",
                                       out_dtype=out_dtype)
                    mod._tap.shadow("dgrad", ref, dx)
            else:
                dx = grouped_gemm(dy.bfloat16(), _stack(ctx.weights).bfloat16(), splits, form="dgrad",
                                  out_dtype=out_dtype)
            dx = dx.to(ctx.in_dtype).reshape(ctx.in_shape)
        if mod._tap is not None:  # a Recorder: dgrad's operand (quantized here when dgrad did not run)
            mod._tap.dgrad(dy, qdy if r.gemm_quantized["dgrad"] and dx is not None else None,
                           lambda: quantize(dy, spec=mod._resolved("dy_dgrad", dy, call, 1)))
        # wgrad: dW[g] = dy_g^T . x_g
        if not any(ctx.needs_input_grad[4:]):
            return (dx, None, None, None) + (None,) * len(ctx.weights)
        if r.gemm_quantized["wgrad"]:
            A = mod._quantize("dy_wgrad", dy, call, 2, mb=ctx.mb, splits=splits)
            B = mod._quantize("x_wgrad", x, mb=ctx.mb, splits=splits)
        else:
            A, B = _split_rows(dy.bfloat16(), splits), _split_rows(x.bfloat16(), splits)
        if mod._tap is not None and mod._tap.shadowing("wgrad"):  # a Recorder's BF16 shadow
            _wgrad_shadow(mod, A, B, dy, x, splits)
        grads = mod._wgrad(A, B, splits, ctx.weights)
        if mod._tap is not None:  # a Recorder: main_grad after this micro-batch's add
            mod._tap.wgrad_done()
        return (dx, None, None, None) + tuple(grads)


def _wgrad_shadow(mod, A, B, dy, x, splits):
    """The Recorder's wgrad shadow: this micro-batch's dW in the form the layer adds it (FP32
    where the GEMM accumulates into main_grad or the gradient is plain, BF16 for the bridge)
    against the same GEMM on BF16 operands, as the simulator's."""
    bridged = mod.fuse_wgrad_accumulation and not mod.recipe.fused_wgrad_accum
    dt = torch.bfloat16 if bridged else torch.float32
    test = grouped_gemm(A, B, splits, form="wgrad", out_dtype=dt)
    ref = grouped_gemm(_split_rows(dy.bfloat16(), splits), _split_rows(x.bfloat16(), splits), splits, form="wgrad",
                       out_dtype=dt)
    mod._tap.shadow("wgrad", ref, test)


def _stack(weights):
    """[G, N, K] of the weights (a copy, on their device)."""
    return torch.stack([w.detach() for w in weights])


def _split_rows(t, splits):
    out, m0 = [], 0
    for m in splits:
        out.append(t[m0:m0 + m])
        m0 += m
    return out


class GroupedLinear(torch.nn.Module):
    """G linear layers applied to consecutive row groups of one input (an MoE's experts):
    ``y[rows of g] = inp[rows of g] . weight{g}^T (+ bias{g})``.

    Args (TransformerEngine's ``GroupedLinear``): num_gemms (G), in_features (K), out_features
    (N), bias (bool), params_dtype (default torch.get_default_dtype()), device,
    fuse_wgrad_accumulation (see the module docstring). mxsim's own: recipe (a name of
    ``LinearRecipe`` or a LinearRecipe; default "mxfp4"), recipe_options (dict of recipe options,
    e.g. ``{"mxfp4_sr_grad": True}``), seed (the Philox key of stochastic rounding; each backward
    draws a new stream), name (for messages; ``convert`` sets the module's path).

    forward(inp [M, K] or [..., K] with M rows in all; float32 or bfloat16 on CPU or CUDA,
    m_splits: G ints >= 0 summing to M, is_first_microbatch: None / True / False) -> [..., N]
    in inp's dtype (float32: the FP32 accumulator; bfloat16: it rounded once, RNE).
    Raises ValueError naming the module and the argument for shapes, dtypes, devices and
    m_splits it cannot take, RuntimeError for a missing or stale weight cache and for a
    missing main_grad."""

    def __init__(self, num_gemms, in_features, out_features, sequence_parallel=False, fuse_wgrad_accumulation=False,
                 tp_group=None, tp_size=1, get_rng_state_tracker=None, rng_tracker_name=None, init_method=None,
                 bias=True, return_bias=False, params_dtype=None, parallel_mode=None, device=None, *,
                 recipe="mxfp4", recipe_options=None, seed=1234, name=None, _params=None, **te_options):
        super().__init__()
        self.name = name or f"{type(self).__name__}#{next(_ids)}"
        # TransformerEngine's tensor / sequence parallelism and userbuffer overlap are not mxsim's:
        # accepted at their single-GPU values (Megatron passes them), refused otherwise.
        unsupported = {"sequence_parallel": sequence_parallel, "tp_size > 1": tp_size != 1,
                       "return_bias": return_bias, **{k: v for k, v in te_options.items() if v}}
        for k, v in unsupported.items():
            if v:
                raise ValueError(f"{self.name}: {k} is not supported by mxsim.torch's modules "
                                 "(single-GPU layers; pass it at its default)")
        self.num_gemms, self.in_features, self.out_features = int(num_gemms), int(in_features), int(out_features)
        self.recipe = recipe if isinstance(recipe, LinearRecipe) else LinearRecipe(recipe, **(recipe_options or {}))
        # fp8_delayed: one amax-history state per operand role (TE's DelayedScaling), as the simulator's
        self._delayed = {r: self.recipe.delayed_state(r) for r in ("w", "x", "dy")} \
            if self.recipe.delayed_scaling else {}
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        self.use_bias = bool(bias)
        self.seed = int(seed)
        self.deosc_eligible = self.recipe.deosc_eligible
        self._sr_id = zlib.crc32(self.name.encode())  # stochastic-rounding streams keyed by the module's name
        self._backward_calls = 0
        self._microbatch = 0  # of the step: 0 at is_first_microbatch True / None, then counted
        self._current_scales = []  # (operand, micro-batch, scale_inv) of current scaling, checked per step
        self._cache = _WeightCache()
        self._tap = None  # a Recorder's view of this module (recorder.py), or None
        self._deosc = None  # the WeightDeOsc that observes this module (deosc.py), or None
        dtype = params_dtype or torch.get_default_dtype()
        for g in range(self.num_gemms):
            w, b = _params[g] if _params else (None, None)
            if w is None:
                w = torch.nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
                if init_method is not None:
                    init_method(w)  # TE's: called on each weight
                else:
                    torch.nn.init.kaiming_uniform_(w, a=5 ** 0.5)  # nn.Linear's initialisation
            self.register_parameter(self._wname(g), w)
            if self.use_bias:
                if b is None:
                    b = torch.nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device))
                self.register_parameter(self._bname(g), b)
        if self.deosc_eligible and hasattr(torch, "float4_e2m1fn_x2"):
            # Primus marks MXFP4 modules with a float4 buffer; eligibility itself is the recipe's.
            self.register_buffer("_mxfp4_marker", torch.zeros(1, dtype=torch.uint8, device=device).view(
                torch.float4_e2m1fn_x2), persistent=False)

    # TE's names: weight0 .. / bias0 ..; Linear overrides them with weight / bias.
    def _wname(self, g):
        return f"weight{g}"

    def _bname(self, g):
        return f"bias{g}"

    def weights(self):
        return [getattr(self, self._wname(g)) for g in range(self.num_gemms)]

    def biases(self):
        return [getattr(self, self._bname(g)) for g in range(self.num_gemms)] if self.use_bias else []

    @property
    def cache_hits(self):
        """Forward calls that reused the quantized weight (is_first_microbatch=False)."""
        return self._cache.hits

    def extra_repr(self):
        return (f"num_gemms={self.num_gemms}, in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.use_bias}, recipe={self.recipe.name}, fuse_wgrad_accumulation="
                f"{self.fuse_wgrad_accumulation}")

    def forward(self, inp, m_splits, is_first_microbatch=None):
        splits = self._check(inp, m_splits)
        if is_first_microbatch is None or is_first_microbatch:
            if self in _UNSETTLED:  # the model's first module of the step: every module's last step
                pending = list(_UNSETTLED)
                _UNSETTLED.clear()
                _settle(pending)
            self._microbatch = 0
            # a new step: fp8_delayed's scales from the amaxes recorded so far (the simulator updates
            # after the optimizer step, which is the same point; the first update keeps scale 1)
            for d in self._delayed.values():
                d.update()
        else:
            self._microbatch += 1
        try:
            y = _GroupedLinearFn.apply(inp, splits, self, is_first_microbatch, *self.weights())
        except ValueError as e:  # the library's refusal (m_splits, shapes), said for this module
            raise ValueError(f"{self.name}.forward: {e}") from None
        if self.use_bias:  # in FP32 on the accumulator, then one rounding to inp's dtype (TE's epilogue)
            bias = torch.stack(self.biases()).float()
            y = y + torch.repeat_interleave(bias, torch.tensor(splits, device=y.device), dim=0,
                                            output_size=y.shape[0])
        return y.to(inp.dtype).reshape(*inp.shape[:-1], self.out_features)

    # ---------------------------------------------------------------- checks

    def _check(self, inp, m_splits):
        where = f"{self.name}.forward"
        if not isinstance(inp, torch.Tensor):
            raise TypeError(f"{where}: inp must be a torch.Tensor, got {type(inp).__name__}")
        if inp.dim() < 1 or inp.shape[-1] != self.in_features:
            raise ValueError(f"{where}: inp has shape {list(inp.shape)}; its last axis must be in_features = "
                             f"{self.in_features}")
        if inp.dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"{where}: inp is {inp.dtype}; mxsim's linears take float32 or bfloat16 activations")
        w0 = self.weights()[0]
        if inp.device != w0.device:
            raise ValueError(f"{where}: inp is on {inp.device} but the weights are on {w0.device}")
        splits = [int(m) for m in m_splits]  # their values are checked by the library (core's rule)
        if len(splits) != self.num_gemms:
            raise ValueError(f"{where}: m_splits has {len(splits)} entries, num_gemms is {self.num_gemms}")
        return tuple(splits)

    # ---------------------------------------------------------------- numerics

    def _resolved(self, role, t, call=None, stream_role=None):
        """The recipe's spec of an operand: current scaling's scale from t's whole-tensor amax, found
        by the quantizer where t lives (Spec.whole_tensor: no wait for the device, as
        TransformerEngine's current scaling), or fp8_delayed's scale of the step with t's amax
        recorded (a device tensor, read at the step's end); stochastic rounding's stream for this
        backward call."""
        s = self.recipe.spec(role)
        if s.current_scaling:
            d = self._delayed.get(role.split("_")[0])
            if d is not None:  # fp8_delayed: record this use's amax, quantize with the step's scale
                d.record(t.detach().abs().amax() if t.numel() else 0.0)
                _UNSETTLED.add(self)
                s = d.spec(s)
            else:
                s = s.whole_tensor()
        if call is not None and s.info.stochastic:
            # stream: (module, backward call, operand) never repeat within a seed
            # 64 bits: the name's CRC-32, the call (24 bits), the operand (8 bits)
            s = s.derive(seed=self.seed, sr_stream=(self._sr_id << 32) | ((call & 0xFFFFFF) << 8) | stream_role)
        return s

    def _weight_spec(self, W):
        """The spec the next fprop's W takes, without recording an amax (the recorder's oscillation
        metrics quantize W as the next fprop will): current scaling from W's whole-tensor amax,
        fp8_delayed the step's scale."""
        s = self.recipe.spec(self.recipe.weight_role)  # fprop's W, or dgrad's where fprop runs in BF16
        if s.current_scaling:
            d = self._delayed.get("w")
            if d is not None:
                return d.spec(s)
            return s.whole_tensor()
        return s

    def _weight_for_fprop(self, weights, first):
        versions = tuple(w._version for w in weights)
        if first is None or first:
            q = self._quantize("w", _stack(weights))
            if first:
                self._cache.q, self._cache.versions = q, versions
            return q
        if self._cache.q is None:
            raise RuntimeError(f"{self.name}: is_first_microbatch=False but there is no quantized weight cache "
                               "(the first micro-batch must pass is_first_microbatch=True)")
        if self._cache.versions != versions:
            raise RuntimeError(f"{self.name}: stale quantized weight cache (the weights changed since "
                               "is_first_microbatch=True made it: an optimizer step between micro-batches?)")
        self._cache.hits += 1
        return self._cache.q

    def _quantize(self, role, t, call=None, stream_role=None, mb=None, splits=None):
        """t quantized by the role's resolved spec (quantize_grouped_colwise with splits); under
        current scaling the result's scale_inv is kept for check_current_scaling."""
        s = self._resolved(role, t, call, stream_role)
        if splits is None:
            q = quantize(t, spec=s)
            scales = [q.scale]
        else:
            q = quantize_grouped_colwise(t, splits, spec=s)
            scales = [g.scale for g, m in zip(q, splits) if m > 0]  # an empty slice has no scale
        if s.current_scaling and role.split("_")[0] not in self._delayed:
            mb = self._microbatch if mb is None else mb
            self._current_scales += [(role, mb, sc) for sc in scales]
            _UNSETTLED.add(self)
        return q

    def _scales_finite(self):
        """On the scales' device, without a wait: whether every kept current-scaling scale_inv is
        finite (check_current_scaling and _settle read it)."""
        return torch.isfinite(torch.cat([sc.reshape(-1) for _, _, sc in self._current_scales])).all()

    def check_current_scaling(self):
        """Raises RuntimeError naming the operand and micro-batch when a current-scaled operand
        quantized since the last check had a non-finite amax (its scale_inv is NaN: FP8 current
        scaling has no finite scale, and the GEMM's output is NaN), as the simulator refuses such a
        step (docs/simulator.md). One wait for the device for all of them. The first forward of a
        step checks every module's at once (one wait per step for the model); call it after
        backward to learn it before optimizer.step()."""
        if not self._current_scales or bool(self._scales_finite()):
            self._current_scales = []
            return
        pending, self._current_scales = self._current_scales, []
        role, mb = next((r, m) for r, m, sc in pending if not bool(torch.isfinite(sc).all()))
        raise RuntimeError(f"{self.name}: micro-batch {mb}: operand {role} has a non-finite amax; FP8 current "
                           "scaling has no finite scale (its scale_inv is NaN, and so is the GEMM's output)")

    def _next_backward(self):
        self._backward_calls += 1
        return self._backward_calls

    def _wgrad(self, A, B, splits, weights):
        """dW of every group into main_grad (the bridge) or as gradients (returned)."""
        r = self.recipe
        keep = self._tap is not None and self._tap.wants_wgrad_mb()  # a Recorder's snapshot step
        if not self.fuse_wgrad_accumulation:
            dw = grouped_gemm(A, B, splits, form="wgrad")
            grads = [dw[g].to(w.dtype) for g, w in enumerate(weights)]
            if keep:  # the contribution autograd adds to .grad
                self._tap.keep_wgrad_mb(torch.stack(grads).float())
            return grads
        for g, w in enumerate(weights):
            mg = getattr(w, "main_grad", None)
            if mg is None or mg.dtype != torch.float32 or mg.shape != w.shape or mg.device != w.device:
                raise RuntimeError(f"{self.name}: fuse_wgrad_accumulation=True needs {self._wname(g)}.main_grad, an "
                                   f"FP32 tensor of shape {list(w.shape)} on {w.device} (Megatron's buffer); got "
                                   f"{None if mg is None else (mg.dtype, list(mg.shape), str(mg.device))}")
        if keep and r.fused_wgrad_accum:  # the FP32 dW the accumulate-into GEMM adds (one more GEMM, this step only)
            self._tap.keep_wgrad_mb(grouped_gemm(A, B, splits, form="wgrad"))
        if r.fused_wgrad_accum:  # the GEMM's FP32 accumulator starts at main_grad (Primus PR #995)
            mgs = [w.main_grad for w in weights]
            mg, order = _stacked(mgs), slice(None)
            if mg is None:  # Megatron's buffer holds the parameters in reverse order: so do the groups
                mg, order = _stacked(mgs[::-1]), slice(None, None, -1)
            if mg is not None:  # in place: wgrad's groups are independent, so any order serves
                grouped_gemm(list(A)[order], list(B)[order], list(splits)[order], form="wgrad", out=mg,
                             accumulate=True)
            else:
                mg = torch.stack(mgs)
                grouped_gemm(A, B, splits, form="wgrad", out=mg, accumulate=True)
                for g, w in enumerate(weights):
                    if splits[g]:
                        w.main_grad.copy_(mg[g])
        else:  # unfused bridge: dW in BF16, then main_grad = fl32(main_grad + dW) per group with tokens
            dw = grouped_gemm(A, B, splits, form="wgrad", out_dtype=torch.bfloat16)
            if keep:  # the BF16 dW the bridge adds (zeros for groups without tokens: nothing added)
                self._tap.keep_wgrad_mb(torch.stack([dw[g].float() if splits[g] else torch.zeros_like(dw[g].float())
                                                     for g in range(len(weights))]))
            for g, w in enumerate(weights):
                if splits[g]:
                    w.main_grad.add_(dw[g].float())
        # Megatron's contract (TE's GroupedLinear does the same): where the parameter carries
        # grad_added_to_main_grad, set it and hand autograd a dummy gradient (zeros when
        # zero_out_wgrad) so that the parameter's grad hooks run; else no gradient.
        grads = []
        for w in weights:
            if hasattr(w, "grad_added_to_main_grad"):
                w.grad_added_to_main_grad = True
                make = torch.zeros if getattr(w, "zero_out_wgrad", False) else torch.empty
                grads.append(make(w.shape, dtype=w.dtype, device=w.device))
            else:
                grads.append(None)
        return grads


def _stacked(tensors):
    """A [G, ...] view of tensors that lie one after another, in order, in one storage, else None."""
    ts = list(tensors)
    t0 = ts[0]
    if not all(t.is_contiguous() for t in ts):
        return None
    base = _storage_ptr(t0)
    n = t0.numel()
    for g, t in enumerate(ts):
        # one storage, not separate allocations that merely abut (a caching allocator places them so)
        if _storage_ptr(t) != base or t.data_ptr() != t0.data_ptr() + g * n * t0.element_size() or \
                t.shape != t0.shape:
            return None
    try:
        return t0.as_strided((len(ts),) + tuple(t0.shape), (n,) + tuple(t0.stride()))
    except RuntimeError:  # the storage ends before the last one: not one buffer after all
        return None


def _storage_ptr(t):
    """The address of t's storage (torch >= 2.0: untyped_storage; 1.13: storage)."""
    return (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr()


class Linear(GroupedLinear):
    """TransformerEngine's ``te.pytorch.Linear`` signature over mxsim's GEMMs: ``weight``
    [out_features, in_features], ``bias`` [out_features], forward(inp [..., in_features],
    is_first_microbatch=None). The one-group case of GroupedLinear (same recipes, cache,
    main_grad bridge and errors)."""

    def __init__(self, in_features, out_features, *args, **kwargs):
        super().__init__(1, in_features, out_features, *args, **kwargs)

    def _wname(self, g):
        return "weight"

    def _bname(self, g):
        return "bias"

    def forward(self, inp, is_first_microbatch=None):
        rows = inp.numel() // self.in_features if inp.dim() else 0
        return super().forward(inp, [rows], is_first_microbatch)


def convert(model, recipe="mxfp4", include=None, **kwargs):
    """Swaps, in place, every ``torch.nn.Linear`` and every TE-style grouped linear (a module with
    ``num_gemms``, ``in_features``, ``out_features`` and ``weight0`` ..) of model for mxsim's
    Linear / GroupedLinear with ``recipe``, keeping the very Parameter objects (an optimizer made
    before keeps working) and the module's path as its name. include: None (all), a callable
    (name, module) -> bool, or a list of substrings of the module path. kwargs go to the new
    modules (fuse_wgrad_accumulation, recipe_options, seed). Returns [(path, old type name)] of
    what was swapped."""
    swapped = []

    def wanted(path, m):
        if include is None:
            return True
        if callable(include):
            return bool(include(path, m))
        return any(s in path for s in include)

    for path, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            full = f"{path}.{child_name}" if path else child_name
            new = None
            if isinstance(child, GroupedLinear) or not wanted(full, child):
                continue
            kw = dict(kwargs)
            if hasattr(child, "fuse_wgrad_accumulation"):  # a TE module's own setting
                kw.setdefault("fuse_wgrad_accumulation", bool(child.fuse_wgrad_accumulation))
            if type(child) is torch.nn.Linear:
                new = Linear(child.in_features, child.out_features, bias=child.bias is not None, recipe=recipe,
                             name=full, _params=[(child.weight, child.bias)], **kw)
            elif all(hasattr(child, a) for a in ("num_gemms", "in_features", "out_features", "weight0")):
                G = int(child.num_gemms)
                params = [(getattr(child, f"weight{g}"), getattr(child, f"bias{g}", None)) for g in range(G)]
                has_bias = all(b is not None and b.numel() > 0 for _, b in params)
                new = GroupedLinear(G, child.in_features, child.out_features, bias=has_bias, recipe=recipe, name=full,
                                    _params=params if has_bias else [(w, None) for w, _ in params], **kw)
            if new is not None:
                setattr(parent, child_name, new)
                swapped.append((full, type(child).__name__))
    return swapped
