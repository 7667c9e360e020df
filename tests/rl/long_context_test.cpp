// The long_context workload (titan/rl/long_context.h): seeded haystacks with distinct
// keys and the answer in exactly one line, 4k- and 16k-token prompts in the byte_chat
// tokenizer, the exact-match rubric (a throwing reward scored 0 with the reason),
// and a GRPO run on ~2k-token prompts prefilled in 512-token chunks with
// logprob_diff_max == 0.0 at every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/rl/rl_test_util.h"
#include "tests/util/test_files.h"
#include "titan/config/recipes.h"
#include "titan/core/error.h"
#include "titan/data/tokenizer.h"
#include "titan/rl/controller.h"
#include "titan/rl/long_context.h"
#include "titan/rl/rollouter.h"
#include "titan/rl/sft_data.h"
#include "titan/rl/tasks.h"
#include "titan/train/document_sources.h"

namespace titan::rl {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

TEST(LongContext, HaystacksAreSeededWithOneLineHoldingTheAnswer) {
  const json cfg{{"num_samples", 50}, {"num_validation", 10}, {"min_pairs", 8}, {"max_pairs", 24}};
  const TaskSpec t = make_task("long_context", cfg);
  std::set<int64_t> sizes;
  for (int64_t i = 0; i < t.train->size(); ++i) {
    const TaskSample s = t.train->get(i);
    EXPECT_EQ(s.to_json(), t.train->get(i).to_json());
    const json& pairs = s.prompt["pairs"];
    sizes.insert(static_cast<int64_t>(pairs.size()));
    EXPECT_GE(pairs.size(), 8u);
    EXPECT_LE(pairs.size(), 24u);
    std::set<std::string> keys;
    for (const json& p : pairs) {
      EXPECT_TRUE(keys.insert(p[0].get<std::string>()).second) << s.id;
      EXPECT_EQ(p[1].get<std::string>().size(), 3u);
    }
    const std::string key = s.prompt["query"], answer = s.reference["answer"];
    EXPECT_EQ(pairs[s.reference["position"].get<size_t>()][1], answer);
    const std::string prompt = long_context_prompt(s);
    EXPECT_EQ(count(prompt, "\n" + key + ": " + answer + "\n") + (prompt.rfind(key + ": " + answer + "\n", 0) == 0), 1u);
    EXPECT_EQ(count(prompt, "\n"), pairs.size() + 1);
  }
  EXPECT_GE(sizes.size(), 8u);  // the distractor count varies
  EXPECT_NE(t.validation->get(0).to_json()["prompt"], t.train->get(0).to_json()["prompt"]);
}

TEST(LongContext, LetterKeysAreDistinctSingleLettersAndTheSyllableSamplesStay) {
  const json base{{"num_samples", 40}, {"num_validation", 4}, {"min_pairs", 20}, {"max_pairs", 52}};
  json letters = base;
  letters["key_style"] = "letter";
  const TaskSpec t = make_task("long_context", letters), syl = make_task("long_context", base);
  json explicit_syl = base;
  explicit_syl["key_style"] = "syllables";
  const TaskSpec syl2 = make_task("long_context", explicit_syl);
  for (int64_t i = 0; i < t.train->size(); ++i) {
    const TaskSample s = t.train->get(i);
    std::set<std::string> keys;
    for (const json& p : s.prompt["pairs"]) {
      const std::string k = p[0].get<std::string>();
      ASSERT_EQ(k.size(), 1u) << s.id;
      EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(k[0]))) << k;
      EXPECT_TRUE(keys.insert(k).second) << s.id;
    }
    EXPECT_EQ(s.prompt["pairs"][s.reference["position"].get<size_t>()][1], s.reference["answer"]);
    EXPECT_EQ(syl.train->get(i).to_json(), syl2.train->get(i).to_json());  // "syllables" is the default
    EXPECT_GE(syl.train->get(i).prompt["query"].get<std::string>().size(), 4u);
  }
  letters["max_pairs"] = 53;  // more pairs than letters
  EXPECT_THROW(make_task("long_context", letters), Error);
  letters["max_pairs"] = 8;
  letters["key_style"] = "digits";
  EXPECT_THROW(make_task("long_context", letters), Error);
}

TEST(LongContext, FillerHaystackHoldsTheNeedleAsItsOnlyValueLine) {
  const json cfg{{"num_samples", 60}, {"num_validation", 4}, {"min_pairs", 8}, {"max_pairs", 24},
                 {"haystack", "filler"}};
  const TaskSpec t = make_task("long_context", cfg);
  std::set<int64_t> sizes, positions;
  for (int64_t i = 0; i < t.train->size(); ++i) {
    const TaskSample s = t.train->get(i);
    EXPECT_EQ(s.to_json(), t.train->get(i).to_json());
    const std::string key = s.prompt["query"], answer = s.reference["answer"];
    const std::string prompt = long_context_prompt(s);
    const std::string list = prompt.substr(0, prompt.find("\n\nWhat is the value of "));
    std::vector<std::string> lines;
    for (size_t a = 0, b; a <= list.size(); a = b + 1) {
      b = list.find('\n', a);
      if (b == std::string::npos) b = list.size();
      lines.push_back(list.substr(a, b - a));
    }
    sizes.insert(static_cast<int64_t>(lines.size()));
    EXPECT_GE(lines.size(), 8u);
    EXPECT_LE(lines.size(), 24u);
    const size_t pos = s.reference["position"].get<size_t>();
    ASSERT_LT(pos, lines.size()) << s.id;
    EXPECT_EQ(lines[pos], key + ": " + answer) << s.id;  // the needle, at its position
    positions.insert(static_cast<int64_t>(pos));
    for (size_t j = 0; j < lines.size(); ++j) {
      if (j == pos) continue;
      EXPECT_FALSE(lines[j].empty());
      for (const char c : lines[j]) EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) || c == ' ') << lines[j];
    }
    EXPECT_EQ(answer.size(), 3u);
    EXPECT_TRUE(std::all_of(answer.begin(), answer.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }));
    EXPECT_EQ(t.reference_replies(s), std::vector<std::string>{"<answer>" + answer + "</answer>"});
  }
  EXPECT_GE(sizes.size(), 8u);      // the haystack's length varies
  EXPECT_GE(positions.size(), 10u);  // and so does the needle's line
  json two = cfg;
  two["questions"] = 2;  // one needle: one question
  EXPECT_THROW(make_task("long_context", two), Error);
  two["questions"] = 1;
  two["haystack"] = "essays";
  EXPECT_THROW(make_task("long_context", two), Error);
}

TEST(LongContext, BuildsFourAndSixteenThousandTokenPrompts) {
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  for (const auto& [pairs, lo, hi] : {std::tuple{360, 3600, 4500}, std::tuple{1450, 15000, 17500}}) {
    const TaskSpec t = make_task("long_context", json{{"min_pairs", pairs}, {"max_pairs", pairs},
                                                      {"num_samples", 4}, {"num_validation", 1}});
    const TaskSample s = t.train->get(1);
    Rollout r = t.demonstration_rollout(s, tok.get());
    t.rubric.score(r);
    EXPECT_EQ(r.total_reward, 1.0);
    EXPECT_GE(r.prompt_tokens[0], lo) << pairs;
    EXPECT_LE(r.prompt_tokens[0], hi) << pairs;
    std::printf("%d pairs: %lld prompt tokens\n", pairs, static_cast<long long>(r.prompt_tokens[0]));
  }
}

TEST(LongContext, ExactMatchAndBadInput) {
  const TaskSpec t = make_task("long_context", json{{"num_samples", 4}, {"num_validation", 1}});
  const TaskSample s = t.train->get(0);
  const std::string answer = s.reference["answer"];
  auto score = [&](const std::string& reply) {
    std::unique_ptr<MessageEnv> env = t.make_env();
    Rollout r = run_episode(*env, s, scripted_generator({reply}), {.max_turns = 1});
    t.rubric.score(r);
    return r;
  };
  EXPECT_EQ(score("<answer>" + answer + "</answer>").total_reward, 1.0);
  EXPECT_EQ(score("<answer> " + answer + " </answer>").total_reward, 1.0);
  EXPECT_EQ(score(answer).total_reward, 0.0);
  EXPECT_EQ(score("<answer>" + answer + "0</answer>").total_reward, 0.0);
  Rollout r = score("<answer>" + answer + "</answer>");
  r.sample.reference.erase("answer");
  t.rubric.score(r);
  EXPECT_EQ(r.total_reward, 0.0);
  EXPECT_NE(r.rewards[0].error.find("reference.answer"), std::string::npos) << r.rewards[0].error;
  EXPECT_THROW(make_task("long_context", json{{"min_pairs", 0}}), Error);
  EXPECT_THROW(make_task("long_context", json{{"min_pairs", 10}, {"max_pairs", 5}}), Error);
  EXPECT_THROW(make_task("long_context", json{{"value_digits", 12}}), Error);
  EXPECT_THROW(make_task("long_context", json{{"pairs", 12}}), Error);
}

TEST(LongContext, SeveralQuestionsAreTurnsAboutDistinctKeysAndTheRewardIsTheShareRight) {
  const json base{{"num_samples", 30}, {"num_validation", 2}, {"min_pairs", 4}, {"max_pairs", 12}};
  json multi = base;
  multi["questions"] = 4;
  const TaskSpec one = make_task("long_context", base), four = make_task("long_context", multi);
  EXPECT_EQ(one.max_turns, 1);
  EXPECT_EQ(four.max_turns, 4);
  for (int64_t i = 0; i < four.train->size(); ++i) {
    const TaskSample s = four.train->get(i), s1 = one.train->get(i);
    // The first question is the one-question sample's.
    EXPECT_EQ(s.prompt["pairs"], s1.prompt["pairs"]);
    EXPECT_EQ(s.prompt["query"], s1.prompt["query"]);
    EXPECT_EQ(s.reference["answer"], s1.reference["answer"]);
    EXPECT_FALSE(s1.prompt.contains("queries"));
    const std::vector<std::string> keys = long_context_queries(s);
    ASSERT_EQ(keys.size(), 4u);
    EXPECT_EQ(keys[0], s.prompt["query"].get<std::string>());
    EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 4u) << s.id;
    std::map<std::string, std::string> table;
    for (const json& p : s.prompt["pairs"]) table[p[0].get<std::string>()] = p[1].get<std::string>();
    for (size_t q = 0; q < 4; ++q) EXPECT_EQ(s.reference["answers"][q].get<std::string>(), table.at(keys[q]));
    // The demonstration: the list with the first question, then one user turn per question.
    const std::vector<ChatMessage> conv = four.demonstration(s);
    ASSERT_EQ(conv.size(), 2u + 2 * 4 - 1);
    EXPECT_EQ(conv[1].content, long_context_prompt(s));
    for (size_t q = 0; q < 4; ++q) {
      EXPECT_EQ(conv[2 + 2 * q].role, "assistant");
      EXPECT_EQ(conv[2 + 2 * q].content, "<answer>" + table.at(keys[q]) + "</answer>");
      if (q > 0) {
        EXPECT_EQ(conv[1 + 2 * q].content, "What is the value of " + keys[q] + "?");
      }
    }
  }
  // exact_match = the share of questions whose last <answer> is right.
  const TaskSample s = four.train->get(3);
  const std::vector<std::string> want = long_context_reference_replies(s, "answer");
  auto score = [&](std::vector<std::string> replies) {
    std::unique_ptr<MessageEnv> env = four.make_env();
    Rollout r = run_episode(*env, s, scripted_generator(std::move(replies)), {.max_turns = 4});
    four.rubric.score(r);
    return r.total_reward;
  };
  EXPECT_EQ(score(want), 1.0);
  EXPECT_EQ(score({want[0], "<answer>x</answer>", want[2], "no tag"}), 0.5);
  EXPECT_EQ(score({"<answer>x</answer>" + want[0], "", "", want[3]}), 0.5);  // the last block counts
  json bad = multi;
  bad["questions"] = 5;  // more than min_pairs
  EXPECT_THROW(make_task("long_context", bad), Error);
  bad["questions"] = 0;
  EXPECT_THROW(make_task("long_context", bad), Error);
}

TEST(LongContext, QuoteRepliesCopyTheNeedleLineBeforeTheAnswer) {
  json cfg{{"num_samples", 8}, {"num_validation", 2}, {"min_pairs", 3}, {"max_pairs", 6}, {"questions", 2},
           {"reference_reply", "quote"}};
  const TaskSpec t = make_task("long_context", cfg);
  for (int64_t i = 0; i < t.train->size(); ++i) {
    const TaskSample s = t.train->get(i);
    const std::vector<std::string> keys = long_context_queries(s);
    const std::vector<ChatMessage> conv = t.demonstration(s);
    for (size_t q = 0; q < keys.size(); ++q) {
      const std::string v = s.reference["answers"][q];
      const std::string reply = conv[2 + 2 * q].content;
      EXPECT_EQ(reply, keys[q] + ": " + v + "\n<answer>" + v + "</answer>");
      EXPECT_NE(long_context_prompt(s).find(keys[q] + ": " + v + "\n"), std::string::npos);  // a line of the list
    }
    Rollout r = t.demonstration_rollout(s);
    t.rubric.score(r);
    EXPECT_EQ(r.total_reward, 1.0);
  }
  cfg["reference_reply"] = "cite";
  EXPECT_THROW(make_task("long_context", cfg), Error);
}

// One document per demonstration (sft_documents = "conversation"): the chat
// template's render of the conversation, every reply and its <|im_end|> in the loss.
TEST(LongContext, ConversationSftDocumentsPutEveryReplyInTheLoss) {
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer("byte_chat");
  const json cfg{{"num_samples", 6}, {"num_validation", 2}, {"min_pairs", 4}, {"max_pairs", 8}, {"questions", 3},
                 {"reference_reply", "quote"}};
  const TaskSpec t = make_task("long_context", cfg);
  const data::MaskedDocuments whole = sft_documents(t, *t.train, *tok, {.whole_conversation = true});
  ASSERT_EQ(whole.size(), 6);
  EXPECT_EQ(sft_documents(t, *t.train, *tok).size(), 18);  // the default: one per turn
  const int32_t im_end = tok->token_to_id("<|im_end|>");
  for (int64_t d = 0; d < 6; ++d) {
    const TaskSample s = t.train->get(d);
    const int64_t o = whole.offsets[d], len = whole.doc_len(d);
    const std::vector<int32_t> ids(whole.tokens.begin() + o, whole.tokens.begin() + o + len);
    const std::vector<ChatMessage> conv = t.demonstration(s);
    std::string text = tok->apply_chat_template(conv, {.add_generation_prompt = false, .enable_thinking = false});
    ASSERT_EQ(text.substr(text.size() - 1), "\n");
    EXPECT_EQ(tok->decode(ids), text.substr(0, text.size() - 1)) << s.id;  // ends with the last <|im_end|>
    // The masked tokens are the replies, each with its <|im_end|>, in order, and the
    // token before each reply is the end of its prompt ("\n" after "assistant" or
    // after the last reply's empty think block).
    std::vector<int32_t> in_loss, want;
    for (int64_t k = 0; k < len; ++k) {
      if (whole.loss_mask[o + k] == 0) continue;
      in_loss.push_back(ids[k]);
      if (k > 0 && whole.loss_mask[o + k - 1] == 0) {
        EXPECT_EQ(ids[k - 1], static_cast<int32_t>('\n'));
      }
    }
    for (const std::string& reply : long_context_reference_replies(s, "quote")) {
      tok->encode_append(reply, /*parse_special=*/false, want);
      want.push_back(im_end);
    }
    EXPECT_EQ(in_loss, want) << s.id;
  }
  // The dataset kind reads sft_documents from training.task_config, not the task.
  register_sft_datasets();
  config::JobConfig job;
  job.training.task = "long_context";
  job.training.task_config = json{{"num_samples", 6}, {"num_validation", 2}, {"min_pairs", 4}, {"max_pairs", 8},
                                  {"questions", 3}, {"reference_reply", "quote"}, {"sft_documents", "conversation"}}
                                 .dump();
  const train::DocumentSourceFn src = train::find_document_source("rl_task_sft");
  ASSERT_TRUE(static_cast<bool>(src));
  const data::MaskedDocuments via = src(job, *tok, data::Split::train);
  EXPECT_EQ(via.tokens, whole.tokens);
  EXPECT_EQ(via.loss_mask, whole.loss_mask);
  job.training.task_config = json{{"questions", 1}, {"sft_documents", "per_turn"}}.dump();
  EXPECT_EQ(src(job, *tok, data::Split::validation).size(), 256);
  job.training.task_config = json{{"sft_documents", "whole"}}.dump();
  EXPECT_THROW(src(job, *tok, data::Split::validation), Error);
}

// The recipe chain: warmup SFT (1 line) -> SFT (1-4 lines, from the warmup's export)
// -> GRPO (8-24 lines, from the SFT's export), the same task otherwise. The GRPO
// recipe's reply budget holds the SFT teacher's whole reply (+ <|im_end|>) on every
// sample of its task: a reply cut at max_tokens scores 0, so a budget below it would
// make every rollout fail whatever the policy.
TEST(LongContext, GrpoRecipeMaxTokensHoldsTheTeachersReply) {
  const config::JobConfig grpo = config::make_recipe("long_context_grpo");
  const config::JobConfig sft = config::make_recipe("long_context_sft");
  const config::JobConfig warmup = config::make_recipe("long_context_warmup_sft");
  EXPECT_EQ(warmup.checkpoint.initial_load_path, "");
  EXPECT_EQ(sft.checkpoint.initial_load_path, "outputs/long_context_warmup_sft/hf");
  EXPECT_EQ(grpo.rl.init_from, "outputs/long_context_sft/hf");
  json g = json::parse(grpo.rl.env_config), s = json::parse(sft.training.task_config),
       w = json::parse(warmup.training.task_config);
  EXPECT_EQ(w["max_pairs"], 1);
  EXPECT_GT(g["min_pairs"].get<int>(), s["max_pairs"].get<int>());  // longer than any SFT haystack
  for (json* j : {&g, &s, &w}) {
    EXPECT_EQ((*j)["haystack"], "filler");
    j->erase("min_pairs");
    j->erase("max_pairs");
  }
  EXPECT_EQ(g, s);
  EXPECT_EQ(w, s);
  const std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(grpo.model.tokenizer_path);
  const TaskSpec t = make_task("long_context", json::parse(grpo.rl.env_config));
  size_t longest = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const std::vector<ChatMessage> conv = t.demonstration(t.validation->get(i));
    longest = std::max(longest, tok->encode(conv.back().content).size() + 1);
  }
  EXPECT_GE(grpo.generator.max_tokens, static_cast<int64_t>(longest));
}

TEST(LongContext, GrpoOnChunkedPrefillPromptsHasExactLogprobParity) {
  const fs::path dump = test::fresh_dir("long_context_grpo");
  config::JobConfig c = test_util::tiny_job(dump);
  const json cfg{{"num_samples", 64}, {"num_validation", 4}, {"min_pairs", 150}, {"max_pairs", 180}};
  c.training.seq_len = 2560;
  c.training.steps = 2;
  c.generator.max_tokens = 8;
  c.generator.max_num_batched_tokens = 512;  // every prompt is prefilled in 4+ chunks
  c.generator.kv_cache_bytes = 32 << 20;
  c.rl.env = "long_context";
  c.rl.env_config = cfg.dump();
  c.rl.max_turns = 1;
  c.rl.val_freq = 0;
  c.rl.microbatch_tokens = 4096;
  TaskSpec t = make_task("long_context", cfg);
  t.rubric = Rubric({RewardFn{"lower_share", 1.0, test_util::lower_share}});
  RLController ctl(c, t);
  EXPECT_EQ(ctl.run({.print = false}).steps_done, 2);
  const std::vector<json> rows = test_util::step_rows(dump);
  ASSERT_EQ(rows.size(), 2u);
  for (const json& row : rows) {
    EXPECT_EQ(row["logprob_diff_max"].get<double>(), 0.0) << row.dump();
    EXPECT_GT(row["trained_tokens"].get<int64_t>(), 0);
  }
  for (const json& l : test_util::read_jsonl(dump / "rollouts.jsonl"))
    EXPECT_GT(l["prompt"].get<std::string>().size(), 1500u);
}

}  // namespace
}  // namespace titan::rl
