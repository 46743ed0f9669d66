// mxsim quantize: read a tensor from .npy / .safetensors, quantize it with a
// named spec (mxsim::named_spec: how one tensor is quantized), write packed
// codes + scales, print the error statistics (mxsim::emu::quant_stats).
// docs/cli.md describes it.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"
#include "mxsim/quant_spec.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace mxsim::cli {
namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One quantized tensor, ready to write.
struct Result {
  std::string name;                // source tensor name
  std::vector<size_t> src_shape;   // as in the file
  io::DType src_dtype;
  emu::QuantStats stats;
  std::vector<io::RawTensor> outs;  // .data, .scale / .scale_inv, .tensor_scale_inv (names without the base)
  std::map<std::string, std::string> meta;
};

std::string layout_of(const QuantizedTensor& q, bool grouped) {
  const std::string g = grouped ? "per group, " : "";
  std::string s;
  if (q.spec.per_tensor())
    s = "per-tensor scale; data " + g + "in the logical [rows, cols] layout";
  else if (q.spec.is_2d_tile())
    s = std::to_string(q.block_rows()) + "x" + std::to_string(q.block_cols()) + " tiles; data " + g +
        "in the logical [rows, cols] layout, scales one per tile";
  else if (q.transposed)
    s = "columnwise: blocks of " + std::to_string(q.block_cols()) + " run down the columns; data " + g +
        "stored transposed [cols, rows], scales [cols, ceil(rows/" + std::to_string(q.block_cols()) + ")]";
  else
    s = "rowwise: blocks of " + (q.spec.block_cols == 0 ? std::string("a whole row") : std::to_string(q.block_cols())) +
        " along the last axis; data " + g + "[rows, cols], scales [rows, ceil(cols/block)]";
  s += q.spec.elem == Format::E2M1 ? "; E2M1 packed two per byte, element 2i in the low nibble (float4_e2m1fn_x2)"
                                   : "; one code per byte";
  return s;
}

Result quantize_one(const io::RawTensor& t, const std::string& file, const QuantSpec& spec, Axis axis,
                    const std::string& recipe) {
  const std::string where = file + ": tensor '" + t.name + "'";
  if (!io::is_quantizable(t.dtype))
    throw std::runtime_error(where + ": dtype " + io::name_of(t.dtype) + " cannot be quantized (input dtypes: F32, F16, BF16)");
  const size_t rank = t.shape.size();
  if (rank == 0 || rank > 3)
    throw std::runtime_error(where + ": shape " + t.shape_str() + " is " + std::to_string(rank) +
                             "-D; quantize takes 1-D (one row), 2-D [rows, cols] or 3-D [groups, rows, cols]");
  if (t.numel() == 0) throw std::runtime_error(where + ": shape " + t.shape_str() + " is empty");
  const size_t G = rank == 3 ? t.shape[0] : 1;
  const size_t R = rank == 1 ? 1 : t.shape[rank - 2];
  const size_t C = t.shape[rank - 1];
  const std::vector<float> v = io::to_f32(t);
  Tensor3f x = Tensor3f::from_shape({G, R, C});
  std::copy(v.begin(), v.end(), x.begin());

  QuantizedTensor q;
  try {
    q = emu::quantize(x, spec, axis);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(where + " (shape " + t.shape_str() + "): spec " + recipe + " cannot take it: " + e.what());
  }
  Result r;
  r.name = t.name;
  r.src_shape = t.shape;
  r.src_dtype = t.dtype;
  // With hadamard16 the codes hold the transformed values; quant_stats
  // compares them with the transformed source itself (numerics §4.6), so x is
  // passed untransformed.
  r.stats = emu::quant_stats(x, q);

  const bool grouped = rank == 3;
  auto dims = [&](size_t a, size_t b) {
    return grouped ? std::vector<size_t>{G, a, b} : std::vector<size_t>{a, b};
  };
  const size_t dr = q.data.shape()[1], dc = q.data.shape()[2];
  r.outs.push_back(io::from_u8(".data", dims(dr, dc), q.data.data()));
  if (spec.scale_kind == ScaleKind::FP32) {
    r.outs.push_back(io::from_f32(".scale_inv", dims(q.scale_inv.shape()[1], q.scale_inv.shape()[2]), q.scale_inv.data()));
  } else {
    r.outs.push_back(io::from_u8(".scale", dims(q.scale_bytes.shape()[1], q.scale_bytes.shape()[2]), q.scale_bytes.data()));
  }
  if (spec.scale_kind == ScaleKind::UE4M3) r.outs.push_back(io::from_f32(".tensor_scale_inv", {1}, &q.tensor_scale_inv));

  r.meta["recipe"] = recipe;
  r.meta["spec"] = spec.describe();
  r.meta["elem_format"] = short_name(spec.elem);
  r.meta["scale_kind"] = name_of(spec.scale_kind);
  r.meta["shape"] = io::shape_str(t.shape);
  r.meta["logical_shape"] = io::shape_str({G, R, C});
  r.meta["source_dtype"] = io::name_of(t.dtype);
  r.meta["layout"] = layout_of(q, grouped);
  r.meta["transposed"] = q.transposed ? "true" : "false";
  r.meta["block"] = std::to_string(q.block_rows()) + "x" + std::to_string(q.block_cols());
  if (spec.round == RoundMode::Stochastic)
    r.meta["sr_seed_stream"] = std::to_string(spec.sr.seed) + "," + std::to_string(spec.sr.stream);
  return r;
}

std::string file_safe(std::string s) {
  for (char& c : s)
    if (c == '/' || c == '\\') c = '_';
  return s;
}

std::string fmt_sqnr(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", d);
  return b;
}

void print_usage(std::FILE* to, const po::options_description& opts) {
  std::fprintf(to,
               "usage: mxsim quantize --spec NAME IN -o OUT [options]\n"
               "  IN   a .npy file or a .safetensors file (F32, F16 or BF16; 1-D, 2-D or 3-D [G, N, K])\n"
               "  OUT  *.safetensors: one file holding <name>.data, <name>.scale | <name>.scale_inv;\n"
               "       an existing folder: <folder>/<name>.data.npy, ...; otherwise a prefix: OUT.data.npy, ...\n\n");
  std::ostringstream o;
  o << opts;
  std::fprintf(to, "%s\nspecs:", o.str().c_str());
  for (const auto& n : named_spec_names()) std::fprintf(to, " %s", n.c_str());
  std::fprintf(to, "\n");
}

int run(const Args& args) {
  po::options_description opts("options");
  opts.add_options()                                                                                 //
      ("help,h", "show this help")                                                                   //
      ("spec,s", po::value<std::string>(), "spec name (see the list below); required")                //
      ("output,o", po::value<std::string>(), "output: .safetensors file, folder, or .npy prefix; required")  //
      ("axis", po::value<std::string>()->default_value("cols"),
       "1-D blocks along: cols = the last axis (rowwise, fprop), rows = down the columns (columnwise, wgrad; "
       "data stored transposed)")                                                                    //
      ("scale-rule", po::value<std::string>(), "E8M0 scale rule: floor, rceil, even, ceil (default: the spec's)")  //
      ("round", po::value<std::string>(), "element rounding: rne, rz, sr (default: the spec's, rne)")  //
      ("seed", po::value<uint64_t>(), "Philox seed for --round sr (default 0)")                       //
      ("hadamard", po::bool_switch(), "apply the 16-point Hadamard transform along the blocks first")  //
      ("tensor", po::value<std::string>(), "safetensors input: the tensor to quantize")               //
      ("all-tensors", po::bool_switch(), "safetensors input: quantize every F32/F16/BF16 tensor");
  po::options_description hidden;
  hidden.add_options()("input", po::value<std::vector<std::string>>(), "input file")  //
      ("recipe,r", po::value<std::string>(), "the former name of --spec");
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("input", -1);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (vm.count("help")) {
    print_usage(stdout, opts);
    return 0;
  }
  if (vm.count("spec") && vm.count("recipe")) throw UsageError("--spec and --recipe (its former name) exclude each other");
  if (!vm.count("spec") && !vm.count("recipe")) throw UsageError("--spec is required");
  if (!vm.count("input")) throw UsageError("an input file is required");
  if (vm["input"].as<std::vector<std::string>>().size() != 1) throw UsageError("exactly one input file is expected");
  if (!vm.count("output")) throw UsageError("-o OUT is required");
  if (vm["output"].as<std::string>().empty()) throw UsageError("-o OUT is empty");
  if (vm.count("seed") && !(vm.count("round") && vm["round"].as<std::string>() == "sr"))
    throw UsageError("--seed applies to --round sr only (it would be ignored)");
  const bool all_tensors = vm["all-tensors"].as<bool>();
  if (all_tensors && vm.count("tensor")) throw UsageError("--tensor and --all-tensors exclude each other");

  const std::string recipe = vm[vm.count("spec") ? "spec" : "recipe"].as<std::string>();
  QuantSpec spec;
  try {
    spec = named_spec(recipe);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const std::string axis_name = vm["axis"].as<std::string>();
  Axis axis;
  if (axis_name == "cols") axis = Axis::Cols;
  else if (axis_name == "rows") axis = Axis::Rows;
  else throw UsageError("--axis must be rows or cols, not '" + axis_name + "'");
  std::string label = recipe;
  try {
    if (vm.count("scale-rule")) {
      if (spec.scale_kind != ScaleKind::E8M0)
        throw UsageError("--scale-rule applies to E8M0-scaled specs; " + recipe + " has " + name_of(spec.scale_kind) +
                         " scales");
      spec.rule = scale_rule_from_name(vm["scale-rule"].as<std::string>());
      label += std::string(" scale-rule=") + name_of(spec.rule);
    }
    if (vm.count("round")) {
      spec.round = round_mode_from_name(vm["round"].as<std::string>());
      label += std::string(" round=") + name_of(spec.round);
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (vm.count("seed")) spec.sr.seed = vm["seed"].as<uint64_t>();
  if (vm["hadamard"].as<bool>()) {
    spec.hadamard16 = true;
    label += " hadamard";
  }
  if (axis == Axis::Rows) label += " axis=rows";

  const fs::path in = vm["input"].as<std::vector<std::string>>()[0];
  const std::string out_arg = vm["output"].as<std::string>();
  const std::string in_s = in.string();

  // Read the input and choose the tensors.
  const io::FileKind kind = io::detect_kind(in);
  if (kind == io::FileKind::Npy && (all_tensors || vm.count("tensor")))
    throw UsageError("--tensor and --all-tensors need a .safetensors input; " + in_s + " is a .npy file");
  io::SafetensorsFile st;
  std::vector<const io::RawTensor*> chosen;
  std::vector<std::string> skipped;
  if (kind == io::FileKind::Npy) {
    st.tensors.push_back(io::read_npy(in));
    chosen.push_back(&st.tensors[0]);
  } else {
    st = io::read_safetensors(in);
    if (vm.count("tensor")) {
      const std::string name = vm["tensor"].as<std::string>();
      const io::RawTensor* t = st.find(name);
      if (!t) {
        std::string names;
        for (const auto& u : st.tensors) names += (names.empty() ? "" : ", ") + u.name;
        throw std::runtime_error(in_s + ": no tensor '" + name + "' (tensors: " + (names.empty() ? "none" : names) + ")");
      }
      chosen.push_back(t);
    } else {
      std::vector<const io::RawTensor*> floats;
      for (const auto& t : st.tensors) {
        if (io::is_quantizable(t.dtype)) floats.push_back(&t);
        else skipped.push_back(t.name + " (" + io::name_of(t.dtype) + ")");
      }
      if (floats.empty()) throw std::runtime_error(in_s + ": no F32, F16 or BF16 tensor to quantize");
      if (!all_tensors && floats.size() > 1) {
        std::string names;
        for (const auto* t : floats) names += (names.empty() ? "" : ", ") + t->name;
        throw UsageError(in_s + " holds " + std::to_string(floats.size()) +
                         " floating tensors; choose one with --tensor NAME or use --all-tensors (" + names + ")");
      }
      chosen = floats;
    }
  }

  // Quantize everything before writing anything.
  std::vector<Result> results;
  for (size_t i = 0; i < chosen.size(); ++i) {
    QuantSpec s = spec;
    s.sr.stream = i;  // one Philox stream per tensor, in file order
    results.push_back(quantize_one(*chosen[i], in_s, s, axis, label));
  }

  // Where the outputs go. No output may be the input file itself (OUT equal to
  // IN, a link to it, or a prefix that regenerates its name, as `w.data.npy
  // -o w`): the rename would replace the source.
  const bool to_st = fs::path(out_arg).extension() == ".safetensors";
  io::AtomicOutputs outputs;
  auto add_output = [&](const fs::path& final_path) {
    std::error_code ec;
    if (fs::exists(final_path, ec) && fs::equivalent(final_path, in, ec))
      throw std::runtime_error(final_path.string() + ": is the input file " + in_s +
                               "; refusing to overwrite it (choose another -o)");
    return outputs.add(final_path);
  };
  if (to_st) {
    std::vector<io::RawTensor> tensors;
    std::map<std::string, std::string> meta{{"format", "mxsim.quantized"},
                                            {"mxsim_version", MXSIM_VERSION},
                                            {"source", in.filename().string()}};
    for (auto& r : results) {
      for (auto& o : r.outs) {
        o.name = r.name + o.name;
        tensors.push_back(o);
      }
      for (const auto& [k, v] : r.meta) meta[r.name + "." + k] = v;
    }
    const fs::path tmp = add_output(out_arg);
    io::write_safetensors(tmp, tensors, meta);
  } else {
    std::error_code ec;
    const bool dir_mode = fs::is_directory(out_arg, ec) || (!out_arg.empty() && out_arg.back() == '/');
    std::string prefix = out_arg;
    if (!dir_mode && fs::path(prefix).extension() == ".npy") prefix = prefix.substr(0, prefix.size() - 4);
    std::map<std::string, std::string> stems;  // file stem -> tensor name
    for (const auto& r : results) {
      std::string stem;
      if (dir_mode) stem = (fs::path(out_arg) / file_safe(r.name)).string();
      else if (results.size() == 1) stem = prefix;
      else stem = prefix + "." + file_safe(r.name);
      // file_safe is not one-to-one ("a/b" and "a_b"): say which tensors clash.
      if (const auto [it, fresh] = stems.emplace(stem, r.name); !fresh)
        throw std::runtime_error("tensors '" + it->second + "' and '" + r.name + "' both map to the files " + stem +
                                 ".* ('/' and '\\' become '_'); write a .safetensors OUT instead");
      for (const auto& o : r.outs) io::write_npy(add_output(stem + o.name + ".npy"), o);
      nlohmann::ordered_json j;
      j["format"] = "mxsim.quantized";
      j["mxsim_version"] = MXSIM_VERSION;
      j["source"] = in.filename().string();
      j["tensor"] = r.name;
      for (const auto& [k, v] : r.meta) j[k] = v;
      io::write_file(add_output(stem + ".meta.json"), j.dump(2) + "\n");
    }
  }
  outputs.commit();

  // Report.
  std::printf("input:  %s (%s)\n", in_s.c_str(), kind == io::FileKind::Npy ? "npy" : "safetensors");
  std::printf("spec: %s  [%s]\n", label.c_str(), spec.describe().c_str());
  std::printf("output:");
  for (const auto& p : outputs.finals()) std::printf(" %s", p.string().c_str());
  std::printf("\n");
  if (!skipped.empty()) {
    std::printf("skipped (not F32/F16/BF16):");
    for (const auto& s : skipped) std::printf(" %s", s.c_str());
    std::printf("\n");
  }
  if (!all_tensors) {
    const auto& r = results[0];
    const auto& s = r.stats;
    std::printf("tensor %s %s %s: %zu elements\n", r.name.c_str(), io::shape_str(r.src_shape).c_str(),
                io::name_of(r.src_dtype), s.count);
    std::printf("  MSE           %.6e\n  SQNR          %s dB\n  max abs err   %.6e\n", s.mse, fmt_sqnr(s.sqnr_db).c_str(),
                s.max_abs_err);
    std::printf("  underflow     %zu\n  saturated     %zu\n  NaN out       %zu\n  non-finite in %zu\n", s.underflow,
                s.saturated, s.nan_out, s.nonfinite_in);
  } else {
    size_t w = 6;
    for (const auto& r : results) w = std::max(w, r.name.size());
    std::printf("%-*s  %-18s %-5s %12s %9s %12s %10s %10s %8s\n", int(w), "tensor", "shape", "dtype", "MSE", "SQNR_dB",
                "max_abs_err", "underflow", "saturated", "NaN_out");
    for (const auto& r : results) {
      const auto& s = r.stats;
      std::printf("%-*s  %-18s %-5s %12.4e %9s %12.4e %10zu %10zu %8zu\n", int(w), r.name.c_str(),
                  io::shape_str(r.src_shape).c_str(), io::name_of(r.src_dtype), s.mse, fmt_sqnr(s.sqnr_db).c_str(),
                  s.max_abs_err, s.underflow, s.saturated, s.nan_out);
    }
  }
  return 0;
}

}  // namespace

int cmd_quantize(const Args& args) {
  try {
    return run(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "mxsim quantize: usage error: %s\n(mxsim quantize --help lists the options)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxsim quantize: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace mxsim::cli
