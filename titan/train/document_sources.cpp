#include "titan/train/document_sources.h"

#include <map>
#include <mutex>

#include "titan/core/error.h"

namespace titan::train {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, DocumentSourceFn, std::less<>> sources;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_document_source(const std::string& kind, DocumentSourceFn fn) {
  TITAN_CHECK(!kind.empty() && fn, "register_document_source: needs a kind and a function");
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.sources[kind] = std::move(fn);
}

DocumentSourceFn find_document_source(std::string_view kind) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.sources.find(kind);
  return it == r.sources.end() ? DocumentSourceFn{} : it->second;
}

std::vector<std::string> document_source_kinds() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [k, v] : r.sources) out.push_back(k);
  return out;
}

}  // namespace titan::train
