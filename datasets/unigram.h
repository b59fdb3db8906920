// The unigram baseline: what a model that ignores context entirely would score. A trained LM whose
// validation loss is not clearly below this number has learned nothing about sequences.
#pragma once
#include <cstdint>

#include "datasets/token_store.h"

namespace pipelane {

// Cross-entropy in nats/token of a unigram model fitted on `train` (add-one smoothing over
// vocab_size), evaluated on `eval`. DataError if `eval` is empty or a token is >= vocab_size.
double unigram_cross_entropy(const TokenSplit& train, const TokenSplit& eval, std::uint32_t vocab_size);

}  // namespace pipelane
