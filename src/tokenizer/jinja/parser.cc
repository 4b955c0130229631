// Jinja parser: recursive descent over the token stream, mirroring jinja2's parser.py precedence.
#include "tokenizer/jinja/parser.h"

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "base/no_throw.h"

namespace loom::jinja {
namespace {

// Nesting deeper than this (parentheses, blocks) is rejected instead of overflowing the stack.
constexpr int kMaxNesting = 256;
// Arguments of one call, filter or test. map('map', 'map', ...) calls a filter per argument, each
// level copying the rest: unbounded, that was quadratic memory and a C++ frame per argument.
constexpr size_t kMaxCallArgs = 256;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  StatusOr<Program> Run() {
    Program program;
    std::string end;
    RETURN_IF_ERROR(ParseBody({}, &program.body, &end));
    return program;
  }

 private:
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t n = 1) const {
    return tokens_[std::min(pos_ + n, tokens_.size() - 1)];
  }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(const char* op) const {
    return Cur().type == TokenType::kOperator && Cur().value == op;
  }
  bool IsName(const char* name) const {
    return Cur().type == TokenType::kName && Cur().value == name;
  }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case TokenType::kText: return "template text";
      case TokenType::kVarBegin: return "'{{'";
      case TokenType::kVarEnd: return "end of print statement '}}'";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kBlockEnd: return "end of statement block '%}'";
      case TokenType::kName:
      case TokenType::kInt:
      case TokenType::kFloat:
      case TokenType::kOperator: return "'" + t.value + "'";
      case TokenType::kString: return "string";
      case TokenType::kEof: return "end of template";
    }
    return "token";
  }

  Status Error(const std::string& what) const { return ErrorAt(Cur().line, what); }
  static Status ErrorAt(int line, const std::string& what) {
    return InvalidArgument("line " + std::to_string(line) + ": syntax error: " + what);
  }
  Status Unexpected(const std::string& expected) const {
    return Error("expected " + expected + ", got " + Describe(Cur()));
  }
  Status ExpectOp(const char* op) {
    if (!SkipOp(op)) return Unexpected(std::string("'") + op + "'");
    return OkStatus();
  }
  Status ExpectBlockEnd() {
    if (Cur().type != TokenType::kBlockEnd) return Unexpected("end of statement block '%}'");
    Next();
    return OkStatus();
  }
  StatusOr<std::string> ExpectName() {
    if (Cur().type != TokenType::kName) return Unexpected("a name");
    std::string n = Cur().value;
    Next();
    return n;
  }

  static ExprPtr Make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements ----

  // Parses statements until a block tag whose name is in `end_tags` (left unconsumed after the
  // name: *end is set to it and the stream sits after the name) or the end of the template.
  Status ParseBody(std::initializer_list<const char*> end_tags, Body* body, std::string* end) {
    if (++depth_ > kMaxNesting) return Error("blocks nested too deeply");
    while (true) {
      const Token& t = Cur();
      switch (t.type) {
        case TokenType::kEof:
          --depth_;
          if (end_tags.size() == 0) return OkStatus();
          return Error(std::string("unexpected end of template, expected '") + *end_tags.begin() +
                       "'");
        case TokenType::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kText;
          s->line = t.line;
          s->text = t.value;
          body->push_back(std::move(s));
          Next();
          break;
        }
        case TokenType::kVarBegin: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kOutput;
          s->line = t.line;
          Next();
          ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false));
          if (Cur().type != TokenType::kVarEnd) return Unexpected("end of print statement '}}'");
          Next();
          body->push_back(std::move(s));
          break;
        }
        case TokenType::kBlockBegin: {
          Next();
          if (Cur().type != TokenType::kName) return Unexpected("a tag name");
          for (const char* tag : end_tags) {
            if (Cur().value == tag) {
              *end = tag;
              Next();
              --depth_;
              return OkStatus();
            }
          }
          ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
          if (s) body->push_back(std::move(s));
          break;
        }
        case TokenType::kVarEnd:
        case TokenType::kBlockEnd:
        case TokenType::kName:
        case TokenType::kString:
        case TokenType::kInt:
        case TokenType::kFloat:
        case TokenType::kOperator:
          return Error("unexpected " + Describe(t));
      }
    }
  }

  StatusOr<StmtPtr> ParseStatement() {
    const std::string tag = Cur().value;
    const int line = Cur().line;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    Next();
    std::string end;
    if (tag == "if") {
      s->kind = StmtKind::kIf;
      ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false));
      RETURN_IF_ERROR(ExpectBlockEnd());
      RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &s->body, &end));
      Stmt* cur = s.get();
      // Each elif nests the next in its else branch: a level of the tree as a block is, so it
      // counts against the same nesting limit (255 nested ifs of 256 elifs each made 65,535
      // levels, past the stack of the recursive name check and destructor).
      int elifs = 0;
      while (end == "elif") {
        ++elifs;
        if (++depth_ > kMaxNesting) return Error("blocks nested too deeply (elif chains count)");
        auto elif = std::make_unique<Stmt>();
        elif->kind = StmtKind::kIf;
        elif->line = Cur().line;
        ASSIGN_OR_RETURN(elif->expr, ParseTuple(false, false));
        RETURN_IF_ERROR(ExpectBlockEnd());
        RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &elif->body, &end));
        Stmt* next = elif.get();
        cur->else_body.push_back(std::move(elif));
        cur = next;
      }
      if (end == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        RETURN_IF_ERROR(ParseBody({"endif"}, &cur->else_body, &end));
      }
      depth_ -= elifs;
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (tag == "for") {
      s->kind = StmtKind::kFor;
      RETURN_IF_ERROR(ParseTargets(&s->targets, nullptr));
      if (!SkipName("in")) return Unexpected("'in'");
      ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false, "recursive"));
      if (SkipName("if")) {
        ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
      }
      if (IsName("recursive")) return Error("unsupported: recursive for loops");
      RETURN_IF_ERROR(ExpectBlockEnd());
      ++loop_depth_;
      RETURN_IF_ERROR(ParseBody({"endfor", "else"}, &s->body, &end));
      --loop_depth_;
      if (end == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        RETURN_IF_ERROR(ParseBody({"endfor"}, &s->else_body, &end));
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (tag == "set") {
      RETURN_IF_ERROR(ParseTargets(&s->targets, &s->attr));
      if (SkipOp("=")) {
        s->kind = StmtKind::kSet;
        ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false));
        RETURN_IF_ERROR(ExpectBlockEnd());
        return s;
      }
      if (s->targets.size() != 1 || !s->attr.empty()) {
        return Error("a block set needs a single name as its target");
      }
      s->kind = StmtKind::kSetBlock;
      RETURN_IF_ERROR(ParseFilterChain(&s->filters));
      RETURN_IF_ERROR(ExpectBlockEnd());
      RETURN_IF_ERROR(ParseBody({"endset"}, &s->body, &end));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      ASSIGN_OR_RETURN(s->name, ExpectName());
      RETURN_IF_ERROR(ExpectOp("("));
      while (!SkipOp(")")) {
        if (!s->params.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (SkipOp(")")) break;
        MacroParam p;
        ASSIGN_OR_RETURN(p.name, ExpectName());
        if (SkipOp("=")) {
          ASSIGN_OR_RETURN(p.default_value, ParseExpression(true));
        } else if (!s->params.empty() && s->params.back().default_value) {
          return Error("non-default argument follows default argument");
        }
        s->params.push_back(std::move(p));
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      int saved_loop_depth = loop_depth_;
      loop_depth_ = 0;
      RETURN_IF_ERROR(ParseBody({"endmacro"}, &s->body, &end));
      loop_depth_ = saved_loop_depth;
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      RETURN_IF_ERROR(ParseFilterChain(&s->filters, /*start_inline=*/true));
      RETURN_IF_ERROR(ExpectBlockEnd());
      RETURN_IF_ERROR(ParseBody({"endfilter"}, &s->body, &end));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return ErrorAt(line, "'" + tag + "' outside a loop");
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (tag == "generation") {
      // transformers' AssistantTracker: the body renders as is (the tracking only marks spans).
      // The body is a caller() function in jinja2, so break / continue in it are outside a loop.
      s->kind = StmtKind::kScope;
      RETURN_IF_ERROR(ExpectBlockEnd());
      int saved_loop_depth = loop_depth_;
      loop_depth_ = 0;
      RETURN_IF_ERROR(ParseBody({"endgeneration"}, &s->body, &end));
      loop_depth_ = saved_loop_depth;
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    static const char* kUnsupported[] = {"extends", "block",    "include", "import", "from",
                                         "call",    "with",     "do",      "autoescape",
                                         "trans",   "pluralize"};
    for (const char* u : kUnsupported) {
      if (tag == u) {
        return ErrorAt(line, "unsupported tag '" + tag +
                                 "' (loom's chat template interpreter does not implement it)");
      }
    }
    return ErrorAt(line, "encountered unknown tag '" + tag + "'");
  }

  // `a`, `a, b`, `(a, b)` or (with attr != null) `ns.attr`.
  Status ParseTargets(std::vector<std::string>* names, std::string* attr) {
    bool paren = SkipOp("(");
    while (true) {
      if (IsOp("(")) return Error("unsupported: nested tuple unpacking");
      ASSIGN_OR_RETURN(std::string n, ExpectName());
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" ||
          n == "None") {
        return Error("can't assign to '" + n + "'");
      }
      names->push_back(n);
      if (attr != nullptr && names->size() == 1 && !paren && SkipOp(".")) {
        ASSIGN_OR_RETURN(*attr, ExpectName());
        return OkStatus();
      }
      if (!SkipOp(",")) break;
      if (paren && IsOp(")")) break;
    }
    if (paren) RETURN_IF_ERROR(ExpectOp(")"));
    return OkStatus();
  }

  Status ParseFilterChain(std::vector<ExprPtr>* filters, bool start_inline = false) {
    while (start_inline || IsOp("|")) {
      if (!start_inline) Next();
      start_inline = false;
      ASSIGN_OR_RETURN(ExprPtr f, ParseFilterOrTest(ExprKind::kFilter, nullptr));
      filters->push_back(std::move(f));
    }
    return OkStatus();
  }

  // ---- expressions ----

  // jinja2's parse_tuple: `a` or `a, b, ...` (a tuple). `extra_end` is a name that ends it.
  StatusOr<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens,
                               const char* extra_end = nullptr) {
    int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (Cur().type == TokenType::kVarEnd || Cur().type == TokenType::kBlockEnd || IsOp(")") ||
          (extra_end != nullptr && IsName(extra_end)) || (!with_condexpr && IsName("if"))) {
        break;
      }
      ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
      items.push_back(std::move(e));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return Unexpected("an expression");
    }
    ExprPtr t = Make(ExprKind::kTuple, line);
    t->args = std::move(items);
    return t;
  }

  StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    if (++depth_ > kMaxNesting) return Error("expression nested too deeply");
    StatusOr<ExprPtr> r = with_condexpr ? ParseCondExpr() : ParseOr();
    --depth_;
    return r;
  }

  StatusOr<ExprPtr> ParseCondExpr() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    Chain chain(this);
    while (IsName("if")) {
      RETURN_IF_ERROR(chain.Link());
      int line = Cur().line;
      Next();
      ExprPtr c = Make(ExprKind::kCondExpr, line);
      ASSIGN_OR_RETURN(c->a, ParseOr());
      c->b = std::move(e);
      if (SkipName("else")) {
        ASSIGN_OR_RETURN(c->c, ParseExpression(true));
      }
      e = std::move(c);
    }
    return e;
  }

  StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseAnd());
    Chain chain(this);
    while (IsName("or")) {
      RETURN_IF_ERROR(chain.Link());
      ExprPtr n = Make(ExprKind::kOr, Cur().line);
      Next();
      n->a = std::move(e);
      ASSIGN_OR_RETURN(n->b, ParseAnd());
      e = std::move(n);
    }
    return e;
  }

  StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseNot());
    Chain chain(this);
    while (IsName("and")) {
      RETURN_IF_ERROR(chain.Link());
      ExprPtr n = Make(ExprKind::kAnd, Cur().line);
      Next();
      n->a = std::move(e);
      ASSIGN_OR_RETURN(n->b, ParseNot());
      e = std::move(n);
    }
    return e;
  }

  StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      ExprPtr n = Make(ExprKind::kNot, Cur().line);
      Next();
      if (++depth_ > kMaxNesting) return Error("expression nested too deeply");
      ASSIGN_OR_RETURN(n->a, ParseNot());
      --depth_;
      return n;
    }
    return ParseCompare();
  }

  StatusOr<ExprPtr> ParseCompare() {
    int line = Cur().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Cur().type == TokenType::kOperator &&
          (Cur().value == "==" || Cur().value == "!=" || Cur().value == "<" ||
           Cur().value == "<=" || Cur().value == ">" || Cur().value == ">=")) {
        op = Cur().value;
        Next();
      } else if (IsName("in")) {
        op = "in";
        Next();
      } else if (IsName("not") && Peek().type == TokenType::kName && Peek().value == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(ExprKind::kCompare, line);
        cmp->a = std::move(first);
      }
      cmp->ops.push_back(op);
      ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
      cmp->args.push_back(std::move(rhs));
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  StatusOr<ExprPtr> Binary(ExprPtr lhs, const std::string& op, ExprPtr rhs, int line) {
    ExprPtr n = Make(ExprKind::kBinary, line);
    n->name = op;
    n->a = std::move(lhs);
    n->b = std::move(rhs);
    return n;
  }

  StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseConcat());
    Chain chain(this);
    while (IsOp("+") || IsOp("-")) {
      RETURN_IF_ERROR(chain.Link());
      std::string op = Cur().value;
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr rhs, ParseConcat());
      ASSIGN_OR_RETURN(e, Binary(std::move(e), op, std::move(rhs), line));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseConcat() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseMath2());
    Chain chain(this);
    while (IsOp("~")) {
      RETURN_IF_ERROR(chain.Link());
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath2());
      ASSIGN_OR_RETURN(e, Binary(std::move(e), "~", std::move(rhs), line));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr e, ParsePow());
    Chain chain(this);
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      RETURN_IF_ERROR(chain.Link());
      std::string op = Cur().value;
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr rhs, ParsePow());
      ASSIGN_OR_RETURN(e, Binary(std::move(e), op, std::move(rhs), line));
    }
    return e;
  }

  StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr e, ParseUnary(true));
    Chain chain(this);
    while (IsOp("**")) {
      RETURN_IF_ERROR(chain.Link());
      int line = Cur().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr rhs, ParseUnary(true));
      ASSIGN_OR_RETURN(e, Binary(std::move(e), "**", std::move(rhs), line));
    }
    return e;
  }

  StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    if (++depth_ > kMaxNesting) return Error("expression nested too deeply");
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = Make(IsOp("-") ? ExprKind::kNeg : ExprKind::kPos, Cur().line);
      Next();
      ASSIGN_OR_RETURN(node->a, ParseUnary(false));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    --depth_;
    return node;
  }

  StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    int line = t.line;
    if (t.type == TokenType::kName) {
      ExprPtr e = Make(ExprKind::kLiteral, line);
      if (t.value == "true" || t.value == "True") {
        e->literal = Value::Bool(true);
      } else if (t.value == "false" || t.value == "False") {
        e->literal = Value::Bool(false);
      } else if (t.value == "none" || t.value == "None") {
        e->literal = Value::None();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.value;
      }
      Next();
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (Cur().type == TokenType::kString) {
        s += Cur().value;
        Next();
      }
      ExprPtr e = Make(ExprKind::kLiteral, line);
      e->literal = Value::String(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInt) {
      errno = 0;
      long long v = std::strtoll(t.value.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error("integer literal too large: " + t.value);
      ExprPtr e = Make(ExprKind::kLiteral, line);
      e->literal = Value::Int(v);
      Next();
      return e;
    }
    if (t.type == TokenType::kFloat) {
      ExprPtr e = Make(ExprKind::kLiteral, line);
      e->literal = Value::Float(std::strtod(t.value.c_str(), nullptr));
      Next();
      return e;
    }
    if (SkipOp("(")) {
      ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true, true));
      RETURN_IF_ERROR(ExpectOp(")"));
      return e;
    }
    if (SkipOp("[")) {
      ExprPtr e = Make(ExprKind::kList, line);
      while (!IsOp("]")) {
        if (!e->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("]")) break;
        ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
        e->args.push_back(std::move(item));
      }
      Next();
      return e;
    }
    if (SkipOp("{")) {
      ExprPtr e = Make(ExprKind::kDict, line);
      while (!IsOp("}")) {
        if (!e->args.empty()) RETURN_IF_ERROR(ExpectOp(","));
        if (IsOp("}")) break;
        ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
        RETURN_IF_ERROR(ExpectOp(":"));
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        e->args.push_back(std::move(key));
        e->args.push_back(std::move(value));
      }
      Next();
      return e;
    }
    return Error("unexpected " + Describe(t));
  }

  StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    Chain chain(this);
    while (true) {
      RETURN_IF_ERROR(chain.Link());
      int line = Cur().line;
      if (SkipOp(".")) {
        if (Cur().type == TokenType::kName) {
          ExprPtr n = Make(ExprKind::kGetAttr, line);
          n->a = std::move(node);
          n->name = Cur().value;
          Next();
          node = std::move(n);
        } else if (Cur().type == TokenType::kInt) {
          ExprPtr n = Make(ExprKind::kGetItem, line);
          n->a = std::move(node);
          n->b = Make(ExprKind::kLiteral, line);
          n->b->literal = Value::Int(std::strtoll(Cur().value.c_str(), nullptr, 10));
          Next();
          node = std::move(n);
        } else {
          return Unexpected("an attribute name");
        }
      } else if (SkipOp("[")) {
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  StatusOr<ExprPtr> ParseSubscript(ExprPtr obj, int line) {
    ExprPtr parts[3];
    bool is_slice = false;
    int idx = 0;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        if (++idx > 2) return Error("too many ':' in a slice");
        is_slice = true;
        Next();
        continue;
      }
      if (parts[idx]) return Unexpected("']'");
      if (IsOp(",")) return Error("unsupported: tuple subscripts");
      ASSIGN_OR_RETURN(parts[idx], ParseExpression(true));
    }
    Next();
    if (!is_slice) {
      if (!parts[0]) return Error("empty subscript");
      ExprPtr n = Make(ExprKind::kGetItem, line);
      n->a = std::move(obj);
      n->b = std::move(parts[0]);
      return n;
    }
    ExprPtr n = Make(ExprKind::kSlice, line);
    n->a = std::move(obj);
    n->b = std::move(parts[0]);
    n->c = std::move(parts[1]);
    n->d = std::move(parts[2]);
    return n;
  }

  Status ParseCallArgs(Expr* call) {
    RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!SkipOp(")")) {
      if (!first) RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (SkipOp(")")) break;
      if (call->args.size() + call->kwargs.size() >= kMaxCallArgs) {
        return Error("more than " + std::to_string(kMaxCallArgs) + " arguments in one call");
      }
      if (IsOp("*") || IsOp("**")) return Error("unsupported: *args / **kwargs in calls");
      if (Cur().type == TokenType::kName && Peek().type == TokenType::kOperator &&
          Peek().value == "=") {
        std::string key = Cur().value;
        Next();
        Next();
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
        call->kwargs.emplace_back(key, std::move(v));
      } else {
        if (!call->kwargs.empty()) return Error("positional argument follows keyword argument");
        ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
        call->args.push_back(std::move(v));
      }
    }
    return OkStatus();
  }

  StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr n = Make(ExprKind::kCall, Cur().line);
    n->a = std::move(callee);
    RETURN_IF_ERROR(ParseCallArgs(n.get()));
    return n;
  }

  // After `|` (filter) or `is [not]` (test): a dotted name and optional arguments.
  StatusOr<ExprPtr> ParseFilterOrTest(ExprKind kind, ExprPtr input) {
    ExprPtr n = Make(kind, Cur().line);
    n->a = std::move(input);
    ASSIGN_OR_RETURN(n->name, ExpectName());
    while (SkipOp(".")) {
      ASSIGN_OR_RETURN(std::string part, ExpectName());
      n->name += "." + part;
    }
    if (IsOp("(")) {
      RETURN_IF_ERROR(ParseCallArgs(n.get()));
    } else if (kind == ExprKind::kTest &&
               (Cur().type == TokenType::kName || Cur().type == TokenType::kString ||
                Cur().type == TokenType::kInt || Cur().type == TokenType::kFloat || IsOp("(") ||
                IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      // `x is divisibleby 3`, `x is equalto 'a'`: one argument without parentheses.
      ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      n->args.push_back(std::move(arg));
    }
    return n;
  }

  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    Chain chain(this);
    while (true) {
      RETURN_IF_ERROR(chain.Link());
      if (SkipOp("|")) {
        ASSIGN_OR_RETURN(node, ParseFilterOrTest(ExprKind::kFilter, std::move(node)));
      } else if (IsName("is")) {
        Next();
        bool negated = SkipName("not");
        ASSIGN_OR_RETURN(node, ParseFilterOrTest(ExprKind::kTest, std::move(node)));
        node->negated = negated;
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  // One chain being parsed (a + b + c, x.a.b, x|f|g): each link nests the tree one level deeper
  // (left-leaning), so it counts toward the nesting limit like a parenthesis; a chain of 100,000
  // links otherwise built a tree whose recursive checks and destructor overflowed the stack.
  // The links are given back when the chain's parse returns.
  class Chain {
   public:
    explicit Chain(Parser* parser) : parser_(parser) {}
    ~Chain() { parser_->depth_ -= links_; }
    Chain(const Chain&) = delete;
    Chain& operator=(const Chain&) = delete;
    Status Link() {
      ++links_;
      if (++parser_->depth_ > kMaxNesting) {
        return parser_->Error("expression nested too deeply (a chain too long)");
      }
      return OkStatus();
    }

   private:
    Parser* parser_;
    int links_ = 0;
  };

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // enclosing for loops, for break/continue
};

}  // namespace

StatusOr<Program> Parse(const std::string& source, const LexerOptions& options) {
  if (source.size() > options.max_source_bytes) {
    return ResourceExhausted("template is " + std::to_string(source.size()) +
                             " bytes, more than the " + std::to_string(options.max_source_bytes) +
                             " a template may have (chat templates are a few KB)");
  }
  return NoThrow("template parse", [&]() -> StatusOr<Program> {
    ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source, options));
    return Parser(std::move(tokens)).Run();
  });
}

}  // namespace loom::jinja
