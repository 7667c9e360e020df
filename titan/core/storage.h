// Storage: a 64-byte-aligned, reference-counted byte buffer on a device.
#pragma once
#include <cstddef>
#include <memory>

#include "titan/core/device.h"

namespace titan {

class Storage {
 public:
  // Allocates nbytes (zero-filled when zero_fill) aligned to 64 bytes. Throws titan::Error
  // if the device is not the CPU or the allocation fails.
  Storage(size_t nbytes, Device device, bool zero_fill = false);
  // Wraps external memory (not freed); `owner` keeps it alive.
  Storage(void* data, size_t nbytes, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = true;
  std::shared_ptr<void> owner_;
};

}  // namespace titan
