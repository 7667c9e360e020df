// safetensors I/O (https://github.com/huggingface/safetensors, format spec in its
// README): 8-byte little-endian header length N, N bytes of UTF-8 JSON
//   {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>"}}   (metadata optional)
// then the data buffer; offsets are bytes relative to the buffer start, each tensor
// is row-major and contiguous, and the tensors tile the buffer exactly (no overlap,
// no holes, no trailing bytes) — the same checks as the reference Rust reader.
// Supported dtypes: F32 BF16 F16 I32 I64 U8 BOOL F8_E4M3 F8_E5M2 (titan DTypes
// f32 bf16 f16 i32 i64 u8 bool f8e4m3 f8e5m2). Values are little-endian (x86).
//
// Loading maps the file (MAP_PRIVATE). In LoadMode::mmap (the default) a tensor's
// Storage aliases the mapping and holds a reference to it, so the mapping lives as
// long as any loaded tensor or reader; writing into such a tensor is copy-on-write
// and never changes the file. Aliased tensors are aligned to their element size
// (files written by save_safetensors always are); a tensor whose bytes are not is
// copied. LoadMode::copy gives every tensor its own 64-byte-aligned storage and
// drops the mapping once the reader is gone.
//
// Every malformed file raises titan::Error with one line "safetensors <path>: <problem>"
// (values and names in it cut to a few dozen characters). Repeated keys and JSON
// nested deeper than 8 levels are refused. Opening is linear in the tensor count:
// the header's members are streamed, never held as one JSON document.
//
// Header size limit: a header longer than kSafetensorsMaxHeaderBytes (100 MB, the
// reference reader's MAX_HEADER_SIZE; about 1M tensors with short names) is
// refused before it is parsed. The environment variable
// TITAN_SAFETENSORS_MAX_HEADER_BYTES (a positive byte count) overrides it for every
// reader; the SafetensorsReader constructor takes an explicit limit.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/core/tensor.h"

namespace titan {

class MappedFile;

using TensorMap = std::map<std::string, Tensor>;
using StringMap = std::map<std::string, std::string>;

enum class LoadMode { mmap, copy };

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
inline constexpr const char* kSafetensorsMaxHeaderEnv = "TITAN_SAFETENSORS_MAX_HEADER_BYTES";
// The header limit in force: $TITAN_SAFETENSORS_MAX_HEADER_BYTES or the default.
// Throws titan::Error when the variable is set to anything but a positive integer.
uint64_t safetensors_max_header_bytes();

// "F32" <-> DType::f32 etc. safetensors_dtype throws for names titan does not
// support ("unknown safetensors dtype 'F64' (supported: F32, BF16, ...)").
std::string safetensors_dtype_name(DType d);
DType safetensors_dtype(const std::string& name);

struct SafetensorsEntry {
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets in the data buffer
};

// A validated safetensors file whose tensors are loaded on demand.
class SafetensorsReader {
 public:
  // Maps and validates the whole header. Throws titan::Error (missing file,
  // truncated file, malformed JSON, unknown dtype, shape/offset size mismatch,
  // offsets beyond the file, overlapping tensors, holes, duplicate names, a
  // header over max_header_bytes). Time and memory are linear in the header size.
  explicit SafetensorsReader(const std::string& path, uint64_t max_header_bytes = safetensors_max_header_bytes());

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;                // sorted
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // throws if absent
  const StringMap& metadata() const { return metadata_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + N: file offset of the buffer

  // One tensor (contiguous, its file dtype and shape). Throws if `name` is absent.
  Tensor load(const std::string& name, LoadMode mode = LoadMode::mmap) const;
  TensorMap load_all(LoadMode mode = LoadMode::mmap) const;

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  uint64_t data_offset_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  StringMap metadata_;
};

// All tensors of one file (see LoadMode above).
TensorMap load_safetensors(const std::string& path, LoadMode mode = LoadMode::mmap);

// Writes `tensors` (CPU, any strides; stored row-major in their own dtype) and the
// string metadata to `path` atomically (temporary + fsync + rename + dir fsync),
// so a failure leaves any previous file at `path` untouched. Adds
// "format": "pt" to the metadata unless it has a "format" key (HF transformers
// refuses safetensors metadata without one). Layout, as the reference writer:
// tensors ordered by element size (largest first) then name, header padded with
// spaces to a multiple of 8 — every tensor is aligned to its element size.
// Output bytes depend only on the inputs. Throws titan::Error for an undefined or
// non-CPU tensor, an empty name or the reserved name "__metadata__", I/O errors.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const StringMap& metadata = {});

}  // namespace titan
