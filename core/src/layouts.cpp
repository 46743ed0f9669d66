#include "mxsim/layouts.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "mxsim/hd/quant_block.hpp"
#include "mxsim/io/checked_size.hpp"

namespace mxsim::layout {
namespace {

std::string shape_s(const std::vector<size_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}
size_t cdiv(size_t a, size_t b) { return size_t(io::ceil_div(a, b)); }
size_t roundup(size_t a, size_t m) { return cdiv(a, m) * m; }
size_t prod(const std::vector<size_t>& s, size_t from, size_t to) {
  size_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}
[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }
size_t mul(size_t a, size_t b) {
  if (b && a > SIZE_MAX / b) bad("shape too large (its size overflows)");
  return a * b;
}

QuantSpec mx_spec(Format elem, int br, int bc) {
  QuantSpec s;
  s.elem = elem;
  s.block_rows = br;
  s.block_cols = bc;
  s.scale_kind = ScaleKind::E8M0;
  return s;
}

}  // namespace

void check_elem_width(Format elem, const std::string& declared, const std::string& data) {
  const FormatSpec f = spec_of(elem);
  if (f.bits <= 8) return;
  bad(declared + " " + short_name(elem) + " (" + f.name + ") is a " + std::to_string(f.bits) + "-bit format, but " +
      data + " holds one code per byte: element formats are e2m1, e2m3, e3m2, e4m3, e5m2, e4m3fnuz, e5m2fnuz");
}

void check_code_width(Format elem, std::span<const uint8_t> codes, const std::string& data) {
  const FormatSpec f = spec_of(elem);
  if (elem == Format::E2M1 || f.bits >= 8) return;  // packed nibbles, or every byte a code
  const unsigned above = 0xFFu << f.bits & 0xFFu;
  for (size_t i = 0; i < codes.size(); ++i) {
    if (!(codes[i] & above)) continue;
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", unsigned(codes[i]));
    bad(data + ": code " + std::to_string(i) + " is the byte " + byte + ", which is no " + short_name(elem) + " (" +
        f.name + ") code: a " + std::to_string(f.bits) + "-bit code stored one per byte leaves the top " +
        std::to_string(8 - f.bits) + " bits zero");
  }
}

QuantizedTensor from_mxsim(const QuantSpec& spec, size_t groups, size_t rows, size_t cols, bool transposed,
                           std::span<const uint8_t> data, std::span<const uint8_t> scale_bytes,
                           std::span<const float> scale_inv, float tensor_scale_inv) {
  check_elem_width(spec.elem, "element format", "the data");
  check_code_width(spec.elem, data, "the data");
  QuantizedTensor q;
  q.spec = spec;
  q.groups = groups;
  q.rows = rows;
  q.cols = cols;
  q.transposed = transposed;
  q.tensor_scale_inv = tensor_scale_inv;
  if (groups == 0 || rows == 0 || cols == 0) bad("logical shape [" + std::to_string(groups) + ", " + std::to_string(rows) + ", " + std::to_string(cols) + "] is empty");
  if (spec.block_rows < 0 || spec.block_cols < 0) bad("negative block size");
  const size_t rb = q.row_bytes();
  (void)mul(mul(groups, rows), cols);
  if (data.size() != mul(mul(groups, q.srows()), rb))
    bad("data holds " + std::to_string(data.size()) + " bytes; [" + std::to_string(groups) + ", " +
        std::to_string(q.srows()) + ", " + std::to_string(rb) + "] needs " + std::to_string(groups * q.srows() * rb));
  q.data = Bytes3::from_shape({groups, q.srows(), rb});
  std::memcpy(q.data.data(), data.data(), data.size());
  const size_t nbr = cdiv(q.srows(), q.block_rows()), nbc = cdiv(q.scols(), q.block_cols());
  const size_t ns = mul(mul(groups, nbr), nbc);
  if (spec.scale_kind == ScaleKind::FP32) {
    if (scale_inv.size() != ns)
      bad("scale_inv holds " + std::to_string(scale_inv.size()) + " values; " + std::to_string(groups) + " x " +
          std::to_string(nbr) + " x " + std::to_string(nbc) + " blocks need " + std::to_string(ns));
    q.scale_inv = Tensor3f::from_shape({groups, nbr, nbc});
    std::memcpy(q.scale_inv.data(), scale_inv.data(), ns * 4);
  } else {
    if (scale_bytes.size() != ns)
      bad("scale holds " + std::to_string(scale_bytes.size()) + " bytes; " + std::to_string(groups) + " x " +
          std::to_string(nbr) + " x " + std::to_string(nbc) + " blocks need " + std::to_string(ns));
    q.scale_bytes = Bytes3::from_shape({groups, nbr, nbc});
    std::memcpy(q.scale_bytes.data(), scale_bytes.data(), ns);
  }
  return q;
}

namespace {

/// torchao's axes: 1-D [K], 2-D [R, K], 3-D [G, R, K] (K counts elements).
struct TorchaoDims {
  size_t G, R, K;
};
TorchaoDims torchao_dims(const std::vector<size_t>& qs, bool packed) {
  if (qs.empty() || qs.size() > 3) bad("qdata shape " + shape_s(qs) + ": torchao layouts are read 1-D to 3-D");
  return {qs.size() == 3 ? qs[0] : 1, qs.size() == 1 ? 1 : qs[qs.size() - 2], packed ? 2 * qs.back() : qs.back()};
}

/// A plain torchao scale shape [..., ceil(K/block)] beside qdata's.
void check_torchao_scale_shape(const std::vector<size_t>& qs, const std::vector<size_t>& ss, size_t K, size_t block) {
  if (ss.size() != qs.size()) bad("scale shape " + shape_s(ss) + " and qdata shape " + shape_s(qs) + " differ in rank");
  for (size_t i = 0; i + 1 < qs.size(); ++i)
    if (ss[i] != qs[i]) bad("scale shape " + shape_s(ss) + " does not match qdata shape " + shape_s(qs));
  if (ss.back() != cdiv(K, block))
    bad("scale shape " + shape_s(ss) + ": " + std::to_string(K) + " elements per row in blocks of " +
        std::to_string(block) + " need " + std::to_string(cdiv(K, block)) + " scales per row");
}

QuantSpec nvfp4_1x16_spec() {
  QuantSpec s;
  s.elem = Format::E2M1;
  s.block_rows = 1;
  s.block_cols = 16;
  s.scale_kind = ScaleKind::UE4M3;
  return s;
}

/// The [rows, cols] scales of a matrix TE stores padded to [prows, pcols]
/// (prows >= rows, pcols >= cols), or swizzled in 128 x 4 tiles; padding never read.
std::vector<uint8_t> te_padded_bytes(std::span<const uint8_t> scale, const std::vector<size_t>& ss, size_t rows,
                                     size_t cols, size_t prows, size_t pcols, bool swizzled, const std::string& what) {
  if (swizzled) return unswizzle_blocked_scales(scale, 1, rows, cols);
  if (ss.size() != 2 || ss[0] != prows || ss[1] != pcols)
    bad(what + " shape " + shape_s(ss) + ": TE pads it to [" + std::to_string(prows) + ", " + std::to_string(pcols) + "]");
  std::vector<uint8_t> out(rows * cols);
  for (size_t r = 0; r < rows; ++r) std::memcpy(&out[r * cols], &scale[r * pcols], cols);
  return out;
}

}  // namespace

QuantizedTensor from_torchao(Format elem, int block_size, const std::vector<size_t>& qs, std::span<const uint8_t> qdata,
                             const std::vector<size_t>& ss, std::span<const uint8_t> scale, bool blocked_scales) {
  if (block_size <= 0) bad("block_size must be positive");
  const auto [G, R, K] = torchao_dims(qs, elem == Format::E2M1);
  if (blocked_scales) {
    const std::vector<uint8_t> plain = unswizzle_blocked_scales(scale, G, R, cdiv(K, size_t(block_size)));
    return from_mxsim(mx_spec(elem, 1, block_size), G, R, K, false, qdata, plain, {});
  }
  check_torchao_scale_shape(qs, ss, K, size_t(block_size));
  return from_mxsim(mx_spec(elem, 1, block_size), G, R, K, false, qdata, scale, {});
}

QuantizedTensor from_torchao_nvfp4(const std::vector<size_t>& qs, std::span<const uint8_t> qdata,
                                   const std::vector<size_t>& ss, std::span<const uint8_t> scale,
                                   float per_tensor_scale, bool blocked_scales) {
  const auto [G, R, K] = torchao_dims(qs, true);
  const size_t nb = cdiv(K, 16);
  if (blocked_scales)
    return from_mxsim(nvfp4_1x16_spec(), G, R, K, false, qdata, unswizzle_blocked_scales(scale, G, R, nb), {},
                      per_tensor_scale);
  // torchao views the scale as [M, K/16] whatever its stored shape; a flattened copy is common.
  if (!(ss.size() == 1 && ss[0] == G * R * nb && qs.size() > 1)) check_torchao_scale_shape(qs, ss, K, 16);
  return from_mxsim(nvfp4_1x16_spec(), G, R, K, false, qdata, scale, {}, per_tensor_scale);
}

QuantizedTensor from_te_nvfp4(bool columnwise, const std::vector<size_t>& ds, std::span<const uint8_t> data,
                              const std::vector<size_t>& ss, std::span<const uint8_t> scale, float amax,
                              bool swizzled) {
  if (ds.empty()) bad("data is 0-D");
  if (std::signbit(amax) && !std::isnan(amax)) bad("amax " + std::to_string(amax) + " is negative");
  if (columnwise && ds.size() != 2) bad("columnwise data shape " + shape_s(ds) + " is not 2-D [K, M/2]");
  // Storage rows x storage columns (elements; two per byte along the columns).
  const size_t sr = prod(ds, 0, ds.size() - 1), sc = 2 * ds.back();
  if (data.size() != mul(sr, ds.back())) bad("data holds " + std::to_string(data.size()) + " bytes for shape " + shape_s(ds));
  const size_t nb = cdiv(sc, 16);
  const std::vector<uint8_t> sb = te_padded_bytes(scale, ss, sr, nb, roundup(sr, 128), roundup(nb, 4), swizzled,
                                                  std::string(columnwise ? "columnwise" : "rowwise") + " scale_inv");
  const float s_dec = hd::nvfp4_tensor_scale(f32_bits(amax)).s_dec;
  // Columnwise: storage [K, M] is the transpose of the logical [M, K], blocks along M.
  return columnwise ? from_mxsim(nvfp4_1x16_spec(), 1, sc, sr, true, data, sb, {}, s_dec)
                    : from_mxsim(nvfp4_1x16_spec(), 1, sr, sc, false, data, sb, {}, s_dec);
}

QuantizedTensor from_te_fp8_blockwise(Format elem, bool columnwise, int dim, const std::vector<size_t>& ds,
                                      std::span<const uint8_t> data, const std::vector<size_t>& ss,
                                      std::span<const float> si) {
  if (elem != Format::E4M3 && elem != Format::E5M2) bad("TE Float8BlockwiseQTensor elements are E4M3 or E5M2");
  if (ds.empty()) bad("data is 0-D");
  if (dim < 0 || dim > 2) bad("block_scaling_dim must be 1 or 2 (0: from the scale_inv shape)");
  // Storage [sr, sc]: rowwise [M, K], columnwise [K, M]; blocks run along sc (1-D) or tile it (2-D).
  const size_t sr = columnwise ? ds[0] : prod(ds, 0, ds.size() - 1);
  const size_t sc = columnwise ? prod(ds, 1, ds.size()) : ds.back();
  if (data.size() != mul(sr, sc)) bad("data holds " + std::to_string(data.size()) + " bytes for shape " + shape_s(ds));
  const std::vector<size_t> one = {cdiv(sc, 128), roundup(sr, 4)}, two = {cdiv(sr, 128), roundup(cdiv(sc, 128), 4)};
  const std::string what = std::string(columnwise ? "columnwise" : "rowwise") + " scale_inv shape " + shape_s(ss);
  if (dim == 0) {
    const bool f1 = ss == one, f2 = ss == two;
    if (f1 && f2)
      bad(what + " for data " + shape_s(ds) + " fits both 1 x 128 blocks and 128 x 128 tiles: give block_scaling_dim (1 or 2)");
    if (!f1 && !f2)
      bad(what + " for data " + shape_s(ds) + ": TE's is " + shape_s(one) + " for 1 x 128 blocks or " + shape_s(two) +
          " for 128 x 128 tiles");
    dim = f1 ? 1 : 2;
  }
  const std::vector<size_t>& want = dim == 1 ? one : two;
  if (ss != want)
    bad(what + " for data " + shape_s(ds) + ": TE's for " + (dim == 1 ? "1 x 128 blocks" : "128 x 128 tiles") + " is " +
        shape_s(want));
  if (si.size() != want[0] * want[1]) bad(what + " holds " + std::to_string(si.size()) + " values");
  QuantSpec s;
  s.elem = elem;
  s.scale_kind = ScaleKind::FP32;
  if (dim == 1) {
    // Block b of storage row r at scale_inv[b, r]; mxsim keeps [sr, ceil(sc/128)].
    s.block_rows = 1;
    s.block_cols = 128;
    const size_t nb = cdiv(sc, 128);
    std::vector<float> v(sr * nb);
    for (size_t r = 0; r < sr; ++r)
      for (size_t b = 0; b < nb; ++b) v[r * nb + b] = si[b * ss[1] + r];
    return columnwise ? from_mxsim(s, 1, sc, sr, true, data, {}, v) : from_mxsim(s, 1, sr, sc, false, data, {}, v);
  }
  // 2-D tiles are kept in the logical layout [M, K] (quantized_tensor.hpp): transpose a columnwise copy.
  s.block_rows = 128;
  s.block_cols = 128;
  const size_t tr = cdiv(sr, 128), tc = cdiv(sc, 128);
  if (!columnwise) {
    std::vector<float> v(tr * tc);
    for (size_t i = 0; i < tr; ++i)
      for (size_t j = 0; j < tc; ++j) v[i * tc + j] = si[i * ss[1] + j];
    return from_mxsim(s, 1, sr, sc, false, data, {}, v);
  }
  std::vector<uint8_t> d(sr * sc);
  for (size_t r = 0; r < sr; ++r)
    for (size_t c = 0; c < sc; ++c) d[c * sr + r] = data[r * sc + c];
  std::vector<float> v(tc * tr);
  for (size_t i = 0; i < tr; ++i)
    for (size_t j = 0; j < tc; ++j) v[j * tr + i] = si[i * ss[1] + j];
  return from_mxsim(s, 1, sc, sr, false, d, {}, v);
}

std::vector<uint8_t> unswizzle_blocked_scales(std::span<const uint8_t> blocked, size_t groups, size_t rows, size_t cols) {
  const size_t pr = roundup(rows, 128), pc = roundup(cols, 4), per = pr * pc;
  if (blocked.size() != groups * per)
    bad("swizzled scales hold " + std::to_string(blocked.size()) + " bytes; " + std::to_string(groups) + " x [" +
        std::to_string(rows) + ", " + std::to_string(cols) + "] scales padded to [" + std::to_string(pr) + ", " +
        std::to_string(pc) + "] need " + std::to_string(groups * per));
  const size_t col_tiles = pc / 4;
  std::vector<uint8_t> plain(groups * rows * cols);
  for (size_t g = 0; g < groups; ++g)
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) {
        const size_t tile = (r / 128) * col_tiles + c / 4, rr = r % 128;
        plain[(g * rows + r) * cols + c] = blocked[g * per + tile * 512 + (rr % 32) * 16 + (rr / 32) * 4 + c % 4];
      }
  return plain;
}

QuantizedTensor from_te_mxfp8(Format elem, bool columnwise, const std::vector<size_t>& ds, std::span<const uint8_t> data,
                              const std::vector<size_t>& ss, std::span<const uint8_t> scale) {
  if (elem != Format::E4M3 && elem != Format::E5M2) bad("TE MXFP8 elements are E4M3 or E5M2");
  if (ds.empty()) bad("data is 0-D");
  const size_t K = ds.back(), M = prod(ds, 0, ds.size() - 1);
  if (ss.size() != 2) bad("scale_inv shape " + shape_s(ss) + " is not 2-D");
  const size_t want_r = columnwise ? roundup(cdiv(M, 32), 4) : roundup(M, 128);
  const size_t want_c = columnwise ? roundup(K, 128) : roundup(cdiv(K, 32), 4);
  if (ss[0] != want_r || ss[1] != want_c)
    bad(std::string(columnwise ? "columnwise" : "rowwise") + " scale_inv shape " + shape_s(ss) + " for data " +
        shape_s(ds) + ": TE pads it to [" + std::to_string(want_r) + ", " + std::to_string(want_c) + "]");
  if (data.size() != M * K) bad("data holds " + std::to_string(data.size()) + " bytes for shape " + shape_s(ds));
  if (!columnwise) {
    const size_t nb = cdiv(K, 32);
    std::vector<uint8_t> sc(M * nb);
    for (size_t r = 0; r < M; ++r) std::memcpy(&sc[r * nb], &scale[r * ss[1]], nb);
    return from_mxsim(mx_spec(elem, 1, 32), 1, M, K, false, data, sc, {});
  }
  // Columnwise: mxsim stores such blocks transposed ([K, M], blocks along each storage row).
  const std::vector<uint8_t> dt = transpose_groups(data, 1, M, K);
  std::vector<uint8_t> sc(K * cdiv(M, 32));
  const size_t nb = cdiv(M, 32);
  for (size_t b = 0; b < nb; ++b)
    for (size_t c = 0; c < K; ++c) sc[c * nb + b] = scale[b * ss[1] + c];
  return from_mxsim(mx_spec(elem, 1, 32), 1, M, K, true, dt, sc, {});
}

QuantizedTensor from_te_fp8(Format elem, const std::vector<size_t>& ds, std::span<const uint8_t> data, float scale_inv) {
  if (ds.empty()) bad("data is 0-D");
  const size_t K = ds.back(), M = prod(ds, 0, ds.size() - 1);
  if (data.size() != M * K) bad("data holds " + std::to_string(data.size()) + " bytes for shape " + shape_s(ds));
  QuantSpec s;
  s.elem = elem;
  s.block_rows = 0;
  s.block_cols = 0;
  s.scale_kind = ScaleKind::FP32;
  const float si[1] = {scale_inv};
  return from_mxsim(s, 1, M, K, false, data, {}, si);
}

namespace {

bool fp8_elem(Format f) { return has_role(f, kRoleFp8); }

/// torchao's FP8 layouts (layouts.hpp): the block extent along each axis of the
/// data from the two shapes (and block_size), then mxsim's storage.
QuantizedTensor torchao_fp8(Format elem, const std::vector<size_t>& qs, std::span<const uint8_t> qdata,
                            const std::vector<size_t>& ss, std::span<const float> scale,
                            const std::optional<std::vector<size_t>>& block_size, bool training) {
  const std::string who = training ? "torchao Float8TrainingTensor" : "torchao Float8Tensor";
  const std::string dname = training ? "_data" : "qdata", sname = training ? "_scale" : "scale";
  if (!fp8_elem(elem))
    bad(who + " elements are FP8 (float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz), not " +
        short_name(elem));
  if (qs.empty() || qs.size() > 3) bad(dname + " shape " + shape_s(qs) + ": torchao layouts are read 1-D to 3-D");
  size_t nq = 1, ns = 1;
  for (size_t d : qs) nq = mul(nq, d);
  for (size_t d : ss) ns = mul(ns, d);
  if (qdata.size() != nq) bad(dname + " holds " + std::to_string(qdata.size()) + " bytes for shape " + shape_s(qs));
  if (scale.size() != ns) bad(sname + " holds " + std::to_string(scale.size()) + " values for shape " + shape_s(ss));
  const std::string both = sname + " shape " + shape_s(ss) + " does not fit " + dname + " shape " + shape_s(qs);
  const std::string kinds =
      training ? ": a Float8TrainingTensor _scale is one value (tensorwise) or has the rank of _data with each axis 1 "
                 "or the data's extent (axiswise, e.g. [M, 1] or [1, K])"
               : ": a Float8Tensor scale is one value (per tensor), [..., 1] (per row) or qdata / block_size per axis "
                 "(blockwise, exact divisors, e.g. [M, K/128] or [M/128, K/128])";
  std::vector<size_t> blk(qs.size());  // block extent along each axis of the data
  if (ns == 1) {
    blk = qs;  // one value: the whole tensor
  } else {
    if (ss.size() != qs.size()) bad(both + " (their ranks differ)" + kinds);
    for (size_t i = 0; i < qs.size(); ++i) {
      if (ss[i] == qs[i]) blk[i] = 1;
      else if (ss[i] == 1) blk[i] = qs[i];
      else if (!training && ss[i] != 0 && qs[i] % ss[i] == 0) blk[i] = qs[i] / ss[i];
      else bad(both + " (axis " + std::to_string(i) + ": " + std::to_string(qs[i]) + " elements, " +
               std::to_string(ss[i]) + " scales)" + kinds);
    }
  }
  if (block_size) {  // torchao's own attribute: the scale shape must be what it gives
    const std::vector<size_t>& b = *block_size;
    std::vector<size_t> want(qs.size(), 1);
    if (!b.empty()) {
      if (b.size() != qs.size())
        bad("block_size " + shape_s(b) + " and qdata shape " + shape_s(qs) + " differ in rank (torchao's block_size "
            "has qdata's rank, or is empty for per tensor)");
      for (size_t i = 0; i < qs.size(); ++i) {
        if (b[i] == 0 || qs[i] % b[i] != 0)
          bad("block_size " + shape_s(b) + " does not divide qdata shape " + shape_s(qs) + " (axis " +
              std::to_string(i) + ")");
        want[i] = qs[i] / b[i];
      }
    }
    size_t nw = 1;
    for (size_t d : want) nw *= d;
    if (nw == 1 ? ns != 1 : ss != want)
      bad("scale shape " + shape_s(ss) + " for qdata shape " + shape_s(qs) + " and block_size " + shape_s(b) +
          ": torchao's is " + shape_s(want));
    blk = b.empty() ? qs : b;
  }
  // [G, R, K] and the block (bg, br, bk); the scale of logical block (g, i, j).
  const size_t rank = qs.size();
  const size_t G = rank == 3 ? qs[0] : 1, R = rank == 1 ? 1 : qs[rank - 2], K = qs[rank - 1];
  const size_t bg = rank == 3 ? blk[0] : 1, br = rank == 1 ? 1 : blk[rank - 2], bk = blk[rank - 1];
  const size_t nR = R / br, nK = K / bk;
  const auto at = [&](size_t g, size_t i, size_t j) { return ns == 1 ? scale[0] : scale[((g / bg) * nR + i) * nK + j]; };
  // mxsim's spec; blocks down the columns (bk = 1 < br) are stored transposed, blocks along storage rows.
  QuantSpec s;
  s.elem = elem;
  s.scale_kind = ScaleKind::FP32;
  bool col = false;
  const auto use = [&](size_t rows, size_t cols, bool transposed) {
    if (rows > size_t(INT32_MAX) || cols > size_t(INT32_MAX)) bad(both + ": its blocks are too large");
    s.block_rows = int(rows);
    s.block_cols = int(cols);
    col = transposed;
  };
  if (br == R && bk == K) use(0, 0, false);       // per tensor (per group)
  else if (br == 1 && bk == K) use(1, 0, false);  // per row
  else if (bk == 1 && br == R) use(1, 0, true);   // per column
  else if (br == 1) use(1, bk, false);            // 1 x bk along the rows
  else if (bk == 1) use(1, br, true);             // br x 1 down the columns
  else use(br, bk, false);                        // br x bk tiles
  const size_t nbr = col ? nK : nR, nbc = col ? nR : nK;  // scales in storage order
  std::vector<float> v(G * nbr * nbc);
  for (size_t g = 0; g < G; ++g)
    for (size_t i = 0; i < nbr; ++i)
      for (size_t j = 0; j < nbc; ++j) v[(g * nbr + i) * nbc + j] = col ? at(g, j, i) : at(g, i, j);
  const std::vector<uint8_t> dt = col ? transpose_groups(qdata, G, R, K) : std::vector<uint8_t>{};
  QuantizedTensor q = from_mxsim(s, G, R, K, col, col ? std::span<const uint8_t>(dt) : qdata, {}, v);
  q.fp32_scale_use = training ? Fp32ScaleUse::DivideByScale : Fp32ScaleUse::MultiplyScaleInv;
  return q;
}

}  // namespace

QuantizedTensor from_torchao_float8(Format elem, const std::vector<size_t>& qs, std::span<const uint8_t> qdata,
                                    const std::vector<size_t>& ss, std::span<const float> scale,
                                    const std::optional<std::vector<size_t>>& block_size) {
  return torchao_fp8(elem, qs, qdata, ss, scale, block_size, false);
}

QuantizedTensor from_torchao_float8_training(Format elem, const std::vector<size_t>& ds, std::span<const uint8_t> data,
                                             const std::vector<size_t>& ss, std::span<const float> scale) {
  return torchao_fp8(elem, ds, data, ss, scale, std::nullopt, true);
}

}  // namespace mxsim::layout
