// Jinja interpreter: the render's budgets (steps and time, string and collection sizes, bytes built and retained) and the byte counts they charge.
#include <chrono>
#include <unordered_set>
#include <vector>

#include "tokenizer/jinja/interpreter.h"

namespace loom::jinja {

namespace {

// Bytes held by the values on `stack` and all they reach, added to `total`: kValueBytes per
// value, a string's text, an Undefined's message, dict keys, and the value a bound method keeps
// alive. With `seen` null a container is counted every time it is reached (what copies of it
// hold); else once (what stays alive). Stops once past `cap`: each visited value adds at least
// kValueBytes, so the walk is bounded by cap / kValueBytes however much is shared.
size_t HeldBytes(std::vector<const Value*> stack, size_t total, size_t cap,
                 std::unordered_set<const void*>* seen) {
  auto first_time = [&](const void* container) { return !seen || seen->insert(container).second; };
  // An element that holds other values is walked later; any other is counted now.
  auto element = [&](const Value& e) {
    if (e.is_list() || e.is_dict() || e.is_namespace() ||
        (e.is_function() && e.function()->BoundSelf() != nullptr)) {
      stack.push_back(&e);
    } else {
      total += kValueBytes + (e.is_string() || e.is_undefined() ? e.str().size() : 0);
    }
  };
  while (!stack.empty() && total <= cap) {
    const Value* x = stack.back();
    stack.pop_back();
    total += kValueBytes;
    switch (x->kind()) {
      case ValueKind::kString:
      case ValueKind::kUndefined:
        total += x->str().size();
        break;
      case ValueKind::kList:
        if (!first_time(&x->list())) break;
        for (const Value& e : x->list()) {
          element(e);
          if (total > cap) break;
        }
        break;
      case ValueKind::kDict:
      case ValueKind::kNamespace:
        if (!first_time(&x->dict())) break;
        for (const auto& [k, e] : x->dict().items()) {
          total += k.size();
          element(e);
          if (total > cap) break;
        }
        break;
      case ValueKind::kFunction:
        // A bound method keeps its object alive: `[{'a': big}.get] * n` holds it n times.
        if (const Value* self = x->function()->BoundSelf()) {
          if (first_time(x->function().get())) stack.push_back(self);
        }
        break;
      case ValueKind::kNone:
      case ValueKind::kBool:
      case ValueKind::kInt:
      case ValueKind::kFloat:
        break;
    }
  }
  return total;
}

}  // namespace

Status Interpreter::Charge(int64_t steps) {
  const int64_t before = steps_;
  if (steps < 0 || __builtin_add_overflow(steps_, steps, &steps_)) {
    steps_ = INT64_MAX;
  }
  if (steps_ > options_.limits.max_steps) {
    return ResourceExhausted("template exceeded " + std::to_string(options_.limits.max_steps) +
                             " evaluation steps (RenderLimits::max_steps)");
  }
  // Every 4 steps: one step can build and scan a 16 MB text (printing a container, a test on
  // it inside select), so checking every 1024 let a 1 s budget run 11 s, every 16 still ~8 s;
  // a clock read is ~20 ns.
  if (options_.limits.max_render_ms > 0 && (before >> 2) != (steps_ >> 2) &&
      std::chrono::steady_clock::now() > deadline_) {
    return ResourceExhausted("template rendering exceeded its time budget of " +
                             std::to_string(options_.limits.max_render_ms) +
                             " ms (RenderLimits::max_render_ms)");
  }
  return OkStatus();
}

Status Interpreter::CheckSize(size_t bytes) const {
  if (bytes > options_.limits.max_output_bytes) {
    return ResourceExhausted("template output or string exceeds " +
                             std::to_string(options_.limits.max_output_bytes) +
                             " bytes (RenderLimits::max_output_bytes)");
  }
  return OkStatus();
}

Status Interpreter::CheckCollectionBytes(size_t bytes) const {
  if (bytes > options_.limits.max_collection_bytes) {
    return ResourceExhausted("template list or dict exceeds " +
                             std::to_string(options_.limits.max_collection_bytes) +
                             " bytes (RenderLimits::max_collection_bytes)");
  }
  return OkStatus();
}

Status Interpreter::ChargeBuilt(size_t bytes) {
  if (__builtin_add_overflow(built_bytes_, bytes, &built_bytes_)) built_bytes_ = SIZE_MAX;
  if (built_bytes_ > options_.limits.max_built_bytes) {
    return ResourceExhausted("template built more than " +
                             std::to_string(options_.limits.max_built_bytes) +
                             " bytes of strings, lists and dicts (RenderLimits::max_built_bytes)");
  }
  return OkStatus();
}

size_t Interpreter::ValueBytes(const Value& v, size_t cap) {
  return HeldBytes({&v}, 0, cap, nullptr);
}

// What a scope kept past its block holds: its variables and all they reach, each list, dict and
// bound method counted once however often it is shared (a namespace may hold itself).
size_t Interpreter::RetainedBytes(const Scope& scope, size_t cap) {
  size_t names = 0;
  std::vector<const Value*> stack;
  for (const auto& [name, v] : scope.vars) {
    names += name.size();
    stack.push_back(&v);
  }
  std::unordered_set<const void*> seen;
  return HeldBytes(std::move(stack), names, cap, &seen);
}

Status Interpreter::Append(const std::string& text, std::string* out) {
  RETURN_IF_ERROR(CheckSize(out->size() + text.size()));
  RETURN_IF_ERROR(ChargeBuilt(text.size()));
  out->append(text);
  return OkStatus();
}

}  // namespace loom::jinja
