// ProfilingBackend: forwards every op unchanged (same bits as the wrapped
// backend) and counts calls per op in its report.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "mxsim/backend_profile.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim {
namespace {

class ProfilingModes : public ::testing::TestWithParam<ProfilingBackend::Mode> {};

TEST_P(ProfilingModes, ForwardsBitForBitAndCountsCalls) {
  ProfilingBackend prof(emu::make_emu_backend(), GetParam());
  auto plain = emu::make_emu_backend();
  const std::vector<float> l = {0.5f, -1.25f, 3.0f, 0.0f, 1e-3f, -7.0f};
  std::vector<float> got[2];
  Backend* bes[2] = {&prof, plain.get()};
  for (int b = 0; b < 2; ++b) {
    Tensor x = bes[b]->alloc(DType::f32, {2, 3}), p = bes[b]->alloc(DType::f32, {2, 3});
    bes[b]->upload(x, std::span<const float>(l));
    bes[b]->softmax_rows(x, p);
    bes[b]->softmax_rows(p, p);
    got[b] = bes[b]->download<float>(p);
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0);
  const std::string r = prof.report();
  EXPECT_NE(r.find("softmax_rows                          2"), std::string::npos) << r;
  EXPECT_NE(r.find("upload                                1"), std::string::npos) << r;
  EXPECT_EQ(r.find("adamw"), std::string::npos) << "ops never called are not listed\n" << r;
  EXPECT_EQ(prof.name(), "emu");
  EXPECT_GT(prof.total_seconds(), 0.0);  // the ops took time (steady_clock counts nanoseconds)
  EXPECT_LT(prof.total_seconds(), 60.0);
}
// The trace's watched-element ops reach the wrapped backend as themselves
// (not through Backend's defaults, which download the whole tensor: a
// wrapper that does not forward a deferred op turns it into a download).
TEST_P(ProfilingModes, ForwardsTheWatchedElementOps) {
  ProfilingBackend prof(emu::make_emu_backend(), GetParam());
  Tensor x = prof.alloc(DType::f32, {4, 32});
  std::vector<float> v(128);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.25f;
  prof.upload(x, std::span<const float>(v));
  const QTensor q = prof.quantize(x, tensor_recipe("mxfp8"), Axis::Cols);
  const std::vector<int64_t> idx = {3, 77};
  std::vector<float> g(2);
  prof.gather_deferred(x, idx, g.data());
  Backend::QuantElements e;
  prof.quant_elements_deferred(q, idx, &e);
  prof.resolve_deferred();
  EXPECT_EQ(g[0], 0.75f);
  EXPECT_EQ(g[1], 19.25f);
  ASSERT_EQ(e.value.size(), 2u);
  const std::string r = prof.report();
  EXPECT_NE(r.find("gather (watched elements)             1"), std::string::npos) << r;
  EXPECT_NE(r.find("quant_elements (watched)              1"), std::string::npos) << r;
  EXPECT_EQ(r.find("download"), std::string::npos) << "nothing went through a download\n" << r;
}
INSTANTIATE_TEST_SUITE_P(DeviceAndHost, ProfilingModes,
                         ::testing::Values(ProfilingBackend::Mode::Device, ProfilingBackend::Mode::Host),
                         [](const auto& i) { return i.param == ProfilingBackend::Mode::Device ? "device" : "host"; });

}  // namespace
}  // namespace mxsim
