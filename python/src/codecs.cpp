// mxsim.encode / decode / formats: the one rounding routine and the one decoder
// (mxsim/rounding.hpp) elementwise on NumPy arrays.
#include <cstring>

#include "common.hpp"
#include "mxsim/format.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

namespace mxsim::py {
namespace {

Overflow overflow_arg(const std::string& n) {
  if (n == "saturate") return Overflow::Saturate;
  if (n == "ieee") return Overflow::Ieee;
  throw std::invalid_argument("overflow must be 'saturate' or 'ieee', not '" + n + "'");
}

using RandArray = pyb::array_t<uint32_t, pyb::array::c_style | pyb::array::forcecast>;

/// One code per element: encode (float16/32, exact in FP32) or encode_f64
/// (float64, one rounding of the exact value).
template <class T, class X>
pyb::array_t<T> encode_as(const pyb::array_t<X, pyb::array::c_style | pyb::array::forcecast>& x, const FormatSpec& f,
                          int scale_exp, RoundMode mode, Overflow ov, const std::optional<RandArray>& rand) {
  pyb::array_t<T> out(shape_of(x));
  const X* px = x.data();
  const uint32_t* pr = rand ? rand->data() : nullptr;
  T* po = out.mutable_data();
  const size_t n = size_t(x.size());
  {
    pyb::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t r = pr ? pr[i] : 0u;
      if constexpr (sizeof(X) == 8) po[i] = T(encode_f64(f, f64_bits(px[i]), scale_exp, mode, ov, r));
      else po[i] = T(encode(f, f32_bits(px[i]), scale_exp, mode, ov, r));
    }
  }
  return out;
}

template <class X>
pyb::array encode_width(const pyb::array_t<X, pyb::array::c_style | pyb::array::forcecast>& x, const FormatSpec& f,
                        int scale_exp, RoundMode mode, Overflow ov, const std::optional<RandArray>& rand) {
  if (f.bits <= 8) return encode_as<uint8_t>(x, f, scale_exp, mode, ov, rand);
  if (f.bits <= 16) return encode_as<uint16_t>(x, f, scale_exp, mode, ov, rand);
  return encode_as<uint32_t>(x, f, scale_exp, mode, ov, rand);
}

RoundMode encode_rounding(const std::string& n) { return n == "ru" ? RoundMode::RU : rounding_arg(n); }

pyb::array encode_py(const pyb::array& xa, const std::string& fmt, const std::string& rounding, const std::string& overflow,
                     int scale_exp, const std::optional<RandArray>& rand) {
  if (xa.dtype().kind() != 'f') throw std::invalid_argument("encode: x must be a float array");
  const FormatSpec f = spec_of(format_arg(fmt));
  const RoundMode mode = encode_rounding(rounding);
  if (mode == RoundMode::Stochastic && !rand) throw std::invalid_argument("encode: rounding='sr' needs rand (uint32 words, one per element)");
  if (mode != RoundMode::Stochastic && rand) throw std::invalid_argument("encode: rand applies to rounding='sr' only");
  if (rand && shape_of(*rand) != shape_of(xa)) throw std::invalid_argument("encode: rand must have x's shape");
  Overflow ov = overflow_arg(overflow);
  // float16 / float32 values into a format that holds them all (float16 -> fp32, float32 -> fp32):
  // a widening, exact, the overflow policy does not apply (docs/numerics.md §2.3).
  const size_t width = size_t(xa.dtype().itemsize());
  if (scale_exp == 0 && (width == 2 || width == 4))
    ov = widening_overflow(spec_of(width == 2 ? Format::FP16 : Format::FP32), f, ov);
  if (xa.dtype().itemsize() == 8)
    return encode_width(pyb::array_t<double, pyb::array::c_style | pyb::array::forcecast>::ensure(xa), f, scale_exp, mode, ov, rand);
  return encode_width(F32Array::ensure(xa), f, scale_exp, mode, ov, rand);
}

/// E8M0 scale bytes of amax values (scale_rule.hpp): float64 amax is rounded
/// once to float32 (RNE) first, the FP32 amax the rules are defined on.
pyb::array_t<uint8_t> e8m0_scale_py(const pyb::array& amax, const pyb::object& elem_dtype, const std::string& scaling_mode) {
  if (amax.dtype().kind() != 'f') throw std::invalid_argument("e8m0_scale: amax must be a float array");
  const F32Array a = F32Array::ensure(amax);  // float64 -> float32: NumPy's cast, one RNE rounding
  const Format ef = format_arg(pyb::isinstance<pyb::str>(elem_dtype) ? elem_dtype.cast<std::string>()
                                                                      : std::string(pyb::str(elem_dtype)));
  if (!has_role(ef, kRoleMxElem))
    throw std::invalid_argument(std::string("e8m0_scale: ") + spec_of(ef).name +
                                " is not an element format of E8M0-scaled blocks");
  const ScaleRule rule = scaling_mode_arg(scaling_mode);
  const FormatSpec f = spec_of(ef);
  pyb::array_t<uint8_t> out(shape_of(a));
  const float* pa = a.data();
  uint8_t* po = out.mutable_data();
  for (pyb::ssize_t i = 0; i < a.size(); ++i) po[i] = e8m0_scale(rule, f32_bits(pa[i]), f);
  return out;
}

pyb::array_t<float> decode_py(const pyb::array_t<uint32_t, pyb::array::c_style | pyb::array::forcecast>& codes,
                              const std::string& fmt) {
  const FormatSpec f = spec_of(format_arg(fmt));
  pyb::array_t<float> out(shape_of(codes));
  const uint32_t mask = f.bits == 32 ? 0xFFFFFFFFu : (1u << f.bits) - 1;
  const uint32_t* pc = codes.data();
  float* po = out.mutable_data();
  for (pyb::ssize_t i = 0; i < codes.size(); ++i) {
    if (pc[i] & ~mask) throw std::invalid_argument("decode: code " + std::to_string(pc[i]) + " has more than " + std::to_string(f.bits) + " bits");
    po[i] = decode(f, pc[i]);
  }
  return out;
}

}  // namespace

void init_codecs(pyb::module_& m) {
  m.def("encode", &encode_py, pyb::arg("x"), pyb::arg("format"), pyb::arg("rounding") = "rne",
        pyb::arg("overflow") = "saturate", pyb::arg("scale_exp") = 0, pyb::arg("rand") = pyb::none(),
        R"(Codes of x * 2^-scale_exp in `format` (mxsim::encode, docs/numerics.md §2).

x: float array; float64 is rounded ONCE to the format (mxsim::encode_f64: no
float32 intermediate), float16 / float32 as they are. format: e2m1, e2m3, e3m2,
e4m3, e5m2, e4m3fnuz, e5m2fnuz, e8m0, bf16, fp16, fp32 or their PyTorch names
(float8_e4m3fn, ...). rounding: 'rne', 'rz', 'ru' (toward +Inf; ceil for e8m0)
or 'sr' (then rand: uint32 words, one per element: the magnitude rounds away
from zero iff rand < the discarded fraction of the exact value * 2^32,
truncated). overflow: 'saturate' (clamp to +-max) or 'ieee' (+-Inf, else
NaN, else +-max), for narrowing casts: float16 into fp16 or fp32, float32 into
fp32 (scale_exp 0) widen, exactly, Inf staying Inf under either. Returns codes of x's shape: uint8 for formats of up to 8
bits, uint16 for bf16 / fp16, uint32 for fp32. FP4 codes are one per byte
here (mxsim.pack_fp4 packs them as float4_e2m1fn_x2).)");
  m.def("e8m0_scale", &e8m0_scale_py, pyb::arg("amax"), pyb::arg("elem_dtype"), pyb::arg("scaling_mode") = "floor",
        R"(E8M0 scale bytes (uint8, amax's shape) of blocks with the given amax (mxsim::e8m0_scale,
docs/numerics.md §3.1-3.2): amax float array (max |x| of each block; the sign is ignored;
float64 is first rounded to float32, RNE, as the rules work on the FP32 amax).
elem_dtype: the element format (float4_e2m1fn_x2 / e2m1, float8_e4m3fn / e4m3, float8_e5m2,
fp6_e2m3, fp6_e3m2, e4m3fnuz, e5m2fnuz). scaling_mode: torchao's ScaleCalculationMode name
'floor' (default, OCP MX), 'rceil' (NVIDIA), 'even' (AMD), 'ceil'. amax 0 gives 0x00
(2^-127), NaN or Inf gives 0xFF (the NaN scale); the exponent is clamped to [-127, 127].)");
  m.def("decode", &decode_py, pyb::arg("codes"), pyb::arg("format"),
        "Exact float32 values of codes of `format` (every value of every format is an FP32 value); every "
        "NaN code gives the canonical NaN 0x7FC00000 (docs/numerics.md §2.4).");
  m.def("formats", [] {
    pyb::list l;
    for (int i = 0; i < kNumFormats; ++i) {
      const FormatSpec f = spec_of(Format(i));
      pyb::dict d;
      d["name"] = short_name(Format(i));
      d["long_name"] = f.name;
      d["bits"] = f.bits;
      d["exp_bits"] = f.exp_bits;
      d["man_bits"] = f.man_bits;
      d["bias"] = f.bias;
      d["signed"] = f.has_sign;
      d["inf"] = f.has_inf;
      d["nan"] = f.nan != NanKind::None;
      d["subnormals"] = f.has_subnormals;
      d["max"] = decode(f, f.max_code());
      d["max_code"] = f.max_code();
      l.append(d);
    }
    return l;
  }, "The format table (mxsim/format.hpp): one dict per format.");
}

}  // namespace mxsim::py
