// Config parsing (toml++), validation, canonical TOML output.
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/recipe.hpp"

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
embed = "bf16"
router = "bf16"
fc1 = "mxfp4"
fc2 = "mxfp4"
head = "bf16"
mxfp4_hadamard_wgrad = true
mxfp4_sr_grad = false
fp8_amax_history = 16
fp8_margin = 0           # integer, scale = fp8_max / amax / 2^margin

[deosc]                  # Primus weight_deosc (MXFP4-forward weights only)
enable = true
period = 100
ratio = 4.0
start_step = 200

[metrics]
osc_ema_momentum = 0.01  # Nagel et al. 2022 EMA flip frequency

[trace]
snapshot_layers = ["fc1"]
snapshot_steps = [2]       # global optimizer steps (1-based, as /train/step)
checkpoint_every = 0
)TOML";

const char* default_config_text() { return kDefault; }

namespace {

[[noreturn]] void bad(const std::string& src, const std::string& key, const std::string& what) {
  throw std::invalid_argument(src + ": key '" + key + "': " + what);
}

/// (node, key, source): source names where the value came from (file or --set).
using Setter = std::function<void(const toml::node&, const std::string&, const std::string&)>;

template <class T>
Setter int_setter(T& dst, int64_t lo) {
  return [&dst, lo](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value_exact<int64_t>();
    if (!v) bad(src, key, std::string("expected an integer, got ") + std::string(toml::impl::node_type_friendly_names[size_t(n.type())]));
    if (*v < lo) bad(src, key, "expected an integer >= " + std::to_string(lo) + ", got " + std::to_string(*v));
    if (uint64_t(*v) > uint64_t(std::numeric_limits<T>::max()))
      bad(src, key, "expected an integer <= " + std::to_string(std::numeric_limits<T>::max()) + ", got " + std::to_string(*v));
    dst = T(*v);
  };
}
Setter float_setter(float& dst, double lo, bool strict) {
  return [&dst, lo, strict](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value<double>();  // integers are accepted as numbers
    if (!v || n.is_boolean() || n.is_string()) bad(src, key, "expected a number");
    if (strict ? !(*v > lo) : !(*v >= lo))
      bad(src, key, std::string("expected a number ") + (strict ? "> " : ">= ") + std::to_string(lo));
    dst = float(*v);
  };
}
Setter bool_setter(bool& dst) {
  return [&dst](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value_exact<bool>();
    if (!v) bad(src, key, "expected true or false");
    dst = *v;
  };
}
Setter string_setter(std::string& dst, std::vector<std::string> allowed) {
  return [&dst, allowed](const toml::node& n, const std::string& key, const std::string& src) {
    auto v = n.value_exact<std::string>();
    if (!v) bad(src, key, "expected a string");
    if (!allowed.empty()) {
      bool ok = false;
      std::string list;
      for (auto& a : allowed) {
        ok |= (a == *v);
        list += (list.empty() ? "" : ", ") + a;
      }
      if (!ok) bad(src, key, "expected one of " + list + ", got '" + *v + "'");
    }
    dst = *v;
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
  const std::vector<std::string> recipes(kRecipeNames.begin(), kRecipeNames.end());
  std::map<std::string, Setter> m;
  m["run.seed"] = int_setter(c.seed, 0);
  m["run.epochs"] = int_setter(c.epochs, 1);
  m["run.max_steps"] = int_setter(c.max_steps, 0);
  m["run.train_limit"] = int_setter(c.train_limit, 0);
  m["run.test_limit"] = int_setter(c.test_limit, 0);
  m["run.data_dir"] = string_setter(c.data_dir, {});
  m["model.d_model"] = int_setter(c.d_model, 1);
  m["model.d_ff"] = int_setter(c.d_ff, 1);
  m["model.experts"] = int_setter(c.experts, 1);
  m["model.top_k"] = int_setter(c.top_k, 1);
  m["model.activation"] = activation_setter(c.activation);
  m["model.aux_loss_coeff"] = float_setter(c.aux_loss_coeff, 0, false);
  m["batch.global_batch"] = int_setter(c.global_batch, 1);
  m["batch.num_microbatches"] = int_setter(c.num_microbatches, 1);
  m["optim.lr"] = float_setter(c.lr, 0, true);
  m["optim.min_lr"] = float_setter(c.min_lr, 0, false);
  m["optim.beta1"] = float_setter(c.beta1, 0, false);
  m["optim.beta2"] = float_setter(c.beta2, 0, false);
  m["optim.eps"] = float_setter(c.eps, 0, true);
  m["optim.weight_decay"] = float_setter(c.weight_decay, 0, false);
  m["optim.warmup_steps"] = int_setter(c.warmup_steps, 0);
  m["optim.init_std"] = float_setter(c.init_std, 0, false);
  for (Layer l : kLayers) m[std::string("recipe.") + name_of(l)] = string_setter(c.recipe.of(l), recipes);
  m["recipe.mxfp4_hadamard_wgrad"] = bool_setter(c.recipe.mxfp4_hadamard_wgrad);
  m["recipe.mxfp4_sr_grad"] = bool_setter(c.recipe.mxfp4_sr_grad);
  m["recipe.fp8_amax_history"] = int_setter(c.recipe.fp8_amax_history, 1);
  m["recipe.fp8_margin"] = int_setter(c.recipe.fp8_margin, 0);
  m["deosc.enable"] = bool_setter(c.deosc);
  m["deosc.period"] = int_setter(c.deosc_period, 1);
  m["deosc.ratio"] = float_setter(c.deosc_ratio, 0, true);
  m["deosc.start_step"] = int_setter(c.deosc_start_step, 0);
  m["metrics.osc_ema_momentum"] = float_setter(c.osc_ema_momentum, 0, true);
  m["trace.snapshot_layers"] = layers_setter(c.snapshot_layers);
  m["trace.snapshot_steps"] = list_setter(c.snapshot_steps);
  m["trace.checkpoint_every"] = int_setter(c.checkpoint_every, 0);
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
  for (int64_t n : c.snapshot_steps)
    if (n < 1)
      bad(s, "trace.snapshot_steps", "expected global optimizer steps >= 1 (1-based, as /train/step), got " + std::to_string(n));
}

}  // namespace

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
  std::ostringstream o;
  auto list_s = [](const std::vector<Layer>& v) {
    std::string r = "[";
    for (size_t i = 0; i < v.size(); ++i) r += (i ? ", \"" : "\"") + std::string(name_of(v[i])) + "\"";
    return r + "]";
  };
  auto list_i = [](const std::vector<int64_t>& v) {
    std::string r = "[";
    for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
    return r + "]";
  };
  o.precision(9);
  o << "[run]\nseed = " << c.seed << "\nepochs = " << c.epochs << "\nmax_steps = " << c.max_steps
    << "\ntrain_limit = " << c.train_limit << "\ntest_limit = " << c.test_limit << "\ndata_dir = \"" << c.data_dir
    << "\"\n\n[model]\nd_model = " << c.d_model << "\nd_ff = " << c.d_ff << "\nexperts = " << c.experts
    << "\ntop_k = " << c.top_k << "\nactivation = \"" << name_of(c.activation) << "\"\naux_loss_coeff = " << c.aux_loss_coeff
    << "\n\n[batch]\nglobal_batch = " << c.global_batch << "\nnum_microbatches = " << c.num_microbatches
    << "\n\n[optim]\nlr = " << c.lr << "\nmin_lr = " << c.min_lr << "\nbeta1 = " << c.beta1 << "\nbeta2 = " << c.beta2
    << "\neps = " << c.eps << "\nweight_decay = " << c.weight_decay << "\nwarmup_steps = " << c.warmup_steps
    << "\ninit_std = " << c.init_std << "\n\n[recipe]\n";
  for (Layer l : kLayers) o << name_of(l) << " = \"" << c.recipe.of(l) << "\"\n";
  o << "mxfp4_hadamard_wgrad = " << (c.recipe.mxfp4_hadamard_wgrad ? "true" : "false")
    << "\nmxfp4_sr_grad = " << (c.recipe.mxfp4_sr_grad ? "true" : "false")
    << "\nfp8_amax_history = " << c.recipe.fp8_amax_history << "\nfp8_margin = " << c.recipe.fp8_margin
    << "\n\n[deosc]\nenable = " << (c.deosc ? "true" : "false") << "\nperiod = " << c.deosc_period
    << "\nratio = " << c.deosc_ratio << "\nstart_step = " << c.deosc_start_step
    << "\n\n[metrics]\nosc_ema_momentum = " << c.osc_ema_momentum << "\n\n[trace]\nsnapshot_layers = "
    << list_s(c.snapshot_layers) << "\nsnapshot_steps = " << list_i(c.snapshot_steps)
    << "\ncheckpoint_every = " << c.checkpoint_every << "\n";
  return o.str();
}

}  // namespace mxsim::sim
