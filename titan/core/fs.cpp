#include "titan/core/fs.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "titan/core/error.h"

namespace titan {

namespace {

constexpr size_t kBufBytes = size_t{1} << 20;  // write buffer of AtomicFileWriter

std::string errstr() { return std::strerror(errno); }

std::string base_name(const std::string& path) {
  auto p = path.find_last_of('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

// write(2) until all bytes are out, retrying on EINTR and short writes.
void write_all(int fd, const char* p, size_t n, const std::string& what) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write {}: {}", what, errstr());
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string parent_dir(const std::string& path) {
  auto p = path.find_last_of('/');
  if (p == std::string::npos) return ".";
  if (p == 0) return "/";
  return path.substr(0, p);
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory {} to fsync it: {}", dir, errstr());
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories (EINVAL); the rename is then as
  // durable as that file system makes it, which is all we can ask.
  if (rc != 0 && err != EINVAL) fail("cannot fsync directory {}: {}", dir, std::strerror(err));
}

// ---- AtomicFileWriter

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  TITAN_CHECK(!path_.empty() && path_.back() != '/', "AtomicFileWriter: invalid file path '{}'", path_);
  static std::atomic<uint64_t> counter{0};
  const auto slash = path_.find_last_of('/');
  const std::string prefix = slash == std::string::npos ? "" : path_.substr(0, slash + 1);
  const std::string base = base_name(path_);
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp_ = prefix + "." + base + ".tmp." + std::to_string(::getpid()) + "." +
           std::to_string(counter.fetch_add(1));
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ >= 0) break;
    if (errno != EEXIST) fail("cannot create temporary file for {}: {}: {}", path_, tmp_, errstr());
  }
  if (fd_ < 0) fail("cannot create a unique temporary file for {}", path_);
  buf_.resize(kBufBytes);
}

AtomicFileWriter::~AtomicFileWriter() { cleanup(); }

void AtomicFileWriter::cleanup() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!done_ && !tmp_.empty()) ::unlink(tmp_.c_str());
  done_ = true;
}

void AtomicFileWriter::abort() { cleanup(); }

void AtomicFileWriter::flush_buffer() {
  if (used_ == 0) return;
  write_all(fd_, buf_.data(), used_, tmp_ + " (for " + path_ + ")");
  used_ = 0;
}

void AtomicFileWriter::write(const void* data, size_t nbytes) {
  TITAN_CHECK(!done_, "AtomicFileWriter::write: {} was already committed or aborted", path_);
  const char* p = static_cast<const char*>(data);
  try {
    if (used_ + nbytes <= buf_.size()) {
      std::memcpy(buf_.data() + used_, p, nbytes);
      used_ += nbytes;
    } else {
      flush_buffer();
      if (nbytes >= buf_.size()) {
        write_all(fd_, p, nbytes, tmp_ + " (for " + path_ + ")");
      } else {
        std::memcpy(buf_.data(), p, nbytes);
        used_ = nbytes;
      }
    }
  } catch (...) {
    cleanup();
    throw;
  }
  written_ += nbytes;
}

void AtomicFileWriter::commit() {
  TITAN_CHECK(!done_, "AtomicFileWriter::commit: {} was already committed or aborted", path_);
  try {
    flush_buffer();
    if (::fsync(fd_) != 0) fail("cannot fsync {} (for {}): {}", tmp_, path_, errstr());
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close {} (for {}): {}", tmp_, path_, errstr());
    if (::rename(tmp_.c_str(), path_.c_str()) != 0)
      fail("cannot rename {} to {}: {}", tmp_, path_, errstr());
  } catch (...) {
    cleanup();
    throw;
  }
  done_ = true;
  fsync_dir(parent_dir(path_));
}

void write_file_atomic(const std::string& path, const void* data, size_t nbytes) {
  AtomicFileWriter w(path);
  w.write(data, nbytes);
  w.commit();
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

// ---- reading

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool dir_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

namespace {
// Opens a regular file read-only; returns fd and size.
int open_regular(const std::string& path, size_t& size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path, errstr());
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) fail("cannot read {}: not a regular file (is a directory)", path);
    fail("cannot read {}: not a regular file", path);
  }
  size = static_cast<size_t>(st.st_size);
  return fd;
}
}  // namespace

void create_output_dir(const std::string& path, std::string_view what) {
  TITAN_CHECK(!path.empty(), "{} is empty (an output directory is expected)", what);
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) fail("{}={}: cannot create directory: {}", what, path, ec.message());
  if (!std::filesystem::is_directory(path, ec)) fail("{}={}: not a directory", what, path);
  if (::access(path.c_str(), W_OK | X_OK) != 0) fail("{}={}: not writable: {}", what, path, errstr());
}

std::string read_file(const std::string& path) {
  size_t size = 0;
  int fd = open_regular(path, size);
  std::string out(size, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t r = ::read(fd, out.data() + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int err = errno;
      ::close(fd);
      if (r == 0) fail("cannot read {}: file shrank from {} to {} bytes while reading", path, size, got);
      fail("cannot read {}: {}", path, std::strerror(err));
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return out;
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  size_t size = 0;
  int fd = open_regular(path, size);
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = size;
  if (size > 0) {
    // MAP_NORESERVE: copy-on-write pages are not charged up front, so mapping a
    // file larger than free memory + swap works as long as few pages are written.
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) fail("cannot mmap {} ({} bytes): {}", path, size, std::strerror(err));
    m->data_ = static_cast<uint8_t*>(p);
  } else {
    ::close(fd);
  }
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace titan
