// Python-semantics operators for Jinja values (int64 arithmetic with overflow checks).
#include "tokenizer/jinja/operators.h"

#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

Status Unsupported(const std::string& op, const Value& a, const Value& b) {
  return InvalidArgument("unsupported operand type(s) for " + op + ": '" + a.TypeName() +
                         "' and '" + b.TypeName() + "'");
}

Status Overflow() {
  return InvalidArgument("OverflowError: integer overflow (loom's integers are 64-bit)");
}

// seq * n: the size is checked (without wrapping) before anything is built.
StatusOr<Value> Repeat(Interpreter& interp, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  const auto count = static_cast<size_t>(n);
  if (seq.is_string()) {
    size_t bytes;
    if (__builtin_mul_overflow(seq.str().size(), count, &bytes)) bytes = SIZE_MAX;
    RETURN_IF_ERROR(interp.CheckSize(bytes));
    std::string out;
    out.reserve(bytes);
    for (size_t i = 0; i < count && !seq.str().empty(); ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  const size_t limit = interp.options().limits.max_collection_bytes;
  size_t bytes;
  if (__builtin_mul_overflow(Interpreter::ValueBytes(seq, limit), count, &bytes)) {
    bytes = SIZE_MAX;
  }
  if (!seq.list().empty()) RETURN_IF_ERROR(interp.CheckCollectionBytes(bytes));
  List out;
  for (size_t i = 0; i < count && !seq.list().empty(); ++i) {
    out.insert(out.end(), seq.list().begin(), seq.list().end());
  }
  return seq.is_tuple() ? Value::MakeTuple(std::move(out)) : Value::MakeList(std::move(out));
}

// Python's float % and // (float_rem / float_floor_div): a zero remainder takes the divisor's
// sign, and the quotient is rounded from (a - m) / b, not floor(a / b) (1 // 0.1 is 9.0).
double PyFloorMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m == 0) return std::copysign(0.0, b);
  if ((m < 0) != (b < 0)) m += b;
  return m;
}

double PyFloorDiv(double a, double b) {
  double m = std::fmod(a, b);
  double div = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floor_div = std::floor(div);
  if (div - floor_div > 0.5) floor_div += 1.0;
  return floor_div;
}

// Python's float ** (float_pow): 0.0 to a negative power and a finite result too large are
// errors; a negative number to a fractional power is a complex number in Python, which loom
// does not have (docs/ARCHITECTURE.md).
StatusOr<Value> PyFloatPow(double x, double y) {
  if (x == 0 && y < 0) {
    return InvalidArgument("ZeroDivisionError: 0.0 cannot be raised to a negative power");
  }
  if (x < 0 && std::isfinite(x) && std::isfinite(y) && y != std::floor(y)) {
    return InvalidArgument(
        "unsupported: a negative number to a fractional power (a complex number in Python)");
  }
  double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) {
    return InvalidArgument("OverflowError: (34, 'Numerical result out of range')");
  }
  return Value::Float(r);
}

}  // namespace

StatusOr<Value> BinaryOp(Interpreter& interp, const std::string& op, const Value& a,
                         const Value& b) {
  if (op == "~") {
    std::string s = a.ToString() + b.ToString();
    RETURN_IF_ERROR(interp.CheckSize(s.size()));
    return Value::String(std::move(s));
  }
  if (a.is_undefined()) return InvalidArgument(a.undefined_hint());
  if (b.is_undefined()) return InvalidArgument(b.undefined_hint());
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return Overflow();
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      RETURN_IF_ERROR(interp.CheckSize(a.str().size() + b.str().size()));
      if (a.is_safe() || b.is_safe()) {  // Markup.__add__ / __radd__ escape the plain side
        return Value::SafeString((a.is_safe() ? a.str() : HtmlEscape(a.str())) +
                                 (b.is_safe() ? b.str() : HtmlEscape(b.str())));
      }
      return Value::String(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_iterator() &&
        !b.is_iterator()) {
      const size_t limit = interp.options().limits.max_collection_bytes;
      RETURN_IF_ERROR(interp.CheckCollectionBytes(Interpreter::ValueBytes(a, limit) +
                                                  Interpreter::ValueBytes(b, limit)));
      List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return a.is_tuple() ? Value::MakeTuple(std::move(out)) : Value::MakeList(std::move(out));
    }
    if (a.is_string() || a.is_list()) {
      return InvalidArgument("can only concatenate " + a.TypeName() + " (not \"" + b.TypeName() +
                             "\") to " + a.TypeName());
    }
    return Unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return Overflow();
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.as_double() - b.as_double());
    return Unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return Overflow();
      return Value::Int(r);
    }
    if (nums) return Value::Float(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
      return Repeat(interp, a, b.as_int());
    }
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) {
      return Repeat(interp, b, a.as_int());
    }
    return InvalidArgument("can't multiply sequence by non-int of type '" + b.TypeName() + "'");
  }
  if (op == "/") {
    if (!nums) return Unsupported(op, a, b);
    if (b.as_double() == 0) return InvalidArgument("division by zero");
    return Value::Float(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (a.is_string() && op == "%") {
      return InvalidArgument("unsupported: '%' string formatting");
    }
    if (!nums) return Unsupported(op, a, b);
    if (b.as_double() == 0) {
      return InvalidArgument(op == "//" ? "integer division or modulo by zero"
                                        : "integer modulo by zero");
    }
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      // INT64_MIN / -1 traps in C++: x % -1 is 0, and only INT64_MIN // -1 does not fit.
      if (y == -1) {
        if (op == "%") return Value::Int(0);
        if (x == INT64_MIN) return Overflow();
        return Value::Int(-x);
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      return Value::Int(op == "//" ? q : m);
    }
    double x = a.as_double(), y = b.as_double();
    if (op == "%") return Value::Float(PyFloorMod(x, y));
    return Value::Float(PyFloorDiv(x, y));
  }
  if (op == "**") {
    if (!nums) return Unsupported(op, a, b);
    if (ints && b.as_int() >= 0) {
      const int64_t base = a.as_int(), e = b.as_int();
      // 0, 1 and -1 never overflow, whatever the exponent (the loop below would run e times).
      if (base == 0) return Value::Int(e == 0 ? 1 : 0);
      if (base == 1) return Value::Int(1);
      if (base == -1) return Value::Int(e % 2 == 0 ? 1 : -1);
      // |base| >= 2 overflows within 64 multiplications.
      int64_t r = 1;
      for (int64_t i = 0; i < e; ++i) {
        if (__builtin_mul_overflow(r, base, &r)) return Overflow();
      }
      return Value::Int(r);
    }
    return PyFloatPow(a.as_double(), b.as_double());
  }
  return Internal("unknown operator " + op);
}

StatusOr<Value> UnaryOp(const std::string& op, const Value& v) {
  if (v.is_undefined()) return InvalidArgument(v.undefined_hint());
  if (v.is_int() || v.is_bool()) {
    if (op == "+") return Value::Int(v.as_int());
    if (v.as_int() == INT64_MIN) return Overflow();
    return Value::Int(-v.as_int());
  }
  if (v.is_float()) return Value::Float(op == "-" ? -v.as_double() : v.as_double());
  return InvalidArgument("bad operand type for unary " + op + ": '" + v.TypeName() + "'");
}

StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kUndefined:
      return false;
    case ValueKind::kString:
      if (!item.is_string()) {
        return InvalidArgument("'in <string>' requires string as left operand, not " +
                               item.TypeName());
      }
      return FindSubstring(container.str(), item.str()) != std::string::npos;
    case ValueKind::kList:
      for (const Value& v : container.list()) {
        if (v.Equals(item)) return true;
      }
      return false;
    case ValueKind::kDict:
      return item.is_string() && container.dict().Find(item.str()) != nullptr;
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kNamespace:
    case ValueKind::kFunction:
      break;
  }
  return InvalidArgument("argument of type '" + container.TypeName() + "' is not iterable");
}

StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a.Equals(b);
  if (op == "!=") return !a.Equals(b);
  if (op == "in") return Contains(b, a);
  if (op == "not in") {
    ASSIGN_OR_RETURN(bool r, Contains(b, a));
    return !r;
  }
  if (a.is_undefined()) return InvalidArgument(a.undefined_hint());
  if (b.is_undefined()) return InvalidArgument(b.undefined_hint());
  if (op == "<") return a.Less(b);
  if (op == ">") return b.Less(a);
  if (op == "<=") {
    ASSIGN_OR_RETURN(bool r, b.Less(a));
    return !r;
  }
  if (op == ">=") {
    ASSIGN_OR_RETURN(bool r, a.Less(b));
    return !r;
  }
  return Internal("unknown comparison " + op);
}

StatusOr<Value> Slice(const Value& obj, const Value& start_v, const Value& stop_v,
                      const Value& step_v) {
  // jinja2 compiles a slice to Python's obj[a:b:c], not to environment.getitem: slicing what is
  // not a str / list / tuple is a TypeError, not an undefined value.
  if (obj.is_dict()) return InvalidArgument("unhashable type: 'slice'");
  if ((!obj.is_list() && !obj.is_string()) || obj.is_iterator()) {
    std::string what = obj.TypeName();  // appended, not "'" + ...: g++ 12's -Wrestrict misfires
    return InvalidArgument("'" + what.append("' object is not subscriptable"));
  }
  for (const Value* v : {&start_v, &stop_v, &step_v}) {
    if (!v->is_none() && !v->is_int() && !v->is_bool()) {
      return InvalidArgument("slice indices must be integers or None");
    }
  }
  std::u32string cps;
  if (obj.is_string()) cps = DecodeUtf8(obj.str());
  const int64_t n = obj.is_string() ? static_cast<int64_t>(cps.size())
                                    : static_cast<int64_t>(obj.list().size());
  int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (step == 0) return InvalidArgument("slice step cannot be zero");
  // Same clamping as CPython's PySlice_AdjustIndices.
  auto adjust = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = adjust(start_v, step < 0 ? n - 1 : 0);
  int64_t stop = adjust(stop_v, step < 0 ? -1 : n);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    idx.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // past either end: the slice is complete
  }
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out.push_back(cps[i]);
    return Value::String(EncodeUtf8(out));
  }
  List out;
  for (int64_t i : idx) out.push_back(obj.list()[i]);
  return obj.is_tuple() ? Value::MakeTuple(std::move(out)) : Value::MakeList(std::move(out));
}

}  // namespace loom::jinja
