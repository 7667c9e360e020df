// Per-step metrics: one JSON object per line in <dump_folder>/metrics.jsonl (flushed
// each line, so a killed run keeps what it logged) and a console progress line.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace titan::train {

class MetricsLogger {
 public:
  // path: metrics.jsonl; append=true keeps earlier lines (resume). Throws titan::Error
  // if the file cannot be opened.
  MetricsLogger(const std::string& path, bool append);
  ~MetricsLogger();
  void log(const nlohmann::json& row);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

// Resident set size now and its peak, in MiB (from /proc/self/status).
double rss_mb();
double peak_rss_mb();

}  // namespace titan::train
