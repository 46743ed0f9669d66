// Configuration of a training-simulator run (TOML; examples/default.toml is
// the documented default and is embedded in the binary). The member
// initializers below are the same values (SimConfig.DefaultsEqualTheDefaultText),
// so a config that omits a key gets the documented default.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mxsim/activation.hpp"
#include "mxsim/sim/layers.hpp"

namespace mxsim::sim {

/// Per-linear numerics recipe name: "bf16", "mxfp4", "mxfp8", "fp8_current",
/// "fp8_delayed", "fp8_block" (sim/recipe.hpp).
struct LinearRecipe;

struct RecipeConfig {
  std::string embed = "bf16", router = "bf16", fc1 = "mxfp4", fc2 = "mxfp4", head = "bf16";
  bool mxfp4_hadamard_wgrad = true;    ///< 16-point Hadamard on both wgrad operands
  bool mxfp4_sr_grad = false;          ///< stochastic rounding on dy (dgrad + wgrad)
  bool nvfp4_hadamard_wgrad = true;    ///< nvfp4: the random Hadamard transform on both wgrad operands
  bool nvfp4_sr_grad = true;           ///< nvfp4: stochastic rounding on dy (dgrad + wgrad)
  int fp8_amax_history = 16;           ///< fp8_delayed: amax history length
  int fp8_margin = 0;                  ///< fp8_delayed: scale = max / amax / 2^margin (integer >= 0, TE)
  /// Current scaling's FP32-scale parameters (docs/numerics.md §3.3) of every
  /// operand spec of the recipe: a = max(amax, amax_epsilon); pow2_scale rounds
  /// the scale down to a power of two. Defaults: Primus-Turbo's epsilons, general scales.
  float fp8_current_amax_epsilon = 1e-12f;  ///< fp8_current (Primus TENSORWISE)
  bool fp8_current_pow2_scale = false;
  float fp8_block_amax_epsilon = 1e-4f;     ///< fp8_block (Primus BLOCKWISE)
  bool fp8_block_pow2_scale = false;        ///< true: TE Float8BlockScaling's default
  /// Per-GEMM recipes of a layer (recipe.<layer>_fprop / _dgrad / _wgrad; docs/config.md): the
  /// recipe one GEMM runs as instead of the layer's; "" = the layer's. Indexed [layer][GemmForm].
  std::array<std::array<std::string, 3>, 5> per_gemm{};
  /// The recipe name of a layer (the field of the same name).
  std::string& of(Layer l) { return *fields()[size_t(l)]; }
  const std::string& of(Layer l) const { return *const_cast<RecipeConfig*>(this)->fields()[size_t(l)]; }
  /// A layer's recipe per GEMM, checked (sim::make_linear_recipe; its errors name the key).
  LinearRecipe linear(Layer l) const;

 private:
  std::array<std::string*, 5> fields() { return {&embed, &router, &fc1, &fc2, &head}; }
};

/// Documented upper bounds of the config's sizes (docs/simulator.md "Limits"); a larger value
/// is refused naming the key. Memory is bounded further by the run's estimate
/// (estimate_run_memory, sim/trainer.hpp), checked against the machine before allocating.
inline constexpr int kMaxDModel = 16384;       ///< model.d_model
inline constexpr int kMaxDFf = 65536;          ///< model.d_ff
inline constexpr int kMaxExperts = 1024;       ///< model.experts (top_k <= experts)
inline constexpr int kMaxGlobalBatch = 65536;  ///< batch.global_batch (num_microbatches divides it)
inline constexpr int kMaxAmaxHistory = 65536;  ///< recipe.fp8_amax_history (TE's default is 1024)
inline constexpr int kMaxRanks = 1024;         ///< parallel.ranks (divides model.experts <= 1024)

struct Config {
  // [run]
  uint64_t seed = 1234;
  int epochs = 3;
  int64_t max_steps = 0;       ///< 0 = epochs * steps_per_epoch; else a cap
  int64_t train_limit = 0;     ///< use only the first N training images (0 = all)
  int64_t test_limit = 0;      ///< evaluate on the first N test images (0 = all)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  // [model]
  int d_model = 128, d_ff = 256, experts = 8, top_k = 2;
  Activation activation = Activation::Relu;
  float aux_loss_coeff = 0.01f;
  // [batch]
  int global_batch = 256, num_microbatches = 4;
  // [optim]
  float lr = 2e-3f, min_lr = 1e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.01f;
  int64_t warmup_steps = 50;
  float init_std = 0.0f;  ///< 0 = 1/sqrt(fan_in)
  // [recipe]
  RecipeConfig recipe;
  // [deosc] (training-mechanics.md §6; Primus's own defaults are period 200,
  // ratio 4.0, start 0; this run's defaults are examples/default.toml's)
  bool deosc = true;
  int64_t deosc_period = 100, deosc_start_step = 200;
  float deosc_ratio = 4.0f;
  // [metrics]
  float osc_ema_momentum = 0.01f;  ///< Nagel et al. 2022 class default
  // [parallel] (docs/simulator.md "Parallel simulation")
  int ranks = 1;                   ///< P virtual ranks: experts / P per rank, P optimizer shards
  bool deosc_shard_edge = false;   ///< de-osc QDQ per rank's flat slice, zeros for the others' elements
  // [trace]
  std::vector<Layer> snapshot_layers = {Layer::Fc1};
  std::vector<int64_t> snapshot_steps = {2};  ///< global steps n (1-based, sim/step.hpp)
  int64_t checkpoint_every = 0;  ///< 0 = only at the end (if a checkpoint path is set)
  /// Flat indices into [G, N, K] (row-major) of the weight elements of every quantized snapshot
  /// layer whose master, quantized value, block scale, flips and snaps the trace records at
  /// every step (/layers/<l>/watch/*); each must lie inside every snapshot layer's weight.
  std::vector<int64_t> watch_elements = {0, 1, 2, 3, 4, 5, 6, 7};
  /// Layers whose quantized GEMMs each run a BF16 shadow (docs/simulator.md "BF16 shadow"): the
  /// same GEMM on the unquantized operands, compared with the quantized output per micro-batch
  /// (/layers/<l>/shadow/<gemm>/*). Reads the run's tensors, never writes them.
  std::vector<Layer> shadow_layers = {Layer::Fc1, Layer::Fc2};

  /// Steps per epoch (floor(N / global_batch)).
  int64_t steps_per_epoch(int64_t n_train) const { return n_train / global_batch; }
};

/// The embedded default config text (the same as examples/default.toml).
const char* default_config_text();

/// Parse TOML text into a Config starting from the defaults; apply `--set`
/// overrides ("section.key=value", value in TOML syntax, bare words taken as
/// strings). Throws std::invalid_argument naming the key and what was
/// expected for unknown keys, wrong types and impossible sizes.
Config parse_config(const std::string& toml_text, const std::vector<std::string>& overrides = {},
                    const std::string& source = "config");
/// Canonical TOML of a config (stored in the trace and checkpoints).
std::string to_toml(const Config& c);
/// Every key parse_config accepts, "section.key", sorted (docs/config.md lists them).
std::vector<std::string> config_keys();

}  // namespace mxsim::sim
