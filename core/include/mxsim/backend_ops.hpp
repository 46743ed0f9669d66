// The one list of mxsim::Backend's operations (the X-macro pattern of LLVM's
// .def files). Everything that names the op set is generated from it:
//   - Backend::Op, the op families (verify's unit, named as `mxsim verify --op` takes them);
//   - Backend's public ops, each checking its operands once (core/src/backend_checks.cpp)
//     and then calling the protected virtual <name>_impl;
//   - the backends' override declarations (MXSIM_BACKEND_DECLARE_IMPL);
//   - the ProfilingBackend's forwarding and its row names;
//   - verify's registry (verify_<family> per family; a missing one does not compile).
// Adding an op: a row here, its check in backend_checks.cpp, its <name>_impl in each backend,
// and, for a new family, its verify_<family> in verify.cpp.
//
// MXSIM_BACKEND_FAMILIES(F): F(Family, name)
//   Family: the Backend::Op enumerator; name: the op's name in `mxsim verify --op`.
//
// MXSIM_BACKEND_OPS(X) / MXSIM_BACKEND_DEFAULTED_OPS(X): X(Family, id, name, label, Ret, (params), (args))
//   id: unique per row (overloads share `name`), names the check `check_<id>`;
//   label: the row's name in the profiler's table; (params): the C++ parameter list, (args):
//   the same names as a call's argument list.
// The first list is pure virtual in Backend (every backend implements it); the second has a
// default in core/src/backend.cpp (staging through the host, or computing at once) that a
// backend may override.
//
// Shapes and conventions of each op are in backend.hpp's comments beside the row's name.
#pragma once

#define MXSIM_BACKEND_FAMILIES(F)                                                                          \
  F(Memory, memory)                                                                                        \
  F(Quantize, quantize)                                                                                    \
  F(QuantizeGrouped, quantize_grouped)                                                                     \
  F(Dequantize, dequantize)                                                                                \
  F(QuantStats, quant_stats)                                                                               \
  F(ScaleExpHistogram, scale_exp_histogram)                                                                \
  F(Amax, amax)                                                                                            \
  F(RoundBf16, round_bf16)                                                                                 \
  F(GemmQuantized, gemm_quantized)                                                                         \
  F(GemmBf16, gemm_bf16)                                                                                   \
  F(AccumulateGroups, accumulate_groups)                                                                   \
  F(Softmax, softmax)                                                                                      \
  F(Topk, topk)                                                                                            \
  F(Route, route)                                                                                          \
  F(Permute, permute)                                                                                      \
  F(Combine, combine)                                                                                      \
  F(CombineBackward, combine_backward)                                                                     \
  F(AuxLoss, aux_loss)                                                                                     \
  F(RouterBackward, router_backward)                                                                       \
  F(EmbedGradSum, embed_grad_sum)                                                                          \
  F(Activation, activation)                                                                                \
  F(ActivationGrad, activation_grad)                                                                       \
  F(CrossEntropy, cross_entropy)                                                                           \
  F(ArgmaxRows, argmax_rows)                                                                               \
  F(CountCorrect, count_correct)                                                                           \
  F(L2Norm, l2_norm)                                                                                       \
  F(AdamW, adamw)                                                                                          \
  F(DeOsc, deosc)                                                                                          \
  F(OscMetrics, osc_metrics)                                                                               \
  F(OutputError, output_error)

#define MXSIM_BACKEND_OPS(X)                                                                               \
  X(Memory, alloc, alloc, "alloc", Tensor, (DType dtype, Shape shape), (dtype, shape))                     \
  X(Memory, upload, upload, "upload", void, (Tensor & t, const void* src, size_t bytes), (t, src, bytes))  \
  X(Memory, download, download, "download", void, (const Tensor& t, void* dst, size_t bytes), (t, dst, bytes)) \
  X(Memory, copy, copy, "copy", void, (const Tensor& src, Tensor& dst), (src, dst))                        \
  X(Memory, copy_into, copy_into, "copy_into", void, (const Tensor& src, Tensor& dst, size_t offset),      \
    (src, dst, offset))                                                                                    \
  X(Memory, fill_zero, fill_zero, "fill_zero", void, (Tensor & t), (t))                                    \
  X(Memory, download_q, download, "download (quantized)", QuantizedTensor, (const QTensor& q), (q))        \
  X(Memory, upload_q, upload, "upload (quantized)", QTensor, (const QuantizedTensor& q), (q))              \
  X(Memory, download_grouped_q, download, "download (grouped quantized)", std::vector<QuantizedTensor>,    \
    (const GroupedQTensor& q), (q))                                                                        \
  X(Quantize, quantize, quantize, "quantize", QTensor, (const Tensor& x, const QuantSpec& spec, Axis axis), \
    (x, spec, axis))                                                                                       \
  X(QuantizeGrouped, quantize_grouped_colwise, quantize_grouped_colwise, "quantize_grouped_colwise",       \
    GroupedQTensor, (const Tensor& x, std::span<const int64_t> m_splits, const QuantSpec& spec),           \
    (x, m_splits, spec))                                                                                   \
  X(Dequantize, dequantize, dequantize, "dequantize", void, (const QTensor& q, Tensor& out), (q, out))     \
  X(QuantStats, quant_stats, quant_stats, "quant_stats", QuantStats, (const Tensor& x, const QTensor& q),  \
    (x, q))                                                                                                \
  X(ScaleExpHistogram, scale_exp_histogram, scale_exp_histogram, "scale_exp_histogram", ScaleExpCounts,    \
    (const QTensor& q), (q))                                                                               \
  X(Amax, amax, amax, "amax", float, (const Tensor& x), (x))                                               \
  X(RoundBf16, round_bf16, round_bf16, "round_bf16", void, (Tensor & x), (x))                              \
  X(RoundBf16, round_bf16_to, round_bf16, "round_bf16 (to dst)", void, (const Tensor& src, Tensor& dst),   \
    (src, dst))                                                                                            \
  X(GemmQuantized, fprop_q, grouped_fprop, "grouped_fprop (quantized)", void,                              \
    (const QTensor& x, const QTensor& w, std::span<const int64_t> m_splits, Tensor& y, const GemmOptions& o), \
    (x, w, m_splits, y, o))                                                                                \
  X(GemmBf16, fprop_bf16, grouped_fprop, "grouped_fprop (bf16)", void,                                     \
    (const Tensor& x, const Tensor& w, std::span<const int64_t> m_splits, Tensor& y, const GemmOptions& o), \
    (x, w, m_splits, y, o))                                                                                \
  X(GemmQuantized, dgrad_q, grouped_dgrad, "grouped_dgrad (quantized)", void,                              \
    (const QTensor& dy, const QTensor& w, std::span<const int64_t> m_splits, Tensor& dx, const GemmOptions& o), \
    (dy, w, m_splits, dx, o))                                                                              \
  X(GemmBf16, dgrad_bf16, grouped_dgrad, "grouped_dgrad (bf16)", void,                                     \
    (const Tensor& dy, const Tensor& w, std::span<const int64_t> m_splits, Tensor& dx, const GemmOptions& o), \
    (dy, w, m_splits, dx, o))                                                                              \
  X(GemmQuantized, wgrad_q, grouped_wgrad, "grouped_wgrad (quantized)", void,                              \
    (const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> m_splits, Tensor& dw,     \
     const GemmOptions& o),                                                                                \
    (dy, x, m_splits, dw, o))                                                                              \
  X(GemmBf16, wgrad_bf16, grouped_wgrad, "grouped_wgrad (bf16)", void,                                     \
    (const Tensor& dy, const Tensor& x, std::span<const int64_t> m_splits, Tensor& dw, const GemmOptions& o), \
    (dy, x, m_splits, dw, o))                                                                              \
  X(AccumulateGroups, accumulate_groups, accumulate_groups, "accumulate_groups", void,                     \
    (Tensor & acc, const Tensor& x, std::span<const int64_t> m_splits), (acc, x, m_splits))                \
  X(Softmax, softmax_rows, softmax_rows, "softmax_rows", void, (const Tensor& logits, Tensor& p), (logits, p)) \
  X(Topk, topk_rows, topk_rows, "topk_rows", void, (const Tensor& p, int k, Tensor& top), (p, k, top))     \
  X(Route, moe_route, moe_route, "moe_route", void,                                                        \
    (const Tensor& top, size_t E, int64_t pad, Tensor& counts, Tensor& row_of), (top, E, pad, counts, row_of)) \
  X(Permute, permute_rows, permute_rows, "permute_rows", void,                                             \
    (const Tensor& src, const Tensor& row_of, size_t k, Tensor& dst), (src, row_of, k, dst))               \
  X(Combine, unpermute_combine, unpermute_combine, "unpermute_combine", void,                              \
    (const Tensor& yp, const Tensor& h0, const Tensor& p, const Tensor& top, const Tensor& row_of, size_t k, \
     Tensor& h1),                                                                                          \
    (yp, h0, p, top, row_of, k, h1))                                                                       \
  X(CombineBackward, combine_backward, combine_backward, "combine_backward", void,                         \
    (const Tensor& dh1, const Tensor& yp, const Tensor& p, const Tensor& top, const Tensor& row_of, size_t k, \
     Tensor& dyp, Tensor& dgate),                                                                          \
    (dh1, yp, p, top, row_of, k, dyp, dgate))                                                              \
  X(AuxLoss, aux_loss, aux_loss, "aux_loss", double,                                                       \
    (const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f), (p, counts, k, coeff, f))   \
  X(RouterBackward, router_backward, router_backward, "router_backward", void,                             \
    (const Tensor& p, const Tensor& top, const Tensor& dgate, const Tensor& f, float aux_grad, size_t k,   \
     Tensor& dlogits),                                                                                     \
    (p, top, dgate, f, aux_grad, k, dlogits))                                                              \
  X(EmbedGradSum, embed_grad_sum, embed_grad_sum, "embed_grad_sum", void,                                  \
    (const Tensor& dh1, const Tensor& dh0_router, const Tensor& dxp, const Tensor& row_of, size_t k,       \
     Tensor& dh0),                                                                                         \
    (dh1, dh0_router, dxp, row_of, k, dh0))                                                                \
  X(Activation, activation, activation, "activation", void, (Activation kind, const Tensor& u, Tensor& a), \
    (kind, u, a))                                                                                          \
  X(ActivationGrad, activation_grad, activation_grad, "activation_grad", void,                             \
    (Activation kind, const Tensor& u, const Tensor& da, Tensor& du), (kind, u, da, du))                   \
  X(CrossEntropy, cross_entropy, cross_entropy, "cross_entropy", double,                                   \
    (const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits),                       \
    (logits, labels, grad_scale, dlogits))                                                                 \
  X(ArgmaxRows, argmax_rows, argmax_rows, "argmax_rows", void, (const Tensor& logits, Tensor& pred),       \
    (logits, pred))                                                                                        \
  X(CountCorrect, count_correct, count_correct, "count_correct", int64_t,                                  \
    (const Tensor& logits, const Tensor& labels), (logits, labels))                                        \
  X(L2Norm, l2_norm, l2_norm, "l2_norm", double, (const Tensor& x), (x))                                   \
  X(AdamW, adamw, adamw, "adamw", void,                                                                    \
    (Tensor & master, Tensor& m, Tensor& v, const Tensor& grad, const AdamW& h, Tensor& model_bf16),       \
    (master, m, v, grad, h, model_bf16))                                                                   \
  X(DeOsc, deosc_update, deosc_update, "deosc_update", int64_t,                                            \
    (Tensor & w, const Tensor& q, Tensor& prev, Tensor& prev_q, Tensor& dist_w, Tensor& dist_q,           \
     bool window_end, float ratio, Tensor* snaps),                                                         \
    (w, q, prev, prev_q, dist_w, dist_q, window_end, ratio, snaps))                                        \
  X(OscMetrics, osc_update, osc_update, "osc_update", OscStep,                                             \
    (const Tensor& w, const Tensor& q, OscState& s, float momentum, bool window_end),                      \
    (w, q, s, momentum, window_end))

#define MXSIM_BACKEND_DEFAULTED_OPS(X)                                                                     \
  X(Memory, upload_native, upload_native, "upload (native memory)", void,                          \
    (Tensor & t, const void* src, size_t bytes, void* src_stream), (t, src, bytes, src_stream))            \
  X(Memory, upload_native_q, upload_native, "upload quantized (native)", QTensor,                          \
    (const NativeQuantized& q, void* src_stream), (q, src_stream))                                         \
  X(Memory, download_native, download_native, "download (native memory)", void,                            \
    (const Tensor& t, void* dst, size_t bytes, void* dst_stream), (t, dst, bytes, dst_stream))             \
  X(Memory, borrow_native, borrow_native, "borrow (native memory)", Tensor,                                \
    (DType dtype, Shape shape, const void* src, void* src_stream), (dtype, shape, src, src_stream))        \
  X(Memory, borrow_native_q, borrow_native, "borrow quantized (native)", QTensor,                          \
    (const NativeQuantized& q, void* src_stream), (q, src_stream))                                         \
  X(Memory, release_native, release_native, "release (native memory)", void, (void* dst_stream),           \
    (dst_stream))                                                                                          \
  X(Memory, copy_range, copy_range, "copy_range", void,                                                    \
    (const Tensor& src, size_t src_offset, Tensor& dst, size_t dst_offset, size_t count),                  \
    (src, src_offset, dst, dst_offset, count))                                                             \
  X(Memory, gather_deferred, gather_deferred, "gather (watched elements)", void,                           \
    (const Tensor& t, std::span<const int64_t> idx, void* dst), (t, idx, dst))                             \
  X(Memory, quant_elements_deferred, quant_elements_deferred, "quant_elements (watched)", void,            \
    (const QTensor& q, std::span<const int64_t> idx, QuantElements* dst), (q, idx, dst))                   \
  X(Memory, resolve_deferred, resolve_deferred, "resolve_deferred", void, (), ())                          \
  X(QuantStats, quant_stats_deferred, quant_stats_deferred, "quant_stats (deferred)", void,                \
    (const Tensor& x, const QTensor& q, QuantStats* dst), (x, q, dst))                                     \
  X(ScaleExpHistogram, scale_exp_histogram_deferred, scale_exp_histogram_deferred,                         \
    "scale_exp_hist (deferred)", void, (const QTensor& q, ScaleExpCounts* dst), (q, dst))             \
  X(AuxLoss, aux_loss_deferred, aux_loss_deferred, "aux_loss (deferred)", void,                            \
    (const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f, double* dst),                \
    (p, counts, k, coeff, f, dst))                                                                         \
  X(CrossEntropy, cross_entropy_deferred, cross_entropy_deferred, "cross_entropy (deferred)", void,        \
    (const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits, double* dst),          \
    (logits, labels, grad_scale, dlogits, dst))                                                            \
  X(CountCorrect, count_correct_deferred, count_correct_deferred, "count_correct (deferred)", void,        \
    (const Tensor& logits, const Tensor& labels, int64_t* dst), (logits, labels, dst))                     \
  X(L2Norm, l2_norm_deferred, l2_norm_deferred, "l2_norm (deferred)", void, (const Tensor& x, double* dst), \
    (x, dst))                                                                                              \
  X(Amax, amax_deferred, amax_deferred, "amax (deferred)", void, (const Tensor& x, float* dst), (x, dst))   \
  X(OutputError, output_error_deferred, output_error_deferred, "output_error (deferred)", void,            \
    (const Tensor& ref, const Tensor& test, OutputError* dst), (ref, test, dst))                           \
  X(OscMetrics, osc_update_deferred, osc_update_deferred, "osc_update (deferred)", void,                   \
    (const Tensor& w, const Tensor& q, OscState& s, float momentum, bool window_end, OscStep* dst),        \
    (w, q, s, momentum, window_end, dst))

/// In a backend's class body: the override declaration of one row's <name>_impl.
#define MXSIM_BACKEND_DECLARE_IMPL(Family, id, name, label, Ret, params, args) Ret name##_impl params override;
