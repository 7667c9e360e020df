// Distributed training checkpoints (torch.distributed.checkpoint's layout, translated):
// every rank writes the pieces of the tensors it holds, rank 0 publishes a global index
// last, and a load on any layout reads the pieces it needs from the files.
//
// Layout of one checkpoint written by W > 1 ranks:
//   step-N/shard-0000R-of-0000W.safetensors  rank R's pieces, tensor names "model/<name>"
//                                            and "optimizer/<key>" (a rank holding only
//                                            pieces another rank writes has no file)
//   step-N/state.json                        step, loader, seed, ... (rank 0)
//   step-N/MANIFEST.json                     the global index, written last by rank 0
// MANIFEST.json = {"format": "titan-distributed", "version": 1, "step": N,
//   "world_size": W, "mesh": {"pp": .., "dp_replicate": .., ...},
//   "files": {"<file>": <bytes>, ...},             (every file of the checkpoint)
//   "tensors": {"model/<name>": {"dtype": "F32", "shape": [global],
//       "placements": [{"mesh_dim": "dp_shard", "placement": "Shard(0)"}, ...],
//       "shards": [{"file": "<file>", "offsets": [..], "lengths": [..]}, ...]}, ...}}
// Each tensor's shards are disjoint boxes of the global tensor that cover it exactly;
// a piece held by several ranks (Replicate, HSDP replicas) is written once, by the
// lowest world rank holding it. The placements (DTensor's, dtensor.h) are recorded for
// the reader's information; loading needs only the boxes, so any placement that cuts
// boxes (Shard over dp_shard, tp, ...) needs no format change.
//
// Atomicity: every file is written to a temporary name, fsync'ed and renamed; the index
// is written only after every rank reported its file written (a collective), so a
// checkpoint without MANIFEST.json is not a checkpoint, and a kill -9 of any rank at any
// moment leaves the previous checkpoint loadable. A world of one rank writes the
// single-rank layout of train_checkpoint.h (model.safetensors, optimizer.safetensors);
// the reader below accepts both.
//
// Asynchronous saves: save() hands this rank's pieces to a background thread and
// returns; the thread copies them (the snapshot) and writes the file. The caller must
// not change the pieces until wait_snapshot() returns: the trainer calls it right before
// the optimizer's next update, so the copy overlaps the next forward and backward. MPI collectives run on the main thread only
// (MPI_THREAD_SERIALIZED), so the "every rank is done" agreement is made by poll(),
// which the trainer calls once per step: one 8-byte all-reduce while a write is in
// flight; the step at which all ranks are done publishes the index (rank 0 writes it in
// the background). The next save() and wait() finish a write still in flight.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/train_checkpoint.h"
#include "titan/core/tensor.h"

namespace titan {

namespace distributed {
class DTensor;
class DeviceMesh;
class ProcessGroup;
}  // namespace distributed

// A box of a global tensor: per dim, the first index and the extent.
struct ShardBox {
  std::vector<int64_t> offsets, lengths;
  int64_t numel() const;
  bool operator==(const ShardBox& o) const { return offsets == o.offsets && lengths == o.lengths; }
  std::string str() const;  // "[0:4, 0:64]"
};
// The whole of a tensor of this shape.
ShardBox full_box(const Shape& shape);

// This rank's piece of a global tensor: `local` (shape == box.lengths) and its placements.
struct ShardedTensor {
  std::string name;
  Tensor local;
  Shape global_shape;
  ShardBox box;
  // [{"mesh_dim": "<dim>", "placement": "Shard(0)"}, ...]; [] for a tensor every rank holds whole.
  nlohmann::json placements = nlohmann::json::array();
};
// The piece of a DTensor (its local tensor and local_ranges()).
ShardedTensor sharded_from_dtensor(std::string name, const distributed::DTensor& t);
// A tensor held whole.
ShardedTensor sharded_full(std::string name, const Tensor& t);
// Optimizer state (Optimizer::state_dict()) as pieces: a key "<param>.<field>" whose
// shape equals that parameter's local shape takes the parameter's box and placements
// (AdamW's exp_avg / exp_avg_sq, Muon's momentum_buffer are elementwise with it); every
// other key (the i64 step counters) is held whole. `params` are the model's pieces.
std::vector<ShardedTensor> sharded_optimizer_state(const std::vector<std::pair<std::string, Tensor>>& state,
                                                   const std::vector<ShardedTensor>& params);

// The index of a checkpoint directory, in either layout (header comment). Reading a
// piece maps the shard files it needs (once per file). Thread-compatible.
class CheckpointIndex {
 public:
  struct Shard {
    std::string file, tensor;  // file name in the directory; tensor name inside it
    ShardBox box;
  };
  struct Entry {
    DType dtype = DType::f32;
    Shape shape;
    nlohmann::json placements = nlohmann::json::array();
    std::vector<Shard> shards;
  };
  // Reads <dir>/MANIFEST.json and checks that every file it lists exists with the
  // listed size. Throws titan::Error: "checkpoint <dir>: no MANIFEST.json (not a
  // published checkpoint)", "checkpoint <dir>: shard file <path> listed in
  // MANIFEST.json is missing" / "... has N bytes, MANIFEST.json lists M", malformed JSON.
  explicit CheckpointIndex(std::string dir);
  ~CheckpointIndex();

  const std::string& dir() const { return dir_; }
  bool distributed() const { return distributed_; }
  int64_t world_size() const { return world_size_; }  // of the run that wrote it (1: single-rank layout)
  const nlohmann::json& mesh() const { return mesh_; }
  // Section "model" or "optimizer": name -> entry.
  const std::map<std::string, Entry>& section(const std::string& s) const;
  // The piece `box` of section/name, assembled from the shards that overlap it (a fresh
  // contiguous tensor of the entry's dtype). Throws naming the index for an unknown
  // name, a box outside the tensor, or shards that do not cover the box.
  Tensor read(const std::string& sec, const std::string& name, const ShardBox& box) const;
  Tensor read_full(const std::string& sec, const std::string& name) const;
  // The bytes of every shard file of the checkpoint (for reports).
  std::map<std::string, int64_t> files() const { return files_; }

 private:
  const SafetensorsReader& reader(const std::string& file) const;
  std::string dir_, index_path_;
  bool distributed_ = false;
  int64_t world_size_ = 1;
  nlohmann::json mesh_;
  std::map<std::string, int64_t> files_;
  std::map<std::string, Entry> model_, optimizer_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
};

// Copies the checkpoint's values into each target's local tensor in place (its box of
// section/name). Throws naming MANIFEST.json for a tensor the checkpoint lacks or whose
// global shape or dtype differs from the target's ("'x' has shape [..], the model
// expects [..]"), and for a checkpoint tensor the targets lack (strict, as
// load_state_dict is) unless `elsewhere` names it: the model tensors other ranks hold
// whole and this rank holds no piece of (a pipeline's other stages), which it skips.
void load_sharded(const CheckpointIndex& index, const std::string& section, const std::vector<ShardedTensor>& targets,
                  const std::set<std::string>& elsewhere = {});
// The optimizer section as this rank's state dict (for Optimizer::load_state_dict): each
// key "<param>.<field>" whose global shape equals its parameter's takes the parameter's
// box from `params`; the keys "<param>.<field>" of a parameter in `elsewhere` (above)
// are skipped; other keys are read whole.
std::vector<std::pair<std::string, Tensor>> load_sharded_optimizer(const CheckpointIndex& index,
                                                                   const std::vector<ShardedTensor>& params,
                                                                   const std::set<std::string>& elsewhere = {});
// state.json of a checkpoint directory (step and extra). Throws naming the file.
TrainState read_checkpoint_state(const std::string& dir);
// The whole checkpoint as full tensors (CheckpointManager::load of a distributed one).
LoadedCheckpoint load_checkpoint_full(const std::string& dir);

// Runs fn (which must not call collectives) on every rank of `world`, then agrees: when
// it threw on some rank (titan::Error, a JSON error), every rank throws the message of the lowest such
// rank, so a bad checkpoint is reported by every rank before any rank ends the job.
// Collective.
void collective_check(distributed::ProcessGroup& world, const std::function<void()>& fn);

// The newest published checkpoint of `folder` for a resume, agreed by every rank of
// `world` (collective): the newest step-N with a MANIFEST.json, whose files must be
// complete (else titan::Error naming the missing or short file: a published checkpoint
// that lost a file is damage, not an older checkpoint to fall back from). After every
// rank has looked, rank 0 removes the step-N directories without a valid MANIFEST (writes
// cut short) and returns their paths; the other ranks return none.
struct ResumePoint {
  std::optional<std::string> dir;
  std::vector<std::string> removed;
};
ResumePoint find_resume_checkpoint(const std::string& folder, distributed::ProcessGroup& world);

// Writes checkpoints of a job of world.size() ranks (header comment). Every member
// except last_write() is collective over `world`: every rank calls it, in the same order.
class DistributedCheckpointManager {
 public:
  // mesh: the layout recorded in the index (may be null for a world of one).
  DistributedCheckpointManager(std::string folder, int64_t keep_latest_k, bool async, distributed::ProcessGroup& world,
                               const distributed::DeviceMesh* mesh);
  ~DistributedCheckpointManager();  // joins the local threads; publishes nothing

  // Saves step state.step: this rank's pieces of the model and optimizer. Returns the ms
  // this rank was blocked (finishing the previous write when it is still in flight, the
  // exchange of the pieces' boxes; the whole write and the index when not async). Throws titan::Error on every
  // rank when any rank's write failed (naming it), or on disagreeing pieces (a global
  // shape that differs between ranks, pieces that do not tile a tensor).
  double save(const std::vector<ShardedTensor>& model, const std::vector<ShardedTensor>& optimizer,
              const TrainState& state);
  // Blocks until the write in flight has copied its pieces (the tensors passed to save()
  // may change after it). Local, not collective.
  void wait_snapshot();
  // Publishes the write in flight once every rank finished it. Returns the ms spent.
  double poll();
  // Finishes and publishes the write in flight.
  void wait();
  CheckpointManager::WriteRecord last_write() const;  // local: this rank's last published write
  double last_write_ms() const { return last_write().ms; }
  int64_t last_written_step() const { return last_write().step; }
  // Bytes of the shard file this rank wrote in its last write (0: none).
  int64_t last_shard_bytes() const { return last_shard_bytes_; }

 private:
  struct Plan;
  struct Pending;
  void commit();
  void join_publisher();

  std::string folder_;
  int64_t keep_;
  bool async_;
  distributed::ProcessGroup& world_;
  nlohmann::json mesh_json_;
  std::unique_ptr<CheckpointManager> single_;  // a world of one
  std::unique_ptr<Plan> plan_;
  std::unique_ptr<Pending> pending_;
  std::thread publisher_;  // rank 0: writes the index of the last commit
  std::string publish_error_;
  mutable std::mutex mu_;
  CheckpointManager::WriteRecord last_;
  int64_t last_shard_bytes_ = 0;
};

}  // namespace titan
