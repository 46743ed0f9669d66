// Backend::gather_deferred and Backend::quant_elements_deferred (the trace's
// watched elements): the emulator's overrides (read in place) and Backend's
// defaults (through a download; called by name on the emulator): each
// element's code and scale are read back from the host QuantizedTensor at
// storage coordinates worked out here (a transposed tensor swaps them; an
// E2M1 code is the low nibble of its byte for an even column, the high one
// for an odd column), and each value is dequantize()'s, an independent path.
// Indices outside the tensor are refused with the index named.
// (GpuOps.WatchedElementsMatchEmulator holds the GPU against these.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/quant_spec.hpp"

using namespace mxsim;

namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct Case {
  const char* recipe;
  Axis axis;
};

TEST(BackendWatchedElements, CodesScalesAndValuesAtTheirStorageCoordinates) {
  auto be = emu::make_emu_backend();
  const size_t G = 2, R = 33, C = 70;  // ragged blocks both ways
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> v(G * R * C);
  for (float& x : v) x = nd(rng);
  Tensor x = be->alloc(DType::f32, {G, R, C});
  be->upload(x, v.data(), v.size() * 4);
  const std::vector<int64_t> idx = {0, 1, 2, 69, 70, 71, 2309, 2310, 4619, 3333};
  for (const Case& c : {Case{"mxfp4", Axis::Cols}, Case{"mxfp4", Axis::Rows}, Case{"fp8_block", Axis::Cols},
                        Case{"nvfp4", Axis::Cols}, Case{"mxfp8", Axis::Rows}}) {
    const std::string what = std::string(c.recipe) + (c.axis == Axis::Rows ? " rows" : " cols");
    const QTensor qh = be->quantize(x, tensor_recipe(c.recipe), c.axis);
    const QuantizedTensor q = be->download(qh);
    ASSERT_EQ(q.transposed, c.axis == Axis::Rows) << what;
    Tensor d = be->alloc(DType::f32, {G, R, C});
    be->dequantize(qh, d);
    const std::vector<float> dv = be->download<float>(d);
    for (int how = 0; how < 2; ++how) {
    Backend::QuantElements e;
    if (how == 0) be->quant_elements_deferred(qh, idx, &e);
    else be->Backend::quant_elements_deferred(qh, idx, &e);  // the default, not the override
    be->resolve_deferred();
    SCOPED_TRACE(how == 0 ? "emulator" : "Backend default");
    ASSERT_EQ(e.code.size(), idx.size()) << what;
    for (size_t j = 0; j < idx.size(); ++j) {
      const size_t i = size_t(idx[j]), g = i / (R * C), lr = i / C % R, lc = i % C;
      const size_t sr = q.transposed ? lc : lr, sc = q.transposed ? lr : lc;
      const bool e2m1 = q.spec.elem == Format::E2M1;
      const uint8_t byte = q.data(g, sr, e2m1 ? sc / 2 : sc);
      const uint32_t code = e2m1 ? (sc % 2 ? byte >> 4 : byte & 0xF) : byte;
      EXPECT_EQ(e.code[j], code) << what << " element " << i;
      const size_t bi = sr / q.block_rows(), bj = sc / q.block_cols();
      if (q.spec.scale_kind == ScaleKind::FP32) {
        EXPECT_EQ(bits(e.scale_inv[j]), bits(q.scale_inv(g, bi, bj))) << what << " element " << i;
        EXPECT_EQ(e.scale_bytes[j], 0) << what;
      } else {
        EXPECT_EQ(e.scale_bytes[j], q.scale_bytes(g, bi, bj)) << what << " element " << i;
        EXPECT_EQ(bits(e.scale_inv[j]), 0u) << what;
      }
      EXPECT_EQ(bits(e.value[j]), bits(dv[i])) << what << " element " << i;
    }
    }
  }
  for (int how = 0; how < 2; ++how) {
    std::vector<float> got(idx.size());
    if (how == 0) be->gather_deferred(x, idx, got.data());
    else be->Backend::gather_deferred(x, idx, got.data());
    be->resolve_deferred();
    for (size_t j = 0; j < idx.size(); ++j) EXPECT_EQ(bits(got[j]), bits(v[size_t(idx[j])])) << j << " how " << how;
  }
}

TEST(BackendWatchedElements, IndexOutsideTheTensorIsNamed) {
  auto be = emu::make_emu_backend();
  Tensor x = be->alloc(DType::f32, {4, 32});
  be->fill_zero(x);
  std::vector<float> sink(2);
  for (std::vector<int64_t> bad : {std::vector<int64_t>{3, 128}, std::vector<int64_t>{-1}}) {
    try {
      be->gather_deferred(x, bad, sink.data());
      ADD_FAILURE() << "no error for index " << bad.back();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("index " + std::to_string(bad.back())), std::string::npos) << e.what();
    }
    try {
      be->Backend::gather_deferred(x, bad, sink.data());
      ADD_FAILURE() << "no error for index " << bad.back();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("index " + std::to_string(bad.back())), std::string::npos) << e.what();
    }
  }
  const QTensor q = be->quantize(x, tensor_recipe("mxfp4"), Axis::Cols);
  Backend::QuantElements out;
  try {
    be->quant_elements_deferred(q, std::vector<int64_t>{128}, &out);
    ADD_FAILURE() << "no error for index 128";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("index 128 lies outside the quantized tensor of 128 elements"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
