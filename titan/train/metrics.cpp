#include "titan/train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "titan/core/error.h"
#include "titan/core/fs.h"

namespace titan::train {

MetricsLogger::MetricsLogger(const std::string& path, bool append, bool enabled) : path_(path) {
  if (!enabled) return;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC), 0644);
  TITAN_CHECK(fd_ >= 0, "metrics: cannot open {} for writing: {}", path, std::strerror(errno));
}

MetricsLogger::~MetricsLogger() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLogger::log(const nlohmann::json& row) {
  if (fd_ >= 0) append_line_checked(fd_, row.dump() + "\n", path_, "metrics");
  if (tb_) tb_->add_scalars(row);
}

void append_line_checked(int fd, std::string_view line, const std::string& path, std::string_view what) {
  const off_t begin = ::lseek(fd, 0, SEEK_END);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      // Cut a partly written line off again, so that the file ends in a complete
      // line (a character device such as /dev/full cannot be truncated: nothing to do).
      if (begin >= 0) {
        const int rc = ::ftruncate(fd, begin);
        (void)rc;
      }
      fail("{}: cannot write {}: {}", what, path, std::strerror(err));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
}

void trim_metrics(const std::string& path, int64_t last_step) {
  if (!file_exists(path)) return;
  const std::string text = read_file(path);
  std::string kept;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // an unterminated last line was cut short
    const std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object() || !row.contains("step") || !row["step"].is_number_integer()) continue;
    if (row["step"].get<int64_t>() <= last_step) kept.append(line).push_back('\n');
  }
  if (kept.size() != text.size()) write_file_atomic(path, kept);
}

void restore_metrics_row(const std::string& path, const nlohmann::json& row, const std::string& key) {
  const int64_t step = row.at("step").get<int64_t>();
  std::string text = file_exists(path) ? read_file(path) : std::string();
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const nlohmann::json r =
        nlohmann::json::parse(std::string_view(text.data() + begin, end - begin), nullptr, false);
    begin = end + 1;
    if (r.is_object() && r.contains(key) && r.value("step", int64_t{-1}) == step) return;
  }
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  write_file_atomic(path, text + row.dump() + "\n");
}

static double status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::char_traits<char>::length(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0) return std::stod(line.substr(n));
  return 0;
}

double rss_mb() { return status_kb("VmRSS:") / 1024.0; }
double peak_rss_mb() { return status_kb("VmHWM:") / 1024.0; }

}  // namespace titan::train
