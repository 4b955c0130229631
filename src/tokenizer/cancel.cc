// EncodeCancelScope: a thread's hook for stopping its tokenization, and the poll at work points.
#include "tokenizer/cancel.h"

#include <string>

namespace loom::tokenizer {
namespace {

struct CancelState {
  const std::function<bool()>* hook = nullptr;
  unsigned count = 0;
  bool cancelled = false;
};
thread_local CancelState state;

}  // namespace

EncodeCancelScope::EncodeCancelScope(const std::function<bool()>* cancelled)
    : previous_(state.hook) {
  state.hook = cancelled != nullptr && *cancelled ? cancelled : nullptr;
  state.count = 0;
  state.cancelled = false;
}

EncodeCancelScope::~EncodeCancelScope() {
  state.hook = previous_;
  state.count = 0;
  state.cancelled = false;
}

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
