#include "titan/core/device.h"

#include "titan/core/error.h"

namespace titan {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t pos = 0;
      int i = std::stoi(s.substr(5), &pos);
      if (pos == s.size() - 5 && i >= 0) return cuda(i);
    } catch (...) {
    }
  }
  fail("unknown device '{}' (expected cpu, cuda or cuda:N)", s);
}

}  // namespace titan
