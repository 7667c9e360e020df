// Device: where a tensor's storage lives. Only the CPU exists today; cuda:N is
// reserved (CUDA kernels are built when CUDA is found; without it every CUDA entry
// point throws "X has no CUDA implementation").
#pragma once
#include <string>

namespace titan {

struct Device {
  enum class Kind : uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int i) { return {Kind::cuda, i}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu" or "cuda:N"
  // Parses "cpu" / "cuda" / "cuda:N"; throws titan::Error otherwise.
  static Device parse(const std::string& s);
};

}  // namespace titan
