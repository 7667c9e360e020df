// Per-step metrics: one JSON object per line in <dump_folder>/metrics.jsonl (flushed
// each line, so a killed run keeps what it logged) and a console progress line.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "titan/train/tensorboard.h"

namespace titan::train {

class MetricsLogger {
 public:
  // path: metrics.jsonl; append=true keeps earlier lines (resume). Throws titan::Error
  // if the file cannot be opened.
  MetricsLogger(const std::string& path, bool append);
  ~MetricsLogger();
  // Writes row to metrics.jsonl and, once enable_tensorboard() was called, to the
  // TensorBoard event file.
  void log(const nlohmann::json& row);
  const std::string& path() const { return path_; }
  // Also writes each row as TensorBoard scalars to a new event file in dir
  // (metrics.enable_tensorboard). Throws titan::Error naming dir if it cannot be made.
  void enable_tensorboard(const std::string& dir) { tb_ = std::make_unique<TensorBoardWriter>(dir); }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tb_;
};

// Keeps only the lines of a metrics.jsonl whose "step" is <= last_step (and drops
// lines that do not parse, e.g. one cut short by a kill), rewriting the file
// atomically; a missing file is left missing. Used on resume so that each step is
// logged once. Throws titan::Error on I/O failure.
void trim_metrics(const std::string& path, int64_t last_step);

// Resident set size now and its peak, in MiB (from /proc/self/status).
double rss_mb();
double peak_rss_mb();

}  // namespace titan::train
