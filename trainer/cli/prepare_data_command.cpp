#include "trainer/cli/prepare_data_command.h"

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "datasets/data_error.h"
#include "datasets/importers.h"
#include "datasets/text_documents.h"
#include "datasets/text_segments.h"
#include "datasets/token_store.h"
#include "datasets/token_store_writer.h"
#include "datasets/tokenize_stream.h"
#include "datasets/tokenizer_registry.h"
#include "trainer/cli/command_options.h"

namespace pipelane {
namespace {

namespace po = boost::program_options;

constexpr const char* kDefaultCorpus = "/usr/share/doc/jargon-text/jargon.txt.gz";
constexpr std::size_t kProgressBytes = 16u << 20;  // inputs at least this large get a progress bar

struct PrepareDataOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string tokenizer = "byte";
  std::string gpt2_dir = default_gpt2_tokenizer_dir();
  std::string documents = "blank-lines";
  std::string jsonl_field = "text";
  std::string invalid_utf8 = "replace";
  std::string progress = "auto";
  double valid_fraction = 0.05;
  int threads = 0;
  int max_unsplit_mb = 64;
};

void describe(SubcommandOptions& description, PrepareDataOptions& options) {
  description.add_options()
      ("input,i", po::value(&options.inputs)->multitoken()
                      ->default_value({kDefaultCorpus}, kDefaultCorpus),
       "one or more inputs: text (.txt), JSON Lines (.jsonl), either gzip-compressed (.gz); or token "
       "data to convert: Megatron-LM X.bin/X.idx, llm.c shards (.bin; documents are kept, "
       "--tokenizer is ignored)")
      ("output,o", po::value(&options.output)->required(),
       "token store to write (X.h5); required. Written under a temporary name and renamed when "
       "complete; missing parent directories are created")
      ("tokenizer", value_with_default(&options.tokenizer), tokenizer_option_help().c_str())
      ("gpt2-dir", value_with_default(&options.gpt2_dir),
       "directory holding encoder.json and vocab.bpe (env PIPELANE_GPT2_DIR sets the default)")
      ("documents", value_with_default(&options.documents),
       "document split of .txt inputs: blank-lines (paragraphs separated by one or more blank lines) "
       "or whole-file (each input is one document)")
      ("jsonl-field", value_with_default(&options.jsonl_field),
       "field of each JSON Lines object that holds the document text")
      ("invalid-utf8", value_with_default(&options.invalid_utf8),
       "invalid UTF-8 in text: replace (each bad sequence becomes U+FFFD, as GPT-2's reference "
       "encoder does) or fail (stop, naming the file and byte offset)")
      ("valid-fraction", value_with_default(&options.valid_fraction),
       "fraction of documents held out for validation, spread evenly: document i is held out iff "
       "floor((i+1)*f) > floor(i*f); 0 <= f < 1")
      ("threads", value_with_default(&options.threads),
       "tokenizer threads; 0 uses every core")
      ("max-unsplit-mb", value_with_default(&options.max_unsplit_mb),
       "most text held whole, in MiB: a JSON Lines record, or a stretch of text with no place to cut "
       "it between tokens (byte: any character boundary; gpt2: a space or line break after a printable "
       "ASCII character; cl100k, o200k, llama3, hf: the same after an ASCII letter or digit; spm: a space "
       "after one). Input is read and tokenized in pieces of about 256 KiB, so memory follows this "
       "and --threads, not the size of the input; longer unsplittable text stops with one line")
      ("progress", value_with_default(&options.progress),
       "progress bar on stderr: auto (inputs of 16 MiB or more as stored, compressed for .gz), always or never");
}

// The progress line on stderr, redrawn at most every 250 ms.
class ProgressBar {
 public:
  ProgressBar(bool enabled, std::uint64_t total_bytes)
      : enabled_(enabled), total_(std::max<std::uint64_t>(1, total_bytes)) {}
  void update(std::uint64_t done_bytes) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    const double done = static_cast<double>(std::min(done_bytes, total_));
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const int width = 30, filled = static_cast<int>(width * done / static_cast<double>(total_));
    std::fprintf(stderr, "\rprepare-data: [%s%s] %5.1f%%  %.1f MB/s of input", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), 100.0 * done / static_cast<double>(total_),
                 done / 1e6 / std::max(seconds, 1e-9));
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_;
  std::uint64_t total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

void create_parent_directory(const std::string& output) {
  const std::filesystem::path output_directory = std::filesystem::path(output).parent_path();
  if (output_directory.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(output_directory, ec);
  if (ec)
    throw DataError(output + ": cannot create directory " + output_directory.string() + " (" +
                    ec.message() + ")");
}

void check_common(const PrepareDataOptions& options) {
  if (!(options.valid_fraction >= 0.0 && options.valid_fraction < 1.0))
    throw DataError("--valid-fraction must be in [0, 1), got " + std::to_string(options.valid_fraction));
  if (options.inputs.empty()) throw DataError("no --input files given");
  if (options.threads < 0) throw DataError("--threads must be >= 0, got " + std::to_string(options.threads));
  if (options.max_unsplit_mb < 1 || options.max_unsplit_mb > (1 << 20))
    throw DataError("--max-unsplit-mb must be in [1, 1048576], got " + std::to_string(options.max_unsplit_mb));
  if (options.progress != "auto" && options.progress != "always" && options.progress != "never")
    throw DataError("--progress must be auto, always or never, got '" + options.progress + "'");
}

void finish_and_report(TokenStoreWriter& writer, const TokenStoreMeta& meta, const std::string& output,
                       std::chrono::steady_clock::time_point start) {
  using Split = TokenStoreWriter::Split;
  writer.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::uint64_t train = writer.tokens(Split::kTrain), valid = writer.tokens(Split::kValid);
  std::cout << "prepare-data: " << writer.documents(Split::kTrain) + writer.documents(Split::kValid)
            << " documents (" << writer.documents(Split::kTrain) << " train, " << writer.documents(Split::kValid)
            << " valid), " << train << " train tokens, " << valid << " valid tokens, tokenizer " << meta.tokenizer
            << " -> " << output << "\n";
  std::printf("prepare-data: %.2f s, %.0f tokens/s\n", seconds,
              static_cast<double>(train + valid) / std::max(seconds, 1e-9));
}

// Megatron / llm.c inputs: documents as stored, re-split by --valid-fraction, written as each
// input is read (one input in memory at a time).
int convert(const PrepareDataOptions& options) {
  using Split = TokenStoreWriter::Split;
  const auto start = std::chrono::steady_clock::now();
  std::optional<TokenStoreWriter> writer;
  TokenStoreMeta meta;
  std::uint64_t document = 0;
  for (const std::string& input : options.inputs) {
    const ImportedTokens part = read_imported(input);
    if (!writer) {
      meta = part.meta;
      meta.sources = options.inputs;  // as given (the importer names the .bin of X.idx)
      create_parent_directory(options.output);
      writer.emplace(options.output, meta);
    } else if (part.meta.tokenizer != meta.tokenizer) {
      throw DataError(input + ": tokenized with " + part.meta.tokenizer + ", the inputs before with " +
                      meta.tokenizer);
    }
    const std::span<const std::uint32_t> tokens(part.all.tokens);
    const std::vector<std::uint64_t>& offsets = part.all.doc_offsets;
    for (std::size_t d = 0; d + 1 < offsets.size(); ++d) {
      const Split split = is_held_out_document(document++, options.valid_fraction) ? Split::kValid : Split::kTrain;
      writer->append(split, tokens.subspan(offsets[d], offsets[d + 1] - offsets[d]));
      writer->end_document(split);
    }
  }
  if (writer->tokens(Split::kTrain) + writer->tokens(Split::kValid) == 0)
    throw DataError("the inputs hold no tokens");
  if (writer->tokens(Split::kTrain) == 0)
    throw DataError("every document went to the validation split; lower --valid-fraction or add data");
  finish_and_report(*writer, meta, options.output, start);
  return 0;
}

// Text inputs: read in segments, tokenized on worker threads, written as they come back, so
// memory follows --max-unsplit-mb and --threads, not the input.
int tokenize_inputs(const PrepareDataOptions& options, const TokenStoreMeta& meta,
                    const std::function<ContinuingSegmentEncoder()>& make_encoder, std::optional<std::uint32_t> end_of_text,
                    DocumentSplit document_split, InvalidUtf8 utf8_policy, CutRule cut, SegmentLimits limits) {
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t stored_bytes = 0;
  for (const std::string& input : options.inputs) {
    check_text_input(input);  // every input before the first is read: no hour lost to a typo
    std::error_code ec;
    stored_bytes += std::filesystem::file_size(input, ec);
  }
  const int threads = options.threads > 0 ? options.threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ProgressBar progress(options.progress == "always" || (options.progress == "auto" && stored_bytes >= kProgressBytes),
                       stored_bytes);
  create_parent_directory(options.output);
  TokenStoreWriter writer(options.output, meta);

  std::size_t next_input = 0, replaced = 0;
  std::uint64_t bytes_of_finished_inputs = 0;
  std::unique_ptr<TextSegmentReader> reader;
  const auto next_segment = [&](TextSegment& segment) {
    for (;;) {
      if (!reader) {
        if (next_input == options.inputs.size()) return false;
        const std::string& input = options.inputs[next_input++];
        TextFormat format{is_jsonl_path(input), document_split, options.jsonl_field};
        reader = std::make_unique<TextSegmentReader>(input, std::move(format), utf8_policy, cut, limits);
      }
      if (reader->next(segment)) return true;
      replaced += reader->replaced();
      bytes_of_finished_inputs += reader->stored_bytes_read();
      reader.reset();
    }
  };
  std::uint64_t document = 0;
  const auto write_segment = [&](TokenizedSegment&& segment) {
    const auto split = is_held_out_document(document, options.valid_fraction) ? TokenStoreWriter::Split::kValid
                                                                              : TokenStoreWriter::Split::kTrain;
    if (segment.ends_document && end_of_text) segment.ids.push_back(*end_of_text);
    writer.append(split, segment.ids);
    if (segment.ends_document) {
      writer.end_document(split);
      ++document;
    }
    progress.update(bytes_of_finished_inputs + (reader ? reader->stored_bytes_read() : 0));
  };
  try {
    tokenize_stream(threads, make_encoder, next_segment, write_segment);
  } catch (const std::bad_alloc&) {
    const std::string input = options.inputs[next_input == 0 ? 0 : next_input - 1];
    throw DataError(input + ": out of memory while reading it (lower --max-unsplit-mb or --threads)");
  }
  progress.finish();
  if (document == 0) throw DataError("the inputs hold no text (expected at least one non-blank document)");
  if (replaced > 0) std::fprintf(stderr, "prepare-data: replaced %zu invalid UTF-8 sequences with U+FFFD\n", replaced);
  if (writer.tokens(TokenStoreWriter::Split::kTrain) == 0)
    throw DataError("every document went to the validation split; lower --valid-fraction or add text");
  finish_and_report(writer, meta, options.output, start);
  return 0;
}

int run(const PrepareDataOptions& options) {
  check_common(options);
  // Every option is checked even where token data makes it unused, and mixed inputs are refused
  // before any input is read.
  TokenizerFiles files = TokenizerFiles::defaults();
  files.gpt2_dir = options.gpt2_dir;
  const TokenizerRegistry tokenizers = TokenizerRegistry::standard(files);
  tokenizers.check_name(options.tokenizer);
  const DocumentSplit document_split = parse_document_split(options.documents);
  const InvalidUtf8 utf8_policy = parse_invalid_utf8(options.invalid_utf8);
  const bool token_data = is_imported_format(options.inputs.front());
  for (const std::string& input : options.inputs)
    if (is_imported_format(input) != token_data)
      throw DataError(input + (token_data ? ": cannot mix text inputs with token data (.bin/.idx) in one run"
                                          : ": cannot mix token data (.bin/.idx) with text inputs in one run"));
  if (token_data) return convert(options);
  const Tokenizer tokenizer = tokenizers.load(options.tokenizer);
  const TokenStoreMeta meta{tokenizer.name(), tokenizer.vocab_size(), options.inputs, ""};
  SegmentLimits limits;
  limits.max_unsplit_bytes = static_cast<std::size_t>(options.max_unsplit_mb) << 20;
  return tokenize_inputs(options, meta, tokenizer.segment_encoders(), tokenizer.end_of_text(), document_split,
                         utf8_policy, tokenizer.cut_rule(), limits);
}

}  // namespace

int prepare_data_command(int argc, char** argv) {
  PrepareDataOptions options;
  SubcommandOptions description(
      "prepare-data", "--output FILE.h5 [--input FILE ...] [options]",
      "Tokenizes text files (plain, JSON Lines, gzip-compressed) into one HDF5 token store of documents\n"
      "in a train and a validation split, or converts Megatron-LM and llm.c token files into one.");
  describe(description, options);
  if (const auto code = description.parse(argc, argv)) return *code;
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::cerr << "pipelane prepare-data: " << error.what() << "\n";
  }
  return 1;
}

}  // namespace pipelane
