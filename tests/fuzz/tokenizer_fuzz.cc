// libFuzzer target for the tokenizer: tokenizer.json (+ tokenizer_config.json) is loaded, then a
// text is encoded and decoded. Any bytes give a Status or a working tokenizer; nothing crashes,
// throws, hangs or grows without bound.
//
// Input: TOKENIZER_JSON [\0 TOKENIZER_CONFIG_JSON [\0 TEXT]] (JSON cannot hold a raw NUL, so
// the separators are unambiguous). Without a text, a fixed set of texts is encoded. Seeds:
// corpus/tokenizer/ (small real tokenizers with their configs, one per pipeline feature, and the
// inputs that once crashed); the corpus regression test also runs every tokenizer fixture.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

const char* const kTexts[] = {
    "Hello, world! It's 2024.",
    "  leading spaces\tand\ttabs\n\nnew lines ",
    "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x8E\x89 <s> </s> <|im_start|>user",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
    "",
};

void Exercise(const loom::tokenizer::Tokenizer& t, std::string_view text) {
  for (bool special : {false, true}) {
    auto ids = t.Encode(text, special);
    if (!ids.ok()) {
      if (ids.status().message().empty()) std::abort();
      continue;
    }
    for (int32_t id : *ids) (void)t.IdToToken(id);
    const std::string decoded = t.Decode(*ids, !special);
    (void)decoded;
    loom::tokenizer::StreamingDetokenizer detok(&t, !special);
    std::string streamed;
    for (int32_t id : *ids) streamed += detok.Add(id);
    streamed += detok.Finish();
  }
  // Arbitrary ids (unknown, negative, special) decode without failing.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 2 <= text.size() && raw.size() < 64; i += 2) {
    raw.push_back(static_cast<int16_t>(static_cast<uint8_t>(text[i]) << 8 |
                                       static_cast<uint8_t>(text[i + 1])));
  }
  (void)t.Decode(raw, false);
  (void)t.Decode(raw, true);
  // The same ids inside the vocabulary streamed as vLLM streams them (prompt half primed, the
  // rest added): every piece whole UTF-8, whatever byte runs and resets they make.
  std::vector<int32_t> known;
  for (int32_t id : raw) {
    if (id >= 0 && id < t.id_limit()) known.push_back(id);
  }
  for (bool skip : {false, true}) {
    loom::tokenizer::StreamingDetokenizer detok(&t, skip);
    const size_t half = known.size() / 2;
    detok.Prime(std::span<const int32_t>(known).first(half));
    for (size_t i = half; i < known.size(); ++i) {
      if (!loom::tokenizer::IsValidUtf8(detok.Add(known[i]))) std::abort();
      if (!loom::tokenizer::IsValidUtf8(detok.Peek())) std::abort();
    }
    if (!loom::tokenizer::IsValidUtf8(detok.Finish())) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t first = input.find('\0');
  const std::string_view tokenizer_json = input.substr(0, first);
  std::optional<std::string_view> config;
  std::optional<std::string_view> text;
  if (first != std::string_view::npos) {
    const std::string_view rest = input.substr(first + 1);
    const size_t second = rest.find('\0');
    config = rest.substr(0, second);
    if (config->empty()) config.reset();
    if (second != std::string_view::npos) text = rest.substr(second + 1);
  }
  auto t = loom::tokenizer::Tokenizer::FromJsonTexts(tokenizer_json, config);
  if (!t.ok()) {
    if (t.status().message().empty()) std::abort();  // errors always say something
    return 0;
  }
  if (text) {
    Exercise(**t, *text);
  } else {
    for (const char* s : kTexts) Exercise(**t, s);
  }
  return 0;
}
