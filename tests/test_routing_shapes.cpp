// The combine, router and embedding ops index with top / row_of / dgate / f:
// operands whose sizes do not fit one another are refused, naming the op and
// the operand, before anything is read (the front door, core/src/backend_checks.cpp).
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "mxsim/backend.hpp"
#include "mxsim/emu/backend_emu.hpp"

namespace mxsim {
namespace {

void expect_refused(const std::function<void()>& f, const std::string& op, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << op << " accepted " << what << " of the wrong size";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(op + ": " + what), std::string::npos) << e.what();
  }
}

TEST(RoutingShapes, MisfitOperandsAreRefusedByName) {
  auto be = emu::make_emu_backend();
  const size_t T = 4, k = 2, E = 3, M = 16, d = 5;
  Tensor p = be->alloc(DType::f32, {T, E}), h = be->alloc(DType::f32, {T, d}), h1 = be->alloc(DType::f32, {T, d});
  Tensor yp = be->alloc(DType::f32, {M, d}), dyp = be->alloc(DType::f32, {M, d}), dl = be->alloc(DType::f32, {T, E});
  Tensor top_bad = be->alloc(DType::i32, {T, 1}), row_ok = be->alloc(DType::i64, {T * k});
  Tensor row_bad = be->alloc(DType::i64, {T * k - 1}), dgate_bad = be->alloc(DType::f32, {T * k + 1});
  Tensor top_ok = be->alloc(DType::i32, {T, k}), dgate_ok = be->alloc(DType::f32, {T * k});
  Tensor f_bad = be->alloc(DType::f32, {E + 1});
  expect_refused([&] { be->unpermute_combine(yp, h, p, top_bad, row_ok, k, h1); }, "unpermute_combine", "top");
  expect_refused([&] { be->combine_backward(h, yp, p, top_ok, row_bad, k, dyp, dgate_ok); }, "combine_backward", "row_of");
  expect_refused([&] { be->router_backward(p, top_ok, dgate_bad, be->alloc(DType::f32, {E}), 0.5f, k, dl); },
                 "router_backward", "dgate");
  expect_refused([&] { be->router_backward(p, top_ok, dgate_ok, f_bad, 0.5f, k, dl); }, "router_backward", "f");
  expect_refused([&] { be->embed_grad_sum(h, h, yp, row_bad, k, h1); }, "embed_grad_sum", "row_of");
}

}  // namespace
}  // namespace mxsim
