// Jinja AST: expression and statement nodes produced by the parser and walked by the interpreter.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace loom::jinja {

enum class ExprKind {
  kLiteral,   // literal
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args = key0, value0, key1, value1, ...
  kGetAttr,   // a.name
  kGetItem,   // a[b]
  kSlice,     // a[b:c:d], each of b/c/d may be null
  kCall,      // a(args, kwargs)
  kFilter,    // a | name(args, kwargs); a is null inside {% filter %} / block set
  kTest,      // a is [not] name(args, kwargs); negated
  kNot,       // not a
  kNeg,       // -a
  kPos,       // +a
  kBinary,    // a <name> b for + - * / // % ** ~
  kAnd,       // a and b
  kOr,        // a or b
  kCompare,   // a ops[0] args[0] ops[1] args[1] ... (chained)
  kCondExpr,  // b if a else c (c may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // if expr: body else else_body (elif = a nested kIf in else_body)
  kFor,          // for targets in expr [if cond]: body else else_body
  kSet,          // set targets = expr (or ns.attr = expr when attr is set)
  kSetBlock,     // set targets[0] [| filters] %}body{% endset
  kMacro,        // macro name(params) body
  kFilterBlock,  // filter <filters> body endfilter
  kBreak,
  kContinue,
  kScope,        // a body rendered in place ({% generation %}, which transformers renders as is)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;  // kFor / kSet names (a tuple when more than one)
  std::string attr;                  // kSet on a namespace: targets[0].attr
  std::vector<ExprPtr> filters;      // kSetBlock / kFilterBlock: kFilter nodes with a == null
  std::string name;                  // kMacro
  std::vector<MacroParam> params;    // kMacro
  Body body;
  Body else_body;
};

}  // namespace loom::jinja
