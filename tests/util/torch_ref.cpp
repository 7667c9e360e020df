#include "tests/util/torch_ref.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "titan/autograd/node.h"

namespace titan::test {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string wire_dtype(DType d) {
  if (is_floating(d)) return "f32";
  if (d == DType::boolean) return "bool";
  return "i64";
}

json write_tensor(const fs::path& dir, const std::string& file, const Tensor& t) {
  const std::string wd = wire_dtype(t.dtype());
  std::ofstream f(dir / file, std::ios::binary);
  if (wd == "f32") {
    auto v = t.to_vector<float>();
    f.write(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  } else if (wd == "bool") {
    auto v = t.to_vector<uint8_t>();
    f.write(reinterpret_cast<const char*>(v.data()), v.size());
  } else {
    auto v = t.to_vector<int64_t>();
    f.write(reinterpret_cast<const char*>(v.data()), v.size() * 8);
  }
  TITAN_CHECK(f.good(), "torch_ref: cannot write {}", (dir / file).string());
  return json{{"file", file}, {"shape", t.shape()}, {"dtype", wd}};
}

Tensor read_tensor(const fs::path& dir, const json& j) {
  Shape s = j.at("shape").get<Shape>();
  const std::string dt = j.at("dtype").get<std::string>();
  std::ifstream f(dir / j.at("file").get<std::string>(), std::ios::binary);
  TITAN_CHECK(f.good(), "torch_ref: cannot read {}", j.at("file").get<std::string>());
  Tensor t = Tensor::empty(s, dt == "f32" ? DType::f32 : DType::i64);
  f.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
  TITAN_CHECK(static_cast<size_t>(f.gcount()) == t.nbytes(), "torch_ref: short file {}",
              j.at("file").get<std::string>());
  return t;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<RefResult> run_torch_reference(const std::string& script,
                                           const std::vector<RefCase>& cases,
                                           const std::string& python) {
  char tmpl[] = "/tmp/titan_ref_XXXXXX";
  TITAN_CHECK(mkdtemp(tmpl) != nullptr, "torch_ref: mkdtemp failed");
  const fs::path dir(tmpl);
  json man;
  man["cases"] = json::array();
  for (size_t c = 0; c < cases.size(); ++c) {
    const RefCase& rc = cases[c];
    json jc{{"label", rc.label}, {"op", rc.op}, {"attrs", rc.attrs}, {"grad_of", rc.grad_of}};
    jc["inputs"] = json::array();
    for (auto& [name, t] : rc.inputs) {
      json ji = t.defined() ? write_tensor(dir, fmt::format("c{}_in_{}.bin", c, name), t) : json{};
      ji["name"] = name;
      jc["inputs"].push_back(ji);
    }
    jc["upstream"] = json::array();
    for (size_t i = 0; i < rc.upstream.size(); ++i)
      jc["upstream"].push_back(write_tensor(dir, fmt::format("c{}_up{}.bin", c, i), rc.upstream[i]));
    man["cases"].push_back(jc);
  }
  std::ofstream(dir / "manifest.json") << man.dump();
  const std::string py = std::string(TITAN_SOURCE_DIR) + "/tests/reference/" + script + ".py";
  const std::string cmd = fmt::format("OMP_NUM_THREADS=1 '{}' '{}' '{}' > '{}' 2>&1", python, py,
                                      dir.string(), (dir / "log.txt").string());
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::string log = read_all(dir / "log.txt");
    fs::remove_all(dir);
    fail("torch_ref: '{}' failed (status {}):\n{}", py, rc, log);
  }
  json res = json::parse(read_all(dir / "result.json"));
  std::vector<RefResult> out;
  for (auto& jc : res.at("cases")) {
    RefResult r;
    for (auto& jo : jc.at("outputs")) r.outputs.push_back(read_tensor(dir, jo));
    for (auto& [name, jg] : jc.at("grads").items()) r.grads[name] = read_tensor(dir, jg);
    out.push_back(std::move(r));
  }
  fs::remove_all(dir);
  TITAN_CHECK(out.size() == cases.size(), "torch_ref: {} results for {} cases", out.size(),
              cases.size());
  return out;
}

std::string compare(const Tensor& got, const Tensor& want, Tol tol) {
  if (got.shape() != want.shape())
    return fmt::format("shape {} vs reference {}", shape_str(got.shape()), shape_str(want.shape()));
  if (!is_floating(want.dtype()) || !is_floating(got.dtype())) {
    auto g = got.to_vector<int64_t>(), w = want.to_vector<int64_t>();
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] != w[i]) return fmt::format("index {}: {} vs reference {}", i, g[i], w[i]);
    return "";
  }
  auto g = got.to_vector<float>(), w = want.to_vector<float>();
  double worst = 0;
  int64_t wi = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    const double a = g[i], b = w[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::isinf(b) && a == b) continue;
    const double err = std::fabs(a - b), lim = tol.atol + tol.rtol * std::fabs(b);
    const double ratio = std::isnan(err) ? 1e300 : err / lim;
    if (ratio > 1.0 && ratio > worst) {
      worst = ratio;
      wi = static_cast<int64_t>(i);
    }
  }
  if (wi < 0) return "";
  return fmt::format("index {}: {:.9g} vs reference {:.9g} (|diff| {:.3g}, {:.3g}x the tolerance "
                     "atol {} + rtol {})",
                     wi, g[wi], w[wi], std::fabs(static_cast<double>(g[wi]) - w[wi]), worst,
                     tol.atol, tol.rtol);
}

void check_ops(std::vector<OpCheck>& checks, const std::string& script,
               const std::string& python) {
  struct Side {
    std::vector<Tensor> in, out;
  };
  std::vector<Side> sides(checks.size());
  std::vector<RefCase> cases;
  for (size_t c = 0; c < checks.size(); ++c) {
    OpCheck& ck = checks[c];
    Side& s = sides[c];
    for (auto& [name, t] : ck.ref.inputs) {
      Tensor x = t.defined() ? t.clone().detach() : Tensor();
      for (auto& g : ck.ref.grad_of)
        if (g == name) x.requires_grad_(true);
      s.in.push_back(x);
    }
    s.out = ck.fn(s.in);
    ck.ref.upstream.clear();
    uint64_t k = 0;
    for (auto& o : s.out)
      if (is_floating(o.dtype())) ck.ref.upstream.push_back(randn(o.shape(), 1000 + 17 * c + k++));
    cases.push_back(ck.ref);
  }
  std::vector<RefResult> ref = run_torch_reference(script, cases, python);
  for (size_t c = 0; c < checks.size(); ++c) {
    OpCheck& ck = checks[c];
    Side& s = sides[c];
    const RefResult& r = ref[c];
    const std::string& L = ck.ref.label.empty() ? ck.ref.op : ck.ref.label;
    if (s.out.size() != r.outputs.size()) {
      ADD_FAILURE() << L << ": titan gave " << s.out.size() << " outputs, torch " << r.outputs.size();
      continue;
    }
    for (size_t i = 0; i < s.out.size(); ++i) {
      std::string m = compare(s.out[i], r.outputs[i], ck.tol);
      if (!m.empty()) ADD_FAILURE() << L << ": output " << i << ": " << m;
    }
    if (ck.ref.grad_of.empty()) continue;
    std::vector<Tensor> roots, seeds, wrt;
    size_t k = 0;
    for (auto& o : s.out) {
      if (!is_floating(o.dtype())) continue;
      if (o.requires_grad()) {
        roots.push_back(o);
        seeds.push_back(ck.ref.upstream[k]);
      }
      ++k;
    }
    std::vector<std::string> names;
    for (size_t i = 0; i < ck.ref.inputs.size(); ++i)
      if (s.in[i].defined() && s.in[i].requires_grad()) {
        wrt.push_back(s.in[i]);
        names.push_back(ck.ref.inputs[i].first);
      }
    if (roots.empty()) {
      ADD_FAILURE() << L << ": no output requires grad";
      continue;
    }
    std::vector<Tensor> grads = autograd::grad(roots, seeds, wrt);
    for (size_t i = 0; i < wrt.size(); ++i) {
      auto it = r.grads.find(names[i]);
      if (it == r.grads.end()) {
        ADD_FAILURE() << L << ": torch gave no gradient for " << names[i];
        continue;
      }
      std::string m = compare(grads[i], it->second, ck.grad_tol);
      if (!m.empty()) ADD_FAILURE() << L << ": grad of " << names[i] << ": " << m;
    }
  }
}

Tensor randn(const Shape& s, uint64_t seed, double scale) {
  Tensor t = Tensor::randn(s, seed);
  if (scale != 1.0) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(p[i] * scale);
  }
  return t;
}

Tensor randint(const Shape& s, int64_t n, uint64_t seed, DType dt) {
  Tensor u = Tensor::rand(s, seed);
  std::vector<int64_t> v(u.numel());
  const float* p = u.data<float>();
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = std::min<int64_t>(n - 1, static_cast<int64_t>(static_cast<double>(p[i]) * n));
  return Tensor::from_vector(v, s, dt);
}

}  // namespace titan::test
