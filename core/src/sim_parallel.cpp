// The flat layout of the distributed optimizer and the in-process communicator of P virtual
// ranks (sim/parallel.hpp).
#include "mxsim/sim/parallel.hpp"

#include <numeric>
#include <stdexcept>

#include "mxsim/bits.hpp"

namespace mxsim::sim {

Range split_even(size_t n, int P, int r) {
  if (P < 1 || r < 0 || r >= P)
    throw std::invalid_argument("split_even: rank " + std::to_string(r) + " of " + std::to_string(P));
  const size_t q = n / size_t(P), rem = n % size_t(P), ur = size_t(r);
  const size_t b = ur * q + std::min(ur, rem);
  return {b, b + q + (ur < rem ? 1 : 0)};
}

FlatLayout::FlatLayout(std::vector<size_t> numels, int ranks) : numel_(std::move(numels)), ranks_(ranks) {
  if (ranks < 1) throw std::invalid_argument("FlatLayout: ranks must be >= 1, got " + std::to_string(ranks));
  for (size_t n : numel_) {
    offset_.push_back(total_);
    total_ += n;
  }
  shard_ = (total_ + size_t(ranks) - 1) / size_t(ranks);
  padded_ = shard_ * size_t(ranks);
}

Range FlatLayout::piece(size_t p, int r) const {
  const Range s = shard_range(r);
  const size_t b = std::max(s.begin, offset_[p]), e = std::min(s.end, offset_[p] + numel_[p]);
  if (e <= b) return {0, 0};
  return {b - offset_[p], e - offset_[p]};
}

namespace {

class VirtualComm final : public Comm {
 public:
  VirtualComm(Backend& be, int P) : be_(be), P_(P), ranks_(size_t(P)) {
    std::iota(ranks_.begin(), ranks_.end(), 0);
  }
  int size() const override { return P_; }
  const std::vector<int>& local_ranks() const override { return ranks_; }

  std::vector<std::vector<int64_t>> all_to_all_counts(const std::vector<std::vector<int64_t>>& send) override {
    check_entries(send.size(), "all_to_all_counts");
    const size_t P = size_t(P_), c = send[0].size() / P;
    for (size_t s = 0; s < P; ++s)
      if (send[s].size() != c * P || send[0].size() % P != 0)
        throw std::invalid_argument("all_to_all_counts: rank " + std::to_string(s) + " sends " +
                                    std::to_string(send[s].size()) + " counts; expected " + std::to_string(P) +
                                    " chunks of the same size as rank 0's");
    std::vector<std::vector<int64_t>> recv(P, std::vector<int64_t>(c * P));
    for (size_t s = 0; s < P; ++s)
      for (size_t d = 0; d < P; ++d)
        for (size_t j = 0; j < c; ++j) recv[d][s * c + j] = send[s][d * c + j];
    return recv;
  }

  std::vector<Tensor> all_to_all_v(std::span<const Tensor> send,
                                   const std::vector<std::vector<int64_t>>& splits) override {
    check_entries(send.size(), "all_to_all_v");
    check_entries(splits.size(), "all_to_all_v (splits)");
    const size_t P = size_t(P_);
    size_t C = 0;
    std::vector<std::vector<size_t>> start(P);  // first row of each destination's block per source
    for (size_t s = 0; s < P; ++s) {
      const Tensor& t = send[s];
      if (t.dtype() != DType::f32 || t.rank() != 2)
        throw std::invalid_argument("all_to_all_v: rank " + std::to_string(s) + " sends " + name_of(t.dtype()) + " " +
                                    t.shape().str() + "; expected f32 [rows, C]");
      if (s == 0) C = t.dim(1);
      if (t.dim(1) != C)
        throw std::invalid_argument("all_to_all_v: rank " + std::to_string(s) + " sends rows of " +
                                    std::to_string(t.dim(1)) + " columns, rank 0 of " + std::to_string(C));
      if (splits[s].size() != P)
        throw std::invalid_argument("all_to_all_v: rank " + std::to_string(s) + " has " +
                                    std::to_string(splits[s].size()) + " splits for " + std::to_string(P) + " ranks");
      size_t acc = 0;
      for (int64_t c : splits[s]) {
        if (c < 0) throw std::invalid_argument("all_to_all_v: rank " + std::to_string(s) + " has a negative split");
        start[s].push_back(acc);
        acc += size_t(c);
      }
      if (acc != t.dim(0))
        throw std::invalid_argument("all_to_all_v: rank " + std::to_string(s) + "'s splits sum to " +
                                    std::to_string(acc) + " rows, it sends " + std::to_string(t.dim(0)));
    }
    std::vector<Tensor> recv;
    for (size_t d = 0; d < P; ++d) {
      size_t rows = 0;
      for (size_t s = 0; s < P; ++s) rows += size_t(splits[s][d]);
      Tensor r = be_.alloc(DType::f32, {rows, C});
      size_t at = 0;
      for (size_t s = 0; s < P; ++s) {
        const size_t n = size_t(splits[s][d]);
        be_.copy_range(send[s], start[s][d] * C, r, at * C, n * C);
        at += n;
      }
      recv.push_back(std::move(r));
    }
    return recv;
  }

  void reduce_scatter(std::span<const Tensor> in, std::span<Tensor> out) override {
    check_entries(in.size(), "reduce_scatter");
    check_entries(out.size(), "reduce_scatter (out)");
    const size_t P = size_t(P_), n = out[0].numel();
    for (size_t r = 0; r < P; ++r) {
      if (in[r].dtype() != DType::f32 || out[r].dtype() != DType::f32 || out[r].numel() != n ||
          in[r].numel() != n * P)
        throw std::invalid_argument("reduce_scatter: rank " + std::to_string(r) + " has " + name_of(in[r].dtype()) +
                                    " " + in[r].shape().str() + " in, " + name_of(out[r].dtype()) + " " +
                                    out[r].shape().str() + " out; expected f32 of P x " + std::to_string(n) +
                                    " and " + std::to_string(n) + " elements");
    }
    // Gather, then sum in rank order: each source's buffer is read once.
    std::vector<std::vector<float>> acc(P);
    for (size_t s = 0; s < P; ++s) {
      const std::vector<float> h = be_.download<float>(in[s]);
      for (size_t r = 0; r < P; ++r) {
        const float* src = h.data() + r * n;
        if (s == 0) {
          acc[r].assign(src, src + n);
          continue;
        }
        float* a = acc[r].data();
        for (size_t i = 0; i < n; ++i) a[i] = canonical_nan(a[i] + src[i]);  // docs/numerics.md: canonical NaNs
      }
    }
    for (size_t r = 0; r < P; ++r) be_.upload(out[r], std::span<const float>(acc[r]));
  }

  void all_gather(std::span<const Tensor> in, std::span<Tensor> out) override {
    check_entries(in.size(), "all_gather");
    check_entries(out.size(), "all_gather (out)");
    const size_t P = size_t(P_), n = in[0].numel();
    for (size_t r = 0; r < P; ++r)
      if (in[r].dtype() != out[r].dtype() || in[r].numel() != n || out[r].numel() != n * P)
        throw std::invalid_argument("all_gather: rank " + std::to_string(r) + " has " + name_of(in[r].dtype()) + " " +
                                    in[r].shape().str() + " in, " + name_of(out[r].dtype()) + " " +
                                    out[r].shape().str() + " out; expected " + std::to_string(n) + " and P x " +
                                    std::to_string(n) + " elements of one dtype");
    for (size_t d = 0; d < P; ++d)
      for (size_t s = 0; s < P; ++s) be_.copy_range(in[s], 0, out[d], s * n, n);
  }

 private:
  void check_entries(size_t got, const char* op) const {
    if (got != size_t(P_))
      throw std::invalid_argument(std::string(op) + ": " + std::to_string(got) + " entries for " +
                                  std::to_string(P_) + " local ranks");
  }
  Backend& be_;
  int P_;
  std::vector<int> ranks_;
};

}  // namespace

std::unique_ptr<Comm> make_virtual_comm(Backend& be, int ranks) {
  if (ranks < 1) throw std::invalid_argument("make_virtual_comm: ranks must be >= 1, got " + std::to_string(ranks));
  return std::make_unique<VirtualComm>(be, ranks);
}

}  // namespace mxsim::sim
