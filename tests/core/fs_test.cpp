#include "titan/core/fs.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "tests/checkpoint/helpers.h"

using namespace titan;
using titan::test::read_raw;
using titan::test::TempDir;
using titan::test::throws_with;
using titan::test::write_raw;

TEST(Fs, WriteFileAtomicCreatesAndReplaces) {
  TempDir d;
  write_file_atomic(d / "a.txt", "hello");
  EXPECT_EQ(read_raw(d / "a.txt"), "hello");
  write_file_atomic(d / "a.txt", "bye");
  EXPECT_EQ(read_file(d / "a.txt"), "bye");
  EXPECT_EQ(d.list(), std::vector<std::string>{"a.txt"});  // no temporaries left
}

TEST(Fs, StreamingWriterLargerThanBuffer) {
  TempDir d;
  std::string want;
  for (int i = 0; i < 3'000'000; ++i) want.push_back(static_cast<char>(i * 7 + (i >> 9)));
  AtomicFileWriter w(d / "big.bin");
  // Mixed chunk sizes: tiny, buffer-sized and bigger than the 1 MiB buffer.
  size_t pos = 0;
  for (size_t chunk : {size_t{3}, size_t{1} << 20, size_t{5}, size_t{1500000}, size_t{100}}) {
    w.write(want.data() + pos, chunk);
    pos += chunk;
  }
  w.write(want.data() + pos, want.size() - pos);
  EXPECT_EQ(w.bytes_written(), want.size());
  EXPECT_FALSE(file_exists(d / "big.bin"));  // nothing visible before commit
  w.commit();
  EXPECT_EQ(read_file(d / "big.bin"), want);
}

TEST(Fs, FailureBeforeCommitKeepsPreviousFile) {
  TempDir d;
  write_file_atomic(d / "f", "previous");
  try {
    AtomicFileWriter w(d / "f");
    w.write("partial new content");
    EXPECT_TRUE(file_exists(w.temp_path()));
    throw std::runtime_error("simulated crash while writing");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_file(d / "f"), "previous");
  EXPECT_EQ(d.list(), std::vector<std::string>{"f"});

  AtomicFileWriter w(d / "f");
  w.write("x");
  w.abort();
  w.abort();  // idempotent
  EXPECT_EQ(read_file(d / "f"), "previous");
  EXPECT_EQ(d.list(), std::vector<std::string>{"f"});
  EXPECT_TRUE(throws_with([&] { w.write("y"); }, {"already committed or aborted"}));
}

TEST(Fs, RenameFailureRemovesTemporary) {
  TempDir d;
  ::mkdir((d / "target").c_str(), 0755);
  write_raw(d / "target/inside", "keep");
  EXPECT_TRUE(throws_with([&] { write_file_atomic(d / "target", "data"); }, {"cannot rename", "target"}));
  EXPECT_EQ(d.list(), std::vector<std::string>{"target"});
  EXPECT_EQ(read_raw(d / "target/inside"), "keep");
}

TEST(Fs, Errors) {
  TempDir d;
  EXPECT_TRUE(throws_with([&] { write_file_atomic(d / "no/such/dir/f", "x"); },
                          {"cannot create temporary file", "no/such/dir/f", "No such file or directory"}));
  EXPECT_TRUE(throws_with([&] { read_file(d / "missing"); }, {"cannot open", "missing", "No such file"}));
  EXPECT_TRUE(throws_with([&] { MappedFile::open(d / "missing"); }, {"cannot open", "missing"}));
  EXPECT_TRUE(throws_with([&] { read_file(d.path); }, {"not a regular file"}));
  EXPECT_TRUE(throws_with([&] { fsync_dir(d / "nodir"); }, {"cannot open directory", "nodir"}));
  EXPECT_EQ(parent_dir("/a/b.txt"), "/a");
  EXPECT_EQ(parent_dir("b.txt"), ".");
  EXPECT_EQ(parent_dir("/b.txt"), "/");
}

TEST(Fs, MappedFileIsCopyOnWriteAndSurvivesReplacement) {
  TempDir d;
  write_file_atomic(d / "m", "abcdef");
  auto m = MappedFile::open(d / "m");
  ASSERT_EQ(m->size(), 6u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), 6), "abcdef");
  m->mutable_data()[0] = 'X';  // private copy-on-write page
  EXPECT_EQ(m->data()[0], 'X');
  EXPECT_EQ(read_file(d / "m"), "abcdef");
  // An atomic replacement makes a new inode: the mapping keeps the old bytes.
  write_file_atomic(d / "m", "zz");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()) + 1, 5), "bcdef");

  write_raw(d / "empty", "");
  auto e = MappedFile::open(d / "empty");
  EXPECT_EQ(e->size(), 0u);
  EXPECT_EQ(e->data(), nullptr);
}
