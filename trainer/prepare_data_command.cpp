#include "trainer/prepare_data_command.h"

#include <unistd.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "datasets/byte_tokenizer.h"
#include "datasets/data_error.h"
#include "datasets/gpt2_tokenizer.h"
#include "datasets/importers.h"
#include "datasets/text_documents.h"
#include "datasets/token_store.h"

namespace pipelane {
namespace {

namespace po = boost::program_options;

constexpr const char* kDefaultCorpus = "/usr/share/doc/jargon-text/jargon.txt.gz";
constexpr std::size_t kProgressBytes = 16u << 20;  // inputs at least this large get a progress bar

struct PrepareDataOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string tokenizer;
  std::string gpt2_dir;
  std::string documents;
  std::string jsonl_field;
  std::string invalid_utf8;
  std::string progress;
  double valid_fraction = 0.05;
  int threads = 0;
};

po::options_description describe_options(PrepareDataOptions& options) {
  po::options_description description(
      "pipelane prepare-data: tokenize text files into an HDF5 token store\nOptions");
  description.add_options()
      ("help,h", "print this help and exit")
      ("input,i", po::value(&options.inputs)->multitoken()
                      ->default_value({kDefaultCorpus}, kDefaultCorpus),
       "one or more inputs: text (.txt), JSON Lines (.jsonl), either gzip-compressed (.gz); or token "
       "data to convert: Megatron-LM X.bin/X.idx, llm.c shards (.bin; documents are kept, "
       "--tokenizer is ignored)")
      ("output,o", po::value(&options.output)->required(),
       "token store to write (X.h5); required. Written under a temporary name and renamed when "
       "complete; missing parent directories are created")
      ("tokenizer", po::value(&options.tokenizer)->default_value("byte"),
       "tokenizer: byte (one token per byte, vocab 256) or gpt2 (GPT-2 BPE, vocab 50257, "
       "<|endoftext|> ends every document; files from scripts/fetch_gpt2_tokenizer.sh)")
      ("gpt2-dir", po::value(&options.gpt2_dir)->default_value(default_gpt2_tokenizer_dir()),
       "directory holding encoder.json and vocab.bpe (env PIPELANE_GPT2_DIR sets the default)")
      ("documents", po::value(&options.documents)->default_value("blank-lines"),
       "document split of .txt inputs: blank-lines (paragraphs separated by one or more blank lines) "
       "or whole-file (each input is one document)")
      ("jsonl-field", po::value(&options.jsonl_field)->default_value("text"),
       "field of each JSON Lines object that holds the document text")
      ("invalid-utf8", po::value(&options.invalid_utf8)->default_value("replace"),
       "invalid UTF-8 in text: replace (each bad sequence becomes U+FFFD, as GPT-2's reference "
       "encoder does) or fail (stop, naming the file and byte offset)")
      ("valid-fraction", po::value(&options.valid_fraction)->default_value(0.05, "0.05"),
       "fraction of documents held out for validation, spread evenly: document i is held out iff "
       "floor((i+1)*f) > floor(i*f); 0 <= f < 1")
      ("threads", po::value(&options.threads)->default_value(0),
       "tokenizer threads; 0 uses every core")
      ("progress", po::value(&options.progress)->default_value("auto"),
       "progress bar on stderr: auto (inputs of 16 MiB or more), always or never");
  return description;
}

// Tokenizes documents on `threads` threads, each with its own tokenizer copy (the GPT-2 piece
// cache is per copy). Documents are dealt out in contiguous blocks so results need no reordering.
template <typename Tokenizer>
std::vector<std::vector<std::uint32_t>> tokenize_all(const std::vector<std::string>& documents,
                                                     const Tokenizer& prototype, std::optional<std::uint32_t> eot,
                                                     int threads, bool progress, std::size_t total_bytes) {
  std::vector<std::vector<std::uint32_t>> ids(documents.size());
  std::atomic<std::size_t> bytes_done{0};
  std::atomic<int> running{threads};
  auto work = [&](std::size_t begin, std::size_t end) {
    Tokenizer tokenizer(prototype);
    for (std::size_t d = begin; d < end; ++d) {
      ids[d] = tokenizer.encode(documents[d]);
      if (eot) ids[d].push_back(*eot);
      bytes_done += documents[d].size();
    }
    --running;
  };
  std::vector<std::thread> pool;
  const std::size_t per = (documents.size() + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const std::size_t begin = std::min(documents.size(), t * per), end = std::min(documents.size(), begin + per);
    pool.emplace_back(work, begin, end);
  }
  const auto start = std::chrono::steady_clock::now();
  while (progress && running > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const double done = static_cast<double>(bytes_done), secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int width = 30, filled = static_cast<int>(width * done / std::max<double>(1, total_bytes));
    std::fprintf(stderr, "\rprepare-data: [%s%s] %5.1f%%  %.1f MB/s", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), 100.0 * done / std::max<double>(1, total_bytes),
                 done / 1e6 / std::max(secs, 1e-9));
  }
  for (auto& thread : pool) thread.join();
  if (progress) std::fprintf(stderr, "\n");
  return ids;
}

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
  if (options.progress != "auto" && options.progress != "always" && options.progress != "never")
    throw DataError("--progress must be auto, always or never, got '" + options.progress + "'");
}

void report(std::size_t documents, const TokenSplit& train, const TokenSplit& valid,
            const TokenStoreMeta& meta, const std::string& output, double seconds) {
  const std::size_t tokens = train.tokens.size() + valid.tokens.size();
  std::cout << "prepare-data: " << documents << " documents (" << train.doc_offsets.size() - 1
            << " train, " << valid.doc_offsets.size() - 1 << " valid), " << train.tokens.size()
            << " train tokens, " << valid.tokens.size() << " valid tokens, tokenizer "
            << meta.tokenizer << " -> " << output << "\n";
  std::printf("prepare-data: %.2f s, %.0f tokens/s\n", seconds, tokens / std::max(seconds, 1e-9));
}

// Megatron / llm.c inputs: documents as stored, re-split by --valid-fraction.
int convert(const PrepareDataOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  ImportedTokens all{{}, {{}, {0}}};
  for (const std::string& input : options.inputs) {
    ImportedTokens part = read_imported(input);
    if (all.meta.tokenizer.empty()) {
      all.meta = part.meta;
      all.meta.sources = {input};  // as given (the importer names the .bin of X.idx)
    } else if (part.meta.tokenizer != all.meta.tokenizer)
      throw DataError(input + ": tokenized with " + part.meta.tokenizer + ", the inputs before with " +
                      all.meta.tokenizer);
    else all.meta.sources.push_back(input);
    const std::uint64_t base = all.all.tokens.size();
    all.all.tokens.insert(all.all.tokens.end(), part.all.tokens.begin(), part.all.tokens.end());
    for (std::size_t i = 1; i < part.all.doc_offsets.size(); ++i)
      all.all.doc_offsets.push_back(base + part.all.doc_offsets[i]);
  }
  if (all.all.tokens.empty()) throw DataError("the inputs hold no tokens");
  TokenSplit train, valid;
  split_documents_by_fraction(all.all, options.valid_fraction, train, valid);
  if (train.tokens.empty())
    throw DataError("every document went to the validation split; lower --valid-fraction or add data");
  create_parent_directory(options.output);
  write_token_store(options.output, all.meta, train, valid);
  report(all.all.doc_offsets.size() - 1, train, valid, all.meta, options.output,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

int run(const PrepareDataOptions& options) {
  check_common(options);
  // Every option is checked even where token data makes it unused, and mixed inputs are refused
  // before any input is read.
  if (options.tokenizer != ByteTokenizer::kName && options.tokenizer != Gpt2Tokenizer::kName)
    throw DataError("unknown tokenizer '" + options.tokenizer + "' (expected 'byte' or 'gpt2')");
  const DocumentSplit document_split = parse_document_split(options.documents);
  const InvalidUtf8 utf8_policy = parse_invalid_utf8(options.invalid_utf8);
  const bool token_data = is_imported_format(options.inputs.front());
  for (const std::string& input : options.inputs)
    if (is_imported_format(input) != token_data)
      throw DataError(input + (token_data ? ": cannot mix text inputs with token data (.bin/.idx) in one run"
                                          : ": cannot mix token data (.bin/.idx) with text inputs in one run"));
  if (token_data) return convert(options);
  std::optional<Gpt2Tokenizer> gpt2;
  if (options.tokenizer == Gpt2Tokenizer::kName) {
    if (!gpt2_tokenizer_files_present(options.gpt2_dir))
      throw DataError(options.gpt2_dir + ": no encoder.json and vocab.bpe (run scripts/fetch_gpt2_tokenizer.sh)");
    gpt2.emplace(Gpt2Tokenizer::load_dir(options.gpt2_dir));
  }
  const auto start = std::chrono::steady_clock::now();

  std::vector<std::string> documents;
  std::size_t total_bytes = 0, replaced_total = 0;
  for (const std::string& input : options.inputs) {
    std::vector<std::string> docs;
    if (is_jsonl_path(input)) {
      std::size_t replaced = 0;
      docs = read_jsonl_documents(input, options.jsonl_field, utf8_policy, &replaced);
      replaced_total += replaced;
    } else {
      std::size_t replaced = 0;
      docs = split_documents(repair_utf8(read_text_file(input), utf8_policy, input, &replaced), document_split);
      replaced_total += replaced;
    }
    for (auto& d : docs) {
      total_bytes += d.size();
      documents.push_back(std::move(d));
    }
  }
  if (documents.empty())
    throw DataError("the inputs hold no text (expected at least one non-blank document)");
  if (replaced_total > 0)
    std::fprintf(stderr, "prepare-data: replaced %zu invalid UTF-8 sequences with U+FFFD\n", replaced_total);

  const int threads = options.threads > 0 ? options.threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool progress = options.progress == "always" ||
                        (options.progress == "auto" && total_bytes >= kProgressBytes);
  std::vector<std::vector<std::uint32_t>> ids =
      gpt2 ? tokenize_all(documents, *gpt2, gpt2->end_of_text(), threads, progress, total_bytes)
           : tokenize_all(documents, ByteTokenizer{}, std::nullopt, threads, progress, total_bytes);

  TokenSplit train{{}, {0}};
  TokenSplit valid{{}, {0}};
  for (std::size_t d = 0; d < ids.size(); ++d) {
    TokenSplit& split = is_held_out_document(d, options.valid_fraction) ? valid : train;
    split.tokens.insert(split.tokens.end(), ids[d].begin(), ids[d].end());
    split.doc_offsets.push_back(split.tokens.size());
  }
  if (train.tokens.empty())
    throw DataError("every document went to the validation split; lower --valid-fraction or add text");

  create_parent_directory(options.output);
  const TokenStoreMeta meta{gpt2 ? Gpt2Tokenizer::kName : ByteTokenizer::kName,
                            gpt2 ? gpt2->vocab_size() : ByteTokenizer::kVocabSize, options.inputs, ""};
  write_token_store(options.output, meta, train, valid);
  report(documents.size(), train, valid, meta, options.output,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

}  // namespace

int prepare_data_command(int argc, char** argv) {
  PrepareDataOptions options;
  const po::options_description description = describe_options(options);
  try {
    po::variables_map values;
    po::store(po::command_line_parser(argc, argv).options(description).run(), values);
    if (values.count("help")) {
      std::cout << description << "\n";
      return 0;
    }
    po::notify(values);  // after --help, so help works without the required --output
    return run(options);
  } catch (const po::error& error) {
    std::cerr << "pipelane prepare-data: " << error.what() << " (see --help)\n";
  } catch (const DataError& error) {
    std::cerr << "pipelane prepare-data: " << error.what() << "\n";
  } catch (const std::exception& error) {
    std::cerr << "pipelane prepare-data: " << error.what() << "\n";
  }
  return 1;
}

}  // namespace pipelane
