// Stopping a tokenization from outside: a caller's hook, polled at the encoder's work points.
#pragma once

#include <functional>

#include "base/status.h"

namespace loom::tokenizer {

// While alive, every Tokenizer::Encode this thread runs polls `cancelled` (every kPollEvery
// units of work: regex matches, BPE merges, pre-tokens) and stops with kUnavailable once it
// returns true. The server passes "the client closed its connection": an 8 MiB word takes ~8 s
// of a core to tokenize, and holds the large-prompt gate meanwhile, for nobody. Scopes do not
// nest (an inner one replaces the hook until it closes); a null or empty hook polls nothing.
class EncodeCancelScope {
 public:
  explicit EncodeCancelScope(const std::function<bool()>* cancelled);
  ~EncodeCancelScope();
  EncodeCancelScope(const EncodeCancelScope&) = delete;
  EncodeCancelScope& operator=(const EncodeCancelScope&) = delete;

 private:
  const std::function<bool()>* previous_;
};

inline constexpr unsigned kPollEvery = 1024;

// One unit of encoding work on this thread: every kPollEvery-th call runs the open scope's hook.
// True (and true again on every later call in the scope) once the hook said stop.
bool EncodeCancelled();

// The error a stopped encode returns.
Status EncodeCancelledError(const char* where);

}  // namespace loom::tokenizer
