#include "trainer/run/training_samples.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "datasets/utf8.h"
#include "model/gpt_decoder.h"
#include "trainer/hf/text_generation.h"

namespace pipelane {

TrainingSamples::TrainingSamples(const std::string& tokenizer, const std::string& prompt, int tokens,
                                 std::uint64_t seed, const std::string& run_dir)
    : tokenizer_(TextTokenizer::load(tokenizer)), prompt_(prompt), tokens_(tokens), seed_(seed),
      path_(run_dir + "/samples.jsonl") {}

std::string TrainingSamples::sample(int step, const LoadedModel& model, Backend& backend) {
  std::vector<std::int32_t> ids = tokenizer_.encode(prompt_);
  if (ids.empty()) ids.push_back(tokenizer_.end_of_text().value_or('\n'));
  const std::unique_ptr<Stream> stream = backend.create_stream(StreamPriority::Normal);
  GptDecoder decoder(*model.layout, model.params.data(), backend, *stream);
  TokenSampler sampler(SamplingOptions{1.0, 200, 1.0}, seed_ + static_cast<std::uint64_t>(step));
  std::string text;
  const std::vector<std::int32_t> out =
      generate_tokens(decoder, ids, tokens_, sampler, [&](std::int32_t id) { text += tokenizer_.decode(id); });
  std::ofstream file(path_, std::ios::app);
  file << nlohmann::json{{"step", step}, {"prompt", prompt_}, {"text", text}, {"tokens", out}}
              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
       << "\n";
  // Bytes of a half-trained model need not be UTF-8: the console gets them repaired.
  return repair_utf8(prompt_ + text, InvalidUtf8::kReplace, "sample");
}

}  // namespace pipelane
