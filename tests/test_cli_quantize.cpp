// Runs the built `mxsim` binary on small files in a temporary folder:
// exit codes, messages, nothing partial left behind, a pre-existing OUT
// untouched on failure, and quantized bytes equal to codes computed by hand.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mxsim/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kBin = std::string(MXSIM_BINARY_DIR) + "/cli/mxsim";

struct CmdRun {
  int rc;
  std::string out, err;
};

struct Sandbox {
  fs::path dir;
  Sandbox() {
    dir = fs::temp_directory_path() /
          (std::string("mxsim_test_cli_") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
           std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Sandbox() { fs::remove_all(dir); }

  CmdRun mxsim(const std::string& args) const {
    const std::string cmd = "cd '" + dir.string() + "' && '" + kBin + "' " + args + " >stdout.txt 2>stderr.txt";
    const int st = std::system(cmd.c_str());
    CmdRun r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp("stdout.txt"), slurp("stderr.txt")};
    fs::remove(dir / "stdout.txt");
    fs::remove(dir / "stderr.txt");
    return r;
  }
  std::string slurp(const std::string& name) const {
    std::ifstream f(dir / name, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
  }
  void put(const std::string& name, const std::string& bytes) const { std::ofstream(dir / name, std::ios::binary) << bytes; }
  std::set<std::string> files() const {
    std::set<std::string> s;
    for (const auto& e : fs::recursive_directory_iterator(dir)) s.insert(fs::relative(e.path(), dir).string());
    return s;
  }
};

std::string le_f32(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// Version-1.0 .npy written by hand (numpy.lib.format).
std::string npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string f("\x93NUMPY\x01\x00", 8);
  f += char(h.size() & 0xFF);
  f += char(h.size() >> 8);
  return f + h + data;
}

std::string safetensors(const std::string& json, const std::string& data) {
  std::string f;
  for (int k = 0; k < 8; ++k) f += char((uint64_t(json.size()) >> (8 * k)) & 0xFF);
  return f + json + data;
}

// The hand-made MXFP4 row: values in units of 2^-4.
//   amax = 6 * 2^-4 = 0.375 = 1.5 * 2^-2, so E = -2; E2M1 emax = 2, so
//   FLOOR (OCP): s = E - 2 = -4; EVEN: s = E - 2 + [m >= 1.75] = -4 (m = 1.5);
//   E8M0 byte = 127 - 4 = 123 = 0x7B.
// x / 2^s = the units below; E2M1 codes (S.EE.M: 0 0.5 1 1.5 2 3 4 6 = 0..7):
//   6 -> 7, 3 -> 5, 1.5 -> 3, 0.5 -> 1, -0.75 -> tie 0.5|1 -> 1 (even mantissa) -> 0xA,
//   0.25 -> tie 0|0.5 -> 0, 0 -> 0, -6 -> 0xF, 5 -> tie 4|6 -> 4 -> 6, 2.5 -> tie 2|3 -> 2 -> 4,
//   -0.25 -> -0 -> 8, 1.25 -> tie 1|1.5 -> 1 -> 2, then twenty zeros.
// Packed low nibble first: 0x57 0x13 0x0A 0xF0 0x46 0x28, then ten 0x00.
std::vector<float> mxfp4_row() {
  std::vector<float> u = {6, 3, 1.5f, 0.5f, -0.75f, 0.25f, 0, -6, 5, 2.5f, -0.25f, 1.25f};
  u.resize(32, 0.0f);
  for (float& v : u) v /= 16.0f;
  return u;
}
const std::vector<uint8_t> kMxfp4Codes = {0x57, 0x13, 0x0A, 0xF0, 0x46, 0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

const mxsim::io::RawTensor& tensor(const mxsim::io::SafetensorsFile& f, const std::string& name) {
  const auto* t = f.find(name);
  if (!t) throw std::runtime_error("no tensor " + name);
  return *t;
}

}  // namespace

TEST(CliQuantize, Mxfp4RowMatchesHandComputedCodesSafetensors) {
  Sandbox s;
  s.put("x.npy", npy("<f4", "(1, 32)", le_f32(mxfp4_row())));
  for (const char* recipe : {"mxfp4", "mxfp4_ocp"}) {
    const CmdRun r = s.mxsim(std::string("quantize --recipe ") + recipe + " x.npy -o q.safetensors");
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto f = mxsim::io::read_safetensors(s.dir / "q.safetensors");
    // FP4 codes as safetensors' F4 (4-bit elements, float4_e2m1fn_x2 bytes): [1, 32] of F4 = 16 bytes.
    const auto& d = tensor(f, "x.data");
    EXPECT_EQ(d.dtype, mxsim::io::DType::F4);
    EXPECT_EQ(d.shape, (std::vector<size_t>{1, 32}));
    EXPECT_EQ(d.bytes, kMxfp4Codes) << recipe;
    const auto& sc = tensor(f, "x.scale");
    EXPECT_EQ(sc.dtype, mxsim::io::DType::F8_E8M0);
    EXPECT_EQ(sc.shape, (std::vector<size_t>{1, 1}));
    EXPECT_EQ(sc.bytes, std::vector<uint8_t>{0x7B}) << recipe;
    EXPECT_EQ(f.metadata.at("x.recipe"), recipe);
    EXPECT_EQ(f.metadata.at("x.shape"), "[1,32]");  // JSON text: numbers, not a string
    EXPECT_EQ(f.metadata.at("x.transposed"), "false");
    // Two underflows (+-0.25 units), nothing saturated.
    EXPECT_NE(r.out.find("underflow     2"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("saturated     0"), std::string::npos) << r.out;
  }
}

TEST(CliQuantize, Mxfp4RowFromBf16SafetensorsToNpyPrefix) {
  Sandbox s;
  std::string bf;  // BF16 = the top half of FP32 bits; the row's values are exact in BF16
  for (float v : mxfp4_row()) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    bf += char((b >> 16) & 0xFF);
    bf += char(b >> 24);
  }
  s.put("in.safetensors", safetensors(R"({"w":{"dtype":"BF16","shape":[32],"data_offsets":[0,64]}})", bf));
  const CmdRun r = s.mxsim("quantize --recipe mxfp4 in.safetensors -o out");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(s.files(), (std::set<std::string>{"in.safetensors", "out.data.npy", "out.scale.npy", "out.meta.json"}));
  // .npy: the (1, 16) |u1 dict is 60 chars; 10 + 60 + 1 > 64, so data start at 128.
  const std::string data = s.slurp("out.data.npy"), scale = s.slurp("out.scale.npy");
  ASSERT_EQ(data.size() % 64, 16u);
  EXPECT_NE(data.find("'descr': '|u1'"), std::string::npos);
  EXPECT_NE(data.find("'shape': (1, 16)"), std::string::npos);
  EXPECT_EQ(std::vector<uint8_t>(data.end() - 16, data.end()), kMxfp4Codes);
  EXPECT_EQ(uint8_t(scale.back()), 0x7B);
  const std::string meta = s.slurp("out.meta.json");
  EXPECT_NE(meta.find("\"source_dtype\": \"BF16\""), std::string::npos) << meta;
  // Shapes and flags are JSON numbers and booleans.
  const auto j = nlohmann::json::parse(meta);
  EXPECT_EQ(j["shape"], nlohmann::json::array({32}));
  EXPECT_EQ(j["logical_shape"], nlohmann::json::array({1, 1, 32}));
  EXPECT_EQ(j["block"], nlohmann::json::array({1, 32}));
  EXPECT_EQ(j["transposed"], false);
  EXPECT_EQ(j["hadamard"], false);
}

TEST(CliQuantize, Mxfp8GroupedHandComputed) {
  // [2 groups, 1, 32] E4M3 with RCEIL (mxfp8):
  //  group 0: amax 448: d = 448 * fl32(1/448) = 1 -> s = 0 (byte 127);
  //    448 -> 0x7E, 1 -> 0x38, -2 -> 0xC0, 0.5 -> 0x30, 2^-9 (min subnormal) -> 0x01.
  //  group 1: amax 1: d = fl32(1/448) in (2^-9, 2^-8) -> s = -8 (byte 119);
  //    1 / 2^-8 = 256 = 2^8 -> exponent field 15, mantissa 0 -> 0x78; -0.5 -> 128 -> 0xF0.
  Sandbox s;
  std::vector<float> v(64, 0.0f);
  v[0] = 448, v[1] = 1, v[2] = -2, v[3] = 0.5f, v[4] = 0.001953125f;
  v[32] = 1, v[33] = -0.5f;
  s.put("g.npy", npy("<f4", "(2, 1, 32)", le_f32(v)));
  const CmdRun r = s.mxsim("quantize --recipe mxfp8 g.npy -o q.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto f = mxsim::io::read_safetensors(s.dir / "q.safetensors");
  const auto& d = tensor(f, "g.data");
  ASSERT_EQ(d.shape, (std::vector<size_t>{2, 1, 32}));
  EXPECT_EQ(d.dtype, mxsim::io::DType::F8_E4M3);
  std::vector<uint8_t> want(64, 0);
  want[0] = 0x7E, want[1] = 0x38, want[2] = 0xC0, want[3] = 0x30, want[4] = 0x01, want[32] = 0x78, want[33] = 0xF0;
  EXPECT_EQ(d.bytes, want);
  EXPECT_EQ(tensor(f, "g.scale").shape, (std::vector<size_t>{2, 1, 1}));
  EXPECT_EQ(tensor(f, "g.scale").bytes, (std::vector<uint8_t>{127, 119}));
  EXPECT_NE(r.out.find("SQNR          inf dB"), std::string::npos) << r.out;  // every value exact
}

TEST(CliQuantize, Fp8BlockWritesScaleInv) {
  // fp8_block: 1x128, FP32 scale rounded down to a power of two.
  // amax 3: scale = 448/3 = 149.33 -> 128; scale_inv = 1/128 = 2^-7 (0x3C000000).
  // 3 * 128 = 384 -> E4M3 1.5 * 2^8: exponent field 15, mantissa 100 -> 0x7C.
  Sandbox s;
  std::vector<float> v(4, 0.0f);
  v[0] = 3;
  s.put("t.npy", npy("<f4", "(4,)", le_f32(v)));
  const CmdRun r = s.mxsim("quantize --recipe fp8_block t.npy -o q.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto f = mxsim::io::read_safetensors(s.dir / "q.safetensors");
  EXPECT_EQ(tensor(f, "t.data").bytes, (std::vector<uint8_t>{0x7C, 0, 0, 0}));
  const auto& si = tensor(f, "t.scale_inv");
  EXPECT_EQ(si.dtype, mxsim::io::DType::F32);
  EXPECT_EQ(si.bytes, (std::vector<uint8_t>{0, 0, 0, 0x3C}));
  EXPECT_EQ(f.find("t.scale"), nullptr);
}

TEST(CliQuantize, AllTensorsTableAndTensorChoice) {
  Sandbox s;
  // a: F32 [2, 32] ones; b: F16 [32] of 1.0 (0x3C00); ids: I64 [2] (skipped).
  std::string a = le_f32(std::vector<float>(64, 1.0f)), b, ids(16, '\0');
  for (int i = 0; i < 32; ++i) b += std::string("\x00\x3c", 2);
  s.put("m.safetensors",
        safetensors(R"({"a":{"dtype":"F32","shape":[2,32],"data_offsets":[0,256]},)"
                    R"("b":{"dtype":"F16","shape":[32],"data_offsets":[256,320]},)"
                    R"("ids":{"dtype":"I64","shape":[2],"data_offsets":[320,336]}})",
                    a + b + ids));
  CmdRun r = s.mxsim("quantize --recipe mxfp4 m.safetensors -o q.safetensors");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--tensor"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a, b"), std::string::npos) << r.err;

  r = s.mxsim("quantize --recipe mxfp4 --tensor nope m.safetensors -o q.safetensors");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("m.safetensors: no tensor 'nope' (tensors: a, b, ids)"), std::string::npos) << r.err;
  r = s.mxsim("quantize --recipe mxfp4 --tensor ids m.safetensors -o q.safetensors");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("tensor 'ids': dtype I64 cannot be quantized"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(s.dir / "q.safetensors"));

  r = s.mxsim("quantize --recipe mxfp4 --tensor b m.safetensors -o q.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  // 1.0 -> EVEN: s = 0 - 2 = -2 (byte 125); 1 / 2^-2 = 4 -> code 6: bytes 0x66.
  auto f = mxsim::io::read_safetensors(s.dir / "q.safetensors");
  EXPECT_EQ(tensor(f, "b.data").bytes, std::vector<uint8_t>(16, 0x66));
  EXPECT_EQ(tensor(f, "b.scale").bytes, std::vector<uint8_t>{125});

  r = s.mxsim("quantize --recipe mxfp4 --all-tensors m.safetensors -o all.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("skipped (not F32/F16/BF16/F64): ids (I64)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a       [2, 32]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("b       [32]"), std::string::npos) << r.out;
  f = mxsim::io::read_safetensors(s.dir / "all.safetensors");
  EXPECT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(tensor(f, "a.data").shape, (std::vector<size_t>{2, 32}));  // F4 elements
  EXPECT_EQ(tensor(f, "a.data").bytes.size(), 32u);
  EXPECT_EQ(tensor(f, "a.scale").bytes, (std::vector<uint8_t>{125, 125}));

  // The same into a folder of .npy files.
  fs::create_directory(s.dir / "outdir");
  r = s.mxsim("quantize --recipe mxfp4 --all-tensors m.safetensors -o outdir");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* p : {"outdir/a.data.npy", "outdir/a.scale.npy", "outdir/a.meta.json", "outdir/b.data.npy",
                        "outdir/b.scale.npy", "outdir/b.meta.json"})
    EXPECT_TRUE(fs::exists(s.dir / p)) << p;
}

TEST(CliQuantize, FailuresLeaveNothingAndKeepOut) {
  Sandbox s;
  s.put("x.npy", npy("<f4", "(1, 32)", le_f32(mxfp4_row())));
  s.put("x40.npy", npy("<f4", "(1, 40)", le_f32(std::vector<float>(40, 1.0f))));
  s.put("i4.npy", npy("<i4", "(2, 32)", std::string(256, '\0')));
  s.put("v4.npy", npy("<f4", "(1, 1, 1, 32)", le_f32(std::vector<float>(32, 1.0f))));
  s.put("trunc.npy", npy("<f4", "(1, 32)", le_f32(std::vector<float>(31, 1.0f))));
  s.put("trunc.safetensors", safetensors(R"({"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", std::string(20, '\0')));
  s.put("dtype.safetensors", safetensors(R"({"w":{"dtype":"F4X","shape":[1],"data_offsets":[0,1]}})", std::string(1, '\0')));
  s.put("badjson.safetensors", safetensors(R"({"w":)", ""));
  // A multi-tensor file whose second floating tensor is 4-D: --all-tensors must write nothing.
  s.put("mixed.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[1,32],"data_offsets":[0,128]},)"
                                         R"("z":{"dtype":"F32","shape":[1,1,1,1],"data_offsets":[128,132]}})",
                                         std::string(132, '\0')));
  s.put("keep.safetensors", "previous contents");
  fs::create_directory(s.dir / "keepdir");
  s.put("keepdir/a.data.npy", "old");
  const auto before = s.files();

  struct Case {
    std::string args;
    std::vector<std::string> msg;
  };
  const Case cases[] = {
      {"--recipe mxfp4 --hadamard x40.npy -o keep.safetensors",
       {"x40.npy: tensor 'x40'", "multiple of 16"}},
      {"--recipe mxfp4 i4.npy -o keep.safetensors", {"i4.npy: tensor 'i4'", "dtype I32 cannot be quantized"}},
      {"--recipe mxfp4 v4.npy -o keep.safetensors", {"v4.npy: tensor 'v4'", "4-D"}},
      {"--recipe mxfp4 trunc.npy -o keep.safetensors", {"trunc.npy", "truncated data"}},
      {"--recipe mxfp4 trunc.safetensors -o keep.safetensors", {"trunc.safetensors", "tensor 'w'", "past the end"}},
      // an unknown dtype is skipped with a note; with nothing else in the file there is nothing to quantize
      {"--recipe mxfp4 dtype.safetensors -o keep.safetensors",
       {"note: dtype.safetensors: tensor 'w' skipped: unknown dtype 'F4X'", "no F32, F16, BF16 or F64 tensor"}},
      {"--recipe mxfp4 badjson.safetensors -o keep.safetensors", {"badjson.safetensors", "not valid JSON"}},
      {"--recipe mxfp4 missing.npy -o keep.safetensors", {"missing.npy", "cannot open"}},
      {"--recipe mxfp4 --all-tensors mixed.safetensors -o keep.safetensors", {"mixed.safetensors: tensor 'z'", "4-D"}},
      {"--recipe mxfp4 --all-tensors mixed.safetensors -o keepdir", {"mixed.safetensors: tensor 'z'", "4-D"}},
      {"--recipe mxfp4 x.npy -o nodir/out.safetensors", {"nodir", "does not exist"}},
  };
  for (const auto& c : cases) {
    const CmdRun r = s.mxsim("quantize " + c.args);
    EXPECT_EQ(r.rc, 1) << c.args << "\n" << r.err;
    for (const auto& m : c.msg) EXPECT_NE(r.err.find(m), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(s.files(), before) << c.args;
    EXPECT_EQ(s.slurp("keep.safetensors"), "previous contents") << c.args;
    EXPECT_EQ(s.slurp("keepdir/a.data.npy"), "old") << c.args;
  }
}

TEST(CliQuantize, FailureWhileWritingRemovesEarlierFiles) {
  // --all-tensors into the prefix "p": a's files are written first, then b's
  // .data path is an existing folder, so the command fails after writing a's
  // temporaries; none of them may remain, and no final name may appear.
  Sandbox s;
  s.put("m.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[1,32],"data_offsets":[0,128]},)"
                                     R"("b":{"dtype":"F32","shape":[1,32],"data_offsets":[128,256]}})",
                                     std::string(256, '\0')));
  fs::create_directory(s.dir / "p.b.data.npy");
  const auto before = s.files();
  const CmdRun r = s.mxsim("quantize --recipe mxfp4 --all-tensors m.safetensors -o p");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("p.b.data.npy: is a directory"), std::string::npos) << r.err;
  EXPECT_EQ(s.files(), before);
}

TEST(CliQuantize, UsageErrorsExitTwo) {
  Sandbox s;
  s.put("x.npy", npy("<f4", "(1, 32)", le_f32(mxfp4_row())));
  const char* cases[][2] = {
      {"", "--recipe is required"},
      {"--recipe mxfp4 -o y.safetensors", "input file is required"},
      {"--recipe mxfp9 x.npy -o y.safetensors", "unknown recipe 'mxfp9'"},
      {"--recipe mxfp4 --bogus x.npy -o y.safetensors", "bogus"},
      {"--recipe mxfp4 --axis diag x.npy -o y.safetensors", "--axis must be rows or cols"},
      {"--recipe mxfp4 --scale-rule up x.npy -o y.safetensors", "unknown scale rule 'up'"},
      {"--recipe fp8_tensor --scale-rule floor x.npy -o y.safetensors", "E8M0"},
      {"--recipe mxfp4 --round nearest x.npy -o y.safetensors", "unknown rounding 'nearest'"},
      {"--recipe mxfp4 --tensor w x.npy -o y.safetensors", "need a .safetensors input"},
      {"--recipe mxfp4 --per-block b.txt x.npy", "--per-block b.txt: name a .csv or .npy file"},
      {"--recipe mxfp4 --json --csv x.npy", "--json and --csv exclude each other"},
      {"--recipe mxfp4 --seed -1 --round sr x.npy", "--seed: -1 is out of range"},
      {"--recipe mxfp4 --tensor w --all-tensors x.npy -o y.safetensors", "exclude each other"},
      {"--recipe mxfp4 --seed abc x.npy -o y.safetensors", "seed"},
  };
  for (const auto& c : cases) {
    const CmdRun r = s.mxsim(std::string("quantize ") + c[0]);
    EXPECT_EQ(r.rc, 2) << c[0] << "\n" << r.err;
    EXPECT_NE(r.err.find(c[1]), std::string::npos) << c[0] << "\n" << r.err;
  }
  EXPECT_EQ(s.files(), (std::set<std::string>{"x.npy"}));
  const CmdRun h = s.mxsim("quantize --help");
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.out.find("--all-tensors"), std::string::npos);
  EXPECT_NE(h.out.find("nvfp4_2d"), std::string::npos);
  EXPECT_EQ(s.mxsim("").rc, 2);
  EXPECT_EQ(s.mxsim("frobnicate").rc, 2);
}

TEST(CliQuantize, StochasticRoundingIsReproducibleAndSeeded) {
  Sandbox s;
  std::vector<float> v(256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.3f + 0.01f * float(i % 17);
  s.put("x.npy", npy("<f4", "(8, 32)", le_f32(v)));
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp4 --round sr --seed 7 x.npy -o a.safetensors").rc, 0);
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp4 --round sr --seed 7 x.npy -o b.safetensors").rc, 0);
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp4 --round sr --seed 8 x.npy -o c.safetensors").rc, 0);
  EXPECT_EQ(s.slurp("a.safetensors"), s.slurp("b.safetensors"));
  const auto a = mxsim::io::read_safetensors(s.dir / "a.safetensors");
  const auto c = mxsim::io::read_safetensors(s.dir / "c.safetensors");
  EXPECT_NE(tensor(a, "x.data").bytes, tensor(c, "x.data").bytes);
  EXPECT_EQ(a.metadata.at("x.sr_seed"), "7");
  EXPECT_EQ(a.metadata.at("x.sr_stream"), "0");
}

TEST(CliQuantize, NeverOverwritesTheInput) {
  // OUT equal to IN, a symlink to IN, and a prefix that regenerates IN's name
  // (`w.data.npy -o w` writes w.data.npy): exit 1 naming the input, the input
  // byte-for-byte unchanged, nothing else written.
  Sandbox s;
  const std::string st = safetensors(R"({"w":{"dtype":"F32","shape":[1,32],"data_offsets":[0,128]}})", le_f32(mxfp4_row()));
  const std::string np = npy("<f4", "(1, 32)", le_f32(mxfp4_row()));
  s.put("in.safetensors", st);
  s.put("w.data.npy", np);
  fs::create_symlink("in.safetensors", s.dir / "link.safetensors");
  const auto before = s.files();
  const char* cases[] = {"in.safetensors -o in.safetensors", "in.safetensors -o ./in.safetensors",
                         "in.safetensors -o link.safetensors", "w.data.npy -o w", "w.data.npy -o w.npy"};
  for (const char* c : cases) {
    const CmdRun r = s.mxsim(std::string("quantize --recipe mxfp4 ") + c);
    EXPECT_EQ(r.rc, 1) << c << "\n" << r.err;
    EXPECT_NE(r.err.find("is the input file"), std::string::npos) << c << "\n" << r.err;
    EXPECT_EQ(s.files(), before) << c;
    EXPECT_EQ(s.slurp("in.safetensors"), st) << c;
    EXPECT_EQ(s.slurp("w.data.npy"), np) << c;
  }
}

TEST(CliQuantize, EmptyOutAndIgnoredSeedAreUsageErrors) {
  Sandbox s;
  s.put("x.npy", npy("<f4", "(1, 32)", le_f32(mxfp4_row())));
  const char* cases[][2] = {
      {"--recipe mxfp4 x.npy -o ''", "-o OUT is empty"},
      {"--recipe mxfp4 --seed 7 x.npy -o y.safetensors", "--seed applies to --round sr"},
      {"--recipe mxfp4 --round rne --seed 7 x.npy -o y.safetensors", "--seed applies to --round sr"},
  };
  for (const auto& c : cases) {
    const CmdRun r = s.mxsim(std::string("quantize ") + c[0]);
    EXPECT_EQ(r.rc, 2) << c[0] << "\n" << r.err;
    EXPECT_NE(r.err.find(c[1]), std::string::npos) << c[0] << "\n" << r.err;
  }
  EXPECT_EQ(s.files(), (std::set<std::string>{"x.npy"}));
}

TEST(CliQuantize, TensorNamesBecomeSafeDistinctFileNames) {
  // Names from the file never decide paths: '/', '\\', '%', control bytes (NUL
  // included) and a leading '.' are percent-encoded, so "a/b" and "a_b" get
  // different files, ".." stays inside the folder, and a name with an embedded
  // NUL ("keep.txt\0") cannot cut the path short and replace keep.txt.
  Sandbox s;
  std::string json = "{";
  std::string data;
  const char* names[] = {"a/b", "a_b", "..", "keep.txt\\u0000", "100%"};
  for (size_t i = 0; i < std::size(names); ++i) {
    json += std::string(i ? "," : "") + "\"" + names[i] + "\":{\"dtype\":\"F32\",\"shape\":[1,32],\"data_offsets\":[" +
            std::to_string(128 * i) + "," + std::to_string(128 * (i + 1)) + "]}";
    data += std::string(128, '\0');
  }
  json += "}";
  s.put("m.safetensors", safetensors(json, data));
  fs::create_directory(s.dir / "o");
  s.put("o/keep.txt", "precious");
  s.put("o/keep.txt.data.npy", "precious too");
  const CmdRun r = s.mxsim("quantize --recipe mxfp4 --all-tensors m.safetensors -o o");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(s.slurp("o/keep.txt"), "precious");
  EXPECT_EQ(s.slurp("o/keep.txt.data.npy"), "precious too");
  for (const char* f : {"o/a%2Fb.data.npy", "o/a_b.data.npy", "o/%2E..data.npy", "o/keep.txt%00.data.npy",
                        "o/100%25.data.npy", "o/keep.txt%00.meta.json"})
    EXPECT_TRUE(fs::exists(s.dir / f)) << f;
  for (const auto& e : fs::directory_iterator(s.dir / "o")) EXPECT_EQ(e.path().filename().string()[0] == '.', false) << e.path();
  EXPECT_EQ(nlohmann::json::parse(s.slurp("o/keep.txt%00.meta.json"))["tensor"], std::string("keep.txt\0", 9));
  // A name too long for a file name: refused, naming the tensor, nothing written.
  const std::string longname(300, 'n');
  s.put("l.safetensors", safetensors("{\"" + longname + "\":{\"dtype\":\"F32\",\"shape\":[1,32],\"data_offsets\":[0,128]}}",
                                     std::string(128, '\0')));
  fs::create_directory(s.dir / "l");
  const CmdRun l = s.mxsim("quantize --recipe mxfp4 l.safetensors -o l");
  EXPECT_EQ(l.rc, 1);
  EXPECT_NE(l.err.find("write a .safetensors output instead"), std::string::npos) << l.err;
  EXPECT_TRUE(fs::is_empty(s.dir / "l"));
}

TEST(CliQuantize, OutputThatIsNotAFolderNeverGetsFilesBesideIt) {
  Sandbox s;
  s.put("x.npy", npy("<f4", "(1, 32)", le_f32(mxfp4_row())));
  s.put("plain", "a file");
  const auto before = s.files();
  CmdRun r = s.mxsim("quantize --recipe mxfp4 x.npy -o plain");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("-o plain: exists and is a file"), std::string::npos) << r.err;
  // /dev/null: statistics only; nothing beside it, and the device itself is never replaced.
  r = s.mxsim("quantize --recipe mxfp4 x.npy -o /dev/null");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("nothing written"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists("/dev/null.data.npy"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  r = s.mxsim("quantize --recipe mxfp4 x.npy -o /dev/zero");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("is a device"), std::string::npos) << r.err;
  // Without -o: the statistics, no file.
  r = s.mxsim("quantize --recipe mxfp4 x.npy");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("output: none (statistics only)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("underflow     2"), std::string::npos) << r.out;
  EXPECT_EQ(s.files(), before);
}

TEST(CliQuantize, AllNanInputReportsUndefinedStatistics) {
  // No element is finite on both sides: MSE and SQNR are "nan", not 0 and "inf".
  Sandbox s;
  s.put("n.npy", npy("<f4", "(1, 32)", le_f32(std::vector<float>(32, NAN))));
  s.put("t.npy", npy("<f4", "(1, 32)", le_f32([] {
          std::vector<float> v(32, 1.5f);
          v[3] = NAN;  // per-tensor FP8: the whole tensor dequantizes to NaN
          return v;
        }())));
  for (const char* c : {"--recipe mxfp4 n.npy -o n", "--recipe fp8_tensor t.npy -o t"}) {
    const CmdRun r = s.mxsim(std::string("quantize ") + c);
    ASSERT_EQ(r.rc, 0) << c << "\n" << r.err;
    EXPECT_NE(r.out.find("MSE           nan"), std::string::npos) << c << "\n" << r.out;
    EXPECT_NE(r.out.find("SQNR          nan dB"), std::string::npos) << c << "\n" << r.out;
    EXPECT_NE(r.out.find("NaN out       32"), std::string::npos) << c << "\n" << r.out;
  }
}

// --hadamard: the statistics compare the codes with H x, the transform applied
// once. x = 5 e_0 (then zeros): H16/4 of the first run of 16 is 1.25 in every
// element, the second run stays 0. MXFP4 EVEN: amax 1.25 -> s = -2 (byte 0x7D);
// 1.25 / 2^-2 = 5, a tie between 4 and 6 -> 4 (even mantissa), code 6, so d = 1.0.
// MSE = 16 * 0.25^2 / 32 = 0.03125; SQNR = 10 log10((16 * 1.5625) / (16 * 0.0625))
// = 10 log10(25) = 13.98 dB; max abs err 0.25. (Against H(H x) = x, as a second
// transform would give, the MSE would be ((5 - 1)^2 + 15 * 1^2) / 32 = 0.96875.)
// Both block directions: a [1, 32] row along cols and a [32, 1] column along rows;
// the per-block statistics say the same for the one block.
TEST(CliQuantize, HadamardStatisticsTransformTheSourceOnce) {
  Sandbox s;
  std::vector<float> v(32, 0.0f);
  v[0] = 5.0f;
  s.put("row.npy", npy("<f4", "(1, 32)", le_f32(v)));
  s.put("col.npy", npy("<f4", "(32, 1)", le_f32(v)));
  for (const std::string name : {"row", "col"}) {
    SCOPED_TRACE(name);
    const std::string axis = name == "row" ? "" : " --axis rows";
    const CmdRun r = s.mxsim("quantize --recipe mxfp4 --hadamard" + axis + " " + name + ".npy -o " + name +
                             ".safetensors --per-block " + name + ".csv");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("MSE           3.125000e-02"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("SQNR          13.98 dB"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("max abs err   2.500000e-01"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("underflow     0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("saturated     0"), std::string::npos) << r.out;
    const auto f = mxsim::io::read_safetensors(s.dir / (name + ".safetensors"));
    std::vector<uint8_t> codes(16, 0x00);  // code 6 (4.0) twice per byte for the first 16 elements
    std::fill(codes.begin(), codes.begin() + 8, 0x66);
    EXPECT_EQ(tensor(f, name + ".data").bytes, codes);
    EXPECT_EQ(tensor(f, name + ".scale").bytes, std::vector<uint8_t>{0x7D});
    std::ifstream csv(s.dir / (name + ".csv"));
    std::string header, row;
    std::getline(csv, header);
    std::getline(csv, row);
    char want[200];
    std::snprintf(want, sizeof want, "%s,0,0,0,125,-2,1.25,32,%.9g,%.9g,0,0", name.c_str(), 0.03125, 10 * std::log10(25.0));
    EXPECT_EQ(row, want);
  }
}
