// The block and element maps of trace format 2 (docs/trace-format.md "Element and block
// maps"), written by `mxsim train` for the snapshot layers, checked against the trace's own
// snapshots and series through independent arithmetic: every weight_q value is its code
// times its block scale; the per-block MSE / SQNR / amax are those of bf16(master) against
// weight_q (de-oscillation off, so the model copy is bf16(master)); the flip map sums to the
// previous row's flips_total and the EMA map averages to its ema_mean.
#include <gtest/gtest.h>

#include <hdf5.h>
#include <hdf5_hl.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/format.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/trainer.hpp"
#include "mxsim/trace/reader.hpp"
#include "mxsim/trace/schema.hpp"
#include "test_util.hpp"

using namespace mxsim;
namespace schema = trace::schema;

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

struct Run {
  test::TempDir dir{"sim_maps"};
  std::filesystem::path trace = dir.p / "run.h5";
  Run() {
    const std::vector<std::string> s = {
        "run.epochs=1",          "run.max_steps=8",          "run.train_limit=2048",     "run.test_limit=200",
        "model.d_model=32",      "model.d_ff=64",            "model.experts=4",          "model.top_k=2",
        "batch.global_batch=128", "batch.num_microbatches=4", "optim.warmup_steps=2",     "deosc.enable=false",
        "recipe.fc2=fp8_block",  "trace.snapshot_layers=[\"fc1\", \"fc2\"]", "trace.snapshot_steps=[1, 4, 8]"};
    const sim::Config c = sim::parse_config(sim::default_config_text(), s, "maps");
    auto be = emu::make_emu_backend();
    sim::TrainOptions o;
    o.trace_path = trace.string();
    sim::train(c, *be, o);
  }
};

Run& run() {
  static Run r;
  return r;
}

/// Per block (br x bc over [G, N, K]): bf16(master) vs weight_q, FP64 sums in ascending order.
void expect_block_stats(const trace::Reader& r, const std::string& l, int64_t row, size_t G, size_t N, size_t K,
                        size_t br, size_t bc) {
  const auto master = r.read_snapshot<float>(schema::snapshot(l, "master"), row);
  const auto wq = r.read_snapshot<float>(schema::snapshot(l, "weight_q"), row);
  const auto mse = r.read_snapshot<float>(schema::block_map(l, "w", "block_mse"), row);
  const auto sqnr = r.read_snapshot<float>(schema::block_map(l, "w", "block_sqnr_db"), row);
  const auto amax = r.read_snapshot<float>(schema::block_map(l, "w", "block_amax"), row);
  const size_t BR = (N + br - 1) / br, BC = (K + bc - 1) / bc;
  ASSERT_EQ(mse.size(), G * BR * BC);
  for (size_t g = 0; g < G; ++g)
    for (size_t bi = 0; bi < BR; ++bi)
      for (size_t bj = 0; bj < BC; ++bj) {
        double se = 0, sx = 0;
        float am = 0;
        size_t n = 0;
        for (size_t i = bi * br; i < std::min(N, (bi + 1) * br); ++i)
          for (size_t k = bj * bc; k < std::min(K, (bj + 1) * bc); ++k) {
            const size_t e = (g * N + i) * K + k;
            const float x = round_bf16(master[e]);
            am = std::max(am, std::fabs(x));
            const double d = double(x) - double(wq[e]);
            se += d * d;
            sx += double(x) * double(x);
            ++n;
          }
        const size_t b = (g * BR + bi) * BC + bj;
        EXPECT_TRUE(same_bits(mse[b], float(se / double(n)))) << l << " row " << row << " block " << b;
        EXPECT_TRUE(same_bits(sqnr[b], se == 0 ? INFINITY : float(10.0 * std::log10(sx / se)))) << l << " block " << b;
        EXPECT_TRUE(same_bits(amax[b], am)) << l << " block " << b;
      }
}

}  // namespace

TEST(SimTraceMaps, TraceHasTheCurrentFormatAndTheMaps) {
  const trace::Reader r(run().trace);
  EXPECT_EQ(r.format_version(), 3);
  for (const char* l : {"fc1", "fc2"}) {
    for (const char* m : {"block_mse", "block_sqnr_db", "block_amax", "scale", "codes"}) EXPECT_TRUE(r.has(schema::block_map(l, "w", m))) << l << " " << m;
    for (const char* m : {"flips", "ema", "dist_ratio"}) EXPECT_TRUE(r.has(schema::element_map(l, m))) << l << " " << m;
    EXPECT_EQ(r.info(schema::element_map(l, "flips")).snapshot_steps, (std::vector<int64_t>{0, 3, 7}));  // trace rows
  }
  EXPECT_EQ(r.info(schema::block_map("fc1", "w", "scale")).dtype, trace::DType::u8);   // E8M0
  EXPECT_EQ(r.info(schema::block_map("fc2", "w", "scale")).dtype, trace::DType::f32);  // FP32 scale_inv
  EXPECT_FALSE(r.has(schema::block_map("embed", "w", "codes")));  // not a snapshot layer
}

TEST(SimTraceMaps, WeightQIsCodeTimesBlockScale) {
  const trace::Reader r(run().trace);
  for (int64_t row : {0, 3, 7}) {
    // fc1: MXFP4, [4, 64, 32], E2M1 codes in 32x32 tiles with E8M0 scales 2^(byte - 127)
    const auto wq = r.read_snapshot<float>(schema::snapshot("fc1", "weight_q"), row);
    const auto codes = r.read_snapshot<uint8_t>(schema::block_map("fc1", "w", "codes"), row);
    const auto scale = r.read_snapshot<uint8_t>(schema::block_map("fc1", "w", "scale"), row);
    ASSERT_EQ(scale.size(), 4u * 2u * 1u);
    for (size_t e = 0; e < wq.size(); ++e) {
      const size_t g = e / (64 * 32), n = (e / 32) % 64;
      const float want = decode(Format::E2M1, codes[e]) * std::ldexp(1.0f, int(scale[g * 2 + n / 32]) - 127);
      ASSERT_TRUE(same_bits(wq[e], want)) << "fc1 row " << row << " element " << e;
    }
    // fc2: fp8_block, [4, 32, 64], E4M3 codes in 128x128 blocks (one per expert) with FP32 scale_inv
    const auto wq2 = r.read_snapshot<float>(schema::snapshot("fc2", "weight_q"), row);
    const auto codes2 = r.read_snapshot<uint8_t>(schema::block_map("fc2", "w", "codes"), row);
    const auto sinv = r.read_snapshot<float>(schema::block_map("fc2", "w", "scale"), row);
    ASSERT_EQ(sinv.size(), 4u);
    for (size_t e = 0; e < wq2.size(); ++e)
      ASSERT_TRUE(same_bits(wq2[e], decode(Format::E4M3, codes2[e]) * sinv[e / (32 * 64)])) << "fc2 element " << e;
  }
}

TEST(SimTraceMaps, BlockErrorsAreBf16MasterAgainstWeightQ) {
  const trace::Reader r(run().trace);
  for (int64_t row : {0, 3, 7}) {
    expect_block_stats(r, "fc1", row, 4, 64, 32, 32, 32);
    expect_block_stats(r, "fc2", row, 4, 32, 64, 128, 128);
  }
}

TEST(SimTraceMaps, ElementMapsAgreeWithTheSeries) {
  const trace::Reader r(run().trace);
  const auto flips_total = r.read_series<uint64_t>(schema::osc("fc1", "flips_total"));
  const auto ema_mean = r.read_series<double>(schema::osc("fc1", "ema_mean"));
  for (int64_t row : {0, 3, 7}) {
    const auto flips = r.read_snapshot<uint32_t>(schema::element_map("fc1", "flips"), row);
    const auto ema = r.read_snapshot<float>(schema::element_map("fc1", "ema"), row);
    const auto ratio = r.read_snapshot<float>(schema::element_map("fc1", "dist_ratio"), row);
    uint64_t sum = 0;
    double es = 0;
    for (size_t i = 0; i < flips.size(); ++i) {
      sum += flips[i];
      es += double(ema[i]);
      ASSERT_TRUE(std::isfinite(ratio[i]) && ratio[i] >= 0) << i;
    }
    // the maps are the state as of the snapshot: after the previous step's update
    EXPECT_EQ(sum, row == 0 ? 0u : flips_total[size_t(row - 1)]) << "row " << row;
    EXPECT_EQ(es / double(ema.size()), row == 0 ? 0.0 : ema_mean[size_t(row - 1)]) << "row " << row;
  }
}

// The trace reads without the docs: every dataset carries `units` and a
// `description` (trace::schema::describe), every per-step series the row
// convention (`rows`) and /train/step as the dimension scale of its row axis.
TEST(SimTraceMaps, EveryDatasetSaysWhatItHolds) {
  const hid_t f = H5Fopen(run().trace.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  std::vector<std::string> names;
  H5Lvisit(
      f, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t g, const char* name, const H5L_info_t*, void* out) -> herr_t {
        const hid_t o = H5Oopen(g, name, H5P_DEFAULT);
        if (o >= 0 && H5Iget_type(o) == H5I_DATASET) static_cast<std::vector<std::string>*>(out)->push_back("/" + std::string(name));
        if (o >= 0) H5Oclose(o);
        return 0;
      },
      &names);
  ASSERT_GT(names.size(), 50u);
  auto attr = [](hid_t d, const char* a) -> std::string {
    if (H5Aexists(d, a) <= 0) return "";
    const hid_t at = H5Aopen(d, a, H5P_DEFAULT), ty = H5Aget_type(at);
    std::string v;
    if (H5Tis_variable_str(ty) > 0) {
      char* p = nullptr;
      H5Aread(at, ty, &p);
      v = p ? p : "";
      H5free_memory(p);
    } else {
      v.resize(H5Tget_size(ty));
      H5Aread(at, ty, v.data());
      v.resize(std::strlen(v.c_str()));
    }
    H5Tclose(ty);
    H5Aclose(at);
    return v;
  };
  const hid_t step = H5Dopen(f, schema::kTrainStep, H5P_DEFAULT);
  ASSERT_GE(step, 0);
  EXPECT_GT(H5DSis_scale(step), 0);
  size_t series = 0;
  for (const std::string& n : names) {
    if (n == schema::kSteps) continue;  // the completion counter
    const hid_t d = H5Dopen(f, n.c_str(), H5P_DEFAULT);
    ASSERT_GE(d, 0) << n;
    EXPECT_FALSE(attr(d, "units").empty()) << n;
    EXPECT_FALSE(attr(d, "description").empty()) << n;
    if (n.rfind("/snap/", 0) != 0) {
      ++series;
      EXPECT_EQ(attr(d, "rows"), schema::kRowConvention) << n;
      if (n != schema::kTrainStep) {
        EXPECT_GT(H5DSis_attached(d, step, 0), 0) << n;
      }
    }
    H5Dclose(d);
  }
  EXPECT_GT(series, 30u);
  char label[64] = {};
  H5DSget_scale_name(step, label, sizeof label);
  EXPECT_STREQ(label, schema::kStepScaleName);
  H5Dclose(step);
  H5Fclose(f);
}
