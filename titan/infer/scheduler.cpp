#include "titan/infer/scheduler.h"

#include <algorithm>

#include "titan/core/error.h"

namespace titan::infer {

Scheduler::Scheduler(BlockPool& pool, const SchedulerConfig& cfg, StatePool* states)
    : pool_(pool), cfg_(cfg), states_(states && states->enabled() ? states : nullptr) {
  TITAN_CHECK(cfg.max_num_seqs >= 1, "Scheduler: max_num_seqs must be >= 1, got {}", cfg.max_num_seqs);
  TITAN_CHECK(cfg.max_num_batched_tokens >= 1, "Scheduler: max_num_batched_tokens must be >= 1, got {}",
              cfg.max_num_batched_tokens);
  TITAN_CHECK(!states_ || states_->num_seq_slots() >= cfg.max_num_seqs,
              "Scheduler: {} state slots for max_num_seqs = {}", states_ ? states_->num_seq_slots() : 0,
              cfg.max_num_seqs);
}

void Scheduler::release_state(Sequence* s) {
  if (s->state_slot >= 0) states_->release(s->state_slot);
  s->state_slot = -1;
}

int64_t Scheduler::blocks_for(int64_t tokens) const {
  const int64_t B = pool_.block_size();
  return (tokens + B - 1) / B;
}

void Scheduler::add(Sequence* s) {
  s->status = SeqStatus::waiting;
  waiting_.push_back(s);
}

void Scheduler::ensure_hashes(Sequence* s, int64_t nblocks) {
  const int64_t B = pool_.block_size();
  while (static_cast<int64_t>(s->hashes.size()) < nblocks) {
    const size_t i = s->hashes.size();
    const uint64_t parent = i ? s->hashes[i - 1] : 0;
    s->hashes.push_back(block_hash(parent, s->salt, std::span<const int32_t>(s->tokens.data() + i * B, B)));
  }
}

void Scheduler::preempt(Sequence* s, StepPlan& plan) {
  pool_.release(s->blocks);
  s->blocks.clear();
  release_state(s);
  s->num_computed = 0;
  s->num_registered = 0;
  s->status = SeqStatus::waiting;
  ++s->num_preemptions;
  waiting_.push_front(s);
  plan.preempted.push_back(s);
}

void Scheduler::fail(Sequence* s, FinishReason r, std::string msg, StepPlan& plan) {
  pool_.release(s->blocks);
  s->blocks.clear();
  release_state(s);
  s->status = SeqStatus::finished;
  s->finish = r;
  if (r == FinishReason::error) s->error = msg;
  else s->stop_reason = msg;
  plan.failed.push_back(s);
}

void Scheduler::remove(Sequence* s) {
  if (auto it = std::find(running_.begin(), running_.end(), s); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), s); it != waiting_.end()) waiting_.erase(it);
  pool_.release(s->blocks);
  s->blocks.clear();
  release_state(s);
  s->status = SeqStatus::finished;
}

// Admits s if its first chunk fits; returns false (and holds nothing) otherwise.
bool Scheduler::admit(Sequence* s, StepPlan& plan, int64_t& budget) {
  const int64_t B = pool_.block_size();
  // Prefix cache: full blocks of tokens[0, len - 1) (the last token is always computed).
  const int64_t max_hits = (s->len() - 1) / B;
  ensure_hashes(s, max_hits);
  int64_t hits = 0;
  for (; hits < max_hits; ++hits) {
    const uint64_t parent = hits ? s->hashes[hits - 1] : 0;
    const int32_t b = pool_.lookup(s->hashes[hits], parent,
                                   std::span<const int32_t>(s->tokens.data() + hits * B, B));
    pool_.count_lookup(b >= 0);
    if (b < 0) break;
    pool_.acquire(b);
    s->blocks.push_back(b);
  }
  // Recurrent state: resume only where a snapshot of the prefix's state exists.
  int32_t snap = -1;
  if (states_) {
    while (hits > 0 && (snap = states_->find(s->hashes[hits - 1])) < 0) {
      pool_.release(std::span<const int32_t>(&s->blocks.back(), 1));
      s->blocks.pop_back();
      --hits;
    }
  }
  s->num_computed = hits * B;
  s->num_registered = hits;
  const int64_t n = std::min(s->len() - s->num_computed, budget);
  const int64_t need = blocks_for(s->num_computed + n) - static_cast<int64_t>(s->blocks.size());
  if (!pool_.allocate(need, s->blocks)) {
    pool_.release(s->blocks);
    s->blocks.clear();
    s->num_computed = 0;
    s->num_registered = 0;
    return false;
  }
  if (states_) {
    s->state_slot = states_->acquire();
    TITAN_CHECK(s->state_slot >= 0, "Scheduler: no free state slot for a running sequence");
    plan.restores.push_back({s->state_slot, hits > 0 ? snap : -1});
  }
  if (!s->ever_scheduled) s->num_cached_tokens = s->num_computed;
  s->ever_scheduled = true;
  s->status = SeqStatus::running;
  running_.push_back(s);
  plan.chunks.push_back({s, s->num_computed, n});
  plan.num_tokens += n;
  budget -= n;
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  const int64_t B = pool_.block_size();
  int64_t budget = cfg_.max_num_batched_tokens;

  // 1. Running sequences first, in admission order.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t want = std::min(s->len() - s->num_computed, budget);
    auto fit = [&] {  // the chunk shrinks to the free blocks before anyone is preempted
      const int64_t cap =
          (static_cast<int64_t>(s->blocks.size()) + pool_.num_free()) * B - s->num_computed;
      return std::min(want, cap);
    };
    bool dropped = false;
    while (fit() < 1) {
      Sequence* victim = running_.back();
      running_.pop_back();
      if (victim == s && i == 0) {  // alone and the pool is all its own: capacity reached
        fail(s, FinishReason::length,
             "KV cache full: the sequence holds all " + std::to_string(pool_.num_blocks()) + " blocks", plan);
        dropped = true;
        break;
      }
      preempt(victim, plan);
      if (victim == s) {
        dropped = true;
        break;
      }
    }
    if (dropped) break;  // everything after s was preempted before it
    const int64_t n = fit();
    const int64_t need = blocks_for(s->num_computed + n) - static_cast<int64_t>(s->blocks.size());
    TITAN_CHECK(pool_.allocate(need, s->blocks), "Scheduler: block allocation failed after fitting");
    plan.chunks.push_back({s, s->num_computed, n});
    plan.num_tokens += n;
    budget -= n;
    ++i;
  }

  // 2. Admit waiting sequences (not in a step that had to preempt).
  if (plan.preempted.empty()) {
    for (auto it = waiting_.begin();
         it != waiting_.end() && budget > 0 && static_cast<int64_t>(running_.size()) < cfg_.max_num_seqs;) {
      Sequence* s = *it;
      const Sequence* lead = s->leader;
      if (lead && lead->status != SeqStatus::finished && lead->num_computed < lead->num_prompt) {
        ++it;  // wait for sample 0's prompt blocks
        continue;
      }
      if (blocks_for(s->len()) > pool_.num_blocks()) {
        const std::string msg = fmt::format(
            "{} of {} tokens needs {} KV-cache blocks of {} tokens, the cache has {} (generator.kv_cache_bytes)",
            s->num_generated() ? "sequence" : "prompt", s->len(), blocks_for(s->len()), B, pool_.num_blocks());
        fail(s, s->num_generated() ? FinishReason::length : FinishReason::error, msg, plan);
        it = waiting_.erase(it);
        continue;
      }
      if (!admit(s, plan, budget)) break;
      it = waiting_.erase(it);
    }
  }
  if (states_) plan_snapshots(plan);
  return plan;
}

void Scheduler::plan_snapshots(StepPlan& plan) {
  const int64_t B = pool_.block_size();
  if (states_->num_snapshots() == 0) return;
  for (ScheduledChunk& c : plan.chunks) {
    const int64_t p = (c.start + c.count) / B * B;  // the last block boundary reached
    if (p <= c.start || p < B) continue;
    ensure_hashes(c.seq, p / B);
    const uint64_t h = c.seq->hashes[p / B - 1];
    if (states_->find(h) >= 0) continue;
    c.snapshot_slot = states_->reserve();
    c.snapshot_pos = p;
    c.snapshot_hash = h;
  }
}

void Scheduler::commit(const StepPlan& plan) {
  const int64_t B = pool_.block_size();
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence* s = c.seq;
    s->num_computed = c.start + c.count;
    const int64_t full = s->num_computed / B;
    ensure_hashes(s, full);
    for (int64_t b = s->num_registered; b < full; ++b) {
      const uint64_t parent = b ? s->hashes[b - 1] : 0;
      pool_.register_block(s->blocks[b], s->hashes[b], parent,
                           std::span<const int32_t>(s->tokens.data() + b * B, B));
    }
    s->num_registered = std::max(s->num_registered, full);
    if (c.snapshot_slot >= 0) states_->publish(c.snapshot_slot, c.snapshot_hash);
  }
}

}  // namespace titan::infer
