"""mxsim's trace of a user's own PyTorch run: ``Recorder``.

The trace is the one ``mxsim train`` writes (docs/trace-format.md), so ``mxsim-inspector``,
``mxsim compare`` and ``mxsim report`` read it unchanged, with the model's module names as
layer names. The series come from the library's one list (the C interface's recorder is core's
TraceRecorder, which the simulator writes with); rows are written on its writer thread, the file
is SWMR (the inspector follows it live) and complete up to the last logged step if the process
dies.

    rec = mt.Recorder(model, "run.h5")           # every mxsim.torch linear of model
    for step in range(1, steps + 1):
        for mb, (x, y) in enumerate(micro_batches):
            loss = loss_fn(model(x), y); loss.backward()
        optimizer.step()
        rec.log(step, loss=loss.item(), lr=sched.get_last_lr()[0])   # ends the step's row
    rec.close()

Per step and layer (``/layers/<module name>/...``):

- ``main_grad_norm`` [micro-batches]: the L2 norm of the layer's gradient buffer over all its
  experts after each micro-batch's backward: ``weight.main_grad`` with
  ``fuse_wgrad_accumulation=True`` (Megatron's buffer, read right after the bridge's add), else
  the parameters' ``.grad`` (read at the next micro-batch's forward and at ``log``, once autograd
  has accumulated it). mxsim's norm (sqrt of an FP64 sum of squares in a fixed tree order,
  Backend::l2_norm), computed where the tensor lives.
- quantized layers: ``quant/{w,x,dy}/*``: the statistics of micro-batch 0's fprop W and x and
  its dgrad dy against their sources (mxsim's quant_stats and scale exponent histogram), and
  ``osc/*``: the oscillation metrics of Nagel et al. 2022 (arXiv:2203.11086) of W at ``log``
  (after the optimizer step: W as the next fprop quantizes it), with the simulator's state and
  arithmetic (EMA momentum ``osc_momentum``, DistRatio windows of ``osc_period`` steps).

Run-wide: ``/train/step``, ``/train/loss``, ``/train/lr``, ``/train/tokens_per_expert`` (when
``log`` is given the routing counts) and every further keyword of ``log`` as ``/train/<name>``
(f64). Snapshots at ``snapshot_steps``: W as micro-batch 0 used it, its quantization, main_grad,
W's block maps and the element maps of the oscillation (and de-oscillation) state, which the
inspector's maps read. The file is created at the first ``log`` (the number of
micro-batches is then known); a later step with another number of micro-batches, or a scalar
the first step did not name (pass ``scalars=`` to declare more), is a ValueError.

Where the statistics run: on the layer's device, by the backend's own ops (a context of the
C interface: on CUDA the operands are read in place, ordered on torch's current stream, and the
oscillation state is kept there; no tensor reaches the host but the snapshots, only the
statistics' few numbers, which are delivered together at ``log`` with one wait per device).
"""
import ctypes

import torch

from . import LinearRecipe, _capi, dequantize, quantize
from .modules import GroupedLinear, _stack

__all__ = ["Recorder"]

_NAN = float("nan")
_ROLES = ("w", "x", "dy")
_GEMMS = ("fprop", "dgrad", "wgrad")  # mxsim_gemm_form order


def _range(name):
    """A torch.profiler range over one of the recorder's phases (bench/peers/profile_recorder.py)."""
    return torch.autograd.profiler.record_function("mxsim.Recorder." + name)


def _empty_stats():
    s = _capi.QStats()
    for f in ("mse", "max_abs_err", "signal_power", "sqnr_db", "mean_err", "expected_up",
              "tensor_scale_inv"):  # core's not_recorded()
        setattr(s, f, _NAN)
    return s


class _Context:
    """A C-interface context on one device: its norms and oscillation metrics."""

    def __init__(self, device, momentum, period):
        self.lib = _capi.lib()
        from . import _dl_device
        self.device = device
        self.handle = ctypes.c_void_p()
        _capi.call(self.lib.mxsim_context_create, _dl_device(device.type, device.index), ctypes.byref(self.handle))
        self.osc = ctypes.c_void_p()
        _capi.call(self.lib.mxsim_osc_metrics_create, self.handle, ctypes.c_float(momentum), int(period),
                   ctypes.byref(self.osc))
        # Every object a deferred call will write into, alive until resolve() has written it (a refused
        # step's taps forget theirs; the library still holds their addresses).
        self.outputs = []

    def _deferred(self, *objs):
        self.outputs.extend(objs)
        return objs[0] if len(objs) == 1 else objs

    def close(self):
        if self.osc:
            self.lib.mxsim_osc_metrics_destroy(self.osc)
            self.osc = ctypes.c_void_p()
        if self.handle:
            self.lib.mxsim_context_destroy(self.handle)
            self.handle = ctypes.c_void_p()

    def l2_norm(self, t):
        """The norm of t as a ctypes double that resolve() fills (no wait now)."""
        from . import _dl, _stream
        t = t.detach().float().contiguous()
        out = ctypes.c_double()
        _capi.call(self.lib.mxsim_l2_norm, self.handle, ctypes.byref(_dl(t, "x")), _stream(t), ctypes.byref(out))
        return self._deferred(out)

    def quant_stats(self, x, q):
        """(QStats, c_uint64[256]) of q against x, computed on this context's device; resolve() fills them."""
        from . import _dl, _stream
        x = x.detach().float().contiguous()
        out, hist = _capi.QStats(), (ctypes.c_uint64 * 256)()
        cq = q._c()
        _capi.call(self.lib.mxsim_context_quant_stats, self.handle, ctypes.byref(_dl(x, "x")), ctypes.byref(cq),
                   _stream(x), ctypes.byref(out), hist)
        return self._deferred(out, hist)

    def output_error(self, ref, test):
        """The OutputError of test against ref (any shape, one element count); resolve() fills it."""
        from . import _dl, _stream
        ref, test = ref.detach().float().contiguous(), test.detach().float().contiguous()
        out = _capi.OutputError()
        _capi.call(self.lib.mxsim_context_output_error, self.handle, ctypes.byref(_dl(ref, "ref")),
                   ctypes.byref(_dl(test, "test")), _stream(test), ctypes.byref(out))
        return self._deferred(out)

    def resolve(self):
        """Every deferred norm and statistic of this context, with one wait."""
        try:
            _capi.call(self.lib.mxsim_context_resolve, self.handle)
        finally:
            self.outputs = []

    def osc_update(self, name, w, q):
        """The OscStep of weight name's step (w its master, q its quantized value); resolve() fills it."""
        from . import _dl, _stream
        w, q = w.detach().float().contiguous(), q.contiguous()
        out = _capi.OscStep()
        _capi.call(self.lib.mxsim_osc_metrics_update, self.osc, name.encode(), ctypes.byref(_dl(w, "w")),
                   ctypes.byref(_dl(q, "q")), _stream(w), ctypes.byref(out))
        return self._deferred(out)


class _Tap:
    """What the recorder sees of one module during a step (modules.py calls it)."""

    def __init__(self, rec, name, mod):
        self.rec, self.name, self.mod = rec, name, mod
        r = mod.recipe
        # the simulator's rule (sim::LinearRecipe::records): a layer whose W some GEMM quantizes has
        # quant/* and osc/* series; x's statistics where fprop quantizes, dy's where dgrad does
        self.quantized = r.weight_role is not None
        self.records = r.records
        # the BF16 shadow of each quantized GEMM of an mxsim.torch module the recorder shadows
        wanted = isinstance(mod, GroupedLinear) and rec._shadows(name)
        self.shadow_gemms = {g: bool(wanted and r.gemm_quantized[g]) for g in _GEMMS}
        self.reset()

    def reset(self):
        self.forwards = self.backwards = 0
        self.norms = []               # main_grad_norm per micro-batch, in backward order
        self.pending_grad = False     # .grad holds an unread micro-batch (unfused modules)
        self.stats = {r: None for r in _ROLES}  # (QStats, hist) of micro-batch 0
        self.snap = None              # (W as FP32, its fprop quantization) of a snapshot step's micro-batch 0
        self.wgrad_mb = []            # a snapshot step's per-micro-batch wgrad contributions (host, FP32)
        self.watch = None             # micro-batch 0's watched elements: (master, code, byte, scale_inv, value)
        self.added = []               # per micro-batch: every weight carried grad_added_to_main_grad after it
        self.shadows = {g: [] for g in _GEMMS}  # per GEMM, per micro-batch: the OutputError against BF16

    def wants_wgrad_mb(self):
        """Whether this backward's wgrad contribution is kept (a snapshot step of this layer)."""
        return self.rec._snapshot_next(self)

    def shadowing(self, gemm):
        """Whether this layer's `gemm` ('fprop', 'dgrad', 'wgrad') runs a BF16 shadow (modules.py asks)."""
        return self.shadow_gemms[gemm]

    def shadow(self, gemm, ref, test):
        """One micro-batch's `gemm` output `test` against `ref`, the same GEMM on BF16 operands."""
        self.shadows[gemm].append(self.rec._ctx(self.mod).output_error(ref, test))

    def keep_wgrad_mb(self, dw):
        self.wgrad_mb.append(dw.detach().float().cpu())

    def _record(self, role, src, q):
        with _range("quant_stats"):
            self.stats[role] = self.rec._ctx(self.mod).quant_stats(src, q)

    def fprop(self, x, qx, weights, qw):
        """micro-batch 0's fprop operands (qx / qw None: quantized here, for a plain nn.Linear)."""
        self._read_grad()
        snapshot = self.forwards == 0 and self.rec._snapshot_next(self)
        if self.forwards == 0 and (self.quantized or snapshot):
            W = _stack(weights)
            if self.quantized:
                qw = qw if qw is not None else quantize(W, spec=self.mod._weight_spec(W))
                self._record("w", W, qw)
                if self.records["x"]:
                    self._record("x", x, qx if qx is not None else quantize(x, spec=self.mod._stat_spec("x_fprop", x)))
            if snapshot:  # before the optimizer step, as the simulator's snapshots
                self.snap = (W.detach().float().cpu(), qw.cpu() if qw is not None else None)
            if self.quantized and self.rec._watches(self):
                self.watch = self.rec._watch_elements(self, W, qw)
        self.forwards += 1

    def dgrad(self, dy, qdy, quantize_dy):
        if self.backwards == 0 and self.records["dy"]:
            self._record("dy", dy, qdy if qdy is not None else quantize_dy())

    def wgrad_done(self):
        self.backwards += 1
        self.added.append(int(all(getattr(w, "grad_added_to_main_grad", False) for w in self.mod.weights())))
        if self.mod.fuse_wgrad_accumulation:  # the bridge's add just happened
            with _range("l2_norm"):
                self.norms.append(self.rec._ctx(self.mod).l2_norm(_grad_buffer(self.mod, self.grad_attr())))
        else:
            self.pending_grad = True  # autograd adds dW into .grad after this backward returns

    def grad_attr(self):
        """Where this layer's wgrad lands: main_grad for a fused mxsim.torch module and for a plain
        linear whose weights carry Megatron's buffer, .grad otherwise (its norms and snapshots)."""
        if isinstance(self.mod, GroupedLinear):
            return "main_grad" if self.mod.fuse_wgrad_accumulation else "grad"
        return "main_grad" if all(hasattr(w, "main_grad") for w in self.mod.weights()) else "grad"

    def _read_grad(self):
        if self.pending_grad:
            g = _grad_buffer(self.mod, self.grad_attr())
            self.norms.append(self.rec._ctx(self.mod).l2_norm(g) if g is not None else _NAN)
            self.pending_grad = False

    def end_step(self):
        self._read_grad()
        return self.norms


def _grad_buffer(mod, attr):
    """The layer's [G, N, K] gradient buffer: the weights' main_grad / grad stacked (a view when
    they already lie one after another in one storage, as in Megatron's buffer)."""
    from .modules import _stacked
    ts = [getattr(w, attr, None) for w in mod.weights()]
    if any(t is None for t in ts):
        return None
    view = _stacked(ts)
    return view if view is not None else torch.stack([t.detach() for t in ts])


class _PlainLinear:
    """A plain ``torch.nn.Linear`` as the recorder sees mxsim.torch's modules (Recorder(...,
    linears=recipe)): its operands quantized by mxsim with the recipe's specs for the statistics
    and the oscillation metrics only; the layer computes in PyTorch as before. Hooks: a forward
    hook (x, W of micro-batch 0), a full backward hook (dy, then the gradient read later)."""

    def __init__(self, lin, recipe, tap_factory):
        self.lin = lin
        self.recipe = recipe if isinstance(recipe, LinearRecipe) else LinearRecipe(recipe)
        self.num_gemms, self.in_features, self.out_features = 1, lin.in_features, lin.out_features
        self.fuse_wgrad_accumulation = False  # the gradient is read once autograd has accumulated it
        self._deosc = None
        self._tap = tap_factory(self)
        K = lin.in_features
        self._hooks = [
            lin.register_forward_hook(lambda m, inp, out: self._tap.fprop(
                inp[0].detach().reshape(-1, K).contiguous(), None, [m.weight], None)),
            lin.register_full_backward_hook(lambda m, gin, gout: self._backward(gout[0])),
        ]

    def _backward(self, dy):
        dy = dy.detach().reshape(-1, self.out_features).contiguous()
        self._tap.dgrad(dy, None, lambda: quantize(dy, spec=self._stat_spec("dy_dgrad", dy)))
        self._tap.wgrad_done()

    def weights(self):
        return [self.lin.weight]

    def _stat_spec(self, role, t):
        s = self.recipe.spec(role)
        if s.current_scaling:  # current (and, for statistics, delayed) scaling: the tensor's own amax
            s = s.whole_tensor()
        return s

    def _weight_spec(self, W):
        return self._stat_spec(self.recipe.weight_role, W)

    def detach(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []


class Recorder:
    """Records a PyTorch model's run into mxsim's trace at ``path`` (see the module docstring).

    Args: model (a torch.nn.Module; every ``mxsim.torch.GroupedLinear`` / ``Linear`` in it is
    recorded under its module path, the root as its class name), path (the HDF5 trace; written
    at path + ".partial" until created), include (None: all; a list of substrings of module paths;
    or a callable (name, module) -> bool), scalars (names of further per-step f64 series beyond
    those the first ``log`` passes), osc_momentum (EMA momentum of the oscillation frequency,
    default 0.01: the simulator's metrics.osc_ema_momentum), osc_period (DistRatio's window in
    steps, default 100: the simulator's deosc.period), seed (stored in the trace's provenance),
    linears (opt-in: a recipe name; every plain ``torch.nn.Linear`` that include selects is
    recorded too, its operands quantized by mxsim with that recipe for the statistics only, the
    layer's own arithmetic unchanged), snapshot_steps (global steps whose W, its fprop
    quantization, main_grad, W's block maps and the element maps of the oscillation state are
    written, taken at micro-batch 0 / after the last micro-batch as the simulator's are),
    snapshot_layers (names that take them; default all), start_step (the global step of the
    first ``log``; snapshot steps count from it), watch_elements (flat [G, N, K] indices of weight
    elements whose master, code, block scale, value, flips and snaps every step records, in
    every quantized layer of snapshot_layers: the inspector's element timelines; the
    simulator's trace.watch_elements), shadow (None: off; True: every recorded mxsim.torch
    layer; or a list of their names: each quantized GEMM of those layers also runs on BF16
    operands every micro-batch and shadow/<gemm>/{rel_l2, sqnr_db, max_abs_err, max_index,
    nonfinite} record its output against that, as the simulator's trace.shadow_layers do; it
    costs one more GEMM per quantized GEMM, two for a fused wgrad).

    Raises ValueError when the model holds no mxsim.torch linear (``convert`` swaps them in).
    A recorder is a context manager; ``close`` detaches it from the modules and closes the file.
    """

    def __init__(self, model, path, *, include=None, scalars=(), osc_momentum=0.01, osc_period=100, seed=0,
                 linears=None, snapshot_steps=(), snapshot_layers=None, start_step=1, watch_elements=(), shadow=None):
        self._closed = True  # until constructed: a refused recorder has nothing to close
        self.shadow = [shadow] if isinstance(shadow, str) else shadow  # one name, or a list of them
        self._lib = _capi.lib()
        self.path = str(path)
        self.model_class = type(model).__name__
        self.extra_scalars = list(scalars)
        self.momentum, self.period, self.seed = float(osc_momentum), int(osc_period), int(seed)
        self.taps = []
        for name, m in model.named_modules():
            if not isinstance(m, GroupedLinear) or not _wanted(include, name, m):
                continue
            if m._tap is not None:
                raise ValueError(f"{name or self.model_class}: already recorded by another Recorder")
            self.taps.append(_Tap(self, name or self.model_class, m))
        self._plain = []
        if linears is not None:
            for name, m in model.named_modules():
                if type(m) is torch.nn.Linear and _wanted(include, name, m):
                    nm = name or self.model_class
                    view = _PlainLinear(m, linears, lambda v, nm=nm: _Tap(self, nm, v))
                    self._plain.append(view)
                    self.taps.append(view._tap)
        if not self.taps:
            raise ValueError(f"Recorder: {self.model_class} holds no mxsim.torch linear to record "
                             "(mxsim.torch.convert swaps nn.Linear and TE's grouped linears for them; "
                             "linears='mxfp4' records plain nn.Linear layers through mxsim's QDQ)")
        if self.shadow not in (None, False, True):
            names = {t.name for t in self.taps if isinstance(t.mod, GroupedLinear)}
            unknown = [n for n in self.shadow if n not in names]
            if unknown:
                for v in self._plain:  # nothing stays attached to a recorder that was refused
                    v.detach()
                raise ValueError(f"Recorder: shadow names {unknown}, not recorded mxsim.torch layers "
                                 f"({', '.join(sorted(names)) or 'none'})")
        self.snapshot_layers = None if snapshot_layers is None else set(snapshot_layers)
        self.watch_elements = [int(v) for v in watch_elements]
        for t in self.taps:
            n = t.mod.num_gemms * t.mod.out_features * t.mod.in_features
            if self._watches(t) and any(i < 0 or i >= n for i in self.watch_elements):
                for v in self._plain:  # nothing stays attached to a recorder that was refused
                    v.detach()
                raise ValueError(f"Recorder: watch_elements {self.watch_elements} reach outside {t.name}'s "
                                 f"{n} weight elements")
        for t in self.taps:  # checked: now the modules report to this recorder
            t.mod._tap = t
        self.snapshot_steps = sorted(set(int(v) for v in snapshot_steps))
        self._next_step = int(start_step)
        self._contexts = {}
        self._handle = None
        self._plan = None  # (micro_batches, scalar names, experts) once the file exists
        self._closed = False

    # ---------------------------------------------------------------- user API

    def log(self, step, loss=_NAN, lr=_NAN, tokens_per_expert=None, **scalars):
        """Ends optimizer step ``step`` (1-based; call after ``optimizer.step()``): its row of
        every series is queued for the writer. loss, lr and the keywords are Python numbers
        (a 0-dim tensor is read with .item()). tokens_per_expert: optional [micro-batches, experts]
        token counts of the step (a tensor or nested lists; /train/tokens_per_expert, the
        inspector's routing map), given at every step once the first gives it. Raises ValueError (the row dropped, earlier rows
        kept) for a number of micro-batches other than the first step's or an undeclared scalar."""
        if self._closed:
            raise ValueError(f"Recorder({self.path}): closed")
        try:
            self._append(step, loss, lr, tokens_per_expert, scalars)
        finally:  # a refused step's row is dropped: the next step starts afresh
            for t in self.taps:
                t.reset()

    def _append(self, step, loss, lr, tokens, scalars):
        norms = [t.end_step() for t in self.taps]
        mbs = {len(n) for n in norms}
        if len(mbs) != 1:
            raise ValueError(f"Recorder: step {step}: layers saw different numbers of micro-batches: "
                             + ", ".join(f"{t.name}: {len(n)}" for t, n in zip(self.taps, norms)))
        nmb = mbs.pop()
        tok = None if tokens is None else torch.as_tensor(tokens).detach().cpu().to(torch.int64).reshape(nmb, -1)
        if self._handle is None:
            self._create(max(nmb, 1), list(scalars) + [s for s in self.extra_scalars if s not in scalars],
                         0 if tok is None else tok.shape[1])
        micro_batches, names, experts = self._plan
        if experts and (tok is None or tok.shape[1] != experts):
            raise ValueError(f"Recorder: step {step}: tokens_per_expert must be [{micro_batches}, {experts}] as at the "
                             f"first step; got {None if tok is None else list(tok.shape)}")
        if nmb != micro_batches:
            raise ValueError(f"Recorder: step {step} had {nmb} micro-batches, the trace's first step "
                             f"{micro_batches} (main_grad_norm has one entry per micro-batch)")
        unknown = [k for k in scalars if k not in names]
        if unknown:
            raise ValueError(f"Recorder: scalar(s) {unknown} were not in the first step's log; declare them with "
                             "Recorder(..., scalars=[...])")
        keep = []  # the ctypes arrays the row points into, alive until append returns
        rows = (_capi.LayerRow * len(self.taps))()
        for t in self.taps:  # refused before anything of the step is written
            if self._watches(t) and t.watch is None:
                raise ValueError(f"Recorder: {t.name} ran no forward this step (its watched elements need micro-batch 0)")
        # The oscillation state before this step's update: the snapshots' maps and the watched flips.
        with _range("snapshots"):
            self._write_snapshots(step)
        for i, t in enumerate(self.taps):
            if t.quantized and self._watches(t):
                self._watch_row(t, rows[i], keep)
        with _range("osc"):  # queued: delivered by the resolve below
            osc = {i: self._osc(t) for i, t in enumerate(self.taps) if t.quantized}
        with _range("resolve"):
            for c in self._contexts.values():  # the step's deferred values: one wait per device
                c.resolve()
        norms = [[v.value if isinstance(v, ctypes.c_double) else v for v in n] for n in norms]
        for i, t in enumerate(self.taps):
            r = rows[i]
            n = (ctypes.c_double * max(micro_batches, 1))(*(norms[i] or [_NAN]))
            keep.append(n)
            r.main_grad_norm = n
            if t.quantized:
                for o, role in enumerate(_ROLES):
                    st = t.stats[role]
                    qs, h = st if st is not None else (_empty_stats(), (ctypes.c_uint64 * 256)())
                    keep.append(h)
                    r.quant[o] = qs
                    r.scale_exp_hist[o] = h
                r.osc = osc[i]
            if layer_plans_grad_added(t):
                a = (ctypes.c_uint8 * max(micro_batches, 1))(*(t.added + [0] * micro_batches)[:micro_batches])
                keep.append(a)
                r.grad_added = a
            if t.mod._deosc is not None:  # WeightDeOsc.step ran before this log: its window's snaps
                r.snapped = t.mod._deosc.snapped_of(t.mod)
            for gi, g in enumerate(_GEMMS):
                if t.shadow_gemms[g]:
                    got = t.shadows[g][:micro_batches]  # a micro-batch whose GEMM did not run: not recorded (NaN)
                    arr = (_capi.OutputError * micro_batches)(*(got + [_capi.OutputError(0, 0, _NAN, _NAN, _NAN, -1)]
                                                               * (micro_batches - len(got))))
                    keep.append(arr)
                    r.shadow[gi] = ctypes.cast(arr, ctypes.POINTER(_capi.OutputError))
        vals = (ctypes.c_double * max(len(names), 1))(*[_num(scalars.get(k, _NAN)) for k in names])
        tpe = (ctypes.c_int64 * max(nmb * experts, 1))(*(tok.reshape(-1).tolist() if experts else [0]))
        row = _capi.StepRow(int(step), _num(loss), _num(lr), vals, tpe, rows)
        with _range("append"):
            _capi.call(self._lib.mxsim_recorder_append, self._handle, ctypes.byref(row))
        self._next_step = int(step) + 1

    def close(self):
        """Writes the queued rows, closes the trace and detaches from the modules. Raises what a
        write failed with (the file then holds every row before it)."""
        if self._closed:
            return
        self._closed = True
        for t in self.taps:
            t.mod._tap = None
        for v in self._plain:
            v.detach()
        try:
            if self._handle is not None:
                _capi.call(self._lib.mxsim_recorder_close, self._handle)
        finally:
            if self._handle is not None:
                self._lib.mxsim_recorder_destroy(self._handle)
                self._handle = None
            for c in self._contexts.values():
                c.close()
            self._contexts.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- a destructor raises nothing; close() reports errors
            pass

    @property
    def layers(self):
        """The recorded layers' names, in the trace's order."""
        return [t.name for t in self.taps]

    # ---------------------------------------------------------------- internals

    def _shadows(self, name):
        """Whether the layer `name` runs the BF16 shadow (Recorder(shadow=...))."""
        if self.shadow is None or self.shadow is False:
            return False
        return self.shadow is True or name in set(self.shadow)

    def _watches(self, tap):
        """Whether tap's layer records the watched elements."""
        return bool(self.watch_elements) and tap.quantized and \
            (self.snapshot_layers is None or tap.name in self.snapshot_layers)

    def _watch_elements(self, t, W, qw):
        """Micro-batch 0's watched elements of W and its quantization qw (deferred to the step's resolve)."""
        n = len(self.watch_elements)
        idx = torch.tensor(self.watch_elements, dtype=torch.int64)
        master = W.detach().reshape(-1)[idx.to(W.device)].float()  # a gather on the device
        code, byte = (ctypes.c_uint8 * n)(), (ctypes.c_uint8 * n)()
        scale_inv, value = (ctypes.c_float * n)(), (ctypes.c_float * n)()
        ix = (ctypes.c_int64 * n)(*self.watch_elements)
        from . import _stream
        cq = qw._c()
        ctx = self._ctx(t.mod)
        _capi.call(self._lib.mxsim_context_quant_elements, ctx.handle, ctypes.byref(cq), ix, n,
                   _stream(W), code, byte, scale_inv, value)
        ctx._deferred(code, byte, scale_inv, value)
        return master, code, byte, scale_inv, value

    def _watch_row(self, t, r, keep):
        """Fills layer row r's watch arrays from t's micro-batch 0 and the state before this step's update."""
        n = len(self.watch_elements)
        master, code, byte, scale_inv, value = t.watch  # present: _append checked it first
        ix = (ctypes.c_int64 * n)(*self.watch_elements)
        m = (ctypes.c_float * n)(*master.cpu().tolist())
        flips, snaps = (ctypes.c_uint32 * n)(), (ctypes.c_uint32 * n)()
        ctx = self._ctx(t.mod)
        _capi.call(self._lib.mxsim_osc_metrics_gather, ctx.osc, t.name.encode(), ix, n, flips)
        d = t.mod._deosc
        if d is not None:
            d.gather_snaps(t.mod, ix, n, snaps)
        keep += [ix, m, code, byte, scale_inv, value, flips, snaps]
        r.watch_element, r.watch_master, r.watch_code = ix, m, code
        r.watch_scale_bytes, r.watch_scale_inv, r.watch_value = byte, scale_inv, value
        r.watch_flips, r.watch_snaps = flips, snaps

    def _snapshot_next(self, tap):
        """Whether the step under way takes snapshots of tap's layer."""
        return self._next_step in self.snapshot_steps and \
            (self.snapshot_layers is None or tap.name in self.snapshot_layers)

    def _write_snapshots(self, step):
        n = ctypes.c_size_t()
        _capi.call(self._lib.mxsim_recorder_snapshots, self._handle, int(step), ctypes.byref(n))
        if n.value == 0:
            return
        kind = ctypes.create_string_buffer(64)
        layer = ctypes.c_int32()
        keep, dls = [], []
        for i in range(n.value):
            _capi.call(self._lib.mxsim_recorder_snapshot_key, self._handle, i, ctypes.byref(layer), kind, 64)
            t = self._snapshot_tensor(self.taps[layer.value], kind.value.decode())
            keep.append(t)
            dls.append(ctypes.pointer(_dl_of(t)))
        arr = (ctypes.POINTER(_capi.DLTensor) * n.value)(*dls)
        _capi.call(self._lib.mxsim_recorder_write_snapshots, self._handle, int(step), arr, n.value)

    def _snapshot_tensor(self, t, kind):
        """The host tensor of one declared snapshot (its dtype and shape the trace's)."""
        m = t.mod
        if t.snap is None:
            raise ValueError(f"Recorder: {t.name} ran no forward in a snapshot step (its snapshots need micro-batch 0)")
        W, q = t.snap
        G, N, K = W.shape
        if kind == "master":
            return W.contiguous()
        if kind == "weight_q":
            return (dequantize(q) if q is not None else W.bfloat16().float()).reshape(G, N, K).contiguous()
        if kind == "wgrad_mb":  # [micro-batches, G, N, K]
            nmb = self._plan[0]
            if len(t.wgrad_mb) != nmb:
                raise ValueError(f"Recorder: {t.name}: {len(t.wgrad_mb)} wgrad contributions in a snapshot step of "
                                 f"{nmb} micro-batches")
            return torch.stack([c.reshape(G, N, K) for c in t.wgrad_mb]).contiguous()
        if kind == "main_grad":
            g = _grad_buffer(m, t.grad_attr())
            return (g.detach().float().cpu() if g is not None else torch.zeros(G, N, K)).reshape(G, N, K).contiguous()
        if kind.startswith("quant/w/"):
            return self._block_maps(t, W, q)[kind[len("quant/w/"):]]
        if kind.startswith("osc/"):
            return self._element_maps(t, W.numel())[kind[len("osc/"):]].reshape(G, N, K)
        raise ValueError(f"Recorder: no source for snapshot {kind} of {t.name}")

    def _block_maps(self, t, W, q):
        if getattr(t, "_maps_of", None) is not q:
            from . import _dl
            lay = q.layout
            nb = lay.groups * lay.scale_rows * lay.scale_cols
            fp32 = q._scale.dtype == torch.float32
            out = {k: torch.empty(nb, dtype=torch.float32) for k in ("block_mse", "block_sqnr_db", "block_amax")}
            out["scale"] = torch.empty(nb, dtype=torch.float32 if fp32 else torch.uint8)
            out["codes"] = torch.empty(W.numel(), dtype=torch.uint8)
            cq = q._c()
            _capi.call(self._lib.mxsim_block_maps, ctypes.byref(_dl(W, "x")), ctypes.byref(cq),
                       ctypes.cast(out["block_mse"].data_ptr(), ctypes.POINTER(ctypes.c_float)),
                       ctypes.cast(out["block_sqnr_db"].data_ptr(), ctypes.POINTER(ctypes.c_float)),
                       ctypes.cast(out["block_amax"].data_ptr(), ctypes.POINTER(ctypes.c_float)),
                       ctypes.c_void_p(out["scale"].data_ptr()), nb,
                       ctypes.cast(out["codes"].data_ptr(), ctypes.POINTER(ctypes.c_uint8)), W.numel())
            t._maps_of, t._maps = q, out
        return t._maps

    def _element_maps(self, t, n):
        ctx = self._ctx(t.mod)
        out = {"flips": torch.zeros(n, dtype=torch.int32), "ema": torch.zeros(n), "dist_ratio": torch.zeros(n)}
        _capi.call(self._lib.mxsim_osc_metrics_maps, ctx.osc, t.name.encode(),
                   ctypes.cast(out["flips"].data_ptr(), ctypes.POINTER(ctypes.c_uint32)),
                   ctypes.cast(out["ema"].data_ptr(), ctypes.POINTER(ctypes.c_float)),
                   ctypes.cast(out["dist_ratio"].data_ptr(), ctypes.POINTER(ctypes.c_float)), n)
        d = t.mod._deosc
        out["snaps"] = torch.zeros(n, dtype=torch.int32)
        if d is not None:
            d.snaps_into(t.mod, out["snaps"])
        return out

    def _ctx(self, mod):
        dev = mod.weights()[0].device
        key = (dev.type, dev.index)
        if key not in self._contexts:
            self._contexts[key] = _Context(dev, self.momentum, self.period)
        return self._contexts[key]

    def _osc(self, t):
        """The oscillation metrics of t's weight as the next fprop quantizes it."""
        with torch.no_grad():
            W = _stack(t.mod.weights()).float()  # widened once: the quantizer and the metrics read it
            q = quantize(W, spec=t.mod._weight_spec(W))
            return self._ctx(t.mod).osc_update(t.name, W, dequantize(q))

    def _create(self, micro_batches, names, experts):
        devices = {t.mod.weights()[0].device.type for t in self.taps}
        layer_plans = (_capi.LayerPlan * len(self.taps))()
        keep = []
        for i, t in enumerate(self.taps):
            m = t.mod
            enc = [t.name.encode(), m.recipe.name.encode(), _class_of(m).encode()]
            keep += enc
            layer_plans[i] = _capi.LayerPlan(enc[0], enc[1], enc[2], m.num_gemms, m.out_features, m.in_features,
                                             int(t.quantized), int(m._deosc is not None),
                                             int(self.snapshot_layers is None or t.name in self.snapshot_layers),
                                             int(isinstance(m, GroupedLinear)),  # a plain linear: no wgrad_mb
                                             len(self.watch_elements) if self._watches(t) else 0,
                                             int(layer_plans_grad_added(t)),
                                             (ctypes.c_int32 * 3)(*[int(t.shadow_gemms[g]) for g in _GEMMS]),
                                             (ctypes.c_int32 * 3)(*[int(t.quantized and m.recipe.two_level_scale[r])
                                                                    for r in _ROLES]))
        enc_names = [n.encode() for n in names]
        arr = (ctypes.c_char_p * max(len(names), 1))(*enc_names)
        cfg = _config_toml(self, micro_batches, names).encode()
        plan = _capi.RunPlan(cfg, self.model_class.encode(), b"hip" if "cuda" in devices else b"emu", self.seed,
                             micro_batches, experts, arr, len(names), layer_plans, len(self.taps),
                             (ctypes.c_int64 * max(len(self.snapshot_steps), 1))(*self.snapshot_steps),
                             len(self.snapshot_steps), self._next_step)
        h = ctypes.c_void_p()
        _capi.call(self._lib.mxsim_recorder_create, self.path.encode(), ctypes.byref(plan), ctypes.byref(h))
        self._handle, self._plan = h, (micro_batches, names, experts)


def layer_plans_grad_added(t):
    """Whether t's layer records grad_added_to_main_grad: its weights carry Megatron's main_grad."""
    return all(hasattr(w, "main_grad") for w in t.mod.weights())


def _dl_of(t):
    """A snapshot's DLTensor: its bytes are what the trace stores (int32 counts travel as the
    uint32 the trace declares, through a float32 view of the same bytes)."""
    from . import _dl
    return _dl(t.view(torch.float32) if t.dtype == torch.int32 else t, "snapshot")


def _class_of(m):
    """The recorded module's class name (a plain linear's own: torch.nn's Linear)."""
    return type(m.lin).__name__ if isinstance(m, _PlainLinear) else type(m).__name__


def _num(v):
    if isinstance(v, torch.Tensor):
        v = v.item()
    return float(v)


def _wanted(include, name, m):
    if include is None:
        return True
    if callable(include):
        return bool(include(name, m))
    return any(s in name for s in include)


def _config_toml(rec, micro_batches, names):
    """The recorder's settings as the trace's config_toml (`mxsim compare` diffs them)."""
    def q(s):
        return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'
    lines = ["[recorder]", f"model = {q(rec.model_class)}", f"micro_batches = {micro_batches}",
             f"osc_ema_momentum = {rec.momentum!r}", f"osc_period = {rec.period}",
             "scalars = [" + ", ".join(q(n) for n in names) + "]", ""]
    for t in rec.taps:
        m = t.mod
        lines += [f"[layers.{q(t.name)}]", f"module = {q(_class_of(m))}", f"recipe = {q(m.recipe.name)}",
                  f"shape = [{m.num_gemms}, {m.out_features}, {m.in_features}]",
                  f"fuse_wgrad_accumulation = {'true' if m.fuse_wgrad_accumulation else 'false'}", ""]
    return "\n".join(lines)

