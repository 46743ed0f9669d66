// The FP32-scale settings of current scaling (docs/numerics.md §3.3):
// amax_epsilon (a = max(amax, eps)) and pow2_scale (the scale rounded down to
// a power of two), set through `mxsim quantize --amax-epsilon / --pow2-scale`,
// mxsim::set_amax_epsilon / set_pow2_scale, and the training recipes' config
// keys. Expected codes are worked out by hand from the contract:
//   scale = fl32(448 / a) (E4M3), pow2: cleared mantissa; scale_inv = fl32(1 / scale);
//   codes = E4M3 RNE of fl32(x * scale).
// x = [0.25, -0.5, 0.125, 0], amax 0.5. E4M3 (bias 7): 1.75 * 2^e is
// exponent field e + 7, mantissa 110.
//   eps 0:            scale 896:  224 0x76, -448 0xFE, 112 0x6E, 0; scale_inv fl32(1/896) = 0x3A924925
//   eps 1:            scale 448:  112 0x6E, -224 0xF6,  56 0x66, 0; scale_inv fl32(1/448) = 0x3B124925
//   eps 3, pow2:      448/3 = 149.3 -> 128: 32 0x60, -64 0xE8, 16 0x58, 0; scale_inv 2^-7 = 0x3C000000
//   eps 0, pow2:      896 -> 512: 128 0x70, -256 0xF8, 64 0x68, 0; scale_inv 2^-9 = 0x3B000000
//   eps 1, pow2:      448 -> 256:  64 0x68, -128 0xF0,  32 0x60, 0; scale_inv 2^-8 = 0x3B800000
// (fl32(1/7) = 0x3E124925; 1/448 = 2^-6 / 7, 1/896 = 2^-7 / 7.)
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/recipe.hpp"

using namespace mxsim;
using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;

namespace {

const std::vector<float> kX = {0.25f, -0.5f, 0.125f, 0.0f};
using Codes = std::vector<uint8_t>;
const Codes kEps0 = {0x76, 0xFE, 0x6E, 0x00}, kEps1 = {0x6E, 0xF6, 0x66, 0x00}, kEps3Pow2 = {0x60, 0xE8, 0x58, 0x00},
            kPow2 = {0x70, 0xF8, 0x68, 0x00}, kEps1Pow2 = {0x68, 0xF0, 0x60, 0x00};

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

/// Codes and scale_inv bits of kX quantized with s.
std::pair<Codes, uint32_t> quantize_x(const QuantSpec& s) {
  Tensor2f x = Tensor2f::from_shape({1, 4});
  for (size_t i = 0; i < 4; ++i) x(0, i) = kX[i];
  const QuantizedTensor q = emu::quantize(x, s);
  Codes c;
  for (size_t i = 0; i < 4; ++i) c.push_back(uint8_t(q.code(0, 0, i)));
  return {c, bits(q.scale_inv(0, 0, 0))};
}

std::string f32s(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

}  // namespace

TEST(Fp32ScaleSettings, SettersFollowTheContract) {
  QuantSpec s = named_spec("fp8_tensor");
  EXPECT_EQ(quantize_x(s), std::make_pair(kEps0, 0x3A924925u));
  set_amax_epsilon(s, 1.0, "eps");
  EXPECT_EQ(quantize_x(s), std::make_pair(kEps1, 0x3B124925u));
  set_amax_epsilon(s, 3.0, "eps");
  set_pow2_scale(s, true, "pow2");
  EXPECT_EQ(quantize_x(s), std::make_pair(kEps3Pow2, 0x3C000000u));
  // An epsilon below amax changes nothing; one epsilon is stored as its FP32 rounding.
  set_amax_epsilon(s, 0.1, "eps");
  EXPECT_EQ(bits(s.amax_epsilon), bits(0.1f));
  EXPECT_EQ(quantize_x(s), std::make_pair(kPow2, 0x3B000000u));
  // fp8_block's default is pow2; off gives the general scale.
  QuantSpec b = named_spec("fp8_block");
  EXPECT_EQ(quantize_x(b), std::make_pair(kPow2, 0x3B000000u));
  set_pow2_scale(b, false, "pow2");
  EXPECT_EQ(quantize_x(b), std::make_pair(kEps0, 0x3A924925u));
}

TEST(Fp32ScaleSettings, SettersRefuseWhatHasNoMeaning) {
  const auto msg = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  QuantSpec mx = named_spec("mxfp4");
  EXPECT_NE(msg([&] { set_amax_epsilon(mx, 1.0, "--amax-epsilon"); }).find("--amax-epsilon applies to FP32-scaled"),
            std::string::npos);
  EXPECT_NE(msg([&] { set_pow2_scale(mx, true, "k"); }).find("e8m0 scales"), std::string::npos);
  QuantSpec s = named_spec("fp8_tensor");
  EXPECT_NE(msg([&] { set_amax_epsilon(s, -1.0, "k"); }).find("finite number >= 0"), std::string::npos);
  EXPECT_NE(msg([&] { set_amax_epsilon(s, 1e-50, "k"); }).find("becomes 0 in FP32"), std::string::npos);
  EXPECT_NE(msg([&] { set_amax_epsilon(s, 1e300, "k"); }).find("overflows FP32"), std::string::npos);
  s.fixed_scale = 2.0f;
  EXPECT_NE(msg([&] { set_pow2_scale(s, true, "k"); }).find("delayed"), std::string::npos);
}

TEST(Fp32ScaleSettings, QuantizeCliOptions) {
  CliSandbox s;
  s.put("x.npy", npy_bytes("<f4", "(1, 4)", f32s(kX)));
  const auto run = [&](const std::string& opts) {
    const auto r = s.mxsim("quantize " + opts + " x.npy -o q --json");
    EXPECT_EQ(r.rc, 0) << opts << ": " << r.err;
    const auto d = io::read_npy(s.p / "q.data.npy").bytes;
    const auto si = io::read_npy(s.p / "q.scale_inv.npy").bytes;
    uint32_t b = 0;
    if (si.size() == 4) std::memcpy(&b, si.data(), 4);
    return std::make_pair(Codes(d.begin(), d.end()), b);
  };
  EXPECT_EQ(run("--recipe fp8_tensor"), std::make_pair(kEps0, 0x3A924925u));
  EXPECT_EQ(run("--recipe fp8_tensor --amax-epsilon 1"), std::make_pair(kEps1, 0x3B124925u));
  EXPECT_EQ(run("--recipe fp8_tensor --amax-epsilon 3 --pow2-scale on"), std::make_pair(kEps3Pow2, 0x3C000000u));
  EXPECT_EQ(run("--recipe fp8_row --pow2-scale on"), std::make_pair(kPow2, 0x3B000000u));
  EXPECT_EQ(run("--recipe fp8_block --pow2-scale off"), std::make_pair(kEps0, 0x3A924925u));
  // The settings are recorded with the codes (fp8_block keeps its power-of-two scale).
  ASSERT_EQ(run("--recipe fp8_block --amax-epsilon 1"), std::make_pair(kEps1Pow2, 0x3B800000u));
  const auto meta = nlohmann::json::parse(s.slurp_text("q.meta.json"));
  EXPECT_EQ(meta["amax_epsilon"], 1.0);
  EXPECT_EQ(meta["pow2_scale"], true);
  // Usage errors (exit 2) naming the option.
  for (const auto& [opts, want] : std::vector<std::pair<std::string, std::string>>{
           {"--recipe mxfp4 --amax-epsilon 1", "--amax-epsilon applies to FP32-scaled"},
           {"--recipe nvfp4 --pow2-scale on", "--pow2-scale applies to FP32-scaled"},
           {"--recipe fp8_tensor --amax-epsilon -1", "--amax-epsilon must be a finite number >= 0"},
           {"--recipe fp8_tensor --amax-epsilon 1e-50", "becomes 0 in FP32"},
           {"--recipe fp8_tensor --amax-epsilon x1", "is not a number"},
           {"--recipe fp8_tensor --pow2-scale yes", "--pow2-scale must be on or off"}}) {
    const auto r = s.mxsim("quantize " + opts + " x.npy -o z");
    EXPECT_EQ(r.rc, 2) << opts;
    EXPECT_NE(r.err.find(want), std::string::npos) << opts << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(s.p / "z.data.npy")) << opts;
  }
}

// The training recipes take the settings from recipe.fp8_current_* /
// recipe.fp8_block_*: every operand spec carries them, and quantizing with
// the fprop input's spec gives the hand codes above.
TEST(Fp32ScaleSettings, TrainingRecipesTakeTheConfigKeys) {
  using namespace mxsim::sim;
  const Config d = parse_config(default_config_text(), {}, "default");
  EXPECT_EQ(bits(d.recipe.fp8_current_amax_epsilon), bits(1e-12f));
  EXPECT_EQ(bits(d.recipe.fp8_block_amax_epsilon), bits(1e-4f));
  const Config c = parse_config(default_config_text(),
                                {"recipe.fp8_current_amax_epsilon=1", "recipe.fp8_block_amax_epsilon=3",
                                 "recipe.fp8_block_pow2_scale=true", "recipe.fp8_current_pow2_scale=false"},
                                "test");
  const Recipe rcur = make_recipe("fp8_current", c.recipe), rblk = make_recipe("fp8_block", c.recipe);
  const OperandSpecs& cur = operand_specs(rcur);
  for (const QuantSpec* s : {&cur.x_fprop, &cur.w, &cur.dy_dgrad, &cur.dy_wgrad, &cur.x_wgrad}) {
    EXPECT_EQ(s->amax_epsilon, 1.0f);
    EXPECT_FALSE(s->pow2_scale);
  }
  EXPECT_EQ(quantize_x(cur.x_fprop), std::make_pair(kEps1, 0x3B124925u));
  const OperandSpecs& blk = operand_specs(rblk);
  for (const QuantSpec* s : {&blk.x_fprop, &blk.w, &blk.dy_dgrad, &blk.dy_wgrad, &blk.x_wgrad}) {
    EXPECT_EQ(s->amax_epsilon, 3.0f);
    EXPECT_TRUE(s->pow2_scale);
  }
  EXPECT_EQ(quantize_x(blk.x_fprop), std::make_pair(kEps3Pow2, 0x3C000000u));
  // Values that change meaning in FP32 or are negative are refused naming the key.
  for (const char* bad : {"recipe.fp8_block_amax_epsilon=-1", "recipe.fp8_current_amax_epsilon=1e-50"}) {
    try {
      parse_config(default_config_text(), {bad}, "test");
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos)
          << e.what();
    }
  }
}
