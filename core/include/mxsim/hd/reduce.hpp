// tree_sum: the one order of every whole-tensor FP64 sum (docs/numerics.md §6,
// "Whole-tensor FP64 sums").
//
//   tree_sum(t_0 .. t_{n-1}), chunk C = kTreeSumChunk = 256:
//     n <= C: s = +0.0; for i ascending: s = s + t_i   (FP64, plain adds, no FMA)
//     n >  C: partial_j = the sequential sum of chunk [j C, min(n, (j + 1) C)),
//             j = 0 .. ceil(n / C) - 1; result = tree_sum(partial_0 .. partial_{m-1}).
//
// Why a tree: a single sequential fold over 262K-67M elements cannot run in
// parallel on a GPU. With this rule one thread block (or one thread) takes a
// chunk, a second pass sums the partials by the same rule, and the result is
// bit-identical to the emulator's whatever the thread count or launch shape,
// because the tree is fixed by n alone. For n <= 256 it is the sequential sum.
//
// chunk_sum is MXSIM_HD; tree_sum and TreeSum are host code (they hold the
// partials in a std::vector). The GPU's tree_reduce
// (backends/hip/src/tree_sum.hpp) folds the same chunks in its own kernels:
// records staged in shared memory, several components at once.
#pragma once
#include <cstddef>
#include <type_traits>
#include <vector>

#include "mxsim/hd.hpp"

namespace mxsim::hd {

inline constexpr size_t kTreeSumChunk = 256;

/// Number of chunks of a tree_sum level over n terms (0 for n = 0).
MXSIM_HD constexpr size_t tree_sum_chunks(size_t n) { return (n + kTreeSumChunk - 1) / kTreeSumChunk; }

/// Sequential sum of chunk j of n terms: s = +0.0, then s = s + term(i) for i
/// ascending over [j C, min(n, (j + 1) C)). term is any callable size_t -> double.
template <class Term>
MXSIM_HD double chunk_sum(const Term& term, size_t n, size_t j) {
  const size_t lo = j * kTreeSumChunk, hi = lo + kTreeSumChunk < n ? lo + kTreeSumChunk : n;
  double s = +0.0;
  for (size_t i = lo; i < hi; ++i) s = s + term(i);
  return s;
}

inline double tree_sum(const double* t, size_t n);

/// tree_sum of term(0) .. term(n-1) (host); term is a callable size_t -> double.
template <class Term>
  requires std::is_invocable_r_v<double, const Term&, size_t>
double tree_sum(const Term& term, size_t n) {
  if (n <= kTreeSumChunk) return chunk_sum(term, n, 0);
  std::vector<double> partial(tree_sum_chunks(n));
  for (size_t j = 0; j < partial.size(); ++j) partial[j] = chunk_sum(term, n, j);
  return tree_sum(static_cast<const double*>(partial.data()), partial.size());
}

/// tree_sum of the array t[0..n) (host).
inline double tree_sum(const double* t, size_t n) {
  return tree_sum([t](size_t i) { return t[i]; }, n);
}

/// tree_sum fed one term at a time, in ascending index (host): for the emu
/// loops whose terms come out of an element update with side effects, so that
/// no n-long array of terms is needed. add(t_0) .. add(t_{n-1}), then result().
class TreeSum {
 public:
  void add(double t) {
    if (k_ == kTreeSumChunk) {  // chunk full and another term follows: close it
      partial_.push_back(s_);
      s_ = +0.0;
      k_ = 0;
    }
    s_ = s_ + t;
    ++k_;
  }
  double result() const {
    if (partial_.empty()) return s_;  // n <= C: the sequential sum
    std::vector<double> p = partial_;
    p.push_back(s_);  // the last chunk (at least one term)
    return tree_sum(static_cast<const double*>(p.data()), p.size());
  }

 private:
  std::vector<double> partial_;  ///< sums of the closed chunks
  double s_ = +0.0;              ///< sum of the open chunk
  size_t k_ = 0;                 ///< terms in the open chunk
};

}  // namespace mxsim::hd
