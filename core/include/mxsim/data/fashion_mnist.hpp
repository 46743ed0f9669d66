// Fashion-MNIST loader: IDX files (gzip or plain) -> FP32 images in [0, 1] and uint8 labels.
//
// File format (IDX, as published with MNIST by LeCun et al. and reused unchanged by
// Zalando's Fashion-MNIST, https://github.com/zalandoresearch/fashion-mnist):
//   big-endian uint32 magic, then one big-endian uint32 per dimension, then the raw
//   row-major uint8 payload.  Images: magic 0x00000803, dims [N, 28, 28].
//   Labels: magic 0x00000801, dims [N], each label 0..9.
// Files are decompressed with zlib when they start with the gzip magic 1f 8b (judged as
// `gzip -t` does: all members, CRC-32 and length footers, zero padding after the last member
// ignored), otherwise read as plain bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace mxsim::data {

/// Any loader failure. what() always names the file and the problem, e.g.
/// "/x/train-labels-idx1-ubyte.gz: bad magic 0x00000803 (expected 0x00000801, IDX labels)".
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Split { train, test };

/// A labelled image set.
struct Dataset {
  std::size_t count = 0;       ///< N, number of examples
  std::size_t rows = 0;        ///< 28 for Fashion-MNIST
  std::size_t cols = 0;        ///< 28 for Fashion-MNIST
  std::vector<float> images;   ///< FP32 [N, rows*cols] row-major, pixel / 255.0f (one RNE FP32 division)
  std::vector<uint8_t> labels; ///< uint8 [N], each 0..9
  std::size_t features() const { return rows * cols; }
};

/// "/usr/share/datasets/fashion-mnist" (Debian package dataset-fashion-mnist).
std::filesystem::path default_fashion_mnist_dir();

/// Reads a whole file, gunzipping it when it starts with 1f 8b.
/// Throws DataError (missing/unreadable file; truncated or corrupt gzip stream, a CRC-32 or
/// length footer that does not match, bytes after the gzip data that are not zero padding).
std::vector<uint8_t> read_maybe_gzip(const std::filesystem::path& file);

/// Loads one image file + one label file (each gzip or plain).
/// Checks: magics, rank, header vs payload size (truncation and trailing bytes),
/// equal counts, labels <= 9, rows/cols > 0. Throws DataError naming the file.
Dataset load_idx(const std::filesystem::path& images_file, const std::filesystem::path& labels_file);

/// Loads the train (train-*-idx?-ubyte[.gz], 60000 examples) or test (t10k-*, 10000) split
/// from `dir`. For each file the ".gz" name is preferred, the plain name accepted.
/// Additionally requires rows == cols == 28. Throws DataError naming the missing/bad file.
/// `limit` > 0 returns only the first min(limit, N) examples (the whole file is still
/// validated). The files are read, gunzipped and validated once per process (a file
/// whose size or mtime changed is read again); each call converts only the examples
/// it returns to FP32.
Dataset load_fashion_mnist(const std::filesystem::path& dir, Split split, std::size_t limit = 0);

/// The files of `dir` that load_fashion_mnist reads, both splits, as it picks them (the ".gz"
/// name, else the plain one); missing ones are left out. A command checks its outputs against
/// them (an output there would replace the dataset it trains on).
std::vector<std::filesystem::path> fashion_mnist_files(const std::filesystem::path& dir);

/// Fashion-MNIST class names, index = label ("T-shirt/top", ..., "Ankle boot").
const char* fashion_mnist_class_name(uint8_t label);

}  // namespace mxsim::data
