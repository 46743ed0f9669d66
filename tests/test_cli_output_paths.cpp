// The files a command writes, against the files it reads and against each other (issue 34,
// "Held-back checks, round 3"): an output never replaces an input that an option names (cast
// --rand-file, train --config), as it never replaced the main input; tensor names that become
// one safetensors key are an error naming both; and the messages dequantize gives for an OUT it
// cannot take, or for a .meta.json with a zero block size, say what is wrong; sizes read from a
// file that would wrap when unpacked (packed FP4 extents doubled) are an error too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/io/safetensors.hpp"

using mxsim::test::CliRun;
using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

std::string f32s(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

/// One row of 32 FP32 values 1, 2, ..., 32 as a .npy file's bytes.
std::string row32() {
  std::vector<float> v(32);
  for (int i = 0; i < 32; ++i) v[size_t(i)] = float(i + 1);
  return npy_bytes("<f4", "(1, 32)", f32s(v));
}

}  // namespace

// The reported case: `mxsim cast --round sr --rand-file r.npy ... -o r.npy` replaced its random
// words with the codes and exited 0. Both outputs (-o, --decoded) are checked against it.
TEST(CliOutputPaths, CastRefusesToOverwriteItsRandFile) {
  CliSandbox s;
  const std::string x = npy_bytes("<f4", "(2,)", f32s({0.25f, 0.25f}));
  const std::string words("\xff\xff\xff\x7f\x00\x00\x00\x80", 8);
  const std::string r = npy_bytes("<u4", "(2,)", words);
  s.put("x.npy", x);
  s.put("r.npy", r);
  fs::create_symlink("r.npy", s.p / "link.npy");
  for (const std::string& outs : {"-o r.npy", "-o c.npy --decoded r.npy", "-o ./link.npy"}) {
    const CliRun run = s.mxsim("cast --to e2m1 --round sr --rand-file r.npy --input x.npy " + outs);
    EXPECT_EQ(run.rc, 1) << outs << ": " << run.err;
    EXPECT_TRUE(has(run.err, "is the --rand-file input file r.npy; refusing to overwrite it")) << outs << ": " << run.err;
    EXPECT_EQ(s.slurp_text("r.npy"), r) << outs;
    EXPECT_FALSE(fs::exists(s.p / "c.npy")) << outs;
  }
  const CliRun d = s.mxsim("cast --to e2m1 --round sr --rand-file r.npy --input x.npy -o c.npy --decoded r.npy");
  EXPECT_TRUE(has(d.err, "(choose another --decoded)")) << d.err;
}

// train reads its --config before it writes the trace or the checkpoint: neither may replace it
// (a usage error there, as --trace over --resume is).
TEST(CliOutputPaths, TrainRefusesToOverwriteItsConfig) {
  CliSandbox s;
  const CliRun pc = s.mxsim("train --print-config");
  ASSERT_EQ(pc.rc, 0) << pc.err;
  s.put("c.toml", pc.out);
  for (const char* opt : {"--trace", "--checkpoint"}) {
    const CliRun r = s.mxsim(std::string("train --config c.toml --set run.data_dir=/nonexistent ") + opt + " c.toml");
    EXPECT_EQ(r.rc, 2) << opt << ": " << r.err;
    EXPECT_TRUE(has(r.err, "c.toml: is the --config input file c.toml; refusing to overwrite it (choose another " +
                               std::string(opt) + ")"))
        << opt << ": " << r.err;
    EXPECT_EQ(s.slurp_text("c.toml"), pc.out) << opt;
  }
}

// ... nor the dataset files it will read from run.data_dir.
TEST(CliOutputPaths, TrainRefusesToOverwriteItsDataset) {
  CliSandbox s;
  fs::create_directory(s.p / "data");
  s.put("data/t10k-labels-idx1-ubyte.gz", "labels");
  const CliRun r = s.mxsim("train --set run.data_dir=data --checkpoint ./data/../data/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(has(r.err, "is the dataset file (run.data_dir) data/t10k-labels-idx1-ubyte.gz; refusing to overwrite it "
                         "(choose another --checkpoint)"))
      << r.err;
  EXPECT_EQ(s.slurp_text("data/t10k-labels-idx1-ubyte.gz"), "labels");
}

// Two .npy inputs whose names differ only in bytes that are not UTF-8 (0xFF, 0xFE) gave one
// .safetensors output with every key twice (both became "a\uFFFD..."), exit 0, which mxsim's
// own reader then refused. The writer checks keys as written: an error naming both, no output.
TEST(CliOutputPaths, TensorNamesThatCollideAsSafetensorsKeysAreAnError) {
  CliSandbox s;
  s.put("a\xff.npy", row32());
  s.put("a\xfe.npy", row32());
  const CliRun r = s.mxsim("quantize --recipe mxfp8 --all-tensors 'a\xff.npy' 'a\xfe.npy' -o out.safetensors");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(has(r.err, "out.safetensors: tensors 'a\\xFF.data' and 'a\\xFE.data' are both written as \"a\xEF\xBF\xBD.data\""))
      << r.err;
  EXPECT_FALSE(fs::exists(s.p / "out.safetensors"));
  // Names that are distinct as UTF-8 still are: a folder output keeps the bytes in its file names.
  fs::create_directory(s.p / "q");
  const CliRun ok = s.mxsim("quantize --recipe mxfp8 --all-tensors 'a\xff.npy' 'a\xfe.npy' -o q/");
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

// dequantize's message for an existing file as OUT suggested "a new prefix", which it then
// refused; it takes none, and now says what it takes, for both.
TEST(CliOutputPaths, DequantizeSuggestsOnlyOutputsItTakes) {
  CliSandbox s;
  s.put("x.npy", row32());
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 x.npy -o q.safetensors").rc, 0);
  s.put("notes.txt", "keep");
  for (const char* out : {"notes.txt", "newout"}) {
    const CliRun r = s.mxsim(std::string("dequantize q.safetensors -o ") + out);
    EXPECT_EQ(r.rc, 2) << out << ": " << r.err;
    EXPECT_FALSE(has(r.err, "prefix")) << out << ": " << r.err;
    EXPECT_TRUE(has(r.err, std::string("-o ") + out + ": ") &&
                has(r.err, "name a .safetensors file, a .npy file (one tensor) or a folder"))
        << out << ": " << r.err;
  }
  EXPECT_EQ(s.slurp_text("notes.txt"), "keep");
}

// A .meta.json whose block holds a 0 is named: the tensor, the key and the value.
TEST(CliOutputPaths, DequantizeNamesAZeroBlockSizeInMetaJson) {
  CliSandbox s;
  s.put("x.npy", row32());
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 x.npy -o q").rc, 0);
  std::string meta = s.slurp_text("q.meta.json");
  const size_t at = meta.find("\"block\"");
  ASSERT_NE(at, std::string::npos) << meta;
  const size_t open = meta.find('[', at), close = meta.find(']', at);
  meta.replace(open, close - open + 1, "[1, 0]");
  s.put("q.meta.json", meta);
  const CliRun r = s.mxsim("dequantize q.meta.json -o y.npy");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(has(r.err, "tensor 'q' (metadata of ") && has(r.err, "): block [1, 0] has a block size of 0")) << r.err;
  EXPECT_FALSE(fs::exists(s.p / "y.npy"));
}

// An empty torchao MXFP4 / NVFP4 qdata of [0, 2^63] packed bytes holds no element, so its header
// passes; its 2^64 codes per row wrapped to 0, a [0, 0] output shape. The doubling is checked.
TEST(CliOutputPaths, PackedFp4ExtentsThatWrapWhenUnpackedAreAnError) {
  CliSandbox s;
  s.put("h.qdata.npy", npy_bytes("|u1", "(0, 9223372036854775808)", ""));
  s.put("h.scale.npy", npy_bytes("|u1", "(0, 576460752303423488)", ""));
  s.put("g.qdata.npy", npy_bytes("|u1", "(0, 9223372036854775808)", ""));
  s.put("g._scale_e4m3.npy", npy_bytes("|u1", "(0, 1152921504606846976)", ""));
  for (const std::string& in : {"--elem-dtype float4_e2m1fn_x2 h.qdata.npy h.scale.npy", "g.qdata.npy g._scale_e4m3.npy"}) {
    const CliRun r = s.mxsim("dequantize " + in + " -o y.npy");
    EXPECT_EQ(r.rc, 1) << in << ": " << r.err;
    EXPECT_TRUE(has(r.err, ".qdata': shape [0, 9223372036854775808] of packed E2M1 bytes holds more codes than a size "
                           "can count"))
        << in << ": " << r.err;
    EXPECT_FALSE(fs::exists(s.p / "y.npy")) << in;
  }
}
