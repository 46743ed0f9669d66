/* mxsim's C interface: the bit-exact quantizer and grouped GEMM
 * (docs/numerics.md) on memory the caller owns, from any language and any
 * CPython (mxsim.torch loads it with ctypes; docs/torch.md).
 *
 * In the manner of cuBLAS's and ggml's C APIs:
 *  - Tensors are DLPack DLTensors (dlpack.h, Debian libdlpack-dev): data
 *    pointer, device, dtype, shape and strides of the caller's memory. Every
 *    op reads and writes that memory in place. A CPU tensor (kDLCPU) runs on
 *    the emulator; a CUDA tensor (kDLCUDA) on the GPU backend, on that device
 *    and the caller's stream (a cudaStream_t / hipStream_t as void*, NULL: the
 *    legacy default stream), asynchronously, with nothing copied to the host.
 *    All tensors of one call live on one device.
 *  - Outputs are allocated by the caller; mxsim_quant_layout gives their
 *    extents. Inputs must be C-contiguous (strides NULL or row-major).
 *  - Every call returns an mxsim_status; on failure the caller's mxsim_error
 *    holds a message naming the op, the argument and the problem. A refused
 *    argument (MXSIM_ERR_INVALID_ARGUMENT, _UNSUPPORTED) is found before any
 *    output is written; a device failure (MXSIM_ERR_DEVICE, _OUT_OF_MEMORY) in
 *    the middle of a call can leave outputs partly written. No C++ exception
 *    crosses this interface.
 *  - No global mutable state on the CPU: calls on different threads share
 *    nothing but the read-only format tables; specs and recipes are immutable.
 *    On the GPU the backend's cached device blocks and GEMM workspaces are
 *    per device and locked, and are reused in stream order: work of one
 *    device on several streams at once is not supported. A call restores the
 *    caller's current device.
 *
 * Results are the emulator's bits on both devices (the contract of
 * docs/numerics.md; tests/python/test_torch_*.py check them against the NumPy
 * API and the command line).
 */
#ifndef MXSIM_C_API_H
#define MXSIM_C_API_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define MXSIM_C_EXPORT __declspec(dllexport)
#else
#define MXSIM_C_EXPORT __attribute__((visibility("default")))
#endif

/** Bumped when a struct or signature of this header changes. */
#define MXSIM_C_ABI_VERSION 4

typedef enum mxsim_status {
  MXSIM_OK = 0,
  MXSIM_ERR_INVALID_ARGUMENT = 1, /**< shape, dtype, device, spec or m_splits the op cannot take */
  MXSIM_ERR_UNSUPPORTED = 2,      /**< a CUDA tensor in a build without a GPU backend, or no code for the GPU */
  MXSIM_ERR_OUT_OF_MEMORY = 3,    /**< a host or device allocation failed (the message names the tensor) */
  MXSIM_ERR_DEVICE = 4,           /**< a GPU runtime call failed */
  MXSIM_ERR_INTERNAL = 5          /**< anything else (a bug: please report the message) */
} mxsim_status;

/** Caller-owned error text: NUL-terminated, truncated to fit. */
typedef struct mxsim_error {
  char message[1024];
} mxsim_error;

/** The ABI version this library was built with (MXSIM_C_ABI_VERSION). */
MXSIM_C_EXPORT int mxsim_abi_version(void);
/** "0.x.y (commit)" of the library. Static storage. */
MXSIM_C_EXPORT const char* mxsim_version(void);
/** 1 when the library was built with a GPU backend, else 0. */
MXSIM_C_EXPORT int mxsim_has_gpu(void);

/* ------------------------------------------------------------------ specs */

/** How one tensor is quantized (mxsim::QuantSpec). Opaque and immutable. */
typedef struct mxsim_spec mxsim_spec;

/** A spec from keyword arguments as text (docs/python.md "Specs", the names
 * of mxsim.quantize): recipe, elem_dtype, block_size ("32" or "32,32"),
 * scaling_mode, rounding, seed, sr_stream, sr_index_base, hadamard, amax_epsilon,
 * pow2_scale, scale_convention, hp_dtype, whole_tensor_scale (per-tensor FP32
 * current scaling whose quantizer folds the whole tensor's amax on the
 * tensor's device: QuantSpec::whole_tensor_scale). n = 0 gives torchao's to_mx
 * defaults. *out is released with mxsim_spec_destroy. */
MXSIM_C_EXPORT mxsim_status mxsim_spec_create(const char* const* keys, const char* const* values, size_t n,
                                              mxsim_spec** out, mxsim_error* err);
MXSIM_C_EXPORT void mxsim_spec_destroy(mxsim_spec* spec);
/** The spec's one-line description (QuantSpec::describe), NUL-terminated into buf. */
MXSIM_C_EXPORT mxsim_status mxsim_spec_describe(const mxsim_spec* spec, char* buf, size_t len, mxsim_error* err);

/** What a spec is, for callers that type their buffers by it. */
typedef struct mxsim_spec_info {
  char elem[16];          /**< element format's short name: "e2m1", "e4m3", "e5m2", "e2m3", "e3m2", "bf16" */
  int32_t elem_bits;      /**< bits of one element code */
  int32_t block_rows;     /**< 1 for 1-D blocks, 0 for one scale per tensor */
  int32_t block_cols;     /**< 0 for one scale per tensor (or per row when block_rows = 1) */
  int32_t scale_kind;     /**< mxsim_scale_kind */
  int32_t stochastic;     /**< 1: rounding = sr (Philox words by element index, docs/numerics.md §2.5) */
  int32_t hadamard;       /**< 1: the 16-point Hadamard transform is applied first */
  int32_t current_scaling;/**< 1: one FP32 scale per tensor, from its amax (mxsim_spec_with_amax) */
  uint32_t hadamard_signs; /**< the transform's sign mask D of y = H (D x): bit i negates element i of
                                each 16 first (0: none; 0xD7E8 is TransformerEngine's NVFP4 wgrad vector) */
} mxsim_spec_info;

MXSIM_C_EXPORT mxsim_status mxsim_spec_get_info(const mxsim_spec* spec, mxsim_spec_info* out, mxsim_error* err);

/** A spec with overrides (the keys of mxsim_spec_create but recipe) applied
 * to base: a recipe's operand spec given its SR seed, stream or index base. */
MXSIM_C_EXPORT mxsim_status mxsim_spec_derive(const mxsim_spec* base, const char* const* keys,
                                              const char* const* values, size_t n, mxsim_spec** out,
                                              mxsim_error* err);

/** Current scaling of a per-tensor FP32-scaled spec (fp8_tensor, the
 * fp8_current recipe's operands): the spec with the one scale of a tensor
 * whose amax (max |x|, in FP32) is given, scale = fp8_max / max(amax,
 * amax_epsilon), rounded down to a power of two where the spec says
 * (docs/numerics.md §3.3). One scale then covers every group of a [G, N, K]
 * tensor, as TransformerEngine's per-tensor current scaling of a weight.
 * Refuses other specs and a NaN amax. */
MXSIM_C_EXPORT mxsim_status mxsim_spec_with_amax(const mxsim_spec* spec, float amax, mxsim_spec** out,
                                                 mxsim_error* err);

/* ------------------------------------------------------------------ linear recipes */

/** How a linear layer's three GEMMs quantize their operands and how its
 * weight gradient reaches main_grad (docs/simulator.md "Recipes per linear";
 * core/include/mxsim/sim/recipe.hpp). Opaque and immutable. */
typedef struct mxsim_linear_recipe mxsim_linear_recipe;

/** The operands of a linear's GEMMs: fprop y = x . W^T, dgrad dx = dy . W,
 * wgrad dW = dy^T . x (per group, along M). */
typedef enum mxsim_operand_role {
  MXSIM_ROLE_X_FPROP = 0,
  MXSIM_ROLE_W = 1,        /**< W in fprop (and in dgrad, the same bytes, where dgrad's W spec is fprop's) */
  MXSIM_ROLE_DY_DGRAD = 2,
  MXSIM_ROLE_DY_WGRAD = 3,
  MXSIM_ROLE_X_WGRAD = 4,
  MXSIM_ROLE_W_DGRAD = 5   /**< W in dgrad (fprop's spec unless a per-GEMM recipe runs dgrad otherwise) */
} mxsim_operand_role;

typedef struct mxsim_linear_recipe_info {
  char name[64];                    /**< bf16, mxfp4, mxfp8, fp8_current, fp8_delayed, fp8_block; per-GEMM
                                         recipes as fprop's followed by the GEMMs that differ:
                                         "mxfp4,wgrad=mxfp8" */
  int32_t quantized;                /**< 0 when no GEMM quantizes (BF16 operands, no specs) */
  int32_t gemm_quantized[3];        /**< per GEMM, indexed by mxsim_gemm_form: 0 runs it in BF16 */
  int32_t fused_wgrad_accum;        /**< wgrad's recipe: 1 accumulates into the FP32 main_grad in the GEMM;
                                         0: main_grad = fl32(main_grad + bf16(dW)) (Primus PR #995) */
  int32_t transposed_cache_allowed; /**< dgrad's recipe: 0 under current scaling, dgrad's W re-derived each
                                         time (PR #891) */
  int32_t deosc_eligible;           /**< fprop's recipe: 1 only for mxfp4 (the weight is MXFP4 in fprop;
                                         Primus PR #1081) */
  int32_t dgrad_reuses_fprop_w;     /**< 1: dgrad takes fprop's quantized W bytes (one W spec, a transposed
                                         cache allowed); 0: dgrad quantizes W by MXSIM_ROLE_W_DGRAD */
  int32_t weight_gemm;              /**< the GEMM whose quantization of W the statistics and oscillation
                                         metrics follow (mxsim_gemm_form: fprop's, else dgrad's); -1: none */
  int32_t records[3];               /**< W, x, dy: whether the operand has quantization statistics (W where
                                         weight_gemm >= 0, x where fprop quantizes, dy where dgrad does) */
  int32_t delayed_scaling;          /**< 1 for fp8_delayed (scales from an amax history; all GEMMs or none) */
  int32_t two_level_scale[3];       /**< W, x, dy: recorded with a two-level scale (NVFP4: UE4M3 blocks under
                                         an FP32 tensor scale), so a trace has its quant/<op>/tensor_scale_inv */
} mxsim_linear_recipe_info;

/** A recipe by name (or alias: fp8_tensor = fp8_current), or one recipe per
 * GEMM spelled as the trace spells it ("mxfp4,wgrad=mxfp8": fprop's recipe,
 * then ",<gemm>=<recipe>" for dgrad / wgrad where they differ; the simulator's
 * recipe.<layer>_<gemm>), with recipe options as key / value text
 * (mxfp4_hadamard_wgrad, mxfp4_sr_grad, fp8_current_amax_epsilon,
 * fp8_current_pow2_scale, fp8_block_amax_epsilon, fp8_block_pow2_scale,
 * fp8_amax_history, fp8_margin; the simulator's recipe.* defaults otherwise).
 * fp8_delayed is all three GEMMs or none. */
MXSIM_C_EXPORT mxsim_status mxsim_linear_recipe_create(const char* name, const char* const* keys,
                                                       const char* const* values, size_t n,
                                                       mxsim_linear_recipe** out, mxsim_error* err);
MXSIM_C_EXPORT void mxsim_linear_recipe_destroy(mxsim_linear_recipe* recipe);
MXSIM_C_EXPORT mxsim_status mxsim_linear_recipe_get_info(const mxsim_linear_recipe* recipe,
                                                         mxsim_linear_recipe_info* out, mxsim_error* err);
/** The spec of one operand (a new spec: release it with mxsim_spec_destroy), by
 * the recipe of the GEMM it feeds; refused, naming the GEMM, where that GEMM
 * runs in BF16. */
MXSIM_C_EXPORT mxsim_status mxsim_linear_recipe_spec(const mxsim_linear_recipe* recipe, int32_t role,
                                                     mxsim_spec** out, mxsim_error* err);

/** fp8_delayed's scale state of one operand (TransformerEngine's DelayedScaling:
 * an amax history, scale = fp8_max / max(history) / 2^margin after each
 * update; core/include/mxsim/delayed_scaling.hpp). Mutable: one per operand of
 * one layer, not shared between threads. */
typedef struct mxsim_delayed_scaling mxsim_delayed_scaling;

/** The state of a role of an fp8_delayed recipe: MXSIM_ROLE_W, MXSIM_ROLE_X_FPROP
 * (x, for fprop and wgrad) or MXSIM_ROLE_DY_DGRAD (dy, for dgrad and wgrad);
 * scale 1 until the first update. Refused for other recipes. */
MXSIM_C_EXPORT mxsim_status mxsim_linear_recipe_delayed_scaling(const mxsim_linear_recipe* recipe, int32_t role,
                                                                mxsim_delayed_scaling** out, mxsim_error* err);
MXSIM_C_EXPORT void mxsim_delayed_scaling_destroy(mxsim_delayed_scaling* state);
/** Records the amax (max |x|, FP32) of one quantization of this step. */
MXSIM_C_EXPORT mxsim_status mxsim_delayed_scaling_record(mxsim_delayed_scaling* state, float amax, mxsim_error* err);
/** End of a step: the new scale from the history, then the history rolls. */
MXSIM_C_EXPORT mxsim_status mxsim_delayed_scaling_update(mxsim_delayed_scaling* state, mxsim_error* err);
/** base (the role's per-tensor FP32 spec) with the state's current scale (a new spec). */
MXSIM_C_EXPORT mxsim_status mxsim_delayed_scaling_spec(const mxsim_delayed_scaling* state, const mxsim_spec* base,
                                                       mxsim_spec** out, mxsim_error* err);
/** The current scale (x is multiplied by it before the cast). */
MXSIM_C_EXPORT mxsim_status mxsim_delayed_scaling_scale(const mxsim_delayed_scaling* state, float* scale,
                                                        mxsim_error* err);

/** Block axis of 1-D blocks: along the last axis (rowwise), or down the
 * columns with the transpose stored (columnwise, TransformerEngine's). */
typedef enum mxsim_axis { MXSIM_AXIS_COLS = 0, MXSIM_AXIS_ROWS = 1 } mxsim_axis;

/** Kind of a quantized tensor's block scales. */
typedef enum mxsim_scale_kind {
  MXSIM_SCALE_E8M0 = 0,  /**< one byte per block, 2^(byte - 127) */
  MXSIM_SCALE_FP32 = 1,  /**< one float32 scale_inv per block (x ~= code * scale_inv) */
  MXSIM_SCALE_UE4M3 = 2  /**< one E4M3 byte per block and a float32 tensor scale (NVFP4) */
} mxsim_scale_kind;

/** The storage of a quantized [groups, rows, cols] tensor (quantized_tensor.hpp):
 * codes uint8 [groups, srows, row_bytes] (E2M1: two per byte, the even
 * element in the low nibble, torch.float4_e2m1fn_x2's packing); scales
 * [groups, scale_rows, scale_cols] of uint8 (E8M0, UE4M3) or float32. */
typedef struct mxsim_qlayout {
  int64_t groups, rows, cols; /**< logical */
  int32_t transposed;         /**< storage holds each group's transpose */
  int32_t scale_kind;         /**< mxsim_scale_kind */
  int64_t srows, scols;       /**< storage extents in elements */
  int64_t row_bytes;          /**< bytes of one storage row of codes */
  int64_t scale_rows, scale_cols;
  int32_t elem_bits;          /**< bits of one element code (4, 6 or 8) */
  int32_t has_tensor_scale;   /**< 1: a float32 tensor scale_inv follows (NVFP4) */
} mxsim_qlayout;

MXSIM_C_EXPORT mxsim_status mxsim_quant_layout(const mxsim_spec* spec, int64_t groups, int64_t rows, int64_t cols,
                                               int32_t axis, mxsim_qlayout* out, mxsim_error* err);

/** A quantized tensor in caller memory: its spec and layout, codes
 * (uint8, layout.groups * srows * row_bytes bytes), scales (uint8 or
 * float32, groups * scale_rows * scale_cols elements) and, for NVFP4, the
 * float32 tensor scale_inv (one element; NULL otherwise). */
typedef struct mxsim_qtensor {
  const mxsim_spec* spec;
  mxsim_qlayout layout;
  DLTensor data;
  DLTensor scale;
  const DLTensor* tensor_scale;
} mxsim_qtensor;

/* ------------------------------------------------------------------ ops */

/** Quantizes x (float32, or bfloat16 / float16 widened exactly; [rows, cols]
 * or [groups, rows, cols]) by spec with blocks along axis, into out's codes,
 * scales and tensor scale, whose layout must be mxsim_quant_layout's for x's
 * shape (out->layout is checked against it). Stochastic rounding draws the
 * Philox words of element i of x at seed / sr_stream (docs/numerics.md §2.5),
 * as the command line does. */
MXSIM_C_EXPORT mxsim_status mxsim_quantize(const DLTensor* x, const mxsim_spec* spec, int32_t axis,
                                           mxsim_qtensor* out, void* stream, mxsim_error* err);

/** The wgrad operands of x [M, C] (float32; bfloat16 / float16 widened exactly
 * on the CPU): the `groups` row slices of m_splits (host values, >= 0, sum M),
 * each quantized on its own down its columns (MXSIM_AXIS_ROWS, stored
 * transposed), so no block crosses a group and none is padded. out[g] is laid
 * out as mxsim_quant_layout(spec, 1, m_splits[g], C, MXSIM_AXIS_ROWS) gives.
 * Stochastic rounding draws the words of each element's index in the whole
 * [M, C] tensor (slice g starts at m0 * C), as the simulator and the command
 * line do. On CUDA the groups are quantized in batched launches. */
MXSIM_C_EXPORT mxsim_status mxsim_quantize_grouped_colwise(const DLTensor* x, const int64_t* m_splits, size_t groups,
                                                           const mxsim_spec* spec, mxsim_qtensor* out, void* stream,
                                                           mxsim_error* err);

/** Exact dequantization of q into out (float32, or on the CPU bfloat16 rounded
 * RNE once; q's logical shape, or [rows, cols] when groups = 1). */
MXSIM_C_EXPORT mxsim_status mxsim_dequantize(const mxsim_qtensor* q, DLTensor* out, void* stream, mxsim_error* err);

/** Error statistics of q against its source x (docs/numerics.md §4.6; core's
 * QuantStats): sums in FP64 over the row-major logical order; for a Hadamard
 * spec the reference is H x. The four error fields are NaN when no element
 * could be compared. */
typedef struct mxsim_qstats {
  uint64_t count, nonfinite_in, nan_out, underflow, saturated;
  double mse, max_abs_err, signal_power, sqnr_db;
  double mean_err;                /**< mean of d - x over the compared elements (the bias; NaN as mse) */
  uint64_t rounded, rounded_up;   /**< rounding choices (E8M0 / UE4M3 scales): between two grid values; took the upper */
  double expected_up;             /**< sum of their stochastic-rounding probabilities of the upper one */
  float tensor_scale_inv;         /**< q's FP32 per-tensor decode scale (NVFP4's S_dec), copied; 1 for
                                       one-level scales, NaN where nothing was recorded */
} mxsim_qstats;

/** One block's statistics (storage order: group, block row, block column). */
typedef struct mxsim_block_stat {
  float amax;        /**< source amax of the block (NaN if it holds one) */
  int32_t scale_exp; /**< E8M0: the exponent; FP32 / UE4M3: floor(log2 scale_inv); INT32_MIN for NaN */
  double sq_err, sq_src;
  uint64_t count, saturated, underflow;
} mxsim_block_stat;

/** Statistics of CPU tensors x (float32 / bfloat16 / float16, q's logical
 * shape) and q. CUDA tensors: MXSIM_ERR_UNSUPPORTED (not computed on the
 * device yet; mxsim.torch copies them to the host, documented). */
MXSIM_C_EXPORT mxsim_status mxsim_quant_stats(const DLTensor* x, const mxsim_qtensor* q, mxsim_qstats* out,
                                              mxsim_error* err);
/** The histogram of q's block scale exponents (core's ScaleExpCounts, the
 * trace's scale_exp_hist): out[256], bin 127 + e for scale exponent e clamped
 * to [-127, 127], NaN scales in bin 255. On CUDA the scales (one per block)
 * are copied to the host after `stream`'s work; the codes are not read. */
MXSIM_C_EXPORT mxsim_status mxsim_scale_exp_histogram(const mxsim_qtensor* q, void* stream, uint64_t* out,
                                                      mxsim_error* err);
/** The trace's block maps of q against its source x (CPU tensors; sim/maps.hpp
 * block_maps: per block of the recipe's logical grid mse, sqnr_db, amax as
 * float32, the scale as its byte or FP32 scale_inv, and the element codes one
 * per byte in the logical layout): n_blocks floats or scales each, n_codes
 * codes (q's logical element count). */
MXSIM_C_EXPORT mxsim_status mxsim_block_maps(const DLTensor* x, const mxsim_qtensor* q, float* mse, float* sqnr_db,
                                             float* amax, void* scale, size_t n_blocks, uint8_t* codes, size_t n_codes,
                                             mxsim_error* err);
/** n must be the number of blocks: groups * scale_rows * scale_cols of q's layout. */
MXSIM_C_EXPORT mxsim_status mxsim_block_stats(const DLTensor* x, const mxsim_qtensor* q, mxsim_block_stat* out,
                                              size_t n, mxsim_error* err);

/** A grouped GEMM's operand: a quantized tensor, or a BF16 tensor (bfloat16,
 * or float32 values that are rounded to BF16 RNE first), [groups, rows,
 * cols] or [rows, cols] for one group. Exactly one of the two is set. */
typedef struct mxsim_gemm_operand {
  const mxsim_qtensor* q;
  const DLTensor* bf16;
} mxsim_gemm_operand;

typedef enum mxsim_gemm_form {
  MXSIM_FPROP = 0, /**< out[M, N] = a[M, K] . b[g][N, K]^T (a along K; b rowwise or 2-D) */
  MXSIM_DGRAD = 1, /**< out[M, K] = a[M, N] . b[g][N, K] (a along N; b columnwise or 2-D) */
  MXSIM_WGRAD = 2  /**< out[g][N, K] (+)= a_g[M_g, N]^T . b_g[M_g, K]: na = nb = groups, one operand per group */
} mxsim_gemm_form;

/** The grouped GEMM of docs/numerics.md §5 with TransformerEngine's m_splits
 * (host values, `groups` of them): fprop / dgrad take one token operand a and
 * the weights b ([G, ., .]); wgrad takes one operand per group on each side.
 * out: float32 (the FP32 accumulator, or rounded once to BF16 when out_bf16)
 * or, on the CPU, bfloat16 (rounded once, RNE). A BF16 operand on CUDA must be
 * bfloat16 (read in place). accumulate: add into out (an FP32
 * main_grad) instead of overwriting it; wgrad's groups without tokens then
 * leave out[g] unchanged (else +0). */
MXSIM_C_EXPORT mxsim_status mxsim_grouped_gemm(int32_t form, const mxsim_gemm_operand* a, size_t na,
                                               const mxsim_gemm_operand* b, size_t nb, const int64_t* m_splits,
                                               size_t groups, DLTensor* out, int32_t out_bf16, int32_t accumulate,
                                               void* stream, mxsim_error* err);

/** NVFP4's decode tensor scale S_dec from a tensor's amax (docs/numerics.md
 * §3.3: S_enc = 448 * 6 / amax, S_dec = fl32(1 / S_enc); NaN for a non-finite
 * amax): what TransformerEngine's NVFP4Tensor keeps as its amax becomes the
 * tensor_scale of a quantized tensor here. */
MXSIM_C_EXPORT mxsim_status mxsim_nvfp4_decode_scale(float amax, float* s_dec, mxsim_error* err);

/** The shape of mxsim_grouped_gemm's output for these operands ([M, N] /
 * [M, K], *ndim = 2; wgrad [groups, N, K], *ndim = 3) into shape[0..2],
 * the call checked as mxsim_grouped_gemm checks it (but for its output). */
MXSIM_C_EXPORT mxsim_status mxsim_grouped_gemm_out_shape(int32_t form, const mxsim_gemm_operand* a, size_t na,
                                                         const mxsim_gemm_operand* b, size_t nb,
                                                         const int64_t* m_splits, size_t groups, int64_t* shape,
                                                         int32_t* ndim, mxsim_error* err);

/* ---- The trace recorder (mxsim.torch.Recorder; docs/trace-format.md) -------
 * Writes the trace `mxsim train` writes, for any model's layers: the series of
 * a run plan, declared from core's one list (sim/recorder.hpp RunPlan, the
 * simulator's recorder uses the same), rows appended once per optimizer step
 * and written on a writer thread, SWMR so that mxsim-inspector follows the
 * file live, complete up to the last appended step if the process dies. The
 * file appears at path + ".partial" and is renamed to path when created. A
 * recorder is used by one thread at a time. */
typedef struct mxsim_recorder mxsim_recorder;

typedef struct mxsim_layer_plan {
  const char* name;   /**< the layer's name in the trace, /layers/<name>: a module name (no '/') */
  const char* recipe; /**< its recipe's name (NULL: none), the group's attribute */
  const char* module; /**< the module's class (NULL: none), the group's attribute */
  int64_t groups, out_features, in_features; /**< weight [G, N, K] (G = 1 for a plain linear) */
  int32_t quantized;  /**< the quant (w, x, dy) and osc series */
  int32_t deosc;      /**< deosc/snapped series */
  int32_t snapshots;  /**< snapshots at the plan's snapshot steps (master, weight_q, main_grad; W's maps) */
  int32_t snapshot_wgrad_mb; /**< with them each micro-batch's wgrad contribution (wgrad_mb) */
  int64_t watch;      /**< watched elements W of a quantized layer (the watch series; 0: none) */
  int32_t grad_added; /**< the grad_added_to_main_grad series (layers whose weights carry main_grad) */
  int32_t shadow[3];  /**< per mxsim_gemm_form: the shadow/<gemm>/... series (that GEMM's output against the
                           same GEMM on BF16 operands, one entry per micro-batch) */
  int32_t tensor_scale[3]; /**< w, x, dy of a quantized layer: the quant/<op>/tensor_scale_inv series (an
                                operand with a two-level scale: mxsim_linear_recipe_info.two_level_scale) */
} mxsim_layer_plan;

typedef struct mxsim_run_plan {
  const char* config_toml;  /**< stored as the trace's config_toml (the recorder's settings; NULL: "") */
  const char* model;        /**< the model's class, the trace's `model` attribute */
  const char* backend;      /**< "emu" (CPU tensors) or "hip" (CUDA tensors) */
  uint64_t seed;
  int64_t micro_batches;    /**< rows of main_grad_norm per step (>= 1) */
  int64_t experts;          /**< columns of /train/tokens_per_expert [micro_batches, experts]; 0: not written */
  const char* const* scalars; /**< names of further f64 series /train/<name> */
  size_t n_scalars;
  const mxsim_layer_plan* layers;
  size_t n_layers;
  const int64_t* snapshot_steps; /**< global steps taking snapshots (NULL: none) */
  size_t n_snapshot_steps;
  int64_t first_step;            /**< the global step of the trace's first row */
} mxsim_run_plan;

/** A GEMM's output against the same GEMM on BF16 operands (quant_stats.hpp
 * OutputError, numerics.md §4.8): elements, those NaN / Inf in either (not
 * compared), relative L2 error, SQNR in dB, the largest |difference| and the
 * first flat index where it occurs (-1: none). */
typedef struct mxsim_output_error {
  uint64_t count, nonfinite;
  double rel_l2, sqnr_db, max_abs_err;
  int64_t max_index;
} mxsim_output_error;

/** One step's oscillation metrics of a quantized weight (Backend::OscStep). */
typedef struct mxsim_osc_step {
  uint64_t flips, flips_total;
  double ema_mean, ema_frac_above, dist_ratio_mean;
} mxsim_osc_step;

/** One layer's row: main_grad_norm [micro_batches]; for quantized layers the
 * statistics of w, x, dy (micro-batch 0 of the step) with their scale
 * exponent histograms [256] and the oscillation metrics; for de-osc layers
 * the snaps of this step. Fields a layer's plan does not record are ignored. */
typedef struct mxsim_layer_row {
  const double* main_grad_norm;
  mxsim_qstats quant[3];
  const uint64_t* scale_exp_hist[3];
  mxsim_osc_step osc;
  int64_t snapped;
  /* watched elements (plans with watch > 0), [watch] each: the flat [G, N, K] index, the master,
   * the code, the block scale (its byte, or FP32 scale_inv for FP32-scaled recipes), the value the
   * fprop used, the cumulative flips and (de-osc layers) snaps */
  const int64_t* watch_element;
  const float* watch_master;
  const uint8_t* watch_code;
  const uint8_t* watch_scale_bytes;
  const float* watch_scale_inv;
  const float* watch_value;
  const uint32_t* watch_flips;
  const uint32_t* watch_snaps;
  const uint8_t* grad_added; /**< [micro_batches] (plans with grad_added) */
  const mxsim_output_error* shadow[3]; /**< per mxsim_gemm_form with the plan's shadow: [micro_batches] */
} mxsim_layer_row;

typedef struct mxsim_step_row {
  int64_t step;                  /**< global optimizer step, 1-based */
  double loss;
  float lr;
  const double* scalars;         /**< [n_scalars] of the plan, in its order */
  const int64_t* tokens_per_expert; /**< [micro_batches * experts] of the plan (NULL when experts is 0) */
  const mxsim_layer_row* layers; /**< [n_layers] of the plan, in its order */
} mxsim_step_row;

/** Creates the trace at path and declares every series of the plan. Errors:
 * a name the schema cannot hold (empty, '/'), a repeated name, an unwritable
 * path (the message names it); nothing is left at path then. */
MXSIM_C_EXPORT mxsim_status mxsim_recorder_create(const char* path, const mxsim_run_plan* plan, mxsim_recorder** out,
                                                  mxsim_error* err);
/** Queues one step's row (copied: the caller's arrays may go once this
 * returns). An error of an earlier row's write is reported here. */
MXSIM_C_EXPORT mxsim_status mxsim_recorder_append(mxsim_recorder* r, const mxsim_step_row* row, mxsim_error* err);
/** The snapshots step `step` takes (its row's, written before the row is
 * appended): *n = 0 when the step takes none, else the number of snapshot
 * datasets; mxsim_recorder_snapshot_key names each (its layer's index in the
 * plan and its kind, the path below /snap/<layer>/: "master", "weight_q",
 * "main_grad", "quant/w/block_mse", ..., "osc/flips", ...; docs/trace-format.md). */
MXSIM_C_EXPORT mxsim_status mxsim_recorder_snapshots(const mxsim_recorder* r, int64_t step, size_t* n,
                                                     mxsim_error* err);
MXSIM_C_EXPORT mxsim_status mxsim_recorder_snapshot_key(const mxsim_recorder* r, size_t i, int32_t* layer,
                                                        char* kind, size_t kind_cap, mxsim_error* err);
/** Writes step `step`'s snapshots: data[i] the CPU tensor of key i, its
 * bytes exactly the declared dtype and shape (float32 maps and tensors, uint8
 * codes and byte scales, uint32 counts). Call before appending the step's row. */
MXSIM_C_EXPORT mxsim_status mxsim_recorder_write_snapshots(mxsim_recorder* r, int64_t step, const DLTensor* const* data,
                                                           size_t n, mxsim_error* err);
/** Writes the queued rows and closes the file; reports any write that failed. */
MXSIM_C_EXPORT mxsim_status mxsim_recorder_close(mxsim_recorder* r, mxsim_error* err);
/** Closes (if still open, errors dropped) and frees r. NULL is a no-op. */
MXSIM_C_EXPORT void mxsim_recorder_destroy(mxsim_recorder* r);

/* ---- Statistics that keep state on a device (the recorder's; mxsim.torch.Recorder) ----
 * A context is one backend on one device (kDLCPU: the emulator; kDLCUDA: the
 * GPU backend on that device) that owns memory across calls, as ggml's
 * backends own their buffers: the oscillation state of recorded weights lives
 * there. Inputs are the caller's tensors on that device, read after the
 * caller's stream's work. On CUDA they are read in place (no copy, never a host
 * one) by work that everything the caller queues on that stream afterwards
 * waits for: they may change or be freed on that stream as soon as a call
 * returns (work on another stream must first wait for that one). Results are
 * host values: the statistics calls marked deferred deliver them at
 * mxsim_context_resolve, the others wait for theirs. A context is used by one
 * thread at a time. */
typedef struct mxsim_context mxsim_context;
MXSIM_C_EXPORT mxsim_status mxsim_context_create(DLDevice device, mxsim_context** out, mxsim_error* err);
/** NULL is a no-op. */
MXSIM_C_EXPORT void mxsim_context_destroy(mxsim_context* ctx);

/** Delivers every deferred result of the context's statistics calls
 * (mxsim_l2_norm, mxsim_context_quant_stats, mxsim_context_quant_elements,
 * mxsim_osc_metrics_update) into the caller's outputs, waiting
 * once for all of them; the outputs must stay valid until then. An error of the
 * queued work is reported here. */
MXSIM_C_EXPORT mxsim_status mxsim_context_resolve(mxsim_context* ctx, mxsim_error* err);

/** sqrt of the FP64 sum of squares of x's elements (float32, C-contiguous, any
 * rank) in mxsim's fixed tree order over the flat row-major index (Backend::
 * l2_norm; the simulator's main_grad_norm). Deferred: *out holds it after
 * mxsim_context_resolve (x is read as the context's inputs are: it may change on
 * `stream` once this returns). */
MXSIM_C_EXPORT mxsim_status mxsim_l2_norm(mxsim_context* ctx, const DLTensor* x, void* stream, double* out,
                                          mxsim_error* err);

/** quant_stats and the scale exponent histogram of q against its source x
 * (as mxsim_quant_stats and mxsim_scale_exp_histogram) computed by the
 * context's backend on its device: x (float32, q's logical shape) and q are
 * read as the context's inputs are. Deferred: *out and hist (NULL or 256
 * counts) hold them after mxsim_context_resolve. */
MXSIM_C_EXPORT mxsim_status mxsim_context_quant_stats(mxsim_context* ctx, const DLTensor* x, const mxsim_qtensor* q,
                                                      void* stream, mxsim_qstats* out, uint64_t* hist,
                                                      mxsim_error* err);

/** The OutputError of test against ref (float32, one element count, on the
 * context's device; read as the context's inputs are): a GEMM's output
 * against the same GEMM on BF16 operands (the recorder's shadow). Deferred:
 * *out holds it after mxsim_context_resolve. */
MXSIM_C_EXPORT mxsim_status mxsim_context_output_error(mxsim_context* ctx, const DLTensor* ref, const DLTensor* test,
                                                       void* stream, mxsim_output_error* out, mxsim_error* err);

/** Deferred (mxsim_context_resolve): elements idx (n flat indices into q's
 * logical [groups, rows, cols]) of q, read as the context's inputs are: their
 * codes, their blocks' scales (E8M0 / UE4M3 byte into scale_bytes, or FP32
 * scale_inv into scale_inv; the other 0) and exact values (Backend::
 * quant_elements_deferred). An index outside q is refused. */
MXSIM_C_EXPORT mxsim_status mxsim_context_quant_elements(mxsim_context* ctx, const mxsim_qtensor* q, const int64_t* idx,
                                                         size_t n, void* stream, uint8_t* code, uint8_t* scale_bytes,
                                                         float* scale_inv, float* value, mxsim_error* err);

/** The oscillation metrics of Nagel et al. 2022 (arXiv:2203.11086) of named
 * weights, as the simulator keeps them (sim/osc_metrics.hpp OscMetrics): EMA
 * momentum, and DistRatio's window of `period` steps. */
typedef struct mxsim_osc_metrics mxsim_osc_metrics;
MXSIM_C_EXPORT mxsim_status mxsim_osc_metrics_create(mxsim_context* ctx, float momentum, int64_t period,
                                                     mxsim_osc_metrics** out, mxsim_error* err);
/** NULL is a no-op. Destroy it before its context. */
MXSIM_C_EXPORT void mxsim_osc_metrics_destroy(mxsim_osc_metrics* m);
/** The per-element state of weight `name` as the trace's element maps hold
 * it (flips: cumulative oscillations; ema: EMA frequency; dist_ratio: dist_q /
 * max(dist_w, 1e-12) of the current window, 0 where dist_w = 0), n elements
 * each into host memory (zeros before the name's first update). */
MXSIM_C_EXPORT mxsim_status mxsim_osc_metrics_maps(mxsim_osc_metrics* m, const char* name, uint32_t* flips, float* ema,
                                                   float* dist_ratio, size_t n, mxsim_error* err);
/** One step of weight `name`: its master w and quantized value q (float32,
 * one shape, on the context's device; q the dequantized W the next fprop
 * uses). The first step of a name seeds its state. A shape that differs from
 * the name's earlier steps is refused. Deferred: *out holds the step's metrics
 * after mxsim_context_resolve (the state is updated in order before any later
 * call on it). */
MXSIM_C_EXPORT mxsim_status mxsim_osc_metrics_update(mxsim_osc_metrics* m, const char* name, const DLTensor* w,
                                                     const DLTensor* q, void* stream, mxsim_osc_step* out,
                                                     mxsim_error* err);

/** Primus's weight de-oscillation (the simulator's DeOsc: docs/simulator.md
 * "De-oscillation"; hd::deosc_observe / deosc_window_end) of named weights,
 * its state on the context's device: windows of `period` observations, snap
 * when dist_q / max(dist_w, 1e-12) >= ratio. */
typedef struct mxsim_deosc mxsim_deosc;
MXSIM_C_EXPORT mxsim_status mxsim_deosc_create(mxsim_context* ctx, int64_t period, float ratio, mxsim_deosc** out,
                                               mxsim_error* err);
/** NULL is a no-op. Destroy it before its context. */
MXSIM_C_EXPORT void mxsim_deosc_destroy(mxsim_deosc* d);
/** Elements idx (n flat indices) of weight `name`'s cumulative flips (zeros
 * before its first update); waits for them. */
MXSIM_C_EXPORT mxsim_status mxsim_osc_metrics_gather(mxsim_osc_metrics* m, const char* name, const int64_t* idx,
                                                     size_t n, uint32_t* flips, mxsim_error* err);
/** Elements idx of weight `name`'s de-oscillation snap counts (zeros before its
 * first window); waits for them. */
MXSIM_C_EXPORT mxsim_status mxsim_deosc_gather(mxsim_deosc* d, const char* name, const int64_t* idx, size_t n,
                                               uint32_t* snaps, mxsim_error* err);
/** The per-element de-oscillation snaps of weight `name` so far (n u32 into
 * host memory; zeros before its first window). */
MXSIM_C_EXPORT mxsim_status mxsim_deosc_snaps(mxsim_deosc* d, const char* name, uint32_t* snaps, size_t n,
                                              mxsim_error* err);
/** One observation of weight `name`: w (float32 master, read and, where an
 * element snaps, written in place: w = q) and q (float32, w's shape: its MXFP4
 * forward QDQ), on the context's device, ordered on `stream`. The first
 * observation of a name seeds its state. *snapped: the elements snapped at a
 * window end, -1 when this observation ended no window. */
MXSIM_C_EXPORT mxsim_status mxsim_deosc_observe(mxsim_deosc* d, const char* name, DLTensor* w, const DLTensor* q,
                                                void* stream, int64_t* snapped, mxsim_error* err);

/** Writes CPU tensors to a .safetensors file (core's writer: header padded to
 * 8 bytes, tensors back to back in the order given): names[i], dtypes[i] in
 * safetensors spelling ("F32", "BF16", "U8", "F8_E8M0", "F4", ...) with the
 * logical shape shapes[i] (ndims[i] extents), the bytes of tensors[i] (any
 * dtype, C-contiguous; their size must be the dtype's bytes for that shape),
 * and string metadata. The file is written whole or not at all. The kernel
 * checker writes its replay files with it (mxsim.torch.check_*). */
MXSIM_C_EXPORT mxsim_status mxsim_save_safetensors(const char* path, size_t n, const char* const* names,
                                                   const char* const* dtypes, const int64_t* const* shapes,
                                                   const int32_t* ndims, const DLTensor* const* tensors,
                                                   size_t n_meta, const char* const* meta_keys,
                                                   const char* const* meta_values, mxsim_error* err);

#ifdef __cplusplus
}
#endif
#endif /* MXSIM_C_API_H */
