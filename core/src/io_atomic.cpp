#include <unistd.h>

#include <set>
#include <system_error>

#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/tensor_file.hpp"

namespace fs = std::filesystem;

namespace mxsim::io {

AtomicOutputs::~AtomicOutputs() {
  for (auto& e : entries_) {
    if (e.done) continue;
    std::error_code ec;
    fs::remove(e.tmp, ec);
  }
}

fs::path AtomicOutputs::add(const fs::path& final_path) {
  for (const auto& e : entries_)
    if (e.final_path == final_path) throw IoError(final_path.string() + ": written twice by one command");
  fs::path dir = final_path.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError(final_path.string() + ": folder '" + dir.string() + "' does not exist");
  if (fs::is_directory(final_path, ec)) throw IoError(final_path.string() + ": is a directory");
  static unsigned counter = 0;
  std::string name = ".";
  name += final_path.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  name += '-';
  name += std::to_string(counter++);
  const fs::path tmp = dir / name;
  entries_.push_back({tmp, final_path, false});
  return tmp;
}

void AtomicOutputs::commit() {
  // Data first: every temporary is on the device before any final name points at it.
  for (const auto& e : entries_) {
    try {
      sync_path(e.tmp);
    } catch (const IoError& err) {
      throw IoError(e.final_path.string() + ": cannot flush the finished file: " + err.what());
    }
  }
  std::set<fs::path> dirs;
  for (auto& e : entries_) {
    std::error_code ec;
    fs::rename(e.tmp, e.final_path, ec);
    if (ec) throw IoError(e.final_path.string() + ": cannot move the finished file into place: " + ec.message());
    e.done = true;
    dirs.insert(e.final_path.has_parent_path() ? e.final_path.parent_path() : fs::path("."));
  }
  // Then the renames themselves (the folder entries).
  for (const auto& d : dirs) sync_path(d, true);
  committed_ = true;
}

std::vector<fs::path> AtomicOutputs::finals() const {
  std::vector<fs::path> v;
  for (const auto& e : entries_) v.push_back(e.final_path);
  return v;
}

}  // namespace mxsim::io
