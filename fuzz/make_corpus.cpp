// Writes the seed corpora of the fuzz harnesses with the project's own writers, so every seed
// is a valid input that reaches deep into its parser. Usage: fuzz_make_corpus DIR (DIR/<harness>/).
// The committed fuzz/corpus/ was written by this program.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <zlib.h>

#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/trace/checkpoint.hpp"
#include "mxsim/trace/writer.hpp"

namespace fs = std::filesystem;
using namespace mxsim;

namespace {
void put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}
void put(const fs::path& p, const std::vector<uint8_t>& b) { put(p, std::string(b.begin(), b.end())); }

std::vector<uint8_t> idx(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> b;
  auto be = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
  };
  be(magic);
  for (auto d : dims) be(d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}
std::vector<uint8_t> gz(const std::vector<uint8_t>& in) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::vector<uint8_t> out(deflateBound(&z, uLong(in.size())) + 32);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = uInt(in.size());
  z.next_out = out.data();
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
// The fuzz_idx input: 4-byte little-endian length of the images part, images, labels.
std::string idx_pair(const std::vector<uint8_t>& im, const std::vector<uint8_t>& lb) {
  std::string s;
  for (int k = 0; k < 4; ++k) s += char(uint8_t(im.size() >> (8 * k)));
  s.append(im.begin(), im.end());
  s.append(lb.begin(), lb.end());
  return s;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  // npy: F32 [2, 3], BF16 [4], U8 scalar, F16 [0].
  const float f[6] = {1.0f, -0.0f, 3.5f, 1e-40f, 65504.0f, -2.0f};
  put(out / "npy/f32_2x3.npy", io::encode_npy(io::from_f32("x", {2, 3}, f)));
  io::RawTensor bf{"b", io::DType::BF16, {4}, {0x80, 0x3f, 0x00, 0xc0, 0x80, 0x7f, 0xc0, 0xff}};
  put(out / "npy/bf16_4.npy", io::encode_npy(bf));
  const uint8_t u[1] = {7};
  put(out / "npy/u8_scalar.npy", io::encode_npy(io::from_u8("u", {}, u)));
  put(out / "npy/f16_empty.npy", io::encode_npy(io::RawTensor{"h", io::DType::F16, {0}, {}}));
  // safetensors: two tensors and metadata; one empty tensor.
  put(out / "safetensors/two.safetensors",
      io::encode_safetensors({io::from_f32("w", {2, 3}, f), bf}, {{"format", "pt"}}));
  put(out / "safetensors/empty.safetensors", io::encode_safetensors({io::RawTensor{"e", io::DType::F32, {0, 4}, {}}}, {}));
  // Sharded-checkpoint index (the Hugging Face "model.safetensors.index.json" form): two shards,
  // metadata; one shard in a subfolder.
  put(out / "safetensors_index/two_shards.index.json",
      std::string(R"({"metadata": {"total_size": 96}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors", )"
                  R"("a.bias": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"}})"));
  put(out / "safetensors_index/subfolder.index.json", std::string(R"({"weight_map": {"w": "shards/part0.safetensors"}})"));
  // (meta_json/ holds .meta.json files written by `mxsim quantize`, fuzz/README.md.)
  // TOML config: the embedded default, a small one with overrides.
  put(out / "toml_config/default.toml", std::string(sim::default_config_text()));
  put(out / "toml_config/overrides.toml",
      "[model]\nexperts = 4\ntop_k = 1\n[recipe]\nfc1 = \"bf16\"\n#--set\noptim.lr=0.5\nrecipe.fc2=mxfp8\n");
  // IDX: images [2, 2, 2] + labels [2], plain.
  const auto im = idx(0x803, {2, 2, 2}, {0, 255, 1, 2, 3, 4, 5, 6});
  const auto lb = idx(0x801, {2}, {3, 9});
  put(out / "idx/plain.bin", idx_pair(im, lb));
  put(out / "idx/gzip.bin", idx_pair(gz(im), gz(lb)));
  // Trace: an f64 scalar and a u8 [3] series over 3 steps, a snapshot (small chunks: a small file).
  {
    const fs::path p = out / "trace/run.h5";
    fs::create_directories(p.parent_path());
    trace::Writer w(p, "[model]\nexperts = 4\n", trace::make_provenance("emu", 7));
    w.declare_series("/train/loss", trace::DType::f64, {});
    w.declare_series("/layers/fc1/hist", trace::DType::u8, {3});
    w.declare_snapshot("/snap/fc1/master", trace::DType::f32, {2, 3}, {0, 2});
    w.start_swmr();
    for (int s = 0; s < 3; ++s) {
      w.append("/train/loss", 1.0 / (s + 1));
      const uint8_t h[3] = {uint8_t(s), 7, 255};
      w.append("/layers/fc1/hist", h);
      if (s != 1) w.write_snapshot("/snap/fc1/master", f);
      w.end_step();
    }
    w.close();
  }
  // Checkpoint: every kind of entry.
  {
    trace::CheckpointWriter c;
    c.put("model/fc1/master", f, {2, 3});
    const uint8_t b[3] = {1, 2, 255};
    c.put("rng/bytes", b, {3});
    const uint64_t o[2] = {5, 6};
    c.put("data/order", o, {2});
    c.put_u64("step", 3);
    c.put_i64("neg", -1);
    c.put_f64("lr", 0.25);
    c.put_f32("scale", 2.0f);
    c.put_string("config", "[model]\nexperts = 4\n");
    fs::create_directories(out / "checkpoint");
    c.commit(out / "checkpoint/run.ckpt");
  }
  std::printf("seed corpora written to %s\n", out.c_str());
  return 0;
}
