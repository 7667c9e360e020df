// Trainer → generator weight synchronisation: after a sync, the generator's weights
// equal the trainer's compute-dtype weights bitwise.
//
// Both models are models::Decoder instances of the same architecture; parameters are
// matched by position in named_parameters() order and must agree in name and shape.
#pragma once
#include <cstdint>

#include "titan/models/common/decoder.h"

namespace titan::rl {

// Copies every parameter of `trainer` into `generator` and returns the bytes written
// (the generator's parameter bytes). A generator parameter of the trainer's dtype is
// copied bit for bit (memcpy); an f32 trainer parameter held in bf16 by the generator
// (compute_dtype bf16) is rounded to nearest even, the rounding of the trainer's bf16
// compute path (titan::f32_to_bf16). Not recorded by autograd; the generator's grads
// are untouched.
// Errors (titan::Error, naming the first offending parameter): different parameter
// counts, a name or shape mismatch, a dtype pair other than equal or f32 → bf16.
int64_t sync_weights(const models::Decoder& trainer, models::Decoder& generator);

// True when both models have the same parameter names, shapes and dtypes, and every
// parameter is bitwise equal (memcmp of the contiguous bytes). Never throws on a
// mismatch (returns false).
bool weights_bitwise_equal(const models::Decoder& a, const models::Decoder& b);

}  // namespace titan::rl
