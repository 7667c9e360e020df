// File-system helpers: crash-safe (atomic) writes, whole-file reads and read-only
// memory maps. DESIGN.md §1.5: every file is written to a temporary name in the
// same directory, flushed, fsync'ed, renamed over the target and the directory is
// fsync'ed, so a crash or kill at any moment leaves either the old or the new
// file, never a torn one. All failures throw titan::Error naming the path and the
// OS error (strerror).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace titan {

// Streams bytes to `path` atomically. The constructor creates a hidden temporary
// ".<name>.tmp.<pid>.<n>" in the target's directory (O_EXCL, mode 0644 & ~umask);
// write() appends (buffered); commit() flushes, fsyncs the file, renames it over
// `path` and fsyncs the directory. Without commit() (an exception unwinding, or
// abort()) the temporary is removed and `path` is untouched. Not thread-safe.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();  // discards the temporary unless committed; never throws
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t nbytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  void commit();  // throws on any failure (the temporary is then removed)
  void abort();   // removes the temporary; idempotent
  uint64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  void flush_buffer();
  void cleanup() noexcept;
  std::string path_, tmp_;
  int fd_ = -1;
  bool done_ = false;
  uint64_t written_ = 0;
  std::vector<char> buf_;
  size_t used_ = 0;
};

// Writes `bytes` to `path` atomically (AtomicFileWriter + commit).
void write_file_atomic(const std::string& path, std::string_view bytes);
void write_file_atomic(const std::string& path, const void* data, size_t nbytes);

// fsync()s a directory so that renames/creations inside it are durable.
void fsync_dir(const std::string& dir);

// The directory part of a path ("." when there is none); "/a/b.txt" -> "/a".
std::string parent_dir(const std::string& path);

// The whole file as bytes. Throws "cannot open <path>: <strerror>" etc.
std::string read_file(const std::string& path);

bool file_exists(const std::string& path);  // a regular file (follows symlinks)
bool dir_exists(const std::string& path);

// Creates the directory `path` and its parents (nothing to do when it exists) and
// checks that files can be created in it. Throws titan::Error "<what>=<path>: cannot
// create directory <p>: Not a directory" (or "...: not writable: Permission denied"),
// where `what` names the setting the path came from, e.g. "job.dump_folder".
void create_output_dir(const std::string& path, std::string_view what);

// A whole file mapped into memory, MAP_PRIVATE: reads come from the page cache;
// writes through mutable_data() are copy-on-write and never reach the file.
// Keep it in a shared_ptr to let views (e.g. Tensor storages) keep it alive.
// Caveat of every mmap: if another process truncates the file in place while it
// is mapped, touching the lost pages raises SIGBUS (titan's own writers replace
// files by rename, which leaves existing mappings intact).
class MappedFile {
 public:
  // Throws "cannot open <path>: No such file or directory" and similar.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }  // null for an empty file
  uint8_t* mutable_data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace titan
