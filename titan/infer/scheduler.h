// Continuous-batching scheduler (vLLM v1's unified scheduler, CPU edition).
//
// Every sequence has tokens (prompt + generated) and num_computed (tokens whose K/V
// is cached). Each step gives each scheduled sequence a chunk of its uncomputed
// tokens, within a token budget (max_num_batched_tokens) and at most max_num_seqs
// running sequences. Prefill chunks and one-token decodes of different requests share
// a step; requests join (admission from the FCFS waiting queue) and leave (finish,
// abort) at any step.
//
//   1. Running sequences, in admission order, each get min(uncomputed, budget left)
//      tokens. When their new blocks cannot be allocated, the most recently admitted
//      running sequence is preempted by recomputation: its blocks are released, it goes
//      to the front of the waiting queue with num_computed = 0, and later recomputes
//      prompt + generated tokens (sampling is keyed by position, so it continues with
//      the same tokens). A sequence alone in the cache that still cannot grow has
//      filled the whole pool and finishes with "length".
//   2. If nothing was preempted, waiting sequences are admitted in order while budget,
//      seats and blocks last. On admission the full blocks of tokens[0, len-1) are
//      looked up in the prefix table (the last token is always computed, to get its
//      logits); hits are shared, and computing starts after them. Sample i > 0 of a
//      request waits until sample 0 has computed the prompt, then shares its blocks.
//      A sequence that needs more blocks than the pool has fails ("error" for a
//      prompt, "length" for a preempted sequence).
// After the forward, commit() advances num_computed and registers the newly filled
// full blocks in the prefix table.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "titan/infer/block_pool.h"
#include "titan/infer/sequence.h"
#include "titan/infer/state_pool.h"

namespace titan::infer {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  bool enable_prefix_caching = true;  // false: blocks are shared only between samples of one request
};

struct ScheduledChunk {
  Sequence* seq;
  int64_t start, count;  // tokens [start, start + count) are computed this step
  // Models with recurrent state: the StatePool row that receives the state before
  // position snapshot_pos (the last KV block boundary in (start, start + count]), and
  // the prefix hash of the block ending there; -1: no snapshot.
  int32_t snapshot_slot = -1;
  int64_t snapshot_pos = -1;
  uint64_t snapshot_hash = 0;
};

// A state row to set before the forward: from a snapshot row, or zeros (src = -1).
struct StateRestore {
  int32_t dst, src;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<StateRestore> restores;  // admitted sequences' state rows
  std::vector<Sequence*> preempted;  // moved back to waiting this step
  std::vector<Sequence*> failed;     // finished by the scheduler (finish/error set)
  int64_t num_tokens = 0;
};

class Scheduler {
 public:
  // Throws titan::Error for max_num_seqs < 1 or max_num_batched_tokens < 1.
  // states: the recurrent-state rows of a model with linear-attention layers (null or
  // disabled: none). With states, each running sequence holds a row; a prefix-cache hit
  // counts only up to the deepest hit block with a state snapshot (the K/V of later hit
  // blocks would be reusable, the recurrent state is not), and each chunk snapshots the
  // state at the last block boundary it reaches.
  Scheduler(BlockPool& pool, const SchedulerConfig& cfg, StatePool* states = nullptr);

  void add(Sequence* s);              // appends to the waiting queue
  StepPlan schedule();
  void commit(const StepPlan& plan);  // after the forward of plan
  // Removes s from the queues and releases its blocks (finish or abort).
  void remove(Sequence* s);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  const BlockPool& pool() const { return pool_; }
  const SchedulerConfig& config() const { return cfg_; }

 private:
  int64_t blocks_for(int64_t tokens) const;
  void preempt(Sequence* s, StepPlan& plan);
  void ensure_hashes(Sequence* s, int64_t nblocks);
  bool admit(Sequence* s, StepPlan& plan, int64_t& budget);
  void release_state(Sequence* s);
  void plan_snapshots(StepPlan& plan);
  void fail(Sequence* s, FinishReason r, std::string msg, StepPlan& plan);

  BlockPool& pool_;
  SchedulerConfig cfg_;
  StatePool* states_ = nullptr;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
};

}  // namespace titan::infer
