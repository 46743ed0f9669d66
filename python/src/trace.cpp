// mxsim.Trace / compare_traces: the HDF5 trace reader (mxsim/trace/reader.hpp)
// and bit comparison (mxsim/trace/compare.hpp), without h5py.
#include <pybind11/stl/filesystem.h>

#include <algorithm>
#include <cstring>

#include "common.hpp"
#include "mxsim/trace/compare.hpp"
#include "mxsim/trace/reader.hpp"

namespace mxsim::py {
namespace {

pyb::dtype numpy_dtype(trace::DType t) {
  switch (t) {
    case trace::DType::f32: return pyb::dtype::of<float>();
    case trace::DType::f64: return pyb::dtype::of<double>();
    case trace::DType::u8: return pyb::dtype::of<uint8_t>();
    case trace::DType::i32: return pyb::dtype::of<int32_t>();
    case trace::DType::u32: return pyb::dtype::of<uint32_t>();
    case trace::DType::i64: return pyb::dtype::of<int64_t>();
    case trace::DType::u64: return pyb::dtype::of<uint64_t>();
  }
  return pyb::dtype::of<float>();
}

pyb::array raw_to_array(const std::vector<unsigned char>& raw, trace::DType t, std::vector<size_t> shape) {
  pyb::array a(numpy_dtype(t), shape);
  if (raw.size() != size_t(a.nbytes())) throw std::runtime_error("trace read returned an unexpected size");
  if (!raw.empty()) std::memcpy(a.mutable_data(), raw.data(), raw.size());
  return a;
}

pyb::dict provenance(const trace::Provenance& p) {
  pyb::dict d;
  d["version"] = p.version;
  d["commit"] = p.git_describe;
  d["backend"] = p.backend;
  d["seed"] = p.seed;
  d["date"] = p.date;
  d["host"] = p.host;
  return d;
}

}  // namespace

void init_trace(pyb::module_& m) {
  pyb::class_<trace::Reader>(m, "Trace", R"(An mxsim HDF5 trace, read-only (SWMR read: finished, live or killed runs;
only complete steps are seen). docs/trace-format.md is the layout.)")
      .def(pyb::init<const std::filesystem::path&>(), pyb::arg("path"))
      .def_property_readonly("steps", &trace::Reader::steps_completed, "complete steps")
      .def_property_readonly("config", &trace::Reader::config_toml, "the run's config (TOML text)")
      .def_property_readonly("format_version", &trace::Reader::format_version)
      .def_property_readonly("provenance", [](const trace::Reader& r) { return provenance(r.provenance()); })
      .def("refresh", &trace::Reader::refresh, "re-read the step count of a live file")
      .def("datasets", [](const trace::Reader& r) {
        pyb::list l;
        for (const auto& d : r.datasets()) {
          pyb::dict e;
          e["name"] = d.name;
          e["dtype"] = trace::dtype_name(d.dtype);
          e["snapshot"] = d.snapshot;
          e["row_shape"] = d.row_shape;
          if (d.snapshot) e["snapshot_steps"] = d.snapshot_steps;
          l.append(e);
        }
        return l;
      }, "every series and snapshot: dicts of name, dtype, snapshot, row_shape (and snapshot_steps)")
      .def("series", [](const trace::Reader& r, const std::string& name, uint64_t first, std::optional<uint64_t> count) {
        const auto& in = r.info(name);
        if (in.snapshot) throw std::invalid_argument(name + " is a snapshot; use snapshot(name, step)");
        const uint64_t n = r.steps_completed();
        const uint64_t c = std::min<uint64_t>(count.value_or(UINT64_MAX), first < n ? n - first : 0);
        auto raw = r.read_raw(name, in.dtype, first, c);
        std::vector<size_t> shape{size_t(c)};
        for (auto s : in.row_shape) shape.push_back(size_t(s));
        return raw_to_array(raw, in.dtype, shape);
      }, pyb::arg("name"), pyb::arg("first") = 0, pyb::arg("count") = pyb::none(),
      "rows [first, first+count) of a per-step series as an array [rows, *row_shape]")
      .def("snapshot", [](const trace::Reader& r, const std::string& name, int64_t step) {
        const auto& in = r.info(name);
        auto raw = r.read_snapshot_raw(name, in.dtype, step);
        std::vector<size_t> shape;
        for (auto s : in.row_shape) shape.push_back(size_t(s));
        return raw_to_array(raw, in.dtype, shape);
      }, pyb::arg("name"), pyb::arg("step"), "a snapshot at a declared, complete step")
      .def("__enter__", [](trace::Reader& r) -> trace::Reader& { return r; }, pyb::return_value_policy::reference)
      .def("__exit__", [](trace::Reader&, pyb::args) { return false; });

  m.def("compare_traces", [](const std::filesystem::path& a, const std::filesystem::path& b) {
    const trace::CompareResult r = trace::compare(a, b);
    pyb::dict d;
    d["identical"] = r.identical();
    d["steps_a"] = r.steps_a;
    d["steps_b"] = r.steps_b;
    d["steps_compared"] = r.steps_compared;
    {
      const auto& al = r.alignment;
      const bool range = al.by_global_step && r.steps_compared > 0;
      pyb::dict c;
      c["pairing"] = al.by_global_step ? "global_step" : "index";
      c["first_step"] = range ? pyb::object(pyb::int_(r.step_of(0))) : pyb::object(pyb::none());
      c["last_step"] = range ? pyb::object(pyb::int_(r.step_of(r.steps_compared - 1))) : pyb::object(pyb::none());
      c["a_first_row"] = al.row_a;
      c["b_first_row"] = al.row_b;
      c["note"] = al.note.empty() ? pyb::object(pyb::none()) : pyb::object(pyb::str(al.note));
      d["compared"] = c;
    }
    d["only_a"] = r.only_a;
    d["only_b"] = r.only_b;
    d["mismatched"] = r.mismatched;
    d["only_a_outside"] = r.only_a_outside;
    d["only_b_outside"] = r.only_b_outside;
    if (r.first_difference)
      d["first_difference"] = pyb::dict(pyb::arg("step") = r.first_difference->step,
                                        pyb::arg("dataset") = r.first_difference->dataset,
                                        pyb::arg("element") = r.first_difference->element,
                                        pyb::arg("a_row") = r.first_difference->row_a,
                                        pyb::arg("b_row") = r.first_difference->row_b);
    else
      d["first_difference"] = pyb::none();
    pyb::list ds;
    for (const auto& x : r.per_dataset)
      ds.append(pyb::dict(pyb::arg("dataset") = x.dataset, pyb::arg("first_step") = x.first_step,
                          pyb::arg("element") = x.element, pyb::arg("steps_differing") = x.steps_differing,
                          pyb::arg("max_abs_diff") = x.max_abs_diff));
    d["datasets"] = ds;
    pyb::list st;
    for (const auto& x : r.per_step)
      st.append(pyb::dict(pyb::arg("step") = x.step, pyb::arg("max_abs_diff") = x.max_abs_diff, pyb::arg("dataset") = x.dataset));
    d["steps"] = st;
    return d;
  }, pyb::arg("a"), pyb::arg("b"), "trace::compare as a dict (what `mxsim compare --json` prints).");
}

}  // namespace mxsim::py
