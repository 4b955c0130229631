// Jinja interpreter: renders a parsed Program against a context, with jinja2's runtime semantics.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/value.h"

namespace loom::jinja {

// Error code of raise_exception(); the message is exactly the template's message.
constexpr StatusCode kRaisedCode = StatusCode::kFailedPrecondition;

// Limits that keep a hostile template from exhausting the process; exceeding one is an error
// (kResourceExhausted), never a crash.
struct RenderLimits {
  size_t max_output_bytes = 16 << 20;  // rendered text, and any one string or list built
  int max_call_depth = 64;             // nested macro calls
  int max_value_depth = 128;           // nesting of lists / dicts a template builds
  int64_t max_steps = 20'000'000;      // evaluated expressions + loop iterations
};

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
// exactly its message, with code kFailedPrecondition.
StatusOr<std::string> Render(const Program& program, const Dict& globals,
                             const RenderOptions& options);

// A variable scope: the template, one for-loop iteration, or one macro call.
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

enum class Flow { kNormal, kBreak, kContinue };

// The evaluator. One per render; not thread-safe.
class Interpreter {
 public:
  Interpreter(const Dict& globals, const RenderOptions& options);

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
  // Counts work against max_steps; errors once the budget is spent.
  Status Charge(int64_t steps = 1);
  // Errors when a built string or list would exceed max_output_bytes.
  Status CheckSize(size_t bytes) const;
  const RenderOptions& options() const { return options_; }
  void set_error_line(int line) {
    if (error_line_ == 0) error_line_ = line;
  }

  // Macro calls (macros are Callables defined in macros.cc that call back in here).
  StatusOr<Value> CallMacro(const Stmt& def, const std::shared_ptr<Scope>& closure,
                            CallArgs& args);

 private:
  StatusOr<Flow> ExecBody(const Body& body, const std::shared_ptr<Scope>& scope,
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
  Status Append(const std::string& text, std::string* out);

  const Dict& globals_;
  Dict builtins_;
  RenderOptions options_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int error_line_ = 0;
};

}  // namespace loom::jinja
