"""Bit-level checks of a user's kernels against mxsim's: ``assert_same``, ``check_quantize``,
``check_grouped_gemm``.

A kernel (torchao's ``to_mx`` on CUDA, a Triton or HIP quantizer, Primus-Turbo's grouped GEMM)
and mxsim run on the same device tensors at real size; the check compares bits, never a
tolerance, and reports what differs: how many elements, the first index, the largest distance
in units in the last place (ULP: the distance of the two values in the format's ordered code
space; 0 for equal bits, inf where only one is NaN). On a mismatch it writes the smallest failing
piece with its inputs to a ``.safetensors`` file that the command line replays on the CPU:

- quantize: the block (or 2-D tile) of the first mismatching element: its source values
  (``x``), the kernel's codes and scale (``actual.qdata`` / ``actual.scale``) and mxsim's
  (``expected.*``); ``mxsim quantize --recipe R FILE --tensor x`` gives mxsim's codes again;
- grouped GEMM: the output element's two operand rows, quantized as mxsim quantizes the whole
  tensors (``a.qdata`` / ``a.scale`` and ``b.qdata`` / ``b.scale``, torchao's layout: one row,
  its blocks along K with their scales), the kernel's value and mxsim's; ``mxsim gemm --a FILE
  --a-tensor a --b FILE --b-tensor b`` computes the element again, by the contract.

The file's metadata holds the command, the recipe, the index and both values.
"""
import ctypes
import math

import torch

from . import QuantizedTensor, LinearRecipe, _capi, _dl, grouped_gemm, quantize

__all__ = ["Mismatch", "assert_same", "check_quantize", "check_grouped_gemm"]


class Mismatch:
    """What a comparison found. ``ok``: every bit equal. ``count`` of ``total`` elements differ
    (codes for a quantized tensor, then scales), ``first`` the index of the first (a tuple in the
    compared tensor's shape), ``actual`` / ``expected`` its two values, ``max_ulp`` the largest
    distance, ``what`` which part differs ("values", "codes", "scales"), ``path`` the replay file
    (None when nothing differs or none was written)."""

    def __init__(self, what="values", count=0, total=0, first=None, actual=None, expected=None, max_ulp=0.0,
                 path=None):
        self.what, self.count, self.total, self.first = what, count, total, first
        self.actual, self.expected, self.max_ulp, self.path = actual, expected, max_ulp, path

    @property
    def ok(self):
        return self.count == 0

    def __bool__(self):
        return self.ok

    def __repr__(self):
        if self.ok:
            return f"Mismatch(ok: {self.total} elements bit-identical)"
        s = (f"Mismatch({self.count} of {self.total} {self.what} differ; first at {self.first}: {self.actual!r} vs "
             f"mxsim {self.expected!r}; largest distance {self.max_ulp} ULP")
        return s + (f"; replay: {self.path})" if self.path else ")")


_INT_OF = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16,
           torch.float16: torch.int16}


def _ordered(t):
    """Float bits as integers that order like the values (sign-magnitude to two's complement):
    the ULP distance of two values is the difference (NaNs excluded)."""
    i = t.contiguous().view(_INT_OF[t.dtype]).long()
    bits = torch.finfo(t.dtype).bits
    return torch.where(i < 0, -(i & ((1 << (bits - 1)) - 1)), i)


def _codes(q):
    """One element code per entry: E2M1 nibbles unpacked (low first), other formats' bytes."""
    b = q._data.contiguous().view(torch.uint8)
    if q.spec.info.elem_bits == 4:
        return torch.stack([b & 0xF, b >> 4], dim=-1).reshape(*b.shape[:-1], -1)
    return b


def _code_ulp(a, e, bits):
    """Distance of two sign-magnitude codes of `bits` bits in value order."""
    def order(c):
        c = c.long()
        mag = c & ((1 << (bits - 1)) - 1)
        return torch.where((c >> (bits - 1)) & 1 == 1, -mag, mag)
    return (order(a) - order(e)).abs()


def _compare(actual, expected, what, ulp):
    """Mismatch of two tensors of one shape by bits; ulp(a, e) gives the distances of differing entries."""
    a, e = actual.detach().cpu().contiguous(), expected.detach().cpu().contiguous()
    if a.shape != e.shape:
        raise ValueError(f"{what}: the kernel's shape {list(a.shape)} is not mxsim's {list(e.shape)}")
    es = a.element_size()  # an element differs where any of its bytes does
    diff = (a.reshape(-1).view(torch.uint8).reshape(-1, es) != e.reshape(-1).view(torch.uint8).reshape(-1, es)).any(1)
    n = int(diff.sum())
    if n == 0:
        return Mismatch(what, 0, a.numel())
    flat = int(diff.nonzero()[0])
    first = _unravel(flat, a.shape)
    d = ulp(a.reshape(-1)[diff], e.reshape(-1)[diff])
    return Mismatch(what, n, a.numel(), first, a.reshape(-1)[flat].item(), e.reshape(-1)[flat].item(),
                    float(d.max()))


def _unravel(i, shape):
    """The index tuple of flat row-major index i in shape."""
    out = []
    for s in reversed(shape):
        out.append(i % s)
        i //= s
    return tuple(reversed(out))


def _float_ulp(a, e):
    nan = torch.isnan(a.float()) | torch.isnan(e.float())
    d = (_ordered(a) - _ordered(e)).abs().double()
    return torch.where(nan, torch.full_like(d, math.inf), d)


def assert_same(actual, expected):
    """Raises AssertionError with a ``Mismatch`` unless actual and expected hold the same bits:
    two tensors (float dtypes: ULP distances reported; others: bytes), or two QuantizedTensors
    (codes, then scales). Returns the (ok) Mismatch."""
    if isinstance(expected, QuantizedTensor):
        r = _compare_quantized(actual, expected)
    else:
        ulp = _float_ulp if expected.dtype in _INT_OF else (lambda a, e: (a.long() - e.long()).abs())
        r = _compare(actual, expected, "values", ulp)
    if not r.ok:
        raise AssertionError(repr(r))
    return r


def _compare_quantized(actual, expected):
    bits = expected.spec.info.elem_bits
    r = _compare(_codes(actual), _codes(expected), "codes", lambda a, e: _code_ulp(a, e, bits))
    if r.ok:
        sa, se = actual._scale, expected._scale
        ulp = _float_ulp if se.dtype in _INT_OF else (lambda a, e: (a.long() - e.long()).abs())
        r = _compare(sa.view(se.dtype) if sa.dtype != se.dtype and sa.element_size() == se.element_size() else sa,
                     se, "scales", ulp)
    return r


def _as_quantized(out, like):
    """A kernel's quantize result as a QuantizedTensor of mxsim's layout: a QuantizedTensor, a peer's
    tensor object (from_torchao / from_te read it), or (qdata, scale) in torchao's layout."""
    if isinstance(out, QuantizedTensor):
        return out
    if isinstance(out, (tuple, list)) and len(out) == 2:
        qdata, scale = out
        return QuantizedTensor(qdata.contiguous().view(torch.uint8), scale.contiguous(), like.tensor_scale, like.spec,
                               like.layout, like.shape)
    from . import peers
    for read in (peers.from_torchao, peers.from_te):
        try:
            return read(out)
        except (TypeError, ValueError, AttributeError):
            continue
    raise TypeError(f"check_quantize: the kernel returned {type(out).__name__}; expected a QuantizedTensor, a torchao "
                    "or TransformerEngine quantized tensor, or (qdata, scale)")


def check_quantize(fn, x, recipe=None, *, spec=None, axis="cols", path="mxsim_mismatch.safetensors", **spec_kwargs):
    """Runs ``fn(x)`` (the user's quantizer) and ``mxsim.torch.quantize(x, recipe, axis=axis)`` on the
    same tensor (its device), and compares codes and scales bit for bit. Returns a Mismatch; on a
    difference it also writes the first mismatching block (its source values, both results) to
    ``path`` (None: no file) for ``mxsim quantize`` to replay."""
    expected = quantize(x, recipe, axis=axis, spec=spec, **spec_kwargs)
    actual = _as_quantized(fn(x), expected)
    r = _compare_quantized(actual, expected)
    if not r.ok and path is not None:
        _write_quantize_replay(path, r, x, actual, expected, axis)
        r.path = str(path)
    return r


def _block_of(r, q, axis):
    """(row slice, column slice) of x holding the block of mismatch r (codes: an element index;
    scales: a block index), in x's [rows, cols] coordinates (rank 2)."""
    info = q.spec.info
    br, bc = info.block_rows or q.shape[-2], info.block_cols or q.shape[-1]
    if axis == "rows":
        br, bc = bc, br
    if r.what == "codes":
        row, col = r.first[-2], r.first[-1]
        if axis == "rows":  # codes stored transposed
            row, col = col, row
        r0, c0 = row // br * br, col // bc * bc
    else:
        r0, c0 = r.first[-2] * br, r.first[-1] * bc
        if axis == "rows":
            r0, c0 = r.first[-1] * br, r.first[-2] * bc
    return slice(r0, r0 + br), slice(c0, c0 + bc)


def _save(path, tensors, meta):
    lib = _capi.lib()
    names = [n.encode() for n, _, _ in tensors]
    dts = [d.encode() for _, d, _ in tensors]
    keep = [t.detach().cpu().contiguous() for _, _, t in tensors]
    dls = [_dl(t, n) for (n, _, _), t in zip(tensors, keep)]
    shapes = [(ctypes.c_int64 * max(t.dim(), 1))(*t.shape) for t in keep]
    n = len(tensors)
    ks, vs = [k.encode() for k in meta], [str(v).encode() for v in meta.values()]
    _capi.call(lib.mxsim_save_safetensors, str(path).encode(), n, (ctypes.c_char_p * n)(*names),
               (ctypes.c_char_p * n)(*dts), (ctypes.POINTER(ctypes.c_int64) * n)(*shapes),
               (ctypes.c_int32 * n)(*[t.dim() for t in keep]),
               (ctypes.POINTER(_capi.DLTensor) * n)(*[ctypes.pointer(d) for d in dls]), len(ks),
               (ctypes.c_char_p * max(len(ks), 1))(*ks), (ctypes.c_char_p * max(len(vs), 1))(*vs))


_ST_FLOAT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def _write_quantize_replay(path, r, x, actual, expected, axis):
    x2 = x.detach().reshape(-1, x.shape[-1])
    rows, cols = _block_of(r, expected, axis)
    block = x2[rows, cols]
    desc = expected.spec.describe()
    meta = {"check": "quantize", "spec": desc, "axis": axis, "mismatch": repr(r),
            "block_origin": f"[{rows.start}, {cols.start}]",
            "replay": f"mxsim quantize {path} --tensor x (mxsim's codes of this block; the spec: {desc})"}
    sub_e = quantize(block, spec=expected.spec, axis=axis)
    tensors = [("x", _ST_FLOAT.get(block.dtype, "F32"), block.float() if block.dtype not in _ST_FLOAT else block),
               ("expected.qdata", "U8", sub_e._data.view(torch.uint8)),
               ("expected.scale", "U8" if sub_e._scale.element_size() == 1 else "F32",
                sub_e._scale.view(torch.uint8) if sub_e._scale.element_size() == 1 else sub_e._scale)]
    meta["actual_first"] = repr(r.actual)
    _save(path, tensors, meta)


def check_grouped_gemm(fn, a, b, m_splits, recipe="mxfp4", *, form="fprop", out_dtype=None,
                       path="mxsim_mismatch.safetensors"):
    """Runs ``fn(a, b, m_splits)`` (the user's grouped GEMM on the high-precision operands: fprop
    a [M, K] . b[g][N, K]^T) and mxsim's: a and b quantized by the linear recipe's fprop specs
    (``LinearRecipe(recipe)``: x_fprop and w), then ``grouped_gemm``; the output in the kernel's
    dtype. Returns a Mismatch; on a difference writes the first element's two quantized operand
    rows and both values to ``path`` for ``mxsim gemm`` to replay."""
    if form != "fprop":
        raise ValueError("check_grouped_gemm: form 'fprop' (dgrad and wgrad: quantize their operands and compare "
                         "with assert_same on grouped_gemm's result)")
    actual = fn(a, b, m_splits)
    rec = recipe if isinstance(recipe, LinearRecipe) else LinearRecipe(recipe)
    if rec.quantized:
        qa, qb = quantize(a, spec=rec.spec("x_fprop")), quantize(b, spec=rec.spec("w"))
    else:
        qa, qb = a.bfloat16(), b.bfloat16()
    expected = grouped_gemm(qa, qb, list(m_splits), out_dtype=out_dtype or actual.dtype)
    r = _compare(actual, expected.to(actual.dtype), "values", _float_ulp)
    if not r.ok and path is not None and rec.quantized:
        m, n = r.first
        g, m0 = 0, 0
        for g, rows in enumerate(m_splits):
            if m < m0 + rows:
                break
            m0 += rows
        ra = quantize(a[m:m + 1], spec=rec.spec("x_fprop"))  # 1 x K blocks: the row's own quantization
        rb = _row_of(qb, g, n)
        meta = {"check": "grouped_gemm fprop", "recipe": rec.name, "index": f"[{m}, {n}]", "group": str(g),
                "actual": repr(r.actual), "expected": repr(r.expected), "mismatch": repr(r),
                "replay": f"mxsim gemm --op fprop --a {path} --a-tensor a --b {path} --b-tensor b "
                          f"--layout torchao --elem-dtype {_elem_name(ra)} -o element.npy"}
        _save(path, [("a.qdata", "U8", ra._data.view(torch.uint8)), ("a.scale", "U8", ra._scale.view(torch.uint8)),
                     ("b.qdata", "U8", rb[0]), ("b.scale", "U8", rb[1])], meta)
        r.path = str(path)
    return r


def _elem_name(q):
    return {"e2m1": "float4_e2m1fn_x2", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "e2m3": "fp6_e2m3",
            "e3m2": "fp6_e3m2"}.get(q.spec.elem, q.spec.elem)


def _row_of(q, g, n):
    """Row n of group g of a rowwise or 2-D quantized [G, N, K]: its codes [1, bytes] and one scale
    byte per 32-column block (a 2-D tile's scale repeated for each of its rows)."""
    info = q.spec.info
    data = q._data.view(torch.uint8)
    scale = q._scale.view(torch.uint8)
    if data.dim() == 2:
        data, scale = data.unsqueeze(0), scale.unsqueeze(0)
    br = info.block_rows or 1
    return data[g, n:n + 1].contiguous(), scale[g, n // br:n // br + 1].contiguous()

