"""The peer libraries' quantized tensors as mxsim QuantizedTensors, read by their attributes
(neither torchao nor TransformerEngine is imported). The layouts are those of
core/include/mxsim/layouts.hpp (with the source files of each library named there); where a
peer's layout is mxsim's the result shares the peer's memory, otherwise the bytes are rearranged
by torch indexing on the tensor's device (padding cut off, columnwise data transposed): exact
copies, never a host round trip. Layouts not read yet raise ValueError saying so."""
from . import QuantizedTensor, _capi, _torch, spec

__all__ = ["from_torchao", "from_te", "to_te", "TEQuantized"]


def _u8(t):
    torch = _torch()
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def _elem_of(t, *names):
    """The element format of a peer tensor: its float8 / float4 dtype, or an attribute naming it."""
    torch = _torch()
    for n in names:
        v = getattr(t, n, None)
        if v is not None:
            s = str(v)
            for key, fmt in (("e2m1", "e2m1"), ("float4", "e2m1"), ("e4m3", "e4m3"), ("E4M3", "e4m3"),
                             ("e5m2", "e5m2"), ("E5M2", "e5m2")):
                if key in s:
                    return fmt
    q = getattr(t, "qdata", None)
    if q is not None:
        for dt, fmt in (("float4_e2m1fn_x2", "e2m1"), ("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2")):
            if hasattr(torch, dt) and q.dtype == getattr(torch, dt):
                return fmt
    raise ValueError(f"{type(t).__name__}: cannot tell its element format (no float8 / float4 dtype and none of "
                     f"the attributes {', '.join(names)})")


def _lead3(shape):
    if len(shape) == 2:
        return (1,) + tuple(shape), ()
    if len(shape) == 3:
        return tuple(shape), (shape[0],)
    raise ValueError(f"expected 2-D or 3-D data, got shape {list(shape)}")


def _make(s, data, scale, tensor_scale, shape, axis, what):
    """A QuantizedTensor over the given buffers, checked against the spec's layout."""
    (g, r, c), lead = _lead3(shape)
    lay = s.layout(g, r, c, axis)
    want_d = lead + (lay.srows, lay.row_bytes)
    want_s = lead + (lay.scale_rows, lay.scale_cols)
    if tuple(data.shape) != want_d or tuple(scale.shape) != want_s:
        raise ValueError(f"{what}: data {list(data.shape)} and scale {list(scale.shape)} are not the layout of "
                         f"{s.describe()} for shape {list(shape)} (data {list(want_d)}, scale {list(want_s)})")
    return QuantizedTensor(data.contiguous(), scale.contiguous(), tensor_scale, s, lay, shape)


def from_torchao(t):
    """A torchao quantized tensor as a QuantizedTensor: MXTensor (qdata, scale, block_size;
    unswizzled scales), Float8Tensor (qdata, scale, block_size: per tensor, per row, 1 x 128 or
    128 x 128 blocks), Float8TrainingTensor (_data, _scale: tensorwise or rowwise axiswise; values
    code / _scale). Raises ValueError for a layout it does not read (swizzled MX scales, NVFP4Tensor,
    columnwise axiswise scales), naming it."""
    torch = _torch()
    name = type(t).__name__
    if name == "MXTensor" or (hasattr(t, "qdata") and hasattr(t, "scale") and hasattr(t, "block_size")
                              and getattr(t, "elem_dtype", None) is not None):
        if getattr(t, "_is_swizzled_scales", False) or getattr(t, "is_swizzled_scales", False):
            raise ValueError("from_torchao: an MXTensor with swizzled (blocked) scales is not read yet; "
                             "use mxsim.from_torchao(..., blocked_scales=True) on host arrays")
        elem = _elem_of(t, "elem_dtype", "_elem_dtype")
        qd = _u8(t.qdata)
        K = qd.shape[-1] * (2 if elem == "e2m1" else 1)
        s = spec(elem_dtype=elem, block_size=int(t.block_size))
        return _make(s, qd, _u8(t.scale), None, tuple(qd.shape[:-1]) + (K,), _capi.AXIS_COLS, "from_torchao(MXTensor)")
    if name == "NVFP4Tensor":  # torchao nvfp4_tensor.py: qdata [..., K/2], _scale_e4m3 [..., K/16]
        if getattr(t, "_is_swizzled_scales", False):
            raise ValueError("from_torchao: an NVFP4Tensor with swizzled scales is not read yet; use "
                             "mxsim.from_torchao_nvfp4(..., blocked_scales=True) on host arrays")
        qd = _u8(t.qdata)
        shape = tuple(qd.shape[:-1]) + (qd.shape[-1] * 2,)
        sc = _u8(t._scale_e4m3)
        want = tuple(qd.shape[:-1]) + ((shape[-1] + 15) // 16,)
        if sc.numel() == _prod(want):  # the same bytes, flattened as torchao's slicing may leave them
            sc = sc.reshape(want)
        pts = getattr(t, "_per_tensor_scale", None)  # the decode scale itself (per_tensor_amax_to_scale)
        ts = pts.float().reshape(1) if pts is not None else torch.ones(1, device=qd.device)
        return _make(spec("nvfp4"), qd, sc, ts.contiguous(), shape, _capi.AXIS_COLS, "from_torchao(NVFP4Tensor)")
    if name == "Float8TrainingTensor" or hasattr(t, "_data") and hasattr(t, "_scale"):
        elem = _elem_of(t, "_data_dtype") if t._data.dtype == torch.uint8 else \
            ("e4m3" if "e4m3" in str(t._data.dtype) else "e5m2")
        data, sc = _u8(t._data), t._scale.float()
        shape = tuple(data.shape)
        if sc.numel() == 1:
            s = spec("fp8_tensor", elem_dtype=elem, scale_convention="torchao_training")
            sc = sc.reshape(_lead3(shape)[1] + (1, 1)) if len(shape) == 2 else sc.reshape(1, 1, 1).expand(
                shape[0], 1, 1)
        elif sc.shape[-1] == 1 and tuple(sc.shape[:-1]) == shape[:-1]:
            s = spec("fp8_row", elem_dtype=elem, scale_convention="torchao_training")
        else:
            raise ValueError(f"from_torchao(Float8TrainingTensor): _scale {list(sc.shape)} of data {list(shape)}: "
                             "only tensorwise and rowwise (axiswise_dim -1) scales are read by mxsim.torch yet")
        return _make(s, data, sc, None, shape, _capi.AXIS_COLS, "from_torchao(Float8TrainingTensor)")
    if name == "Float8Tensor" or hasattr(t, "qdata") and hasattr(t, "scale"):
        elem = _elem_of(t, "_elem_dtype", "float8_dtype")
        data, sc = _u8(t.qdata), t.scale.float()
        shape = tuple(data.shape)
        (g, r, c), lead = _lead3(shape)
        if sc.numel() == 1:
            s = spec("fp8_tensor", elem_dtype=elem, scale_convention="torchao")
            sc = sc.reshape(1, 1, 1).expand(g, 1, 1) if lead else sc.reshape(1, 1)
        elif sc.shape[-1] == 1 and tuple(sc.shape[:-1]) == shape[:-1]:
            s = spec("fp8_row", elem_dtype=elem, scale_convention="torchao")
        elif sc.shape[-2] == r and sc.shape[-1] * 128 == c:
            s = spec("fp8_block", elem_dtype=elem, scale_convention="torchao")
        elif sc.shape[-2] * 128 == r and sc.shape[-1] * 128 == c:
            s = spec("fp8_block2d", elem_dtype=elem, scale_convention="torchao")
        else:
            raise ValueError(f"from_torchao(Float8Tensor): scale {list(sc.shape)} of qdata {list(shape)} is none of "
                             "per tensor, per row, 1 x 128 or 128 x 128 blocks")
        return _make(s, data, sc, None, shape, _capi.AXIS_COLS, "from_torchao(Float8Tensor)")
    raise ValueError(f"from_torchao: {name} is not a torchao quantized tensor mxsim reads "
                     "(MXTensor, Float8Tensor, Float8TrainingTensor)")


def _roundup(a, b):
    return (a + b - 1) // b * b


def _prod(shape):
    n = 1
    for v in shape:
        n *= int(v)
    return n


def _from_te_fp8_blockwise(t, columnwise):
    """TE's Float8BlockwiseQTensor (float8_blockwise_tensor.py; layouts.hpp): FP32 scale_inv of
    blocks of 128. 1 x 128 (``_is_2D_scaled`` false): rowwise data [M, K] with scale_inv
    [ceil(K/128), roundup(M, 4)] (row m's block kb at [kb, m]); columnwise data [K, M] (the
    transpose) with [ceil(M/128), roundup(K, 4)]. 128 x 128 tiles: rowwise scale_inv
    [ceil(M/128), roundup(ceil(K/128), 4)]; the columnwise tiles are not read yet."""
    elem = _elem_of(t, "_fp8_dtype")
    two_d = bool(getattr(t, "_is_2D_scaled", False))
    side = "columnwise" if columnwise else "rowwise"
    data, sc = getattr(t, f"_{side}_data", None), getattr(t, f"_{side}_scale_inv", None)
    if data is None or sc is None:
        raise ValueError(f"from_te(Float8BlockwiseQTensor): no {side} data or scale_inv")
    if two_d and columnwise:
        raise ValueError("from_te(Float8BlockwiseQTensor): columnwise 128 x 128 tiles are not read yet; use the "
                         "rowwise copy (the same tiles of the same values)")
    data, sc = _u8(data), sc.float()
    R, C = data.reshape(-1, data.shape[-1]).shape  # rowwise [M, K]; columnwise [K, M]
    nb = lambda n: (n + 127) // 128
    want = (nb(R), _roundup(nb(C), 4)) if two_d else (nb(C), _roundup(R, 4))
    if tuple(sc.shape) != want:
        raise ValueError(f"from_te(Float8BlockwiseQTensor): {side} scale_inv {list(sc.shape)}, TE lays [{R}, {C}] "
                         f"data's out as {list(want)}")
    if two_d:
        return _make(spec("fp8_block2d", elem_dtype=elem), data.reshape(R, C), sc[:, :nb(C)], None, (R, C),
                     _capi.AXIS_COLS, "from_te(Float8BlockwiseQTensor)")
    s = spec("fp8_block", elem_dtype=elem)
    scales = sc[:, :R].t()  # mxsim: [rows of the storage, blocks along them]
    if not columnwise:
        return _make(s, data.reshape(R, C), scales, None, (R, C), _capi.AXIS_COLS, "from_te(Float8BlockwiseQTensor)")
    # columnwise: TE's [K, M] transpose is mxsim's columnwise storage of the logical [M, K] tensor
    return _make(s, data.reshape(R, C), scales, None, (C, R), _capi.AXIS_ROWS, "from_te(Float8BlockwiseQTensor)")


def _from_te_nvfp4(t, columnwise):
    """TE's NVFP4Tensor (nvfp4_tensor.py): rowwise data [M, K/2], E4M3 scale_inv padded to
    [roundup(M, 128), roundup(K/16, 4)], _amax_rowwise; columnwise data [K, M/2] (the transpose),
    scale_inv [roundup(K, 128), roundup(M/16, 4)], _amax_columnwise. The decode tensor scale is
    S_dec of the amax (docs/numerics.md §3.3; one scalar read)."""
    import ctypes
    if getattr(t, "_with_gemm_swizzled_scales", False):
        raise ValueError("from_te(NVFP4Tensor): GEMM-swizzled scales are not read yet; use mxsim.from_te_nvfp4 "
                         "on host arrays")
    side = "columnwise" if columnwise else "rowwise"
    data, sc, amax = (getattr(t, f"_{side}_data", None), getattr(t, f"_{side}_scale_inv", None),
                      getattr(t, f"_amax_{side}", None))
    if data is None or sc is None or amax is None:
        raise ValueError(f"from_te(NVFP4Tensor): no {side} data, scale_inv or amax")
    data, sc = _u8(data), _u8(sc)
    R, half = data.reshape(-1, data.shape[-1]).shape  # rowwise [M, K/2]; columnwise [K, M/2]
    C = half * 2
    want = (_roundup(R, 128), _roundup((C + 15) // 16, 4))
    if tuple(sc.shape) != want:
        raise ValueError(f"from_te(NVFP4Tensor): {side} scale_inv {list(sc.shape)}, TE pads [{R}, {C}] data's to "
                         f"{list(want)}")
    s_dec = ctypes.c_float()
    _capi.call(_capi.lib().mxsim_nvfp4_decode_scale, float(amax.float().reshape(-1)[0].item()), ctypes.byref(s_dec))
    torch = _torch()
    ts = torch.tensor([s_dec.value], dtype=torch.float32, device=data.device)
    s = spec("nvfp4")
    if not columnwise:
        return _make(s, data.reshape(R, half), sc[:R, :(C + 15) // 16], ts, (R, C), _capi.AXIS_COLS,
                     "from_te(NVFP4Tensor)")
    # TE's columnwise copy is the transpose [K, M/2], blocks of 16 along M: mxsim's columnwise storage
    # of the logical [M, K] tensor is exactly that (stored transposed)
    return _make(s, data.reshape(R, half), sc[:R, :(C + 15) // 16], ts, (C, R), _capi.AXIS_ROWS,
                 "from_te(NVFP4Tensor)")


def from_te(t, columnwise=False):
    """A TransformerEngine quantized tensor as a QuantizedTensor: Float8Tensor (_data,
    _scale_inv, _fp8_dtype) and MXFP8Tensor (rowwise or, with columnwise=True, columnwise data and
    E8M0 scale_inv with TE's 128 x 4 / 4 x 128 padding, which is checked and cut off). Raises
    ValueError naming what is missing or not read yet (NVFP4Tensor, Float8BlockwiseQTensor)."""
    name = type(t).__name__
    if name == "Float8BlockwiseQTensor":
        return _from_te_fp8_blockwise(t, columnwise)
    if name == "NVFP4Tensor":
        return _from_te_nvfp4(t, columnwise)
    elem = _elem_of(t, "_fp8_dtype")
    if hasattr(t, "_rowwise_data") or hasattr(t, "_columnwise_data"):  # MXFP8Tensor
        side = "columnwise" if columnwise else "rowwise"
        data, sc = getattr(t, f"_{side}_data", None), getattr(t, f"_{side}_scale_inv", None)
        if data is None or sc is None:
            raise ValueError(f"from_te(MXFP8Tensor): no {side} data or scale_inv (quantized without usage {side})")
        data, sc = _u8(data), _u8(sc)
        M, K = data.reshape(-1, data.shape[-1]).shape
        s = spec("mxfp8", elem_dtype=elem)
        if not columnwise:
            want = (_roundup(M, 128), _roundup((K + 31) // 32, 4))
            if tuple(sc.shape) != want:
                raise ValueError(f"from_te(MXFP8Tensor): rowwise scale_inv {list(sc.shape)}, TE pads [{M}, {K}] "
                                 f"data's to {list(want)}")
            return _make(s, data.reshape(M, K), sc[:M, :(K + 31) // 32], None, (M, K), _capi.AXIS_COLS,
                         "from_te(MXFP8Tensor)")
        want = (_roundup((M + 31) // 32, 4), _roundup(K, 128))
        if tuple(sc.shape) != want:
            raise ValueError(f"from_te(MXFP8Tensor): columnwise scale_inv {list(sc.shape)}, TE pads [{M}, {K}] "
                             f"data's to {list(want)}")
        # mxsim stores columnwise blocks transposed: codes [K, M], scales [K, ceil(M / 32)]
        return _make(s, data.reshape(M, K).t(), sc[:(M + 31) // 32, :K].t(), None, (M, K), _capi.AXIS_ROWS,
                     "from_te(MXFP8Tensor)")
    if hasattr(t, "_data") and hasattr(t, "_scale_inv"):  # Float8Tensor
        data = _u8(t._data)
        M, K = data.reshape(-1, data.shape[-1]).shape
        s = spec("fp8_tensor", elem_dtype=elem)
        return _make(s, data.reshape(M, K), t._scale_inv.float().reshape(1, 1), None, (M, K), _capi.AXIS_COLS,
                     "from_te(Float8Tensor)")
    raise ValueError(f"from_te: {name} is not a TransformerEngine quantized tensor mxsim reads "
                     "(Float8Tensor, MXFP8Tensor)")


class TEQuantized:
    """mxsim's bytes in TransformerEngine's storage: the attribute names of TE's MXFP8Tensor
    (``_rowwise_data``, ``_rowwise_scale_inv`` or ``_columnwise_data``, ``_columnwise_scale_inv``;
    E8M0 scale_inv padded to TE's 128 x 4 / 4 x 128, padding 0) or Float8Tensor (``_data``,
    ``_scale_inv``), and ``_fp8_dtype`` ('e4m3' / 'e5m2'). ``from_te`` reads it back."""

    def __repr__(self):
        names = [n for n in vars(self) if n.startswith("_") and not n.startswith("__")]
        return f"TEQuantized({', '.join(names)})"


def to_te(q):
    """q (an MXFP8 1 x 32 tensor, either axis, or a per-tensor FP8 one; 2-D) in TE's layout, on q's
    device (padding and transposition done by torch: exact copies)."""
    torch = _torch()
    info = q.spec.info
    if len(q.shape) != 2:
        raise ValueError(f"to_te: TE's tensors are 2-D; q has shape {list(q.shape)}")
    M, K = q.shape
    t = TEQuantized()
    t._fp8_dtype = q.spec.elem
    if info.scale_kind == _capi.SCALE_E8M0 and info.block_rows == 1 and info.block_cols == 32 and q.spec.elem in (
            "e4m3", "e5m2"):
        nb = lambda n: (n + 31) // 32
        if not q.transposed:
            sc = torch.zeros(_roundup(M, 128), _roundup(nb(K), 4), dtype=torch.uint8, device=q.device)
            sc[:M, :nb(K)] = q._scale
            t._rowwise_data, t._rowwise_scale_inv = q._data, sc
        else:  # mxsim stores columnwise blocks transposed; TE keeps the data [M, K] with scales [M / 32, K]
            sc = torch.zeros(_roundup(nb(M), 4), _roundup(K, 128), dtype=torch.uint8, device=q.device)
            sc[:nb(M), :K] = q._scale.t()
            t._columnwise_data, t._columnwise_scale_inv = q._data.t().contiguous(), sc
        return t
    if info.scale_kind == _capi.SCALE_FP32 and info.block_rows == 0 and info.block_cols == 0:
        t._data, t._scale_inv = q._data, q._scale.reshape(1)
        return t
    raise ValueError(f"to_te: {q.spec.describe()} has no TransformerEngine tensor mxsim writes "
                     "(MXFP8 1 x 32, FP8 per tensor)")
