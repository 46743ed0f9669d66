// All-or-nothing output of one or more files.
//
// Each output is first written to a temporary file in the same folder as its
// final path (".<name>.tmp-<pid>-<n>"), so the final rename stays on one file
// system. commit() fsyncs every temporary, renames them all into place and
// fsyncs the folders, so after it returns the new files survive a crash or a
// power loss; until then no final path is touched, so a pre-existing output
// survives a failed command. The destructor
// removes every temporary that was not committed (on an exception or an early
// return). A process killed by a signal can leave a temporary behind; it never
// leaves a half-written file under a final name.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace mxsim::io {

class AtomicOutputs {
 public:
  AtomicOutputs() = default;
  AtomicOutputs(const AtomicOutputs&) = delete;
  AtomicOutputs& operator=(const AtomicOutputs&) = delete;
  ~AtomicOutputs();

  /// Register a final path; returns the temporary path to write instead.
  /// Throws IoError when the folder does not exist or `final_path` was
  /// already registered.
  std::filesystem::path add(const std::filesystem::path& final_path);

  /// fsync every temporary, rename each onto its final path, fsync the
  /// folders. Throws IoError naming the final file when a temporary is missing
  /// or an fsync or rename fails (temporaries not yet renamed are removed by
  /// the destructor).
  void commit();

  /// Final paths registered so far.
  std::vector<std::filesystem::path> finals() const;

 private:
  struct Entry {
    std::filesystem::path tmp, final_path;
    bool done = false;
  };
  std::vector<Entry> entries_;
  bool committed_ = false;
};

}  // namespace mxsim::io
