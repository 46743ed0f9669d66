// mxsim.encode / decode / formats: the one rounding routine and the one decoder
// (mxsim/rounding.hpp) elementwise on NumPy arrays.
#include <cstring>

#include "common.hpp"
#include "mxsim/format.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::py {
namespace {

Overflow overflow_arg(const std::string& n) {
  if (n == "saturate") return Overflow::Saturate;
  if (n == "ieee") return Overflow::Ieee;
  throw std::invalid_argument("overflow must be 'saturate' or 'ieee', not '" + n + "'");
}

template <class T>
pyb::array_t<T> encode_as(const F32Array& x, const FormatSpec& f, int scale_exp, RoundMode mode, Overflow ov,
                          const std::optional<pyb::array_t<uint32_t, pyb::array::c_style | pyb::array::forcecast>>& rand) {
  pyb::array_t<T> out(shape_of(x));
  const float* px = x.data();
  const uint32_t* pr = rand ? rand->data() : nullptr;
  T* po = out.mutable_data();
  const size_t n = size_t(x.size());
  {
    pyb::gil_scoped_release nogil;
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, px + i, 4);
      po[i] = T(encode(f, bits, scale_exp, mode, ov, pr ? pr[i] : 0u));
    }
  }
  return out;
}

pyb::array encode_py(const pyb::array& xa, const std::string& fmt, const std::string& rounding, const std::string& overflow,
                     int scale_exp, const std::optional<pyb::array_t<uint32_t, pyb::array::c_style | pyb::array::forcecast>>& rand) {
  if (xa.dtype().kind() != 'f') throw std::invalid_argument("encode: x must be a float array");
  const F32Array x = F32Array::ensure(xa);
  const FormatSpec f = spec_of(format_arg(fmt));
  const RoundMode mode = rounding_arg(rounding);
  if (mode == RoundMode::Stochastic && !rand) throw std::invalid_argument("encode: rounding='sr' needs rand (uint32 words, one per element)");
  if (mode != RoundMode::Stochastic && rand) throw std::invalid_argument("encode: rand applies to rounding='sr' only");
  if (rand && shape_of(*rand) != shape_of(x)) throw std::invalid_argument("encode: rand must have x's shape");
  const Overflow ov = overflow_arg(overflow);
  if (f.bits <= 8) return encode_as<uint8_t>(x, f, scale_exp, mode, ov, rand);
  if (f.bits <= 16) return encode_as<uint16_t>(x, f, scale_exp, mode, ov, rand);
  return encode_as<uint32_t>(x, f, scale_exp, mode, ov, rand);
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

x: float array (float64 is first rounded to float32). format: e2m1, e2m3, e3m2,
e4m3, e5m2, e4m3fnuz, e5m2fnuz, e8m0, bf16, fp16, fp32 or their PyTorch names
(float8_e4m3fn, ...). rounding: 'rne', 'rz' or 'sr' (then rand: uint32 words,
one per element: the magnitude rounds away from zero iff rand < the discarded
fraction * 2^32). overflow: 'saturate' (clamp to +-max) or 'ieee' (+-Inf, else
NaN, else +-max). Returns codes of x's shape: uint8 for formats of up to 8
bits, uint16 for bf16 / fp16, uint32 for fp32. FP4 codes are one per byte
here (mxsim.pack_fp4 packs them as float4_e2m1fn_x2).)");
  m.def("decode", &decode_py, pyb::arg("codes"), pyb::arg("format"),
        "Exact float32 values of codes of `format` (every value of every format is an FP32 value).");
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
