// Jinja tests (`x is defined`, `x is string`, ...) with jinja2's definitions.
#include <cmath>
#include <cstring>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

// Python's x % 2.0 (the remainder takes the divisor's sign; nan and inf give nan).
double FloatMod2(double x) {
  double m = std::fmod(x, 2.0);
  return m < 0 ? m + 2.0 : m;
}

StatusOr<const Value*> Arg(const CallArgs& args, const char* test) {
  const Value* v = FindArg(args, 0, "other");
  if (v == nullptr) v = FindArg(args, 0, "num");
  if (v == nullptr) v = FindArg(args, 0, "seq");
  if (v == nullptr) return InvalidArgument(std::string("test '") + test + "' needs an argument");
  return v;
}

StatusOr<bool> Compare(const char* op, const Value& v, const CallArgs& args) {
  ASSIGN_OR_RETURN(const Value* other, Arg(args, op));
  return CompareOp(op, v, *other);
}

struct TestEntry {
  const char* name;
  TestFn fn;
};

const TestEntry kTests[] = {
    {"defined",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> { return !v.is_undefined(); }},
    {"undefined",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_undefined(); }},
    {"none", [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_none(); }},
    {"string",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_string(); }},
    {"number",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_number(); }},
    {"integer",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_int(); }},
    {"float",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_float(); }},
    {"boolean",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_bool(); }},
    {"true",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> {
       return v.is_bool() && v.as_bool();
     }},
    {"false",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> {
       return v.is_bool() && !v.as_bool();
     }},
    {"mapping",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> { return v.is_dict(); }},
    // jinja2's Undefined is iterable (empty) and has __len__/__getitem__.
    {"iterable",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> {
       return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
     }},
    {"sequence",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> {
       return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
     }},
    // An undefined value is callable in jinja2 (Undefined has a __call__, which raises).
    {"callable",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> {
       return v.is_function() || v.is_undefined();
     }},
    {"lower",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> {
       std::string s = PyStr(v);
       return LowerUtf8(s) == s && UpperUtf8(s) != s;
     }},
    {"upper",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> {
       std::string s = PyStr(v);
       return UpperUtf8(s) == s && LowerUtf8(s) != s;
     }},
    // jinja2's value % 2 == 1 / == 0: a float is odd or even too (3.0 is odd, 1.5 neither).
    {"odd",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> {
       if (v.is_float()) return FloatMod2(v.as_double()) == 1;
       if (!v.is_int() && !v.is_bool()) return InvalidArgument("test 'odd' needs a number");
       return v.as_int() % 2 != 0;
     }},
    {"even",
     [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<bool> {
       if (v.is_float()) return FloatMod2(v.as_double()) == 0;
       if (!v.is_int() && !v.is_bool()) return InvalidArgument("test 'even' needs a number");
       return v.as_int() % 2 == 0;
     }},
    {"divisibleby",
     [](Interpreter&, const Value& v, CallArgs& args) -> StatusOr<bool> {
       ASSIGN_OR_RETURN(const Value* n, Arg(args, "divisibleby"));
       if (!v.is_number() || !n->is_number()) {
         return InvalidArgument("test 'divisibleby' needs numbers");
       }
       if (n->as_double() == 0) return InvalidArgument("integer division or modulo by zero");
       if (v.is_float() || n->is_float()) {
         return std::fmod(v.as_double(), n->as_double()) == 0;
       }
       // INT64_MIN % -1 traps (SIGFPE) in C++; every integer is divisible by -1.
       if (n->as_int() == -1) return true;
       return v.as_int() % n->as_int() == 0;
     }},
    {"in",
     [](Interpreter&, const Value& v, CallArgs& args) -> StatusOr<bool> {
       ASSIGN_OR_RETURN(const Value* seq, Arg(args, "in"));
       return Contains(*seq, v);
     }},
    {"sameas",
     [](Interpreter&, const Value& v, CallArgs& args) -> StatusOr<bool> {
       ASSIGN_OR_RETURN(const Value* o, Arg(args, "sameas"));
       // Identity: exact for None/bools; containers and functions share their storage.
       if (v.kind() != o->kind()) return false;
       return v.Equals(*o) && (v.is_none() || v.is_bool() || v.is_undefined() || v.is_int());
     }},
    {"eq", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("==", v, a); }},
    {"equalto", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("==", v, a); }},
    {"==", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("==", v, a); }},
    {"ne", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("!=", v, a); }},
    {"!=", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("!=", v, a); }},
    {"lt", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("<", v, a); }},
    {"lessthan", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("<", v, a); }},
    {"<", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("<", v, a); }},
    {"le", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("<=", v, a); }},
    {"<=", [](Interpreter&, const Value& v, CallArgs& a) { return Compare("<=", v, a); }},
    {"gt", [](Interpreter&, const Value& v, CallArgs& a) { return Compare(">", v, a); }},
    {"greaterthan", [](Interpreter&, const Value& v, CallArgs& a) { return Compare(">", v, a); }},
    {">", [](Interpreter&, const Value& v, CallArgs& a) { return Compare(">", v, a); }},
    {"ge", [](Interpreter&, const Value& v, CallArgs& a) { return Compare(">=", v, a); }},
    {">=", [](Interpreter&, const Value& v, CallArgs& a) { return Compare(">=", v, a); }},
};

}  // namespace

TestFn FindTest(const std::string& name) {
  for (const TestEntry& t : kTests) {
    if (name == t.name) return t.fn;
  }
  return nullptr;
}

}  // namespace loom::jinja
