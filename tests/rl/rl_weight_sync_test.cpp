// sync_weights / weights_bitwise_equal: after SGD steps on the trainer's Decoder, a sync
// makes the generator's weights bitwise equal and its logits on a packed batch bitwise
// equal to the trainer's (llama3- and qwen3-style, tied embeddings); an f32 -> bf16
// generator parameter gets RNE rounding; a mismatched architecture throws naming the
// parameter and leaves the generator untouched.
#include <gtest/gtest.h>

#include <cstring>

#include "titan/autograd/node.h"
#include "titan/models/common/decoder.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/loss.h"
#include "titan/rl/weight_sync.h"

namespace titan::rl {
namespace {

using models::Decoder;
using models::TransformerConfig;

TransformerConfig tiny(const std::string& fam) {
  TransformerConfig c;
  c.family = fam;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  if (fam == "qwen3") c.qk_norm = true, c.tie_word_embeddings = true, c.head_dim = 16;
  return c;
}

const std::vector<std::vector<int32_t>> kDocs = {
    {3, 14, 15, 9, 2, 6}, {5, 35, 8}, {9, 7, 9, 3, 2, 38, 4, 6, 26}};

// A few plain SGD steps on next-token cross entropy: every parameter moves.
void train_steps(Decoder& m, int steps) {
  models::ForwardBatch batch = models::make_packed_batch(kDocs);
  const auto tok = batch.tokens.to_vector<int32_t>();
  std::vector<int32_t> tgt(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) tgt[i] = (tok[i] * 5 + 3) % 61;
  const Tensor targets = Tensor::from_vector(tgt, {static_cast<int64_t>(tgt.size())});
  for (int s = 0; s < steps; ++s) {
    m.zero_grad();
    Tensor loss = cross_entropy(m.logits(m.forward(batch)), targets);
    loss.backward();
    autograd::NoGradGuard ng;
    for (auto& [name, p] : m.named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      add_(p, p.grad(), -0.05);
    }
  }
}

Tensor logits_of(const Decoder& m) {
  autograd::NoGradGuard ng;
  return m.logits(m.forward(models::make_packed_batch(kDocs)));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}

TEST(WeightSync, SyncMakesWeightsAndLogitsBitwiseEqual) {
  for (const std::string fam : {"llama3", "qwen3"}) {
    SCOPED_TRACE(fam);
    Decoder trainer(tiny(fam)), generator(tiny(fam));
    trainer.init_weights(1);
    generator.init_weights(1);
    EXPECT_TRUE(weights_bitwise_equal(trainer, generator));
    train_steps(trainer, 2);
    EXPECT_FALSE(weights_bitwise_equal(trainer, generator));
    EXPECT_FALSE(same_bits(logits_of(trainer), logits_of(generator)));

    int64_t want_bytes = 0;
    for (auto& [n, p] : generator.named_parameters())
      want_bytes += static_cast<int64_t>(p.nbytes());
    EXPECT_EQ(sync_weights(trainer, generator), want_bytes);
    EXPECT_TRUE(weights_bitwise_equal(trainer, generator));
    EXPECT_TRUE(same_bits(logits_of(trainer), logits_of(generator)));
    // the generator's parameters keep their own storage (a copy, not aliasing)
    EXPECT_NE(trainer.named_parameters()[0].second.data_ptr(),
              generator.named_parameters()[0].second.data_ptr());

    // a second round: train on, sync again
    train_steps(trainer, 1);
    EXPECT_FALSE(weights_bitwise_equal(trainer, generator));
    sync_weights(trainer, generator);
    EXPECT_TRUE(weights_bitwise_equal(trainer, generator));
    EXPECT_TRUE(same_bits(logits_of(trainer), logits_of(generator)));
  }
}

// A generator holding a parameter in bf16 (compute_dtype bf16) gets the RNE rounding.
TEST(WeightSync, F32ToBf16RoundsToNearestEven) {
  Decoder trainer(tiny("llama3")), generator(tiny("llama3"));
  trainer.init_weights(3);
  Tensor p = generator.parameter("layers.0.feed_forward.w1.weight");
  {  // turn this one parameter into bf16 storage (test-only surgery on the impl)
    Tensor b = Tensor::zeros(p.shape(), DType::bf16);
    p.unsafe_impl()->storage = b.storage();
    p.unsafe_impl()->dtype = DType::bf16;
    p.unsafe_impl()->offset = 0;
  }
  sync_weights(trainer, generator);
  const Tensor src = trainer.parameter("layers.0.feed_forward.w1.weight");
  const float* s = src.data<float>();
  const uint16_t* d = p.data<uint16_t>();
  for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(d[i], f32_to_bf16(s[i])) << i;
  EXPECT_FALSE(weights_bitwise_equal(trainer, generator));  // dtypes differ
  // the reverse direction (bf16 trainer -> f32 generator) is refused
  EXPECT_THROW(sync_weights(generator, trainer), Error);
}

TEST(WeightSync, MismatchedArchitectureThrows) {
  Decoder trainer(tiny("llama3"));
  trainer.init_weights(5);
  auto expect_error = [&](const TransformerConfig& gc, const std::string& what) {
    Decoder gen(gc);
    gen.init_weights(6);
    std::vector<Tensor> before;
    for (auto& [n, p] : gen.named_parameters()) before.push_back(p.clone());
    try {
      sync_weights(trainer, gen);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sync_weights"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    size_t i = 0;  // nothing written
    for (auto& [n, p] : gen.named_parameters()) EXPECT_TRUE(same_bits(p, before[i++])) << n;
    EXPECT_FALSE(weights_bitwise_equal(trainer, gen));
  };
  TransformerConfig c = tiny("llama3");
  c.intermediate_size = 64;
  expect_error(c,
               "'layers.0.feed_forward.w1.weight' has shape [48, 32] in the trainer but [64, 32]");
  c = tiny("llama3");
  c.num_hidden_layers = 3;
  expect_error(c, "parameters");
  c = tiny("llama3");
  c.qk_norm = true;  // extra q_norm/k_norm parameters
  expect_error(c, "trainer has 21 parameters but generator has 25");
  c = tiny("llama3");
  c.vocab_size = 62;
  expect_error(c, "tok_embeddings.weight");
}

}  // namespace
}  // namespace titan::rl
