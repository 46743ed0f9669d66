#include "tensor_io.hpp"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "common.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"

namespace fs = std::filesystem;

namespace mxsim::cli {

void Notes::add(const std::string& s) {
  items.push_back(s);
  std::fprintf(stderr, "mxsim %s: note: %s\n", command.c_str(), s.c_str());
}

std::string npy_tensor_name(const fs::path& p) { return p.stem().string(); }

uint64_t memory_limit(std::string& source) {
  if (const char* e = std::getenv("MXSIM_MEMORY_LIMIT")) {
    source = "MXSIM_MEMORY_LIMIT";
    std::string t = e;
    uint64_t mul = 1;
    if (!t.empty()) {
      const char u = char(std::toupper(static_cast<unsigned char>(t.back())));
      const int sh = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : u == 'T' ? 40 : 0;
      if (sh) {
        mul = uint64_t(1) << sh;
        t.pop_back();
      }
    }
    // the bound of the count is the unit's: a plain byte count may be any int64 (4294967296), a T
    // count at most what fits in int64 bytes
    const int64_t v = parse_int("MXSIM_MEMORY_LIMIT", t, 1, INT64_MAX / int64_t(mul));
    return uint64_t(v) * mul;
  }
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") {
      source = "the memory available (MemAvailable in /proc/meminfo)";
      return kb * 1024;
    }
  source = "none";
  return UINT64_MAX;
}

std::string bytes_str(uint64_t b) {
  char s[64];
  const char* u[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(b);
  int i = 0;
  while (v >= 1024 && i < 6) v /= 1024, ++i;
  if (i == 0) return std::to_string(b) + " bytes";
  std::snprintf(s, sizeof s, "%.1f %s", v, u[i]);
  return std::string(s) + " (" + std::to_string(b) + " bytes)";
}

std::vector<InputFile> expand_inputs(const std::vector<std::string>& args) {
  std::vector<InputFile> v;
  for (const auto& a : args) {
    const fs::path p(a);
    if (io::is_safetensors_index(p)) {
      const io::SafetensorsIndex ix = io::read_safetensors_index(p);
      for (const auto& shard : ix.shards) v.push_back({shard, false, ix.tensors_in(shard), p});
      continue;
    }
    v.push_back({p, io::detect_kind(p) == io::FileKind::Npy, {}, {}});
  }
  return v;
}

void for_each_tensor_ref(const std::vector<InputFile>& inputs, const std::set<std::string>& wanted, Notes& notes,
                         const std::function<void(const InputFile&, const TensorRef&)>& fn) {
  std::map<std::string, fs::path> seen;  // tensor name -> file
  auto take = [&](const InputFile& in, TensorRef&& r) {
    if (const auto [it, fresh] = seen.emplace(r.header.name, in.path); !fresh)
      throw std::runtime_error("tensor '" + r.header.name + "' is in both " + it->second.string() + " and " +
                               in.path.string());
    if (!wanted.empty() && !wanted.count(r.header.name)) return;
    fn(in, r);
  };
  for (const auto& in : inputs) {
    if (in.npy) {
      if (!wanted.empty() && !wanted.count(npy_tensor_name(in.path))) continue;
      TensorRef r{io::read_npy_header(in.path), 0};
      // read_npy_header checked that the data end the file.
      r.offset = fs::file_size(in.path) - io::byte_count(r.header.dtype, r.header.numel());
      take(in, std::move(r));
      continue;
    }
    if (!wanted.empty() && !in.from_index.empty()) {
      bool any = false;
      for (const auto& n : in.from_index) any = any || wanted.count(n);
      if (!any) continue;  // no wanted tensor in this shard: do not open it
    }
    io::SafetensorsFile f = io::read_safetensors_header(in.path);
    for (const auto& u : f.unknown)
      notes.add(in.path.string() + ": tensor '" + u.name + "' skipped: unknown dtype '" + u.dtype + "'");
    std::set<std::string> listed(in.from_index.begin(), in.from_index.end());
    if (!in.from_index.empty()) {
      std::set<std::string> present;
      for (const auto& t : f.tensors) present.insert(t.name);
      for (const auto& u : f.unknown) present.insert(u.name);
      for (const auto& n : in.from_index)
        if (!present.count(n))
          throw std::runtime_error(in.index.string() + ": places tensor '" + n + "' in " + in.path.string() +
                                   ", which does not hold it");
    }
    for (size_t i = 0; i < f.tensors.size(); ++i) {
      if (!in.from_index.empty() && !listed.count(f.tensors[i].name)) {
        notes.add(in.path.string() + ": tensor '" + f.tensors[i].name + "' skipped: not in the index " +
                  in.index.string());
        continue;
      }
      take(in, TensorRef{std::move(f.tensors[i]), f.file_offsets[i]});
    }
  }
}

io::RawTensor read_tensor(const InputFile& in, const TensorRef& ref) {
  io::RawTensor t = ref.header;
  const size_t n = io::byte_count(t.dtype, t.numel());
  try {
    t.bytes.resize(n);
  } catch (const std::bad_alloc&) {
    throw io::out_of_memory(in.path.string() + ": tensor '" + t.name + "'", n);
  }
  io::FileReader(in.path).read(ref.offset, t.bytes.data(), n);
  return t;
}

void for_each_tensor(const std::vector<InputFile>& inputs, const std::set<std::string>& wanted, Notes& notes,
                     const std::function<void(const InputFile&, io::RawTensor&&)>& fn) {
  for_each_tensor_ref(inputs, wanted, notes, [&](const InputFile& in, const TensorRef& r) { fn(in, read_tensor(in, r)); });
}

OutPlan OutPlan::resolve(const std::string& out, const std::string& no_prefix) {
  OutPlan p;
  if (out.empty()) return p;
  p.path = out;
  struct stat st{};
  const bool exists = ::stat(out.c_str(), &st) == 0;
  if (exists && S_ISCHR(st.st_mode)) {
    struct stat dn{};
    if (::stat("/dev/null", &dn) == 0 && st.st_rdev == dn.st_rdev) {
      p.kind = Discard;
      return p;
    }
    throw UsageError("-o " + out + ": is a device; refusing to write to it (-o /dev/null or no -o: statistics only)");
  }
  if (exists && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
    throw UsageError("-o " + out + ": is not a regular file or folder (a FIFO or socket); refusing to write to it");
  if ((exists && S_ISDIR(st.st_mode)) || out.back() == '/') {
    p.kind = Folder;
    return p;
  }
  if (fs::path(out).extension() == ".safetensors") {
    p.kind = Safetensors;
    return p;
  }
  if (!no_prefix.empty())
    throw UsageError("-o " + out + (exists ? ": exists and is a file, not a folder" : ": is neither an existing folder nor a .safetensors file") + "; name " +
                     no_prefix);
  if (exists)
    throw UsageError("-o " + out + ": exists and is a file, not a folder; a prefix output would write " + out +
                     ".data.npy and more beside it (name a .safetensors file, a folder, or a new prefix)");
  p.kind = Prefix;
  std::string s = out;
  if (fs::path(s).extension() == ".npy") s.resize(s.size() - 4);
  p.path = s;
  return p;
}

fs::path OutPlan::stem_for(const std::string& name, bool single) const {
  if (kind == Folder) return path / io::file_stem(name);
  if (single) return path;
  return fs::path(path.string() + "." + io::file_stem(name));
}

std::vector<InputPath> input_paths(const std::vector<InputFile>& files) {
  std::vector<InputPath> v;
  for (const auto& f : files) {
    v.push_back({f.path});
    if (!f.index.empty()) v.push_back({f.index});
  }
  return v;
}

fs::path add_output(io::AtomicOutputs& outputs, const fs::path& final_path, const std::vector<InputPath>& inputs,
                    const std::string& out_option) {
  refuse_overwriting_input(final_path, inputs, out_option);
  return outputs.add(final_path);
}

fs::path add_output(io::AtomicOutputs& outputs, const fs::path& final_path, const std::vector<InputFile>& inputs,
                    const std::string& out_option) {
  return add_output(outputs, final_path, input_paths(inputs), out_option);
}

}  // namespace mxsim::cli
