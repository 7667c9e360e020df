// Component overrides (models/common/overrides.h): an override switches the code a module
// runs (counted by override_calls) without changing the parameters. Checked against the
// default implementations on a tiny llama3 decoder: the composed reference attention
// gives the flash kernel's logits and gradients within fp32 rounding (a different
// summation order: the kernel's online softmax over KV blocks vs. a full softmax), the
// composed RoPE the fused one's bits (the documented contract of ops/rope.h), only on
// the modules the glob selects; the same on a tiny deepseek_v3 (MLA) and deepseek_v32
// (MLA + DSA) decoder. Bad entries and two entries claiming one module are one-line
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "tests/util/test_files.h"
#include "tests/util/titan_exe.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/core/error.h"
#include "titan/models/family.h"
#include "titan/models/common/decoder.h"
#include "titan/models/common/overrides.h"
#include "titan/models/mixers/attention.h"
#include "titan/ops/loss.h"

namespace titan::models {
namespace {

TransformerConfig tiny() {
  TransformerConfig c;
  c.family = "llama3";
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 72;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  return c;
}

ForwardBatch batch() {
  std::vector<std::vector<int32_t>> docs = {{5, 17, 3, 90, 44}, std::vector<int32_t>(40)};
  for (int i = 0; i < 40; ++i) docs[1][i] = (i * 37 + 11) % 97;
  return make_packed_batch(docs);
}

struct Outputs {
  std::vector<float> logits, grad;
};

// A tiny deepseek_v3 decoder (MLA, q low-rank, YaRN RoPE; dense layers) or, with
// dsa, deepseek_v32 (MLA + DeepSeek sparse attention keeping 8 keys).
TransformerConfig tiny_mla(bool dsa = false) {
  TransformerConfig c = tiny();
  c.family = dsa ? "deepseek_v32" : "deepseek_v3";
  c.num_key_value_heads = 4;
  c.kv_lora_rank = 32;
  c.q_lora_rank = 24;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 16;  // = head_dim (the RoPE tables)
  c.v_head_dim = 12;
  c.rope_scaling.rope_type = "yarn";
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_position_embeddings = 16;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 1.0;
  if (dsa) {
    c.index_topk = 8;
    c.index_n_heads = 2;
    c.index_head_dim = 16;
  }
  return c;
}

Outputs run(const std::vector<std::string>& overrides, std::vector<std::string>* resolved = nullptr,
            const TransformerConfig& cfg = tiny()) {
  Decoder m(cfg);
  m.init_weights(3);
  std::vector<std::string> r = apply_overrides(m, overrides);
  if (resolved) *resolved = r;
  ForwardBatch b = batch();
  Tensor logits = m.logits(m.forward(b));
  const int64_t T = b.num_tokens();
  std::vector<int32_t> t(T);
  for (int64_t i = 0; i < T; ++i) t[i] = static_cast<int32_t>((i * 5 + 2) % 97);
  cross_entropy(logits, Tensor::from_vector(t, {T}), -100).backward();
  Outputs out;
  out.logits = logits.to_vector<float>();
  out.grad = m.layers[0]->ffn_norm->weight.grad().to_vector<float>();
  return out;
}

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(a[i])));
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return err / mx;
}

TEST(Overrides, ReferenceAttentionTakesTheComposedPath) {
  const Outputs flash = run({});
  const int64_t before = override_calls("attention", "reference");
  std::vector<std::string> resolved;
  const Outputs ref = run({"attention=reference"}, &resolved);
  EXPECT_EQ(override_calls("attention", "reference") - before, 2);  // one forward through each of 2 layers
  EXPECT_EQ(resolved, std::vector<std::string>{"attention=reference:*"});
  ASSERT_EQ(ref.logits.size(), flash.logits.size());
  EXPECT_LT(max_rel(flash.logits, ref.logits), 1e-5);
  EXPECT_LT(max_rel(flash.grad, ref.grad), 1e-4);
  EXPECT_GT(max_rel(flash.logits, ref.logits), 0.0) << "the two attentions sum in different orders";
}

TEST(Overrides, ComposedRopeOnOneLayerHasTheFusedBits) {
  const Outputs fused = run({});
  const int64_t before = override_calls("rope", "composed");
  const Outputs composed = run({"rope=composed:layers.1.*"});
  EXPECT_EQ(override_calls("rope", "composed") - before, 1);
  EXPECT_EQ(std::memcmp(fused.logits.data(), composed.logits.data(), fused.logits.size() * 4), 0);
}

TEST(Overrides, ComposedSwiglu) {
  const Outputs fused = run({});
  const int64_t before = override_calls("swiglu", "composed");
  const Outputs composed = run({"swiglu=composed:layers.0.feed_forward"});
  EXPECT_EQ(override_calls("swiglu", "composed") - before, 1);
  EXPECT_LT(max_rel(fused.logits, composed.logits), 1e-5);
}

// MLA: the reference attention core is the composed attention over the same assembled
// (zero-padded) q, k, v; within fp32 rounding of the flash kernel. The composed RoPE on
// q_rope and the shared k_rope has the fused bits, on mla and on dsa layers.
TEST(Overrides, MlaReferenceAttentionTakesTheComposedPath) {
  const Outputs flash = run({}, nullptr, tiny_mla());
  const int64_t before = override_calls("attention", "reference");
  const Outputs ref = run({"attention=reference"}, nullptr, tiny_mla());
  EXPECT_EQ(override_calls("attention", "reference") - before, 2);
  const double dl = max_rel(flash.logits, ref.logits), dg = max_rel(flash.grad, ref.grad);
  std::printf("mla attention=reference vs flash: logits %.3g, ffn_norm grad %.3g (relative to the largest)\n", dl, dg);
  EXPECT_LT(dl, 1e-5);
  EXPECT_LT(dg, 1e-4);
  EXPECT_GT(dl, 0.0) << "the two attentions sum in different orders";
}

TEST(Overrides, MlaAndDsaComposedRopeHaveTheFusedBits) {
  for (bool dsa : {false, true}) {
    const Outputs fused = run({}, nullptr, tiny_mla(dsa));
    const int64_t before = override_calls("rope", "composed");
    const Outputs composed = run({"rope=composed:layers.0.*"}, nullptr, tiny_mla(dsa));
    EXPECT_EQ(override_calls("rope", "composed") - before, 1) << dsa;
    ASSERT_EQ(fused.logits.size(), composed.logits.size());
    EXPECT_EQ(std::memcmp(fused.logits.data(), composed.logits.data(), fused.logits.size() * 4), 0) << dsa;
    EXPECT_EQ(std::memcmp(fused.grad.data(), composed.grad.data(), fused.grad.size() * 4), 0) << dsa;
  }
}

// A dsa layer's attention core is its sparse kernel: attention=reference does not apply.
TEST(Overrides, ReferenceAttentionDoesNotApplyToDsa) {
  Decoder d(tiny_mla(true));
  try {
    apply_overrides(d, {"attention=reference"});
    ADD_FAILURE() << "attention=reference applied to a dsa model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matches no module that attention applies to (gqa attention, mla"),
              std::string::npos)
        << e.what();
  }
}

TEST(Overrides, ConflictsAndBadEntriesAreErrors) {
  Decoder m(tiny());
  auto message = [&](const std::vector<std::string>& o) {
    try {
      Decoder d(tiny());
      apply_overrides(d, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"attention=reference", "attention=flash:layers.0.*"})
                .find("'attention=reference:*' and 'attention=flash:layers.0.*' both claim module layers.0.attention"),
            std::string::npos);
  // Different components may claim the same module.
  EXPECT_EQ(message({"attention=reference", "rope=composed"}), "no error");
  EXPECT_NE(message({"attention"}).find("is not component=impl"), std::string::npos);
  EXPECT_NE(message({"attn=reference"}).find("unknown component 'attn'"), std::string::npos);
  EXPECT_NE(message({"attention=fast"}).find("unknown implementation 'fast' of attention (implementations: flash, reference)"),
            std::string::npos);
  EXPECT_NE(message({"attention=reference:layers.9.*"}).find("matches no module"), std::string::npos);
  EXPECT_NE(message({"swiglu=composed:layers.*.attention"}).find("matches no module"), std::string::npos);
}

TEST(Overrides, ListNamesEveryImplementationOnce) {
  const std::vector<OverrideInfo> all = list_overrides();
  ASSERT_EQ(all.size(), 6u);
  int defaults = 0;
  std::vector<std::string> trainer_only;
  for (const OverrideInfo& o : all) {
    defaults += o.is_default;
    if (!o.generator) trainer_only.push_back(o.component + "=" + o.impl);
  }
  EXPECT_EQ(defaults, 3);  // one default per component
  // The paged generator path has no reference attention (apply_generator_overrides).
  EXPECT_EQ(trainer_only, std::vector<std::string>{"attention=reference"});
  EXPECT_EQ(all.front().component, "attention");
}

// `titan train`: the run's config.toml records the resolved entries; a conflict is a
// one-line error with exit code 2.
TEST(Overrides, TrainRecordsThemAndRefusesConflicts) {
  const std::string dump = test::fresh_dir("overrides_train");
  const std::string base = "TITAN_NUM_THREADS=1 " + test::titan_exe() +
                           " train --recipe debugmodel --training.steps=2 --lr_scheduler.warmup_steps=1 "
                           "--validation.enabled=false --training.local_batch_size=2 --training.seq_len=32 "
                           "--checkpoint.export_hf=false --job.dump_folder=" + dump;
  ASSERT_EQ(std::system((base + " '--model.overrides=attention=reference:layers.0.*,rope=composed' > " + dump +
                         "/ok.log 2>&1").c_str()),
            0)
      << test::file_bytes(dump + "/ok.log");
  EXPECT_NE(test::file_bytes(dump + "/config.toml")
                .find(R"(overrides = ["attention=reference:layers.0.*", "rope=composed:*"])"),
            std::string::npos);
  const int rc = std::system((base + " '--model.overrides=attention=reference,attention=flash:layers.1.*' > " + dump +
                              "/bad.log 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_NE(test::file_bytes(dump + "/bad.log").find("both claim module layers.1.attention for attention"),
            std::string::npos);
}

// A titan HF export's config.json records the overrides (kHfOverridesKey); `titan train
// --model.hf_config` of it without model.overrides takes them, and records them.
TEST(Overrides, HfConfigRecordedOverridesReachTheTrainer) {
  const std::string dump = test::fresh_dir("overrides_hf_config");
  TransformerConfig c = tiny();
  c.vocab_size = 300;  // >= the byte tokenizer's 259
  HFConfig hf = config_to_hf(c);
  hf.extra[kHfOverridesKey] = std::vector<std::string>{"rope=composed:layers.1.*"};
  save_hf_config(dump + "/config.json", hf);
  EXPECT_EQ(hf_recorded_overrides(load_hf_config(dump + "/config.json"), "x"),
            std::vector<std::string>{"rope=composed:layers.1.*"});
  const std::string cmd = "TITAN_NUM_THREADS=1 " + test::titan_exe() +
                          " train --recipe debugmodel --training.steps=2 --lr_scheduler.warmup_steps=1 "
                          "--validation.enabled=false --training.local_batch_size=2 --training.seq_len=32 "
                          "--checkpoint.export_hf=false --model.hf_config=" + dump + "/config.json --job.dump_folder=" +
                          dump + "/run > " + dump + "/train.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::file_bytes(dump + "/train.log");
  EXPECT_NE(test::file_bytes(dump + "/run/config.toml").find(R"(overrides = ["rope=composed:layers.1.*"])"),
            std::string::npos);
  hf.extra[kHfOverridesKey] = "rope=composed";
  try {
    hf_recorded_overrides(hf, "export/config.json");
    ADD_FAILURE() << "a string was taken for the list";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json export/config.json: titan_model_overrides must be a list"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace titan::models
