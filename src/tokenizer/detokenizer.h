// Streaming detokenizer: turns one sequence's ids into text as they arrive, holding back
// incomplete UTF-8 so that every piece is whole characters.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace loom::tokenizer {

// One per sequence; not thread-safe (the engine thread owns it). The pieces returned by Add and
// Finish concatenate to tokenizer.Decode(all ids, skip_special_tokens), or with Prime to what
// Decode(prompt window + ids) adds to Decode(prompt window).
//
// Method (as vLLM / TGI do it): decode a small window of ids twice — up to the last emitted
// token and up to the new one — and emit the difference unless the new text ends in U+FFFD (an
// unfinished character). The window starts one emitted token back, so decoder rules that look at
// the first token (Metaspace, Strip) act the same on both decodes. A run of <0xNN> byte tokens is
// held until it ends, because ByteFallback judges the run as a whole.
//
// Cost: each Add decodes the window, which grows while the text keeps ending in U+FFFD (a long
// run of invalid bytes never "completes"). Past kEagerPending pending ids the window is decoded
// again only when the pending count has doubled since the last try, so a hostile run of n such
// ids costs O(n) decode work instead of O(n^2); the output is unchanged, only held longer.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Before the first Add: the generated text is what follows the prompt's text, as vLLM primes
  // its detokenizer. Decoder rules for the first token (Metaspace's prepended "▁", Strip) then
  // act on a prompt token, not on the first generated one: "The capital of France is" continues
  // " Paris." (Llama 2, Mistral, TinyLlama), where decoding the generated ids alone gives
  // "Paris.". The window: the shortest of the prompt's last 4-23 ids (all of them when it has
  // at most 4) whose text has no U+FFFD, as vLLM picks it; none such: no priming (vLLM then
  // primes with the whole prompt).
  void Prime(std::span<const int32_t> prompt);
  // Text that is final once `id` is known; often empty while a character is incomplete.
  std::string Add(int32_t id);
  // What is left at the end of the sequence (held-back bytes decode as U+FFFD).
  std::string Finish();
  // What Finish would return now, without changing anything, when it is whole characters; empty
  // when nothing is held, the held text ends in an unfinished character, or more than kPeekMax
  // ids are held (a stop-string probe: a valid run of <0xNN> tokens is held until it ends, and
  // "\n" in Llama 2 / Mistral is <0x0A>).
  std::string Peek() const;

 private:
  // What the window's ids add to its text up to read_offset_, when that is final (whole
  // characters, the earlier text unchanged); nullopt otherwise.
  std::optional<std::string> WindowDelta() const;

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // the priming prompt ids, then the generated ones (special ids
                              // already dropped when skipping them)
  size_t primed_ids_ = 0;     // how many of ids_ are the prompt's
  std::string primed_text_;   // their text
  size_t prefix_offset_ = 0;  // window start
  size_t read_offset_ = 0;    // ids before this are emitted
  size_t emitted_bytes_ = 0;
  size_t next_try_ = 0;  // pending count at which to decode again (0: every Add)
  static constexpr size_t kEagerPending = 8;
  static constexpr size_t kPeekMax = 64;
};

}  // namespace loom::tokenizer
