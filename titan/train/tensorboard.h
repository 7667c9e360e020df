// TensorBoard event files for the metrics of `titan train` and `titan rl`
// (metrics.enable_tensorboard; TorchTitan's save_tb_folder under the dump folder).
//
// The file is a TFRecord stream (tensorflow/core/lib/io/record_writer.cc): per record
// a uint64 length, the masked CRC32C of those 8 bytes, the data, the masked CRC32C of
// the data (little endian; mask = rotate right 15 + 0xa282ead8). Each record is a
// tensorflow.Event protobuf (tensorflow/core/util/event.proto), written by hand: the
// first carries file_version "brain.Event:2", the others wall_time, step and a
// Summary of scalar Values (tag, simple_value: float32). Named
// events.out.tfevents.<unix seconds>.<host>.<pid>, as TensorFlow's writer names them,
// so TensorBoard and its EventAccumulator find it.
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace titan::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of data; masked as TFRecord does.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

class TensorBoardWriter {
 public:
  // Creates dir (and parents) and a new event file in it. Throws titan::Error naming the
  // path when it cannot be created.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event at row["step"] (an integer) holding a scalar per numeric or boolean
  // key of row other than "step" (nested objects as "outer/inner" tags); strings and
  // arrays are skipped. Rows without an integer "step" are ignored. Flushed each call,
  // so a killed run keeps what it logged.
  void add_scalars(const nlohmann::json& row);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace titan::train
