// SFT data from an RL task: demonstrations become masked documents (loss on the
// assistant's tokens only), packed whole into rows without attention or targets
// across documents; the trainer runs on them (training.dataset=rl_task_sft) and its
// HF export reloads with the byte_chat tokenizer for the rollouter.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "titan/config/recipes.h"
#include "titan/core/error.h"
#include "titan/data/masked_documents.h"
#include "titan/infer/engine.h"
#include "titan/infer/model_loader.h"
#include "titan/rl/alphabet_sort.h"
#include "titan/rl/rollouter.h"
#include "titan/rl/sft_data.h"
#include "titan/train/trainer.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TaskSpec small_task(int max_turns = 1) {
  return make_task("alphabet_sort", json{{"num_samples", 40}, {"num_validation", 8}, {"max_names", 3},
                                         {"min_turns", 1}, {"max_turns", max_turns}});
}

TEST(SftDocuments, OnePromptPlusReplyPerAssistantTurnWithTheReplyMasked) {
  auto tok = data::load_tokenizer("byte_chat");
  const TaskSpec task = small_task(2);
  const data::MaskedDocuments docs = sft_documents(task, *task.train, *tok, {.max_samples = 6});
  int64_t expected_docs = 0;
  int64_t d = 0;
  for (int64_t i = 0; i < 6; ++i) {
    const std::vector<ChatMessage> conv = task.demonstration(task.train->get(i));
    for (size_t a = 0; a < conv.size(); ++a) {
      if (conv[a].role != "assistant") continue;
      ++expected_docs;
      ASSERT_LT(d, docs.size());
      const std::vector<ChatMessage> before(conv.begin(), conv.begin() + a);
      const std::string prompt =
          tok->apply_chat_template(before, {.add_generation_prompt = true, .enable_thinking = false});
      const int64_t o = docs.offsets[d], len = docs.doc_len(d);
      const std::vector<int32_t> ids(docs.tokens.begin() + o, docs.tokens.begin() + o + len);
      EXPECT_EQ(tok->decode(ids), prompt + conv[a].content + "<|im_end|>");
      // The mask: 0 on the rendered prompt, 1 on the reply and its <|im_end|>.
      const int64_t P = static_cast<int64_t>(tok->encode(prompt).size());
      for (int64_t k = 0; k < len; ++k) EXPECT_EQ(docs.loss_mask[o + k], k >= P ? 1 : 0) << "doc " << d << " token " << k;
      EXPECT_EQ(ids.back(), tok->token_to_id("<|im_end|>"));
      ++d;
    }
  }
  EXPECT_EQ(docs.size(), expected_docs);
  EXPECT_GT(expected_docs, 6);  // some multi-turn samples
}

// Reference for one row of pack_masked_rows, written out per token.
TEST(MaskedDocuments, PackedRowsFollowTheDocumentsAndTheMask) {
  data::MaskedDocuments docs;
  docs.add(std::vector<int32_t>{1, 2, 3, 4, 5}, std::vector<uint8_t>{0, 0, 1, 1, 1});
  docs.add(std::vector<int32_t>{6, 7, 8}, std::vector<uint8_t>{0, 1, 0});
  docs.add(std::vector<int32_t>{9, 10, 11, 12, 13, 14, 15, 16, 17, 18}, std::vector<uint8_t>(10, 1));
  data::MaskedLoaderOptions o{.batch_size = 2, .seq_len = 8, .seed = 1, .shuffle = false, .pad_id = 99};
  const data::Batch b = data::pack_masked_rows(docs, {{0, 1}, {2}}, o);
  const int I = data::kIgnoreIndex;
  EXPECT_EQ(b.input.tokens.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(b.input.positions.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(b.targets.to_vector<int32_t>(), (std::vector<int32_t>{I, 3, 4, 5, I, 7, I, I, 10, 11, 12, 13, 14, 15, 16, I}));
  EXPECT_EQ(b.input.cu_seqlens.to_vector<int32_t>(), (std::vector<int32_t>{0, 5, 8, 16}));
  EXPECT_EQ(b.num_targets, 3 + 1 + 7);
  // Padding is a sequence of its own without targets.
  const data::Batch p = data::pack_masked_rows(docs, {{1}}, o);
  EXPECT_EQ(p.input.tokens.to_vector<int32_t>(), (std::vector<int32_t>{6, 7, 8, 99, 99, 99, 99, 99}));
  EXPECT_EQ(p.input.positions.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 4}));
  EXPECT_EQ(p.input.cu_seqlens.to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 8}));
  EXPECT_EQ(p.num_targets, 1);
  // Greedy rows: 5 + 3 fit in 8; the 10-token document is cut to 8.
  const std::vector<int64_t> order{0, 1, 2};
  EXPECT_EQ(data::pack_rows(docs, order, 8), (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 3}}));
  EXPECT_THROW(docs.add(std::vector<int32_t>{1}, std::vector<uint8_t>{}), Error);
}

TEST(MaskedDocuments, LoaderIsSeededAndResumes) {
  auto tok = data::load_tokenizer("byte_chat");
  const TaskSpec task = small_task();
  auto docs = std::make_shared<const data::MaskedDocuments>(sft_documents(task, *task.train, *tok));
  data::MaskedLoaderOptions o{.batch_size = 2, .seq_len = 512, .seed = 5};
  data::MaskedDocumentLoader a(docs, o), b(docs, o);
  std::vector<std::vector<int32_t>> seen;
  for (int i = 0; i < 12; ++i) seen.push_back(a.next().input.tokens.to_vector<int32_t>());  // crosses epochs
  for (int i = 0; i < 5; ++i) b.next();
  data::MaskedDocumentLoader c(docs, o);
  c.load_state(b.state());
  for (int i = 5; i < 12; ++i) EXPECT_EQ(c.next().input.tokens.to_vector<int32_t>(), seen[i]) << "batch " << i;
  EXPECT_NE(seen[0], seen[1]);
  data::MaskedLoaderOptions other = o;
  other.seed = 6;
  data::MaskedDocumentLoader d(docs, other);
  EXPECT_THROW(d.load_state(a.state()), Error);
}

TEST(SftTraining, TrainerRunsOnTaskDemonstrationsAndTheExportReloads) {
  register_sft_datasets();
  const fs::path dir = fs::temp_directory_path() / ("rl_sft_" + std::to_string(::getpid()));
  config::JobConfig c = config::alphabet_sort_sft();
  c.job.dump_folder = dir.string();
  c.model.dim = 32;
  c.model.n_layers = 1;
  c.model.n_heads = 2;
  c.model.n_kv_heads = 1;
  c.model.head_dim = 16;
  c.model.ffn_hidden_dim = 64;
  c.training.task_config = R"({"num_samples": 48, "num_validation": 8, "max_names": 3})";
  c.training.seq_len = 512;
  c.training.local_batch_size = 2;
  c.training.steps = 3;
  c.validation.freq = 3;
  c.validation.steps = 0;
  c.lr_scheduler.warmup_steps = 1;
  c.metrics.log_freq = 1;
  train::Trainer trainer(c);
  const train::TrainResult r = trainer.train();
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_TRUE(std::isfinite(r.final_loss));
  EXPECT_GT(r.final_val_loss, 0);
  EXPECT_LT(r.final_val_loss, std::log(263.0) + 1.0);
  infer::LoadedModel m = infer::load_hf_model((dir / "hf").string());
  EXPECT_EQ(m.tokenizer->kind(), "byte_chat");
  EXPECT_EQ(m.eos_token_ids, std::vector<int32_t>{260});
  Rollouter ro(small_task(), *m.tokenizer);
  infer::EngineConfig ec;
  ec.kv_cache_bytes = 8 << 20;
  infer::Engine engine(*m.model, m.tokenizer.get(), ec);
  const ValidationResult v = validation_reward(engine, ro, 2, {.max_turns = 1}, 8);
  EXPECT_EQ(v.episodes, 2);
  EXPECT_GE(v.reward_mean, 0.0);
  // Bad task settings name the field.
  config::JobConfig bad = c;
  bad.training.task_config = "{not json";
  try {
    train::Trainer t(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.task_config"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace titan::rl
