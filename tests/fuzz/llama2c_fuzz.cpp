// Fuzz target: llama2.c legacy model.bin (header, sizes, weights layout).
#include "tests/fuzz/fuzz_util.h"
#include "titan/checkpoint/llama2c.h"

using namespace titan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.bin", fuzz::as_text(data, size));
  fuzz::expect_ok_or_error([&] {
    const Llama2cModel m = load_llama2c(path, size % 2 ? Llama2cRope::interleaved : Llama2cRope::rotate_half);
    const HFConfig hf = llama2c_to_hf_config(m.config);
    TITAN_FUZZ_ASSERT(hf.num_hidden_layers == m.config.n_layers);
    TITAN_FUZZ_ASSERT(m.weights.count("model.embed_tokens.weight") == 1);
  });
  return 0;
}
