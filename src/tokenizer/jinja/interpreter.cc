// Jinja interpreter: statements, scopes, for loops, macros and the expression evaluator.
#include "tokenizer/jinja/interpreter.h"

#include <algorithm>
#include <cmath>

#include "base/no_throw.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

class MacroCallable : public Callable {
 public:
  MacroCallable(const Stmt* def, std::shared_ptr<Scope> closure)
      : def_(def), closure_(std::move(closure)) {}
  StatusOr<Value> Call(Interpreter& interp, CallArgs& args) override {
    return interp.CallMacro(*def_, closure_, args);
  }
  std::string Describe() const override { return "<Macro '" + def_->name + "'>"; }
  const Scope* closure() const { return closure_.get(); }

 private:
  const Stmt* def_;
  std::shared_ptr<Scope> closure_;
};

// loop.cycle(a, b, ...): the argument at loop.index0 modulo the count.
class CycleCallable : public Callable {
 public:
  explicit CycleCallable(int64_t index0) : index0_(index0) {}
  StatusOr<Value> Call(Interpreter& interp, CallArgs& args) override {
    if (args.positional.empty()) return InvalidArgument("no items for cycling given");
    return args.positional[index0_ % args.positional.size()];
  }
  std::string Describe() const override { return "<bound method LoopContext.cycle>"; }

 private:
  int64_t index0_;
};

Status UndefinedError(const Value& v) { return InvalidArgument(v.undefined_hint()); }

Status Unpack(const std::vector<std::string>& targets, const Value& item, Scope* scope) {
  if (targets.size() == 1) {
    scope->vars[targets[0]] = item;
    return OkStatus();
  }
  // Too many values is known before any copy: a 16 MB string was split into 16M one-character
  // values (2.5 GB) only to be refused (a code point is at most 4 bytes).
  if ((item.is_list() && item.list().size() > targets.size()) ||
      (item.is_string() && item.str().size() > 4 * targets.size()) ||
      (item.is_dict() && item.dict().items().size() > targets.size())) {
    return InvalidArgument("too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  List parts;
  if (item.is_list()) {
    parts = item.list();
  } else if (item.is_string()) {
    for (char32_t cp : DecodeUtf8(item.str())) parts.push_back(Value::String(EncodeUtf8({&cp, 1})));
  } else if (item.is_dict()) {
    for (const auto& [k, v] : item.dict().items()) parts.push_back(Value::String(k));
  } else {
    return InvalidArgument("cannot unpack non-iterable " + item.TypeName() + " object");
  }
  if (parts.size() != targets.size()) {
    return InvalidArgument(parts.size() > targets.size()
                               ? "too many values to unpack (expected " +
                                     std::to_string(targets.size()) + ")"
                               : "not enough values to unpack (expected " +
                                     std::to_string(targets.size()) + ", got " +
                                     std::to_string(parts.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope->vars[targets[i]] = parts[i];
  return OkStatus();
}

}  // namespace

Interpreter::Interpreter(const Dict& globals, const RenderOptions& options)
    : globals_(globals), options_(options) {
  AddGlobals(&builtins_);
  if (options_.limits.max_render_ms > 0) {
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::milliseconds(options_.limits.max_render_ms);
  }
}

Interpreter::~Interpreter() {
  for (const std::shared_ptr<Scope>& scope : macro_scopes_) scope->vars.clear();
  for (const Value& ns : namespaces_) ns.mutable_dict() = Dict();
}

// A scope that defined a macro is held by that macro (its closure) while the scope holds the
// macro: a cycle that reference counting never frees, so every loop iteration that defined a
// macro stayed alive until the render ended (965 MB within the 1 s budget). When the scope's
// block ends and nothing outside the scope refers to it or to the macros it holds, the cycle
// is unreachable: it is broken now. Otherwise the scope outlives its block, and what its
// variables hold (strings copied into it included) is charged against max_built_bytes.
Status Interpreter::EndScope(const std::shared_ptr<Scope>& scope) {
  if (scope->macro_slot == Scope::kNoSlot) return OkStatus();
  // The macros closing over this scope that its variables hold, with how many variables hold
  // each.
  std::vector<std::pair<const std::shared_ptr<Callable>*, long>> own;
  for (const auto& [name, v] : scope->vars) {
    if (!v.is_function()) continue;
    const auto* macro = dynamic_cast<const MacroCallable*>(v.function().get());
    if (macro == nullptr || macro->closure() != scope.get()) continue;
    auto it = std::find_if(own.begin(), own.end(),
                           [&](const auto& o) { return o.first->get() == macro; });
    if (it == own.end()) {
      own.emplace_back(&v.function(), 1);
    } else {
      ++it->second;
    }
  }
  // References to the scope: the caller's, macro_scopes_' and one per live macro closing over
  // it; any other (a macro stored elsewhere, a scope nested in it that is kept) keeps it.
  bool unreachable = scope.use_count() == 2 + static_cast<long>(own.size());
  for (const auto& [fn, holders] : own) {
    if (fn->use_count() != holders) unreachable = false;  // the macro is also held elsewhere
  }
  if (!unreachable) return ChargeBuilt(RetainedBytes(*scope, options_.limits.max_built_bytes));
  const size_t slot = scope->macro_slot;
  scope->vars.clear();  // drops the macros, and with them their references to the scope
  scope->macro_slot = Scope::kNoSlot;
  if (slot + 1 != macro_scopes_.size()) {
    macro_scopes_[slot] = std::move(macro_scopes_.back());
    macro_scopes_[slot]->macro_slot = slot;
  }
  macro_scopes_.pop_back();
  return OkStatus();
}

Status Interpreter::CheckStack() const {
  // Stacks grow down on every target loom builds for.
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (stack_base_ > here && stack_base_ - here > options_.limits.max_stack_bytes) {
    return ResourceExhausted("template evaluation nested too deeply (more than " +
                             std::to_string(options_.limits.max_stack_bytes) +
                             " bytes of stack; RenderLimits::max_stack_bytes)");
  }
  return OkStatus();
}

StatusOr<std::string> Interpreter::Run(const Program& program) {
  stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  auto root = std::make_shared<Scope>();
  std::string out;
  StatusOr<Flow> r = ExecBody(program.body, root, &out);
  if (!r.ok()) {
    const Status& st = r.status();
    if (st.code() == kRaisedCode) return st;
    return Status(st.code(), "line " + std::to_string(error_line_) + ": " + st.message());
  }
  return out;
}

Value Interpreter::Lookup(const std::string& name, const std::shared_ptr<Scope>& scope) const {
  for (const Scope* s = scope.get(); s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (const Value* v = globals_.Find(name)) return *v;
  if (const Value* v = builtins_.Find(name)) return *v;
  return Value::Undefined("'" + CutForMessage(name) + "' is undefined");
}

StatusOr<Flow> Interpreter::ExecBody(const Body& body, const std::shared_ptr<Scope>& scope,
                                     std::string* out) {
  for (const StmtPtr& s : body) {
    StatusOr<Flow> f = Exec(*s, scope, out);
    if (!f.ok()) {
      set_error_line(s->line);
      return f;
    }
    if (*f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

// The body of a set or filter block, of a for loop's else, or of {% generation %}: a frame of
// its own in jinja2, so what it sets is not seen after it.
StatusOr<Flow> Interpreter::ExecInnerBody(const Body& body, const std::shared_ptr<Scope>& scope,
                                          std::string* out) {
  auto inner = std::make_shared<Scope>();
  inner->parent = scope;
  ASSIGN_OR_RETURN(Flow f, ExecBody(body, inner, out));
  RETURN_IF_ERROR(EndScope(inner));
  return f;
}

StatusOr<Flow> Interpreter::Exec(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                 std::string* out) {
  RETURN_IF_ERROR(Charge());
  RETURN_IF_ERROR(CheckStack());
  switch (s.kind) {
    case StmtKind::kText:
      RETURN_IF_ERROR(Append(s.text, out));
      return Flow::kNormal;
    case StmtKind::kOutput: {
      ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
      RETURN_IF_ERROR(Append(v.ToString(), out));
      return Flow::kNormal;
    }
    case StmtKind::kIf: {
      ASSIGN_OR_RETURN(Value cond, Eval(*s.expr, scope));
      return ExecBody(cond.Truthy() ? s.body : s.else_body, scope, out);
    }
    case StmtKind::kFor:
      RETURN_IF_ERROR(ExecFor(s, scope, out));
      return Flow::kNormal;
    case StmtKind::kSet:
      RETURN_IF_ERROR(ExecSet(s, scope));
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      // A break / continue in the body leaves before the assignment, as in jinja2.
      std::string text;
      ASSIGN_OR_RETURN(Flow f, ExecInnerBody(s.body, scope, &text));
      if (f != Flow::kNormal) return f;
      ASSIGN_OR_RETURN(Value v, ApplyFilterChain(s.filters, Value::String(std::move(text)), scope));
      scope->vars[s.targets[0]] = std::move(v);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope->vars[s.name] = Value::Function(std::make_shared<MacroCallable>(&s, scope));
      if (scope->macro_slot == Scope::kNoSlot) {
        scope->macro_slot = macro_scopes_.size();
        macro_scopes_.push_back(scope);
      }
      return Flow::kNormal;
    case StmtKind::kFilterBlock: {
      // A break / continue in the body leaves before the filtered text is written, as in jinja2.
      std::string text;
      ASSIGN_OR_RETURN(Flow f, ExecInnerBody(s.body, scope, &text));
      if (f != Flow::kNormal) return f;
      ASSIGN_OR_RETURN(Value v, ApplyFilterChain(s.filters, Value::String(std::move(text)), scope));
      RETURN_IF_ERROR(Append(v.ToString(), out));
      return f;
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kScope:
      return ExecInnerBody(s.body, scope, out);
  }
  return Flow::kNormal;
}

Status Interpreter::ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope,
                            std::string* out) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, scope));
  ASSIGN_OR_RETURN(List items, Iterate(iterable));
  // The loop holds its copy of a list's element slots (strings shared) while it runs: nested
  // macro calls, each looping over a large list, held a copy each. (A filter's copy goes when
  // the filter returns; a string's or dict's items are counted by Iterate.)
  // Counted while the loop runs, given back when it ends (a loop over the messages inside a
  // loop over them would otherwise spend the render's budget at ~2,000 messages).
  const size_t held = iterable.is_list() ? items.size() * kValueBytes : 0;
  RETURN_IF_ERROR(ChargeBuilt(held));
  struct GiveBack {
    size_t& built;
    size_t n;
    ~GiveBack() { built -= std::min(built, n); }
  } give_back{built_bytes_, held};
  if (s.cond) {
    // jinja2 filters first, so loop.length/last count only the items that pass.
    List kept;
    for (Value& item : items) {
      RETURN_IF_ERROR(Charge());
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      RETURN_IF_ERROR(Unpack(s.targets, item, probe.get()));
      ASSIGN_OR_RETURN(Value keep, Eval(*s.cond, probe));
      if (keep.Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(Charge());
    auto iter_scope = std::make_shared<Scope>();
    iter_scope->parent = scope;
    RETURN_IF_ERROR(Unpack(s.targets, items[i], iter_scope.get()));
    Dict loop;
    loop.Set("index", Value::Int(i + 1));
    loop.Set("index0", Value::Int(i));
    loop.Set("revindex", Value::Int(n - i));
    loop.Set("revindex0", Value::Int(n - i - 1));
    loop.Set("first", Value::Bool(i == 0));
    loop.Set("last", Value::Bool(i == n - 1));
    loop.Set("length", Value::Int(n));
    loop.Set("depth", Value::Int(1));
    loop.Set("depth0", Value::Int(0));
    loop.Set("previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
    loop.Set("nextitem", i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item"));
    loop.Set("cycle", Value::Function(std::make_shared<CycleCallable>(i)));
    iter_scope->vars["loop"] = Value::MakeDict(std::move(loop));
    ASSIGN_OR_RETURN(Flow f, ExecBody(s.body, iter_scope, out));
    RETURN_IF_ERROR(EndScope(iter_scope));
    if (f == Flow::kBreak) break;
  }
  if (n == 0) {
    ASSIGN_OR_RETURN(Flow f, ExecInnerBody(s.else_body, scope, out));
    (void)f;
  }
  return OkStatus();
}

Status Interpreter::ExecSet(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
  if (!s.attr.empty()) {
    Value ns = Lookup(s.targets[0], scope);
    if (!ns.is_namespace()) {
      return InvalidArgument("cannot assign attribute on non-namespace object '" + s.targets[0] +
                             "'");
    }
    if (s.attr[0] == '_') {
      // transformers' TemplateNamespace rejects these.
      return InvalidArgument(
          "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
          s.attr + "'. Please rename the attribute.");
    }
    // Kept until the render ends (namespaces are tracked to break cycles).
    RETURN_IF_ERROR(ChargeBuilt(kValueBytes + s.attr.size()));
    ns.mutable_dict().Set(s.attr, std::move(v));
    return OkStatus();
  }
  return Unpack(s.targets, v, scope.get());
}

StatusOr<Value> Interpreter::CallMacro(const Stmt& def, const std::shared_ptr<Scope>& closure,
                                       CallArgs& args) {
  if (call_depth_ >= options_.limits.max_call_depth) {
    return ResourceExhausted("macro calls nested deeper than " +
                             std::to_string(options_.limits.max_call_depth));
  }
  if (args.positional.size() > def.params.size()) {
    return InvalidArgument("macro '" + def.name + "' takes not more than " +
                           std::to_string(def.params.size()) + " argument(s)");
  }
  auto scope = std::make_shared<Scope>();
  scope->parent = closure;
  std::vector<bool> given(def.params.size(), false);
  // The arguments are the caller's temporaries: moved, not copied. A string bound to a
  // parameter is still a copy of the caller's (64 nested calls each held one of 16 MB).
  size_t string_bytes = 0;
  for (const auto& [key, value] : args.keyword) {
    if (value.is_string()) string_bytes += value.str().size();
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (args.positional[i].is_string()) string_bytes += args.positional[i].str().size();
    scope->vars[def.params[i].name] = std::move(args.positional[i]);
    given[i] = true;
  }
  RETURN_IF_ERROR(ChargeBuilt(string_bytes));
  for (auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < def.params.size() && def.params[i].name != key) ++i;
    if (i == def.params.size()) {
      return InvalidArgument("macro '" + def.name + "' takes no keyword argument '" + key + "'");
    }
    if (given[i]) {
      return InvalidArgument("macro '" + def.name + "' got multiple values for argument '" +
                             key + "'");
    }
    scope->vars[key] = std::move(value);
    given[i] = true;
  }
  for (size_t i = 0; i < def.params.size(); ++i) {
    if (given[i]) continue;
    if (def.params[i].default_value) {
      ASSIGN_OR_RETURN(Value d, Eval(*def.params[i].default_value, scope));
      scope->vars[def.params[i].name] = std::move(d);
    } else {
      scope->vars[def.params[i].name] =
          Value::Undefined("parameter '" + def.params[i].name + "' was not provided");
    }
  }
  std::string out;
  ++call_depth_;
  StatusOr<Flow> f = ExecBody(def.body, scope, &out);
  --call_depth_;
  if (!f.ok()) return f.status();
  RETURN_IF_ERROR(EndScope(scope));
  return Value::String(std::move(out));
}

namespace {

// Expressions whose value is newly built (rather than read from a variable or passed through).
bool Builds(ExprKind kind) {
  switch (kind) {
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
    case ExprKind::kSlice:
    case ExprKind::kCall:
    case ExprKind::kFilter:
    case ExprKind::kBinary:
    case ExprKind::kNeg:
    case ExprKind::kPos:
      return true;
    case ExprKind::kLiteral:
    case ExprKind::kName:
    case ExprKind::kGetAttr:
    case ExprKind::kGetItem:
    case ExprKind::kTest:
    case ExprKind::kNot:
    case ExprKind::kAnd:
    case ExprKind::kOr:
    case ExprKind::kCompare:
    case ExprKind::kCondExpr:
      return false;
  }
  return false;
}

}  // namespace

StatusOr<Value> Interpreter::Eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  StatusOr<Value> v = EvalInner(e, scope);
  if (!v.ok()) {
    set_error_line(e.line);
    return v;
  }
  if (v->depth() > options_.limits.max_value_depth) {
    set_error_line(e.line);
    return ResourceExhausted("value nested deeper than " +
                             std::to_string(options_.limits.max_value_depth) +
                             " levels (RenderLimits::max_value_depth)");
  }
  if (Builds(e.kind)) {
    Status st;
    if (v->is_string()) {
      st = CheckSize(v->str().size());
      if (st.ok()) st = ChargeBuilt(v->str().size());
    } else if (v->is_list() || v->is_dict()) {
      const size_t bytes = ValueBytes(*v, options_.limits.max_collection_bytes);
      st = CheckCollectionBytes(bytes);
      if (st.ok()) st = ChargeBuilt(bytes);
    }
    if (!st.ok()) {
      set_error_line(e.line);
      return st;
    }
  }
  return v;
}

StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& e, const std::shared_ptr<Scope>& scope) {
  CallArgs args;
  for (const ExprPtr& a : e.args) {
    ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [key, a] : e.kwargs) {
    ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
    args.keyword.emplace_back(key, std::move(v));
  }
  return args;
}

StatusOr<Value> Interpreter::CallValue(const Value& fn, CallArgs& args) {
  RETURN_IF_ERROR(CheckStack());  // callables reached from filters too
  if (fn.is_function()) return fn.function()->Call(*this, args);
  if (fn.is_undefined()) return UndefinedError(fn);
  return InvalidArgument("'" + fn.TypeName() + "' object is not callable");
}

StatusOr<Value> Interpreter::EvalCall(const Expr& e, const std::shared_ptr<Scope>& scope) {
  ASSIGN_OR_RETURN(Value fn, Eval(*e.a, scope));
  ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
  return CallValue(fn, args);
}

StatusOr<Value> Interpreter::ApplyFilter(const std::string& name, const Value& input,
                                         CallArgs& args) {
  // Filters call filters by name (map('map', 'map', ...)): a C++ frame each, never through
  // Eval, so the stack is checked here as well.
  RETURN_IF_ERROR(CheckStack());
  FilterFn f = FindFilter(name);
  if (f == nullptr) return InvalidArgument("no filter named '" + name + "'");
  return f(*this, input, args);
}

StatusOr<bool> Interpreter::ApplyTest(const std::string& name, const Value& input,
                                      CallArgs& args) {
  RETURN_IF_ERROR(CheckStack());  // select('...')-style filters call tests by name
  TestFn t = FindTest(name);
  if (t == nullptr) return InvalidArgument("no test named '" + name + "'");
  return t(*this, input, args);
}

StatusOr<Value> Interpreter::ApplyFilterChain(const std::vector<ExprPtr>& filters, Value input,
                                              const std::shared_ptr<Scope>& scope) {
  for (const ExprPtr& f : filters) {
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(*f, scope));
    StatusOr<Value> r = ApplyFilter(f->name, input, args);
    if (!r.ok()) {
      set_error_line(f->line);
      return r;
    }
    input = std::move(r).value();
  }
  return input;
}

StatusOr<List> Interpreter::Iterate(const Value& v) {
  if (v.is_string()) {
    // One value per character: a 16 MB string would be a list of gigabytes.
    RETURN_IF_ERROR(CheckCollectionBytes(v.str().size() * kValueBytes));
    RETURN_IF_ERROR(ChargeBuilt(v.str().size() * kValueBytes));
  }
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return List{};  // jinja2's Undefined iterates as empty
    case ValueKind::kList:
      return v.list();
    case ValueKind::kDict: {
      // New strings, one per key (a dict's keys are not values to share).
      size_t bytes = 0;
      for (const auto& [k, unused] : v.dict().items()) bytes += kValueBytes + k.size();
      RETURN_IF_ERROR(ChargeBuilt(bytes));
      List keys;
      for (const auto& [k, unused] : v.dict().items()) keys.push_back(Value::String(k));
      return keys;
    }
    case ValueKind::kString: {
      List chars;
      for (char32_t cp : DecodeUtf8(v.str())) chars.push_back(Value::String(EncodeUtf8({&cp, 1})));
      return chars;
    }
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kNamespace:
    case ValueKind::kFunction:
      break;
  }
  return InvalidArgument("'" + v.TypeName() + "' object is not iterable");
}

StatusOr<Value> Interpreter::GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  // Python attribute first (methods), then item, like jinja2's sandboxed getattr.
  Value method = FindMethod(obj, name);
  if (!method.is_undefined()) return method;
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
  }
  std::string type = obj.is_namespace() ? "Namespace" : obj.TypeName() + " object";
  return Value::Undefined("'" + type + "' has no attribute '" + CutForMessage(name) + "'");
}

StatusOr<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
    if (const Value* v = obj.dict().Find(key.str())) return *v;
  } else if (obj.is_list() && !obj.is_iterator() && (key.is_int() || key.is_bool())) {
    int64_t n = static_cast<int64_t>(obj.list().size());
    int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (i >= 0 && i < n) return obj.list()[i];
    return Value::Undefined(obj.TypeName() + " object has no element " + key.ShortRepr());
  } else if (obj.is_string() && (key.is_int() || key.is_bool())) {
    std::u32string cps = DecodeUtf8(obj.str());
    int64_t n = static_cast<int64_t>(cps.size());
    int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (i >= 0 && i < n) return Value::String(EncodeUtf8(cps.substr(i, 1)));
    return Value::Undefined("str object has no element " + key.ShortRepr());
  }
  // The messages quote the key cut short: each copy of an Undefined copies its message, and
  // {}[('x' * 1000000)] * 100000 asked for 100 GB.
  if (key.is_string()) {
    Value method = FindMethod(obj, key.str());
    if (!method.is_undefined()) return method;
    return Value::Undefined("'" + obj.TypeName() + " object' has no attribute " +
                            key.ShortRepr());
  }
  return Value::Undefined(obj.TypeName() + " object has no element " + key.ShortRepr());
}

StatusOr<Value> Interpreter::EvalInner(const Expr& e, const std::shared_ptr<Scope>& scope) {
  RETURN_IF_ERROR(Charge());
  RETURN_IF_ERROR(CheckStack());
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return Lookup(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      List items;
      for (const ExprPtr& a : e.args) {
        ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
        items.push_back(std::move(v));
      }
      return e.kind == ExprKind::kList ? Value::MakeList(std::move(items))
                                       : Value::MakeTuple(std::move(items));
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], scope));
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], scope));
        if (!k.is_string()) {
          return InvalidArgument("unsupported: dict literal with a non-string key " + k.ShortRepr());
        }
        d.Set(k.str(), std::move(v));
      }
      return Value::MakeDict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.a, scope));
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.a, scope));
      ASSIGN_OR_RETURN(Value key, Eval(*e.b, scope));
      return GetItem(obj, key);
    }
    case ExprKind::kSlice: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.a, scope));
      Value parts[3];
      const Expr* exprs[3] = {e.b.get(), e.c.get(), e.d.get()};
      for (int i = 0; i < 3; ++i) {
        if (exprs[i] == nullptr) {
          parts[i] = Value::None();
        } else {
          ASSIGN_OR_RETURN(parts[i], Eval(*exprs[i], scope));
        }
      }
      if (obj.is_undefined()) return UndefinedError(obj);
      return Slice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall:
      return EvalCall(e, scope);
    case ExprKind::kFilter: {
      ASSIGN_OR_RETURN(Value input, Eval(*e.a, scope));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
      return ApplyFilter(e.name, input, args);
    }
    case ExprKind::kTest: {
      ASSIGN_OR_RETURN(Value input, Eval(*e.a, scope));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
      ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, input, args));
      return Value::Bool(r != e.negated);
    }
    case ExprKind::kNot: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.a, scope));
      return Value::Bool(!v.Truthy());
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.a, scope));
      return UnaryOp(e.kind == ExprKind::kNeg ? "-" : "+", v);
    }
    case ExprKind::kBinary: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
      ASSIGN_OR_RETURN(Value b, Eval(*e.b, scope));
      return BinaryOp(*this, e.name, a, b);
    }
    case ExprKind::kAnd: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
      if (!a.Truthy()) return a;
      return Eval(*e.b, scope);
    }
    case ExprKind::kOr: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
      if (a.Truthy()) return a;
      return Eval(*e.b, scope);
    }
    case ExprKind::kCompare:
      return EvalCompare(e, scope);
    case ExprKind::kCondExpr: {
      ASSIGN_OR_RETURN(Value cond, Eval(*e.a, scope));
      if (cond.Truthy()) return Eval(*e.b, scope);
      if (e.c) return Eval(*e.c, scope);
      return Value::Undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return Internal("unhandled expression kind");
}

StatusOr<Value> Interpreter::EvalCompare(const Expr& e, const std::shared_ptr<Scope>& scope) {
  ASSIGN_OR_RETURN(Value lhs, Eval(*e.a, scope));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    ASSIGN_OR_RETURN(Value rhs, Eval(*e.args[i], scope));
    ASSIGN_OR_RETURN(bool r, CompareOp(e.ops[i], lhs, rhs));
    if (!r) return Value::Bool(false);
    lhs = std::move(rhs);
  }
  return Value::Bool(true);
}

// jinja2 fails at compile time on an unknown filter or test name, except in a "soft" frame: the
// condition and bodies of an {% if %} and an inline if-expression, where the error comes only if
// it runs (a template's tools branch may use a filter loom lacks and still serve plain chats).
// The frames a for body, its loop filter and else, a set / filter block, a macro or a
// generation block open are not soft, wherever they are.
Status ValidateNames(const Program& program) {
  struct Walker {
    Status Expr(const struct Expr* e, bool soft) {
      if (e == nullptr) return OkStatus();
      if (!soft && e->kind == ExprKind::kFilter && FindFilter(e->name) == nullptr) {
        return InvalidArgument("line " + std::to_string(e->line) + ": no filter named '" +
                               e->name + "'");
      }
      if (!soft && e->kind == ExprKind::kTest && FindTest(e->name) == nullptr) {
        return InvalidArgument("line " + std::to_string(e->line) + ": no test named '" + e->name +
                               "'");
      }
      soft = soft || e->kind == ExprKind::kCondExpr;
      for (const auto* child : {e->a.get(), e->b.get(), e->c.get(), e->d.get()}) {
        RETURN_IF_ERROR(Expr(child, soft));
      }
      for (const ExprPtr& a : e->args) RETURN_IF_ERROR(Expr(a.get(), soft));
      for (const auto& kw : e->kwargs) RETURN_IF_ERROR(Expr(kw.second.get(), soft));
      return OkStatus();
    }
    Status Body(const loom::jinja::Body& body, bool soft) {
      for (const StmtPtr& s : body) {
        // The iterable of a for and the value of a set are in the enclosing frame; everything
        // else a for, block or macro holds is in a frame of its own.
        const bool own_frame = s->kind == StmtKind::kFor || s->kind == StmtKind::kSetBlock ||
                               s->kind == StmtKind::kFilterBlock || s->kind == StmtKind::kMacro ||
                               s->kind == StmtKind::kScope;
        const bool inner = s->kind == StmtKind::kIf ? true : own_frame ? false : soft;
        RETURN_IF_ERROR(Expr(s->expr.get(), s->kind == StmtKind::kIf || soft));
        RETURN_IF_ERROR(Expr(s->cond.get(), inner));
        for (const ExprPtr& f : s->filters) RETURN_IF_ERROR(Expr(f.get(), inner));
        for (const MacroParam& p : s->params) RETURN_IF_ERROR(Expr(p.default_value.get(), inner));
        RETURN_IF_ERROR(Body(s->body, inner));
        RETURN_IF_ERROR(Body(s->else_body, inner));
      }
      return OkStatus();
    }
  };
  return Walker().Body(program.body, false);
}

StatusOr<std::string> Render(const Program& program, const Dict& globals,
                             const RenderOptions& options) {
  return NoThrow("template render", [&]() -> StatusOr<std::string> {
    Interpreter interp(globals, options);
    return interp.Run(program);
  });
}

}  // namespace loom::jinja
