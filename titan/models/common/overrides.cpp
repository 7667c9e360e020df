#include "titan/models/common/overrides.h"

#include <fnmatch.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>

#include "titan/checkpoint/hf_config.h"
#include "titan/core/error.h"
#include "titan/models/ffn/dense.h"
#include "titan/models/mixers/attention.h"
#include "titan/models/mixers/dsa.h"
#include "titan/models/mixers/mla.h"

namespace titan::models {

namespace {

// One (component, impl): `set` applies it to a module of its kind and returns true,
// or returns false for a module of another kind.
struct Entry {
  OverrideInfo info;
  std::function<bool(nn::Module&)> set;
};

template <typename M, typename F>
std::function<bool(nn::Module&)> on(F f) {
  return [f](nn::Module& m) {
    auto* x = dynamic_cast<M*>(&m);
    if (!x) return false;
    f(*x);
    return true;
  };
}

// The attention core: gqa attention and mla (not dsa, whose core is its sparse kernel).
std::function<bool(nn::Module&)> attention_core(bool reference) {
  return [reference](nn::Module& m) {
    if (auto* a = dynamic_cast<Attention*>(&m)) return a->reference_attention = reference, true;
    if (dynamic_cast<DeepSeekSparseAttention*>(&m)) return false;
    if (auto* a = dynamic_cast<MultiHeadLatentAttention*>(&m)) return a->reference_attention = reference, true;
    return false;
  };
}

// RoPE: gqa attention, mla and dsa (q_rope and the shared k_rope).
std::function<bool(nn::Module&)> rope_impl(bool composed) {
  return [composed](nn::Module& m) {
    if (auto* a = dynamic_cast<Attention*>(&m)) return a->composed_rope = composed, true;
    if (auto* a = dynamic_cast<MultiHeadLatentAttention*>(&m)) return a->composed_rope = composed, true;
    return false;
  };
}

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = [] {
    const std::string attn = "gqa attention, mla (layers.L.attention)";
    const std::string rope = "gqa attention, mla, dsa (layers.L.attention)";
    const std::string ffn = "dense SwiGLU feed-forward (layers.L.feed_forward, layers.L.moe.shared_experts)";
    std::vector<Entry> v = {
        {{"attention", "flash", attn,
          "FlashAttention-2 style kernel, online softmax over fixed KV blocks (ops/attention.h)", true, true},
         attention_core(false)},
        {{"attention", "reference", attn,
          "composed matmul / softmax / where per sequence (composed::scaled_dot_product_attention_varlen), "
          "(T, T) scores; trainer path only",
          false, false},
         attention_core(true)},
        {{"rope", "fused", rope, "one kernel rotating q and k (ops/rope.h)", true, true}, rope_impl(false)},
        {{"rope", "composed", rope,
          "index_select / narrow / mul / sub / add / cat (composed::apply_rotary), same bits", false, true},
         rope_impl(true)},
        {{"swiglu", "fused", ffn, "one kernel silu(w1 x) * w3 x (ops/activation.h); keys w1/w2/w3", true, true},
         on<FeedForward>([](FeedForward& f) { f.composed_swiglu = false; })},
        {{"swiglu", "composed", ffn, "composed::swiglu = mul(silu(w1 x), w3 x); keys w1/w2/w3 unchanged", false,
          true},
         on<FeedForward>([](FeedForward& f) { f.composed_swiglu = true; })},
    };
  std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) {
      return std::tie(a.info.component, a.info.impl) < std::tie(b.info.component, b.info.impl);
    });
    return v;
  }();
  return t;
}

std::mutex& counter_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, int64_t>& counters() {
  static std::map<std::string, int64_t> c;
  return c;
}

std::string known(const std::string& component) {
  std::string s;
  for (const Entry& e : table())
    if (component.empty() || e.info.component == component) {
      const std::string name = component.empty() ? e.info.component : e.info.impl;
      if (s.find(name) != std::string::npos) continue;
      s += (s.empty() ? "" : ", ") + name;
    }
  return s;
}

struct Parsed {
  std::string component, impl, glob;
  const Entry* entry = nullptr;
};

Parsed parse(const std::string& text) {
  Parsed p;
  const size_t eq = text.find('=');
  TITAN_CHECK(eq != std::string::npos && eq > 0,
              "model.overrides: '{}' is not component=impl[:glob] (components: {})", text, known(""));
  p.component = text.substr(0, eq);
  const size_t colon = text.find(':', eq + 1);
  p.impl = text.substr(eq + 1, colon == std::string::npos ? std::string::npos : colon - eq - 1);
  p.glob = colon == std::string::npos ? "*" : text.substr(colon + 1);
  TITAN_CHECK(!p.glob.empty(), "model.overrides: '{}' has an empty glob after ':'", text);
  bool have_component = false;
  for (const Entry& e : table()) {
    have_component = have_component || e.info.component == p.component;
    if (e.info.component == p.component && e.info.impl == p.impl) p.entry = &e;
  }
  TITAN_CHECK(have_component, "model.overrides: '{}': unknown component '{}' (components: {})", text, p.component,
              known(""));
  TITAN_CHECK(p.entry != nullptr, "model.overrides: '{}': unknown implementation '{}' of {} (implementations: {})",
              text, p.impl, p.component, known(p.component));
  return p;
}

}  // namespace

std::vector<OverrideInfo> list_overrides() {
  std::vector<OverrideInfo> out;
  for (const Entry& e : table()) out.push_back(e.info);
  return out;
}

std::vector<std::string> apply_overrides(nn::Module& root, const std::vector<std::string>& entries) {
  std::vector<std::string> resolved;
  // (component, module path) -> the entry that claimed it.
  std::map<std::pair<std::string, std::string>, std::string> claimed;
  for (const std::string& text : entries) {
    const Parsed p = parse(text);
    const std::string &component = p.component, &impl = p.impl, &glob = p.glob;
    const Entry* entry = p.entry;
    const std::string norm = component + "=" + impl + ":" + glob;
    int hits = 0;
    for (auto& [path, m] : root.named_modules()) {
      if (fnmatch(glob.c_str(), path.c_str(), 0) != 0) continue;
      if (!entry->set(*m)) continue;
      auto [it, fresh] = claimed.emplace(std::pair{component, path}, norm);
      TITAN_CHECK(fresh, "model.overrides: '{}' and '{}' both claim module {} for {}", it->second, norm, path,
                  component);
      ++hits;
    }
    TITAN_CHECK(hits > 0, "model.overrides: '{}' matches no module that {} applies to ({})", text, component,
                entry->info.applies_to);
    resolved.push_back(norm);
  }
  return resolved;
}

std::vector<std::string> apply_generator_overrides(nn::Module& root, const std::vector<std::string>& entries,
                                                   const std::string& source) {
  for (const std::string& text : entries) {
    const Parsed p = parse(text);
    TITAN_CHECK(p.entry->info.generator,
                "model.overrides: '{}' ({}) runs on the trainer path only; the generator's paged path has no {}={} "
                "and would not compute what the trainer did (drop the override, or train without it)",
                text, source, p.component, p.impl);
  }
  return apply_overrides(root, entries);
}

std::vector<std::string> hf_recorded_overrides(const HFConfig& hf, const std::string& source) {
  std::vector<std::string> out;
  const auto it = hf.extra.find(kHfOverridesKey);
  if (it == hf.extra.end() || it->is_null()) return out;
  TITAN_CHECK(it->is_array(), "config.json {}: {} must be a list of \"component=impl:glob\" strings", source,
              kHfOverridesKey);
  for (const auto& e : *it) {
    TITAN_CHECK(e.is_string(), "config.json {}: {} must be a list of \"component=impl:glob\" strings", source,
                kHfOverridesKey);
    out.push_back(e.get<std::string>());
  }
  return out;
}

int64_t override_calls(const std::string& component, const std::string& impl) {
  std::lock_guard<std::mutex> g(counter_mutex());
  auto it = counters().find(component + "=" + impl);
  return it == counters().end() ? 0 : it->second;
}

std::string override_calls_summary(const std::vector<std::string>& resolved) {
  std::string s;
  for (const std::string& text : resolved) {
    const Parsed p = parse(text);
    s += s.empty() ? "" : ", ";
    s += p.entry->info.is_default ? fmt::format("{} (the default)", text)
                                  : fmt::format("{} ran {} forwards", text, override_calls(p.component, p.impl));
  }
  return s;
}

void count_override_call(const char* component, const char* impl) {
  std::lock_guard<std::mutex> g(counter_mutex());
  ++counters()[std::string(component) + "=" + impl];
}

}  // namespace titan::models
