// RoPE's cos/sin table, computed once per stage (and per decoder) on the host, in double, then
// rounded to float: row p (position) holds cos(p * f_i) for i < hs/2, then sin(p * f_i), where
// f_i = rope_theta^(-2i/hs) (Hugging Face's inv_freq), with Llama 3.1's frequency scaling when
// the config has it (_compute_llama3_parameters in transformers: long wavelengths divided by
// factor, short ones kept, those between interpolated). The layout is what Backend::rope_forward
// reads.
#pragma once
#include <vector>

#include "model/gpt_config.h"

namespace pipelane {

// The inverse frequencies f_i, i < head_size / 2, scaling applied.
std::vector<double> rope_inverse_frequencies(const GptConfig& cfg);
// positions x head_size floats, as above.
std::vector<float> rope_table(const GptConfig& cfg, int positions);

}  // namespace pipelane
