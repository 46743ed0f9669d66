// io::write_file and io::AtomicOutputs: exact bytes, errors naming the file,
// all-or-nothing replacement, no temporaries left behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/tensor_file.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace mxsim::io;
using mxsim::test::read_bytes;
using mxsim::test::TempDir;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}
size_t entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}
}  // namespace

TEST(IoWriteFile, ExactBytesTruncatesAndNamesTheFileOnError) {
  TempDir d("io_atomic");
  const std::string bytes("\x00\x01\xff\n\r", 5);  // NUL, high byte, newline: no text-mode translation
  write_file(d.p / "a.bin", bytes);
  EXPECT_EQ(read_bytes(d.p / "a.bin"), bytes);
  d.put("b.bin", std::string(100, 'x'));
  write_file(d.p / "b.bin", std::vector<uint8_t>{7, 8}, /*durable=*/true);
  EXPECT_EQ(read_bytes(d.p / "b.bin"), std::string("\x07\x08", 2));  // truncated, not overwritten in place
  write_file(d.p / "empty.bin", std::string_view());
  EXPECT_EQ(fs::file_size(d.p / "empty.bin"), 0u);
  const fs::path bad = d.p / "no-such-folder" / "c.bin";
  const std::string e = error_of([&] { write_file(bad, bytes); });
  EXPECT_NE(e.find(bad.string() + ": cannot create"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(bad));
}

TEST(IoAtomicOutputs, CommitReplacesAllAndLeavesNoTemporaries) {
  TempDir d("io_atomic");
  d.put("old.txt", "old");
  {
    AtomicOutputs out;
    const fs::path t1 = out.add(d.p / "old.txt"), t2 = out.add(d.p / "new.txt");
    EXPECT_EQ(t1.parent_path(), d.p);  // same folder: the rename stays on one file system
    write_file(t1, std::string_view("replaced"));
    write_file(t2, std::string_view("fresh"));
    EXPECT_EQ(read_bytes(d.p / "old.txt"), "old");  // nothing final touched before commit
    EXPECT_FALSE(fs::exists(d.p / "new.txt"));
    out.commit();
  }
  EXPECT_EQ(read_bytes(d.p / "old.txt"), "replaced");
  EXPECT_EQ(read_bytes(d.p / "new.txt"), "fresh");
  EXPECT_EQ(entries(d.p), 2u);
}

TEST(IoAtomicOutputs, NoCommitOrAMissingTemporaryChangesNothing) {
  TempDir d("io_atomic");
  d.put("keep.txt", "old");
  {
    AtomicOutputs out;
    write_file(out.add(d.p / "keep.txt"), std::string_view("new"));
  }  // destroyed without commit (an exception or early return)
  EXPECT_EQ(read_bytes(d.p / "keep.txt"), "old");
  EXPECT_EQ(entries(d.p), 1u);
  {
    AtomicOutputs out;
    write_file(out.add(d.p / "keep.txt"), std::string_view("new"));
    (void)out.add(d.p / "never.txt");  // registered, never written
    const std::string e = error_of([&] { out.commit(); });
    EXPECT_NE(e.find((d.p / "never.txt").string()), std::string::npos) << e;
  }
  // Every temporary is checked before the first rename: keep.txt was not replaced either.
  EXPECT_EQ(read_bytes(d.p / "keep.txt"), "old");
  EXPECT_EQ(entries(d.p), 1u);
  AtomicOutputs out;
  (void)out.add(d.p / "x.txt");
  EXPECT_NE(error_of([&] { (void)out.add(d.p / "x.txt"); }).find("written twice"), std::string::npos);
  const std::string e = error_of([&] { (void)out.add(d.p / "nofolder" / "y.txt"); });
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
}
