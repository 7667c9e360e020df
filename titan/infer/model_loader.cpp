#include "titan/infer/model_loader.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <filesystem>

#include "titan/autograd/node.h"
#include "titan/checkpoint/hf_config.h"
#include "titan/checkpoint/hf_weights.h"
#include "titan/checkpoint/llama2c.h"
#include "titan/checkpoint/sharded.h"
#include "titan/core/error.h"
#include "titan/models/common/overrides.h"
#include "titan/models/family.h"

namespace titan::infer {

namespace fs = std::filesystem;

LoadedModel load_llama2c_model(const std::string& bin_path, const std::string& tokenizer_path) {
  LoadedModel out;
  Llama2cModel m = load_llama2c(bin_path, Llama2cRope::rotate_half);
  const HFConfig hf = llama2c_to_hf_config(m.config);
  models::TransformerConfig cfg = models::config_from_hf(hf);
  out.model = std::make_unique<models::Decoder>(cfg);
  {
    autograd::NoGradGuard ng;
    models::load_hf_state_dict(*out.model, m.weights, bin_path);
  }
  out.tokenizer = data::load_tokenizer(tokenizer_path);
  TITAN_CHECK(out.tokenizer->vocab_size() <= cfg.vocab_size,
              "{}: tokenizer {} has {} tokens, the model only {}", bin_path, tokenizer_path,
              out.tokenizer->vocab_size(), cfg.vocab_size);
  out.bos_id = 1;  // llama2.c: every sequence starts with BOS, and BOS delimits stories
  out.stop_token_ids = {1};
  for (int64_t e : hf.eos_token_id) out.eos_token_ids.push_back(static_cast<int32_t>(e));
  out.description = fmt::format("llama2.c {} (dim {}, {} layers, {}/{} heads, vocab {}, context {})", bin_path,
                                m.config.dim, m.config.n_layers, m.config.n_heads, m.config.n_kv_heads,
                                m.config.vocab_size, m.config.seq_len);
  return out;
}

LoadedModel load_hf_model(const std::string& dir) {
  LoadedModel out;
  TITAN_CHECK(fs::is_directory(dir), "load_hf_model: '{}' is not a directory", dir);
  const HFConfig hf = load_hf_config(dir);
  models::TransformerConfig cfg = models::config_from_hf(hf);
  const SafetensorsCheckpoint weights(dir);
  check_hf_weights_match_config(hf, weights, dir);  // before the model allocates
  out.model = std::make_unique<models::Decoder>(cfg);
  {
    TensorMap w = weights.load_all();
    autograd::NoGradGuard ng;
    models::load_hf_state_dict(*out.model, w, dir);
  }
  // A titan export records the overrides its model ran with.
  const std::vector<std::string> ovr =
      models::apply_generator_overrides(*out.model, models::hf_recorded_overrides(hf, dir), "config.json " + dir);
  out.tokenizer = data::load_tokenizer(dir);
  TITAN_CHECK(out.tokenizer->vocab_size() <= cfg.vocab_size,
              "load_hf_model: {}: tokenizer has {} tokens, config.json vocab_size is {}", dir,
              out.tokenizer->vocab_size(), cfg.vocab_size);
  if (hf.is_llama()) {
    if (out.tokenizer->bos_id() >= 0) out.bos_id = out.tokenizer->bos_id();
    else if (hf.bos_token_id) out.bos_id = static_cast<int32_t>(*hf.bos_token_id);
  }
  for (int64_t e : hf.eos_token_id) out.eos_token_ids.push_back(static_cast<int32_t>(e));
  const int32_t te = out.tokenizer->eos_id();
  if (te >= 0 && std::find(out.eos_token_ids.begin(), out.eos_token_ids.end(), te) == out.eos_token_ids.end())
    out.eos_token_ids.push_back(te);
  out.description = fmt::format("{} {} ({} params, {} layers, dim {}, vocab {})", hf.architecture(), dir,
                                out.model->num_parameters(), cfg.num_hidden_layers, cfg.hidden_size,
                                cfg.vocab_size);
  if (!ovr.empty()) out.description += fmt::format("; model.overrides {}", fmt::join(ovr, ", "));
  out.overrides = ovr;
  return out;
}

void prepare_for_inference(models::Decoder& model) {
  model.repack_for_decode();
  TITAN_CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1,
              "prepare_for_inference: mallopt(M_MMAP_THRESHOLD) failed");
}

}  // namespace titan::infer
