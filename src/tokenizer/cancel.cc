// EncodeCancelScope: a thread's hook for stopping its tokenization, and the poll at work points.
#include "tokenizer/cancel.h"

#include <string>

namespace loom::tokenizer {
namespace {

thread_local EncodeCancelScope::State state;

}  // namespace

EncodeCancelScope::EncodeCancelScope(const std::function<bool()>* cancelled) : previous_(state) {
  state = State{cancelled != nullptr && *cancelled ? cancelled : nullptr, 0, false};
}

EncodeCancelScope::~EncodeCancelScope() { state = previous_; }

bool EncodeCancelled() {
  if (state.hook == nullptr) return false;
  if (state.cancelled) return true;
  if (++state.count < kPollEvery) return false;
  state.count = 0;
  state.cancelled = (*state.hook)();
  return state.cancelled;
}

Status EncodeCancelledError(const char* where) {
  return Unavailable(std::string("tokenization stopped in ") + where + ": its caller cancelled it");
}

}  // namespace loom::tokenizer
