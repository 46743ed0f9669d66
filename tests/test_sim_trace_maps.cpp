// The block and element maps (docs/trace-format.md "Element and block maps"), written by
// `mxsim train` for the snapshot layers, checked against the trace's own snapshots and
// series through independent arithmetic: every weight_q value is its code times its block
// scale; the per-block MSE / SQNR / amax are those of bf16(master) against weight_q
// (de-oscillation off, so the model copy is bf16(master)); the flip map sums to the
// previous row's flips_total and the EMA map averages to its ema_mean; the activation
// operands' rows are the padded tokens per expert and their scales histogram to the
// per-step series; the per-element snaps sum to the snapped series; the watched elements
// equal the snapshots' elements. sim::block_maps itself is checked against the emulator's
// quantizer, dequantizer and Hadamard transform.
#include <gtest/gtest.h>

#include <hdf5.h>
#include <hdf5_hl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/hd/elementwise.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/sim/maps.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/format.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/trainer.hpp"
#include "mxsim/trace/compare.hpp"
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
  EXPECT_EQ(r.format_version(), 5);
  for (const char* l : {"fc1", "fc2"}) {
    for (const char* m : {"block_mse", "block_sqnr_db", "block_amax", "scale", "codes"}) EXPECT_TRUE(r.has(schema::block_map(l, "w", m))) << l << " " << m;
    for (const char* m : {"flips", "ema", "dist_ratio"}) EXPECT_TRUE(r.has(schema::element_map(l, m))) << l << " " << m;
    EXPECT_EQ(r.info(schema::element_map(l, "flips")).snapshot_steps, (std::vector<int64_t>{0, 3, 7}));  // trace rows
  }
  EXPECT_EQ(r.info(schema::block_map("fc1", "w", "scale")).dtype, trace::DType::u8);   // E8M0
  EXPECT_EQ(r.info(schema::block_map("fc2", "w", "scale")).dtype, trace::DType::f32);  // FP32 scale_inv
  EXPECT_FALSE(r.has(schema::block_map("embed", "w", "codes")));  // not a snapshot layer
  // activation operands (format 4): [G, BR, BC] per group at capacity R = 32 tokens (micro-batch
  // of 32, padded to 16) of C columns; fc1 MXFP4 (1x32 along K / N, 32x1 along M for wgrad),
  // fc2 fp8_block (1x128 along K / N and along M: one block per group for 64 columns / 32 rows)
  struct Want {
    const char* l;
    const char* op;
    std::vector<uint64_t> blocks, codes;
    trace::DType scale;
  };
  const Want want[] = {{"fc1", "x", {4, 32, 1}, {4, 32, 32}, trace::DType::u8},
                       {"fc1", "dy", {4, 32, 2}, {4, 32, 64}, trace::DType::u8},
                       {"fc1", "x_wgrad", {4, 1, 32}, {4, 32, 32}, trace::DType::u8},
                       {"fc1", "dy_wgrad", {4, 1, 64}, {4, 32, 64}, trace::DType::u8},
                       {"fc2", "x", {4, 32, 1}, {4, 32, 64}, trace::DType::f32},
                       {"fc2", "dy", {4, 32, 1}, {4, 32, 32}, trace::DType::f32},
                       {"fc2", "x_wgrad", {4, 1, 64}, {4, 32, 64}, trace::DType::f32}};
  for (const Want& w : want) {
    EXPECT_EQ(r.info(schema::block_map(w.l, w.op, "block_sqnr_db")).row_shape, w.blocks) << w.l << "." << w.op;
    EXPECT_EQ(r.info(schema::block_map(w.l, w.op, "codes")).row_shape, w.codes) << w.l << "." << w.op;
    EXPECT_EQ(r.info(schema::block_map(w.l, w.op, "scale")).dtype, w.scale) << w.l << "." << w.op;
    EXPECT_EQ(r.info(schema::block_map(w.l, w.op, "rows")).row_shape, (std::vector<uint64_t>{4})) << w.l << "." << w.op;
  }
}

// The rows of every activation operand's groups are the padded token counts of micro-batch 0
// (the grouped GEMMs' m_splits, /train/tokens_per_expert padded to 16); the maps hold values
// exactly in those rows; the x and dy scales histogram to the per-step scale_exp_hist rows of
// the same quantization, and their element counts to the count series.
TEST(SimTraceMaps, OperandMapsFollowTheRoutingAndTheSeries) {
  const trace::Reader r(run().trace);
  const auto tpe = r.read_series<int64_t>(schema::kTokensPerExpert);  // [rows, NMB = 4, E = 4]
  for (int64_t row : {0, 3, 7}) {
    std::vector<int64_t> ms;
    for (size_t e = 0; e < 4; ++e) ms.push_back(hd::padded_rows(tpe[size_t(row) * 16 + e], 16));
    for (const char* l : {"fc1", "fc2"})
      for (const char* op : schema::kActivationOperands) {
        if (std::string(l) == "fc2" && std::string(op) == "dy_wgrad") continue;  // checked as fc1's
        EXPECT_EQ(r.read_snapshot<int64_t>(schema::block_map(l, op, "rows"), row), ms) << l << "." << op << " row " << row;
        const auto& in = r.info(schema::block_map(l, op, "block_mse"));
        const size_t BR = in.row_shape[1], BC = in.row_shape[2];
        const auto mse = r.read_snapshot<float>(schema::block_map(l, op, "block_mse"), row);
        const size_t per = std::string(op).find("wgrad") != std::string::npos ? 32 : 1;  // rows per block row
        for (size_t g = 0; g < 4; ++g)
          for (size_t b = 0; b < BR * BC; ++b) {
            const bool inside = b / BC < (size_t(ms[g]) + per - 1) / per;
            EXPECT_EQ(std::isnan(mse[g * BR * BC + b]), !inside) << l << "." << op << " row " << row << " group " << g;
          }
      }
    // fc1 is MXFP4: E8M0 bytes, the histogram's bins
    for (const char* op : {"x", "dy"}) {
      const auto scale = r.read_snapshot<uint8_t>(schema::block_map("fc1", op, "scale"), row);
      const auto& in = r.info(schema::block_map("fc1", op, "scale"));
      const size_t BR = in.row_shape[1], BC = in.row_shape[2];
      std::vector<uint64_t> hist(256, 0);
      uint64_t elems = 0;
      for (size_t g = 0; g < 4; ++g) {
        for (size_t b = 0; b < size_t(ms[g]) * BC; ++b) ++hist[scale[g * BR * BC + b]];
        elems += uint64_t(ms[g]) * r.info(schema::block_map("fc1", op, "codes")).row_shape[2];
      }
      EXPECT_EQ(r.read_series<uint64_t>(schema::quant("fc1", op, "scale_exp_hist"), uint64_t(row), 1), hist) << op;
      EXPECT_EQ(r.read_series<uint64_t>(schema::quant("fc1", op, "count"), uint64_t(row), 1).at(0), elems) << op;
    }
  }
}

// sim::block_maps against independent arithmetic on the emulator's quantization: the
// reference is x, or H x (emu::hadamard16_inplace on runs of 16 along M) for a Hadamard spec;
// d is emu::dequantize3; a column-wise quantization's blocks run along the logical rows.
TEST(SimTraceMaps, BlockMapsOfRowwiseAndColumnwiseQuantizations) {
  const size_t M = 48, C = 40;
  Tensor2f x = Tensor2f::from_shape({M, C});
  PhiloxStream rs{7, make_stream(3, 0)};
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = (float(rs(i) >> 8) / 16777216.0f - 0.5f) * float(1 + i % 7);
  x(5, 3) = 0.0f;
  QuantSpec rowwise = sim::mxfp4_weight_spec();
  rowwise.block_rows = 1;  // MXFP4 1x32 along the columns
  QuantSpec col = rowwise;
  col.hadamard16 = true;  // 32 along M with the 16-point Hadamard transform
  const std::vector<int64_t> ms = {16, 32};
  struct Case {
    QuantizedTensor q;
    std::vector<float> x;  // the group's rows
  };
  std::vector<Case> cases;
  cases.push_back({emu::quantize(x, rowwise, Axis::Cols), std::vector<float>(x.begin(), x.end())});
  const auto groups = emu::quantize_grouped_colwise(x, ms, col);
  for (size_t g = 0; g < 2; ++g) {
    const size_t r0 = g == 0 ? 0 : 16;
    cases.push_back({groups[g], std::vector<float>(x.begin() + std::ptrdiff_t(r0 * C), x.begin() + std::ptrdiff_t((r0 + size_t(ms[g])) * C))});
  }
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const QuantizedTensor& q = cases[ci].q;
    const size_t R = q.rows;
    std::vector<float> ref = cases[ci].x;
    if (q.spec.hadamard16)
      for (size_t c = 0; c < C; ++c)
        for (size_t r0 = 0; r0 < R; r0 += 16) {
          float run16[16];
          for (size_t k = 0; k < 16; ++k) run16[k] = ref[(r0 + k) * C + c];
          emu::hadamard16_inplace(run16);
          for (size_t k = 0; k < 16; ++k) ref[(r0 + k) * C + c] = run16[k];
        }
    const Tensor3f d = emu::dequantize3(q);
    const size_t bh = q.transposed ? 32 : 1, bw = q.transposed ? 1 : 32;
    const sim::BlockMaps m = sim::block_maps(cases[ci].x.data(), q);
    ASSERT_EQ(m.BR, (R + bh - 1) / bh) << ci;
    ASSERT_EQ(m.BC, (C + bw - 1) / bw) << ci;
    for (size_t bi = 0; bi < m.BR; ++bi)
      for (size_t bj = 0; bj < m.BC; ++bj) {
        double se = 0, sx = 0;
        float am = 0;
        size_t n = 0;
        for (size_t r = bi * bh; r < std::min(R, (bi + 1) * bh); ++r)
          for (size_t c = bj * bw; c < std::min(C, (bj + 1) * bw); ++c, ++n) {
            const double e = double(ref[r * C + c]) - double(d(0, r, c));
            se += e * e;
            sx += double(ref[r * C + c]) * double(ref[r * C + c]);
            am = std::max(am, std::fabs(ref[r * C + c]));
            ASSERT_EQ(m.codes[r * C + c], q.transposed ? q.code(0, c, r) : q.code(0, r, c));
          }
        const size_t b = bi * m.BC + bj;
        EXPECT_TRUE(same_bits(m.mse[b], float(se / double(n)))) << ci << " block " << b;
        EXPECT_TRUE(same_bits(m.sqnr_db[b], se == 0 ? INFINITY : float(10.0 * std::log10(sx / se)))) << ci << " " << b;
        EXPECT_TRUE(same_bits(m.amax[b], am)) << ci << " " << b;
        EXPECT_EQ(m.scale_bytes[b], q.transposed ? q.scale_bytes(0, bj, bi) : q.scale_bytes(0, bi, bj)) << ci << " " << b;
      }
  }
  // the trace layout: group 1 of capacity 3 block rows holds 2, group 0 is empty
  const sim::BlockMaps one = sim::block_maps(cases[2].x.data(), cases[2].q);  // 32 rows: 1 block row
  const sim::BlockMaps p = sim::padded_group_maps({sim::BlockMaps{}, one}, 3, one.BC, 96, C, false);
  ASSERT_EQ(p.mse.size(), 2u * 3u * one.BC);
  for (size_t b = 0; b < 3 * one.BC; ++b) EXPECT_TRUE(std::isnan(p.mse[b]));
  for (size_t b = 0; b < one.BC; ++b) EXPECT_TRUE(same_bits(p.mse[3 * one.BC + b], one.mse[b]));
  for (size_t b = one.BC; b < 3 * one.BC; ++b) EXPECT_TRUE(std::isnan(p.mse[3 * one.BC + b]));
  EXPECT_EQ(p.codes.size(), 2u * 96u * C);
  for (size_t i = 0; i < one.codes.size(); ++i) ASSERT_EQ(p.codes[96 * C + i], one.codes[i]);
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
// `description` (trace::schema::describe), every per-step series (/steps too) the row
// convention (`rows`) and /train/step as the dimension scale of its row axis, every snapshot
// its own row convention and /snapshot_rows (the trace rows of its `steps` attribute) as
// the dimension scale of its row axis.
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
  // the snapshots' row scale: one list of steps in this run ({1, 4, 8} global: rows 0, 3, 7)
  const hid_t rows = H5Dopen(f, schema::kSnapshotRows, H5P_DEFAULT);
  ASSERT_GE(rows, 0);
  EXPECT_GT(H5DSis_scale(rows), 0);
  int64_t row_values[3] = {};
  const hid_t rows_space = H5Dget_space(rows);
  ASSERT_EQ(H5Sget_simple_extent_npoints(rows_space), 3);
  H5Sclose(rows_space);
  ASSERT_GE(H5Dread(rows, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, row_values), 0);
  EXPECT_EQ(std::vector<int64_t>(row_values, row_values + 3), (std::vector<int64_t>{0, 3, 7}));
  EXPECT_EQ(H5Lexists(f, schema::snapshot_rows_scale(1).c_str(), H5P_DEFAULT), 0);  // no second list
  size_t series = 0, snapshots = 0;
  bool saw_steps = false;
  for (const std::string& n : names) {
    const hid_t d = H5Dopen(f, n.c_str(), H5P_DEFAULT);
    ASSERT_GE(d, 0) << n;
    EXPECT_FALSE(attr(d, "units").empty()) << n;
    EXPECT_FALSE(attr(d, "description").empty()) << n;
    if (n == schema::kSnapshotRows) {
      EXPECT_EQ(attr(d, "units"), "row");
    } else if (n.rfind("/snap/", 0) == 0) {
      ++snapshots;
      EXPECT_EQ(attr(d, "rows"), schema::kSnapshotRowConvention) << n;
      EXPECT_GT(H5DSis_attached(d, rows, 0), 0) << n;
      EXPECT_EQ(H5DSget_num_scales(d, 0), 1) << n;
    } else {
      ++series;
      saw_steps = saw_steps || n == schema::kSteps;
      EXPECT_EQ(attr(d, "rows"), schema::kRowConvention) << n;
      if (n != schema::kTrainStep) {
        EXPECT_GT(H5DSis_attached(d, step, 0), 0) << n;
      }
    }
    H5Dclose(d);
  }
  EXPECT_TRUE(saw_steps);
  EXPECT_GT(series, 30u);
  EXPECT_GT(snapshots, 20u);
  const hid_t counter = H5Dopen(f, schema::kSteps, H5P_DEFAULT);
  EXPECT_EQ(attr(counter, "units"), "row");
  H5Dclose(counter);
  char label[64] = {};
  H5DSget_scale_name(step, label, sizeof label);
  EXPECT_STREQ(label, schema::kStepScaleName);
  H5DSget_scale_name(rows, label, sizeof label);
  EXPECT_STREQ(label, schema::kSnapshotScaleName);
  H5Dclose(rows);
  H5Dclose(step);
  H5Fclose(f);
}

namespace {
/// De-oscillation on (windows of 2 steps from step 1, ratio 1: snaps happen), fc1 snapshotted at
/// every step, 12 watched elements of which some lie in the second 32x32 tile and in expert 1.
struct DeoscRun {
  test::TempDir dir{"sim_maps_deosc"};
  std::filesystem::path trace = dir.p / "run.h5";
  std::vector<int64_t> watch = {0, 1, 2, 3, 31, 32, 33, 1024, 1025, 2047, 2048, 4000};
  DeoscRun() {
    std::string w = "trace.watch_elements=[";
    for (size_t i = 0; i < watch.size(); ++i) w += (i ? ", " : "") + std::to_string(watch[i]);
    const std::vector<std::string> s = {
        "run.epochs=1",          "run.max_steps=8",          "run.train_limit=2048",     "run.test_limit=200",
        "model.d_model=32",      "model.d_ff=64",            "model.experts=4",          "model.top_k=2",
        "batch.global_batch=128", "batch.num_microbatches=4", "optim.warmup_steps=2",     "optim.lr=0.02",
        "deosc.enable=true",     "deosc.period=2",           "deosc.start_step=1",       "deosc.ratio=1.0",
        "trace.snapshot_layers=[\"fc1\"]", "trace.snapshot_steps=[1, 2, 3, 4, 5, 6, 7, 8]", w + "]"};
    const sim::Config c = sim::parse_config(sim::default_config_text(), s, "maps");
    auto be = emu::make_emu_backend();
    sim::TrainOptions o;
    o.trace_path = trace.string();
    sim::train(c, *be, o);
  }
};
DeoscRun& deosc_run() {
  static DeoscRun r;
  return r;
}
}  // namespace

// The per-element snap counts of de-oscillation (/snap/<l>/osc/snaps, as of the snapshot: after
// the previous step's window end) sum to the snapped series of the steps before.
TEST(SimTraceMaps, SnapMapsSumToTheSnappedSeries) {
  const trace::Reader r(deosc_run().trace);
  const auto snapped = r.read_series<int64_t>(schema::deosc_snapped("fc1"));
  ASSERT_EQ(snapped.size(), 8u);
  int64_t before = 0;
  for (int64_t row = 0; row < 8; ++row) {
    const auto snaps = r.read_snapshot<uint32_t>(schema::element_map("fc1", "snaps"), row);
    ASSERT_EQ(snaps.size(), 4u * 64u * 32u);
    int64_t sum = 0;
    for (uint32_t c : snaps) sum += c;
    EXPECT_EQ(sum, before) << "row " << row;
    before += snapped[size_t(row)];
  }
  EXPECT_GT(before, 0) << "the run must snap for this test to mean anything";
}

// Every row of the watched-element series equals the snapshots' elements at that row (every
// row is a snapshot row here), and weight_q is its code times its block scale.
TEST(SimTraceMaps, WatchedElementsEqualTheSnapshotsEveryStep) {
  const DeoscRun& run = deosc_run();
  const trace::Reader r(run.trace);
  const size_t W = run.watch.size();
  const auto element = r.read_series<int64_t>(schema::watch("fc1", "element"));
  const auto master = r.read_series<float>(schema::watch("fc1", "master"));
  const auto wq = r.read_series<float>(schema::watch("fc1", "weight_q"));
  const auto code = r.read_series<uint8_t>(schema::watch("fc1", "code"));
  const auto scale = r.read_series<uint8_t>(schema::watch("fc1", "scale"));
  const auto flips = r.read_series<uint32_t>(schema::watch("fc1", "flips"));
  const auto snaps = r.read_series<uint32_t>(schema::watch("fc1", "snaps"));
  ASSERT_EQ(master.size(), 8 * W);
  uint64_t moved = 0;
  for (int64_t row = 0; row < 8; ++row) {
    const auto sm = r.read_snapshot<float>(schema::snapshot("fc1", "master"), row);
    const auto sq = r.read_snapshot<float>(schema::snapshot("fc1", "weight_q"), row);
    const auto sc = r.read_snapshot<uint8_t>(schema::block_map("fc1", "w", "codes"), row);
    const auto ss = r.read_snapshot<uint8_t>(schema::block_map("fc1", "w", "scale"), row);  // [4, 2, 1]
    const auto sf = r.read_snapshot<uint32_t>(schema::element_map("fc1", "flips"), row);
    const auto sn = r.read_snapshot<uint32_t>(schema::element_map("fc1", "snaps"), row);
    for (size_t j = 0; j < W; ++j) {
      const size_t i = size_t(row) * W + j, e = size_t(run.watch[j]);
      const size_t g = e / (64 * 32), n = (e / 32) % 64;
      EXPECT_EQ(element[i], run.watch[j]);
      EXPECT_TRUE(same_bits(master[i], sm[e])) << "row " << row << " element " << e;
      EXPECT_TRUE(same_bits(wq[i], sq[e])) << "row " << row << " element " << e;
      EXPECT_EQ(code[i], sc[e]);
      EXPECT_EQ(scale[i], ss[g * 2 + n / 32]);
      EXPECT_TRUE(same_bits(wq[i], decode(Format::E2M1, code[i]) * std::ldexp(1.0f, int(scale[i]) - 127)));
      EXPECT_EQ(flips[i], sf[e]);
      EXPECT_EQ(snaps[i], sn[e]);
      if (row > 0) moved += !same_bits(master[i], master[i - W]);
    }
  }
  EXPECT_GT(moved, 0u) << "the masters move over the steps";
}

// The per-element snap counts are de-oscillation state (checkpoint entry deosc/state/<l>/snaps):
// a run stopped after step 5 and resumed writes the steps 6-8 of the uninterrupted run's trace
// bit for bit, the snap map of step 7 and the watched elements' snaps included, after snaps
// happened before the checkpoint.
TEST(SimTraceMaps, ResumedRunKeepsTheSnapCounts) {
  test::TempDir dir("sim_maps_resume");
  const std::vector<std::string> s = {
      "run.epochs=1",          "run.max_steps=8",          "run.train_limit=2048",     "run.test_limit=200",
      "model.d_model=32",      "model.d_ff=64",            "model.experts=4",          "model.top_k=2",
      "batch.global_batch=128", "batch.num_microbatches=4", "optim.warmup_steps=2",     "optim.lr=0.02",
      "deosc.enable=true",     "deosc.period=2",           "deosc.start_step=1",       "deosc.ratio=1.0",
      "trace.snapshot_layers=[\"fc1\"]", "trace.snapshot_steps=[7]"};
  const sim::Config c = sim::parse_config(sim::default_config_text(), s, "resume");
  auto be = emu::make_emu_backend();
  sim::TrainOptions full;
  full.evaluate = false;
  full.trace_path = (dir.p / "full.h5").string();
  sim::train(c, *be, full);
  sim::TrainOptions first = full;
  first.trace_path = (dir.p / "first.h5").string();
  first.checkpoint_path = (dir.p / "ck.h5").string();
  first.stop_after = 5;
  sim::train(c, *be, first);
  sim::TrainOptions second = full;
  second.trace_path = (dir.p / "rest.h5").string();
  second.resume_path = first.checkpoint_path;
  sim::train(c, *be, second);
  const trace::Reader rest(dir.p / "rest.h5");
  uint64_t map = 0;
  for (uint32_t v : rest.read_snapshot<uint32_t>(schema::element_map("fc1", "snaps"), 1)) map += v;  // step 7 = row 1
  EXPECT_GT(map, 0u) << "snaps before the checkpoint";
  const trace::CompareResult r = trace::compare(dir.p / "full.h5", dir.p / "rest.h5");
  EXPECT_EQ(r.steps_compared, 3u);
  for (const std::string& n : {schema::element_map("fc1", "snaps"), schema::watch("fc1", "snaps")})
    EXPECT_NE(std::find(r.common.begin(), r.common.end(), n), r.common.end()) << n;
  EXPECT_FALSE(r.first_difference) << r.first_difference->dataset;
}
