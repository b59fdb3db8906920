#include <gtest/gtest.h>

#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "datasets/byte_tokenizer.h"
#include "datasets/hdf5_handle.h"
#include "datasets/importers.h"
#include "datasets/token_store.h"
#include "datasets/unigram.h"
#include "tests/datasets/test_files.h"
#include "tests/datasets/token_data_files.h"
#include "trainer/cli/prepare_data_command.h"

namespace pipelane {
namespace {

using test_support::TempDir;

int run_prepare_data(std::vector<std::string> args) {
  args.insert(args.begin(), "prepare-data");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  return prepare_data_command(static_cast<int>(args.size()), argv.data());
}

std::string decode_document(const TokenSplit& split, std::size_t doc) {
  const std::vector<std::uint32_t> ids(split.tokens.begin() + split.doc_offsets[doc],
                                       split.tokens.begin() + split.doc_offsets[doc + 1]);
  return ByteTokenizer().decode(ids);
}

std::size_t document_count(const TokenSplit& split) { return split.doc_offsets.size() - 1; }

TEST(PrepareData, TextFileWithParagraphsEndToEnd) {
  TempDir dir;
  std::string text;
  std::vector<std::string> paragraphs;
  for (int i = 0; i < 20; ++i) {
    paragraphs.push_back("paragraph " + std::to_string(i) + " caf\xC3\xA9\nsecond line\n");
    text += paragraphs.back() + "\n\n";
  }
  test_support::write_file(dir.file("corpus.txt"), text);
  const std::string output = dir.file("out/tokens.h5");  // parent directory is created

  ::testing::internal::CaptureStdout();
  ASSERT_EQ(run_prepare_data({"--input", dir.file("corpus.txt"), "--output", output,
                              "--valid-fraction", "0.25"}),
            0);
  const std::string summary = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(summary.find("20 documents"), std::string::npos) << summary;
  EXPECT_NE(summary.find(output), std::string::npos) << summary;

  const TokenStore store = TokenStore::open(output);
  EXPECT_EQ(store.meta().tokenizer, "byte");
  EXPECT_EQ(store.meta().vocab_size, 256u);
  EXPECT_EQ(store.meta().sources, std::vector<std::string>{dir.file("corpus.txt")});
  // f = 0.25 holds out documents 3, 7, 11, 15, 19.
  ASSERT_EQ(document_count(store.train()), 15u);
  ASSERT_EQ(document_count(store.valid()), 5u);
  std::size_t train_doc = 0, valid_doc = 0;
  for (int i = 0; i < 20; ++i) {
    if (i % 4 == 3)
      EXPECT_EQ(decode_document(store.valid(), valid_doc++), paragraphs[i]);
    else
      EXPECT_EQ(decode_document(store.train(), train_doc++), paragraphs[i]);
  }
}

TEST(PrepareData, GzipAndTextInputsAsWholeFileDocuments) {
  TempDir dir;
  const std::string plain = "plain file\n\nwith two paragraphs\n";
  const std::string zipped = "compressed \xE2\x9C\x93\n\n\nfile\n";
  test_support::write_file(dir.file("a.txt"), plain);
  test_support::write_gzip_file(dir.file("b.txt.gz"), zipped);
  const std::string output = dir.file("whole.h5");

  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data({"--input", dir.file("a.txt"), dir.file("b.txt.gz"), "--output",
                                       output, "--documents", "whole-file", "--valid-fraction", "0.5"});
  ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0);

  const TokenStore store = TokenStore::open(output);
  ASSERT_EQ(document_count(store.train()), 1u);  // f = 0.5: document 0 trains, document 1 validates
  ASSERT_EQ(document_count(store.valid()), 1u);
  EXPECT_EQ(decode_document(store.train(), 0), plain);
  EXPECT_EQ(decode_document(store.valid(), 0), zipped);
  EXPECT_EQ(store.meta().sources.size(), 2u);
}

// Runs a failing command; returns its stderr after checking it is the one promised line.
// A bad input or option value is 1; a command line the parser refuses (an unknown or missing
// option) is 2, as in every command.
std::string expect_failure(const std::vector<std::string>& args, int expected_status = 1) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data(args);
  ::testing::internal::GetCapturedStdout();
  const std::string error = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, expected_status);
  EXPECT_EQ(error.rfind("pipelane prepare-data: ", 0), 0u) << error;
  EXPECT_EQ(error.find('\n'), error.size() - 1) << "expected exactly one line: " << error;
  return error;
}

TEST(PrepareData, MissingInputFailsWithoutLeavingAnOutputFile) {
  TempDir dir;
  const std::string error =
      expect_failure({"--input", dir.file("absent.txt"), "--output", dir.file("out.h5")});
  EXPECT_NE(error.find("absent.txt: no such file"), std::string::npos) << error;
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(PrepareData, RejectsBadOptionsAndEmptyInput) {
  TempDir dir;
  test_support::write_file(dir.file("text.txt"), "some text\n");
  test_support::write_file(dir.file("blank.txt"), "\n  \n\n");
  const std::string out = dir.file("out.h5");
  EXPECT_NE(expect_failure({"--input", dir.file("text.txt"), "--output", out, "--tokenizer", "bpe"})
                .find("unknown tokenizer 'bpe'"),
            std::string::npos);
  expect_failure({"--input", dir.file("text.txt"), "--output", out, "--documents", "lines"});
  expect_failure({"--input", dir.file("text.txt"), "--output", out, "--valid-fraction", "1"});
  EXPECT_NE(expect_failure({"--input", dir.file("text.txt")}, 2).find("'--output' is required"), std::string::npos);
  expect_failure({"--input", dir.file("blank.txt"), "--output", out});
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(PrepareData, HelpDocumentsEveryOptionAndDefault) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_prepare_data({"--help"}), 0);
  const std::string help = ::testing::internal::GetCapturedStdout();
  for (const char* expected : {"--input", "--output", "--tokenizer", "--documents", "--valid-fraction",
                               "jargon.txt.gz", "byte", "blank-lines", "whole-file", "0.05"})
    EXPECT_NE(help.find(expected), std::string::npos) << "missing " << expected << " in:\n" << help;
}

TEST(PrepareData, DefaultCorpusBeatsUniformUnderUnigram) {
  const std::string corpus = "/usr/share/doc/jargon-text/jargon.txt.gz";
  if (!std::filesystem::exists(corpus)) GTEST_SKIP() << corpus << " is not installed";
  TempDir dir;
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(run_prepare_data({"--output", dir.file("jargon.h5")}), 0);
  ::testing::internal::GetCapturedStdout();
  const TokenStore store = TokenStore::open(dir.file("jargon.h5"));
  EXPECT_GT(store.train().tokens.size(), 1000000u);
  const double valid_share = static_cast<double>(document_count(store.valid())) /
                             static_cast<double>(document_count(store.train()) + document_count(store.valid()));
  EXPECT_NEAR(valid_share, 0.05, 0.001);
  // English text in bytes: well under uniform ln(256) = 5.55, well above zero.
  const double entropy = unigram_cross_entropy(store.train(), store.valid(), 256);
  EXPECT_GT(entropy, 2.0);
  EXPECT_LT(entropy, 4.0);
}

// ---- hostile inputs: bounded memory, one clear line ----

// `bytes` zero bytes, gzip-compressed (about a thousandth of their size), written a MiB at a time.
void write_gzip_zeros(const std::string& path, std::size_t bytes) {
  gzFile file = gzopen(path.c_str(), "wb9");
  ASSERT_NE(file, nullptr);
  const std::string zeros(std::size_t{1} << 20, '\0');
  for (std::size_t done = 0; done < bytes; done += zeros.size())
    ASSERT_EQ(gzwrite(file, zeros.data(), static_cast<unsigned>(zeros.size())), static_cast<int>(zeros.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

long resident_kib() {  // VmRSS of this process
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// A gzip bomb used to be read whole, split, then tokenized: ~9x its text in memory, and an
// uncaught bad_alloc in a tokenizer thread (SIGABRT) once that did not fit. Streamed, memory grows
// by a bounded amount whatever the text size: here by less than half of the text itself.
TEST(PrepareData, GzipBombStreamsThroughInBoundedMemory) {
  TempDir dir;
  constexpr std::size_t kTextBytes = std::size_t{96} << 20;
  write_gzip_zeros(dir.file("bomb.txt.gz"), kTextBytes);
  ASSERT_LT(std::filesystem::file_size(dir.file("bomb.txt.gz")), kTextBytes / 500);
  const std::string output = dir.file("bomb.h5");
  // In a child process, so its peak resident memory is its own.
  EXPECT_EXIT(
      {
        const long before = resident_kib();
        std::fclose(stdout);  // the summary line is not what this test looks at
        const int status = run_prepare_data({"--input", dir.file("bomb.txt.gz"), "--output", output,
                                             "--documents", "whole-file", "--valid-fraction", "0", "--threads", "2"});
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        const long growth_kib = usage.ru_maxrss - before;
        std::fprintf(stderr, "status %d, memory growth %ld KiB\n", status, growth_kib);
        std::exit(status == 0 && growth_kib < static_cast<long>(kTextBytes / 2 / 1024) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "status 0, memory growth");
  const hdf5::ErrorSilencer quiet;
  hdf5::File file = hdf5::open_file(output);
  hdf5::Dataset tokens = hdf5::open_dataset(file.get(), "/train/tokens");
  EXPECT_EQ(hdf5::dataset_elements(tokens.get()), kTextBytes);  // every byte became a token
}

// Text with no place to cut it between tokens cannot stream: past --max-unsplit-mb it is one line.
// (A bomb of zeros under the GPT-2 tokenizer is such text; for bytes, continuation bytes are.)
TEST(PrepareData, UnsplittableTextPastTheLimitIsOneClearLine) {
  TempDir dir;
  test_support::write_file(dir.file("run.txt"), "fine\n\n" + std::string(std::size_t{3} << 20, '\x80'));
  const std::string error = expect_failure({"--input", dir.file("run.txt"), "--output", dir.file("x.h5"),
                                            "--max-unsplit-mb", "2", "--invalid-utf8", "replace"});
  EXPECT_NE(error.find("run.txt: byte 6: more than 2 MiB of text with no place to cut it between tokens "
                       "(a byte that does not continue a UTF-8 sequence)"),
            std::string::npos)
      << error;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.h5")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);  // no partial file either
}

// ---- JSON Lines inputs -----------------------------------------------------------------------

// Every document of the store in file order, given that f = `valid_fraction` decided the split.
std::vector<std::string> decoded_in_order(const TokenStore& store, std::size_t documents, double valid_fraction) {
  std::vector<std::string> out;
  std::size_t train_doc = 0, valid_doc = 0;
  for (std::size_t i = 0; i < documents; ++i)
    out.push_back(is_held_out_document(i, valid_fraction) ? decode_document(store.valid(), valid_doc++)
                                                          : decode_document(store.train(), train_doc++));
  EXPECT_EQ(train_doc, document_count(store.train()));
  EXPECT_EQ(valid_doc, document_count(store.valid()));
  return out;
}

// Names in the directory, sorted: failing runs must leave nothing (no X.h5, no temporary file).
std::vector<std::string> directory_entries(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path()))
    names.push_back(std::filesystem::relative(entry.path(), dir.path()).string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(PrepareData, JsonlRecordsUseTheTextFieldInFileOrder) {
  TempDir dir;
  // JSON escapes decode to the document bytes: \n, \", \u00e9 (2 UTF-8 bytes), \ud83d\ude00 (4 bytes).
  const std::vector<std::string> texts = {
      "first record\nwith a line break", "second \"quoted\"", "caf\xC3\xA9 \xF0\x9F\x98\x80",
      "fourth", "fifth", "sixth", "seventh", "eighth"};
  const std::string jsonl =
      "{\"text\": \"first record\\nwith a line break\", \"id\": 0}\n"
      "{\"id\": 1, \"text\": \"second \\\"quoted\\\"\"}\n"
      "\n"                                             // blank lines are skipped
      "{\"text\": \"caf\\u00e9 \\ud83d\\ude00\"}\r\n"  // CRLF line end
      "{\"text\": \"\"}\n"                             // empty document: dropped
      "{\"text\": \" \\n\\t \"}\n"                      // whitespace only: dropped too
      "{\"text\": \"fourth\", \"body\": 7}\n"
      "  {\"text\": \"fifth\"}  \n"
      "{\"text\": \"sixth\"}\n"
      "{\"text\": \"seventh\"}\n"
      "{\"text\": \"eighth\"}";                        // no final newline
  test_support::write_file(dir.file("records.jsonl"), jsonl);
  const std::string output = dir.file("jsonl.h5");

  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data({"--input", dir.file("records.jsonl"), "--output", output,
                                       "--valid-fraction", "0.25"});
  const std::string summary = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0);
  EXPECT_NE(summary.find("8 documents (6 train, 2 valid)"), std::string::npos) << summary;

  const TokenStore store = TokenStore::open(output);
  EXPECT_EQ(store.meta().tokenizer, "byte");
  EXPECT_EQ(store.meta().sources, std::vector<std::string>{dir.file("records.jsonl")});
  ASSERT_EQ(document_count(store.train()) + document_count(store.valid()), texts.size());
  ASSERT_EQ(document_count(store.valid()), 2u);  // floor(8 * 0.25): documents 3 and 7
  EXPECT_EQ(decoded_in_order(store, texts.size(), 0.25), texts);
  EXPECT_EQ(decode_document(store.valid(), 0), "fourth");
  EXPECT_EQ(decode_document(store.valid(), 1), "eighth");
}

TEST(PrepareData, JsonlFieldOptionSelectsTheField) {
  TempDir dir;
  // "text" is present but not a string: only the chosen field is looked at.
  test_support::write_file(dir.file("body.jsonl"),
                           "{\"text\": 1, \"body\": \"alpha\"}\n"
                           "{\"body\": \"beta\", \"title\": \"ignored\"}\n"
                           "{\"body\": \"gamma\"}\n");
  const std::string output = dir.file("body.h5");
  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data({"--input", dir.file("body.jsonl"), "--output", output,
                                       "--jsonl-field", "body", "--valid-fraction", "0"});
  ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0);
  const TokenStore store = TokenStore::open(output);
  ASSERT_EQ(document_count(store.train()), 3u);
  ASSERT_EQ(document_count(store.valid()), 0u);
  EXPECT_EQ(decode_document(store.train(), 0), "alpha");
  EXPECT_EQ(decode_document(store.train(), 1), "beta");
  EXPECT_EQ(decode_document(store.train(), 2), "gamma");

  // The same file under the default field fails on line 1, where "text" is a number.
  const std::string error = expect_failure({"--input", dir.file("body.jsonl"), "--output", dir.file("x.h5")});
  EXPECT_NE(error.find("body.jsonl:1: field \"text\" is number, expected a string"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.h5")));
}

TEST(PrepareData, GzipJsonlAndTextInputsKeepInputOrder) {
  TempDir dir;
  test_support::write_gzip_file(dir.file("a.jsonl.gz"),
                                "{\"text\": \"zipped one\"}\n{\"text\": \"zipped two \\u2713\"}\n");
  test_support::write_file(dir.file("b.txt"), "plain paragraph\n\nanother paragraph\n");
  const std::string output = dir.file("mixed.h5");
  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data({"--input", dir.file("a.jsonl.gz"), dir.file("b.txt"), "--output",
                                       output, "--valid-fraction", "0"});
  ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0);
  const TokenStore store = TokenStore::open(output);
  ASSERT_EQ(document_count(store.train()), 4u);
  EXPECT_EQ(decode_document(store.train(), 0), "zipped one");
  EXPECT_EQ(decode_document(store.train(), 1), "zipped two \xE2\x9C\x93");
  EXPECT_EQ(decode_document(store.train(), 2), "plain paragraph\n");
  EXPECT_EQ(decode_document(store.train(), 3), "another paragraph\n");
  EXPECT_EQ(store.meta().sources, (std::vector<std::string>{dir.file("a.jsonl.gz"), dir.file("b.txt")}));
}

TEST(PrepareData, BadJsonlFailsNamingFileAndLine) {
  TempDir dir;
  const std::string good = "{\"text\": \"fine\"}\n";
  test_support::write_file(dir.file("not_json.jsonl"), good + "\n" + "this is not json\n" + good);
  test_support::write_file(dir.file("missing.jsonl"), good + "{\"body\": \"no text here\"}\n");
  test_support::write_file(dir.file("number.jsonl"), good + good + good + "{\"text\": 42}\n");
  test_support::write_file(dir.file("array.jsonl"), "[\"text\", \"a list\"]\n");
  test_support::write_file(dir.file("ok.jsonl"), good);
  test_support::write_gzip_file(dir.file("zipped.jsonl.gz"), good + "{\"text\": null}\n");
  const std::vector<std::string> inputs = directory_entries(dir);
  const std::string out = dir.file("out.h5");

  std::string error = expect_failure({"--input", dir.file("not_json.jsonl"), "--output", out});
  EXPECT_NE(error.find("not_json.jsonl:3: invalid JSON"), std::string::npos) << error;  // blank line 2 counts
  error = expect_failure({"--input", dir.file("missing.jsonl"), "--output", out});
  EXPECT_NE(error.find("missing.jsonl:2: no field \"text\""), std::string::npos) << error;
  EXPECT_NE(error.find("--jsonl-field"), std::string::npos) << error;
  error = expect_failure({"--input", dir.file("number.jsonl"), "--output", out});
  EXPECT_NE(error.find("number.jsonl:4: field \"text\" is number, expected a string"), std::string::npos) << error;
  error = expect_failure({"--input", dir.file("array.jsonl"), "--output", out});
  EXPECT_NE(error.find("array.jsonl:1: expected a JSON object, got array"), std::string::npos) << error;
  error = expect_failure({"--input", dir.file("ok.jsonl"), "--output", out, "--jsonl-field", "body"});
  EXPECT_NE(error.find("ok.jsonl:1: no field \"body\""), std::string::npos) << error;
  // A bad file after a good one: still nothing written; line numbers count decompressed lines.
  error = expect_failure({"--input", dir.file("ok.jsonl"), dir.file("zipped.jsonl.gz"), "--output", out});
  EXPECT_NE(error.find("zipped.jsonl.gz:2: field \"text\" is null"), std::string::npos) << error;
  EXPECT_EQ(directory_entries(dir), inputs);
}

// ---- invalid UTF-8 ------------------------------------------------------------------------------

TEST(PrepareData, InvalidUtf8FailsOrIsReplacedInText) {
  TempDir dir;
  // \xFF is never valid; \xE2\x9C is a truncated 3-byte sequence (one maximal subpart, one U+FFFD).
  test_support::write_file(dir.file("bad.txt"), "good text\n\nbad \xFF byte and \xE2\x9C cut\n");
  const std::vector<std::string> inputs = directory_entries(dir);
  const std::string out = dir.file("out.h5");

  const std::string error =
      expect_failure({"--input", dir.file("bad.txt"), "--output", out, "--invalid-utf8", "fail"});
  EXPECT_NE(error.find("bad.txt: invalid UTF-8 at byte 15"), std::string::npos) << error;
  EXPECT_EQ(directory_entries(dir), inputs);
  EXPECT_NE(expect_failure({"--input", dir.file("bad.txt"), "--output", out, "--invalid-utf8", "ignore"})
                .find("unknown invalid-UTF-8 policy 'ignore'"),
            std::string::npos);
  EXPECT_EQ(directory_entries(dir), inputs);

  // Default: replace, and say so on stderr.
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data({"--input", dir.file("bad.txt"), "--output", out, "--valid-fraction", "0"});
  ::testing::internal::GetCapturedStdout();
  const std::string note = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(status, 0) << note;
  EXPECT_NE(note.find("replaced 2 invalid UTF-8 sequences"), std::string::npos) << note;
  const TokenStore store = TokenStore::open(out);
  ASSERT_EQ(document_count(store.train()), 2u);
  EXPECT_EQ(decode_document(store.train(), 0), "good text\n");
  EXPECT_EQ(decode_document(store.train(), 1), "bad \xEF\xBF\xBD byte and \xEF\xBF\xBD cut\n");
}

TEST(PrepareData, InvalidUtf8FailsOrIsReplacedInJsonl) {
  TempDir dir;
  // The bad byte sits inside the JSON string on line 2, at byte 13 of that line.
  test_support::write_file(dir.file("bad.jsonl"), "{\"text\": \"fine\"}\n{\"text\": \"caf\xFF!\"}\n");
  const std::vector<std::string> inputs = directory_entries(dir);
  const std::string out = dir.file("out.h5");

  const std::string error =
      expect_failure({"--input", dir.file("bad.jsonl"), "--output", out, "--invalid-utf8", "fail"});
  EXPECT_NE(error.find("bad.jsonl:2: invalid UTF-8 at byte 13"), std::string::npos) << error;
  EXPECT_EQ(directory_entries(dir), inputs);

  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data({"--input", dir.file("bad.jsonl"), "--output", out, "--valid-fraction", "0"});
  ::testing::internal::GetCapturedStdout();
  const std::string note = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(status, 0);
  EXPECT_NE(note.find("replaced 1 invalid UTF-8 sequences"), std::string::npos) << note;
  const TokenStore store = TokenStore::open(out);
  ASSERT_EQ(document_count(store.train()), 2u);
  EXPECT_EQ(decode_document(store.train(), 0), "fine");
  EXPECT_EQ(decode_document(store.train(), 1), "caf\xEF\xBF\xBD!");
}

// ---- converting Megatron-LM and llm.c token data -------------------------------------------------

using test_support::llmc_shard;
using test_support::write_megatron;

// The document `doc` of `split` as ids.
std::vector<std::uint32_t> document_ids(const TokenSplit& split, std::size_t doc) {
  return {split.tokens.begin() + static_cast<std::ptrdiff_t>(split.doc_offsets[doc]),
          split.tokens.begin() + static_cast<std::ptrdiff_t>(split.doc_offsets[doc + 1])};
}

// Checks that train + valid hold exactly `docs`, in order, split by is_held_out_document(f).
template <typename Token>
void expect_documents(const TokenStore& store, const std::vector<std::vector<Token>>& docs, double f) {
  std::size_t held_out = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) held_out += is_held_out_document(i, f);
  ASSERT_EQ(document_count(store.valid()), held_out);
  ASSERT_EQ(document_count(store.train()), docs.size() - held_out);
  std::size_t train_doc = 0, valid_doc = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const std::vector<std::uint32_t> expected(docs[i].begin(), docs[i].end());
    if (is_held_out_document(i, f))
      EXPECT_EQ(document_ids(store.valid(), valid_doc++), expected) << "document " << i << " (valid)";
    else
      EXPECT_EQ(document_ids(store.train(), train_doc++), expected) << "document " << i << " (train)";
  }
}

TEST(PrepareData, ConvertsMegatronDatasetKeepingTokensAndDocuments) {
  TempDir dir;
  std::vector<std::vector<std::uint16_t>> docs;
  for (int d = 0; d < 10; ++d) {
    std::vector<std::uint16_t> doc;
    for (int t = 0; t < 3 + d; ++t) doc.push_back(static_cast<std::uint16_t>((d * 4999 + t * 13) % 50257));
    docs.push_back(doc);
  }
  docs[4].push_back(50256);  // the largest GPT-2 id, and id 0, survive
  docs[5].insert(docs[5].begin(), 0);
  write_megatron(dir.file("corpus"), docs);

  for (const char* input : {"corpus.bin", "corpus.idx"}) {  // either file names the pair
    SCOPED_TRACE(input);
    const std::string output = dir.file(std::string("from_") + input + ".h5");
    ::testing::internal::CaptureStdout();
    const int status = run_prepare_data({"--input", dir.file(input), "--output", output, "--valid-fraction",
                                         "0.25", "--tokenizer", "byte"});  // --tokenizer is ignored
    const std::string summary = ::testing::internal::GetCapturedStdout();
    ASSERT_EQ(status, 0);
    EXPECT_NE(summary.find("10 documents (8 train, 2 valid)"), std::string::npos) << summary;
    const TokenStore store = TokenStore::open(output);
    EXPECT_EQ(store.meta().tokenizer, "gpt2");
    EXPECT_EQ(store.meta().vocab_size, 50257u);
    EXPECT_EQ(store.meta().sources, std::vector<std::string>{dir.file(input)});  // as given
    EXPECT_EQ(document_count(store.valid()), 2u);  // floor(10 * 0.25)
    expect_documents(store, docs, 0.25);
  }
}

TEST(PrepareData, ConvertsLlmcShardKeepingTokensAndDocuments) {
  TempDir dir;
  std::vector<std::vector<std::uint16_t>> docs;
  std::vector<std::uint16_t> tokens;
  for (int d = 0; d < 9; ++d) {
    std::vector<std::uint16_t> doc{50256};  // every llm.c document starts with <|endoftext|>
    for (int t = 0; t < 2 + (d * 3) % 5; ++t) doc.push_back(static_cast<std::uint16_t>(100 * d + t));
    tokens.insert(tokens.end(), doc.begin(), doc.end());
    docs.push_back(doc);
  }
  test_support::write_file(dir.file("shard_000.bin"), llmc_shard(tokens, 1));
  const std::string output = dir.file("llmc.h5");
  ::testing::internal::CaptureStdout();
  const int status =
      run_prepare_data({"--input", dir.file("shard_000.bin"), "--output", output, "--valid-fraction", "0.25"});
  const std::string summary = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0);
  EXPECT_NE(summary.find("9 documents (7 train, 2 valid)"), std::string::npos) << summary;
  const TokenStore store = TokenStore::open(output);
  EXPECT_EQ(store.meta().tokenizer, "gpt2");
  EXPECT_EQ(store.meta().vocab_size, 50257u);
  EXPECT_EQ(store.meta().sources, std::vector<std::string>{dir.file("shard_000.bin")});
  EXPECT_EQ(document_count(store.valid()), 2u);  // floor(9 * 0.25)
  expect_documents(store, docs, 0.25);
  EXPECT_EQ(store.train().tokens.size() + store.valid().tokens.size(), tokens.size());
}

TEST(PrepareData, ConcatenatesMegatronAndLlmcInputsOfOneTokenizer) {
  TempDir dir;
  const std::vector<std::vector<std::uint16_t>> megatron_docs = {{1, 2, 3}, {4, 5}, {6}};
  write_megatron(dir.file("m"), megatron_docs);
  test_support::write_file(dir.file("l.bin"), llmc_shard(std::vector<std::uint16_t>{50256, 7, 8, 50256, 9}, 1));
  const std::string output = dir.file("both.h5");
  ::testing::internal::CaptureStdout();
  const int status = run_prepare_data({"--input", dir.file("m.bin"), dir.file("l.bin"), "--output", output,
                                       "--valid-fraction", "0.2"});
  ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0);
  const TokenStore store = TokenStore::open(output);
  expect_documents(store, std::vector<std::vector<std::uint16_t>>{{1, 2, 3}, {4, 5}, {6}, {50256, 7, 8}, {50256, 9}},
                   0.2);
  EXPECT_EQ(document_count(store.valid()), 1u);  // floor(5 * 0.2): document 4
  EXPECT_EQ(store.meta().sources, (std::vector<std::string>{dir.file("m.bin"), dir.file("l.bin")}));
}

TEST(PrepareData, TokenDataOfDifferentTokenizersOrMixedWithTextFails) {
  TempDir dir;
  write_megatron(dir.file("m"), {{1, 2, 3}, {4, 5}});
  test_support::write_file(dir.file("gpt2.bin"), llmc_shard(std::vector<std::uint16_t>{50256, 1, 2}, 1));
  test_support::write_file(dir.file("llama.bin"), llmc_shard(std::vector<std::uint32_t>{128000, 70000, 5}, 2));
  test_support::write_file(dir.file("text.txt"), "some text\n");
  test_support::write_file(dir.file("records.jsonl"), "{\"text\": \"a record\"}\n");
  const std::vector<std::string> inputs = directory_entries(dir);
  const std::string out = dir.file("out.h5");

  std::string error = expect_failure({"--input", dir.file("text.txt"), dir.file("m.bin"), "--output", out});
  EXPECT_NE(error.find("m.bin: cannot mix token data (.bin/.idx) with text inputs"), std::string::npos) << error;
  error = expect_failure({"--input", dir.file("records.jsonl"), dir.file("m.idx"), "--output", out});
  EXPECT_NE(error.find("m.idx: cannot mix token data"), std::string::npos) << error;
  error = expect_failure({"--input", dir.file("gpt2.bin"), dir.file("text.txt"), "--output", out});
  EXPECT_NE(error.find("text.txt: cannot mix text inputs with token data"), std::string::npos) << error;
  error = expect_failure({"--input", dir.file("gpt2.bin"), dir.file("llama.bin"), "--output", out});
  EXPECT_NE(error.find("llama.bin: tokenized with llama3, the inputs before with gpt2"), std::string::npos) << error;
  // Options that token data does not use are still checked, as for text.
  error = expect_failure({"--input", dir.file("gpt2.bin"), "--output", out, "--tokenizer", "bpe"});
  EXPECT_NE(error.find("unknown tokenizer 'bpe'"), std::string::npos) << error;
  error = expect_failure({"--input", dir.file("gpt2.bin"), "--output", out, "--invalid-utf8", "bogus"});
  EXPECT_NE(error.find("bogus"), std::string::npos) << error;
  error = expect_failure({"--input", dir.file("gpt2.bin"), "--output", out, "--documents", "lines"});
  EXPECT_NE(error.find("lines"), std::string::npos) << error;
  EXPECT_EQ(directory_entries(dir), inputs);
}

}  // namespace
}  // namespace pipelane
