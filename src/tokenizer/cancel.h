// Stopping a tokenization from outside: a caller's hook, polled at the encoder's work points.
#pragma once

#include <functional>

#include "base/status.h"

namespace loom::tokenizer {

// While alive, every Tokenizer::Encode this thread runs polls `cancelled` (every kPollEvery
// units of work: regex matches, pre-tokens, a BPE word's characters, pairs and merges, unigram
// positions) and stops with kUnavailable (only a stop gives that code inside Encode) once it
// returns true. The server passes "the client closed its connection, or the drain deadline
// closed the large-prompt gate": an 8 MiB word takes ~8 s of a core to tokenize, and holds that
// gate meanwhile, for nobody. A nested scope replaces the hook until it closes, and the outer
// one's state comes back then; a null or empty hook polls nothing. Wrap Encode alone: Decode
// steps over a failed regex replace, so a stop there would go unnoticed.
class EncodeCancelScope {
 public:
  explicit EncodeCancelScope(const std::function<bool()>* cancelled);
  ~EncodeCancelScope();
  EncodeCancelScope(const EncodeCancelScope&) = delete;
  EncodeCancelScope& operator=(const EncodeCancelScope&) = delete;

  struct State {
    const std::function<bool()>* hook = nullptr;
    unsigned count = 0;
    bool cancelled = false;
  };

 private:
  State previous_;
};

inline constexpr unsigned kPollEvery = 1024;

// One unit of encoding work on this thread: every kPollEvery-th call runs the open scope's hook.
// True (and true again on every later call in the scope) once the hook said stop.
bool EncodeCancelled();

// The error a stopped encode returns.
Status EncodeCancelledError(const char* where);

}  // namespace loom::tokenizer
