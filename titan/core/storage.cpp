#include "titan/core/storage.h"

#include <cstdlib>
#include <cstring>

#include "titan/core/error.h"

namespace titan {

Storage::Storage(size_t nbytes, Device device, bool zero_fill) : nbytes_(nbytes), device_(device) {
  TITAN_CHECK(device.is_cpu(), "Storage: device {} has no CUDA implementation in this build",
              device.str());
  size_t n = (nbytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  data_ = std::aligned_alloc(64, n);
  TITAN_CHECK(data_ != nullptr, "Storage: failed to allocate {} bytes", nbytes);
  if (zero_fill) std::memset(data_, 0, n);
}

Storage::Storage(void* data, size_t nbytes, std::shared_ptr<void> owner)
    : data_(data), nbytes_(nbytes), owned_(false), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (owned_) std::free(data_);
}

}  // namespace titan
