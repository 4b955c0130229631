// Value: construction, Python str()/repr(), equality, ordering and json.dumps of Jinja values.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {

const std::string Value::kEmpty;

const Value* Dict::Find(const std::string& key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::Find(const std::string& key) {
  for (auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const std::string& key, Value value) {
  if (Value* v = Find(key)) {
    *v = std::move(value);
  } else {
    items_.emplace_back(key, std::move(value));
  }
}

void Dict::AppendNew(std::string key, Value value) {
  items_.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = ValueKind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = ValueKind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = ValueKind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = ValueKind::kString;
  if (!s.empty()) v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::SafeString(std::string s) {
  Value v = String(std::move(s));
  v.is_safe_ = true;
  return v;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value Value::MakeList(List items) {
  Value v;
  v.kind_ = ValueKind::kList;
  for (const Value& item : items) v.depth_ = std::max(v.depth_, item.depth_);
  ++v.depth_;
  v.list_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::MakeTuple(List items) {
  Value v = MakeList(std::move(items));
  v.is_tuple_ = true;
  return v;
}
Value Value::MakeIterator(List items, std::string type_name) {
  Value v = MakeList(std::move(items));
  v.iter_type_ = std::move(type_name);
  return v;
}

Value Value::MakeDict(Dict dict) {
  Value v;
  v.kind_ = ValueKind::kDict;
  for (const auto& item : dict.items()) v.depth_ = std::max(v.depth_, item.second.depth_);
  ++v.depth_;
  v.dict_ = std::make_shared<Dict>(std::move(dict));
  return v;
}
Value Value::MakeNamespace(Dict attrs) {
  Value v = MakeDict(std::move(attrs));
  v.kind_ = ValueKind::kNamespace;
  return v;
}
Value Value::Function(std::shared_ptr<Callable> fn) {
  Value v;
  v.kind_ = ValueKind::kFunction;
  const Value* self = fn != nullptr ? fn->BoundSelf() : nullptr;
  if (self != nullptr) v.depth_ = self->depth_ + 1;
  v.fn_ = std::move(fn);
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      // Above 2^63 − 1 as a float (Python keeps a big int; wrapping made 2^64 − 1 read as −1).
      const uint64_t u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Float(static_cast<double>(u))
                                                  : Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return MakeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.Set(k, FromJson(e));
      return MakeDict(std::move(d));
    }
    case nlohmann::ordered_json::value_t::binary:
    case nlohmann::ordered_json::value_t::discarded:
      return None();
  }
  return None();
}

namespace {

StatusOr<Value> FromJsonAt(const nlohmann::ordered_json& j, int depth, int max_depth,
                           const std::string& what) {
  if (!j.is_structured()) return Value::FromJson(j);
  if (depth >= max_depth) {
    return ResourceExhausted(what + ": JSON nested deeper than " + std::to_string(max_depth) +
                             " levels");
  }
  if (j.is_array()) {
    List items;
    items.reserve(j.size());
    for (const auto& e : j) {
      ASSIGN_OR_RETURN(Value v, FromJsonAt(e, depth + 1, max_depth, what));
      items.push_back(std::move(v));
    }
    return Value::MakeList(std::move(items));
  }
  Dict d;
  for (const auto& [k, e] : j.items()) {
    ASSIGN_OR_RETURN(Value v, FromJsonAt(e, depth + 1, max_depth, what));
    d.AppendNew(k, std::move(v));  // JSON object keys are unique
  }
  return Value::MakeDict(std::move(d));
}

}  // namespace

StatusOr<Value> Value::FromJsonChecked(const nlohmann::ordered_json& j, int max_depth,
                                       const std::string& what) {
  return FromJsonAt(j, 0, max_depth, what);
}

bool Value::Truthy() const {
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return b_;
    case ValueKind::kInt:
      return i_ != 0;
    case ValueKind::kFloat:
      return f_ != 0.0;
    case ValueKind::kString:
      return !str().empty();
    case ValueKind::kList:
      return (is_iterator() && !is_view()) || !list_->empty();
    case ValueKind::kDict:
      return dict_->size() > 0;
    case ValueKind::kNamespace:
    case ValueKind::kFunction:
      return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (kind_) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kNone:
      return "NoneType";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "str";
    case ValueKind::kList:
      if (!iter_type_.empty()) return iter_type_;
      return is_tuple_ ? "tuple" : "list";
    case ValueKind::kDict:
      return "dict";
    case ValueKind::kNamespace:
      return "Namespace";
    case ValueKind::kFunction:
      return "function";
  }
  return "?";
}

std::string FloatRepr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-d.ddde+XX"
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp10 = std::stoi(sci.substr(e_pos + 1));
  std::string out = negative ? "-" : "";
  // Same rule as CPython's float_repr_style 'short': fixed notation for 1e-4 <= |x| < 1e16.
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) {
      out += "0." + std::string(-exp10 - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp10 + 1) {
      out += digits + std::string(exp10 + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp10 + 1) + "." + digits.substr(exp10 + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + exp_buf;
}

namespace {

bool IsPrintable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp >= 0x80 && cp <= 0xA0) return false;
  if (cp == 0xAD || cp == 0x1680 || cp == 0x3000 || cp == 0xFEFF) return false;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) return false;
  if (cp >= 0x205F && cp <= 0x206F) return false;
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;
  if (cp >= 0xE000 && cp <= 0xF8FF) return false;
  return true;
}

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

}  // namespace

std::string StringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : DecodeUtf8(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!IsPrintable(cp)) {
      char buf[16];
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      AppendUtf8(cp, &out);
    }
  }
  out.push_back(quote);
  return out;
}

std::string CutForMessage(const std::string& name) {
  if (name.size() <= Value::kMaxMessageQuote) return name;
  return std::string(Utf8Prefix(name, Value::kMaxMessageQuote)) + "...";
}

std::string Value::ShortRepr(size_t max_bytes) const {
  std::string out;
  ReprInto(&out, 0, max_bytes);
  if (out.size() <= max_bytes) return out;
  return std::string(Utf8Prefix(out, max_bytes)) + "...";
}

std::string Value::ToString() const {
  switch (kind_) {
    case ValueKind::kUndefined:
      return "";
    case ValueKind::kString:
      return str();
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kList:
    case ValueKind::kDict:
    case ValueKind::kNamespace:
    case ValueKind::kFunction:
      return Repr();
  }
  return "";
}

void Value::ReprInto(std::string* out, int depth, size_t max_bytes) const {
  // A namespace can hold itself; cut the recursion like Python's reprlib does.
  if (depth > 200 || out->size() > max_bytes) {
    *out += "...";
    return;
  }
  switch (kind_) {
    case ValueKind::kUndefined:
      *out += "Undefined";
      return;
    case ValueKind::kNone:
      *out += "None";
      return;
    case ValueKind::kBool:
      *out += b_ ? "True" : "False";
      return;
    case ValueKind::kInt:
      *out += std::to_string(i_);
      return;
    case ValueKind::kFloat:
      *out += FloatRepr(f_);
      return;
    case ValueKind::kString:
      // A string longer than the whole budget is cut first: its repr would be cut anyway.
      *out += str().size() > max_bytes ? StringRepr(std::string(Utf8Prefix(str(), max_bytes)))
                                       : StringRepr(str());
      return;
    case ValueKind::kList: {
      if (is_iterator() && !is_view()) {
        *out += "<" + iter_type_ + " object>";
        return;
      }
      *out += is_view() ? iter_type_ + "([" : is_tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) *out += ", ";
        (*list_)[i].ReprInto(out, depth + 1, max_bytes);
        if (out->size() > max_bytes) break;
      }
      if (is_tuple_ && list_->size() == 1) *out += ",";
      *out += is_view() ? "])" : is_tuple_ ? ")" : "]";
      return;
    }
    case ValueKind::kDict:
    case ValueKind::kNamespace: {
      if (kind_ == ValueKind::kNamespace) *out += "<Namespace ";
      *out += "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items()) {
        if (!first) *out += ", ";
        first = false;
        *out += StringRepr(k) + ": ";
        v.ReprInto(out, depth + 1, max_bytes);
        if (out->size() > max_bytes) break;
      }
      *out += "}";
      if (kind_ == ValueKind::kNamespace) *out += ">";
      return;
    }
    case ValueKind::kFunction:
      *out += fn_->Describe();
      return;
  }
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_double() == other.as_double();
    return as_int() == other.as_int();
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return str() == other.str();
    case ValueKind::kList:
      if (is_iterator() || other.is_iterator()) return list_ == other.list_;
      if (is_tuple_ != other.is_tuple_ || list_->size() != other.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*other.list_)[i])) return false;
      }
      return true;
    case ValueKind::kDict:
      if (dict_->size() != other.dict_->size()) return false;
      for (const auto& [k, v] : dict_->items()) {
        const Value* o = other.dict_->Find(k);
        if (o == nullptr || !v.Equals(*o)) return false;
      }
      return true;
    case ValueKind::kNamespace:
      return dict_ == other.dict_;
    case ValueKind::kFunction:
      return fn_ == other.fn_;
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
      return false;  // handled above
  }
  return false;
}

StatusOr<bool> Value::Less(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_double() < other.as_double();
    return as_int() < other.as_int();
  }
  if (is_string() && other.is_string())
    return str() < other.str();  // UTF-8 order = code point order
  if (is_list() && other.is_list() && is_tuple_ == other.is_tuple_) {
    const List& a = *list_;
    const List& b = *other.list_;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (a[i].Equals(b[i])) continue;
      return a[i].Less(b[i]);
    }
    return a.size() < b.size();
  }
  return InvalidArgument("'<' not supported between instances of '" + TypeName() + "' and '" +
                         other.TypeName() + "'");
}

StatusOr<std::string> Value::ToJson(int indent, const std::string& item_sep,
                                    const std::string& key_sep, bool sort_keys,
                                    size_t max_bytes) const {
  std::string out;
  // Iterative helper via lambda recursion; depth is bounded by the value's own nesting, which
  // the interpreter limits when building values.
  struct Writer {
    int indent;
    const std::string& item_sep;
    const std::string& key_sep;
    bool sort_keys;
    size_t max_bytes;
    std::string* out;
    void Newline(int level) {
      if (indent < 0) return;
      out->push_back('\n');
      out->append(static_cast<size_t>(indent) * level, ' ');
    }
    Status Write(const Value& v, int level) {
      if (level > 512) return InvalidArgument("tojson: value nested too deeply");
      if (out->size() > max_bytes) {
        return ResourceExhausted("tojson: text exceeds " + std::to_string(max_bytes) +
                                 " bytes (RenderLimits::max_output_bytes)");
      }
      switch (v.kind()) {
        case ValueKind::kNone:
          *out += "null";
          return OkStatus();
        case ValueKind::kBool:
          *out += v.as_bool() ? "true" : "false";
          return OkStatus();
        case ValueKind::kInt:
          *out += std::to_string(v.as_int());
          return OkStatus();
        case ValueKind::kFloat: {
          double f = v.as_double();
          if (std::isnan(f)) {
            *out += "NaN";
          } else if (std::isinf(f)) {
            *out += f > 0 ? "Infinity" : "-Infinity";
          } else {
            *out += FloatRepr(f);
          }
          return OkStatus();
        }
        case ValueKind::kString:
          AppendJsonString(v.str(), out);
          return OkStatus();
        case ValueKind::kList: {
          if (v.is_iterator()) {
            return InvalidArgument("Object of type " + v.TypeName() +
                                   " is not JSON serializable");
          }
          if (v.list().empty()) {
            *out += "[]";
            return OkStatus();
          }
          out->push_back('[');
          for (size_t i = 0; i < v.list().size(); ++i) {
            if (i > 0) *out += item_sep;
            Newline(level + 1);
            RETURN_IF_ERROR(Write(v.list()[i], level + 1));
          }
          Newline(level);
          out->push_back(']');
          return OkStatus();
        }
        case ValueKind::kDict: {
          if (v.dict().size() == 0) {
            *out += "{}";
            return OkStatus();
          }
          std::vector<const std::pair<std::string, Value>*> items;
          for (const auto& item : v.dict().items()) items.push_back(&item);
          if (sort_keys) {
            std::stable_sort(items.begin(), items.end(),
                             [](auto* a, auto* b) { return a->first < b->first; });
          }
          out->push_back('{');
          for (size_t i = 0; i < items.size(); ++i) {
            if (i > 0) *out += item_sep;
            Newline(level + 1);
            AppendJsonString(items[i]->first, out);
            *out += key_sep;
            RETURN_IF_ERROR(Write(items[i]->second, level + 1));
          }
          Newline(level);
          out->push_back('}');
          return OkStatus();
        }
        case ValueKind::kUndefined:
        case ValueKind::kNamespace:
        case ValueKind::kFunction:
          return InvalidArgument("Object of type " + v.TypeName() + " is not JSON serializable");
      }
      return OkStatus();
    }
  };
  Writer w{indent, item_sep, key_sep, sort_keys, max_bytes, &out};
  RETURN_IF_ERROR(w.Write(*this, 0));
  if (out.size() > max_bytes) {
    return ResourceExhausted("tojson: text exceeds " + std::to_string(max_bytes) +
                             " bytes (RenderLimits::max_output_bytes)");
  }
  return out;
}

}  // namespace loom::jinja
