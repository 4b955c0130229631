// Jinja filters (`x | name(args)`) with jinja2's behaviour, and transformers' tojson.
#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

std::string SoftStr(const Value& v) { return PyStr(v); }

StatusOr<Value> Trim(Interpreter&, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "trim", 1, "chars"));
  const Value* chars = FindArg(args, 0, "chars");
  std::string r = PyStrip(SoftStr(v), true, true,
                          chars != nullptr && chars->is_string() ? &chars->str() : nullptr);
  return v.is_safe() ? Value::SafeString(std::move(r)) : Value::String(std::move(r));
}

// Non-ASCII code points as \uXXXX (surrogate pairs above the BMP), for ensure_ascii=True.
std::string EscapeNonAscii(const std::string& s) {
  std::string out;
  char buf[16];
  for (char32_t cp : DecodeUtf8(s)) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x10000) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      char32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      out += buf;
    }
  }
  return out;
}

// transformers' override: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False).
StatusOr<Value> ToJson(Interpreter& interp, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "tojson", 4, "ensure_ascii,indent,separators,sort_keys"));
  const Value* ensure_ascii = FindArg(args, 0, "ensure_ascii");
  const Value* indent_v = FindArg(args, 1, "indent");
  const Value* separators = FindArg(args, 2, "separators");
  const Value* sort_keys = FindArg(args, 3, "sort_keys");
  int indent = -1;
  std::string indent_str;
  if (indent_v != nullptr && !indent_v->is_none()) {
    if (!indent_v->is_int()) return InvalidArgument("tojson: indent must be an integer");
    indent = static_cast<int>(std::clamp<int64_t>(indent_v->as_int(), 0, 64));
  }
  std::string item_sep = indent >= 0 ? "," : ", ";
  std::string key_sep = ": ";
  if (separators != nullptr && !separators->is_none()) {
    if (!separators->is_list() || separators->list().size() != 2 ||
        !separators->list()[0].is_string() || !separators->list()[1].is_string()) {
      return InvalidArgument("tojson: separators must be a pair of strings");
    }
    item_sep = separators->list()[0].str();
    key_sep = separators->list()[1].str();
  }
  ASSIGN_OR_RETURN(std::string s,
                   v.ToJson(indent, item_sep, key_sep, sort_keys && sort_keys->Truthy(),
                            interp.options().limits.max_output_bytes));
  if (ensure_ascii && ensure_ascii->Truthy()) s = EscapeNonAscii(s);
  RETURN_IF_ERROR(interp.CheckSize(s.size()));
  return Value::String(std::move(s));
}

StatusOr<Value> Length(Interpreter&, const Value& v, CallArgs&) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return Value::Int(0);
    case ValueKind::kString:
      return Value::Int(static_cast<int64_t>(DecodeUtf8(v.str()).size()));
    case ValueKind::kList:
      if (v.is_iterator() && !v.is_view()) break;
      return Value::Int(static_cast<int64_t>(v.list().size()));
    case ValueKind::kDict:
      return Value::Int(static_cast<int64_t>(v.dict().size()));
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kNamespace:
    case ValueKind::kFunction:
      break;
  }
  return InvalidArgument("object of type '" + v.TypeName() + "' has no len()");
}

StatusOr<Value> Default(Interpreter&, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "default", 2, "default_value,boolean"));
  const Value* dflt = FindArg(args, 0, "default_value");
  const Value* boolean = FindArg(args, 1, "boolean");
  if (v.is_undefined() || (boolean && boolean->Truthy() && !v.Truthy())) {
    return dflt ? *dflt : Value::String("");
  }
  return v;
}

// jinja2's do_title: capitalizes words split at runs of `-`, whitespace and opening brackets.
std::string JinjaTitle(const std::string& s) {
  std::u32string cps = DecodeUtf8(s);
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
  };
  bool word_start = true;
  for (char32_t& c : cps) {
    if (is_sep(c)) {
      word_start = true;
    } else {
      c = word_start ? ToUpper(c) : ToLower(c);
      word_start = false;
    }
  }
  return EncodeUtf8(cps);
}

StatusOr<Value> Replace(Interpreter& interp, const Value& v, CallArgs& args) {
  const Value* old = FindArg(args, 0, "old");
  const Value* repl = FindArg(args, 1, "new");
  const Value* count = FindArg(args, 2, "count");
  if (old == nullptr || repl == nullptr) return InvalidArgument("replace needs old and new");
  Value self = Value::String(SoftStr(v));
  CallArgs margs;
  margs.positional = {Value::String(SoftStr(*old)), Value::String(SoftStr(*repl))};
  if (count && !count->is_none()) margs.positional.push_back(*count);
  Value method = FindMethod(self, "replace");
  return interp.CallValue(method, margs);
}

// Attribute lookup as jinja2's make_attrgetter: dotted path, item first, integer parts as index.
StatusOr<Value> GetPath(Interpreter& interp, const Value& item, const std::string& path) {
  Value cur = item;
  size_t b = 0;
  while (true) {
    size_t e = path.find('.', b);
    std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    int64_t index = INT64_MAX;  // more digits than fit: no such element, like any large index
    if (numeric) std::from_chars(part.data(), part.data() + part.size(), index);
    ASSIGN_OR_RETURN(cur, interp.GetItem(cur, numeric ? Value::Int(index) : Value::String(part)));
    if (e == std::string::npos) return cur;
    b = e + 1;
  }
}

StatusOr<Value> Join(Interpreter& interp, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "join", 2, "d,attribute"));
  const Value* d = FindArg(args, 0, "d");
  const Value* attr = FindArg(args, 1, "attribute");
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  std::string sep = d ? SoftStr(*d) : "";
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    if (attr && !attr->is_none()) {
      ASSIGN_OR_RETURN(Value x, GetPath(interp, items[i], SoftStr(*attr)));
      out += SoftStr(x);
    } else {
      out += SoftStr(items[i]);
    }
    RETURN_IF_ERROR(interp.CheckSize(out.size()));
  }
  return Value::String(std::move(out));
}

StatusOr<Value> ToList(Interpreter& interp, const Value& v, CallArgs&) {
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  return Value::MakeList(std::move(items));
}

StatusOr<Value> First(Interpreter& interp, const Value& v, CallArgs&) {
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

StatusOr<Value> Last(Interpreter& interp, const Value& v, CallArgs&) {
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

// select / reject / selectattr / rejectattr.
StatusOr<Value> SelectImpl(Interpreter& interp, const Value& v, CallArgs& args, bool by_attr,
                           bool keep_if) {
  // jinja2's select_or_reject starts with `if value:`, so None selects nothing.
  if (!v.Truthy()) return Value::MakeIterator({}, "generator");
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) return InvalidArgument("selectattr/rejectattr need an attribute");
    attr = SoftStr(args.positional[next++]);
  }
  std::string test;
  if (next < args.positional.size()) test = SoftStr(args.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + next, args.positional.end());
  test_args.keyword = args.keyword;
  List out;
  for (const Value& item : items) {
    RETURN_IF_ERROR(interp.Charge());
    Value x = item;
    if (by_attr) {
      ASSIGN_OR_RETURN(x, GetPath(interp, item, attr));
    }
    bool r;
    if (test.empty()) {
      r = x.Truthy();
    } else {
      CallArgs a = test_args;
      ASSIGN_OR_RETURN(r, interp.ApplyTest(test, x, a));
    }
    if (r == keep_if) out.push_back(item);
  }
  return Value::MakeIterator(std::move(out), "generator");
}

StatusOr<Value> Map(Interpreter& interp, const Value& v, CallArgs& args) {
  if (!v.Truthy()) return Value::MakeIterator({}, "generator");  // jinja2: `if value:`
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, val] : args.keyword) {
    if (k == "attribute") attribute = &val;
    if (k == "default") dflt = &val;
  }
  List out;
  if (attribute != nullptr) {
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value x, GetPath(interp, item, SoftStr(*attribute)));
      if (x.is_undefined() && dflt != nullptr) x = *dflt;
      out.push_back(std::move(x));
    }
    return Value::MakeIterator(std::move(out), "generator");
  }
  if (args.positional.empty()) return InvalidArgument("map needs a filter name or attribute=");
  std::string filter = SoftStr(args.positional[0]);
  for (const Value& item : items) {
    RETURN_IF_ERROR(interp.Charge());
    CallArgs a;
    a.positional.assign(args.positional.begin() + 1, args.positional.end());
    a.keyword = args.keyword;
    ASSIGN_OR_RETURN(Value x, interp.ApplyFilter(filter, item, a));
    out.push_back(std::move(x));
  }
  return Value::MakeIterator(std::move(out), "generator");
}

StatusOr<Value> Items(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::MakeList({});
  if (!v.is_dict()) return InvalidArgument("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, x] : v.dict().items()) out.push_back(Value::MakeTuple({Value::String(k), x}));
  return Value::MakeIterator(std::move(out), "generator");
}

// A finite double truncated toward zero as Python's int() does; an error naming the filter when
// the result does not fit loom's 64-bit integers (Python would give a big int).
StatusOr<Value> TruncateToInt(double f) {
  const double t = std::trunc(f);
  // [-2^63, 2^63): both bounds are exact doubles.
  if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0)) {
    return InvalidArgument("int: " + FloatRepr(f) +
                           " does not fit in a 64-bit integer (OverflowError)");
  }
  return Value::Int(static_cast<int64_t>(t));
}

StatusOr<Value> ToInt(Interpreter&, const Value& v, CallArgs& args) {
  const Value* dflt = FindArg(args, 0, "default");
  Value fallback = dflt ? *dflt : Value::Int(0);
  if (v.is_int() || v.is_bool()) return Value::Int(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) return fallback;
    return TruncateToInt(v.as_double());
  }
  if (v.is_string()) {
    std::string s = PyStrip(v.str(), true, true, nullptr);
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0' && errno == 0) return Value::Int(i);
    if (!s.empty() && *end == '\0' && errno == ERANGE) {
      return InvalidArgument("int: '" + s + "' does not fit in a 64-bit integer (OverflowError)");
    }
    double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0' && std::isfinite(f)) return TruncateToInt(f);
  }
  return fallback;
}

StatusOr<Value> ToFloat(Interpreter&, const Value& v, CallArgs& args) {
  const Value* dflt = FindArg(args, 0, "default");
  Value fallback = dflt ? *dflt : Value::Float(0.0);
  if (v.is_number()) return Value::Float(v.as_double());
  if (v.is_string()) {
    std::string s = PyStrip(v.str(), true, true, nullptr);
    char* end = nullptr;
    double f = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value::Float(f);
  }
  return fallback;
}

StatusOr<Value> Abs(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) {
      return InvalidArgument("abs: integer overflow (OverflowError; loom's integers are 64-bit)");
    }
    return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_float()) return Value::Float(std::fabs(v.as_double()));
  return InvalidArgument("bad operand type for abs(): '" + v.TypeName() + "'");
}

StatusOr<Value> Round(Interpreter&, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "round", 2, "precision,method"));
  const Value* p = FindArg(args, 0, "precision");
  const Value* m = FindArg(args, 1, "method");
  std::string method = m ? SoftStr(*m) : "common";
  if (p != nullptr && !p->is_int() && !p->is_bool()) {
    return InvalidArgument("round: precision must be an integer, got '" + p->TypeName() + "'");
  }
  int64_t precision = p ? p->as_int() : 0;
  if (!v.is_number()) return InvalidArgument("round: value must be a number");
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  double r;
  if (method == "common") {
    r = std::nearbyint(x);  // Python's round(): half to even
  } else if (method == "floor") {
    r = std::floor(x);
  } else if (method == "ceil") {
    r = std::ceil(x);
  } else {
    return InvalidArgument("method must be common, ceil or floor");
  }
  if (method == "common" && (v.is_int() || v.is_bool())) return Value::Int(v.as_int());
  return Value::Float(r / scale);
}

// jinja2's do_indent (s += "\n"; splitlines; indent every line but the first unless first=).
StatusOr<Value> Indent(Interpreter& interp, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "indent", 3, "width,first,blank"));
  const Value* width = FindArg(args, 0, "width");
  const Value* first = FindArg(args, 1, "first");
  const Value* blank = FindArg(args, 2, "blank");
  std::string ind = "    ";
  if (width != nullptr && width->is_string()) {
    ind = width->str();
  } else if (width != nullptr && (width->is_int() || width->is_bool())) {
    // jinja2 builds " " * width: checked against the size limit before it is built.
    const int64_t w = std::max<int64_t>(0, width->as_int());
    RETURN_IF_ERROR(interp.CheckSize(static_cast<uint64_t>(w)));
    ind.assign(static_cast<size_t>(w), ' ');
  } else if (width != nullptr) {
    return InvalidArgument("indent: can't multiply sequence by non-int of type '" +
                           width->TypeName() + "'");
  }
  std::string s = SoftStr(v) + "\n";
  std::vector<std::string> lines;
  size_t b = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(b, i - b));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      b = i + 1;
    }
  }
  if (b < s.size()) lines.push_back(s.substr(b));
  // Each line may get the indent: refuse before building when that could pass the limit.
  size_t grown;
  if (__builtin_mul_overflow(lines.size() + 1, ind.size(), &grown) ||
      __builtin_add_overflow(grown, s.size(), &grown)) {
    grown = SIZE_MAX;
  }
  RETURN_IF_ERROR(interp.CheckSize(grown));
  std::string out;
  if (blank && blank->Truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + ind : "") + lines[i];
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
    }
  }
  if (first && first->Truthy()) out = ind + out;
  RETURN_IF_ERROR(interp.CheckSize(out.size()));
  return Value::String(std::move(out));
}

StatusOr<Value> SortKey(Interpreter& interp, const Value& item, const Value* attr, bool cs) {
  Value k = item;
  if (attr && !attr->is_none()) {
    ASSIGN_OR_RETURN(k, GetPath(interp, item, SoftStr(*attr)));
  }
  if (!cs && k.is_string()) k = Value::String(LowerUtf8(k.str()));
  return k;
}

StatusOr<List> SortedList(Interpreter& interp, List items, bool reverse, bool cs,
                          const Value* attr) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    ASSIGN_OR_RETURN(Value k, SortKey(interp, item, attr, cs));
    keyed.emplace_back(std::move(k), std::move(item));
  }
  Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    StatusOr<bool> r = reverse ? b.first.Less(a.first) : a.first.Less(b.first);
    if (!r.ok()) {
      if (error.ok()) error = r.status();
      return false;
    }
    return *r;
  });
  RETURN_IF_ERROR(error);
  List out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

StatusOr<Value> Sort(Interpreter& interp, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "sort", 3, "reverse,case_sensitive,attribute"));
  const Value* reverse = FindArg(args, 0, "reverse");
  const Value* cs = FindArg(args, 1, "case_sensitive");
  const Value* attr = FindArg(args, 2, "attribute");
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  ASSIGN_OR_RETURN(List out, SortedList(interp, std::move(items), reverse && reverse->Truthy(),
                                        cs && cs->Truthy(), attr));
  return Value::MakeList(std::move(out));
}

StatusOr<Value> DictSort(Interpreter& interp, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "dictsort", 3, "case_sensitive,by,reverse"));
  const Value* cs = FindArg(args, 0, "case_sensitive");
  const Value* by = FindArg(args, 1, "by");
  const Value* reverse = FindArg(args, 2, "reverse");
  if (!v.is_dict()) return InvalidArgument("dictsort needs a mapping");
  bool by_value = by && SoftStr(*by) == "value";
  List pairs;
  for (const auto& [k, x] : v.dict().items()) pairs.push_back(Value::MakeTuple({Value::String(k), x}));
  Value index = Value::String(by_value ? "1" : "0");
  ASSIGN_OR_RETURN(List out, SortedList(interp, std::move(pairs), reverse && reverse->Truthy(),
                                        cs && cs->Truthy(), &index));
  return Value::MakeList(std::move(out));
}

StatusOr<Value> Unique(Interpreter& interp, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "unique", 2, "case_sensitive,attribute"));
  const Value* cs = FindArg(args, 0, "case_sensitive");
  const Value* attr = FindArg(args, 1, "attribute");
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  List seen, out;
  for (const Value& item : items) {
    RETURN_IF_ERROR(interp.Charge(static_cast<int64_t>(seen.size()) + 1));
    ASSIGN_OR_RETURN(Value k, SortKey(interp, item, attr, cs && cs->Truthy()));
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(k); });
    if (!dup) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return Value::MakeIterator(std::move(out), "generator");
}

StatusOr<Value> Reverse(Interpreter& interp, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::u32string cps = DecodeUtf8(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::String(EncodeUtf8(cps));
  }
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  bool is_list = v.is_list() && !v.is_iterator();
  std::reverse(items.begin(), items.end());
  // reversed(list) is an iterator; other iterables go through list() first.
  return is_list ? Value::MakeIterator(std::move(items), v.is_tuple() ? "reversed" : "list_reverseiterator")
                 : Value::MakeList(std::move(items));
}

StatusOr<Value> Batch(Interpreter& interp, const Value& v, CallArgs& args) {
  const Value* count = FindArg(args, 0, "linecount");
  const Value* fill = FindArg(args, 1, "fill_with");
  if (count == nullptr || !count->is_int() || count->as_int() <= 0) {
    return InvalidArgument("batch needs a positive line count");
  }
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  if (fill && !fill->is_none()) {
    // The last batch is padded to linecount: bound it before filling.
    RETURN_IF_ERROR(interp.CheckCollectionBytes(
        count->as_int() > static_cast<int64_t>(SIZE_MAX / (2 * kValueBytes))
            ? SIZE_MAX
            : static_cast<size_t>(count->as_int()) * kValueBytes));
  }
  List out, cur;
  for (Value& item : items) {
    cur.push_back(std::move(item));
    if (static_cast<int64_t>(cur.size()) == count->as_int()) {
      out.push_back(Value::MakeList(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none()) {
      while (static_cast<int64_t>(cur.size()) < count->as_int()) cur.push_back(*fill);
    }
    out.push_back(Value::MakeList(std::move(cur)));
  }
  return Value::MakeIterator(std::move(out), "generator");
}

StatusOr<Value> MinMaxSum(Interpreter& interp, const Value& v, CallArgs& args, int which) {
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  if (which == 2) {
    Value total = Value::Int(0);
    for (const Value& x : items) {
      if (!x.is_number()) return InvalidArgument("sum: items must be numbers");
      if (total.is_float() || x.is_float()) {
        total = Value::Float(total.as_double() + x.as_double());
      } else {
        int64_t r;
        if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) {
          return InvalidArgument(
              "sum: integer overflow (OverflowError; loom's integers are 64-bit)");
        }
        total = Value::Int(r);
      }
    }
    return total;
  }
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  Value best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(bool less, items[i].Less(best));
    if (less == (which == 0)) best = items[i];
  }
  return best;
}

StatusOr<Value> Escape(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_safe()) return v;
  return Value::SafeString(HtmlEscape(SoftStr(v)));
}

struct FilterEntry {
  const char* name;
  FilterFn fn;
};

const FilterEntry kFilters[] = {
    {"trim", Trim},
    {"tojson", ToJson},
    {"length", Length},
    {"count", Length},
    {"default", Default},
    {"d", Default},
    {"upper", [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<Value> {
       return Value::String(UpperUtf8(SoftStr(v)));
     }},
    {"lower", [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<Value> {
       return Value::String(LowerUtf8(SoftStr(v)));
     }},
    {"capitalize", [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<Value> {
       std::u32string c = DecodeUtf8(SoftStr(v));
       for (size_t i = 0; i < c.size(); ++i) c[i] = i == 0 ? ToUpper(c[i]) : ToLower(c[i]);
       return Value::String(EncodeUtf8(c));
     }},
    {"title", [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<Value> {
       return Value::String(JinjaTitle(SoftStr(v)));
     }},
    {"replace", Replace},
    {"join", Join},
    {"list", ToList},
    {"first", First},
    {"last", Last},
    {"select", [](Interpreter& i, const Value& v, CallArgs& a) {
       return SelectImpl(i, v, a, false, true);
     }},
    {"reject", [](Interpreter& i, const Value& v, CallArgs& a) {
       return SelectImpl(i, v, a, false, false);
     }},
    {"selectattr", [](Interpreter& i, const Value& v, CallArgs& a) {
       return SelectImpl(i, v, a, true, true);
     }},
    {"rejectattr", [](Interpreter& i, const Value& v, CallArgs& a) {
       return SelectImpl(i, v, a, true, false);
     }},
    {"map", Map},
    {"items", Items},
    {"string", [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<Value> {
       return Value::String(SoftStr(v));
     }},
    {"int", ToInt},
    {"float", ToFloat},
    {"abs", Abs},
    {"round", Round},
    {"indent", Indent},
    {"safe", [](Interpreter&, const Value& v, CallArgs&) -> StatusOr<Value> {
       return v.is_safe() ? v : Value::SafeString(SoftStr(v));
     }},
    {"unique", Unique},
    {"sort", Sort},
    {"dictsort", DictSort},
    {"reverse", Reverse},
    {"batch", Batch},
    {"min", [](Interpreter& i, const Value& v, CallArgs& a) { return MinMaxSum(i, v, a, 0); }},
    {"max", [](Interpreter& i, const Value& v, CallArgs& a) { return MinMaxSum(i, v, a, 1); }},
    {"sum", [](Interpreter& i, const Value& v, CallArgs& a) { return MinMaxSum(i, v, a, 2); }},
    {"escape", Escape},
    {"e", Escape},
};

}  // namespace

FilterFn FindFilter(const std::string& name) {
  for (const FilterEntry& f : kFilters) {
    if (name == f.name) return f.fn;
  }
  return nullptr;
}

}  // namespace loom::jinja
