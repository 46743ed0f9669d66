// Generates core/include/mxsim/hd/math_tables.hpp: the constant tables of the
// FP32 elementary functions in mxsim/hd/math.hpp, from MPFR at 320 bits.
//
//   g++ -O2 scripts/gen_hd_math_tables.cpp -lmpfr -lgmp -o /tmp/gen &&
//     /tmp/gen > core/include/mxsim/hd/math_tables.hpp
//
// Every value is printed as a hex-float literal, so host and device compilers
// read the same bits. tests/test_hd_math.cpp re-derives each entry from an
// independent oracle (Boost.Multiprecision over MPFR) and checks the bits.
#include <mpfr.h>

#include <cstdio>

namespace {

constexpr mpfr_prec_t kPrec = 320;
constexpr int kErfIntervals = 64;  // centres j/16, j = 0..63: |x| < 3.96875
constexpr int kErfDegree = 12;     // Taylor degree per interval

struct Mp {
  mpfr_t v;
  Mp() { mpfr_init2(v, kPrec); }
  ~Mp() { mpfr_clear(v); }
  Mp(const Mp&) = delete;
  Mp& operator=(const Mp&) = delete;
};

// hi = RN(v), lo = RN(v - hi).
void split_dd(const mpfr_t v, double* hi, double* lo) {
  Mp r;
  *hi = mpfr_get_d(v, MPFR_RNDN);
  mpfr_sub_d(r.v, v, *hi, MPFR_RNDN);
  *lo = mpfr_get_d(r.v, MPFR_RNDN);
}

// v rounded to `bits` significant bits (RNE), as a double.
double round_bits(const mpfr_t v, mpfr_prec_t bits) {
  mpfr_t r;
  mpfr_init2(r, bits);
  mpfr_set(r, v, MPFR_RNDN);
  const double d = mpfr_get_d(r, MPFR_RNDN);
  mpfr_clear(r);
  return d;
}

void print_row(const double* v, int n) {
  std::printf("     ");
  for (int i = 0; i < n; ++i) std::printf(" %a,", v[i]);
  std::printf("\n");
}

void exp_tables() {
  Mp ln2, t;
  mpfr_const_log2(ln2.v, MPFR_RNDN);
  // ln2/64 = kExpLn2Hi + kExpLn2Lo, kExpLn2Hi with 39 bits so k * kExpLn2Hi is
  // exact for |k| < 2^14.
  mpfr_div_ui(t.v, ln2.v, 64, MPFR_RNDN);
  const double l1 = round_bits(t.v, 39);
  mpfr_sub_d(t.v, t.v, l1, MPFR_RNDN);
  const double l2 = mpfr_get_d(t.v, MPFR_RNDN);
  mpfr_ui_div(t.v, 64, ln2.v, MPFR_RNDN);
  const double inv = mpfr_get_d(t.v, MPFR_RNDN);
  std::printf("// 64 / ln 2, and ln 2 / 64 = hi + lo with hi of 39 bits (k * hi exact, |k| < 2^14).\n");
  std::printf("inline constexpr double kExpInvLn2x64 = %a;\n", inv);
  std::printf("inline constexpr double kExpLn2x64Hi = %a;\n", l1);
  std::printf("inline constexpr double kExpLn2x64Lo = %a;\n\n", l2);
  std::printf("// 2^(j/64) = t[2j] + t[2j+1] (hi = RN(v), lo = RN(v - hi)), j = 0..63.\n");
  std::printf("MXSIM_HD inline const double* exp2_j64_table() {\n");
  std::printf("  static constexpr double t[128] = {\n");
  for (int j = 0; j < 64; ++j) {
    mpfr_set_si(t.v, j, MPFR_RNDN);
    mpfr_div_ui(t.v, t.v, 64, MPFR_RNDN);
    mpfr_ui_pow(t.v, 2, t.v, MPFR_RNDN);
    double d[2];
    split_dd(t.v, &d[0], &d[1]);
    print_row(d, 2);
  }
  std::printf("  };\n  return t;\n}\n\n");
}

void log_tables() {
  Mp ln2, t, c;
  mpfr_const_log2(ln2.v, MPFR_RNDN);
  const double h = round_bits(ln2.v, 45);
  mpfr_sub_d(t.v, ln2.v, h, MPFR_RNDN);
  std::printf("// ln 2 = hi + lo with hi of 45 bits (e * hi exact, |e| < 2^8).\n");
  std::printf("inline constexpr double kLogLn2Hi = %a;\n", h);
  std::printf("inline constexpr double kLogLn2Lo = %a;\n\n", mpfr_get_d(t.v, MPFR_RNDN));
  std::printf(
      "// Row i, i = 0..127, for a significand m in [1 + i/128, 1 + (i+1)/128):\n"
      "// { c_i, -ln(c_i) hi, -ln(c_i) lo }. c_i = 1/(1 + (i + 1/2)/128) rounded\n"
      "// to 20 bits (so m * c_i is exact in FP64), except c_0 = 1 and row 127\n"
      "// unused (log_f32 moves m in [2 - 2^-7, 2) to m/2 with c = 1).\n");
  std::printf("MXSIM_HD inline const double* log_inv_table() {\n");
  std::printf("  static constexpr double t[384] = {\n");
  for (int i = 0; i < 128; ++i) {
    double d[3] = {1.0, 0.0, 0.0};
    if (i != 0 && i != 127) {
      mpfr_set_si(t.v, 2 * i + 1, MPFR_RNDN);
      mpfr_div_ui(t.v, t.v, 256, MPFR_RNDN);
      mpfr_add_ui(t.v, t.v, 1, MPFR_RNDN);
      mpfr_ui_div(t.v, 1, t.v, MPFR_RNDN);
      d[0] = round_bits(t.v, 20);
      mpfr_set_d(c.v, d[0], MPFR_RNDN);
      mpfr_log(c.v, c.v, MPFR_RNDN);
      mpfr_neg(c.v, c.v, MPFR_RNDN);
      split_dd(c.v, &d[1], &d[2]);
    }
    print_row(d, 3);
  }
  std::printf("  };\n  return t;\n}\n\n");
}

// Taylor coefficients of erf about c: a_0 = erf(c), a_n = erf^(n)(c) / n! with
// erf^(n)(c) = (2/sqrt(pi)) (-1)^(n-1) H_{n-1}(c) exp(-c^2) (physicists'
// Hermite polynomials, H_{k+1} = 2c H_k - 2k H_{k-1}).
void erf_tables() {
  std::printf(
      "// erf about the centres c_j = j/16, j = 0..63 (|x| < 3.96875): row j is\n"
      "// { a0 hi, a0 lo, a1 hi, a1 lo, a2, ..., a%d }, erf(c_j + t) = sum_n a_n t^n,\n"
      "// a_n = erf^(n)(c_j) / n!.\n",
      kErfDegree);
  std::printf("inline constexpr int kErfDegree = %d;\n", kErfDegree);
  std::printf("inline constexpr int kErfRow = %d;\n", kErfDegree + 3);
  std::printf("MXSIM_HD inline const double* erf_taylor_table() {\n");
  std::printf("  static constexpr double t[%d] = {\n", kErfIntervals * (kErfDegree + 3));
  for (int j = 0; j < kErfIntervals; ++j) {
    Mp c, g, h0, h1, h2, fact, a, tmp;
    mpfr_set_si(c.v, j, MPFR_RNDN);
    mpfr_div_ui(c.v, c.v, 16, MPFR_RNDN);
    mpfr_sqr(g.v, c.v, MPFR_RNDN);
    mpfr_neg(g.v, g.v, MPFR_RNDN);
    mpfr_exp(g.v, g.v, MPFR_RNDN);
    mpfr_const_pi(tmp.v, MPFR_RNDN);
    mpfr_sqrt(tmp.v, tmp.v, MPFR_RNDN);
    mpfr_ui_div(tmp.v, 2, tmp.v, MPFR_RNDN);
    mpfr_mul(g.v, g.v, tmp.v, MPFR_RNDN);  // erf'(c)
    double row[kErfDegree + 3];
    mpfr_erf(a.v, c.v, MPFR_RNDN);
    split_dd(a.v, &row[0], &row[1]);
    mpfr_set_ui(h0.v, 1, MPFR_RNDN);      // H_0
    mpfr_mul_ui(h1.v, c.v, 2, MPFR_RNDN);  // H_1
    mpfr_set_ui(fact.v, 1, MPFR_RNDN);
    for (int n = 1; n <= kErfDegree; ++n) {
      mpfr_mul_ui(fact.v, fact.v, n, MPFR_RNDN);
      // H_{n-1} is h0 (n == 1) or h1 (n >= 2, after the recurrence below).
      mpfr_mul(a.v, g.v, n == 1 ? h0.v : h1.v, MPFR_RNDN);
      mpfr_div(a.v, a.v, fact.v, MPFR_RNDN);
      if ((n - 1) % 2) mpfr_neg(a.v, a.v, MPFR_RNDN);
      if (n == 1)
        split_dd(a.v, &row[2], &row[3]);
      else
        row[n + 2] = mpfr_get_d(a.v, MPFR_RNDN);
      if (n >= 2) {  // H_n = 2c H_{n-1} - 2(n-1) H_{n-2}
        mpfr_mul(h2.v, c.v, h1.v, MPFR_RNDN);
        mpfr_mul_ui(h2.v, h2.v, 2, MPFR_RNDN);
        mpfr_mul_ui(tmp.v, h0.v, 2 * (n - 1), MPFR_RNDN);
        mpfr_sub(h2.v, h2.v, tmp.v, MPFR_RNDN);
        mpfr_set(h0.v, h1.v, MPFR_RNDN);
        mpfr_set(h1.v, h2.v, MPFR_RNDN);
      }
    }
    print_row(row, kErfDegree + 3);
  }
  std::printf("  };\n  return t;\n}\n");
}

}  // namespace

int main() {
  mpfr_set_default_prec(kPrec);
  std::printf(
      "// GENERATED by scripts/gen_hd_math_tables.cpp (MPFR, 320 bits); do not edit.\n"
      "// Constant tables of mxsim/hd/math.hpp. Function-local statics so that a\n"
      "// GPU compiler places them in device memory (an MXSIM_HD function may not\n"
      "// index a namespace-scope host array).\n"
      "#pragma once\n\n#include \"mxsim/hd.hpp\"\n\nnamespace mxsim::hd_math_detail {\n\n");
  exp_tables();
  log_tables();
  erf_tables();
  std::printf("\n}  // namespace mxsim::hd_math_detail\n");
  return 0;
}
