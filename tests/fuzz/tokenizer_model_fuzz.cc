// libFuzzer target for the slow-tokenizer forms: a SentencePiece tokenizer.model or a
// vocab.json + merges.txt pair is converted (as transformers 5 converts it) and texts are encoded
// and decoded. Any bytes give a Status or a working tokenizer; nothing crashes or throws.
//
// Input: one selector byte, then the files. Selector < 0x80: tokenizer.model bytes, with the
// tokenizer_config.json kConfigs[selector % size]; selector >= 0x80: VOCAB_JSON \0 MERGES_TXT
// with GPT2Tokenizer (even) or Qwen2Tokenizer (odd). Seeds: corpus/tokenizer_model/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

const char* const kConfigs[] = {
    "",
    "{\"tokenizer_class\": \"TokenizersBackend\", \"add_bos_token\": true}",
    "{\"tokenizer_class\": \"TokenizersBackend\", \"legacy\": false, \"add_eos_token\": true}",
    "{\"tokenizer_class\": \"LlamaTokenizer\", \"legacy\": false, \"add_bos_token\": true}",
    "{\"tokenizer_class\": \"LlamaTokenizerFast\", \"legacy\": true, \"add_prefix_space\": false}",
    "{\"tokenizer_class\": \"GemmaTokenizer\", \"add_bos_token\": true, \"added_tokens_decoder\": "
    "{\"5\": {\"content\": \"<x>\", \"special\": true}}}",
    "{\"tokenizer_class\": \"T5Tokenizer\", \"extra_ids\": 3}",
};

const char* const kTexts[] = {
    "Hello, world! It's 2024.",
    "  leading spaces\tand\ttabs\n\nnew lines ",
    "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x8E\x89 <s> </s> <tool> @@",
    "",
};

void Exercise(const loom::tokenizer::Tokenizer& t) {
  for (const char* text : kTexts) {
    for (bool special : {false, true}) {
      auto ids = t.Encode(text, special);
      if (!ids.ok()) {
        if (ids.status().message().empty()) std::abort();
        continue;
      }
      for (int32_t id : *ids) {
        if (id < 0 || id >= t.id_limit()) std::abort();  // every id names a token
      }
      (void)t.Decode(*ids, !special);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  loom::StatusOr<std::unique_ptr<loom::tokenizer::Tokenizer>> t = loom::NotFound("");
  if (selector < 0x80) {
    const std::string_view config = kConfigs[selector % (sizeof(kConfigs) / sizeof(kConfigs[0]))];
    t = loom::tokenizer::Tokenizer::FromSentencePiece(
        input, config.empty() ? std::nullopt : std::optional<std::string_view>(config));
  } else {
    const size_t nul = input.find('\0');
    const std::string_view vocab = input.substr(0, nul);
    const std::string_view merges =
        nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
    const std::string_view config = selector % 2 ? "{\"tokenizer_class\": \"Qwen2Tokenizer\"}"
                                                 : "{\"tokenizer_class\": \"GPT2Tokenizer\"}";
    t = loom::tokenizer::Tokenizer::FromVocabMerges(vocab, merges, config);
  }
  if (!t.ok()) {
    if (t.status().message().empty()) std::abort();  // errors always say something
    return 0;
  }
  Exercise(**t);
  return 0;
}
