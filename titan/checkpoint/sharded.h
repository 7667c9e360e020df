// Sharded safetensors checkpoints in the Hugging Face layout: a directory with
//   model-00001-of-0000N.safetensors ... model-0000N-of-0000N.safetensors
//   model.safetensors.index.json = {"metadata": {"total_size": <bytes>},
//                                   "weight_map": {"<tensor>": "<shard file>"}}
// (transformers' modeling_utils / huggingface_hub split_torch_state_dict_into_shards).
// Shard paths in the index are relative to the index's directory.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/checkpoint/safetensors.h"

namespace titan {

struct ShardSlots;

inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr const char* kSafetensorsSingleName = "model.safetensors";

struct SafetensorsIndex {
  uint64_t total_size = 0;                          // metadata.total_size (0 when absent)
  std::map<std::string, std::string> weight_map;    // tensor name -> shard file name
  std::vector<std::string> shard_files() const;     // distinct, sorted
};

// Parses an index file. Throws "safetensors index <path>: ..." for a missing file,
// malformed JSON, or a weight_map that is absent or not {string: string}.
SafetensorsIndex read_safetensors_index(const std::string& index_path);

// Tensors of a checkpoint, loaded on demand: one .safetensors file, an index file,
// or a directory holding model.safetensors or model.safetensors.index.json (the
// single file wins when both exist, as in transformers). Opening an index reads
// the index and checks that every shard file it names exists ("shard file <f>
// (holding 'x' and others) does not exist"); a shard is mapped and validated the
// first time one of its tensors is asked for (entry, load, load_all, metadata),
// and then every tensor the index puts in it must be there ("tensor 'x' listed in
// <index> is absent from shard <file>"); tensors present in a shard but not listed
// are ignored. names(), contains(), shard_of() and num_shards() read the index
// only. Thread-safe.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& path);
  ~SafetensorsCheckpoint();

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::string& shard_of(const std::string& name) const;  // file path of the tensor
  size_t num_shards() const { return shard_paths_.size(); }
  size_t num_open_shards() const;  // shards mapped so far
  // Metadata of the first shard (save_sharded_safetensors writes the same to all).
  const StringMap& metadata() const;

  Tensor load(const std::string& name, LoadMode mode = LoadMode::mmap) const;
  TensorMap load_all(LoadMode mode = LoadMode::mmap) const;

 private:
  const SafetensorsReader& shard(size_t i) const;  // opens it on first use
  size_t shard_index(const std::string& name) const;

  std::string path_, index_path_;                  // index_path_ empty for a single file
  std::vector<std::string> shard_paths_;
  std::map<std::string, size_t> where_;            // tensor -> shard
  std::vector<std::vector<const std::string*>> listed_;  // per shard: the index's names (keys of where_)
  std::unique_ptr<ShardSlots> slots_;              // the opened readers
};

// All tensors of a checkpoint (any of the forms SafetensorsCheckpoint accepts).
TensorMap load_safetensors_checkpoint(const std::string& path, LoadMode mode = LoadMode::mmap);

// Writes `tensors` into directory `dir` (created if missing, parent must exist) as
// <prefix>-0000i-of-0000N.safetensors shards plus <prefix>.safetensors.index.json.
// Sharding is greedy in name order, as huggingface_hub does: a tensor goes to the
// current shard unless that would push it past max_shard_bytes; a tensor larger
// than the limit gets a shard of its own. N >= 1 (an index is written even for one
// shard). Every file is written atomically, shards first, the index last; then
// stale files of an earlier save with the same prefix (other shard names, a
// single <prefix>.safetensors that would shadow the index) are removed. A crash
// before the index is renamed leaves the previous index and its shards as they
// were unless a shard file name is reused — save into a fresh directory when the
// previous checkpoint must stay loadable (the training checkpointer does).
// `metadata` goes into every shard. Returns the index written.
SafetensorsIndex save_sharded_safetensors(const std::string& dir, const TensorMap& tensors,
                                          uint64_t max_shard_bytes, const StringMap& metadata = {},
                                          const std::string& prefix = "model");

}  // namespace titan
