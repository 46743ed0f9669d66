// HDF5 trace reader (see mxsim/trace/reader.hpp).
#include "mxsim/trace/reader.hpp"

#include <algorithm>
#include <map>

#include "mxsim/trace/schema.hpp"
#include "trace_h5util.hpp"

namespace mxsim::trace {

using detail::fail;
using detail::Hid;

uint64_t DatasetInfo::row_elems() const {
  uint64_t n = 1;
  for (auto d : row_shape) n *= d;
  return n;
}

struct Reader::Impl {
  std::filesystem::path path;
  std::string fname;
  Hid file, steps;
  uint64_t k = 0;
  std::vector<DatasetInfo> infos;
  std::map<std::string, Hid> dsets;
  // Datasets are refreshed (H5Drefresh) lazily: once per Reader::refresh(), on their next
  // read. A reader never refreshed (a finished file) never calls H5Drefresh: with HDF5
  // 1.10, H5Drefresh of a dataset that is open twice in one process (two Readers of one
  // file) makes later reads of chunked rows return the wrong chunk.
  uint64_t generation = 0;
  mutable std::map<std::string, uint64_t> refreshed;
  void refresh_if_stale(const std::string& name, hid_t d) const {
    uint64_t& g = refreshed[name];
    if (g == generation) return;
    if (H5Drefresh(d) < 0) fail(fname, name + ": refresh failed");
    g = generation;
  }

  const DatasetInfo& info(const std::string& name) const {
    auto it = std::lower_bound(infos.begin(), infos.end(), name,
                               [](const DatasetInfo& a, const std::string& b) { return a.name < b; });
    if (it == infos.end() || it->name != name) throw TraceError(fname + ": " + name + ": no such series or snapshot");
    return *it;
  }
  std::vector<unsigned char> read_rows(const std::string& name, DType dtype, uint64_t row0, uint64_t nrows,
                                       bool snapshot) const {
    const DatasetInfo& in = info(name);
    if (in.snapshot != snapshot) throw TraceError(fname + ": " + name + (snapshot ? ": is a series" : ": is a snapshot"));
    if (in.dtype != dtype)
      throw TraceError(fname + ": " + name + ": stored as " + dtype_name(in.dtype) + ", read as " + dtype_name(dtype));
    std::vector<unsigned char> out(nrows * in.row_elems() * dtype_size(dtype));
    if (nrows == 0) return out;
    hid_t d = dsets.at(name);
    refresh_if_stale(name, d);
    std::vector<hsize_t> start(in.row_shape.size() + 1, 0), count(in.row_shape.size() + 1, 0);
    start[0] = row0;
    count[0] = nrows;
    for (std::size_t i = 0; i < in.row_shape.size(); ++i) count[i + 1] = in.row_shape[i];
    Hid fs(H5Dget_space(d), H5Sclose);
    hsize_t have = 0;
    H5Sget_simple_extent_dims(fs, &have, nullptr);  // first dim only is enough for the check
    std::vector<hsize_t> ext(in.row_shape.size() + 1);
    H5Sget_simple_extent_dims(fs, ext.data(), nullptr);
    if (ext[0] < row0 + nrows)
      throw TraceError(fname + ": " + name + ": has " + std::to_string(ext[0]) + " rows, fewer than the " +
                       std::to_string(row0 + nrows) + " /steps promises (file not written by mxsim's writer?)");
    Hid ms(H5Screate_simple(int(count.size()), count.data(), nullptr), H5Sclose);
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) < 0 ||
        H5Dread(d, detail::native_type(dtype), ms, fs, H5P_DEFAULT, out.data()) < 0)
      fail(fname, name + ": read failed");
    return out;
  }
  /// Element `index` of rows [row0, row0 + nrows): one point per row.
  std::vector<unsigned char> read_element(const std::string& name, DType dtype, uint64_t index, uint64_t row0,
                                          uint64_t nrows, bool snapshot) const {
    const DatasetInfo& in = info(name);
    if (in.snapshot != snapshot) throw TraceError(fname + ": " + name + (snapshot ? ": is a series" : ": is a snapshot"));
    if (in.dtype != dtype)
      throw TraceError(fname + ": " + name + ": stored as " + dtype_name(in.dtype) + ", read as " + dtype_name(dtype));
    if (index >= in.row_elems())
      throw TraceError(fname + ": " + name + ": element " + std::to_string(index) + " is outside a row of " +
                       std::to_string(in.row_elems()) + " elements");
    std::vector<unsigned char> out(nrows * dtype_size(dtype));
    if (nrows == 0) return out;
    hid_t d = dsets.at(name);
    refresh_if_stale(name, d);
    Hid fs(H5Dget_space(d), H5Sclose);
    const std::size_t rank = in.row_shape.size() + 1;
    std::vector<hsize_t> ext(rank);
    H5Sget_simple_extent_dims(fs, ext.data(), nullptr);
    if (ext[0] < row0 + nrows)
      throw TraceError(fname + ": " + name + ": has " + std::to_string(ext[0]) + " rows, fewer than the " +
                       std::to_string(row0 + nrows) + " /steps promises (file not written by mxsim's writer?)");
    // multi-index of `index` within a row, then one point per row
    std::vector<hsize_t> within(rank - 1);
    uint64_t rest = index;
    for (std::size_t i = rank - 1; i-- > 0;) {
      within[i] = rest % in.row_shape[i];
      rest /= in.row_shape[i];
    }
    std::vector<hsize_t> coords(nrows * rank);
    for (uint64_t r = 0; r < nrows; ++r) {
      coords[r * rank] = row0 + r;
      for (std::size_t i = 1; i < rank; ++i) coords[r * rank + i] = within[i - 1];
    }
    const hsize_t n = nrows;
    Hid ms(H5Screate_simple(1, &n, nullptr), H5Sclose);
    if (H5Sselect_elements(fs, H5S_SELECT_SET, nrows, coords.data()) < 0 ||
        H5Dread(d, detail::native_type(dtype), ms, fs, H5P_DEFAULT, out.data()) < 0)
      fail(fname, name + ": read failed");
    return out;
  }
};

Reader::Reader(const std::filesystem::path& path) : impl_(std::make_unique<Impl>()) {
  detail::quiet_hdf5();
  auto& m = *impl_;
  m.path = path;
  m.fname = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw TraceError(m.fname + ": missing (no such file)");
  // SWMR read retries checksummed metadata that fails to verify (a writer may be halfway
  // through a flush) with a doubling sleep: HDF5's default of 100 attempts makes damaged
  // metadata hang for hours; 20 (HDF5's own SWMR example) retries for about a millisecond.
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_metadata_read_attempts(fapl, 20);
  m.file = Hid(H5Fopen(m.fname.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl), H5Fclose);
  if (!m.file.valid()) {
    const std::string swmr_msg = detail::hdf5_message();
    if (H5Fis_hdf5(m.fname.c_str()) <= 0) {
      detail::hdf5_message();
      throw TraceError(m.fname + ": not an HDF5 file, so not an mxsim trace");
    }
    m.file = Hid(H5Fopen(m.fname.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!m.file.valid()) fail(m.fname, "cannot open (SWMR read: " + swmr_msg + ")");
  }
  if (!detail::has_attr(m.file, schema::kFormatAttr) || H5Lexists(m.file, schema::kSteps, H5P_DEFAULT) <= 0)
    throw TraceError(m.fname + ": not an mxsim trace (no mxsim_trace_format attribute or /steps dataset)");
  if (const uint64_t v = detail::read_u64_attr(m.file, schema::kFormatAttr, m.fname); v > uint64_t(schema::kFormatVersion))
    throw TraceError(m.fname + ": trace format " + std::to_string(v) + " is newer than this mxsim reads (up to " +
                     std::to_string(schema::kFormatVersion) + "); open it with a newer mxsim");
  m.steps = Hid(H5Dopen2(m.file, schema::kSteps, H5P_DEFAULT), H5Dclose);
  if (!m.steps.valid()) fail(m.fname, "cannot open /steps");
  // Every dataset with an mxsim_kind attribute of "series" or "snapshot".
  H5Ovisit(
      m.file, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t root, const char* name, const H5O_info_t* oi, void* p) -> herr_t {
        if (oi->type != H5O_TYPE_DATASET) return 0;
        auto& m = *static_cast<Reader::Impl*>(p);
        const std::string full = std::string("/") + name;
        if (full == schema::kSteps) return 0;
        Hid d(H5Dopen2(root, name, H5P_DEFAULT), H5Dclose);
        if (!d.valid() || !detail::has_attr(d, "mxsim_kind")) return 0;
        const std::string kind = detail::read_string_attr(d, "mxsim_kind", m.fname);
        if (kind != "series" && kind != "snapshot") return 0;
        DatasetInfo in;
        in.name = full;
        in.snapshot = kind == "snapshot";
        Hid t(H5Dget_type(d), H5Tclose);
        in.dtype = detail::dtype_from_h5(t, m.fname, full);
        Hid sp(H5Dget_space(d), H5Sclose);
        const int rank = H5Sget_simple_extent_ndims(sp);
        std::vector<hsize_t> dims(std::size_t(std::max(rank, 1)));
        H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
        in.row_shape.assign(dims.begin() + 1, dims.end());
        if (in.snapshot) in.snapshot_steps = detail::read_i64_attr(d, "steps", m.fname);
        m.infos.push_back(std::move(in));
        m.dsets.emplace(full, std::move(d));
        return 0;
      },
      &m);
  std::sort(m.infos.begin(), m.infos.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  Hid sp(H5Dget_space(m.steps), H5Sclose);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(sp, &n, nullptr);
  m.k = n;
}

Reader::~Reader() = default;
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;

void Reader::refresh() {
  auto& m = *impl_;
  ++m.generation;  // every dataset refreshes on its next read
  if (H5Drefresh(m.steps) < 0) fail(m.fname, "/steps: refresh failed");
  Hid sp(H5Dget_space(m.steps), H5Sclose);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(sp, &n, nullptr);
  m.k = n;
}

uint64_t Reader::steps_completed() const { return impl_->k; }
std::string Reader::config_toml() const { return detail::read_string_attr(impl_->file, "config_toml", impl_->fname); }
int Reader::format_version() const { return int(detail::read_u64_attr(impl_->file, schema::kFormatAttr, impl_->fname)); }

Provenance Reader::provenance() const {
  const auto& m = *impl_;
  Provenance p;
  auto s = [&](const char* n) { return detail::has_attr(m.file, n) ? detail::read_string_attr(m.file, n, m.fname) : std::string(); };
  p.version = s("version");
  p.git_describe = s("git_describe");
  p.backend = s("backend");
  p.date = s("date");
  p.host = s("host");
  if (detail::has_attr(m.file, "seed")) p.seed = detail::read_u64_attr(m.file, "seed", m.fname);
  return p;
}

const std::vector<DatasetInfo>& Reader::datasets() const { return impl_->infos; }
const DatasetInfo& Reader::info(const std::string& name) const { return impl_->info(name); }
bool Reader::has(const std::string& name) const { return impl_->dsets.count(name) != 0; }
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
  while (n < in.snapshot_steps.size() && in.snapshot_steps[n] >= 0 && uint64_t(in.snapshot_steps[n]) < impl_->k) ++n;
  if (steps) steps->assign(in.snapshot_steps.begin(), in.snapshot_steps.begin() + std::ptrdiff_t(n));
  return impl_->read_element(name, dtype, index, 0, n, true);
}

}  // namespace mxsim::trace
