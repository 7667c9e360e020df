// Vocabulary parallelism of an Embedding module without changing its type: a module
// registered here holds rows [vocab_start, vocab_start + num) of a vocabulary of
// vocab_size ids, and Embedding::forward then looks up only those ids, giving zero
// rows for the others (embedding_vocab_shard, ops/vocab_parallel.h). Set by tensor
// parallelism (titan/distributed/tensor_parallel.h) on its rank's model.
#pragma once
#include <cstdint>
#include <optional>

namespace titan::models {

class Embedding;

struct VocabShard {
  int64_t vocab_start = 0, vocab_size = 0;
};

// Registers (or with nullopt removes) e's shard. The caller keeps e alive while set.
// Throws titan::Error when the rows do not fit in the vocabulary.
void set_vocab_shard(const Embedding& e, std::optional<VocabShard> shard);
std::optional<VocabShard> vocab_shard(const Embedding& e);

}  // namespace titan::models
