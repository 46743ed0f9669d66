"""mxsim.torch: mxsim's bit-exact quantizer and grouped GEMM on torch tensors.

Every op runs where its input lives: CPU tensors on the emulator, CUDA tensors
on the GPU backend on the tensor's device and ``torch.cuda.current_stream()``
(asynchronously; nothing is copied to the host). Outputs are allocated by
torch. The numerics are docs/numerics.md's, the same bits as the ``mxsim``
command line, the C++ API and ``mxsim.quantize`` / ``mxsim.grouped_fprop`` on
NumPy arrays. docs/torch.md is the guide.

Pure Python over the C interface (libmxsim_c.so, loaded with ctypes): it works
with any CPython and torch >= 1.13, without mxsim's compiled extension.

    import torch, mxsim.torch as mt
    x = torch.randn(128, 256)
    q = mt.quantize(x, "mxfp4")                    # codes and E8M0 scales, torchao's layout
    y = mt.dequantize(q)                           # float32 [128, 256], exact
    w = mt.quantize(torch.randn(4, 64, 256), "mxfp4")
    out = mt.grouped_gemm(q, w, m_splits=[32, 32, 0, 64])   # fprop: [128, 64]
"""
import ctypes
import functools

from . import _capi

__all__ = ["Spec", "spec", "QuantizedTensor", "quantize", "quantize_grouped_colwise", "dequantize", "qdq",
           "grouped_gemm", "quant_stats", "block_stats", "scale_exp_histogram", "has_gpu", "version", "LinearRecipe",
           "DelayedScaling", "GroupedLinear", "Linear", "convert", "from_torchao", "from_te", "to_te", "Recorder", "WeightDeOsc", "assert_same", "check_quantize", "check_grouped_gemm"]


def __getattr__(name):
    # The modules subclass torch.nn.Module: imported (with torch) on first use.
    if name in ("GroupedLinear", "Linear", "convert"):
        from . import modules
        return getattr(modules, name)
    if name in ("from_torchao", "from_te", "to_te"):
        from . import peers
        return getattr(peers, name)
    if name == "Recorder":
        from . import recorder
        return recorder.Recorder
    if name in ("assert_same", "check_quantize", "check_grouped_gemm", "Mismatch"):
        from . import check
        return getattr(check, name)
    if name == "WeightDeOsc":
        from . import deosc
        return deosc.WeightDeOsc
    raise AttributeError(f"module 'mxsim.torch' has no attribute {name!r}")


def _torch():
    import torch  # lazily: `import mxsim.torch` costs nothing until an op runs
    return torch


def version():
    """The library's version and commit, e.g. '0.1.0 (abc1234)'."""
    return _capi.lib().mxsim_version().decode()


def has_gpu():
    """True when libmxsim_c.so was built with a GPU backend (CUDA tensors then run on it)."""
    return bool(_capi.lib().mxsim_has_gpu())


# ------------------------------------------------------------------ specs

def _text(key, v):
    torch = _torch()
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, torch.dtype):
        return str(v)  # 'torch.float8_e4m3fn': core ignores the prefix
    if key == "block_size" and isinstance(v, (tuple, list)):
        return ",".join(str(int(b)) for b in v)
    return str(v)


def _key_values(args):
    """(keys, values, n): the C interface's key / value text of [(key, value)] arguments."""
    n = len(args)
    keys = (ctypes.c_char_p * max(n, 1))(*[k.encode() for k, _ in args])
    values = (ctypes.c_char_p * max(n, 1))(*[_text(k, v).encode() for k, v in args])
    return keys, values, n


class Spec:
    """How one tensor is quantized: a recipe name (``mxsim recipes``: mxfp4, mxfp8, fp8_tensor,
    nvfp4, ...) and/or torchao-style keywords, read by the library (core/include/mxsim/spec_args.hpp):
    elem_dtype, block_size (int or (rows, cols); 0: per tensor), scaling_mode (floor, ceil, even,
    rceil), rounding (rne, rz, sr), seed and sr_stream (the Philox key of rounding='sr', as the
    command line's --seed), sr_index_base, hadamard, hadamard_signs, amax_epsilon, pow2_scale, scale_convention,
    hp_dtype, whole_tensor_scale (per-tensor FP32 current scaling: one scale from the whole tensor's
    amax, found by the quantizer where the tensor lives; see ``whole_tensor``). Without a recipe:
    OCP MX with torchao to_mx's defaults (E8M0, 32, floor).
    Raises ValueError naming a bad argument. Immutable; use ``spec()`` for a cached one."""

    def __init__(self, recipe=None, **kwargs):
        args = ([("recipe", recipe)] if recipe is not None else []) + \
            [(k, v) for k, v in sorted(kwargs.items()) if v is not None]
        handle = ctypes.c_void_p()
        lib = _capi.lib()
        _capi.call(lib.mxsim_spec_create, *_key_values(args), ctypes.byref(handle))
        self._handle, self._lib = handle, lib

    @classmethod
    def _adopt(cls, handle):
        """A Spec owning a handle the library made (mxsim_spec_derive, a recipe's operand spec)."""
        self = cls.__new__(cls)
        self._handle, self._lib = handle, _capi.lib()
        return self

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.mxsim_spec_destroy(self._handle)
            self._handle = None

    def derive(self, **kwargs):
        """This spec with keyword overrides (seed, sr_stream, sr_index_base, rounding, hadamard, ...;
        not a recipe), e.g. a recipe's dgrad spec given its stochastic-rounding stream."""
        args = sorted((k, v) for k, v in kwargs.items() if v is not None)
        handle = ctypes.c_void_p()
        _capi.call(self._lib.mxsim_spec_derive, self._handle, *_key_values(args), ctypes.byref(handle))
        return Spec._adopt(handle)

    def with_amax(self, amax):
        """Current scaling of a per-tensor FP32-scaled spec: the spec with the one scale of a tensor
        whose max |x| is ``amax`` (a float; docs/numerics.md §3.3), for every group of it."""
        handle = ctypes.c_void_p()
        _capi.call(self._lib.mxsim_spec_with_amax, self._handle, float(amax), ctypes.byref(handle))
        return Spec._adopt(handle)

    def whole_tensor(self):
        """Current scaling without a host amax: this per-tensor FP32 spec with whole_tensor_scale set,
        so quantize finds the amax of the whole tensor (every group of [G, N, K], every row slice of
        quantize_grouped_colwise) on the tensor's device and takes the scale ``with_amax`` would give
        it: the same bits, and on CUDA no wait for the device (TransformerEngine keeps amax and scale
        on the device the same way). A non-finite amax gives NaN scale_inv and zero codes (no error:
        the NaN reaches the GEMM's output). Cached on the spec. Raises ValueError for other specs."""
        w = self.__dict__.get("_whole")
        if w is None:
            w = self.__dict__["_whole"] = self.derive(whole_tensor_scale=True)
        return w

    @property
    def current_scaling(self):
        """True for per-tensor FP32-scaled specs (their scale comes from the tensor's amax)."""
        return bool(self.info.current_scaling)

    @property
    def handle(self):
        return self._handle

    @functools.cached_property
    def info(self):
        """elem (short format name), elem_bits, block_rows, block_cols, scale_kind, stochastic, hadamard,
        current_scaling, hadamard_signs (the transform's sign mask; 0: none)."""
        i = _capi.SpecInfo()
        _capi.call(self._lib.mxsim_spec_get_info, self._handle, ctypes.byref(i))
        return i

    @property
    def elem(self):
        """The element format's short name ('e2m1', 'e4m3', ...)."""
        return self.info.elem.decode()

    def describe(self):
        """The spec in words (QuantSpec::describe), e.g. 'e2m1 1x32 E8M0 even rne'."""
        buf = ctypes.create_string_buffer(256)
        _capi.call(self._lib.mxsim_spec_describe, self._handle, buf, len(buf))
        return buf.value.decode()

    def layout(self, groups, rows, cols, axis="cols"):
        """The storage layout (extents of codes and scales) of a quantized [groups, rows, cols] tensor
        with blocks along ``axis`` ('cols' / 'rows', as quantize's). Asked of the library once per
        shape (a spec never changes; the per-call cost of quantize is mostly such calls); treat the
        result as read-only."""
        key = (int(groups), int(rows), int(cols), _axis(axis))
        cache = self.__dict__.setdefault("_layouts", {})
        out = cache.get(key)
        if out is None:
            out = _capi.QLayout()
            _capi.call(self._lib.mxsim_quant_layout, self._handle, *key, ctypes.byref(out))
            if len(cache) < 256:
                cache[key] = out
        return out

    def __repr__(self):
        return f"Spec({self.describe()})"


class LinearRecipe:
    """How a linear layer's three GEMMs quantize their operands and how its weight gradient
    reaches main_grad: the simulator's recipes (docs/simulator.md "Recipes per linear": bf16,
    mxfp4, mxfp8, fp8_current (alias fp8_tensor), fp8_delayed, fp8_block), with recipe options
    (mxfp4_hadamard_wgrad, mxfp4_sr_grad, fp8_current_amax_epsilon, fp8_current_pow2_scale,
    fp8_block_amax_epsilon, fp8_block_pow2_scale). Raises ValueError for an unknown name or option.

    One recipe per GEMM (the simulator's recipe.<layer>_<gemm>, docs/config.md "Per-GEMM
    recipes"): ``fprop=``, ``dgrad=``, ``wgrad=`` name the recipe of that GEMM (default: ``name``),
    e.g. ``LinearRecipe("mxfp4", wgrad="mxfp8")`` or FP4 in fprop only with ``dgrad="bf16",
    wgrad="bf16"``; the trace's spelling "mxfp4,wgrad=mxfp8" is accepted as ``name`` too. Each GEMM
    quantizes both its operands by its own recipe; dgrad reuses fprop's quantized W only where
    the two W specs agree; wgrad's recipe decides how dW reaches main_grad; de-oscillation
    eligibility follows fprop. fp8_delayed is all three GEMMs or none (ValueError)."""

    ROLES = {"x_fprop": _capi.ROLE_X_FPROP, "w": _capi.ROLE_W, "dy_dgrad": _capi.ROLE_DY_DGRAD,
             "dy_wgrad": _capi.ROLE_DY_WGRAD, "x_wgrad": _capi.ROLE_X_WGRAD, "w_dgrad": _capi.ROLE_W_DGRAD}
    GEMMS = ("fprop", "dgrad", "wgrad")

    def __init__(self, name="mxfp4", *, fprop=None, dgrad=None, wgrad=None, **options):
        per_gemm = {"fprop": fprop, "dgrad": dgrad, "wgrad": wgrad}
        name = _linear_recipe_name(str(name), per_gemm)
        args = sorted((k, v) for k, v in options.items() if v is not None)
        lib = _capi.lib()
        handle = ctypes.c_void_p()
        _capi.call(lib.mxsim_linear_recipe_create, str(name).encode(), *_key_values(args), ctypes.byref(handle))
        self._handle, self._lib, self.options = handle, lib, dict(args)
        info = _capi.LinearRecipeInfo()
        _capi.call(lib.mxsim_linear_recipe_get_info, handle, ctypes.byref(info))
        self.name = info.name.decode()
        self.quantized = bool(info.quantized)  # any GEMM
        self.gemm_quantized = {g: bool(info.gemm_quantized[i]) for i, g in enumerate(self.GEMMS)}
        self.fused_wgrad_accum = bool(info.fused_wgrad_accum)
        self.transposed_cache_allowed = bool(info.transposed_cache_allowed)
        self.deosc_eligible = bool(info.deosc_eligible)
        self.dgrad_reuses_fprop_w = bool(info.dgrad_reuses_fprop_w)
        # core's rules (sim::LinearRecipe::weight_gemm / records): whose W the statistics follow, and
        # which operands (w, x, dy) have statistics
        self.weight_role = {-1: None, 0: "w", 1: "w_dgrad"}[info.weight_gemm]
        self.records = {r: bool(info.records[i]) for i, r in enumerate(("w", "x", "dy"))}
        # and which of them have a two-level scale (NVFP4), so the trace has their tensor_scale_inv
        self.two_level_scale = {r: bool(info.two_level_scale[i]) for i, r in enumerate(("w", "x", "dy"))}
        self.delayed_scaling = bool(info.delayed_scaling)
        self._specs = {}

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.mxsim_linear_recipe_destroy(self._handle)
            self._handle = None

    def spec(self, role):
        """The Spec of one operand: 'x_fprop', 'w' (W in fprop), 'w_dgrad' (W in dgrad), 'dy_dgrad',
        'dy_wgrad' or 'x_wgrad', by the recipe of the GEMM it feeds (ValueError where that GEMM
        runs in BF16)."""
        if role not in self._specs:
            if role not in self.ROLES:
                raise ValueError(f"LinearRecipe.spec: role must be one of {sorted(self.ROLES)}, not {role!r}")
            handle = ctypes.c_void_p()
            _capi.call(self._lib.mxsim_linear_recipe_spec, self._handle, self.ROLES[role], ctypes.byref(handle))
            self._specs[role] = Spec._adopt(handle)
        return self._specs[role]

    def delayed_state(self, role):
        """fp8_delayed's scale state of one operand role ('w', 'x' or 'dy'): a new DelayedScaling."""
        roles = {"w": _capi.ROLE_W, "x": _capi.ROLE_X_FPROP, "dy": _capi.ROLE_DY_DGRAD}
        if role not in roles:
            raise ValueError(f"LinearRecipe.delayed_state: role must be 'w', 'x' or 'dy', not {role!r}")
        handle = ctypes.c_void_p()
        _capi.call(self._lib.mxsim_linear_recipe_delayed_scaling, self._handle, roles[role], ctypes.byref(handle))
        return DelayedScaling(handle, self._lib)

    def __repr__(self):
        return f"LinearRecipe({self.name!r}{''.join(f', {k}={v!r}' for k, v in self.options.items())})"


def _linear_recipe_name(name, per_gemm):
    """The trace's spelling of a per-GEMM recipe, which core reads (parse_linear_recipe): fprop's
    recipe, then ",<gemm>=<recipe>" for dgrad and wgrad. name may be spelled so already; a GEMM
    given here replaces its part, and with fprop= the other GEMMs keep name's recipe."""
    head, *rest = name.split(",")
    parts = {}
    for r in rest:  # malformed parts pass through: core's parser refuses them in its words
        g, _, v = r.partition("=")
        parts.setdefault(g, v) if g in ("dgrad", "wgrad") else parts.setdefault(r, None)
    fprop = per_gemm.get("fprop")
    if fprop is not None and str(fprop) != head:
        for g in ("dgrad", "wgrad"):
            parts.setdefault(g, head)
        head = str(fprop)
    for g in ("dgrad", "wgrad"):
        if per_gemm.get(g) is not None:
            parts[g] = str(per_gemm[g])
    return ",".join([head] + [k if v is None else f"{k}={v}" for k, v in parts.items()])


class DelayedScaling:
    """TransformerEngine's delayed scaling of one operand (core/include/mxsim/delayed_scaling.hpp):
    record(amax) after each quantization of a step, update() at the step's end (scale =
    fp8_max / max(amax history) / 2^margin; 1 before the first update), spec(base) the base
    per-tensor spec with the current scale. Made by LinearRecipe.delayed_state."""

    def __init__(self, handle, lib):
        self._handle, self._lib = handle, lib

    def __del__(self):
        if getattr(self, "_handle", None):
            self._lib.mxsim_delayed_scaling_destroy(self._handle)
            self._handle = None

    # record() keeps at most this many tensors before reading them (memory stays bounded when a
    # step never ends, e.g. forward after forward with is_first_microbatch=False)
    _MAX_PENDING = 256

    def record(self, amax):
        """amax: a number, or a one-element tensor on any device, kept there until update() (no
        wait for the device per quantization: the history needs it only at the step's end).
        Raises ValueError for a tensor of more than one element."""
        torch = _torch()
        if not isinstance(amax, torch.Tensor):
            _capi.call(self._lib.mxsim_delayed_scaling_record, self._handle, float(amax))
            return
        if amax.numel() != 1:
            raise ValueError(f"DelayedScaling.record: amax must be one value, got a tensor of shape {list(amax.shape)}")
        pending = self.__dict__.setdefault("_pending", [])
        pending.append(amax.detach().reshape(()).float())
        if len(pending) >= self._MAX_PENDING:
            DelayedScaling.flush([self])

    @staticmethod
    def flush(states):
        """Records the tensors record() kept in each of ``states``, in their order, read in one
        copy to the host (one wait for the device for all of them)."""
        states = [d for d in states if d.__dict__.get("_pending")]
        if not states:
            return
        pending = [d.__dict__.pop("_pending") for d in states]
        flat = [p for ps in pending for p in ps]
        values = iter(_torch().stack([p.to(flat[0].device) for p in flat]).tolist())
        for d, ps in zip(states, pending):
            for _ in ps:
                _capi.call(d._lib.mxsim_delayed_scaling_record, d._handle, float(next(values)))

    def update(self):
        """End of a step: what record() kept is recorded, then the new scale and the history roll."""
        DelayedScaling.flush([self])
        _capi.call(self._lib.mxsim_delayed_scaling_update, self._handle)

    @property
    def scale(self):
        v = ctypes.c_float()
        _capi.call(self._lib.mxsim_delayed_scaling_scale, self._handle, ctypes.byref(v))
        return v.value

    def spec(self, base):
        handle = ctypes.c_void_p()
        _capi.call(self._lib.mxsim_delayed_scaling_spec, self._handle, base.handle, ctypes.byref(handle))
        return Spec._adopt(handle)


@functools.lru_cache(maxsize=256)
def _cached_spec(recipe, items):
    return Spec(recipe, **dict(items))


def spec(recipe=None, **kwargs):
    """A Spec, cached by its arguments (specs are immutable)."""
    if isinstance(recipe, Spec):
        if kwargs:
            raise ValueError("spec: keyword arguments with a Spec; pass a recipe name to override")
        return recipe
    return _cached_spec(recipe, tuple(sorted((k, v) for k, v in kwargs.items() if v is not None)))


def _axis(axis):
    if axis in (_capi.AXIS_COLS, _capi.AXIS_ROWS) and not isinstance(axis, bool):
        return axis  # the C interface's own value (internal callers)
    if axis in ("cols", "rowwise", -1):
        return _capi.AXIS_COLS
    if axis in ("rows", "columnwise", 0):
        return _capi.AXIS_ROWS
    raise ValueError(f"axis must be 'cols' / 'rowwise' / -1 or 'rows' / 'columnwise' / 0, not {axis!r}")


# ------------------------------------------------------------------ tensors across the C interface

@functools.lru_cache(maxsize=1)
def _dl_dtypes():
    """torch dtype -> the DLDataType mxsim reads it as."""
    torch = _torch()
    m = {torch.float32: (_capi.KDL_FLOAT, 32), torch.bfloat16: (_capi.KDL_BFLOAT, 16),
         torch.float16: (_capi.KDL_FLOAT, 16), torch.uint8: (_capi.KDL_UINT, 8), torch.int8: (_capi.KDL_INT, 8)}
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn_x2"):
        if hasattr(torch, name):  # torch >= 2.1 / 2.7: bytes to the library (it knows the spec)
            m[getattr(torch, name)] = (_capi.KDL_UINT, 8)
    return {k: _capi.DLDataType(code, bits, 1) for k, (code, bits) in m.items()}


_SHAPES = [ctypes.c_int64 * max(n, 1) for n in range(9)]  # the array types of ranks 0 .. 8


@functools.lru_cache(maxsize=64)
def _dl_device(kind, index):
    if kind == "cpu":
        return _capi.DLDevice(_capi.KDL_CPU, 0)
    return _capi.DLDevice(_capi.KDL_CUDA, index if index is not None else 0)


# Contiguous tensors' DLTensors by (dtype, device, shape): the struct's bytes, with its shape array
# kept here for good (so a copy's pointer to it stays valid), up to _DL_CACHE_MAX shapes. A call
# then copies the bytes and sets the data pointer: ~1 us instead of ~4 us of ctypes conversions.
_DL_CACHE = {}
_DL_CACHE_MAX = 4096


def _dl(t, what):
    """A DLTensor over t's memory (t must stay alive for the call). A contiguous tensor passes no
    strides (DLPack's NULL: row-major), others theirs, which the library checks."""
    key = (t.dtype, t.device, t.shape)
    hit = _DL_CACHE.get(key)
    if hit is not None and t.is_contiguous():
        d = _capi.DLTensor.from_buffer_copy(hit[0])
        d.data = t.data_ptr()
        return d
    d, shape = _dl_make(t, what)
    if t.is_contiguous() and len(_DL_CACHE) < _DL_CACHE_MAX:  # no strides: reusable for the shape
        _DL_CACHE[key] = (bytes(d), shape)
    return d


def _dl_make(t, what):
    """_dl's struct made field by field, and the shape array it points to."""
    dt = _dl_dtypes().get(t.dtype)
    if dt is None:
        raise TypeError(f"{what}: dtype {t.dtype} is not one mxsim reads (float32, bfloat16, float16, uint8, float8)")
    dev = t.device
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{what} is on {dev}; mxsim runs CPU and CUDA tensors")
    n = t.dim()
    if n >= len(_SHAPES):
        raise ValueError(f"{what} has rank {n}; mxsim takes tensors of rank 2 or 3")
    strides = None if t.is_contiguous() else _SHAPES[n](*t.stride())
    shape = _SHAPES[n](*t.shape)
    return _capi.DLTensor(t.data_ptr(), _dl_device(dev.type, dev.index), n, dt, shape, strides, 0), shape


def _stream(t):
    """torch's current stream on t's device as a void* (None for CPU tensors)."""
    if t.device.type != "cuda":
        return None
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # torch >= 1.10: no Stream object made
    if raw is not None:
        return ctypes.c_void_p(raw(t.device.index if t.device.index is not None else torch.cuda.current_device()))
    return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)


_TYPED = {0: "float8_e8m0fnu", 2: "float8_e4m3fn"}  # byte scales by mxsim_scale_kind
_TYPED_CODES = {"e2m1": "float4_e2m1fn_x2", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}  # FP6: uint8


class QuantizedTensor:
    """Codes and block scales of one tensor in torch memory (mxsim's storage layout, which for
    rowwise MX is torchao MXTensor's: ``qdata`` [..., rows, cols / 2] float4_e2m1fn_x2 (two codes
    per byte, the even element in the low nibble) or [..., rows, cols] float8, ``scale`` [...,
    rows, cols / 32] float8_e8m0fnu; FP8 recipes: ``scale`` float32 scale_inv per block).
    Columnwise tensors (axis='rows', TransformerEngine's columnwise data) store each group's
    transpose: ``qdata`` [..., cols, rows(/2)]. Where the torch version lacks a dtype, the views
    are uint8. ``shape`` is the logical shape of the source, ``spec`` its Spec."""

    def __init__(self, data, scale, tensor_scale, spec_, layout, shape):
        self._data, self._scale, self.tensor_scale = data, scale, tensor_scale
        self.spec, self.layout, self.shape = spec_, layout, tuple(shape)

    @property
    def transposed(self):
        return bool(self.layout.transposed)

    @property
    def device(self):
        return self._data.device

    @property
    def qdata(self):
        torch = _torch()
        name = _TYPED_CODES.get(self.spec.elem)
        return self._data.view(getattr(torch, name)) if name and hasattr(torch, name) else self._data

    @property
    def scale(self):
        torch = _torch()
        name = _TYPED.get(self.layout.scale_kind)
        return self._scale.view(getattr(torch, name)) if name and hasattr(torch, name) else self._scale

    def to(self, device):
        """A copy on another device (codes, scales and tensor scale; the spec is shared)."""
        ts = None if self.tensor_scale is None else self.tensor_scale.to(device)
        return QuantizedTensor(self._data.to(device), self._scale.to(device), ts, self.spec, self.layout, self.shape)

    def cpu(self):
        return self.to("cpu")

    def _c(self):
        """The C interface's mxsim_qtensor over this tensor's memory, made once (the tensor's buffers
        and spec never change; the struct's pointers stay valid while this object holds them)."""
        c = self.__dict__.get("_cq")
        if c is None:
            c = self.__dict__["_cq"] = self._make_c()
        return c

    def _make_c(self):
        q = _capi.QTensor()
        q.spec = self.spec.handle
        q.layout = self.layout
        q.data = _dl(self._data, "codes")
        q.scale = _dl(self._scale, "scales")
        if self.tensor_scale is not None:
            ts = _dl(self.tensor_scale, "tensor_scale")
            q.tensor_scale = ctypes.pointer(ts)
        return q

    def __repr__(self):
        return (f"mxsim.torch.QuantizedTensor(shape={list(self.shape)}, {self.spec.describe()}"
                f"{', columnwise' if self.transposed else ''}, device={self.device})")


def _alloc(s, lay, shape, device, lead):
    """An unfilled QuantizedTensor of layout lay, its buffers allocated by torch on device."""
    torch = _torch()
    data = torch.empty(lead + (lay.srows, lay.row_bytes), dtype=torch.uint8, device=device)
    sdt = torch.float32 if lay.scale_kind == _capi.SCALE_FP32 else torch.uint8
    scale = torch.empty(lead + (lay.scale_rows, lay.scale_cols), dtype=sdt, device=device)
    ts = torch.empty(1, dtype=torch.float32, device=device) if lay.has_tensor_scale else None
    return QuantizedTensor(data, scale, ts, s, lay, shape)


def _lead(shape):
    """[groups, rows, cols] of a 2-D or 3-D shape."""
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    if len(shape) == 3:
        return tuple(shape)
    raise ValueError(f"expected a 2-D [rows, cols] or 3-D [groups, rows, cols] tensor, got shape {list(shape)}")


# ------------------------------------------------------------------ ops

def quantize(x, recipe=None, *, axis="cols", spec=None, layout="torchao", **spec_kwargs):
    """Quantize x (float32, bfloat16 or float16; [rows, cols] or [groups, rows, cols]; CPU or CUDA)
    by a recipe name and / or torchao-style keywords (see Spec), or a given ``spec``, with 1-D blocks
    along ``axis`` ('cols' / rowwise: the last axis; 'rows' / columnwise: down the columns, stored
    transposed). The same bytes as ``mxsim.quantize`` and ``mxsim quantize``. Returns a
    QuantizedTensor on x's device. Raises ValueError for a spec the shape cannot take, naming it.
    On CUDA a bfloat16 / float16 x is widened on the device first (exact).
    layout="te": the result in TransformerEngine's storage instead (peers.to_te: MXFP8Tensor's
    padded scale_inv, columnwise data untransposed; Float8Tensor's _data / _scale_inv)."""
    if layout not in ("torchao", "te"):
        raise ValueError(f"quantize: layout must be 'torchao' or 'te', not {layout!r}")
    s = _spec_of(recipe, spec, spec_kwargs)
    ax = _axis(axis)
    g, r, c = _lead(x.shape)
    q = _alloc(s, s.layout(g, r, c, ax), x.shape, x.device, lead=() if x.dim() == 2 else (g,))
    cq = q._c()
    _capi.call(s._lib.mxsim_quantize, ctypes.byref(_dl(x, "x")), s.handle, ax, ctypes.byref(cq), _stream(x))
    if layout == "te":
        from .peers import to_te
        return to_te(q)
    return q


def quantize_grouped_colwise(x, m_splits, recipe=None, *, spec=None, **spec_kwargs):
    """The wgrad operands of x [M, C] (float32, bfloat16 or float16; CPU or CUDA):
    the m_splits row slices, each quantized on its own down its columns (axis='rows', stored
    transposed), so no block crosses a group; stochastic rounding draws the words of each
    element's index in the whole tensor, as the simulator and the command line do. Returns one
    QuantizedTensor per group (an empty group: rows = 0), on x's device."""
    s = _spec_of(recipe, spec, spec_kwargs)
    if x.dim() != 2:
        raise ValueError(f"quantize_grouped_colwise: x must be 2-D [M, C], got shape {list(x.shape)}")
    splits = [int(m) for m in m_splits]  # checked by the library (core's m_splits rule)
    out = []
    for m in splits:
        lay = s.layout(1, m, x.shape[1], _capi.AXIS_ROWS)
        out.append(_alloc(s, lay, (m, x.shape[1]), x.device, lead=()))
    cq = (_capi.QTensor * max(len(out), 1))(*[q._c() for q in out])
    ms = (ctypes.c_int64 * max(len(splits), 1))(*splits)
    _capi.call(s._lib.mxsim_quantize_grouped_colwise, ctypes.byref(_dl(x, "x")), ms, len(splits), s.handle, cq,
               _stream(x))
    return out


def dequantize(q, out_dtype=None):
    """The exact values of q (float32; bfloat16 rounds each once, RNE), shaped as q's source."""
    torch = _torch()
    dt = out_dtype or torch.float32
    narrow = dt == torch.bfloat16 and q.device.type == "cuda"  # the GPU writes float32
    out = torch.empty(q.shape, dtype=torch.float32 if narrow else dt, device=q.device)
    cq = q._c()
    _capi.call(q.spec._lib.mxsim_dequantize, ctypes.byref(cq), ctypes.byref(_dl(out, "out")), _stream(out))
    return out.bfloat16() if narrow else out


def _stats_operands(x, q):
    # CUDA: statistics are not computed on the device yet; x and q are copied to the host (the one
    # host copy of mxsim.torch, docs/torch.md).
    if x.device.type == "cuda" or q.device.type == "cuda":
        x, q = x.cpu(), q.cpu()
    return x, q


def quant_stats(x, q):
    """Error statistics of q against its source x (docs/numerics.md §4.6): a dict of count,
    nonfinite_in, nan_out, underflow, saturated, mse, max_abs_err, signal_power, sqnr_db, mean_err
    (mean of d - x: the bias), rounded, rounded_up, expected_up (the rounding choices: elements
    between two grid values, how many took the upper one, the sum of their stochastic-rounding
    probabilities of it; E8M0 / UE4M3 scales) and tensor_scale_inv (the FP32 per-tensor decode scale
    of a two-level scale, NVFP4's S_dec, copied; 1 for one-level scales) (the NumPy API's numbers).
    CUDA tensors are copied to the host."""
    x, q = _stats_operands(x, q)
    out = _capi.QStats()
    cq = q._c()
    _capi.call(q.spec._lib.mxsim_quant_stats, ctypes.byref(_dl(x, "x")), ctypes.byref(cq), ctypes.byref(out))
    return {name: getattr(out, name) for name, _ in _capi.QStats._fields_}


def scale_exp_histogram(q):
    """The histogram of q's block scale exponents (the trace's scale_exp_hist; core's
    ScaleExpCounts): int64 tensor [256] on the CPU, bin 127 + e counting the blocks of scale
    exponent e (clamped to [-127, 127]; FP32 and UE4M3 scales: floor(log2 of the block's decode
    scale)), NaN scales in bin 255. On CUDA only the scales are copied to the host (one per block),
    after the current stream's work."""
    torch = _torch()
    out = (ctypes.c_uint64 * 256)()
    cq = q._c()
    _capi.call(q.spec._lib.mxsim_scale_exp_histogram, ctypes.byref(cq), _stream(q.qdata), out)
    return torch.tensor(list(out), dtype=torch.int64)


def block_stats(x, q):
    """Per-block statistics in storage order (group, block row, block column): a dict of tensors
    amax (float32), scale_exp (int32; INT32_MIN for a NaN scale), sq_err, sq_src (float64),
    count, saturated, underflow (int64). CUDA tensors are copied to the host."""
    torch = _torch()
    x, q = _stats_operands(x, q)
    n = q.layout.groups * q.layout.scale_rows * q.layout.scale_cols
    out = (_capi.BlockStat * max(n, 1))()
    cq = q._c()
    _capi.call(q.spec._lib.mxsim_block_stats, ctypes.byref(_dl(x, "x")), ctypes.byref(cq), out, n)
    dtypes = {"amax": torch.float32, "scale_exp": torch.int32, "sq_err": torch.float64, "sq_src": torch.float64,
              "count": torch.int64, "saturated": torch.int64, "underflow": torch.int64}
    return {k: torch.tensor([getattr(out[i], k) for i in range(n)], dtype=dt) for k, dt in dtypes.items()}


_FORMS = {"fprop": _capi.FPROP, "dgrad": _capi.DGRAD, "wgrad": _capi.WGRAD}


def grouped_gemm(a, b, m_splits, *, form="fprop", out=None, out_dtype=None, accumulate=False):
    """The grouped GEMM of docs/numerics.md §5 with TransformerEngine's m_splits:

      fprop  out[M, N] = a[M, K] . b[g][N, K]^T     a quantized along K, b [G, N, K] rowwise or 2-D
      dgrad  out[M, K] = a[M, N] . b[g][N, K]       a along N, b quantized along N (columnwise) or 2-D
      wgrad  out[g][N, K] (+)= a[g]^T . b[g]        a, b: one operand per group (quantize_grouped_colwise)

    Operands are QuantizedTensors of one contract class (mx-exact, mx-f13, fp8-chunk128) or BF16
    tensors (bfloat16; float32 values are rounded to BF16 first on the CPU), all on one device.
    out_dtype float32 (default) or bfloat16 (the FP32 accumulator rounded once, RNE). ``out``: a
    given output (float32 for accumulate: the FP32 main_grad a wgrad adds into in place; wgrad's
    groups without tokens then keep their values). Every tensor must be contiguous (ValueError
    otherwise: mxsim reads storage in place). On CUDA a given ``out`` must be float32 (a bfloat16
    result is computed in float32, rounded once and narrowed exactly) and BF16 operands bfloat16.
    Returns out. Raises ValueError naming the operand for shapes, m_splits, axes or pairs the
    contract does not define."""
    torch = _torch()
    f = _FORMS.get(form)
    if f is None:
        raise ValueError(f"grouped_gemm: form must be 'fprop', 'dgrad' or 'wgrad', not {form!r}")
    splits = [int(m) for m in m_splits]
    wgrad = f == _capi.WGRAD
    A = list(a) if wgrad else [a]
    B = list(b) if wgrad else [b]
    keep = []  # the ctypes structs the call points into
    if wgrad:
        ca = (_capi.GemmOperand * max(len(A), 1))(*[_operand(o, f"a[{i}]", keep) for i, o in enumerate(A)])
        cb = (_capi.GemmOperand * max(len(B), 1))(*[_operand(o, f"b[{i}]", keep) for i, o in enumerate(B)])
    else:  # one operand a side: passed by reference, no array
        ca, cb = ctypes.byref(_operand(a, "a", keep)), ctypes.byref(_operand(b, "b", keep))
    device = _device_of(A + B)
    # The GPU writes float32 (bfloat16 output: its values rounded once, then narrowed exactly here).
    narrow = out is None and out_dtype == torch.bfloat16 and device.type == "cuda"
    ms = (ctypes.c_int64 * max(len(splits), 1))(*splits)
    lib = _capi.lib()
    if out is None:
        dt = torch.float32 if narrow else (out_dtype or torch.float32)
        out = torch.empty(_out_shape(f, A, B, splits, ca, cb, ms), dtype=dt, device=device)
    elif out_dtype is not None and out.dtype != out_dtype:
        raise ValueError(f"grouped_gemm: out is {out.dtype} but out_dtype is {out_dtype}")
    _capi.call(lib.mxsim_grouped_gemm, f, ca, len(A), cb, len(B), ms, len(splits), ctypes.byref(_dl(out, "out")),
               int(narrow), int(bool(accumulate)), _stream(out))
    return out.bfloat16() if narrow else out


def _operand(o, what, keep):
    """grouped_gemm's mxsim_gemm_operand of o (a QuantizedTensor's is made once and kept by it)."""
    if isinstance(o, QuantizedTensor):
        op = o.__dict__.get("_cop")
        if op is None:
            op = o.__dict__["_cop"] = _capi.GemmOperand(ctypes.pointer(o._c()), None)
        return op
    if not hasattr(o, "data_ptr"):
        raise TypeError(f"grouped_gemm: {what} must be a QuantizedTensor or a torch tensor, got {type(o).__name__}")
    d = _dl(o, what)
    keep.append((o, d))
    return _capi.GemmOperand(None, ctypes.pointer(d))


def _out_shape(f, A, B, splits, ca, cb, ms):
    """grouped_gemm's output shape: fprop [M, N], dgrad [M, K], wgrad [G, N, K] from the operands'
    logical shapes (the library checks it against its plan, which refuses bad operands first, in
    its own words; tests/python/test_torch_ops.py checks the two agree). Where the operands give
    no such shape (empty wgrad, an unexpected rank), the library's plan is asked."""
    try:
        if f == _capi.WGRAD:
            if A and B:
                return (len(splits), int(A[0].shape[-1]), int(B[0].shape[-1]))
        elif len(A[0].shape) == 2 and len(B[0].shape) in (2, 3):
            return (int(A[0].shape[0]), int(B[0].shape[-2] if f == _capi.FPROP else B[0].shape[-1]))
    except (AttributeError, IndexError, TypeError):
        pass
    shape, ndim = (ctypes.c_int64 * 3)(), ctypes.c_int32()
    _capi.call(_capi.lib().mxsim_grouped_gemm_out_shape, f, ca, len(A), cb, len(B), ms, len(splits), shape,
               ctypes.byref(ndim))
    return tuple(shape[:ndim.value])


def _device_of(ops):
    for o in ops:
        return o.device
    return _torch().device("cpu")


def _spec_of(recipe, given, kwargs):
    if given is not None:
        if recipe is not None or kwargs:
            raise ValueError("pass either spec= or a recipe and keywords, not both")
        return given if isinstance(given, Spec) else spec(given)
    return spec(recipe, **kwargs)
