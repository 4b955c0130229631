// Jinja's number filters — int, float, abs, round — with Python's parsing and rounding rules.
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

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

}  // namespace

// jinja2's do_int: int(value, base) for a str, int(value) otherwise, then int(float(value)),
// then the default.
StatusOr<Value> IntFilter(Interpreter&, const Value& v, CallArgs& args) {
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
StatusOr<Value> FloatFilter(Interpreter&, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "float", 1, "default"));
  const Value* dflt = FindArg(args, 0, "default");
  Value fallback = dflt ? *dflt : Value::Float(0.0);
  if (v.is_undefined()) return InvalidArgument(v.undefined_hint());
  if (v.is_number()) return Value::Float(v.as_double());
  double f = 0;
  if (v.is_string() && ParsePyFloat(v.str(), &f)) return Value::Float(f);
  return fallback;
}

StatusOr<Value> AbsFilter(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) {
      return InvalidArgument("abs: integer overflow (OverflowError; loom's integers are 64-bit)");
    }
    return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_float()) return Value::Float(std::fabs(v.as_double()));
  return InvalidArgument("bad operand type for abs(): '" + v.TypeName() + "'");
}

namespace {

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
  if (kept.empty()) kept.push_back('0');
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

}  // namespace

// jinja2's do_round: round(value, precision) for 'common', else
// math.floor/ceil(value * 10**precision) / 10**precision with Python's int and float rules.
StatusOr<Value> RoundFilter(Interpreter&, const Value& v, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "round", 2, "precision,method"));
  const Value* p = FindArg(args, 0, "precision");
  const Value* m = FindArg(args, 1, "method");
  std::string method = m ? PyStr(*m) : "common";
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
    // 10**-324 and below is 0.0: Python divides by it and raises (0 / 0 here was NaN).
    if (scale == 0.0) return InvalidArgument("round: float division by zero (ZeroDivisionError)");
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

}  // namespace loom::jinja
