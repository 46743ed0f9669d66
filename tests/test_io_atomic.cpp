// io::write_file and io::AtomicOutputs: exact bytes, errors naming the file,
// all-or-nothing replacement, no temporaries left behind.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

TEST(IoAtomicOutputs, RefusesPathsARenameMustNotReplace) {
  TempDir d("io_atomic");
  AtomicOutputs out;
  // An embedded NUL: the system call would see "<dir>/keep.txt" instead.
  d.put("keep.txt", "precious");
  const fs::path nul = fs::path(d.p.string() + "/keep.txt" + std::string(1, '\0') + ".data.npy");
  EXPECT_NE(error_of([&] { (void)out.add(nul); }).find("holds a NUL byte"), std::string::npos);
  // Devices, FIFOs, folders: never replaced.
  EXPECT_NE(error_of([&] { (void)out.add("/dev/null"); }).find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)out.add(d.p); }).find("is a directory"), std::string::npos);
  EXPECT_EQ(read_bytes(d.p / "keep.txt"), "precious");
  // Temporaries are named by the process, never after the final name.
  const fs::path t = out.add(d.p / "x.npy");
  EXPECT_EQ(t.parent_path(), d.p);
  EXPECT_EQ(t.filename().string().rfind(".mxsim-", 0), 0u) << t;
  EXPECT_EQ(t.filename().string().find("x.npy"), std::string::npos) << t;
}

// One output under two names is refused, naming both: another spelling of the same folder entry
// (sub/../out.npy, a linked folder; the file need not exist) or, where the file exists, a
// symbolic or hard link to it (the second rename would replace the first output or break the
// link). Path text alone is no test either way: alink/../y.npy with alink a link to deep/inner
// is deep/y.npy, a different file from y.npy, and both are written.
TEST(IoAtomicOutputs, OneFileUnderTwoNamesIsRefused) {
  TempDir d("io_atomic");
  d.put("out.npy", "old");
  fs::create_directories(d.p / "sub");
  fs::create_directories(d.p / "real");
  fs::create_directories(d.p / "deep" / "inner");
  fs::create_symlink(d.p / "out.npy", d.p / "link.npy");
  fs::create_hard_link(d.p / "out.npy", d.p / "hard.npy");
  fs::create_directory_symlink(d.p / "real", d.p / "lnk");
  fs::create_directory_symlink(d.p / "deep" / "inner", d.p / "alink");
  const std::pair<fs::path, fs::path> twice[] = {
      {d.p / "out.npy", d.p / "link.npy"},
      {d.p / "hard.npy", d.p / "out.npy"},
      {d.p / "out.npy", d.p / "sub" / ".." / "out.npy"},
      {d.p / "real" / "new.npy", d.p / "lnk" / "new.npy"},  // not there yet: the same folder entry
  };
  for (const auto& pair : twice) {
    const fs::path &a = pair.first, &b = pair.second;  // not a structured binding: Clang 14 cannot capture one
    AtomicOutputs out;
    (void)out.add(a);
    const std::string e = error_of([&] { (void)out.add(b); });
    EXPECT_NE(e.find(b.string() + ": written twice by one command (the same file as " + a.string() + ")"),
              std::string::npos)
        << a << " " << b << ": " << e;
  }
  AtomicOutputs out;
  write_file(out.add(d.p / "y.npy"), std::string("top"));
  write_file(out.add(d.p / "alink" / ".." / "y.npy"), std::string("deep"));
  out.commit();
  EXPECT_EQ(read_bytes(d.p / "y.npy"), "top");
  EXPECT_EQ(read_bytes(d.p / "deep" / "y.npy"), "deep");
  EXPECT_EQ(read_bytes(d.p / "out.npy"), "old");
}

TEST(IoAtomicOutputs, ManyFilesCommitTogether) {
  // 2000 outputs (an --all-tensors run over a large checkpoint) in one commit:
  // every final file complete, no temporary left.
  TempDir d("io_atomic");
  AtomicOutputs out;
  for (int i = 0; i < 2000; ++i) write_file(out.add(d.p / ("f" + std::to_string(i))), std::to_string(i));
  out.commit();
  EXPECT_EQ(entries(d.p), 2000u);
  EXPECT_EQ(read_bytes(d.p / "f1999"), "1999");
}

TEST(IoFileStem, EncodesEveryUnsafeByteOneToOne) {
  EXPECT_EQ(file_stem("model.layers.0.mlp.w1"), "model.layers.0.mlp.w1");
  EXPECT_EQ(file_stem("a/b"), "a%2Fb");
  EXPECT_EQ(file_stem("a\\b"), "a%5Cb");
  EXPECT_EQ(file_stem("50%"), "50%25");
  EXPECT_EQ(file_stem(".."), "%2E.");
  EXPECT_EQ(file_stem(".hidden"), "%2Ehidden");
  EXPECT_EQ(file_stem(std::string("x\0y", 3)), "x%00y");
  EXPECT_EQ(file_stem("tab\there"), "tab%09here");
  EXPECT_EQ(file_stem(""), "%");
  EXPECT_EQ(file_stem("caf\xC3\xA9"), "caf\xC3\xA9");  // UTF-8 kept
  EXPECT_NE(file_stem("a/b"), file_stem("a_b"));
  EXPECT_NE(error_of([] { (void)file_stem(std::string(300, 'n')); }).find("write a .safetensors output instead"),
            std::string::npos);
  EXPECT_EQ(file_stem(std::string(kMaxFileStem, 'n')).size(), kMaxFileStem);
}

// A temporary a killed command left (".mxsim-<pid>-<n>.tmp" of a process that no longer exists,
// untouched for an hour) is removed by the next command writing into that folder; a live
// process's temporary, a recent one, a link of that name and look-alike names are kept.
TEST(IoAtomicOutputs, StaleTemporariesOfKilledCommandsAreRemoved) {
  TempDir d("io_atomic");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);  // `child` is now a pid with no process
  const std::string dead = std::to_string(child);
  const auto old = fs::file_time_type::clock::now() - std::chrono::hours(2);
  const auto put_old = [&](const std::string& n) {
    d.put(n, "partial");
    fs::last_write_time(d.p / n, old);
  };
  put_old(".mxsim-" + dead + "-0.tmp");    // stale: removed
  put_old(".mxsim-" + dead + "-17.tmp");   // stale: removed
  d.put(".mxsim-" + dead + "-1.tmp", "x");  // recent (its writer may be a process we cannot see)
  put_old(".mxsim-1-0.tmp");                // pid 1 exists
  put_old(".mxsim-" + dead + "-0.tmp.keep");
  put_old(".mxsim-" + dead + ".tmp");
  put_old("mxsim-" + dead + "-0.tmp");
  d.put("target", "keep me");
  fs::create_symlink(d.p / "target", d.p / (".mxsim-" + dead + "-2.tmp"));
  AtomicOutputs out;
  write_file(out.add(d.p / "new.bin"), std::string("new"));
  out.commit();
  EXPECT_FALSE(fs::exists(d.p / (".mxsim-" + dead + "-0.tmp")));
  EXPECT_FALSE(fs::exists(d.p / (".mxsim-" + dead + "-17.tmp")));
  for (const std::string& n : {".mxsim-" + dead + "-1.tmp", std::string(".mxsim-1-0.tmp"), ".mxsim-" + dead + "-0.tmp.keep",
                              ".mxsim-" + dead + ".tmp", "mxsim-" + dead + "-0.tmp", std::string("target"), std::string("new.bin")})
    EXPECT_TRUE(fs::exists(d.p / n)) << n;
  EXPECT_TRUE(fs::is_symlink(d.p / (".mxsim-" + dead + "-2.tmp")));
  EXPECT_EQ(read_bytes(d.p / "target"), "keep me");
  // Called directly: nothing more to remove.
  EXPECT_EQ(remove_stale_temporaries(d.p), 0u);
}
