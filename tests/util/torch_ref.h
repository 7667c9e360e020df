// PyTorch reference harness for op tests.
//
// A test builds a list of RefCase (op key, named inputs, attributes, which inputs to
// differentiate, upstream gradients); run_torch_reference() writes every input as
// raw little-endian data plus a JSON manifest to a fresh temp dir, runs
//   OMP_NUM_THREADS=1 /usr/bin/python3 tests/reference/<script>.py <dir>
// ONCE for all cases (a python+torch start costs ~1 s), and reads back each case's
// outputs and input gradients (the gradient of loss = Σ_i sum(out_i * upstream_i)).
//
// check_ops() is the usual entry point: it also runs the titan side of every case
// (forward with requires_grad inputs, autograd::grad with the same upstream
// gradients) and compares outputs and gradients element-wise within the case's
// tolerances: |titan - torch| <= atol + rtol * |torch| (integer outputs exactly).
// By default the python side computes in float64 from the (f32) inputs, so the
// tolerance measures titan's own fp32 error.
#pragma once
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "titan/core/tensor.h"

namespace titan::test {

struct Tol {
  double rtol = 1e-5, atol = 1e-6;
};

struct RefCase {
  std::string label;                               // for messages
  std::string op;                                  // key in the python OPS table
  nlohmann::json attrs = nlohmann::json::object();
  std::vector<std::pair<std::string, Tensor>> inputs;  // f32/bf16 (sent as f32), ints (as i64), bool
  std::vector<std::string> grad_of;                // input names to differentiate
  std::vector<Tensor> upstream;                    // one per float output (filled by check_ops)
};

struct RefResult {
  std::vector<Tensor> outputs;          // f32 or i64
  std::map<std::string, Tensor> grads;  // f32, by input name
};

// Runs every case in one python process. Throws titan::Error if python fails (its
// stderr is included in the message).
// `python` is the interpreter (default Debian's torch 1.13; titan::test::venv_python() for
// the PyPI oracle venv).
std::vector<RefResult> run_torch_reference(const std::string& script,
                                           const std::vector<RefCase>& cases,
                                           const std::string& python = "/usr/bin/python3");

// Titan side of a case: gets the inputs in RefCase order (those in grad_of already
// have requires_grad set) and returns the outputs.
using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

struct OpCheck {
  RefCase ref;
  OpFn fn;
  Tol tol;       // outputs
  Tol grad_tol;  // input gradients
};

// Builds the upstream gradients (Philox randn, seeded by the case index), runs the
// reference for all checks at once, runs titan, and reports mismatches with gtest
// EXPECTs (one failure per mismatching tensor, naming case, tensor, index, values).
void check_ops(std::vector<OpCheck>& checks, const std::string& script = "ops_ref",
               const std::string& python = "/usr/bin/python3");

// Element-wise comparison; returns an empty string when equal within tol, else a
// description of the worst element.
std::string compare(const Tensor& got, const Tensor& want, Tol tol);

// Convenience: random normal f32 tensor (Philox seed), and random ints in [0, n).
Tensor randn(const Shape& s, uint64_t seed, double scale = 1.0);
Tensor randint(const Shape& s, int64_t n, uint64_t seed, DType dt = DType::i64);

}  // namespace titan::test
