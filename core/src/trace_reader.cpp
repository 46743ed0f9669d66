// HDF5 trace reader (see mxsim/trace/reader.hpp).
#include "mxsim/trace/reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>

#include "mxsim/trace/schema.hpp"
#include "trace_h5util.hpp"

namespace mxsim::trace {

using detail::fail;
using detail::fail_reading;
using detail::Hid;

uint64_t DatasetInfo::row_elems() const {
  uint64_t n = 1;
  for (auto d : row_shape) n *= d;
  return n;
}
uint64_t DatasetInfo::row_bytes() const { return row_elems() * dtype_size(dtype); }

namespace {

// The HDF5 objects of one open trace file. HDF5 1.10 keeps one dataset object per dataset and
// process, shared by every id opened on it, and H5Drefresh through one id leaves the others
// reading stale chunks (with two ids open, a refreshed read of snapshot row 1 returned row 0's
// bytes). So a process opens each trace once: Readers of the same file (same device and inode)
// share one OpenTrace, and each dataset has one id.
struct OpenTrace {
  Hid file, steps;
  std::vector<DatasetInfo> infos;  // sorted by name
  std::map<std::string, Hid> dsets;
  bool writer_open = false;  // its writer is running or was killed (writer_left_open)
};

/// Whether the file's writer has not closed it: the "file consistency flags" of a version 2 or 3
/// superblock (HDF5 File Format Specification, "Superblock": bit 0 open for writing, bit 2 open
/// for SWMR writing), set while a writer has the file and cleared by its close. mxsim's writer
/// puts the superblock at offset 0.
bool writer_left_open(const std::string& fname) {
  std::ifstream f(fname, std::ios::binary);
  unsigned char b[12];
  static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (!f.read(reinterpret_cast<char*>(b), sizeof b) || std::memcmp(b, sig, 8) != 0 || b[8] < 2) return false;
  return (b[11] & 0x05) != 0;
}

/// H5Dread, with one exception to the Fletcher-32 check (docs/trace-format.md "Integrity"):
/// while the writer of a trace runs, and after it was killed, the last chunk of a series may be
/// caught half rewritten (each step rewrites it in place with one more row, and a kill can land
/// inside that write), so its checksum fails although the rows the trace counts as complete hold
/// the bytes they had. A read that fails and touches that chunk is then made again without the
/// check. A cleanly closed trace is always checked.
herr_t read_data(const OpenTrace& t, hid_t d, hid_t type, hid_t ms, hid_t fs, void* out, uint64_t last_row,
                 uint64_t extent) {
  if (H5Dread(d, type, ms, fs, H5P_DEFAULT, out) >= 0) return 0;
  if (!t.writer_open || extent == 0) return -1;
  Hid dcpl(H5Dget_create_plist(d), H5Pclose);
  hsize_t chunk[8] = {};
  if (!dcpl.valid() || H5Pget_chunk(dcpl, 8, chunk) < 1 || chunk[0] == 0) return -1;
  if (last_row < (extent - 1) / chunk[0] * chunk[0]) return -1;  // not the last chunk: damage
  Hid dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  if (!dxpl.valid() || H5Pset_edc_check(dxpl, H5Z_DISABLE_EDC) < 0) return -1;
  detail::hdf5_message();  // the first attempt's error stack
  return H5Dread(d, type, ms, fs, dxpl, out);
}

std::mutex registry_mutex;
std::map<std::pair<dev_t, ino_t>, std::weak_ptr<OpenTrace>> registry;

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// One dataset found by the visit: a series or snapshot when its mxsim_kind says so, checked
// against what the writer guarantees (rank >= 1, no zero row dimension, snapshot steps that
// match the rows) so that every later read can trust DatasetInfo.
void add_dataset(OpenTrace& t, const std::string& fname, const std::string& rel) {
  const std::string full = "/" + rel;
  if (full == schema::kSteps) return;
  Hid d(H5Dopen2(t.file, rel.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) fail(fname, full + ": cannot open (corrupt file?)");
  if (!detail::has_attr(d, "mxsim_kind", fname)) return;
  const std::string kind = detail::read_string_attr(d, "mxsim_kind", fname);
  if (kind != "series" && kind != "snapshot") return;
  DatasetInfo in;
  in.name = full;
  in.snapshot = kind == "snapshot";
  const detail::Stored st = detail::stored_dataset(d, fname, full);
  in.dtype = detail::stored_dtype(st, fname, full);
  detail::require(!st.dims.empty(), st, "rank >= 1 (rows first)", fname, full);
  in.row_shape.assign(st.dims.begin() + 1, st.dims.end());
  for (auto r : in.row_shape)
    if (r == 0) throw TraceError(fname + ": " + full + ": per-row shape " + shape_text(in.row_shape) + " has a zero dimension");
  if (in.row_elems() > (uint64_t(1) << 62) / dtype_size(in.dtype))
    throw TraceError(fname + ": " + full + ": per-row shape " + shape_text(in.row_shape) + " is too large");
  if (in.snapshot) {
    in.snapshot_steps = detail::read_i64_attr(d, "steps", fname, st.dims[0]);
    if (in.snapshot_steps.size() != st.dims[0])
      throw TraceError(fname + ": " + full + ": " + std::to_string(st.dims[0]) + " snapshot rows but " +
                       std::to_string(in.snapshot_steps.size()) + " steps in its steps attribute");
    for (std::size_t i = 0; i < in.snapshot_steps.size(); ++i)
      if (in.snapshot_steps[i] < 0 || (i > 0 && in.snapshot_steps[i] <= in.snapshot_steps[i - 1]))
        throw TraceError(fname + ": " + full + ": snapshot steps are not >= 0 and strictly increasing");
  }
  t.infos.push_back(std::move(in));
  t.dsets.emplace(full, std::move(d));
}

std::shared_ptr<OpenTrace> open_trace(const std::string& fname) {
  detail::check_global_heaps(fname);
  auto t = std::make_shared<OpenTrace>();
  t->writer_open = writer_left_open(fname);
  const Hid fapl = detail::read_fapl();
  t->file = Hid(H5Fopen(fname.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl), H5Fclose);
  if (!t->file.valid()) {
    const std::string swmr_msg = detail::hdf5_message();
    if (H5Fis_hdf5(fname.c_str()) <= 0) {
      detail::hdf5_message();
      throw TraceError(fname + ": not an HDF5 file, so not an mxsim trace");
    }
    t->file = Hid(H5Fopen(fname.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose);
    if (!t->file.valid()) fail(fname, "cannot open (SWMR read: " + swmr_msg + ")");
  }
  const htri_t has_steps = H5Lexists(t->file, schema::kSteps, H5P_DEFAULT);
  if (has_steps < 0) fail(fname, "corrupt trace (cannot look up /steps)");
  if (!detail::has_attr(t->file, schema::kFormatAttr, fname) || has_steps == 0)
    throw TraceError(fname + ": not an mxsim trace (no mxsim_trace_format attribute or /steps dataset)");
  if (const uint64_t v = detail::read_u64_attr(t->file, schema::kFormatAttr, fname); v > uint64_t(schema::kFormatVersion))
    throw TraceError(fname + ": trace format " + std::to_string(v) + " is newer than this mxsim reads (up to " +
                     std::to_string(schema::kFormatVersion) + "); open it with a newer mxsim");
  t->steps = Hid(H5Dopen2(t->file, schema::kSteps, H5P_DEFAULT), H5Dclose);
  if (!t->steps.valid()) fail(fname, "cannot open /steps");
  const detail::Stored st = detail::stored_dataset(t->steps, fname, schema::kSteps);
  detail::require(st.cls == H5T_INTEGER && st.dims.size() == 1, st, "integers of rank 1", fname, schema::kSteps);
  // Every dataset with an mxsim_kind attribute of "series" or "snapshot".
  for (const auto& rel : detail::dataset_names(t->file, fname, "corrupt trace (cannot list its datasets)"))
    add_dataset(*t, fname, rel);
  std::sort(t->infos.begin(), t->infos.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return t;
}

}  // namespace

struct Reader::Impl {
  std::filesystem::path path;
  std::string fname;
  std::shared_ptr<OpenTrace> t;
  uint64_t k = 0;

  const DatasetInfo& info(const std::string& name) const {
    auto it = std::lower_bound(t->infos.begin(), t->infos.end(), name,
                               [](const DatasetInfo& a, const std::string& b) { return a.name < b; });
    if (it == t->infos.end() || it->name != name) throw TraceError(fname + ": " + name + ": no such series or snapshot");
    return *it;
  }
  std::vector<unsigned char> read_rows(const std::string& name, DType dtype, uint64_t row0, uint64_t nrows,
                                       bool snapshot) const {
    const DatasetInfo& in = info(name);
    if (in.snapshot != snapshot) throw TraceError(fname + ": " + name + (snapshot ? ": is a series" : ": is a snapshot"));
    if (in.dtype != dtype)
      throw TraceError(fname + ": " + name + ": stored as " + dtype_name(in.dtype) + ", read as " + dtype_name(dtype));
    if (nrows == 0) return {};
    hid_t d = t->dsets.at(name);
    if (H5Drefresh(d) < 0) fail_reading(fname, name, "refresh failed");
    // The extent is read again after the refresh: its rank and row shape must still be the ones
    // the buffer is sized for.
    Hid fs(H5Dget_space(d), H5Sclose);
    if (!fs.valid()) fail_reading(fname, name, "cannot read its dataspace");
    const std::vector<hsize_t> ext = detail::extent(fs, fname, name);
    if (ext.size() != in.row_shape.size() + 1 || !std::equal(in.row_shape.begin(), in.row_shape.end(), ext.begin() + 1))
      throw TraceError(fname + ": " + name + ": its shape changed while open");
    if (ext[0] < row0 + nrows)
      throw TraceError(fname + ": " + name + ": has " + std::to_string(ext[0]) + " rows, fewer than the " +
                       std::to_string(row0 + nrows) + " /steps promises (file not written by mxsim's writer?)");
    if (nrows > UINT64_MAX / in.row_bytes())
      throw TraceError(fname + ": " + name + ": " + std::to_string(nrows) + " rows are too large to read");
    const uint64_t bytes = nrows * in.row_bytes();
    detail::require_stored_bytes(d, bytes, fname, name);
    auto out = detail::buffer<unsigned char>(bytes, fname, name);
    std::vector<hsize_t> start(ext.size(), 0), count(ext);
    start[0] = row0;
    count[0] = nrows;
    Hid ms(H5Screate_simple(int(count.size()), count.data(), nullptr), H5Sclose);
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
        read_data(*t, d, detail::native_type(dtype), ms, fs, out.data(), row0 + nrows - 1, ext[0]) < 0)
      fail_reading(fname, name, "read failed");
    return out;
  }
  /// Element `index` of rows [row0, row0 + nrows): one point per row (an HDF5 point selection,
  /// so one weight's timeline reads one value per step, not whole rows).
  std::vector<unsigned char> read_element(const std::string& name, DType dtype, uint64_t index, uint64_t row0,
                                          uint64_t nrows, bool snapshot) const {
    const DatasetInfo& in = info(name);
    if (in.snapshot != snapshot) throw TraceError(fname + ": " + name + (snapshot ? ": is a series" : ": is a snapshot"));
    if (in.dtype != dtype)
      throw TraceError(fname + ": " + name + ": stored as " + dtype_name(in.dtype) + ", read as " + dtype_name(dtype));
    if (index >= in.row_elems())
      throw TraceError(fname + ": " + name + ": element " + std::to_string(index) + " is outside a row of " +
                       std::to_string(in.row_elems()) + " elements");
    if (nrows == 0) return {};
    hid_t d = t->dsets.at(name);
    if (H5Drefresh(d) < 0) fail_reading(fname, name, "refresh failed");
    Hid fs(H5Dget_space(d), H5Sclose);
    if (!fs.valid()) fail_reading(fname, name, "cannot read its dataspace");
    const std::vector<hsize_t> ext = detail::extent(fs, fname, name);
    if (ext.size() != in.row_shape.size() + 1 || !std::equal(in.row_shape.begin(), in.row_shape.end(), ext.begin() + 1))
      throw TraceError(fname + ": " + name + ": its shape changed while open");
    if (ext[0] < row0 + nrows)
      throw TraceError(fname + ": " + name + ": has " + std::to_string(ext[0]) + " rows, fewer than the " +
                       std::to_string(row0 + nrows) + " /steps promises (file not written by mxsim's writer?)");
    const std::size_t rank = ext.size();
    std::vector<hsize_t> within(rank - 1);  // multi-index of `index` within a row
    uint64_t rest = index;
    for (std::size_t i = rank - 1; i-- > 0;) {
      within[i] = rest % in.row_shape[i];
      rest /= in.row_shape[i];
    }
    std::vector<hsize_t> coords(nrows * rank);  // nrows <= steps: small
    for (uint64_t r = 0; r < nrows; ++r) {
      coords[r * rank] = row0 + r;
      for (std::size_t i = 1; i < rank; ++i) coords[r * rank + i] = within[i - 1];
    }
    auto out = detail::buffer<unsigned char>(nrows * dtype_size(dtype), fname, name);
    const hsize_t n = nrows;
    Hid ms(H5Screate_simple(1, &n, nullptr), H5Sclose);
    if (H5Sselect_elements(fs, H5S_SELECT_SET, nrows, coords.data()) < 0 ||
        read_data(*t, d, detail::native_type(dtype), ms, fs, out.data(), row0 + nrows - 1, ext[0]) < 0)
      fail_reading(fname, name, "read failed");
    return out;
  }
};

Reader::Reader(const std::filesystem::path& path) : impl_(std::make_unique<Impl>()) {
  detail::quiet_hdf5();
  auto& m = *impl_;
  m.path = path;
  m.fname = path.string();
  struct stat sb {};
  if (::stat(m.fname.c_str(), &sb) != 0) throw TraceError(m.fname + ": missing (no such file)");
  const std::pair<dev_t, ino_t> key{sb.st_dev, sb.st_ino};
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto it = registry.find(key);
    if (it != registry.end()) m.t = it->second.lock();
    if (!m.t) {
      m.t = open_trace(m.fname);
      registry[key] = m.t;
    }
    for (auto i = registry.begin(); i != registry.end();) i = i->second.expired() ? registry.erase(i) : std::next(i);
  }
  refresh();
}

Reader::~Reader() = default;
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;

void Reader::refresh() {
  auto& m = *impl_;
  if (H5Drefresh(m.t->steps) < 0) fail(m.fname, "/steps: refresh failed");
  Hid sp(H5Dget_space(m.t->steps), H5Sclose);
  if (!sp.valid()) fail(m.fname, "/steps: cannot read its dataspace");
  const std::vector<hsize_t> ext = detail::extent(sp, m.fname, schema::kSteps);
  if (ext.size() != 1) throw TraceError(m.fname + ": /steps: rank " + std::to_string(ext.size()) + ", expected 1");
  m.k = ext[0];
}

uint64_t Reader::steps_completed() const { return impl_->k; }
std::string Reader::config_toml() const { return detail::read_string_attr(impl_->t->file, "config_toml", impl_->fname); }
int Reader::format_version() const { return int(detail::read_u64_attr(impl_->t->file, schema::kFormatAttr, impl_->fname)); }

namespace {
/// The group at `path` when it exists (and is a group).
std::optional<Hid> open_group(hid_t file, const std::string& path) {
  if (path.empty() || path[0] != '/' || H5Lexists(file, path.c_str(), H5P_DEFAULT) <= 0) return std::nullopt;
  Hid g(H5Gopen2(file, path.c_str(), H5P_DEFAULT), H5Gclose);  // fails (quietly) for a dataset
  if (!g.valid()) return std::nullopt;
  return g;
}
}  // namespace

std::optional<std::string> Reader::group_string_attribute(const std::string& group, const std::string& name) const {
  const auto& m = *impl_;
  auto g = open_group(m.t->file, group);
  if (!g || !detail::has_attr(*g, name.c_str(), m.fname)) return std::nullopt;
  return detail::read_string_attr(*g, name.c_str(), m.fname);
}
std::optional<std::vector<int64_t>> Reader::group_i64_attribute(const std::string& group, const std::string& name) const {
  const auto& m = *impl_;
  auto g = open_group(m.t->file, group);
  if (!g || !detail::has_attr(*g, name.c_str(), m.fname)) return std::nullopt;
  return detail::read_i64_attr(*g, name.c_str(), m.fname, 16);
}

Provenance Reader::provenance() const {
  const auto& m = *impl_;
  Provenance p;
  auto s = [&](const char* n) {
    return detail::has_attr(m.t->file, n, m.fname) ? detail::read_string_attr(m.t->file, n, m.fname) : std::string();
  };
  p.version = s("version");
  p.git_describe = s("git_describe");
  p.backend = s("backend");
  p.date = s("date");
  p.host = s("host");
  p.producer = s("producer");
  if (p.producer.empty()) p.producer = kProducerSimulator;  // older traces: the simulator was the only writer
  p.model = s("model");
  if (detail::has_attr(m.t->file, "seed", m.fname)) p.seed = detail::read_u64_attr(m.t->file, "seed", m.fname);
  return p;
}

const std::vector<DatasetInfo>& Reader::datasets() const { return impl_->t->infos; }
const DatasetInfo& Reader::info(const std::string& name) const { return impl_->info(name); }
bool Reader::has(const std::string& name) const { return impl_->t->dsets.count(name) != 0; }
const std::filesystem::path& Reader::path() const { return impl_->path; }

std::vector<unsigned char> Reader::read_raw(const std::string& name, DType dtype, uint64_t first, uint64_t count) const {
  const uint64_t k = impl_->k;
  if (first > k) first = k;
  count = std::min(count, k - first);
  return impl_->read_rows(name, dtype, first, count, false);
}

std::vector<unsigned char> Reader::read_snapshot_raw(const std::string& name, DType dtype, int64_t step) const {
  const auto& in = impl_->info(name);
  auto it = std::find(in.snapshot_steps.begin(), in.snapshot_steps.end(), step);
  if (it == in.snapshot_steps.end())
    throw TraceError(impl_->fname + ": " + name + ": step " + std::to_string(step) + " is not a snapshot step");
  if (step < 0 || uint64_t(step) >= impl_->k)
    throw TraceError(impl_->fname + ": " + name + ": snapshot of step " + std::to_string(step) +
                     " is not complete (" + std::to_string(impl_->k) + " steps complete)");
  return impl_->read_rows(name, dtype, uint64_t(it - in.snapshot_steps.begin()), 1, true);
}

std::vector<unsigned char> Reader::read_series_element_raw(const std::string& name, DType dtype, uint64_t index,
                                                           uint64_t first, uint64_t count) const {
  const uint64_t k = impl_->k;
  if (first > k) first = k;
  count = std::min(count, k - first);
  return impl_->read_element(name, dtype, index, first, count, false);
}

std::vector<unsigned char> Reader::read_snapshot_element_raw(const std::string& name, DType dtype, uint64_t index,
                                                             std::vector<int64_t>* steps) const {
  const auto& in = impl_->info(name);
  // declared steps are strictly increasing: the complete ones are a prefix
  uint64_t n = 0;
  while (n < in.snapshot_steps.size() && uint64_t(in.snapshot_steps[n]) < impl_->k) ++n;
  if (steps) steps->assign(in.snapshot_steps.begin(), in.snapshot_steps.begin() + std::ptrdiff_t(n));
  return impl_->read_element(name, dtype, index, 0, n, true);
}

}  // namespace mxsim::trace
