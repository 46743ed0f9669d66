// Config parsing (toml++), validation, canonical TOML output.
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/recipe.hpp"

#include <cfloat>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include <toml++/toml.h>

#include "mxsim/io/tensor_file.hpp"
#include "mxsim/io/toml_nesting.hpp"

namespace mxsim::sim {

// Kept identical to examples/default.toml by SimConfig.DefaultTextMatchesExample
// (tests/test_sim_train.cpp).
static const char* const kDefault = R"TOML(# mxsim train: default configuration (embedded in the binary; a test keeps
# this file and the embedded text identical). Keys: docs/simulator.md.

[run]
seed = 1234
epochs = 3
max_steps = 0            # 0 = all steps of all epochs
train_limit = 0          # 0 = all 60000 training images
test_limit = 0           # 0 = all 10000 test images
data_dir = "/usr/share/datasets/fashion-mnist"

[model]
d_model = 128
d_ff = 256
experts = 8
top_k = 2
activation = "relu"      # relu | gelu | silu
aux_loss_coeff = 0.01    # Switch/GShard load-balancing loss: coeff * E * sum_e f_e * P_e

[batch]
global_batch = 256
num_microbatches = 4

[optim]
lr = 0.002
min_lr = 0.0001
beta1 = 0.9
beta2 = 0.95
eps = 1e-8
weight_decay = 0.01
warmup_steps = 50        # linear warm-up, then cosine to min_lr

[recipe]                 # per linear: bf16 | mxfp4 | mxfp8 | fp8_current | fp8_delayed | fp8_block
                         # per GEMM: <layer>_fprop / _dgrad / _wgrad = a recipe (e.g. fc1_wgrad = "mxfp8")
embed = "bf16"
router = "bf16"
fc1 = "mxfp4"
fc2 = "mxfp4"
head = "bf16"
mxfp4_hadamard_wgrad = true
mxfp4_sr_grad = false
fp8_amax_history = 16
fp8_margin = 0           # integer, scale = fp8_max / amax / 2^margin
fp8_current_amax_epsilon = 1e-12   # amax used = max(amax, eps) (Primus-Turbo)
fp8_current_pow2_scale = false
fp8_block_amax_epsilon = 1e-4
fp8_block_pow2_scale = false       # true: TE Float8BlockScaling's power-of-two scales

[deosc]                  # Primus weight_deosc (MXFP4-forward weights only)
enable = true
period = 100
ratio = 4.0
start_step = 200

[metrics]
osc_ema_momentum = 0.01  # Nagel et al. 2022 EMA flip frequency

[parallel]               # virtual ranks: expert parallel + distributed optimizer (docs/simulator.md)
ranks = 1                # P; model.experts must divide by it
deosc_shard_edge = false # de-osc QDQ of each rank's flat slice with zeros for other ranks' elements (Primus)

[trace]
snapshot_layers = ["fc1"]
snapshot_steps = [2]       # global optimizer steps (1-based, as /train/step)
watch_elements = [0, 1, 2, 3, 4, 5, 6, 7]  # flat [G, N, K] indices recorded every step
shadow_layers = ["fc1", "fc2"]  # quantized GEMMs compared with the same GEMM on BF16 operands
checkpoint_every = 0
)TOML";

const char* default_config_text() { return kDefault; }

namespace {

[[noreturn]] void bad(const std::string& src, const std::string& key, const std::string& what) {
  throw std::invalid_argument(src + ": key '" + key + "': " + what);
}

/// A number as the message shows it: shortest round-trip digits.
std::string num(double v) {
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}
std::string num(float v) {  // the shortest digits of the float, not of its double
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}

/// (node, key, source): source names where the value came from (file or --set).
using Setter = std::function<void(const toml::node&, const std::string&, const std::string&)>;

/// An integer key in [lo, hi]; hi defaults to the largest value of the simulator's type. A
/// documented bound (config.hpp kMax*, docs/simulator.md "Limits") is named as such.
template <class T>
Setter int_setter(T& dst, int64_t lo, uint64_t hi = uint64_t(std::numeric_limits<T>::max())) {
  const bool documented = hi < uint64_t(std::numeric_limits<T>::max());
  return [&dst, lo, hi, documented](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value_exact<int64_t>();
    if (!v) bad(src, key, std::string("expected an integer, got ") + std::string(toml::impl::node_type_friendly_names[size_t(n.type())]));
    if (*v < lo) bad(src, key, "expected an integer >= " + std::to_string(lo) + ", got " + std::to_string(*v));
    if (uint64_t(*v) > hi)
      bad(src, key, "expected an integer <= " + std::to_string(hi) +
                        (documented ? " (the documented bound, docs/simulator.md \"Limits\")" : "") + ", got " +
                        std::to_string(*v));
    dst = T(*v);
  };
}
Setter float_setter(float& dst, double lo, bool strict) {
  return [&dst, lo, strict](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value<double>();  // integers are accepted as numbers
    if (!v || n.is_boolean() || n.is_string()) bad(src, key, "expected a number");
    const std::string range = std::string(strict ? "> " : ">= ") + num(lo);
    if (!std::isfinite(*v)) bad(src, key, "expected a finite number " + range + ", got " + num(*v));
    if (strict ? !(*v > lo) : !(*v >= lo)) bad(src, key, "expected a number " + range + ", got " + num(*v));
    // The simulator computes in FP32: validate the value it will use, not the TOML double.
    const float f = float(*v);
    if (!std::isfinite(f))
      bad(src, key, num(*v) + " overflows FP32 (the simulator's type; largest finite " + num(float(FLT_MAX)) + ")");
    if (f == 0.0f && *v != 0.0)
      bad(src, key, num(*v) + " becomes 0 in FP32 (the simulator's type; smallest positive " + num(float(FLT_TRUE_MIN)) + ")");
    if (strict ? !(f > float(lo)) : !(f >= float(lo)))
      bad(src, key, num(*v) + " becomes " + num(f) + " in FP32 (the simulator's type); expected a number " + range);
    dst = f;
  };
}
Setter bool_setter(bool& dst) {
  return [&dst](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value_exact<bool>();
    if (!v) bad(src, key, "expected true or false");
    dst = *v;
  };
}
Setter string_setter(std::string& dst) {
  return [&dst](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value_exact<std::string>();
    if (!v) bad(src, key, "expected a string");
    dst = *v;
  };
}
/// A recipe name or an alias of one (kRecipeAliases), kept as the recipe's own name.
Setter recipe_setter(std::string& dst) {
  return [&dst](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value_exact<std::string>();
    if (!v) bad(src, key, "expected a string");
    const std::string r = canonical_recipe_name(*v);
    if (r.empty()) bad(src, key, unknown_recipe_message(*v));
    dst = r;
  };
}
Setter activation_setter(Activation& dst) {
  return [&dst](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value_exact<std::string>();
    if (!v) bad(src, key, "expected a string");
    try {
      dst = activation_from_name(*v);
    } catch (const std::invalid_argument&) {
      bad(src, key, "expected one of relu, gelu, silu, got '" + *v + "'");
    }
  };
}
Setter layers_setter(std::vector<Layer>& dst) {
  return [&dst](const toml::node& n, const std::string& key, const std::string& src) {
    const auto* arr = n.as_array();
    if (!arr) bad(src, key, "expected an array");
    std::vector<Layer> out;
    for (const auto& e : *arr) {
      auto v = e.value_exact<std::string>();
      if (!v) bad(src, key, "expected an array of strings");
      Layer l;
      if (!layer_from_name(*v, l))
        bad(src, key, "expected layer names among embed, router, fc1, fc2, head; got '" + *v + "'");
      out.push_back(l);
    }
    dst = out;
  };
}
template <class T>
Setter list_setter(std::vector<T>& dst) {
  return [&dst](const toml::node& n, const std::string& key, const std::string& src) {
    const auto* arr = n.as_array();
    if (!arr) bad(src, key, "expected an array");
    std::vector<T> out;
    for (const auto& e : *arr) {
      if constexpr (std::is_same_v<T, std::string>) {
        auto v = e.value_exact<std::string>();
        if (!v) bad(src, key, "expected an array of strings");
        out.push_back(*v);
      } else {
        auto v = e.value_exact<int64_t>();
        if (!v || *v < 0) bad(src, key, "expected an array of non-negative integers");
        out.push_back(T(*v));
      }
    }
    dst = out;
  };
}

std::map<std::string, Setter> setters(Config& c) {
  std::map<std::string, Setter> m;
  m["run.seed"] = int_setter(c.seed, 0);
  m["run.epochs"] = int_setter(c.epochs, 1);
  m["run.max_steps"] = int_setter(c.max_steps, 0);
  m["run.train_limit"] = int_setter(c.train_limit, 0);
  m["run.test_limit"] = int_setter(c.test_limit, 0);
  m["run.data_dir"] = string_setter(c.data_dir);
  m["model.d_model"] = int_setter(c.d_model, 1, kMaxDModel);
  m["model.d_ff"] = int_setter(c.d_ff, 1, kMaxDFf);
  m["model.experts"] = int_setter(c.experts, 1, kMaxExperts);
  m["model.top_k"] = int_setter(c.top_k, 1);
  m["model.activation"] = activation_setter(c.activation);
  m["model.aux_loss_coeff"] = float_setter(c.aux_loss_coeff, 0, false);
  m["batch.global_batch"] = int_setter(c.global_batch, 1, kMaxGlobalBatch);
  m["batch.num_microbatches"] = int_setter(c.num_microbatches, 1, kMaxGlobalBatch);
  m["optim.lr"] = float_setter(c.lr, 0, true);
  m["optim.min_lr"] = float_setter(c.min_lr, 0, false);
  m["optim.beta1"] = float_setter(c.beta1, 0, false);
  m["optim.beta2"] = float_setter(c.beta2, 0, false);
  m["optim.eps"] = float_setter(c.eps, 0, true);
  m["optim.weight_decay"] = float_setter(c.weight_decay, 0, false);
  m["optim.warmup_steps"] = int_setter(c.warmup_steps, 0);
  m["optim.init_std"] = float_setter(c.init_std, 0, false);
  for (Layer l : kLayers) {
    m[std::string("recipe.") + name_of(l)] = recipe_setter(c.recipe.of(l));
    for (size_t g = 0; g < 3; ++g)
      m[std::string("recipe.") + name_of(l) + "_" + kGemmNames[g]] = recipe_setter(c.recipe.per_gemm[size_t(l)][g]);
  }
  m["recipe.mxfp4_hadamard_wgrad"] = bool_setter(c.recipe.mxfp4_hadamard_wgrad);
  m["recipe.mxfp4_sr_grad"] = bool_setter(c.recipe.mxfp4_sr_grad);
  m["recipe.nvfp4_hadamard_wgrad"] = bool_setter(c.recipe.nvfp4_hadamard_wgrad);
  m["recipe.nvfp4_sr_grad"] = bool_setter(c.recipe.nvfp4_sr_grad);
  m["recipe.fp8_amax_history"] = int_setter(c.recipe.fp8_amax_history, 1, kMaxAmaxHistory);
  m["recipe.fp8_margin"] = int_setter(c.recipe.fp8_margin, 0);
  m["recipe.fp8_current_amax_epsilon"] = float_setter(c.recipe.fp8_current_amax_epsilon, 0, false);
  m["recipe.fp8_current_pow2_scale"] = bool_setter(c.recipe.fp8_current_pow2_scale);
  m["recipe.fp8_block_amax_epsilon"] = float_setter(c.recipe.fp8_block_amax_epsilon, 0, false);
  m["recipe.fp8_block_pow2_scale"] = bool_setter(c.recipe.fp8_block_pow2_scale);
  m["deosc.enable"] = bool_setter(c.deosc);
  m["deosc.period"] = int_setter(c.deosc_period, 1);
  m["deosc.ratio"] = float_setter(c.deosc_ratio, 0, true);
  m["deosc.start_step"] = int_setter(c.deosc_start_step, 0);
  m["metrics.osc_ema_momentum"] = float_setter(c.osc_ema_momentum, 0, true);
  m["parallel.ranks"] = int_setter(c.ranks, 1, kMaxRanks);
  m["parallel.deosc_shard_edge"] = bool_setter(c.deosc_shard_edge);
  m["trace.snapshot_layers"] = layers_setter(c.snapshot_layers);
  m["trace.shadow_layers"] = layers_setter(c.shadow_layers);
  m["trace.snapshot_steps"] = list_setter(c.snapshot_steps);
  m["trace.checkpoint_every"] = int_setter(c.checkpoint_every, 0);
  m["trace.watch_elements"] = list_setter(c.watch_elements);
  return m;
}

void apply(const toml::table& t, std::map<std::string, Setter>& m, const std::string& src) {
  for (const auto& [sec, node] : t) {
    const std::string sname(sec.str());
    const auto* st = node.as_table();
    if (!st) bad(src, sname, "expected a table [" + sname + "] (keys are section.key)");
    for (const auto& [k, v] : *st) {
      const std::string key = sname + "." + std::string(k.str());
      auto it = m.find(key);
      if (it == m.end()) {
        std::string known;
        for (auto& [n, f] : m)
          if (n.rfind(sname + ".", 0) == 0) known += (known.empty() ? "" : ", ") + n;
        bad(src, key, "unknown key" + (known.empty() ? std::string(" (unknown section)") : "; known keys here: " + known));
      }
      it->second(v, key, src);
    }
  }
}

/// Largest weight (elements of one [G, N, K] linear) a run accepts: 2^28
/// elements = 1 GiB per FP32 copy, and a weight keeps about 12 copies (master,
/// moments, model, main_grad, de-osc and metric state).
constexpr uint64_t kMaxWeightElems = uint64_t(1) << 28;

void validate(const Config& c, const std::string& s) {
  const uint64_t d = uint64_t(c.d_model), f = uint64_t(c.d_ff), E = uint64_t(c.experts);
  if (d * 784 > kMaxWeightElems)
    bad(s, "model.d_model", "the embed weight 784 x " + std::to_string(d) + " has more than 2^28 elements (impossible size)");
  if ((unsigned __int128)E * f * d > kMaxWeightElems)  // no wrap: each factor < 2^31
    bad(s, "model.d_ff", "the expert weights model.experts x model.d_ff x model.d_model = " + std::to_string(E) + " x " +
                             std::to_string(f) + " x " + std::to_string(d) + " have more than 2^28 elements (impossible size)");
  if (c.top_k > c.experts)
    bad(s, "model.top_k", "expected top_k <= model.experts (" + std::to_string(c.experts) + "), got " + std::to_string(c.top_k));
  if (c.global_batch % c.num_microbatches != 0)
    bad(s, "batch.num_microbatches", "expected a divisor of batch.global_batch (" + std::to_string(c.global_batch) + ")");
  if (c.min_lr > c.lr) bad(s, "optim.min_lr", "expected min_lr <= optim.lr");
  if (c.beta1 >= 1) bad(s, "optim.beta1", "expected a number < 1");
  if (c.beta2 >= 1) bad(s, "optim.beta2", "expected a number < 1");
  if (c.osc_ema_momentum > 1) bad(s, "metrics.osc_ema_momentum", "expected a number in (0, 1]");
  // Expert parallelism: every rank owns experts / ranks experts.
  if (c.experts % c.ranks != 0)
    bad(s, "parallel.ranks", "expected a divisor of model.experts (" + std::to_string(c.experts) +
                                 ": every rank owns the same number of experts), got " + std::to_string(c.ranks));
  for (Layer l : kLayers)
    if (!has_dgrad(l) && !c.recipe.per_gemm[size_t(l)][size_t(GemmForm::Dgrad)].empty())
      bad(s, std::string("recipe.") + name_of(l) + "_dgrad",
          std::string("the ") + name_of(l) + " layer has no dgrad (its input is the data, which takes no gradient)");
  for (Layer l : kLayers) {  // each layer's per-GEMM recipes fit together
    try {
      (void)c.recipe.linear(l);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(s + ": " + e.what());  // e names the key
    }
  }
  if (c.ranks > 1) {
    // What the virtual ranks do not simulate (docs/simulator.md "Parallel simulation").
    for (Layer l : {Layer::Fc1, Layer::Fc2}) {
      const LinearRecipe r = c.recipe.linear(l);
      for (const Recipe& g : r.gemm)
        if (std::holds_alternative<Fp8CurrentRecipe>(g) || std::holds_alternative<Fp8DelayedRecipe>(g) ||
            std::holds_alternative<Nvfp4Recipe>(g))
          bad(s, "parallel.ranks",
              "expert parallelism with per-tensor scaling of the expert GEMMs (recipe." + std::string(name_of(l)) +
                  " = " + linear_recipe_name(r) + ") needs an amax across ranks, which is not simulated; use ranks = 1 "
                  "or another recipe");
    }
    if (c.recipe.mxfp4_sr_grad)
      bad(s, "parallel.ranks",
          "expert parallelism with recipe.mxfp4_sr_grad = true: stochastic rounding counts elements of the whole "
          "tensor, per-rank streams are not simulated; use ranks = 1 or mxfp4_sr_grad = false");
  }
  for (int64_t n : c.snapshot_steps)
    if (n < 1)
      bad(s, "trace.snapshot_steps", "expected global optimizer steps >= 1 (1-based, as /train/step), got " + std::to_string(n));
  for (Layer l : c.snapshot_layers) {
    const uint64_t n = l == Layer::Embed ? 784 * d : l == Layer::Router ? E * d : l == Layer::Head ? 10 * d : E * f * d;
    for (int64_t e : c.watch_elements)
      if (uint64_t(e) >= n)
        bad(s, "trace.watch_elements",
            "element " + std::to_string(e) + " lies outside " + name_of(l) + "'s weight (" + std::to_string(n) +
                " elements, flat [G, N, K] indices 0.." + std::to_string(n - 1) + ")");
  }
  if (c.watch_elements.size() > 4096)
    bad(s, "trace.watch_elements", "at most 4096 elements, got " + std::to_string(c.watch_elements.size()));
}

}  // namespace

std::vector<std::string> config_keys() {
  Config c;
  std::vector<std::string> keys;
  for (const auto& [k, f] : setters(c)) keys.push_back(k);  // a std::map: sorted
  return keys;
}

Config parse_config(const std::string& text, const std::vector<std::string>& overrides, const std::string& source) {
  Config c;
  auto m = setters(c);
  // toml++ bounds nested arrays and inline tables but not dotted keys or
  // headers; a deep one would exhaust the stack, so the text is bounded first.
  const auto bound_nesting = [](std::string_view t, const std::string& label) {
    try {
      io::check_toml_nesting(t, label);
    } catch (const io::IoError& e) {
      throw std::invalid_argument(e.what());
    }
  };
  bound_nesting(text, source);
  try {
    toml::table t = toml::parse(text, source);
    apply(t, m, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << source << ": TOML syntax error: " << e.description() << " at line " << e.source().begin.line;
    throw std::invalid_argument(os.str());
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) throw std::invalid_argument("--set '" + o + "': expected section.key=value");
    const std::string key = o.substr(0, eq), val = o.substr(eq + 1);
    if (key.find('.') == std::string::npos) throw std::invalid_argument("--set '" + o + "': expected section.key=value");
    bound_nesting(key + " = " + val, "--set '" + (key.size() > 40 ? key.substr(0, 40) + "..." : key) + "'");
    toml::table t;
    try {
      t = toml::parse(std::string_view(key + " = " + val), std::string_view("--set"));
    } catch (const toml::parse_error&) {
      try {  // a bare word: take it as a string
        t = toml::parse(std::string_view(key + " = \"" + val + "\""), std::string_view("--set"));
      } catch (const toml::parse_error& e) {
        throw std::invalid_argument("--set '" + o + "': cannot parse the value: " + std::string(e.description()));
      }
    }
    apply(t, m, "--set");
  }
  validate(c, overrides.empty() ? source : source + " with --set overrides");
  return c;
}

std::string to_toml(const Config& c) {
  // Every value but the floats is written by toml++'s own formatter, so every string is escaped
  // as TOML requires (a data_dir holding '"' or a newline reads back as itself) and the text
  // parses back to the same config (SimConfig.PrintedConfigParsesBackToTheSameConfig). Sections
  // and keys come out in toml++'s table order (alphabetical); strings as basic strings, never
  // literal or multi-line.
  const auto fl = [](float v) {  // the double nearest the shortest decimal that reads back as v
    char b[64];
    const auto r = std::to_chars(b, b + sizeof b, v);
    double d = 0;
    std::from_chars(b, r.ptr, d);
    return d;
  };
  toml::array layers, steps, watch;
  for (int64_t e : c.watch_elements) watch.push_back(e);
  for (Layer l : c.snapshot_layers) layers.push_back(std::string(name_of(l)));
  toml::array shadow;
  for (Layer l : c.shadow_layers) shadow.push_back(std::string(name_of(l)));
  for (int64_t n : c.snapshot_steps) steps.push_back(n);
  toml::table recipe{{"mxfp4_hadamard_wgrad", c.recipe.mxfp4_hadamard_wgrad},
                     {"mxfp4_sr_grad", c.recipe.mxfp4_sr_grad},
                     {"fp8_amax_history", int64_t(c.recipe.fp8_amax_history)},
                     {"fp8_margin", int64_t(c.recipe.fp8_margin)},
                     {"fp8_current_amax_epsilon", fl(c.recipe.fp8_current_amax_epsilon)},
                     {"fp8_current_pow2_scale", c.recipe.fp8_current_pow2_scale},
                     {"fp8_block_amax_epsilon", fl(c.recipe.fp8_block_amax_epsilon)},
                     {"fp8_block_pow2_scale", c.recipe.fp8_block_pow2_scale}};
  // The nvfp4 options only where they matter (a layer runs nvfp4, or one is not its default): a
  // config without them reads, and is written, as before they existed.
  const RecipeConfig defaults;
  bool nvfp4 = c.recipe.nvfp4_hadamard_wgrad != defaults.nvfp4_hadamard_wgrad ||
               c.recipe.nvfp4_sr_grad != defaults.nvfp4_sr_grad;
  for (Layer l : kLayers)
    for (const Recipe& g : c.recipe.linear(l).gemm) nvfp4 = nvfp4 || std::holds_alternative<Nvfp4Recipe>(g);
  if (nvfp4) {
    recipe.insert("nvfp4_hadamard_wgrad", c.recipe.nvfp4_hadamard_wgrad);
    recipe.insert("nvfp4_sr_grad", c.recipe.nvfp4_sr_grad);
  }
  for (Layer l : kLayers) {
    recipe.insert(name_of(l), c.recipe.of(l));
    for (size_t g = 0; g < 3; ++g)  // only those set: a config without them reads as before
      if (!c.recipe.per_gemm[size_t(l)][g].empty())
        recipe.insert(std::string(name_of(l)) + "_" + kGemmNames[g], c.recipe.per_gemm[size_t(l)][g]);
  }
  const toml::table t{
      {"run", toml::table{{"seed", int64_t(c.seed)},
                          {"epochs", int64_t(c.epochs)},
                          {"max_steps", c.max_steps},
                          {"train_limit", c.train_limit},
                          {"test_limit", c.test_limit},
                          {"data_dir", c.data_dir}}},
      {"model", toml::table{{"d_model", int64_t(c.d_model)},
                            {"d_ff", int64_t(c.d_ff)},
                            {"experts", int64_t(c.experts)},
                            {"top_k", int64_t(c.top_k)},
                            {"activation", std::string(name_of(c.activation))},
                            {"aux_loss_coeff", fl(c.aux_loss_coeff)}}},
      {"batch", toml::table{{"global_batch", int64_t(c.global_batch)}, {"num_microbatches", int64_t(c.num_microbatches)}}},
      {"optim", toml::table{{"lr", fl(c.lr)},
                            {"min_lr", fl(c.min_lr)},
                            {"beta1", fl(c.beta1)},
                            {"beta2", fl(c.beta2)},
                            {"eps", fl(c.eps)},
                            {"weight_decay", fl(c.weight_decay)},
                            {"warmup_steps", c.warmup_steps},
                            {"init_std", fl(c.init_std)}}},
      {"recipe", recipe},
      {"deosc", toml::table{{"enable", c.deosc},
                            {"period", c.deosc_period},
                            {"ratio", fl(c.deosc_ratio)},
                            {"start_step", c.deosc_start_step}}},
      {"metrics", toml::table{{"osc_ema_momentum", fl(c.osc_ema_momentum)}}},
      {"parallel", toml::table{{"ranks", int64_t(c.ranks)}, {"deosc_shard_edge", c.deosc_shard_edge}}},
      {"trace", toml::table{{"snapshot_layers", layers}, {"shadow_layers", shadow}, {"snapshot_steps", steps}, {"checkpoint_every", c.checkpoint_every},
                            {"watch_elements", watch}}},
  };
  // Floats are written here as the shortest decimal that reads back as the same double
  // (std::to_chars; fixed notation from 1e-4 on, as %g), which for fl(v) is the shortest one of
  // the float v: `beta1 = 0.9`, `min_lr = 0.0001`, `eps = 1e-08`. toml++
  // (built without floating-point to_chars on GCC) prints 17 significant digits instead,
  // `0.90000000000000002`, and its relaxed mode only 6, which does not read back.
  const auto float_text = [](double d) {
    char b[64];
    std::string s(b, std::to_chars(b, b + sizeof b, d, std::chars_format::general).ptr);  // %g style: 0.0001
    if (std::isfinite(d) && s.find_first_of(".eE") == std::string::npos) s += ".0";  // TOML floats: 4.0, not 4
    return s;
  };
  std::ostringstream o;
  const char* sep = "";
  for (const auto& [section, node] : t) {  // every entry of t is a table of key = value lines
    o << sep << '[' << section.str() << "]\n";
    sep = "\n";
    for (const auto& [key, v] : *node.as_table()) {  // bare keys: the config's keys are [a-z0-9_]
      o << key.str() << " = ";
      if (const auto* f = v.as_floating_point())
        o << float_text(f->get());
      else
        o << toml::toml_formatter(v, toml::format_flags::allow_unicode_strings);
      o << '\n';
    }
  }
  return o.str();
}

}  // namespace mxsim::sim
