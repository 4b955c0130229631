// Jinja filters (`x | name(args)`) with jinja2's behaviour, and transformers' tojson.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/operators.h"
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
  // None means all (jinja2's count=None); str.replace refuses any other non-int count.
  if (count && !count->is_none()) margs.positional.push_back(*count);
  Value method = FindMethod(self, "replace");
  return interp.CallValue(method, margs);
}

// An attribute path as jinja2's make_attrgetter takes it: none for None, a string split at dots
// with digit-only parts as integers, any other value as the one part. Parsed once per filter
// call, not per item (`map(attribute='x' * 4000000)` over 2000 items copied 16 GB).
using AttrPath = std::vector<Value>;
AttrPath ParseAttrPath(const Value* attr) {
  AttrPath parts;
  if (attr == nullptr || attr->is_none()) return parts;
  if (!attr->is_string()) {
    parts.push_back(*attr);
    return parts;
  }
  const std::string& path = attr->str();
  size_t b = 0;
  while (true) {
    size_t e = path.find('.', b);
    std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    int64_t index = INT64_MAX;  // more digits than fit: no such element, like any large index
    if (numeric) std::from_chars(part.data(), part.data() + part.size(), index);
    parts.push_back(numeric ? Value::Int(index) : Value::String(std::move(part)));
    if (e == std::string::npos) return parts;
    b = e + 1;
  }
}

// make_attrgetter's lookup of `path` in `item`, item first (environment.getitem), one step of
// the budget per item. `dflt` (map's default=) replaces an Undefined after any part.
StatusOr<Value> GetPath(Interpreter& interp, const Value& item, const AttrPath& path,
                        const Value* dflt = nullptr) {
  RETURN_IF_ERROR(interp.Charge());
  Value cur = item;
  for (const Value& part : path) {
    ASSIGN_OR_RETURN(cur, interp.GetItem(cur, part));
    if (dflt != nullptr && !dflt->is_none() && cur.is_undefined()) cur = *dflt;
  }
  return cur;
}

StatusOr<Value> Join(Interpreter& interp, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "join", 2, "d,attribute"));
  const Value* d = FindArg(args, 0, "d");
  const Value* attr = FindArg(args, 1, "attribute");
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  std::string sep = d ? SoftStr(*d) : "";
  const bool by_attr = attr != nullptr && !attr->is_none();
  const AttrPath path = ParseAttrPath(attr);
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    if (by_attr) {
      ASSIGN_OR_RETURN(Value x, GetPath(interp, items[i], path));
      out += SoftStr(x);
    } else {
      RETURN_IF_ERROR(interp.Charge());
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
  AttrPath attr;
  if (by_attr) {
    if (args.positional.empty()) return InvalidArgument("selectattr/rejectattr need an attribute");
    attr = ParseAttrPath(&args.positional[next++]);
  }
  std::string test;
  if (next < args.positional.size()) test = SoftStr(args.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(args.positional.begin() + next, args.positional.end());
  test_args.keyword = args.keyword;
  List out;
  for (const Value& item : items) {
    Value x = item;
    if (by_attr) {
      ASSIGN_OR_RETURN(x, GetPath(interp, item, attr));
    } else {
      RETURN_IF_ERROR(interp.Charge());
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
    const AttrPath path = ParseAttrPath(attribute);
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value x, GetPath(interp, item, path, dflt));
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

enum class Parsed { kOk, kInvalid, kOverflow };

// Python's int(text, base) for a str (ASCII digits): surrounding whitespace, a sign, the 0x / 0o
// / 0b prefix of base 16 / 8 / 2 (base 0: whichever is there, else decimal without leading
// zeros) and single underscores between digits. kInvalid where Python raises ValueError (a base
// outside 0 and 2..36 included), kOverflow for a valid number that needs more than 64 bits.
Parsed ParsePyInt(const std::string& text, int64_t base, int64_t* out) {
  if (base != 0 && (base < 2 || base > 36)) return Parsed::kInvalid;
  const std::string s = PyStrip(text, true, true, nullptr);
  size_t i = 0;
  const bool negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) ++i;
  bool prefixed = false;
  if (s.size() - i >= 2 && s[i] == '0') {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i + 1])));
    const int64_t prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base != 0 && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      i += 2;
      prefixed = true;
    }
  }
  const bool no_leading_zeros = base == 0;
  if (base == 0) base = 10;
  const size_t first = i;
  uint64_t magnitude = 0;
  bool overflow = false, underscore = false, leading_zero = false, nonzero = false;
  size_t digits = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      // Between digits, or once right after a prefix.
      if (underscore || (digits == 0 && !(prefixed && i == first))) return Parsed::kInvalid;
      underscore = true;
      continue;
    }
    int64_t d = 99;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    if (d >= base) return Parsed::kInvalid;
    if (digits == 0 && d == 0) leading_zero = true;
    if (d != 0) nonzero = true;
    underscore = false;
    ++digits;
    if (__builtin_mul_overflow(magnitude, static_cast<uint64_t>(base), &magnitude) ||
        __builtin_add_overflow(magnitude, static_cast<uint64_t>(d), &magnitude)) {
      overflow = true;
    }
  }
  if (digits == 0 || underscore) return Parsed::kInvalid;
  if (no_leading_zeros && !prefixed && leading_zero && nonzero) return Parsed::kInvalid;
  const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  if (overflow || magnitude > limit) return Parsed::kOverflow;
  *out = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  return Parsed::kOk;
}

// Python's float(text) for a str: surrounding whitespace, a sign, inf / infinity / nan in any
// case, or decimal digits (single underscores between them) with an optional fraction and
// exponent. No hexadecimal, unlike strtod ('0x10'|float is 0.0 in jinja2).
bool ParsePyFloat(const std::string& text, double* out) {
  const std::string s = PyStrip(text, true, true, nullptr);
  size_t i = 0;
  std::string clean;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) clean.push_back(s[i++]);
  std::string word;
  for (size_t k = i; k < s.size(); ++k) {
    word.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(s[k]))));
  }
  if (word == "inf" || word == "infinity" || word == "nan") {
    const double x = word == "nan" ? std::nan("") : HUGE_VAL;
    *out = !clean.empty() && clean[0] == '-' ? -x : x;
    return true;
  }
  // Digits with single underscores between them; returns how many digits.
  auto digit_run = [&]() {
    size_t n = 0;
    while (i < s.size()) {
      if (s[i] >= '0' && s[i] <= '9') {
        clean.push_back(s[i++]);
        ++n;
      } else if (s[i] == '_' && n > 0 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9') {
        ++i;
      } else {
        break;
      }
    }
    return n;
  };
  size_t mantissa_digits = digit_run();
  if (i < s.size() && s[i] == '.') {
    clean.push_back(s[i++]);
    mantissa_digits += digit_run();
  }
  if (mantissa_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    clean.push_back(s[i++]);
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) clean.push_back(s[i++]);
    if (digit_run() == 0) return false;
  }
  if (i != s.size()) return false;
  // Only [0-9.eE+-] remain: strtod reads them as Python does (1e500 is inf, 1e-500 is 0.0).
  *out = std::strtod(clean.c_str(), nullptr);
  return true;
}

// jinja2's do_int: int(value, base) for a str, int(value) otherwise, then int(float(value)),
// then the default.
StatusOr<Value> ToInt(Interpreter&, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "int", 2, "default,base"));
  const Value* dflt = FindArg(args, 0, "default");
  const Value* base = FindArg(args, 1, "base");
  Value fallback = dflt ? *dflt : Value::Int(0);
  if (v.is_undefined()) return InvalidArgument(v.undefined_hint());
  if (v.is_int() || v.is_bool()) return Value::Int(v.as_int());
  if (v.is_float()) {
    if (std::isnan(v.as_double())) return fallback;  // ValueError, caught
    if (std::isinf(v.as_double())) {  // OverflowError from int(value), which jinja2 lets through
      return InvalidArgument("int: cannot convert float infinity to integer (OverflowError)");
    }
    return TruncateToInt(v.as_double());
  }
  if (v.is_string()) {
    // A base that is not an int is int()'s TypeError: on to the float fallback.
    if (base == nullptr || base->is_int() || base->is_bool()) {
      int64_t i = 0;
      switch (ParsePyInt(v.str(), base ? base->as_int() : 10, &i)) {
        case Parsed::kOk:
          return Value::Int(i);
        case Parsed::kOverflow:
          return InvalidArgument("int: '" + CutForMessage(PyStrip(v.str(), true, true, nullptr)) +
                                 "' does not fit in a 64-bit integer (OverflowError)");
        case Parsed::kInvalid:
          break;
      }
    }
    // "42.23"|int is 42; inf and nan fall to the default.
    double f = 0;
    if (ParsePyFloat(v.str(), &f) && std::isfinite(f)) return TruncateToInt(f);
  }
  return fallback;
}

// jinja2's do_float: float(value), the default where that raises.
StatusOr<Value> ToFloat(Interpreter&, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "float", 1, "default"));
  const Value* dflt = FindArg(args, 0, "default");
  Value fallback = dflt ? *dflt : Value::Float(0.0);
  if (v.is_undefined()) return InvalidArgument(v.undefined_hint());
  if (v.is_number()) return Value::Float(v.as_double());
  double f = 0;
  if (v.is_string() && ParsePyFloat(v.str(), &f)) return Value::Float(f);
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

// Python's round(x, ndigits) for a double, as CPython's double_round: the exact decimal
// expansion of x rounded half to even at `ndigits` places (negative: left of the point), read
// back correctly rounded. 2.675 is 2.67499999999999982236431605997495353221893310546875, so
// round(2.675, 2) is 2.67, where scaling by 10**ndigits gave 2.68 (and nan past 10**308).
double PyRoundDouble(double x, int64_t ndigits) {
  if (!std::isfinite(x) || ndigits > 323) return x;  // CPython's NDIGITS_MAX
  if (ndigits < -308) return 0.0 * x;               // NDIGITS_MIN: zero with x's sign
  // A double's expansion is exact within 1074 fraction digits; its integer part has at most 309.
  char buf[1500];
  const int len = std::snprintf(buf, sizeof(buf), "%.1074f", x);
  std::string_view text(buf, static_cast<size_t>(len));
  const bool negative = text[0] == '-';
  if (negative) text.remove_prefix(1);
  // The radix character (whatever the locale calls it) ends the integer digits.
  const size_t point = text.find_first_not_of("0123456789");
  if (point == std::string_view::npos) return x;
  std::string digits(text.substr(0, point));
  digits.append(text.substr(point + 1));
  const int64_t keep = static_cast<int64_t>(point) + ndigits;  // digits left after rounding
  if (keep >= static_cast<int64_t>(digits.size())) return x;
  if (keep < 0) return 0.0 * x;  // |x| < 10**-ndigits / 2
  const auto k = static_cast<size_t>(keep);
  bool up = digits[k] > '5';
  if (digits[k] == '5') {
    const bool beyond = digits.find_first_not_of('0', k + 1) != std::string::npos;
    up = beyond || (k > 0 && (digits[k - 1] - '0') % 2 == 1);  // an exact tie goes to even
  }
  std::string kept = digits.substr(0, k);
  if (up) {
    size_t j = kept.size();
    while (j > 0 && kept[j - 1] == '9') kept[--j] = '0';
    if (j == 0) {
      kept.insert(kept.begin(), '1');
    } else {
      ++kept[j - 1];
    }
  }
  if (kept.empty()) kept = "0";
  const std::string result =
      (negative ? "-" : "") + kept + "e" + std::to_string(-ndigits);
  return std::strtod(result.c_str(), nullptr);
}

// Python's round(i, ndigits) for an int: i itself for ndigits >= 0, else half to even at
// 10**-ndigits.
StatusOr<Value> PyRoundInt(int64_t x, int64_t ndigits) {
  if (ndigits >= 0) return Value::Int(x);
  if (ndigits < -19) return Value::Int(0);  // |x| < 10**19 / 2
  __int128 scale = 1;
  for (int64_t i = 0; i < -ndigits; ++i) scale *= 10;
  __int128 rem = x % scale;
  if (rem < 0) rem += scale;                  // Python's floor modulo
  __int128 r = static_cast<__int128>(x) - rem;  // the multiple of scale at or below x
  if (2 * rem > scale || (2 * rem == scale && (r / scale) % 2 != 0)) r += scale;
  if (r > INT64_MAX || r < INT64_MIN) {
    return InvalidArgument("round: integer overflow (OverflowError; loom's integers are 64-bit)");
  }
  return Value::Int(static_cast<int64_t>(r));
}

// jinja2's do_round: round(value, precision) for 'common', else
// math.floor/ceil(value * 10**precision) / 10**precision with Python's int and float rules.
StatusOr<Value> Round(Interpreter&, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "round", 2, "precision,method"));
  const Value* p = FindArg(args, 0, "precision");
  const Value* m = FindArg(args, 1, "method");
  std::string method = m ? SoftStr(*m) : "common";
  if (method != "common" && method != "floor" && method != "ceil") {
    return InvalidArgument("method must be common, ceil or floor");
  }
  if (p != nullptr && !p->is_int() && !p->is_bool()) {
    return InvalidArgument("round: precision must be an integer, got '" + p->TypeName() + "'");
  }
  const int64_t precision = p ? p->as_int() : 0;
  if (!v.is_number()) return InvalidArgument("round: value must be a number");
  const bool is_int = v.is_int() || v.is_bool();
  if (method == "common") {
    if (is_int) return PyRoundInt(v.as_int(), precision);
    return Value::Float(PyRoundDouble(v.as_double(), precision));
  }
  auto apply = [&](double y) -> StatusOr<double> {
    if (std::isnan(y)) return InvalidArgument("round: cannot convert float NaN to integer");
    if (std::isinf(y)) {
      return InvalidArgument("round: cannot convert float infinity to integer (OverflowError)");
    }
    // Python's math.floor/ceil give an int, which has no negative zero.
    return (method == "floor" ? std::floor(y) : std::ceil(y)) + 0.0;
  };
  if (precision < 0) {
    // 10**precision is a float here: all in doubles, as Python computes it.
    const double scale = std::pow(10.0, static_cast<double>(precision));
    ASSIGN_OR_RETURN(double r, apply(v.as_double() * scale));
    return Value::Float(r / scale);
  }
  // An int times 10**precision is exact and so is its floor: the quotient is the int.
  if (is_int) return Value::Float(static_cast<double>(v.as_int()));
  if (precision > 308) {
    return InvalidArgument("round: int too large to convert to float (OverflowError)");
  }
  const std::string exponent = std::to_string(precision);
  const double scale = std::strtod(("1e" + exponent).c_str(), nullptr);  // float(10**precision)
  ASSIGN_OR_RETURN(double r, apply(v.as_double() * scale));
  // int / int is correctly rounded in Python: read "<r>e-<precision>" back.
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.0fe-%s", r, exponent.c_str());
  return Value::Float(std::strtod(buf, nullptr));
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

// Python's a < b between sort keys; an Undefined key fails as jinja2's Undefined does.
StatusOr<bool> KeyLess(const Value& a, const Value& b) {
  if (a.is_undefined()) return InvalidArgument(a.undefined_hint());
  if (b.is_undefined()) return InvalidArgument(b.undefined_hint());
  return a.Less(b);
}

// make_attrgetter(attribute, postprocess=ignore_case unless case-sensitive) applied to `item`.
StatusOr<Value> SortKey(Interpreter& interp, const Value& item, const AttrPath& path, bool cs) {
  ASSIGN_OR_RETURN(Value k, GetPath(interp, item, path));
  if (!cs && k.is_string()) k = Value::String(LowerUtf8(k.str()));
  return k;
}

StatusOr<List> SortedList(Interpreter& interp, List items, bool reverse, bool cs,
                          const AttrPath& path) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    ASSIGN_OR_RETURN(Value k, SortKey(interp, item, path, cs));
    keyed.emplace_back(std::move(k), std::move(item));
  }
  Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    StatusOr<bool> r = reverse ? KeyLess(b.first, a.first) : KeyLess(a.first, b.first);
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
                                        cs && cs->Truthy(), ParseAttrPath(attr)));
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
  const AttrPath index = {Value::Int(by_value ? 1 : 0)};
  ASSIGN_OR_RETURN(List out, SortedList(interp, std::move(pairs), reverse && reverse->Truthy(),
                                        cs && cs->Truthy(), index));
  return Value::MakeList(std::move(out));
}

StatusOr<Value> Unique(Interpreter& interp, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "unique", 2, "case_sensitive,attribute"));
  const Value* cs = FindArg(args, 0, "case_sensitive");
  const Value* attr = FindArg(args, 1, "attribute");
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  const AttrPath path = ParseAttrPath(attr);
  List seen, out;
  for (const Value& item : items) {
    RETURN_IF_ERROR(interp.Charge(static_cast<int64_t>(seen.size())));
    ASSIGN_OR_RETURN(Value k, SortKey(interp, item, path, cs && cs->Truthy()));
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

// jinja2's do_min / do_max: min(items, key=make_attrgetter(attribute, ignore_case unless
// case_sensitive)); the first of equal items wins, as in Python.
StatusOr<Value> MinMax(Interpreter& interp, const Value& v, CallArgs& args, bool is_max) {
  RETURN_IF_ERROR(CheckArgs(args, is_max ? "max" : "min", 2, "case_sensitive,attribute"));
  const Value* cs = FindArg(args, 0, "case_sensitive");
  const Value* attr = FindArg(args, 1, "attribute");
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const AttrPath path = ParseAttrPath(attr);
  const bool case_sensitive = cs != nullptr && cs->Truthy();
  size_t best = 0;
  ASSIGN_OR_RETURN(Value best_key, SortKey(interp, items[0], path, case_sensitive));
  for (size_t i = 1; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value k, SortKey(interp, items[i], path, case_sensitive));
    // Python's min replaces on key < best, max on key > best.
    ASSIGN_OR_RETURN(bool better, is_max ? KeyLess(best_key, k) : KeyLess(k, best_key));
    if (better) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

// jinja2's do_sum: sum(map(make_attrgetter(attribute), items), start), Python's `+` throughout
// (start=[] concatenates lists).
StatusOr<Value> Sum(Interpreter& interp, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "sum", 2, "attribute,start"));
  const Value* attr = FindArg(args, 0, "attribute");
  const Value* start = FindArg(args, 1, "start");
  ASSIGN_OR_RETURN(List items, interp.Iterate(v));
  Value total = start != nullptr ? *start : Value::Int(0);
  if (total.is_string()) {
    return InvalidArgument("sum() can't sum strings [use ''.join(seq) instead]");
  }
  const AttrPath path = ParseAttrPath(attr);
  const size_t cap = interp.options().limits.max_collection_bytes;
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value x, GetPath(interp, item, path));
    if ((total.is_int() || total.is_bool()) && (x.is_int() || x.is_bool())) {
      int64_t r;
      if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) {
        return InvalidArgument("sum: integer overflow (OverflowError; loom's integers are 64-bit)");
      }
      total = Value::Int(r);
      continue;
    }
    ASSIGN_OR_RETURN(total, BinaryOp(interp, "+", total, x));
    // Each `+` of lists builds a new list.
    if (total.is_list()) RETURN_IF_ERROR(interp.ChargeBuilt(Interpreter::ValueBytes(total, cap)));
  }
  return total;
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
    {"min", [](Interpreter& i, const Value& v, CallArgs& a) { return MinMax(i, v, a, false); }},
    {"max", [](Interpreter& i, const Value& v, CallArgs& a) { return MinMax(i, v, a, true); }},
    {"sum", Sum},
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
