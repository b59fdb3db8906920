#include "trainer/prepare_data_command.h"

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "datasets/byte_tokenizer.h"
#include "datasets/data_error.h"
#include "datasets/text_documents.h"
#include "datasets/token_store.h"

namespace pipelane {
namespace {

namespace po = boost::program_options;

constexpr const char* kDefaultCorpus = "/usr/share/doc/jargon-text/jargon.txt.gz";

struct PrepareDataOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string tokenizer;
  std::string documents;
  double valid_fraction = 0.05;
};

po::options_description describe_options(PrepareDataOptions& options) {
  po::options_description description(
      "pipelane prepare-data: tokenize text files into an HDF5 token store\nOptions");
  description.add_options()
      ("help,h", "print this help and exit")
      ("input,i", po::value(&options.inputs)->multitoken()
                      ->default_value({kDefaultCorpus}, kDefaultCorpus),
       "one or more text files (.txt, or gzip-compressed .gz)")
      ("output,o", po::value(&options.output)->required(),
       "token store to write (X.h5); required. Written under a temporary name and renamed when "
       "complete; missing parent directories are created")
      ("tokenizer", po::value(&options.tokenizer)->default_value("byte"),
       "tokenizer: byte (one token per byte, vocab 256)")
      ("documents", po::value(&options.documents)->default_value("blank-lines"),
       "document split: blank-lines (paragraphs separated by one or more blank lines) or "
       "whole-file (each input is one document)")
      ("valid-fraction", po::value(&options.valid_fraction)->default_value(0.05, "0.05"),
       "fraction of documents held out for validation, spread evenly: document i is held out iff "
       "floor((i+1)*f) > floor(i*f); 0 <= f < 1");
  return description;
}

void append_document(TokenSplit& split, const std::vector<std::uint32_t>& tokens) {
  split.tokens.insert(split.tokens.end(), tokens.begin(), tokens.end());
  split.doc_offsets.push_back(split.tokens.size());
}

// Document i goes to valid iff floor((i+1)*f) > floor(i*f): exactly floor(n*f) held out, evenly
// spaced, and the same documents every run.
bool is_held_out(std::size_t index, double valid_fraction) {
  return std::floor(static_cast<double>(index + 1) * valid_fraction) >
         std::floor(static_cast<double>(index) * valid_fraction);
}

int run(const PrepareDataOptions& options) {
  if (options.tokenizer != ByteTokenizer::kName)
    throw DataError("unknown tokenizer '" + options.tokenizer + "' (expected 'byte')");
  if (!(options.valid_fraction >= 0.0 && options.valid_fraction < 1.0))
    throw DataError("--valid-fraction must be in [0, 1), got " + std::to_string(options.valid_fraction));
  if (options.inputs.empty()) throw DataError("no --input files given");
  const DocumentSplit document_split = parse_document_split(options.documents);

  const ByteTokenizer tokenizer;
  TokenSplit train{{}, {0}};
  TokenSplit valid{{}, {0}};
  std::size_t document_index = 0;
  for (const std::string& input : options.inputs) {
    for (const std::string& document : split_documents(read_text_file(input), document_split)) {
      TokenSplit& split = is_held_out(document_index, options.valid_fraction) ? valid : train;
      append_document(split, tokenizer.encode(document));
      ++document_index;
    }
  }
  if (train.tokens.empty() && valid.tokens.empty())
    throw DataError("the inputs hold no text (expected at least one non-blank document)");
  if (train.tokens.empty())
    throw DataError("every document went to the validation split; lower --valid-fraction or add text");

  const std::filesystem::path output_directory = std::filesystem::path(options.output).parent_path();
  if (!output_directory.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(output_directory, ec);
    if (ec)
      throw DataError(options.output + ": cannot create directory " + output_directory.string() +
                      " (" + ec.message() + ")");
  }
  const TokenStoreMeta meta{ByteTokenizer::kName, ByteTokenizer::kVocabSize, options.inputs};
  write_token_store(options.output, meta, train, valid);

  std::cout << "prepare-data: " << document_index << " documents (" << train.doc_offsets.size() - 1
            << " train, " << valid.doc_offsets.size() - 1 << " valid), " << train.tokens.size()
            << " train tokens, " << valid.tokens.size() << " valid tokens, tokenizer "
            << meta.tokenizer << " -> " << options.output << "\n";
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
