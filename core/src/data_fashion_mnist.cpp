// Fashion-MNIST / IDX loader (see mxsim/data/fashion_mnist.hpp).
#include "mxsim/data/fashion_mnist.hpp"

#include <array>
#include <cstdio>
#include <sstream>

#include "mxsim/io/tensor_file.hpp"

#include <boost/iostreams/copy.hpp>
#include <boost/iostreams/device/back_inserter.hpp>
#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_stream.hpp>

namespace mxsim::data {

namespace io = boost::iostreams;

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
  std::vector<uint8_t> out;
  try {
    io::filtering_istream s;
    s.push(io::gzip_decompressor());
    s.push(io::array_source(reinterpret_cast<const char*>(raw.data()), raw.size()));
    s.exceptions(std::ios::badbit);
    std::array<char, 1 << 16> buf;
    while (s) {
      s.read(buf.data(), buf.size());
      out.insert(out.end(), buf.data(), buf.data() + s.gcount());
    }
  } catch (const io::gzip_error& e) {
    const int err = e.error();
    fail(f, std::string(err == io::gzip::bad_footer ? "truncated gzip stream (no complete gzip footer): "
                        : err == io::gzip::bad_crc  ? "corrupt gzip stream (CRC mismatch): "
                                                     : "corrupt gzip stream: ") + e.what());
  } catch (const std::ios_base::failure& e) {
    fail(f, std::string("corrupt or truncated gzip stream: ") + e.what());
  }
  return out;
}

Dataset load_idx(const std::filesystem::path& images_file, const std::filesystem::path& labels_file) {
  const Idx im = parse_idx(images_file, 0x00000803u, 3, "IDX images, uint8 rank 3");
  const Idx lb = parse_idx(labels_file, 0x00000801u, 1, "IDX labels, uint8 rank 1");
  if (im.dims[0] != lb.dims[0])
    fail(labels_file, "count mismatch: " + std::to_string(lb.dims[0]) + " labels but " + images_file.string() +
                          " has " + std::to_string(im.dims[0]) + " images");
  Dataset d;
  d.count = im.dims[0];
  d.rows = im.dims[1];
  d.cols = im.dims[2];
  d.labels.assign(lb.bytes.begin() + std::ptrdiff_t(lb.payload_offset), lb.bytes.end());
  for (std::size_t i = 0; i < d.labels.size(); ++i)
    if (d.labels[i] > 9)
      fail(labels_file, "label " + std::to_string(d.labels[i]) + " at index " + std::to_string(i) + " is > 9");
  d.images.resize(d.count * d.rows * d.cols);
  const uint8_t* px = im.bytes.data() + im.payload_offset;
  for (std::size_t i = 0; i < d.images.size(); ++i) d.images[i] = float(px[i]) / 255.0f;
  return d;
}

Dataset load_fashion_mnist(const std::filesystem::path& dir, Split split) {
  const std::string pre = split == Split::train ? "train" : "t10k";
  const auto imf = pick(dir, pre + "-images-idx3-ubyte");
  const auto lbf = pick(dir, pre + "-labels-idx1-ubyte");
  Dataset d = load_idx(imf, lbf);
  if (d.rows != 28 || d.cols != 28)
    fail(imf, "dimension mismatch: images are " + std::to_string(d.rows) + "x" + std::to_string(d.cols) +
                  ", Fashion-MNIST has 28x28");
  return d;
}

const char* fashion_mnist_class_name(uint8_t label) {
  // Class list as published in the Fashion-MNIST README (zalandoresearch/fashion-mnist).
  static const char* const names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                        "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return label < 10 ? names[label] : "?";
}

}  // namespace mxsim::data
