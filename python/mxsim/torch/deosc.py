"""Primus's weight de-oscillation for any PyTorch optimizer: ``WeightDeOsc``.

The arithmetic is the simulator's (core's DeOsc: hd::deosc_observe / deosc_window_end through
Backend::deosc_update, on the weight's device, its state kept there; docs/simulator.md
"De-oscillation", ../shared facts: Primus ``weight_deosc.py``, PR #982):

- per optimizer step, from ``start_step`` on, each eligible weight W [G, N, K] is observed with
  Q = the MXFP4 forward QDQ of bf16(W) (32 x 32 tiles, EVEN, RNE: the recipe's W spec);
  the first observation seeds;
- dist_w += |W - prev|, dist_q += |Q - prev_q|; after ``period`` observations a window ends:
  where dist_w > 0 and dist_q / max(dist_w, 1e-12) >= ``ratio`` the element snaps, W = Q,
  written into the parameters; the sums restart.

Eligible by recipe only: the modules whose recipe is MXFP4 (``deosc_eligible``), never an FP8
one (Primus PR #1081). Call ``step()`` after ``optimizer.step()`` (and before the Recorder's
``log``, which then records each window's snap count under ``deosc/snapped``).
"""
import ctypes

import torch

from . import _capi, _dl, _dl_device, _stream, dequantize, quantize
from .modules import GroupedLinear, _stack

__all__ = ["WeightDeOsc"]


class WeightDeOsc:
    """De-oscillation of every eligible ``mxsim.torch`` linear of ``model`` (see the module
    docstring). Args: period (observations per window, default 200), ratio (the snap threshold
    on dist_q / dist_w, default 4.0), start_step (the first step observed, default 0: Primus's
    defaults), masters (optional {parameter: FP32 master tensor of its shape}: Megatron's
    arrangement of BF16 parameters with FP32 masters in the optimizer; de-oscillation observes and
    snaps the masters, as Primus's does, and the next master-to-parameter copy carries the snap
    to the model; default: the parameters themselves). ``step(step=None)`` observes once (step: the global optimizer step, 1-based;
    None counts the calls) and returns {module name: elements snapped} for the windows that
    ended. ``snapped_last`` holds the last step's counts (0 where no window ended).
    Raises ValueError when the model has no eligible module."""

    def __init__(self, model, period=200, ratio=4.0, start_step=0, masters=None):
        if int(period) < 1 or not float(ratio) > 0 or int(start_step) < 0:
            raise ValueError(f"WeightDeOsc: period {period} must be >= 1, ratio {ratio} > 0, start_step "
                             f"{start_step} >= 0")
        self.period, self.ratio, self.start_step = int(period), float(ratio), int(start_step)
        self.modules = [(n or type(model).__name__, m) for n, m in model.named_modules()
                        if isinstance(m, GroupedLinear) and m.deosc_eligible]
        if not self.modules:
            raise ValueError(f"WeightDeOsc: {type(model).__name__} holds no MXFP4 mxsim.torch linear (de-oscillation "
                             "is eligible by recipe: mxfp4 only)")
        self._masters = dict(masters) if masters else {}
        for p, m in self._masters.items():
            if m.shape != p.shape or m.dtype != torch.float32 or m.device != p.device:
                raise ValueError(f"WeightDeOsc: a master must be float32 of its parameter's shape and device; got "
                                 f"{m.dtype} {list(m.shape)} on {m.device} for {p.dtype} {list(p.shape)} on {p.device}")
        self.snapped_last = {n: 0 for n, _ in self.modules}
        self._name_of = {id(m): n for n, m in self.modules}
        self._calls = 0
        self._lib = _capi.lib()
        self._states = {}  # (device type, index) -> (context, deosc)
        for _, m in self.modules:  # checked: now the modules (and a Recorder) see this de-oscillation
            m._deosc = self

    def _state(self, dev):
        key = (dev.type, dev.index)
        if key not in self._states:
            ctx, d = ctypes.c_void_p(), ctypes.c_void_p()
            _capi.call(self._lib.mxsim_context_create, _dl_device(dev.type, dev.index), ctypes.byref(ctx))
            _capi.call(self._lib.mxsim_deosc_create, ctx, self.period, ctypes.c_float(self.ratio), ctypes.byref(d))
            self._states[key] = (ctx, d)
        return self._states[key][1]

    @torch.no_grad()
    def step(self, step=None):
        self._calls += 1
        n = self._calls if step is None else int(step)
        self.snapped_last = {name: 0 for name, _ in self.modules}
        if n < self.start_step:
            return {}
        ended = {}
        for name, m in self.modules:
            ws = [self._masters.get(w, w) for w in m.weights()]
            W = _stack(ws).float().contiguous()
            Q = dequantize(quantize(W.bfloat16(), spec=m.recipe.spec("w"))).contiguous()
            out = ctypes.c_int64()
            _capi.call(self._lib.mxsim_deosc_observe, self._state(W.device), name.encode(),
                       ctypes.byref(_dl(W, "w")), ctypes.byref(_dl(Q, "q")), _stream(W), ctypes.byref(out))
            if out.value >= 0:
                ended[name] = out.value
                self.snapped_last[name] = out.value
                if out.value > 0:  # the snapped masters into the parameters (or the given masters)
                    for g, w in enumerate(ws):
                        w.copy_(W[g])
        return ended

    def snapped_of(self, module):
        """The elements of ``module`` snapped by the last step (0 where no window ended)."""
        return self.snapped_last.get(self._name_of.get(id(module)), 0)

    def _tracked(self, module):
        """(module's name here, the de-osc handle of its device), or None before its first observation."""
        name = self._name_of.get(id(module))
        dev = module.weights()[0].device
        state = self._states.get((dev.type, dev.index))
        return None if name is None or state is None else (name.encode(), state[1])

    def snaps_into(self, module, out):
        """The per-element snap counts of module's weight so far into out (int32 CPU tensor of its
        numel: the trace's uint32 counts bit for bit)."""
        t = self._tracked(module)
        if t is None:
            out.zero_()
            return
        _capi.call(self._lib.mxsim_deosc_snaps, t[1], t[0], ctypes.cast(out.data_ptr(), ctypes.POINTER(ctypes.c_uint32)),
                   out.numel())

    def gather_snaps(self, module, idx, n, out):
        """Elements idx (a ctypes int64 array of n) of module's snap counts into out (c_uint32 * n)."""
        t = self._tracked(module)
        if t is not None:  # else no observation yet: out stays zeros
            _capi.call(self._lib.mxsim_deosc_gather, t[1], t[0], idx, n, out)

    def close(self):
        for _, m in self.modules:
            if getattr(m, "_deosc", None) is self:
                m._deosc = None
        for ctx, d in self._states.values():
            self._lib.mxsim_deosc_destroy(d)
            self._lib.mxsim_context_destroy(ctx)
        self._states.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- a destructor raises nothing
            pass
