"""mxsim: bit-exact MXFP4 / MXFP8 / FP8 block-scaled numerics from Python.

Every function runs the C++ library (mxsim._core): the same bits as the
`mxsim` command line and the C++ API. docs/python.md is the guide.

    import numpy as np, mxsim
    x = np.random.randn(128, 256).astype(np.float32)
    q = mxsim.quantize(x, elem_dtype="float4_e2m1fn_x2", block_size=32, scaling_mode="even")
    q.qdata, q.scale              # uint8 [128, 128] packed FP4, uint8 [128, 8] E8M0
    y = mxsim.dequantize(q)       # float32 [128, 256]
"""
# mxsim.torch (the C interface, loaded with ctypes) works without the extension: a
# CPython the extension was not built for (the GPU machines' 3.12) imports the package and
# gets a clear error only when it asks for a name of the extension.
try:
    import numpy as _np

    from ._core import (  # noqa: F401
        QuantSpec,
        QuantizedTensor,
        ScaleKind,
        Trace,
        __version__,
        block_stats,
        build_commit,
        compare_traces,
        decode,
        dequantize,
        e8m0_scale,
        encode,
        formats,
        from_te_fp8,
        from_te_fp8_blockwise,
        from_te_mxfp8,
        from_te_nvfp4,
        from_torchao,
        from_torchao_float8,
        from_torchao_float8_training,
        from_torchao_nvfp4,
        gemm_class,
        grouped_dgrad,
        grouped_fprop,
        grouped_wgrad,
        qdq,
        quant_stats,
        quantize,
        recipes,
        spec,
    )
except ImportError as _e:  # noqa: F841
    _core_error = _e

    def __getattr__(name):
        raise ImportError(f"mxsim.{name} needs the compiled extension mxsim._core, which did not load "
                          f"({_core_error}); mxsim.torch works without it") from _core_error


def to_mx(data_hp, elem_dtype, block_size=32, scaling_mode="floor"):
    """(scale, qdata) as torchao's ``to_mx(data_hp, elem_dtype, block_size, scaling_mode)`` returns them.

    data_hp: a float array (a torch tensor: pass ``t.float().cpu().numpy()``). scale: uint8 E8M0
    bytes [..., K / block_size] (torchao's float8_e8m0fnu viewed as uint8); qdata: uint8 codes
    [..., K] (FP4: [..., K / 2] packed as float4_e2m1fn_x2). Compare with torchao's results viewed
    as uint8 (``scale.view(torch.uint8)``).
    """
    q = quantize(_np.asarray(data_hp), elem_dtype=elem_dtype, block_size=block_size, scaling_mode=str(scaling_mode))
    return q.scale, q.qdata


def pack_fp4(codes):
    """Pack E2M1 codes (uint8, one per byte, last axis even) two per byte as float4_e2m1fn_x2:
    element 2i in the low nibble, 2i+1 in the high nibble."""
    c = _np.asarray(codes, dtype=_np.uint8)
    if c.shape[-1] % 2:
        raise ValueError("pack_fp4: the last axis must be even")
    return (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)


def unpack_fp4(packed):
    """The E2M1 codes of float4_e2m1fn_x2 bytes, one per byte (the inverse of pack_fp4)."""
    p = _np.asarray(packed, dtype=_np.uint8)
    out = _np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=_np.uint8)
    out[..., 0::2] = p & 0xF
    out[..., 1::2] = p >> 4
    return out


def assert_same_bytes(actual, expected, what="tensor"):
    """Raise AssertionError naming the first differing byte when two arrays' bytes differ.

    Accepts NumPy arrays and torch tensors of any dtype (torch float8 / float4_e2m1fn_x2 /
    float8_e8m0fnu included). Both are compared as their raw bytes in C order; the shapes may
    differ (a library that returns its scales flattened) as long as the byte counts agree.
    """
    def as_bytes(a):
        if hasattr(a, "detach"):  # torch.Tensor
            import torch
            return a.detach().cpu().contiguous().view(torch.uint8).numpy().reshape(-1)
        return _np.ascontiguousarray(a).reshape(-1).view(_np.uint8)
    a, e = as_bytes(actual), as_bytes(expected)
    if a.size != e.size:
        raise AssertionError(f"{what}: {a.size} bytes vs {e.size} bytes")
    bad = _np.flatnonzero(a != e)
    if bad.size:
        i = int(bad[0])
        raise AssertionError(f"{what}: {bad.size} of {a.size} bytes differ; the first at byte {i} "
                             f"({int(a[i]):#04x} vs {int(e[i]):#04x})")
