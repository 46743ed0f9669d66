// Helper for test_trace_writer: writes a trace step by step until killed (or `steps` done).
// usage: trace_writer_main PATH STEPS SLEEP_US
// Values are closed-form functions of the step (see expected_* in test_trace_writer.cpp).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mxsim/trace/histogram.hpp"
#include "mxsim/trace/writer.hpp"

using namespace mxsim::trace;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PATH STEPS SLEEP_US\n", argv[0]);
    return 2;
  }
  const long steps = std::atol(argv[2]);
  const useconds_t sleep_us = useconds_t(std::atol(argv[3]));
  try {
    Writer w(argv[1], "[model]\nexperts = 4\n", make_provenance("emu", 7));
    w.declare_series("/train/loss", DType::f32, {});
    w.declare_series("/train/counts", DType::u64, {3});
    w.declare_series("/layers/fc1/grad_norm", DType::f32, {2, 3});
    w.declare_series("/layers/fc1/scale_exp_hist", DType::u64, {256});
    w.declare_snapshot("/snapshots/fc1/master", DType::f32, {4, 5}, {2, 4, 1000000});
    w.start_swmr();
    for (long s = 0; s < steps; ++s) {
      const float loss = float(s) * 0.5f + 0.25f;
      w.append("/train/loss", loss);
      usleep(sleep_us);
      const uint64_t c[3] = {uint64_t(s), uint64_t(s) * uint64_t(s), ~uint64_t(s)};
      w.append("/train/counts", c);
      usleep(sleep_us);
      float g[6];
      for (int i = 0; i < 6; ++i) g[i] = float(s * 10 + i) / 8.0f;
      w.append("/layers/fc1/grad_norm", g);
      ScaleExpHistogram h;
      for (long i = 0; i <= s % 7; ++i) h.add_e8m0(uint8_t(120 + i));
      h.add_nan();
      w.append("/layers/fc1/scale_exp_hist", h.counts().data());
      if (s == 2 || s == 4) {
        float snap[20];
        for (int i = 0; i < 20; ++i) snap[i] = float(s) + float(i) / 32.0f;
        w.write_snapshot("/snapshots/fc1/master", snap);
      }
      usleep(sleep_us);
      w.end_step();
    }
    w.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace_writer_main: %s\n", e.what());
    return 1;
  }
  return 0;
}
