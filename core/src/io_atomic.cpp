#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <system_error>

#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/tensor_file.hpp"

namespace fs = std::filesystem;

namespace mxsim::io {
namespace {

fs::path folder_of(const fs::path& p) { return p.has_parent_path() ? p.parent_path() : fs::path("."); }

/// Refuse a final path a rename must not replace (see atomic_output.hpp).
void check_final(const fs::path& final_path) {
  const std::string& s = final_path.native();
  if (s.find('\0') != std::string::npos) {
    std::string shown;
    for (char c : s) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
    throw IoError(shown + ": output path holds a NUL byte (the system would write a different, shorter path); refused");
  }
  struct stat st{};
  if (::lstat(s.c_str(), &st) != 0) return;  // does not exist yet
  if (S_ISDIR(st.st_mode)) throw IoError(s + ": is a directory");
  if (S_ISLNK(st.st_mode)) return;           // the rename replaces the link itself, never its target
  if (!S_ISREG(st.st_mode))
    throw IoError(s + ": exists and is not a regular file (a device, FIFO or socket); refusing to replace it");
}

/// syncfs(2) of the file system holding `dir`: every file written there so
/// far, data and metadata, reaches the device.
void sync_fs(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(dir.string() + ": cannot open to sync: " + std::strerror(errno));
  if (::syncfs(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError(dir.string() + ": syncfs failed: " + std::strerror(err));
  }
  ::close(fd);
}

}  // namespace

size_t remove_stale_temporaries(const fs::path& dir, std::chrono::seconds min_age) {
  size_t removed = 0;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return 0;
  const auto now = fs::file_time_type::clock::now();
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string n = it->path().filename().string();
    // exactly ".mxsim-<pid>-<n>.tmp", pid and n decimal
    if (n.rfind(".mxsim-", 0) != 0 || n.size() < 13 || n.compare(n.size() - 4, 4, ".tmp") != 0) continue;
    const std::string mid = n.substr(7, n.size() - 11);
    const size_t dash = mid.find('-');
    if (dash == std::string::npos || dash == 0 || dash + 1 == mid.size() || mid.size() > 40) continue;
    if (mid.find_first_not_of("0123456789-") != std::string::npos || mid.find('-', dash + 1) != std::string::npos) continue;
    const long pid = std::strtol(mid.substr(0, dash).c_str(), nullptr, 10);
    if (pid <= 0 || pid == long(::getpid())) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // its writer may still be running
    struct stat st{};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // never a link or a folder
    std::error_code e2;
    const auto mtime = fs::last_write_time(it->path(), e2);
    if (e2 || now - mtime < min_age) continue;
    if (fs::remove(it->path(), e2) && !e2) ++removed;
  }
  return removed;
}

AtomicOutputs::~AtomicOutputs() {
  for (auto& e : entries_) {
    if (e.done) continue;
    std::error_code ec;
    fs::remove(e.tmp, ec);
  }
}

std::optional<FileId> file_id(const fs::path& p) {
  struct stat st{};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return FileId{uint64_t(st.st_dev), uint64_t(st.st_ino)};
}

fs::path AtomicOutputs::add(const fs::path& final_path) {
  check_final(final_path);
  const fs::path dir = folder_of(final_path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError(final_path.string() + ": folder '" + dir.string() + "' does not exist");
  // The directory entry the rename replaces, whatever the spelling: path text
  // alone misses out.npy vs linked_folder/out.npy and takes a/../out.npy for
  // out.npy even when a is a link to another folder.
  fs::path canon_dir = fs::weakly_canonical(dir, ec);
  if (ec) canon_dir = fs::absolute(dir).lexically_normal();
  const fs::path entry = canon_dir / final_path.filename();
  const std::optional<FileId> id = file_id(final_path);
  const fs::path* earlier = nullptr;
  if (const auto it = entries_by_name_.find(entry); it != entries_by_name_.end()) earlier = &it->second;
  if (const auto it = id ? entries_by_id_.find(*id) : entries_by_id_.end(); !earlier && it != entries_by_id_.end())
    earlier = &it->second;
  if (earlier)
    throw IoError(final_path.string() + ": written twice by one command (" +
                  (*earlier == final_path ? std::string("named twice")
                                          : "the same file as " + earlier->string()) +
                  ")");
  entries_by_name_.emplace(entry, final_path);
  if (id) entries_by_id_.emplace(*id, final_path);
  // Temporaries a killed command left here (their process is gone; an hour untouched).
  if (cleaned_.insert(fs::absolute(dir, ec).lexically_normal().string()).second) remove_stale_temporaries(dir);
  static unsigned counter = 0;
  const fs::path tmp = dir / (".mxsim-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".tmp");
  entries_.push_back({tmp, final_path, false});
  return tmp;
}

void AtomicOutputs::commit() {
  // Every temporary complete and every target still replaceable before the first rename.
  std::map<dev_t, fs::path> filesystems;  // one folder per file system
  for (const auto& e : entries_) {
    struct stat st{};
    if (::lstat(e.tmp.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      throw IoError(e.final_path.string() + ": the finished file is missing (" + e.tmp.string() + ")");
    check_final(e.final_path);
    filesystems.emplace(st.st_dev, folder_of(e.final_path));
  }
  // Data first: every temporary is on the device before any final name points at it.
  for (const auto& [dev, dir] : filesystems) {
    try {
      sync_fs(dir);
    } catch (const IoError& err) {
      throw IoError(std::string("cannot flush the finished files: ") + err.what());
    }
  }
  for (auto& e : entries_) {
    std::error_code ec;
    fs::rename(e.tmp, e.final_path, ec);
    if (ec) throw IoError(e.final_path.string() + ": cannot move the finished file into place: " + ec.message());
    e.done = true;
  }
  // Then the renames themselves (the folder entries).
  for (const auto& [dev, dir] : filesystems) sync_fs(dir);
  committed_ = true;
}

std::vector<fs::path> AtomicOutputs::finals() const {
  std::vector<fs::path> v;
  for (const auto& e : entries_) v.push_back(e.final_path);
  return v;
}

std::string file_stem(std::string_view name) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    const bool escape = c < 0x20 || c == 0x7F || c == '%' || c == '/' || c == '\\' || (i == 0 && c == '.');
    if (escape) {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  if (out.empty()) out.push_back('%');  // the empty name: "%" alone decodes to nothing and is no valid escape of anything else
  if (out.size() > kMaxFileStem) {
    std::string shown(name.substr(0, 60));
    for (char& ch : shown)
      if (static_cast<unsigned char>(ch) < 0x20) ch = '?';
    throw IoError("tensor '" + shown + "...': name gives a file name of " + std::to_string(out.size()) +
                  " bytes (at most " + std::to_string(kMaxFileStem) + "); write a .safetensors output instead");
  }
  return out;
}

}  // namespace mxsim::io
