#include "titan/train/metrics.h"

#include <fstream>
#include <string>

#include "titan/core/error.h"
#include "titan/core/fs.h"

namespace titan::train {

MetricsLogger::MetricsLogger(const std::string& path, bool append) : path_(path) {
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  TITAN_CHECK(f_ != nullptr, "metrics: cannot open {} for writing", path);
}

MetricsLogger::~MetricsLogger() {
  if (f_) std::fclose(f_);
}

void MetricsLogger::log(const nlohmann::json& row) {
  std::string s = row.dump() + "\n";
  std::fwrite(s.data(), 1, s.size(), f_);
  std::fflush(f_);
  if (tb_) tb_->add_scalars(row);
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
