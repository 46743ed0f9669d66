// All-or-nothing output of one or more files, and file names from tensor names.
//
// Each output is first written to a temporary file in the same folder as its
// final path (".mxsim-<pid>-<n>.tmp", a name that depends on nothing read from
// an input), so the final rename stays on one file system. commit() checks
// that every temporary is a complete regular file, flushes the file systems
// involved (syncfs(2): one call per file system, not one fsync per file),
// renames the temporaries onto their final paths and flushes again, so after
// it returns the new files and their names survive a crash or a power loss;
// until then no final path is touched, so a pre-existing output survives a
// failed command. The destructor removes every temporary that was not
// committed (on an exception or an early return). A process killed by a
// signal can leave a temporary behind; it never leaves a half-written file
// under a final name. Such leftovers are removed by the next command that
// writes into the same folder (remove_stale_temporaries: a regular file named
// exactly ".mxsim-<pid>-<n>.tmp" whose process no longer exists and which has
// not been modified for an hour).
//
// A rename only ever targets a registered final path, and a final path is
// refused when it holds a NUL byte (the system call would see a shorter,
// different path) or already exists as anything but a regular file (a
// folder, /dev/null or another device, a FIFO, a socket): replacing one of
// those would destroy something the command did not create. One command
// registering one output under two names (another spelling, a/../out.npy, a
// linked folder, a symbolic or hard link to the file) is refused: the second
// rename would replace the first output, or break the link the user named.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace mxsim::io {

/// Device and inode of the file at a path, symbolic links followed.
using FileId = std::pair<uint64_t, uint64_t>;
/// The identity of the file `p` names (another spelling, a symbolic or hard
/// link give the same), nullopt when nothing exists there. The one test of
/// "the same file" for outputs against inputs (cli refuse_overwriting_input)
/// and outputs against each other (AtomicOutputs::add).
std::optional<FileId> file_id(const std::filesystem::path& p);

class AtomicOutputs {
 public:
  AtomicOutputs() = default;
  AtomicOutputs(const AtomicOutputs&) = delete;
  AtomicOutputs& operator=(const AtomicOutputs&) = delete;
  ~AtomicOutputs();

  /// Register a final path; returns the temporary path to write instead.
  /// Throws IoError naming the path when the folder does not exist, the path
  /// holds a NUL byte, it exists and is not a regular file, or it names an
  /// output already registered: the same file where it exists (file_id), else
  /// the same folder (weakly_canonical: links and ".." of existing folders
  /// resolved) and file name.
  std::filesystem::path add(const std::filesystem::path& final_path);

  /// Check every temporary, syncfs, rename each onto its final path, syncfs.
  /// Throws IoError naming the final file when a temporary is missing or not
  /// a regular file, a final path became something other than a regular file
  /// since add(), or a sync or rename fails (temporaries not yet renamed are
  /// removed by the destructor).
  void commit();

  /// Final paths registered so far.
  std::vector<std::filesystem::path> finals() const;

 private:
  struct Entry {
    std::filesystem::path tmp, final_path;
    bool done = false;
  };
  std::vector<Entry> entries_;
  /// For the "written twice" check: the final path each output was registered
  /// as, by its canonical folder + file name and, where it exists, by file_id.
  std::map<std::filesystem::path, std::filesystem::path> entries_by_name_;
  std::map<FileId, std::filesystem::path> entries_by_id_;
  std::unordered_set<std::string> cleaned_;     ///< folders whose stale temporaries were removed
  bool committed_ = false;
};

/// Removes from `dir` the temporaries killed commands left: regular files named exactly
/// ".mxsim-<pid>-<n>.tmp" whose process <pid> no longer exists (kill(pid, 0) fails with ESRCH)
/// and which were last modified at least `min_age` ago. Returns how many were removed; errors
/// (an unreadable folder, a file that vanished) remove nothing and are not reported.
size_t remove_stale_temporaries(const std::filesystem::path& dir,
                                std::chrono::seconds min_age = std::chrono::seconds(3600));

/// Longest file name (bytes) a file_stem() result may have, so that the stem
/// plus the longest suffix the commands append (".tensor_scale_inv.npy", 21
/// bytes) stays within NAME_MAX (255) on Linux file systems.
inline constexpr size_t kMaxFileStem = 255 - 32;

/// A file-name stem for a tensor name read from a file (a safetensors key):
/// one path component that is never empty, ".", "..", hidden, or holding '/',
/// '\\' or a control byte, and from which the name can be recovered (the
/// encoding is one-to-one, so two tensors never share a file). Bytes outside
/// [A-Za-z0-9._-] and bytes >= 0x80 (UTF-8) are kept except '%', '/', '\\',
/// control bytes (0x00-0x1F, 0x7F) and a leading '.', which become "%XX"
/// (upper-case hex), as in URL percent-encoding (RFC 3986 §2.1).
/// Throws IoError naming the tensor when the result would exceed
/// kMaxFileStem bytes.
std::string file_stem(std::string_view tensor_name);

}  // namespace mxsim::io
