// The simulator's config: values validated as the simulator's type holds them (a double that
// becomes 0 or Inf in FP32 is refused, naming the key), the documented upper bounds of the
// sizes, the memory estimate checked before anything is allocated, and the canonical TOML
// (toml++'s writer) parsing back to the same config, strings with quotes and escapes included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "mxsim/sim/config.hpp"
#include "mxsim/sim/trainer.hpp"

using namespace mxsim::sim;

namespace {

/// The error of parse_config with these overrides ("no error" when it parses).
std::string error_of(const std::vector<std::string>& sets) {
  try {
    parse_config(default_config_text(), sets, "cfg");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

bool has(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

/// Every field, compared one by one (Config has no operator==: a new field must be added here
/// and to to_toml together).
void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.epochs, b.epochs);
  EXPECT_EQ(a.max_steps, b.max_steps);
  EXPECT_EQ(a.train_limit, b.train_limit);
  EXPECT_EQ(a.test_limit, b.test_limit);
  EXPECT_EQ(a.data_dir, b.data_dir);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.d_ff, b.d_ff);
  EXPECT_EQ(a.experts, b.experts);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.activation, b.activation);
  EXPECT_EQ(a.global_batch, b.global_batch);
  EXPECT_EQ(a.num_microbatches, b.num_microbatches);
  for (auto [x, y] : {std::pair{a.aux_loss_coeff, b.aux_loss_coeff}, {a.lr, b.lr}, {a.min_lr, b.min_lr},
                      {a.beta1, b.beta1}, {a.beta2, b.beta2}, {a.eps, b.eps}, {a.weight_decay, b.weight_decay},
                      {a.init_std, b.init_std}, {a.deosc_ratio, b.deosc_ratio},
                      {a.osc_ema_momentum, b.osc_ema_momentum},
                      {a.recipe.fp8_current_amax_epsilon, b.recipe.fp8_current_amax_epsilon},
                      {a.recipe.fp8_block_amax_epsilon, b.recipe.fp8_block_amax_epsilon}})
    EXPECT_EQ(std::bit_cast<uint32_t>(x), std::bit_cast<uint32_t>(y)) << x << " vs " << y;
  EXPECT_EQ(a.warmup_steps, b.warmup_steps);
  for (Layer l : kLayers) EXPECT_EQ(a.recipe.of(l), b.recipe.of(l));
  EXPECT_EQ(a.recipe.mxfp4_hadamard_wgrad, b.recipe.mxfp4_hadamard_wgrad);
  EXPECT_EQ(a.recipe.mxfp4_sr_grad, b.recipe.mxfp4_sr_grad);
  EXPECT_EQ(a.recipe.fp8_amax_history, b.recipe.fp8_amax_history);
  EXPECT_EQ(a.recipe.fp8_margin, b.recipe.fp8_margin);
  EXPECT_EQ(a.recipe.fp8_current_pow2_scale, b.recipe.fp8_current_pow2_scale);
  EXPECT_EQ(a.recipe.fp8_block_pow2_scale, b.recipe.fp8_block_pow2_scale);
  EXPECT_EQ(a.deosc, b.deosc);
  EXPECT_EQ(a.deosc_period, b.deosc_period);
  EXPECT_EQ(a.deosc_start_step, b.deosc_start_step);
  EXPECT_EQ(a.snapshot_layers, b.snapshot_layers);
  EXPECT_EQ(a.snapshot_steps, b.snapshot_steps);
  EXPECT_EQ(a.checkpoint_every, b.checkpoint_every);
}

}  // namespace

// optim.eps = 1e-50 passes "> 0" as a double but is 0.0f, the value the optimizer divides by;
// inf passes "> 0" too. Each is refused naming the key and what the value becomes.
TEST(SimConfigValues, ValidatedAfterConversionToFp32) {
  EXPECT_TRUE(has(error_of({"optim.eps=1e-50"}), "key 'optim.eps': 1e-50 becomes 0 in FP32")) << error_of({"optim.eps=1e-50"});
  EXPECT_TRUE(has(error_of({"optim.lr=inf"}), "key 'optim.lr': expected a finite number > 0, got inf"))
      << error_of({"optim.lr=inf"});
  EXPECT_TRUE(has(error_of({"optim.lr=nan"}), "key 'optim.lr'")) << error_of({"optim.lr=nan"});
  EXPECT_TRUE(has(error_of({"optim.lr=1e39"}), "key 'optim.lr': 1e+39 overflows FP32")) << error_of({"optim.lr=1e39"});
  EXPECT_TRUE(has(error_of({"optim.weight_decay=-inf"}), "key 'optim.weight_decay'"));
  // A key that allows 0 still refuses a non-zero value that becomes 0 (its meaning changes).
  EXPECT_TRUE(has(error_of({"optim.weight_decay=1e-60"}), "key 'optim.weight_decay': 1e-60 becomes 0 in FP32"))
      << error_of({"optim.weight_decay=1e-60"});
  EXPECT_TRUE(has(error_of({"model.aux_loss_coeff=1e300"}), "key 'model.aux_loss_coeff': 1e+300 overflows FP32"));
  // Half of the smallest subnormal rounds to 0: refused; 1e-45 rounds to it: kept, as that float.
  EXPECT_TRUE(has(error_of({"optim.eps=7e-46"}), "key 'optim.eps'"));
  EXPECT_EQ(parse_config(default_config_text(), {"optim.eps=1e-45"}).eps, FLT_TRUE_MIN);
  EXPECT_EQ(parse_config(default_config_text(), {"optim.weight_decay=0"}).weight_decay, 0.0f);
  // beta2 = 0.99999999999 is < 1 as a double but 1.0f as the simulator holds it.
  EXPECT_TRUE(has(error_of({"optim.beta2=0.99999999999"}), "key 'optim.beta2'")) << error_of({"optim.beta2=0.99999999999"});
  // Values that stay what they were are accepted as the nearest float.
  EXPECT_EQ(parse_config(default_config_text(), {"optim.lr=3e38"}).lr, 3e38f);
  EXPECT_EQ(parse_config(default_config_text(), {"optim.eps=1e-30"}).eps, 1e-30f);
}

// Every size has a documented bound (config.hpp kMax*, docs/simulator.md "Limits"): the bound
// itself is accepted (where the other limits allow), one more is refused naming the key.
TEST(SimConfigValues, SizesHaveDocumentedBounds) {
  struct Case {
    std::string key;
    int bound;
    std::vector<std::string> with;  // other keys that let the bound itself pass
  };
  const Case cases[] = {
      {"model.d_model", kMaxDModel, {"model.experts=1", "model.top_k=1", "model.d_ff=16"}},
      {"model.d_ff", kMaxDFf, {"model.experts=1", "model.top_k=1", "model.d_model=16"}},
      {"model.experts", kMaxExperts, {"model.d_ff=16", "model.d_model=16"}},
      {"batch.global_batch", kMaxGlobalBatch, {"batch.num_microbatches=1"}},
      {"batch.num_microbatches", kMaxGlobalBatch, {"batch.global_batch=65536"}},
      {"recipe.fp8_amax_history", kMaxAmaxHistory, {}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> at = c.with, over = c.with;
    at.push_back(c.key + "=" + std::to_string(c.bound));
    over.push_back(c.key + "=" + std::to_string(int64_t(c.bound) + 1));
    EXPECT_EQ(error_of(at), "no error") << c.key;
    const std::string e = error_of(over);
    EXPECT_TRUE(has(e, "key '" + c.key + "': expected an integer <= " + std::to_string(c.bound) + " (the documented bound"))
        << e;
  }
  // The sizes the fuzzer found accepted.
  EXPECT_TRUE(has(error_of({"recipe.fp8_amax_history=2147483647"}), "'recipe.fp8_amax_history'"));
  EXPECT_TRUE(has(error_of({"model.d_model=65535"}), "'model.d_model'"));
  EXPECT_TRUE(has(error_of({"model.experts=100000"}), "'model.experts'"));
  EXPECT_EQ(kMaxDModel, 16384);
  EXPECT_EQ(kMaxDFf, 65536);
  EXPECT_EQ(kMaxExperts, 1024);
  EXPECT_EQ(kMaxGlobalBatch, 65536);
  EXPECT_EQ(kMaxAmaxHistory, 65536);
}

// The estimate counts at least the five FP32 copies of every weight (master, Adam m and v, the
// model copy, main_grad) and the decoded images; a run needing more than the machine has is
// refused with both numbers before anything is allocated.
TEST(SimConfigValues, MemoryEstimateCheckedBeforeAllocating) {
  const Config c = parse_config(default_config_text());
  const double d = 128, f = 256, E = 8;
  const double elems = 784 * d + E * d + 2 * E * f * d + 10 * d;
  const MemoryEstimate e = estimate_run_memory(c);
  EXPECT_GE(double(e.weights), 5 * 4 * elems);
  EXPECT_GE(double(e.data), 70000.0 * 784 * 4);
  EXPECT_GT(e.activations, 0u);
  EXPECT_LT(e.total(), uint64_t(1) << 30);  // the default run fits in 1 GiB
  EXPECT_NO_THROW(check_run_memory(c, uint64_t(1) << 30));
  // Fewer images, less memory.
  EXPECT_LT(estimate_run_memory(parse_config(default_config_text(), {"run.train_limit=512"})).data, e.data);

  // 1024 experts of 2048 x 128 (2^28 elements each linear, the largest weight) and a 65536-token
  // micro-batch routed to every expert: terabytes.
  const Config big = parse_config(default_config_text(), {"model.experts=1024", "model.top_k=1024", "model.d_ff=2048",
                                                          "batch.global_batch=65536", "batch.num_microbatches=1"});
  EXPECT_GT(estimate_run_memory(big).total(), uint64_t(1) << 40);
  try {
    check_run_memory(big, uint64_t(16) << 30);
    FAIL() << "accepted";
  } catch (const std::runtime_error& ex) {
    const std::string m = ex.what();
    EXPECT_TRUE(has(m, "the run needs about ")) << m;
    EXPECT_TRUE(has(m, " GiB (weights and their state ")) << m;
    EXPECT_TRUE(has(m, "; the machine has 16.0 GiB")) << m;
    EXPECT_TRUE(has(m, "batch.num_microbatches")) << m;
  }
  // The machine's memory is known and nonzero here.
  EXPECT_GT(machine_memory_bytes(), uint64_t(1) << 28);
}

// The canonical TOML (--print-config, the trace's and the checkpoint's config text) comes from
// toml++'s writer: a data_dir with a quote, a backslash, a newline and a control character reads
// back as itself, and parse(print(cfg)) is cfg, field by field, for the default and for a config
// with every value changed.
TEST(SimConfigValues, PrintedConfigParsesBackToTheSameConfig) {
  const std::string weird = "/data/a \"quoted\" dir\\with\nnewline\ttab\x01 and \xC3\xA9";
  Config c = parse_config(default_config_text());
  c.data_dir = weird;
  const std::string text = to_toml(c);
  const Config back = parse_config(text, {}, "printed");
  EXPECT_EQ(back.data_dir, weird);
  expect_same(back, c);
  EXPECT_EQ(to_toml(back), text);  // canonical: printing again gives the same text

  const Config other = parse_config(
      default_config_text(),
      {"run.seed=9223372036854775807", "run.epochs=7", "run.max_steps=11", "run.train_limit=1000", "run.test_limit=300",
       "run.data_dir=\"it's\"", "model.d_model=64", "model.d_ff=96", "model.experts=4", "model.top_k=3",
       "model.activation=silu", "model.aux_loss_coeff=0.1", "batch.global_batch=96", "batch.num_microbatches=3",
       "optim.lr=0.1", "optim.min_lr=1e-7", "optim.beta1=0.5", "optim.beta2=0.999", "optim.eps=1e-45",
       "optim.weight_decay=0", "optim.warmup_steps=3", "optim.init_std=0.02", "recipe.embed=fp8_block",
       "recipe.router=fp8_current", "recipe.fc1=mxfp8", "recipe.fc2=fp8_delayed", "recipe.head=mxfp4",
       "recipe.mxfp4_hadamard_wgrad=false", "recipe.mxfp4_sr_grad=true", "recipe.fp8_amax_history=1024",
       "recipe.fp8_margin=3", "recipe.fp8_current_amax_epsilon=0", "recipe.fp8_current_pow2_scale=true",
       "recipe.fp8_block_amax_epsilon=3e-5", "recipe.fp8_block_pow2_scale=true", "deosc.enable=false", "deosc.period=7", "deosc.ratio=0.3", "deosc.start_step=5",
       "metrics.osc_ema_momentum=1", "trace.snapshot_layers=[\"head\", \"embed\"]", "trace.snapshot_steps=[]",
       "trace.checkpoint_every=4"});
  EXPECT_EQ(other.data_dir, "it's");
  expect_same(parse_config(to_toml(other)), other);
  EXPECT_EQ(to_toml(parse_config(to_toml(other))), to_toml(other));
}

// The canonical text gives each float as written: the shortest decimal that reads back as the
// same FP32 value (`beta1 = 0.9`, not toml++'s 17 digits `0.90000000000000002`), with a ".0" where
// that decimal is an integer (a TOML float needs one). The expected lines are the values of
// examples/default.toml as written there (and TOML's exponent form for 1e-8).
TEST(SimConfigValues, PrintedFloatsAreTheShortestThatReadBack) {
  const std::string text = to_toml(parse_config(default_config_text()));
  std::vector<std::string> float_lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {  // a float: a number with a '.' or an exponent
    const size_t eq = l.find(" = ");
    const std::string v = eq == std::string::npos ? "" : l.substr(eq + 3);
    if (!v.empty() && (std::isdigit((unsigned char)v[0]) || v[0] == '-') && v.find_first_of(".e") != std::string::npos)
      float_lines.push_back(l);
  }
  const std::vector<std::string> want = {
      "ratio = 4.0",      "osc_ema_momentum = 0.01", "aux_loss_coeff = 0.01", "beta1 = 0.9",
      "beta2 = 0.95",     "eps = 1e-08",             "init_std = 0.0",        "lr = 0.002",
      "min_lr = 0.0001",  "weight_decay = 0.01",
      "fp8_block_amax_epsilon = 0.0001", "fp8_current_amax_epsilon = 1e-12"};
  EXPECT_EQ(float_lines, want) << text;  // every float line, in the text's (alphabetical) order
  // Values given otherwise: more digits, an FP32 subnormal, an integer given to a float key.
  const std::string other = to_toml(parse_config(
      default_config_text(), {"optim.lr=1.234567e-4", "optim.eps=1e-45", "optim.beta2=0.999", "deosc.ratio=3",
                              "model.aux_loss_coeff=0.1", "optim.min_lr=0.00001", "optim.weight_decay=1e20"}));
  for (const char* l : {"\nlr = 0.0001234567\n", "\neps = 1e-45\n", "\nbeta2 = 0.999\n", "\nratio = 3.0\n",
                        "\naux_loss_coeff = 0.1\n", "\nmin_lr = 1e-05\n", "\nweight_decay = 1e+20\n"})
    EXPECT_TRUE(has(other, l)) << l << other;
}

// docs/config.md is the config reference: every key the parser accepts has a
// row there ("| `section.key` |"), and every key row there is one the parser
// accepts.
TEST(SimConfig, ReferencePageListsEveryKey) {
  std::ifstream f(std::string(MXSIM_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(f) << "docs/config.md is missing";
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::vector<std::string> keys = config_keys();
  ASSERT_GT(keys.size(), 30u);
  for (const std::string& k : keys) EXPECT_NE(doc.find("| `" + k + "` |"), std::string::npos) << k << " is not in docs/config.md";
  size_t rows = 0;
  for (size_t at = doc.find("\n| `"); at != std::string::npos; at = doc.find("\n| `", at + 1)) {
    const size_t b = at + 4, e = doc.find('`', b);
    const std::string k = doc.substr(b, e - b);
    EXPECT_TRUE(std::find(keys.begin(), keys.end(), k) != keys.end()) << "docs/config.md lists '" << k << "', not a key";
    ++rows;
  }
  EXPECT_EQ(rows, keys.size());
}
