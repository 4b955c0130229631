// Streaming detokenizer: turns one sequence's ids into text as they arrive, as vLLM's detokenizer
// streams it (HF tokenizers' DecodeStream), holding back incomplete UTF-8.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace loom::tokenizer {

// One per sequence; not thread-safe (the engine thread owns it). The pieces Add returns are
// vLLM V1's (FastIncrementalDetokenizer): HF DecodeStream's step on each id, reset when it
// reports an invalid prefix — tests/unit/detokenizer_test.cc checks them against DecodeStream
// itself (tests/fixtures/detokenizer/streams.json, tools/ref/make_detokenizer_streams.py).
//
// Method (DecodeStream's): decode a window of ids twice — the ids of the last emitted piece
// (the prefix) and the same plus what came since — and emit the difference when the text grew
// and does not end in U+FFFD (an unfinished character). The window starts at the last emitted
// piece, so decoder rules that look at the first token (Metaspace, Strip) act alike on both
// decodes. A run of <0xNN> byte tokens is released a character at a time while it is valid;
// ByteFallback judges a run as a whole, so bytes that make it invalid later turn the window's
// text into U+FFFDs that no longer start with the prefix: DecodeStream then fails ("invalid
// prefix") and vLLM starts a fresh stream at that id (the invalid bytes are never emitted).
//
// Cost: each Add decodes the window, which grows while its text keeps ending in U+FFFD (a long
// run of invalid bytes never "completes"). Past kEagerPending held ids the window is decoded
// again only when the held count has doubled since the last try, so a hostile run of n such ids
// costs O(n log n) decode work instead of O(n^2). The ids let in meanwhile are stepped together
// with the next: their text comes out later, merged, and none is lost — where vLLM would have
// reset inside them, the garbage bytes before the reset come out as U+FFFD (vLLM drops them).
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Before the first Add: the generated text continues the prompt's, as vLLM primes its
  // stream. Decoder rules for the first token (Metaspace's prepended "▁", Strip) then act on a
  // prompt token, not on the first generated one: "The capital of France is" continues
  // " Paris." (Llama 2, Mistral, TinyLlama), where decoding the generated ids alone gives
  // "Paris.". The suffix stepped (the text dropped) is vLLM V1's up to 0.11: the shortest of the
  // prompt's last 4-23 ids whose text (special tokens skipped) has no U+FFFD, else the whole
  // prompt. vLLM 0.32 primes DecodeStream with the whole prompt at once (prefill): the same
  // pieces, except where the prompt's text ends inside a character — its first piece then
  // repeats the whole prompt's text (a vLLM bug loom does not copy).
  void Prime(std::span<const int32_t> prompt);
  const Tokenizer* tokenizer() const { return tokenizer_; }
  bool skip_special_tokens() const { return skip_special_tokens_; }
  // Text that is final once `id` is known; often empty while a character is incomplete.
  std::string Add(int32_t id);
  // What is held at the end of the sequence, decoded (an unfinished character as U+FFFD, as
  // transformers' decode gives it; vLLM drops it). Nothing is held afterwards.
  std::string Finish();
  // What Finish would return now, without changing anything, when it is whole characters held
  // back by the doubling rule (ids it let in without a step); empty otherwise — nothing held,
  // every held id stepped (their text is an unfinished character), the held text ending in one,
  // or more than kPeekMax ids held. A stop-string probe.
  std::string Peek() const;

 private:
  // DecodeStream's step, with vLLM's reset on an invalid prefix.
  std::string Step(int32_t id);
  // The held text: what the window adds to the prefix (the held ids alone if it no longer
  // starts with it).
  std::string Held() const;

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  // The window: the last emitted piece's ids (prefix_ids_ of them, whose text is prefix_), then
  // the held ones. Special ids are not kept when skipping them (Decode drops them anyway).
  std::vector<int32_t> ids_;
  std::string prefix_;
  size_t prefix_ids_ = 0;
  size_t stepped_ = 0;   // ids_[stepped_..) were let in by the throttle without a step

  size_t next_try_ = 0;  // held count at which to decode again (0: every Add)
  static constexpr size_t kEagerPending = 8;
  static constexpr size_t kPeekMax = 64;
};

}  // namespace loom::tokenizer
