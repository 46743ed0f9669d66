// Names of the expert activations (config key model.activation).
#include "mxsim/activation.hpp"

#include <stdexcept>
#include <string>

namespace mxsim {

const char* name_of(Activation a) {
  switch (a) {
    case Activation::Relu: return "relu";
    case Activation::Gelu: return "gelu";
    case Activation::Silu: return "silu";
  }
  return "?";
}
Activation activation_from_name(std::string_view n) {
  for (Activation a : {Activation::Relu, Activation::Gelu, Activation::Silu})
    if (n == name_of(a)) return a;
  throw std::invalid_argument("unknown activation '" + std::string(n) + "' (known: relu, gelu, silu)");
}

}  // namespace mxsim
