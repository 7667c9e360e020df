// Per-step metrics: one JSON object per line in <dump_folder>/metrics.jsonl (flushed
// each line, so a killed run keeps what it logged) and a console progress line.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "titan/train/tensorboard.h"

namespace titan::train {

class MetricsLogger {
 public:
  // path: metrics.jsonl; append=true keeps earlier lines (resume); enabled=false
  // (metrics.jsonl=false) opens nothing and log() writes nothing. Throws titan::Error
  // if the file cannot be opened.
  MetricsLogger(const std::string& path, bool append, bool enabled = true);
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;
  // Appends row as one line to metrics.jsonl and, once enable_tensorboard() was called,
  // as scalars to the TensorBoard event file. Every write is checked: on failure
  // (ENOSPC on a full disk, EIO, ...) the file is cut back to its last complete line
  // and titan::Error "metrics: cannot write <path>: No space left on device" is thrown.
  void log(const nlohmann::json& row);
  const std::string& path() const { return path_; }
  bool enabled() const { return fd_ >= 0; }
  // Also writes each row as TensorBoard scalars to a new event file in dir
  // (metrics.enable_tensorboard). Throws titan::Error naming dir if it cannot be made.
  void enable_tensorboard(const std::string& dir) { tb_ = std::make_unique<TensorBoardWriter>(dir); }

 private:
  std::string path_;
  int fd_ = -1;
  std::unique_ptr<TensorBoardWriter> tb_;
};

// Appends `line` to the open file `fd` (O_APPEND), retrying short writes; on a failed
// write the file is truncated back to where the line began and titan::Error
// "<what>: cannot write <path>: <strerror>" is thrown. For the JSONL logs.
void append_line_checked(int fd, std::string_view line, const std::string& path, std::string_view what);

// Keeps only the lines of a metrics.jsonl whose "step" is <= last_step (and drops
// lines that do not parse, e.g. one cut short by a kill), rewriting the file
// atomically; a missing file is left missing. Used on resume so that each step is
// logged once. Throws titan::Error on I/O failure.
void trim_metrics(const std::string& path, int64_t last_step);

// After trim_metrics on resume: appends `row` (a checkpoint's copy of the row of its
// step) unless the file already holds a row of that "step" with field `key`; a missing
// file is created. Throws titan::Error on I/O failure.
void restore_metrics_row(const std::string& path, const nlohmann::json& row, const std::string& key);

// Resident set size now and its peak, in MiB (from /proc/self/status).
double rss_mb();
double peak_rss_mb();

}  // namespace titan::train
