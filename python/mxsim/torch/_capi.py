"""ctypes bindings of mxsim's C interface (capi/include/mxsim/c_api.h, libmxsim_c.so).

The library is found, in this order, at $MXSIM_C_LIBRARY, next to this package
(the build tree and the installed package put it there), or by the loader's
search path (``ctypes.util.find_library("mxsim_c")``). Tensors cross as DLPack
DLTensors built from the torch tensor's pointer, shape, strides, dtype and
device: nothing is copied, and the torch tensor must outlive the call (it does:
every call here is synchronous on the host side and holds the tensor).
"""
import ctypes
import ctypes.util
import os
import threading

_ABI_VERSION = 4

# dlpack.h
KDL_CPU, KDL_CUDA = 1, 2
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class Error(ctypes.Structure):
    _fields_ = [("message", ctypes.c_char * 1024)]


class SpecInfo(ctypes.Structure):
    _fields_ = [("elem", ctypes.c_char * 16), ("elem_bits", ctypes.c_int32), ("block_rows", ctypes.c_int32),
                ("block_cols", ctypes.c_int32), ("scale_kind", ctypes.c_int32), ("stochastic", ctypes.c_int32),
                ("hadamard", ctypes.c_int32), ("current_scaling", ctypes.c_int32), ("hadamard_signs", ctypes.c_uint32)]


class LinearRecipeInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 64), ("quantized", ctypes.c_int32), ("gemm_quantized", ctypes.c_int32 * 3),
                ("fused_wgrad_accum", ctypes.c_int32),
                ("transposed_cache_allowed", ctypes.c_int32), ("deosc_eligible", ctypes.c_int32),
                ("dgrad_reuses_fprop_w", ctypes.c_int32), ("weight_gemm", ctypes.c_int32),
                ("records", ctypes.c_int32 * 3), ("delayed_scaling", ctypes.c_int32),
                ("two_level_scale", ctypes.c_int32 * 3)]


class QStats(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint64), ("nonfinite_in", ctypes.c_uint64), ("nan_out", ctypes.c_uint64),
                ("underflow", ctypes.c_uint64), ("saturated", ctypes.c_uint64), ("mse", ctypes.c_double),
                ("max_abs_err", ctypes.c_double), ("signal_power", ctypes.c_double), ("sqnr_db", ctypes.c_double),
                ("mean_err", ctypes.c_double), ("rounded", ctypes.c_uint64), ("rounded_up", ctypes.c_uint64),
                ("expected_up", ctypes.c_double), ("tensor_scale_inv", ctypes.c_float)]


class BlockStat(ctypes.Structure):
    _fields_ = [("amax", ctypes.c_float), ("scale_exp", ctypes.c_int32), ("sq_err", ctypes.c_double),
                ("sq_src", ctypes.c_double), ("count", ctypes.c_uint64), ("saturated", ctypes.c_uint64),
                ("underflow", ctypes.c_uint64)]


class QLayout(ctypes.Structure):
    _fields_ = [("groups", ctypes.c_int64), ("rows", ctypes.c_int64), ("cols", ctypes.c_int64),
                ("transposed", ctypes.c_int32), ("scale_kind", ctypes.c_int32), ("srows", ctypes.c_int64),
                ("scols", ctypes.c_int64), ("row_bytes", ctypes.c_int64), ("scale_rows", ctypes.c_int64),
                ("scale_cols", ctypes.c_int64), ("elem_bits", ctypes.c_int32), ("has_tensor_scale", ctypes.c_int32)]


class QTensor(ctypes.Structure):
    _fields_ = [("spec", ctypes.c_void_p), ("layout", QLayout), ("data", DLTensor), ("scale", DLTensor),
                ("tensor_scale", ctypes.POINTER(DLTensor))]


class GemmOperand(ctypes.Structure):
    _fields_ = [("q", ctypes.POINTER(QTensor)), ("bf16", ctypes.POINTER(DLTensor))]


class LayerPlan(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("recipe", ctypes.c_char_p), ("module", ctypes.c_char_p),
                ("groups", ctypes.c_int64), ("out_features", ctypes.c_int64), ("in_features", ctypes.c_int64),
                ("quantized", ctypes.c_int32), ("deosc", ctypes.c_int32), ("snapshots", ctypes.c_int32),
                ("snapshot_wgrad_mb", ctypes.c_int32), ("watch", ctypes.c_int64), ("grad_added", ctypes.c_int32),
                ("shadow", ctypes.c_int32 * 3), ("tensor_scale", ctypes.c_int32 * 3)]


class RunPlan(ctypes.Structure):
    _fields_ = [("config_toml", ctypes.c_char_p), ("model", ctypes.c_char_p), ("backend", ctypes.c_char_p),
                ("seed", ctypes.c_uint64), ("micro_batches", ctypes.c_int64), ("experts", ctypes.c_int64),
                ("scalars", ctypes.POINTER(ctypes.c_char_p)), ("n_scalars", ctypes.c_size_t),
                ("layers", ctypes.POINTER(LayerPlan)), ("n_layers", ctypes.c_size_t),
                ("snapshot_steps", ctypes.POINTER(ctypes.c_int64)), ("n_snapshot_steps", ctypes.c_size_t),
                ("first_step", ctypes.c_int64)]


class OutputError(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint64), ("nonfinite", ctypes.c_uint64), ("rel_l2", ctypes.c_double),
                ("sqnr_db", ctypes.c_double), ("max_abs_err", ctypes.c_double), ("max_index", ctypes.c_int64)]


class OscStep(ctypes.Structure):
    _fields_ = [("flips", ctypes.c_uint64), ("flips_total", ctypes.c_uint64), ("ema_mean", ctypes.c_double),
                ("ema_frac_above", ctypes.c_double), ("dist_ratio_mean", ctypes.c_double)]


class LayerRow(ctypes.Structure):
    _fields_ = [("main_grad_norm", ctypes.POINTER(ctypes.c_double)), ("quant", QStats * 3),
                ("scale_exp_hist", ctypes.POINTER(ctypes.c_uint64) * 3), ("osc", OscStep),
                ("snapped", ctypes.c_int64), ("watch_element", ctypes.POINTER(ctypes.c_int64)),
                ("watch_master", ctypes.POINTER(ctypes.c_float)), ("watch_code", ctypes.POINTER(ctypes.c_uint8)),
                ("watch_scale_bytes", ctypes.POINTER(ctypes.c_uint8)),
                ("watch_scale_inv", ctypes.POINTER(ctypes.c_float)), ("watch_value", ctypes.POINTER(ctypes.c_float)),
                ("watch_flips", ctypes.POINTER(ctypes.c_uint32)), ("watch_snaps", ctypes.POINTER(ctypes.c_uint32)),
                ("grad_added", ctypes.POINTER(ctypes.c_uint8)), ("shadow", ctypes.POINTER(OutputError) * 3)]


class StepRow(ctypes.Structure):
    _fields_ = [("step", ctypes.c_int64), ("loss", ctypes.c_double), ("lr", ctypes.c_float),
                ("scalars", ctypes.POINTER(ctypes.c_double)), ("tokens_per_expert", ctypes.POINTER(ctypes.c_int64)),
                ("layers", ctypes.POINTER(LayerRow))]


SCALE_E8M0, SCALE_FP32, SCALE_UE4M3 = 0, 1, 2
AXIS_COLS, AXIS_ROWS = 0, 1
FPROP, DGRAD, WGRAD = 0, 1, 2
ROLE_X_FPROP, ROLE_W, ROLE_DY_DGRAD, ROLE_DY_WGRAD, ROLE_X_WGRAD, ROLE_W_DGRAD = 0, 1, 2, 3, 4, 5

_OK, _INVALID, _UNSUPPORTED, _OOM, _DEVICE = 0, 1, 2, 3, 4

_lock = threading.Lock()
_lib = None


def _candidates():
    env = os.environ.get("MXSIM_C_LIBRARY")
    if env:
        return [env]
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "libmxsim_c.so")
    found = ctypes.util.find_library("mxsim_c")
    return [here] + ([found] if found else [])


def lib():
    """The loaded library (loaded once, on first use). Raises ImportError naming where it looked."""
    global _lib
    if _lib is not None:  # loaded: no lock on the hot path
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path}: {e}")
                continue
            _declare(handle)
            if handle.mxsim_abi_version() != _ABI_VERSION:
                raise ImportError(f"{path} has C ABI version {handle.mxsim_abi_version()}, this mxsim.torch "
                                  f"expects {_ABI_VERSION}: rebuild mxsim")
            _lib = handle
            return _lib
        raise ImportError("mxsim.torch: libmxsim_c.so not found (set MXSIM_C_LIBRARY to its path); tried "
                          + "; ".join(tried or ["nothing: no candidate"]))


def _declare(h):
    P = ctypes.POINTER
    sig = {
        "mxsim_abi_version": (ctypes.c_int, []),
        "mxsim_version": (ctypes.c_char_p, []),
        "mxsim_has_gpu": (ctypes.c_int, []),
        "mxsim_spec_create": (ctypes.c_int, [P(ctypes.c_char_p), P(ctypes.c_char_p), ctypes.c_size_t,
                                             P(ctypes.c_void_p), P(Error)]),
        "mxsim_spec_destroy": (None, [ctypes.c_void_p]),
        "mxsim_spec_describe": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, P(Error)]),
        "mxsim_spec_derive": (ctypes.c_int, [ctypes.c_void_p, P(ctypes.c_char_p), P(ctypes.c_char_p), ctypes.c_size_t,
                                             P(ctypes.c_void_p), P(Error)]),
        "mxsim_spec_with_amax": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_float, P(ctypes.c_void_p), P(Error)]),
        "mxsim_linear_recipe_create": (ctypes.c_int, [ctypes.c_char_p, P(ctypes.c_char_p), P(ctypes.c_char_p),
                                                      ctypes.c_size_t, P(ctypes.c_void_p), P(Error)]),
        "mxsim_linear_recipe_destroy": (None, [ctypes.c_void_p]),
        "mxsim_linear_recipe_get_info": (ctypes.c_int, [ctypes.c_void_p, P(LinearRecipeInfo), P(Error)]),
        "mxsim_linear_recipe_spec": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32, P(ctypes.c_void_p), P(Error)]),
        "mxsim_linear_recipe_delayed_scaling": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32, P(ctypes.c_void_p),
                                                               P(Error)]),
        "mxsim_delayed_scaling_destroy": (None, [ctypes.c_void_p]),
        "mxsim_delayed_scaling_record": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_float, P(Error)]),
        "mxsim_delayed_scaling_update": (ctypes.c_int, [ctypes.c_void_p, P(Error)]),
        "mxsim_delayed_scaling_spec": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, P(ctypes.c_void_p), P(Error)]),
        "mxsim_delayed_scaling_scale": (ctypes.c_int, [ctypes.c_void_p, P(ctypes.c_float), P(Error)]),
        "mxsim_spec_get_info": (ctypes.c_int, [ctypes.c_void_p, P(SpecInfo), P(Error)]),
        "mxsim_quant_layout": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                              ctypes.c_int32, P(QLayout), P(Error)]),
        "mxsim_quantize": (ctypes.c_int, [P(DLTensor), ctypes.c_void_p, ctypes.c_int32, P(QTensor), ctypes.c_void_p,
                                          P(Error)]),
        "mxsim_quantize_grouped_colwise": (ctypes.c_int, [P(DLTensor), P(ctypes.c_int64), ctypes.c_size_t,
                                                          ctypes.c_void_p, P(QTensor), ctypes.c_void_p, P(Error)]),
        "mxsim_quant_stats": (ctypes.c_int, [P(DLTensor), P(QTensor), P(QStats), P(Error)]),
        "mxsim_block_stats": (ctypes.c_int, [P(DLTensor), P(QTensor), P(BlockStat), ctypes.c_size_t, P(Error)]),
        "mxsim_dequantize": (ctypes.c_int, [P(QTensor), P(DLTensor), ctypes.c_void_p, P(Error)]),
        "mxsim_nvfp4_decode_scale": (ctypes.c_int, [ctypes.c_float, P(ctypes.c_float), P(Error)]),
        "mxsim_grouped_gemm_out_shape": (ctypes.c_int, [ctypes.c_int32, P(GemmOperand), ctypes.c_size_t, P(GemmOperand),
                                                        ctypes.c_size_t, P(ctypes.c_int64), ctypes.c_size_t,
                                                        P(ctypes.c_int64), P(ctypes.c_int32), P(Error)]),
        "mxsim_grouped_gemm": (ctypes.c_int, [ctypes.c_int32, P(GemmOperand), ctypes.c_size_t, P(GemmOperand),
                                              ctypes.c_size_t, P(ctypes.c_int64), ctypes.c_size_t, P(DLTensor),
                                              ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p, P(Error)]),
        "mxsim_scale_exp_histogram": (ctypes.c_int, [P(QTensor), ctypes.c_void_p, P(ctypes.c_uint64), P(Error)]),
        "mxsim_recorder_create": (ctypes.c_int, [ctypes.c_char_p, P(RunPlan), P(ctypes.c_void_p), P(Error)]),
        "mxsim_recorder_append": (ctypes.c_int, [ctypes.c_void_p, P(StepRow), P(Error)]),
        "mxsim_recorder_close": (ctypes.c_int, [ctypes.c_void_p, P(Error)]),
        "mxsim_recorder_snapshots": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, P(ctypes.c_size_t), P(Error)]),
        "mxsim_recorder_snapshot_key": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, P(ctypes.c_int32),
                                                       ctypes.c_char_p, ctypes.c_size_t, P(Error)]),
        "mxsim_recorder_write_snapshots": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, P(P(DLTensor)),
                                                          ctypes.c_size_t, P(Error)]),
        "mxsim_block_maps": (ctypes.c_int, [P(DLTensor), P(QTensor), P(ctypes.c_float), P(ctypes.c_float),
                                            P(ctypes.c_float), ctypes.c_void_p, ctypes.c_size_t, P(ctypes.c_uint8),
                                            ctypes.c_size_t, P(Error)]),
        "mxsim_context_quant_elements": (ctypes.c_int, [ctypes.c_void_p, P(QTensor), P(ctypes.c_int64), ctypes.c_size_t,
                                                        ctypes.c_void_p, P(ctypes.c_uint8), P(ctypes.c_uint8),
                                                        P(ctypes.c_float), P(ctypes.c_float), P(Error)]),
        "mxsim_osc_metrics_gather": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, P(ctypes.c_int64), ctypes.c_size_t,
                                                    P(ctypes.c_uint32), P(Error)]),
        "mxsim_deosc_gather": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, P(ctypes.c_int64), ctypes.c_size_t,
                                              P(ctypes.c_uint32), P(Error)]),
        "mxsim_osc_metrics_maps": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, P(ctypes.c_uint32),
                                                  P(ctypes.c_float), P(ctypes.c_float), ctypes.c_size_t, P(Error)]),
        "mxsim_deosc_snaps": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, P(ctypes.c_uint32), ctypes.c_size_t,
                                             P(Error)]),
        "mxsim_recorder_destroy": (None, [ctypes.c_void_p]),
        "mxsim_context_create": (ctypes.c_int, [DLDevice, P(ctypes.c_void_p), P(Error)]),
        "mxsim_context_destroy": (None, [ctypes.c_void_p]),
        "mxsim_context_resolve": (ctypes.c_int, [ctypes.c_void_p, P(Error)]),
        "mxsim_l2_norm": (ctypes.c_int, [ctypes.c_void_p, P(DLTensor), ctypes.c_void_p, P(ctypes.c_double), P(Error)]),
        "mxsim_save_safetensors": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t, P(ctypes.c_char_p),
                                                  P(ctypes.c_char_p), P(P(ctypes.c_int64)), P(ctypes.c_int32),
                                                  P(P(DLTensor)), ctypes.c_size_t, P(ctypes.c_char_p),
                                                  P(ctypes.c_char_p), P(Error)]),
        "mxsim_context_quant_stats": (ctypes.c_int, [ctypes.c_void_p, P(DLTensor), P(QTensor), ctypes.c_void_p,
                                                     P(QStats), P(ctypes.c_uint64), P(Error)]),
        "mxsim_osc_metrics_create": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_float, ctypes.c_int64, P(ctypes.c_void_p),
                                                    P(Error)]),
        "mxsim_osc_metrics_destroy": (None, [ctypes.c_void_p]),
        "mxsim_deosc_create": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, P(ctypes.c_void_p),
                                              P(Error)]),
        "mxsim_deosc_destroy": (None, [ctypes.c_void_p]),
        "mxsim_deosc_observe": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, P(DLTensor), P(DLTensor),
                                               ctypes.c_void_p, P(ctypes.c_int64), P(Error)]),
        "mxsim_osc_metrics_update": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, P(DLTensor), P(DLTensor),
                                                    ctypes.c_void_p, P(OscStep), P(Error)]),
        "mxsim_context_output_error": (ctypes.c_int, [ctypes.c_void_p, P(DLTensor), P(DLTensor), ctypes.c_void_p,
                                                      P(OutputError), P(Error)]),
    }
    missing = [name for name in sig if not hasattr(h, name)]
    if missing:  # a library older than this package (same ABI version, fewer entry points)
        raise ImportError(f"mxsim.torch: {getattr(h, '_name', 'libmxsim_c.so')} lacks {', '.join(missing[:4])}"
                          f"{' and more' if len(missing) > 4 else ''}: it is older than this mxsim.torch; rebuild "
                          "mxsim (or point MXSIM_C_LIBRARY at a library built from the same commit)")
    for name, (res, args) in sig.items():
        f = getattr(h, name)
        f.restype = res
        f.argtypes = args


_tls = threading.local()  # each thread's one error buffer (the library writes it only on failure)


def call(fn, *args):
    """Calls fn(*args, &err) and raises on a failed status: ValueError for a bad argument,
    MemoryError for an allocation, RuntimeError for an unsupported device or a GPU failure."""
    err = getattr(_tls, "err", None)
    if err is None:
        err = _tls.err = Error()
    status = fn(*args, ctypes.byref(err))
    if status == _OK:
        return
    msg = err.message.decode("utf-8", "replace")
    if status == _INVALID:
        raise ValueError(msg)
    if status == _OOM:
        raise MemoryError(msg)
    raise RuntimeError(msg)
