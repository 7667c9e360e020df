// The trainer side of one RL step, before the optimizer: rollouts -> packed training
// sequences (one per turn: prompt_ids + completion_ids, loss only on the completion
// tokens) -> microbatches by token budget -> the trainer's packed cu_seqlens forward
// (autograd on) -> THE logprob function on the rows that predict each completion
// token -> policy_loss (PPO-clip / DAPO, old logprobs = the generator's) -> backward
// (gradients accumulate in the parameters' .grad).
//
// Every step also measures the trainer/generator gap on the tokens it trains:
// logprob_diff_max / _mean = max / mean |logp_train - logp_gen| (0 exactly when the
// two sides are bitwise equal), kl_gen_train = mean(logp_gen - logp_train). For MoE
// models, routing_mismatch_frac = the share of trained tokens whose trainer-side top-k
// experts (any MoE layer) differ from the generator's (TurnTokens::routed_experts; 0 when
// the rollouts carry no routing).
#pragma once
#include <cstdint>
#include <vector>

#include "titan/distributed/fsdp.h"
#include "titan/distributed/process_group.h"
#include "titan/distributed/tensor_parallel.h"
#include "titan/models/common/decoder.h"
#include "titan/rl/policy_loss.h"
#include "titan/rl/rollouter.h"

namespace titan::rl {

struct PolicyUpdateSettings {
  PolicyLossConfig loss;
  double temperature = 1.0;          // the generator's logprob temperature (sampling temperature; 1 when greedy)
  int64_t microbatch_tokens = 4096;  // most packed tokens per forward (a longer single sequence runs alone)
};

struct PolicyUpdateStats {
  double loss = 0;  // sum over microbatches of the (whole-step normalised) loss
  double logprob_diff_max = 0, logprob_diff_mean = 0, kl_gen_train = 0;
  double routing_mismatch_frac = 0;
  double entropy = 0;  // mean token entropy (nats) of the trainer distribution at `temperature`
  double clip_frac = 0, ratio_mean = 0, ratio_max = 0, kl_ref_mean = 0;
  int64_t tokens = 0;          // trained (completion) tokens
  int64_t packed_tokens = 0;   // all forward tokens (prompts included)
  int64_t sequences = 0, microbatches = 0;
};

// The trainer's data parallelism (FSDP over dp ranks, `titan rl` under mpirun). Every
// dp rank is given the same rollouts; the step's microbatches are cut as on one rank,
// and microbatch j is processed by dp rank j mod dp (the assignment of `titan train`),
// so that FullyShard's rank-ordered gradient sum adds the microbatch gradients in the
// order of a 1-rank run's accumulation (fsdp.h). A rank left without a microbatch in
// the last round takes part through FullyShard::skip_microbatch. The statistics of
// every microbatch are exchanged over `dp` and combined in microbatch order, so every
// rank returns the 1-rank PolicyUpdateStats bit for bit.
//
// With tp (tensor parallelism, no sequence parallelism): the policy is the rank's tp
// slice (TensorParallel::build) and the ranks of a tp group share one dp rank, so they
// run the same microbatches. The LM head's vocabulary pieces (T, V/P) are gathered
// over tp inside autograd (the backward hands each rank the gradient of its own
// columns, and the gradient of the hidden states is summed over tp on its way in, as
// TensorParallel::loss does), and THE logprobs are taken from the full (T, V) logits
// (cross_entropy). The partial gradients of replicated parameters
// (TensorParallel::reduce_partial_grads) are summed before each microbatch's FSDP
// reduce-scatter.
struct DataParallelShare {
  distributed::FullyShard* fsdp = nullptr;  // the policy's parameters, sharded over dp
  distributed::ProcessGroup* dp = nullptr;  // the dp group (dp_shard) of the trainer's mesh
  distributed::TensorParallel* tp = nullptr;  // tp > 1: the policy's tensor parallelism
  distributed::TpComm* tp_comm = nullptr;     // its tp group
};

// Forward + loss + backward over `rollouts[i]` with advantage advantages[i] (applied
// to every completion token of every turn of that rollout). ref: the frozen reference
// policy for the KL term (needed iff settings.loss.kl_coef > 0). Gradients are added
// to policy's .grad (zero them before). Turns without completion tokens are skipped.
// With `dp` (FSDP): gradients go to the FSDP shards' .grad instead, and the
// collectives of `dp` run (DataParallelShare); every dp rank must call it with the
// same arguments. Sums over tokens are formed per microbatch and then added in
// microbatch order (with or without dp).
// Throws titan::Error when sizes disagree (a turn whose logprobs count differs from
// its completion_ids, advantages of another length, kl_coef > 0 without ref).
PolicyUpdateStats policy_update_backward(models::Decoder& policy, const models::Decoder* ref,
                                         const std::vector<const TokenRollout*>& rollouts,
                                         const std::vector<double>& advantages, const PolicyUpdateSettings& s,
                                         const DataParallelShare* dp = nullptr);

}  // namespace titan::rl
