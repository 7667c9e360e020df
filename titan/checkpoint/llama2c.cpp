#include "titan/checkpoint/llama2c.h"

#include <cstring>

#include "titan/core/fs.h"

namespace titan {

namespace {

constexpr int32_t kMagicV1 = 0x616b3432;  // "ak42": llama2.c export.py version 1/2 files

// Sequential reader over the float32 payload.
struct Cursor {
  const uint8_t* p;
  Tensor take(const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::f32);
    std::memcpy(t.data_ptr(), p, t.nbytes());
    p += t.nbytes();
    return t;
  }
};

}  // namespace

Tensor permute_rotate_half(const Tensor& w, int64_t n_heads) {
  TITAN_CHECK(w.dim() == 2 && n_heads > 0 && w.size(0) % (2 * n_heads) == 0,
              "permute_rotate_half: expected a (n_heads * head_size, in) matrix with even head_size, got "
              "shape {} with n_heads {}", shape_str(w.shape()), n_heads);
  const int64_t rows = w.size(0), in = w.size(1);
  return w.detach().contiguous().view({n_heads, rows / n_heads / 2, 2, in}).transpose(1, 2).reshape({rows, in})
      .contiguous();
}

Tensor permute_rotate_half_inverse(const Tensor& w, int64_t n_heads) {
  TITAN_CHECK(w.dim() == 2 && n_heads > 0 && w.size(0) % (2 * n_heads) == 0,
              "permute_rotate_half_inverse: expected a (n_heads * head_size, in) matrix with even "
              "head_size, got shape {} with n_heads {}", shape_str(w.shape()), n_heads);
  const int64_t rows = w.size(0), in = w.size(1);
  return w.detach().contiguous().view({n_heads, 2, rows / n_heads / 2, in}).transpose(1, 2).reshape({rows, in})
      .contiguous();
}

Llama2cModel load_llama2c(const std::string& path, Llama2cRope rope) {
  const std::string where = "llama2.c " + path;
  if (!file_exists(path)) fail("{}: file not found", where);
  auto file = MappedFile::open(path);
  const uint64_t size = file->size();
  constexpr uint64_t kHeader = 7 * sizeof(int32_t);
  if (size >= 4) {
    int32_t magic;
    std::memcpy(&magic, file->data(), 4);
    if (magic == kMagicV1)
      fail("{}: this is a llama2.c version 1/2 export (magic \"ak42\"); only the legacy version-0 "
           "format (export.py --version 0) is supported", where);
  }
  if (size < kHeader) fail("{}: truncated file: {} bytes, shorter than the 28-byte header", where, size);
  int32_t h[7];
  std::memcpy(h, file->data(), kHeader);
  Llama2cConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.shared_classifier = h[5] > 0;
  c.vocab_size = h[5] < 0 ? -static_cast<int64_t>(h[5]) : h[5];
  c.seq_len = h[6];
  TITAN_CHECK(c.dim > 0 && c.hidden_dim > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0 &&
                  c.vocab_size > 0 && c.seq_len > 0,
              "{}: header has non-positive values (dim={}, hidden_dim={}, n_layers={}, n_heads={}, "
              "n_kv_heads={}, vocab_size={}, seq_len={}); not a llama2.c model?",
              where, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
  TITAN_CHECK(c.dim % c.n_heads == 0 && c.n_heads % c.n_kv_heads == 0 && c.head_size() % 2 == 0,
              "{}: inconsistent header: dim {} must be a multiple of n_heads {}, n_heads a multiple of "
              "n_kv_heads {}, and head_size even", where, c.dim, c.n_heads, c.n_kv_heads);

  const int64_t D = c.dim, F = c.hidden_dim, L = c.n_layers, V = c.vocab_size, hs = c.head_size();
  const int64_t Dkv = c.n_kv_heads * hs;
  // 128-bit arithmetic: a garbage header must give the size error, not an overflow.
  using i128 = __int128;
  const i128 per_layer = i128(D) + i128(D) * D + 2 * i128(Dkv) * D + i128(D) * D + D + 3 * i128(F) * D;
  const i128 floats = i128(V) * D + i128(L) * per_layer + D + 2 * i128(c.seq_len) * (hs / 2) +
                      (c.shared_classifier ? 0 : i128(V) * D);
  const i128 want = i128(kHeader) + floats * 4;
  if (i128(size) != want) {
    auto str = [](i128 v) {  // fmt 9 cannot format __int128 portably
      std::string s;
      do s.insert(s.begin(), char('0' + int(v % 10))); while ((v /= 10) > 0);
      return s;
    };
    fail("{}: {} file: header (dim={}, hidden_dim={}, n_layers={}, n_heads={}, n_kv_heads={}, "
         "vocab_size={}, seq_len={}) needs {} bytes ({} floats after the 28-byte header), file has {}",
         where, i128(size) < want ? "truncated" : "oversized (trailing bytes)", h[0], h[1], h[2], h[3], h[4],
         h[5], h[6], str(want), str(floats), size);
  }

  Llama2cModel m;
  m.config = c;
  TensorMap& w = m.weights;
  Cursor cur{file->data() + kHeader};
  auto layer = [](int64_t i, const char* rest) { return fmt::format("model.layers.{}.{}", i, rest); };
  w["model.embed_tokens.weight"] = cur.take({V, D});
  // Per-kind blocks, each (L, ...) in the file.
  auto per_layer_block = [&](const char* name, const Shape& shape) {
    for (int64_t i = 0; i < L; ++i) w[layer(i, name)] = cur.take(shape);
  };
  per_layer_block("input_layernorm.weight", {D});
  per_layer_block("self_attn.q_proj.weight", {D, D});
  per_layer_block("self_attn.k_proj.weight", {Dkv, D});
  per_layer_block("self_attn.v_proj.weight", {Dkv, D});
  per_layer_block("self_attn.o_proj.weight", {D, D});
  per_layer_block("post_attention_layernorm.weight", {D});
  per_layer_block("mlp.gate_proj.weight", {F, D});
  per_layer_block("mlp.down_proj.weight", {D, F});
  per_layer_block("mlp.up_proj.weight", {F, D});
  w["model.norm.weight"] = cur.take({D});
  m.freq_cis_real = cur.take({c.seq_len, hs / 2});
  m.freq_cis_imag = cur.take({c.seq_len, hs / 2});
  if (!c.shared_classifier) w["lm_head.weight"] = cur.take({V, D});
  TITAN_CHECK(cur.p == file->data() + size, "{}: internal error: consumed {} of {} bytes", where,
              cur.p - file->data(), size);

  if (rope == Llama2cRope::rotate_half) {
    for (int64_t i = 0; i < L; ++i) {
      Tensor& q = w[layer(i, "self_attn.q_proj.weight")];
      Tensor& k = w[layer(i, "self_attn.k_proj.weight")];
      q = permute_rotate_half(q, c.n_heads);
      k = permute_rotate_half(k, c.n_kv_heads);
    }
  }
  return m;
}

HFConfig llama2c_to_hf_config(const Llama2cConfig& c) {
  HFConfig h;
  h.architectures = {"LlamaForCausalLM"};
  h.model_type = "llama";
  h.hidden_size = c.dim;
  h.intermediate_size = c.hidden_dim;
  h.num_hidden_layers = c.n_layers;
  h.num_attention_heads = c.n_heads;
  h.num_key_value_heads = c.n_kv_heads;
  h.head_dim = c.head_size();
  h.vocab_size = c.vocab_size;
  h.max_position_embeddings = c.seq_len;
  h.rms_norm_eps = 1e-5;
  h.rope_theta = 10000.0;
  h.tie_word_embeddings = c.shared_classifier;
  h.attention_bias = false;
  h.bos_token_id = 1;
  h.eos_token_id = {2};
  h.torch_dtype = "float32";
  return h;
}

}  // namespace titan
