#include "titan/models/common/overrides.h"

#include <fnmatch.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>

#include "titan/core/error.h"
#include "titan/models/ffn/dense.h"
#include "titan/models/mixers/attention.h"

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

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = [] {
    const std::string attn = "gqa attention (layers.L.attention)";
    const std::string ffn = "dense SwiGLU feed-forward (layers.L.feed_forward, layers.L.moe.shared_experts)";
    std::vector<Entry> v = {
        {{"attention", "flash", attn,
          "FlashAttention-2 style kernel, online softmax over fixed KV blocks (ops/attention.h)", true},
         on<Attention>([](Attention& a) { a.reference_attention = false; })},
        {{"attention", "reference", attn,
          "composed matmul / softmax / where per sequence (composed::scaled_dot_product_attention_varlen), "
          "(T, T) scores; trainer path only",
          false},
         on<Attention>([](Attention& a) { a.reference_attention = true; })},
        {{"rope", "fused", attn, "one kernel rotating q and k (ops/rope.h)", true},
         on<Attention>([](Attention& a) { a.composed_rope = false; })},
        {{"rope", "composed", attn, "index_select / narrow / mul / sub / add / cat (composed::apply_rotary), same bits",
          false},
         on<Attention>([](Attention& a) { a.composed_rope = true; })},
        {{"swiglu", "fused", ffn, "one kernel silu(w1 x) * w3 x (ops/activation.h); keys w1/w2/w3", true},
         on<FeedForward>([](FeedForward& f) { f.composed_swiglu = false; })},
        {{"swiglu", "composed", ffn, "composed::swiglu = mul(silu(w1 x), w3 x); keys w1/w2/w3 unchanged", false},
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
    const size_t eq = text.find('=');
    TITAN_CHECK(eq != std::string::npos && eq > 0,
                "model.overrides: '{}' is not component=impl[:glob] (components: {})", text, known(""));
    const std::string component = text.substr(0, eq);
    const size_t colon = text.find(':', eq + 1);
    const std::string impl = text.substr(eq + 1, colon == std::string::npos ? std::string::npos : colon - eq - 1);
    const std::string glob = colon == std::string::npos ? "*" : text.substr(colon + 1);
    TITAN_CHECK(!glob.empty(), "model.overrides: '{}' has an empty glob after ':'", text);
    const Entry* entry = nullptr;
    bool have_component = false;
    for (const Entry& e : table()) {
      have_component = have_component || e.info.component == component;
      if (e.info.component == component && e.info.impl == impl) entry = &e;
    }
    TITAN_CHECK(have_component, "model.overrides: '{}': unknown component '{}' (components: {})", text, component,
                known(""));
    TITAN_CHECK(entry != nullptr, "model.overrides: '{}': unknown implementation '{}' of {} (implementations: {})",
                text, impl, component, known(component));
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

int64_t override_calls(const std::string& component, const std::string& impl) {
  std::lock_guard<std::mutex> g(counter_mutex());
  auto it = counters().find(component + "=" + impl);
  return it == counters().end() ? 0 : it->second;
}

void count_override_call(const char* component, const char* impl) {
  std::lock_guard<std::mutex> g(counter_mutex());
  ++counters()[std::string(component) + "=" + impl];
}

}  // namespace titan::models
