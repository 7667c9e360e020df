#include "titan/train/initial_load.h"

#include <filesystem>

#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/hf_weights.h"
#include "titan/checkpoint/sharded.h"
#include "titan/config/resolve.h"
#include "titan/core/error.h"
#include "titan/models/family.h"

namespace titan::train {

namespace {

// The first field in which the export's config and the model's differ, "" if none.
std::string first_difference(const models::TransformerConfig& a, const models::TransformerConfig& b) {
#define TITAN_SAME(f) \
  if (a.f != b.f) return fmt::format("{} (export {}, model {})", #f, a.f, b.f)
  TITAN_SAME(family);
  TITAN_SAME(vocab_size);
  TITAN_SAME(hidden_size);
  TITAN_SAME(intermediate_size);
  TITAN_SAME(num_hidden_layers);
  TITAN_SAME(num_attention_heads);
  TITAN_SAME(num_key_value_heads);
  TITAN_SAME(head_dim);
  TITAN_SAME(rms_norm_eps);
  TITAN_SAME(rope_theta);
  TITAN_SAME(qk_norm);
  TITAN_SAME(tie_word_embeddings);
#undef TITAN_SAME
  return "";
}

}  // namespace

void load_initial_weights(models::Decoder& model, const std::string& dir_in) {
  namespace fs = std::filesystem;
  const std::string dir = config::resolve_data_path(dir_in);
  TITAN_CHECK(fs::is_directory(dir), "checkpoint.initial_load_path='{}': '{}' is not a directory", dir_in, dir);
  const std::string cfg_path = dir + "/config.json";
  TITAN_CHECK(fs::is_regular_file(cfg_path), "checkpoint.initial_load_path='{}': no config.json in '{}'", dir_in,
              dir);
  const HFConfig hf = load_hf_config(cfg_path);
  const std::string diff = first_difference(models::config_from_hf(hf), model.config());
  TITAN_CHECK(diff.empty(),
              "checkpoint.initial_load_path='{}': the export's config differs from the model's in {}: set "
              "model.hf_config={} (or the model.* fields) to train the export's shape",
              dir_in, diff, cfg_path);
  const SafetensorsCheckpoint weights(dir);
  check_hf_weights_match_config(hf, weights, cfg_path);
  autograd::NoGradGuard ng;
  models::load_hf_state_dict(model, weights.load_all(), "checkpoint.initial_load_path=" + dir);
}

}  // namespace titan::train
