// HDF5 SWMR trace writer (see mxsim/trace/writer.hpp, docs/trace-format.md).
#include "mxsim/trace/writer.hpp"

#include <algorithm>
#include <map>
#include <system_error>

#include <hdf5_hl.h>

#include "mxsim/trace/schema.hpp"
#include "trace_h5util.hpp"

namespace mxsim::trace {

using detail::fail;
using detail::Hid;

namespace {
using schema::kSteps;

struct Dset {
  Hid id;
  DType dtype{};
  std::vector<uint64_t> row_shape;
  uint64_t row_elems = 1;
  int64_t rows = 0;                 // series: rows written
  std::vector<int64_t> snap_steps;  // snapshots only
  bool snapshot = false;
};

uint64_t product(const std::vector<uint64_t>& s) {
  uint64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}
}  // namespace

struct Writer::Impl {
  std::filesystem::path final_path, partial_path;
  std::string fname;  // for messages
  Hid file;
  std::map<std::string, Dset> dsets;
  Dset steps;
  int64_t step = 0;
  bool swmr = false, closed = false;

  void discard() {
    file.reset();
    std::error_code ec;
    std::filesystem::remove(partial_path, ec);
    closed = true;
  }
  void check_declare(const std::string& name) {
    if (closed) throw TraceError(fname + ": writer is closed");
    if (swmr) throw TraceError(fname + ": " + name + ": cannot declare after start_swmr() (HDF5 SWMR cannot create objects)");
  }
  void check_name(const std::string& name) {
    if (name.empty() || name[0] != '/' || name.back() == '/') throw TraceError(fname + ": " + name + ": dataset name must be an absolute HDF5 path like /train/loss");
    if (name == kSteps) throw TraceError(fname + ": /steps is reserved for the completion counter");
    if (name.rfind(schema::kSnapshotRows, 0) == 0)
      throw TraceError(fname + ": " + name + ": names starting with " + schema::kSnapshotRows +
                       " are reserved for the snapshots' dimension scales");
    if (dsets.count(name)) throw TraceError(fname + ": " + name + ": declared twice");
  }
  /// The units and description attributes of a dataset the schema knows.
  void document(hid_t d, const std::string& name) {
    const schema::DatasetDoc doc = schema::describe(name);
    if (!doc.units.empty()) detail::write_string_attr(d, "units", doc.units, fname);
    if (!doc.description.empty()) detail::write_string_attr(d, "description", doc.description, fname);
  }
  Hid make(const std::string& name, DType dtype, const std::vector<hsize_t>& dims, const std::vector<hsize_t>& maxdims,
           const std::vector<hsize_t>& chunk, const char* kind) {
    Hid space(H5Screate_simple(int(dims.size()), dims.data(), maxdims.data()), H5Sclose);
    Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(lcpl, 1);
    Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
    // Fletcher32 per chunk: HDF5 verifies it on every read, so a damaged row is an error, never
    // other values (the metadata's own checksums do not cover raw data; docs/trace-format.md
    // "Integrity").
    H5Pset_fletcher32(dcpl);
    Hid d(H5Dcreate2(file, name.c_str(), detail::file_type(dtype), space, lcpl, dcpl, H5P_DEFAULT), H5Dclose);
    if (!d.valid()) fail(fname, name + ": cannot create dataset");
    detail::write_string_attr(d, "mxsim_kind", kind, fname);
    return d;
  }
  void write_row(Dset& d, const std::string& name, hsize_t row, const void* data, const char* what) {
    std::vector<hsize_t> start(d.row_shape.size() + 1, 0), count(d.row_shape.size() + 1, 1);
    start[0] = row;
    for (std::size_t i = 0; i < d.row_shape.size(); ++i) count[i + 1] = d.row_shape[i];
    Hid fs(H5Dget_space(d.id), H5Sclose);
    Hid ms(H5Screate_simple(int(count.size()), count.data(), nullptr), H5Sclose);
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
        H5Dwrite(d.id, detail::native_type(d.dtype), ms, fs, H5P_DEFAULT, data) < 0)
      fail(fname, name + ": " + what + ": write failed at row " + std::to_string(row));
  }
  /// The snapshots' row axis as an HDF5 dimension scale: one i64 dataset of the trace rows per
  /// distinct steps list (schema::snapshot_rows_scale), attached to dimension 0 of each snapshot
  /// with that list. Before SWMR: that mode can create no dataset and write no attribute.
  void attach_snapshot_scales() {
    std::vector<std::pair<const std::vector<int64_t>*, Hid>> scales;
    for (auto& [name, d] : dsets) {
      if (!d.snapshot) continue;
      const std::vector<int64_t>& steps = d.snap_steps;  // a named reference: Clang 14 cannot capture a structured binding
      auto it = std::find_if(scales.begin(), scales.end(), [&](const auto& s) { return *s.first == steps; });
      if (it == scales.end()) {
        const std::string sn = schema::snapshot_rows_scale(scales.size());
        const hsize_t n = d.snap_steps.size();
        Hid s = make(sn, DType::i64, {n}, {n}, {n}, schema::kSnapshotRowsKind);
        if (H5Dwrite(s, detail::native_type(DType::i64), H5S_ALL, H5S_ALL, H5P_DEFAULT, d.snap_steps.data()) < 0)
          fail(fname, sn + ": write failed");
        document(s, sn);
        if (H5DSset_scale(s, schema::kSnapshotScaleName) < 0) fail(fname, "cannot make " + sn + " a dimension scale");
        scales.emplace_back(&d.snap_steps, std::move(s));
        it = scales.end() - 1;
      }
      if (H5DSattach_scale(d.id, it->second, 0) < 0)
        fail(fname, name + ": cannot attach the " + schema::snapshot_rows_scale(size_t(it - scales.begin())) +
                        " dimension scale");
    }
  }
  Dset& lookup(const std::string& name, DType dtype, bool snapshot) {
    if (closed) throw TraceError(fname + ": writer is closed");
    if (!swmr) throw TraceError(fname + ": " + name + ": write before start_swmr()");
    auto it = dsets.find(name);
    if (it == dsets.end()) throw TraceError(fname + ": " + name + ": not declared");
    Dset& d = it->second;
    if (d.snapshot != snapshot)
      throw TraceError(fname + ": " + name + (snapshot ? ": is a series, not a snapshot" : ": is a snapshot, use write_snapshot"));
    if (d.dtype != dtype)
      throw TraceError(fname + ": " + name + ": declared " + dtype_name(d.dtype) + ", written as " + dtype_name(dtype));
    return d;
  }
};

Writer::Writer(const std::filesystem::path& path, const std::string& config_toml, const Provenance& prov)
    : impl_(std::make_unique<Impl>()) {
  detail::quiet_hdf5();
  auto& m = *impl_;
  m.final_path = path;
  m.partial_path = path;
  m.partial_path += ".partial";
  m.fname = path.string();
  try {
    Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    m.file = Hid(H5Fcreate(m.partial_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose);
    if (!m.file.valid()) fail(m.fname, "cannot create trace file " + m.partial_path.string());
    const std::string& f = m.fname;
    detail::write_u64_attr(m.file, schema::kFormatAttr, schema::kFormatVersion, f);
    detail::write_string_attr(m.file, "config_toml", config_toml, f);
    detail::write_string_attr(m.file, "version", prov.version, f);
    detail::write_string_attr(m.file, "git_describe", prov.git_describe, f);
    detail::write_string_attr(m.file, "backend", prov.backend, f);
    detail::write_u64_attr(m.file, "seed", prov.seed, f);
    detail::write_string_attr(m.file, "date", prov.date, f);
    detail::write_string_attr(m.file, "host", prov.host, f);
    detail::write_string_attr(m.file, "producer", prov.producer, f);
    if (!prov.model.empty()) detail::write_string_attr(m.file, "model", prov.model, f);
    m.steps.dtype = DType::i64;
    m.steps.id = m.make(kSteps, DType::i64, {0}, {H5S_UNLIMITED}, {1024}, "steps");
    m.document(m.steps.id, kSteps);
    detail::write_string_attr(m.steps.id, "rows", schema::kRowConvention, f);
  } catch (...) {
    m.discard();
    throw;
  }
}

Writer::~Writer() {
  try {
    close();
  } catch (...) {
  }
}
Writer::Writer(Writer&&) noexcept = default;
Writer& Writer::operator=(Writer&&) noexcept = default;

void Writer::declare_series(const std::string& name, DType dtype, const std::vector<uint64_t>& per_step_shape) {
  auto& m = *impl_;
  m.check_declare(name);
  try {
    m.check_name(name);
    Dset d;
    d.dtype = dtype;
    d.row_shape = per_step_shape;
    d.row_elems = product(per_step_shape);
    if (d.row_elems == 0) throw TraceError(m.fname + ": " + name + ": per-step shape has a zero dimension");
    std::vector<hsize_t> dims{0}, maxd{H5S_UNLIMITED}, chunk;
    // Chunk: whole rows, ~64 KiB per chunk, at most 1024 rows.
    const uint64_t row_bytes = d.row_elems * dtype_size(dtype);
    chunk.push_back(std::clamp<uint64_t>(65536 / row_bytes, 1, 1024));
    for (auto s : per_step_shape) {
      dims.push_back(s);
      maxd.push_back(s);
      chunk.push_back(s);
    }
    d.id = m.make(name, dtype, dims, maxd, chunk, "series");
    m.document(d.id, name);
    detail::write_string_attr(d.id, "rows", schema::kRowConvention, m.fname);
    m.dsets.emplace(name, std::move(d));
  } catch (...) {
    m.discard();
    throw;
  }
}

void Writer::declare_snapshot(const std::string& name, DType dtype, const std::vector<uint64_t>& shape,
                              const std::vector<int64_t>& steps) {
  auto& m = *impl_;
  m.check_declare(name);
  try {
    m.check_name(name);
    if (steps.empty()) throw TraceError(m.fname + ": " + name + ": snapshot with no steps");
    for (std::size_t i = 0; i < steps.size(); ++i)
      if (steps[i] < 0 || (i > 0 && steps[i] <= steps[i - 1]))
        throw TraceError(m.fname + ": " + name + ": snapshot steps must be >= 0 and strictly increasing");
    Dset d;
    d.snapshot = true;
    d.dtype = dtype;
    d.row_shape = shape;
    d.row_elems = product(shape);
    d.snap_steps = steps;
    if (d.row_elems == 0) throw TraceError(m.fname + ": " + name + ": snapshot shape has a zero dimension");
    std::vector<hsize_t> dims{steps.size()}, chunk{1};
    for (auto s : shape) {
      dims.push_back(s);
      chunk.push_back(s);
    }
    d.id = m.make(name, dtype, dims, dims, chunk, "snapshot");
    m.document(d.id, name);
    detail::write_i64_attr(d.id, "steps", steps, m.fname);
    detail::write_string_attr(d.id, "rows", schema::kSnapshotRowConvention, m.fname);
    m.dsets.emplace(name, std::move(d));
  } catch (...) {
    m.discard();
    throw;
  }
}

namespace {
/// The group at `path`, created with its parents when missing.
Hid group_at(hid_t file, const std::string& path, const std::string& fname) {
  if (path.empty() || path[0] != '/') throw TraceError(fname + ": " + path + ": group name must be an absolute HDF5 path");
  if (H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0) {
    Hid g(H5Gopen2(file, path.c_str(), H5P_DEFAULT), H5Gclose);
    if (!g.valid()) fail(fname, path + ": exists but is not a group");
    return g;
  }
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  Hid g(H5Gcreate2(file, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) fail(fname, path + ": cannot create group");
  return g;
}
}  // namespace

void Writer::set_group_attribute(const std::string& group, const std::string& name, const std::string& value) {
  auto& m = *impl_;
  m.check_declare(group);
  detail::write_string_attr(group_at(m.file, group, m.fname), name.c_str(), value, m.fname);
}
void Writer::set_group_attribute(const std::string& group, const std::string& name, const std::vector<int64_t>& value) {
  auto& m = *impl_;
  m.check_declare(group);
  detail::write_i64_attr(group_at(m.file, group, m.fname), name.c_str(), value, m.fname);
}

void Writer::start_swmr() {
  auto& m = *impl_;
  if (m.closed) throw TraceError(m.fname + ": writer is closed");
  if (m.swmr) return;
  try {
    // /train/step as the dimension scale of every series' row axis (H5DS),
    // so generic HDF5 tools label rows by the optimizer step. Attributes
    // cannot be written in SWMR mode: now or never.
    if (auto st = m.dsets.find(schema::kTrainStep); st != m.dsets.end() && !st->second.snapshot) {
      if (H5DSset_scale(st->second.id, schema::kStepScaleName) < 0) fail(m.fname, "cannot make /train/step a dimension scale");
      for (auto& [name, d] : m.dsets)
        if (!d.snapshot && name != schema::kTrainStep && H5DSattach_scale(d.id, st->second.id, 0) < 0)
          fail(m.fname, name + ": cannot attach the /train/step dimension scale");
      if (H5DSattach_scale(m.steps.id, st->second.id, 0) < 0) fail(m.fname, "/steps: cannot attach the /train/step dimension scale");
    }
    m.attach_snapshot_scales();
    if (H5Fstart_swmr_write(m.file) < 0) fail(m.fname, "H5Fstart_swmr_write failed");
    std::error_code ec;
    std::filesystem::rename(m.partial_path, m.final_path, ec);
    if (ec) throw TraceError(m.fname + ": cannot rename " + m.partial_path.string() + " to final path: " + ec.message());
  } catch (...) {
    m.discard();
    throw;
  }
  m.swmr = true;
}

void Writer::append_raw(const std::string& name, DType dtype, const void* data) {
  auto& m = *impl_;
  Dset& d = m.lookup(name, dtype, false);
  if (d.rows > m.step) throw TraceError(m.fname + ": " + name + ": appended twice in step " + std::to_string(m.step));
  std::vector<hsize_t> dims{hsize_t(d.rows + 1)};
  for (auto s : d.row_shape) dims.push_back(s);
  if (H5Dset_extent(d.id, dims.data()) < 0) fail(m.fname, name + ": cannot extend");
  m.write_row(d, name, hsize_t(d.rows), data, "append");
  ++d.rows;
}

void Writer::write_snapshot_raw(const std::string& name, DType dtype, const void* data) {
  auto& m = *impl_;
  Dset& d = m.lookup(name, dtype, true);
  auto it = std::find(d.snap_steps.begin(), d.snap_steps.end(), m.step);
  if (it == d.snap_steps.end())
    throw TraceError(m.fname + ": " + name + ": step " + std::to_string(m.step) + " is not a declared snapshot step");
  m.write_row(d, name, hsize_t(it - d.snap_steps.begin()), data, "snapshot");
}

void Writer::end_step() {
  auto& m = *impl_;
  if (m.closed) throw TraceError(m.fname + ": writer is closed");
  if (!m.swmr) throw TraceError(m.fname + ": end_step() before start_swmr()");
  for (const auto& [name, d] : m.dsets)
    if (!d.snapshot && d.rows != m.step + 1)
      throw TraceError(m.fname + ": " + name + ": no row appended in step " + std::to_string(m.step));
  // 1) every row of this step reaches the file; 2) only then the step counter grows.
  if (H5Fflush(m.file, H5F_SCOPE_LOCAL) < 0) fail(m.fname, "flush of step " + std::to_string(m.step) + " failed");
  const hsize_t n = hsize_t(m.step + 1);
  if (H5Dset_extent(m.steps.id, &n) < 0) fail(m.fname, "/steps: cannot extend");
  m.write_row(m.steps, kSteps, hsize_t(m.step), &m.step, "end_step");
  if (H5Fflush(m.file, H5F_SCOPE_LOCAL) < 0) fail(m.fname, "flush of /steps failed");
  ++m.step;
}

int64_t Writer::current_step() const { return impl_->step; }
const std::filesystem::path& Writer::path() const { return impl_->final_path; }

void Writer::close() {
  if (!impl_) return;
  auto& m = *impl_;
  if (m.closed) return;
  m.closed = true;
  if (!m.swmr) {  // never started: the file is not a usable trace; leave nothing behind
    m.discard();
    return;
  }
  for (auto& [n, d] : m.dsets) d.id.reset();
  m.steps.id.reset();
  const herr_t rc = H5Fclose(m.file.release());
  if (rc < 0) fail(m.fname, "close failed");
}

bool hdf5_thread_safe() {
  hbool_t safe = 0;
  return H5is_library_threadsafe(&safe) >= 0 && safe;
}

}  // namespace mxsim::trace
