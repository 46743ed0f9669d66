// FP8 delayed scaling: an amax history per tensor and the scale derived from
// it, with TransformerEngine DelayedScaling semantics
// (transformer_engine/common/recipe/delayed_scaling.cu, docs
// fp8_delayed_scaling.rst; ../shared/reference/formats-and-scaling.md §9).
//
// Life cycle of one tensor's state over a training step:
//   1. spec(base) gives the QuantSpec to quantize with: `base` with
//      fixed_scale = scale() (the scale computed at the end of the previous
//      step; 1.0 before the first update). Values beyond fp8_max / scale clip
//      (elements saturate).
//   2. record(amax) after each quantization of the tensor in this step
//      (every micro-batch): slot 0 of the history becomes max(slot 0, amax).
//   3. update() once after the step:
//        amax_from_history = max over all slots (AmaxAlgo::Max) or slot 0
//                            (AmaxAlgo::MostRecent), taken before the roll;
//        scale = fl32(fl32(fp8_max / amax_from_history) / 2^margin), where
//                fp8_max is the largest finite value of the format (448 for
//                E4M3, 57344 for E5M2); +Inf becomes FLT_MAX; if the amax is
//                0, negative or not finite the previous scale is kept;
//        the history rolls by one toward lower slots (slot i takes slot i+1,
//        the last slot takes the old slot 0) and slot 0 is set to 0.
//
// All arithmetic is FP32 and deterministic. Not thread-safe.
#pragma once
#include <cstddef>
#include <string_view>
#include <vector>

#include "mxsim/format.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim {

/// How the amax is taken from the history (TE amax_compute_algo).
enum class AmaxAlgo : uint8_t {
  Max,         ///< "max": largest amax in the whole window (TE default)
  MostRecent,  ///< "most_recent": the amax of the step just finished
};
/// "max" or "most_recent"; throws std::invalid_argument naming the bad value.
AmaxAlgo amax_algo_from_name(std::string_view name);
const char* name_of(AmaxAlgo);

class DelayedScaling {
 public:
  /// fmt: the FP8 element format the scale serves (E4M3 forward, E5M2 for
  ///      gradients in TE's HYBRID); any element format with a finite max.
  /// history_len >= 1 (TE default 1024); margin >= 0 (TE default 0).
  /// Throws std::invalid_argument for history_len < 1, margin < 0, or a
  /// format that is not an element format (FP32, E8M0).
  explicit DelayedScaling(Format fmt = Format::E4M3, int history_len = 1024, int margin = 0,
                          AmaxAlgo algo = AmaxAlgo::Max);

  /// Record the amax (max |x|, FP32) of one quantization in this step.
  /// Negative input is taken as its magnitude; NaN sticks until update().
  void record(float amax);
  /// End of step: new scale from the history, then roll and zero slot 0.
  void update();

  float scale() const { return scale_; }          ///< multiply x by this before the cast
  float scale_inv() const { return 1.0f / scale_; }  ///< fl32(1 / scale): dequantization factor
  float fp8_max() const { return fp8_max_; }
  int margin() const { return margin_; }
  AmaxAlgo algo() const { return algo_; }
  Format format() const { return fmt_; }
  /// Slot 0 is the current step; slot i the step i updates ago.
  const std::vector<float>& history() const { return hist_; }

  /// `base` (FP32 per-tensor, e.g. tensor_recipe("fp8_tensor")) with
  /// elem = format() and fixed_scale = scale(). Throws std::invalid_argument
  /// when base is not FP32 per-tensor scaling.
  QuantSpec spec(QuantSpec base) const;

  /// Restore a saved state (checkpoint resume): `history` as history()
  /// returned it (same length as this object's), `scale` as scale() did.
  /// Throws std::invalid_argument for a length mismatch or a scale that is
  /// not finite and > 0 with a finite 1 / scale (update() never produces one).
  void restore(const std::vector<float>& history, float scale);

 private:
  Format fmt_;
  int margin_;
  AmaxAlgo algo_;
  float fp8_max_;
  float scale_ = 1.0f;
  std::vector<float> hist_;
};

}  // namespace mxsim
