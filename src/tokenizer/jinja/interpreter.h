// Jinja interpreter: renders a parsed Program against a context, with jinja2's runtime semantics.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/value.h"

namespace loom::jinja {

// Error code of raise_exception(); the message is exactly the template's message.
constexpr StatusCode kRaisedCode = StatusCode::kFailedPrecondition;

// Limits that keep a hostile template (or hostile messages) from exhausting the process;
// exceeding one is an error (kResourceExhausted) whose message names the limit, never a crash.
// Evaluator stack budget. AddressSanitizer frames are several times larger (redzones), so
// sanitized builds get a proportionally larger budget for the same template depth.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr size_t kDefaultMaxStackBytes = size_t{4} << 20;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr size_t kDefaultMaxStackBytes = size_t{4} << 20;
#else
inline constexpr size_t kDefaultMaxStackBytes = size_t{1} << 20;
#endif
#else
inline constexpr size_t kDefaultMaxStackBytes = size_t{1} << 20;
#endif

struct RenderLimits {
  // Rendered text, and any one string built while rendering.
  size_t max_output_bytes = 16 << 20;
  // Any one list or dict built while rendering, measured in bytes (kValueBytes per element plus
  // the bytes of the strings it holds, nested containers included), not in elements.
  size_t max_collection_bytes = 64 << 20;
  // All strings, lists and dicts built during one render together (a loop that rebuilds a
  // large value each iteration hits this long before the step limit), text written to any output
  // buffer (the render's, a macro call's, a set or filter block's), strings bound to macro
  // parameters, and the variables of scopes a macro keeps alive past their block.
  size_t max_built_bytes = 256 << 20;
  int max_call_depth = 64;         // nested macro calls
  // Native stack the evaluator may use below Render's frame: deep expressions inside recursive
  // macros nest evaluation (70 macro levels × 190 nested operators overflowed 8 MiB).
  size_t max_stack_bytes = kDefaultMaxStackBytes;
  int max_value_depth = 128;       // nesting of lists / dicts a template builds
  int64_t max_steps = 20'000'000;  // evaluated expressions + loop iterations
  // Wall-clock budget of one render, in milliseconds (0: none). Checked every 4 steps.
  int64_t max_render_ms = 1000;
};

// What one element of a list / dict is counted as by the collection limits: the Value itself
// (~128 bytes; 64 before, which let a render hold twice its budgets).
inline constexpr size_t kValueBytes = sizeof(Value);

struct RenderOptions {
  RenderLimits limits;
  // What strftime_now() formats (local time); transformers uses datetime.now().
  std::tm now{};
};

// Checks that every filter and test the program names exists (jinja2 checks this at compile
// time). The error names the filter/test and its line.
Status ValidateNames(const Program& program);

// Renders `program` with `globals` as the template's top-level variables (messages,
// add_generation_prompt, ...) next to the built-in globals (range, namespace, dict,
// raise_exception, strftime_now). Errors carry the template line; raise_exception's error is
// exactly its message, with code kFailedPrecondition. Throws nothing (out of memory:
// kResourceExhausted).
StatusOr<std::string> Render(const Program& program, const Dict& globals,
                             const RenderOptions& options);

// A variable scope: the template, one for-loop iteration, or one macro call.
struct Scope {
  static constexpr size_t kNoSlot = SIZE_MAX;
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  // Index in the interpreter's list of scopes that define a macro, or kNoSlot.
  size_t macro_slot = kNoSlot;
};

enum class Flow { kNormal, kBreak, kContinue };

// The evaluator. One per render; not thread-safe.
class Interpreter {
 public:
  Interpreter(const Dict& globals, const RenderOptions& options);
  // Breaks the reference cycles a render can make (see TrackMutable), so nothing leaks.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  StatusOr<std::string> Run(const Program& program);

  // Used by filters, tests, methods and globals.
  StatusOr<Value> CallValue(const Value& fn, CallArgs& args);
  StatusOr<Value> ApplyFilter(const std::string& name, const Value& input, CallArgs& args);
  StatusOr<bool> ApplyTest(const std::string& name, const Value& input, CallArgs& args);
  // jinja2's environment.getattr / getitem: a missing key or attribute is Undefined, an
  // operation on an Undefined is an error.
  StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
  StatusOr<Value> GetItem(const Value& obj, const Value& key);
  // Items a for loop / filter iterates: list items, dict keys, string characters.
  StatusOr<List> Iterate(const Value& v);
  // Counts work against max_steps (and, every 4 steps, the clock against max_render_ms);
  // errors once a budget is spent.
  Status Charge(int64_t steps = 1);
  // Errors when a string of `bytes` would exceed max_output_bytes.
  Status CheckSize(size_t bytes) const;
  // Errors when a list / dict of `bytes` (see ValueBytes) would exceed max_collection_bytes.
  Status CheckCollectionBytes(size_t bytes) const;
  // Adds `bytes` to the total built during this render; errors past max_built_bytes.
  Status ChargeBuilt(size_t bytes);
  // Bytes `v` holds as the collection limits count them (deep; a container shared twice counts
  // twice, as printing it would; strings, Undefined messages and the values bound methods hold
  // included), stopping early once past `cap`.
  static size_t ValueBytes(const Value& v, size_t cap);
  // Bytes a scope kept past its block holds (its variables and all they reach, each shared
  // container once), stopping early once past `cap`.
  static size_t RetainedBytes(const Scope& scope, size_t cap);
  const RenderOptions& options() const { return options_; }
  void set_error_line(int line) {
    if (error_line_ == 0) error_line_ = line;
  }

  // Remembers a namespace: the only mutable value, so the only one that can hold itself
  // (directly or through a macro's scope). Its attributes are dropped when the render ends.
  void TrackMutable(const Value& ns) { namespaces_.push_back(ns); }

  // Macro calls (macros are Callables defined in macros.cc that call back in here).
  StatusOr<Value> CallMacro(const Stmt& def, const std::shared_ptr<Scope>& closure,
                            CallArgs& args);

 private:
  StatusOr<Flow> ExecBody(const Body& body, const std::shared_ptr<Scope>& scope,
                          std::string* out);
  StatusOr<Flow> ExecInnerBody(const Body& body, const std::shared_ptr<Scope>& scope,
                               std::string* out);
  StatusOr<Flow> Exec(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out);
  Status ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out);
  Status ExecSet(const Stmt& s, const std::shared_ptr<Scope>& scope);
  StatusOr<Value> Eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  StatusOr<Value> EvalInner(const Expr& e, const std::shared_ptr<Scope>& scope);
  StatusOr<Value> EvalCall(const Expr& e, const std::shared_ptr<Scope>& scope);
  StatusOr<CallArgs> EvalArgs(const Expr& e, const std::shared_ptr<Scope>& scope);
  StatusOr<Value> EvalCompare(const Expr& e, const std::shared_ptr<Scope>& scope);
  StatusOr<Value> ApplyFilterChain(const std::vector<ExprPtr>& filters, Value input,
                                   const std::shared_ptr<Scope>& scope);
  Value Lookup(const std::string& name, const std::shared_ptr<Scope>& scope) const;
  // Appends to an output buffer, counting the text against max_output_bytes (the buffer) and
  // max_built_bytes (every buffer: 63 nested macro calls each held 16 MB).
  Status Append(const std::string& text, std::string* out);
  // Ends the block of a loop iteration or macro call scope (see the definition).
  Status EndScope(const std::shared_ptr<Scope>& scope);

  const Dict& globals_;
  Dict builtins_;
  RenderOptions options_;
  // Scopes that define a macro (the macro holds its scope and the scope holds the macro) and
  // namespaces: cleared by the destructor to break those cycles. A scope leaves macro_scopes_
  // early when EndScope finds its cycle unreachable. Held strongly so that the destructor's
  // clearing never frees a chain of scopes recursively.
  std::vector<std::shared_ptr<Scope>> macro_scopes_;
  std::vector<Value> namespaces_;
  Status CheckStack() const;

  uintptr_t stack_base_ = 0;  // frame address of Run
  int64_t steps_ = 0;
  size_t built_bytes_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  int call_depth_ = 0;
  int error_line_ = 0;
};

}  // namespace loom::jinja
