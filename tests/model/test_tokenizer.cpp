// The C++ tokenizer against ids written by examples/smollm2/tools/make_tokenizer_fixture.py with
// the Hugging Face `tokenizers` library (about 4,200 tokens: prose, numbers, whitespace runs,
// Unicode, emoji, contractions, chat special tokens).
#include <sstream>
#include <vector>

#include "test_support.hpp"
#include "tokenizer.hpp"

using namespace smollm2;
using namespace smollm2_test;

TEST_CASE("tokenizer matches the Hugging Face reference on the fixture") {
  const Tokenizer tok(model_file());
  const std::string text = read_file(std::string(SMOLLM2_FIXTURES) + "/tokenizer_text.txt");
  std::vector<std::string> segments;
  for (size_t b = 0;;) {
    const size_t e = text.find("\n\x1e\n", b);
    segments.push_back(text.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 3;
  }
  std::istringstream ids(read_file(std::string(SMOLLM2_FIXTURES) + "/tokenizer_ids.txt"));
  std::string line;
  size_t k = 0, tokens = 0;
  while (std::getline(ids, line)) {
    REQUIRE(k < segments.size());
    std::istringstream is(line);
    std::vector<int32_t> want;
    for (int32_t x; is >> x;) want.push_back(x);
    const std::vector<int32_t> got = tok.encode(segments[k]);
    CHECK_MESSAGE(got == want, "segment " << k << ": " << segments[k].substr(0, 60));
    if (segments[k].find('\x04') == std::string::npos) CHECK(tok.decode(got) == segments[k]);  // round trip
    tokens += want.size();
    ++k;
  }
  CHECK(k == segments.size());
  CHECK(tokens > 3000);
}

TEST_CASE("pre-tokenizer: digits alone, GPT-2 split") {
  const std::vector<std::string> want = {"Hello", ",", " world", "!", " ", "1", "2", "3", "  ", " x", "'s", "\n\n"};
  CHECK(Tokenizer::pre_tokenize("Hello, world! 123   x's\n\n") == want);
  const Tokenizer tok(model_file());
  CHECK(tok.encode("<|im_start|>user") == std::vector<int32_t>{1, 4093});
  CHECK(tok.encode("<|im_start|>", /*parse_special*/ false).size() > 1);
}
