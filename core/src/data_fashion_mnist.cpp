// Fashion-MNIST / IDX loader (see mxsim/data/fashion_mnist.hpp).
#include "mxsim/data/fashion_mnist.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "data_gzip.hpp"
#include "mxsim/io/tensor_file.hpp"

namespace mxsim::data {

namespace {

[[noreturn]] void fail(const std::filesystem::path& f, const std::string& what) {
  throw DataError(f.string() + ": " + what);
}

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08X", v);
  return b;
}

uint32_t be32(const std::vector<uint8_t>& b, std::size_t at) {
  return (uint32_t(b[at]) << 24) | (uint32_t(b[at + 1]) << 16) | (uint32_t(b[at + 2]) << 8) | uint32_t(b[at + 3]);
}

struct Idx {
  std::vector<uint32_t> dims;
  std::size_t payload_offset = 0;
  std::vector<uint8_t> bytes;
};

Idx parse_idx(const std::filesystem::path& f, uint32_t magic, std::size_t rank, const char* kind) {
  Idx idx;
  idx.bytes = read_maybe_gzip(f);
  const auto& b = idx.bytes;
  if (b.size() < 4) fail(f, "truncated: " + std::to_string(b.size()) + " bytes, no IDX header");
  const uint32_t m = be32(b, 0);
  if (m != magic) fail(f, "bad magic " + hex32(m) + " (expected " + hex32(magic) + ", " + kind + ")");
  const std::size_t header = 4 + 4 * rank;
  if (b.size() < header) fail(f, "truncated IDX header (" + std::to_string(b.size()) + " bytes)");
  std::size_t n = 1;
  for (std::size_t i = 0; i < rank; ++i) {
    idx.dims.push_back(be32(b, 4 + 4 * i));
    if (idx.dims.back() == 0 && i > 0) fail(f, "dimension " + std::to_string(i) + " is 0");
    n *= idx.dims.back();
  }
  idx.payload_offset = header;
  const std::size_t have = b.size() - header;
  if (have < n)
    fail(f, "truncated payload: header promises " + std::to_string(n) + " bytes, file has " + std::to_string(have));
  if (have > n)
    fail(f, "size mismatch: header promises " + std::to_string(n) + " payload bytes, file has " +
                std::to_string(have) + " (trailing data)");
  return idx;
}

std::filesystem::path pick(const std::filesystem::path& dir, const std::string& base) {
  const auto gz = dir / (base + ".gz");
  if (std::filesystem::exists(gz)) return gz;
  const auto plain = dir / base;
  if (std::filesystem::exists(plain)) return plain;
  throw DataError(gz.string() + ": missing (neither " + base + ".gz nor " + base + " exists in " + dir.string() +
                  "; install the Debian package dataset-fashion-mnist or point the config key run.data_dir at the "
                  "folder: mxsim train --set run.data_dir=DIR)");
}

}  // namespace

std::filesystem::path default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

std::vector<uint8_t> read_maybe_gzip(const std::filesystem::path& f) {
  std::error_code ec;
  if (!std::filesystem::exists(f, ec)) fail(f, "missing (no such file)");
  std::vector<uint8_t> raw;
  try {
    raw = mxsim::io::read_all(f);
  } catch (const mxsim::io::IoError& e) {
    throw DataError(e.what());  // "<file>: cannot open: <reason>" / "<file>: read error"
  }
  if (raw.size() < 2 || raw[0] != 0x1f || raw[1] != 0x8b) return raw;  // plain IDX
  return detail::gunzip(raw, f);
}

namespace {

/// Validated IDX payloads of one image file and its label file.
struct RawSet {
  Idx im, lb;
  std::size_t count = 0, rows = 0, cols = 0;
};

RawSet load_raw(const std::filesystem::path& images_file, const std::filesystem::path& labels_file) {
  RawSet r;
  r.im = parse_idx(images_file, 0x00000803u, 3, "IDX images, uint8 rank 3");
  r.lb = parse_idx(labels_file, 0x00000801u, 1, "IDX labels, uint8 rank 1");
  if (r.im.dims[0] != r.lb.dims[0])
    fail(labels_file, "count mismatch: " + std::to_string(r.lb.dims[0]) + " labels but " + images_file.string() +
                          " has " + std::to_string(r.im.dims[0]) + " images");
  r.count = r.im.dims[0];
  r.rows = r.im.dims[1];
  r.cols = r.im.dims[2];
  const uint8_t* lab = r.lb.bytes.data() + r.lb.payload_offset;
  for (std::size_t i = 0; i < r.count; ++i)
    if (lab[i] > 9) fail(labels_file, "label " + std::to_string(lab[i]) + " at index " + std::to_string(i) + " is > 9");
  return r;
}

/// The first n examples (all when n is 0 or larger than the set) as FP32.
Dataset decode(const RawSet& r, std::size_t n) {
  Dataset d;
  d.count = n == 0 ? r.count : std::min(n, r.count);
  d.rows = r.rows;
  d.cols = r.cols;
  const uint8_t* lab = r.lb.bytes.data() + r.lb.payload_offset;
  d.labels.assign(lab, lab + d.count);
  d.images.resize(d.count * d.rows * d.cols);
  const uint8_t* px = r.im.bytes.data() + r.im.payload_offset;
  for (std::size_t i = 0; i < d.images.size(); ++i) d.images[i] = float(px[i]) / 255.0f;
  return d;
}

/// What identifies a file's contents for the cache: path, size, mtime.
std::string stamp(const std::filesystem::path& f) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(f, ec);
  const auto t = std::filesystem::last_write_time(f, ec).time_since_epoch().count();
  return f.string() + "|" + std::to_string(size) + "|" + std::to_string(t);
}

}  // namespace

Dataset load_idx(const std::filesystem::path& images_file, const std::filesystem::path& labels_file) {
  return decode(load_raw(images_file, labels_file), 0);
}

std::vector<std::filesystem::path> fashion_mnist_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> v;
  for (const char* pre : {"train", "t10k"})
    for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) {
      try {
        v.push_back(pick(dir, std::string(pre) + kind));
      } catch (const DataError&) {  // missing: nothing there to replace
      }
    }
  return v;
}

Dataset load_fashion_mnist(const std::filesystem::path& dir, Split split, std::size_t limit) {
  const std::string pre = split == Split::train ? "train" : "t10k";
  const auto imf = pick(dir, pre + "-images-idx3-ubyte");
  const auto lbf = pick(dir, pre + "-labels-idx1-ubyte");
  // Files are gunzipped and validated once per process (per path, size and
  // mtime); each call decodes only the examples it asks for.
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const RawSet>> cache;
  const std::string key = stamp(imf) + "\n" + stamp(lbf);
  std::shared_ptr<const RawSet> raw;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (auto it = cache.find(key); it != cache.end()) raw = it->second;
  }
  if (!raw) {
    auto r = std::make_shared<RawSet>(load_raw(imf, lbf));
    if (r->rows != 28 || r->cols != 28)
      fail(imf, "dimension mismatch: images are " + std::to_string(r->rows) + "x" + std::to_string(r->cols) +
                    ", Fashion-MNIST has 28x28");
    std::lock_guard<std::mutex> lk(mu);
    raw = cache.emplace(key, std::move(r)).first->second;
  }
  return decode(*raw, limit);
}

const char* fashion_mnist_class_name(uint8_t label) {
  // Class list as published in the Fashion-MNIST README (zalandoresearch/fashion-mnist).
  static const char* const names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                        "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return label < 10 ? names[label] : "?";
}

}  // namespace mxsim::data
