// Python methods a template may call on values: str.strip/split/..., dict.items/get/..., list.index.
#include <algorithm>
#include <charconv>
#include <cstdint>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

using MethodFn = StatusOr<Value> (*)(Interpreter& interp, const Value& self, CallArgs& args);

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name, MethodFn fn)
      : self_(std::move(self)), name_(std::move(name)), fn_(fn) {}
  StatusOr<Value> Call(Interpreter& interp, CallArgs& args) override {
    return fn_(interp, self_, args);
  }
  std::string Describe() const override {
    return "<built-in method " + name_ + " of " + self_.TypeName() + " object>";
  }
  const Value* BoundSelf() const override { return &self_; }

 private:
  Value self_;
  std::string name_;
  MethodFn fn_;
};

StatusOr<std::string> StrArg(const CallArgs& args, size_t i, const char* name, const char* fn) {
  const Value* v = FindArg(args, i, name);
  if (v == nullptr || !v->is_string()) {
    return InvalidArgument(std::string(fn) + "() argument '" + name + "' must be str");
  }
  return v->str();
}

StatusOr<Value> Strip(const Value& self, CallArgs& args, bool left, bool right, const char* fn) {
  RETURN_IF_ERROR(CheckArgs(args, fn, 1, "chars"));
  const Value* chars = FindArg(args, 0, "chars");
  if (chars != nullptr && !chars->is_none()) {
    if (!chars->is_string()) return InvalidArgument(std::string(fn) + " arg must be None or str");
    return Value::String(PyStrip(self.str(), left, right, &chars->str()));
  }
  return Value::String(PyStrip(self.str(), left, right, nullptr));
}

StatusOr<Value> StartsEnds(const Value& self, CallArgs& args, bool ends) {
  const Value* p = FindArg(args, 0, "prefix");
  if (p == nullptr) return InvalidArgument("startswith/endswith needs an argument");
  List options = p->is_list() ? p->list() : List{*p};
  const std::string& s = self.str();
  for (const Value& o : options) {
    if (!o.is_string()) return InvalidArgument("startswith/endswith argument must be str or tuple");
    const std::string& x = o.str();
    if (x.size() > s.size()) continue;
    if (ends ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}

// Python str.split / rsplit.
StatusOr<Value> Split(Interpreter& interp, const Value& self, CallArgs& args, bool from_right) {
  RETURN_IF_ERROR(CheckArgs(args, "split", 2, "sep,maxsplit"));
  const Value* sep = FindArg(args, 0, "sep");
  const Value* maxv = FindArg(args, 1, "maxsplit");
  int64_t maxsplit = maxv != nullptr && (maxv->is_int() || maxv->is_bool()) ? maxv->as_int() : -1;
  List out;
  if (sep == nullptr || sep->is_none()) {
    std::u32string cps = DecodeUtf8(self.str());
    std::vector<std::u32string> words;
    if (!from_right) {
      size_t i = 0;
      while (i < cps.size()) {
        while (i < cps.size() && IsPySpace(cps[i])) ++i;
        if (i == cps.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t e = cps.size();
          while (e > i && IsPySpace(cps[e - 1])) --e;
          words.push_back(cps.substr(i, e - i));
          break;
        }
        size_t b = i;
        while (i < cps.size() && !IsPySpace(cps[i])) ++i;
        words.push_back(cps.substr(b, i - b));
        RETURN_IF_ERROR(interp.CheckCollectionBytes(words.size() * kValueBytes));
      }
    } else {
      size_t i = cps.size();
      while (i > 0) {
        while (i > 0 && IsPySpace(cps[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(words.size()) == maxsplit) {
          size_t b = 0;
          while (b < i && IsPySpace(cps[b])) ++b;
          words.push_back(cps.substr(b, i - b));
          break;
        }
        size_t e = i;
        while (i > 0 && !IsPySpace(cps[i - 1])) --i;
        words.push_back(cps.substr(i, e - i));
        RETURN_IF_ERROR(interp.CheckCollectionBytes(words.size() * kValueBytes));
      }
      std::reverse(words.begin(), words.end());
    }
    for (const auto& w : words) out.push_back(Value::String(EncodeUtf8(w)));
    return Value::MakeList(std::move(out));
  }
  if (!sep->is_string()) return InvalidArgument("must be str or None, not " + sep->TypeName());
  const std::string& s = self.str();
  const std::string& d = sep->str();
  if (d.empty()) return InvalidArgument("empty separator");
  // rsplit is split of the reversed text by the reversed separator (rfind from the end finds what
  // find from the start of the reversed text finds), so both run in linear time.
  const std::string text = from_right ? std::string(s.rbegin(), s.rend()) : std::string();
  const std::string rsep = from_right ? std::string(d.rbegin(), d.rend()) : std::string();
  const std::string& hay = from_right ? text : s;
  const std::string& needle = from_right ? rsep : d;
  std::vector<std::string> parts;
  size_t b = 0;
  while (true) {
    size_t p = FindSubstring(hay, needle, b);
    if (p == std::string::npos ||
        (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.push_back(hay.substr(b));
      break;
    }
    parts.push_back(hay.substr(b, p - b));
    b = p + needle.size();
    // 16M empty parts of ','*16000000 took 1.7 GB before the list's size was checked.
    RETURN_IF_ERROR(interp.CheckCollectionBytes(parts.size() * kValueBytes));
  }
  if (from_right) {
    for (auto& part : parts) std::reverse(part.begin(), part.end());
    std::reverse(parts.begin(), parts.end());
  }
  RETURN_IF_ERROR(interp.Charge(static_cast<int64_t>(parts.size())));
  for (auto& p : parts) out.push_back(Value::String(std::move(p)));
  return Value::MakeList(std::move(out));
}

// Python's str.replace, refused (kResourceExhausted via CheckSize) as soon as the result would
// pass the string limit, before it is built.
StatusOr<std::string> PyReplace(Interpreter& interp, const std::string& s, const std::string& old,
                                const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` between every character (and at both ends).
    std::u32string cps = DecodeUtf8(s);
    const size_t inserts =
        count < 0 ? cps.size() + 1 : std::min<size_t>(cps.size() + 1, static_cast<uint64_t>(count));
    size_t bytes;
    if (__builtin_mul_overflow(inserts, repl.size(), &bytes) ||
        __builtin_add_overflow(bytes, s.size(), &bytes)) {
      bytes = SIZE_MAX;
    }
    RETURN_IF_ERROR(interp.CheckSize(bytes));
    int64_t n = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t b = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t p = FindSubstring(s, old, b);
    if (p == std::string::npos) break;
    out.append(s, b, p - b);
    out += repl;
    RETURN_IF_ERROR(interp.CheckSize(out.size()));
    b = p + old.size();
    ++n;
  }
  out.append(s, b, std::string::npos);
  RETURN_IF_ERROR(interp.CheckSize(out.size()));
  return out;
}

std::string PyTitle(const std::string& s) {
  std::u32string cps = DecodeUtf8(s);
  bool prev_cased = false;
  for (char32_t& cp : cps) {
    if (IsAlpha(cp)) {
      cp = prev_cased ? ToLower(cp) : ToUpper(cp);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return EncodeUtf8(cps);
}

std::string PyCapitalize(const std::string& s) {
  std::u32string cps = DecodeUtf8(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? ToUpper(cps[i]) : ToLower(cps[i]);
  return EncodeUtf8(cps);
}

// str.format with {} / {0} / {name} fields (no format specs).
StatusOr<Value> Format(Interpreter& interp, const Value& self, CallArgs& args) {
  const std::string& f = self.str();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '{') {
      size_t e = f.find('}', i);
      if (e == std::string::npos) return InvalidArgument("Single '{' encountered in format string");
      std::string field = f.substr(i + 1, e - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        return InvalidArgument("unsupported: str.format field '{" + CutForMessage(field) + "}'");
      }
      const Value* v = nullptr;
      if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
        size_t idx = auto_index;
        if (field.empty()) {
          ++auto_index;
        } else if (std::from_chars(field.data(), field.data() + field.size(), idx).ec !=
                   std::errc()) {
          idx = SIZE_MAX;  // more digits than a size_t: out of range like any other
        }
        if (idx >= args.positional.size()) {
          return InvalidArgument("Replacement index " +
                                 (field.empty() ? std::to_string(idx) : CutForMessage(field)) +
                                 " out of range for positional args tuple");
        }
        v = &args.positional[idx];
      } else {
        for (const auto& [k, kv] : args.keyword) {
          if (k == field) v = &kv;
        }
        if (v == nullptr) return InvalidArgument("'" + CutForMessage(field) + "'");
      }
      const std::string piece = PyStr(*v);
      RETURN_IF_ERROR(interp.CheckSize(out.size() + piece.size()));
      out += piece;
      i = e;
    } else {
      out.push_back(c);
    }
  }
  RETURN_IF_ERROR(interp.CheckSize(out.size()));
  return Value::String(std::move(out));
}

StatusOr<Value> Unsafe(const Value& self, const char* name) {
  return InvalidArgument(std::string("access to attribute '") + name + "' of '" + self.TypeName() +
                         "' object is unsafe.");
}

struct MethodEntry {
  ValueKind kind;
  const char* name;
  MethodFn fn;
};

#define M(kind, name, body)                                                              \
  {ValueKind::kind, name,                                                                \
   [](Interpreter & interp, const Value& self, CallArgs& args) -> StatusOr<Value> body}

const MethodEntry kMethods[] = {
    M(kString, "strip", { return Strip(self, args, true, true, "strip"); }),
    M(kString, "lstrip", { return Strip(self, args, true, false, "lstrip"); }),
    M(kString, "rstrip", { return Strip(self, args, false, true, "rstrip"); }),
    M(kString, "startswith", { return StartsEnds(self, args, false); }),
    M(kString, "endswith", { return StartsEnds(self, args, true); }),
    M(kString, "split", { return Split(interp, self, args, false); }),
    M(kString, "rsplit", { return Split(interp, self, args, true); }),
    M(kString, "upper", { return Value::String(UpperUtf8(self.str())); }),
    M(kString, "lower", { return Value::String(LowerUtf8(self.str())); }),
    M(kString, "title", { return Value::String(PyTitle(self.str())); }),
    M(kString, "capitalize", { return Value::String(PyCapitalize(self.str())); }),
    M(kString, "format", { return Format(interp, self, args); }),
    M(kString, "replace", {
      ASSIGN_OR_RETURN(std::string old, StrArg(args, 0, "old", "replace"));
      ASSIGN_OR_RETURN(std::string repl, StrArg(args, 1, "new", "replace"));
      const Value* count = FindArg(args, 2, "count");
      // Python's TypeError: a count that is not an int (a str read as 0 replaced nothing).
      if (count != nullptr && !count->is_int() && !count->is_bool()) {
        return InvalidArgument("replace: '" + count->TypeName() +
                               "' object cannot be interpreted as an integer");
      }
      ASSIGN_OR_RETURN(std::string r,
                       PyReplace(interp, self.str(), old, repl, count ? count->as_int() : -1));
      return Value::String(std::move(r));
    }),
    M(kString, "find", {
      ASSIGN_OR_RETURN(std::string sub, StrArg(args, 0, "sub", "find"));
      size_t p = FindSubstring(self.str(), sub);
      if (p == std::string::npos) return Value::Int(-1);
      return Value::Int(static_cast<int64_t>(DecodeUtf8(self.str().substr(0, p)).size()));
    }),
    M(kString, "count", {
      ASSIGN_OR_RETURN(std::string sub, StrArg(args, 0, "sub", "count"));
      if (sub.empty()) return Value::Int(static_cast<int64_t>(DecodeUtf8(self.str()).size()) + 1);
      int64_t n = 0;
      for (size_t p = FindSubstring(self.str(), sub); p != std::string::npos;
           p = FindSubstring(self.str(), sub, p + sub.size())) {
        ++n;
      }
      return Value::Int(n);
    }),
    M(kString, "join", {
      const Value* items = FindArg(args, 0, "iterable");
      if (items == nullptr) return InvalidArgument("join() takes exactly one argument");
      ASSIGN_OR_RETURN(List list, interp.Iterate(*items));
      std::string out;
      for (size_t i = 0; i < list.size(); ++i) {
        if (!list[i].is_string()) {
          return InvalidArgument("sequence item " + std::to_string(i) +
                                 ": expected str instance, " + list[i].TypeName() + " found");
        }
        RETURN_IF_ERROR(interp.CheckSize(out.size() + self.str().size() + list[i].str().size()));
        if (i > 0) out += self.str();
        out += list[i].str();
      }
      return Value::String(std::move(out));
    }),
    M(kString, "isdigit", {
      std::u32string c = DecodeUtf8(self.str());
      return Value::Bool(!c.empty() && std::all_of(c.begin(), c.end(), [](char32_t x) {
        return x >= '0' && x <= '9';
      }));
    }),
    M(kString, "isalpha", {
      std::u32string c = DecodeUtf8(self.str());
      return Value::Bool(!c.empty() && std::all_of(c.begin(), c.end(), IsAlpha));
    }),
    M(kString, "isspace", {
      std::u32string c = DecodeUtf8(self.str());
      return Value::Bool(!c.empty() && std::all_of(c.begin(), c.end(), IsPySpace));
    }),
    M(kDict, "items", {
      List out;
      for (const auto& [k, v] : self.dict().items()) {
        out.push_back(Value::MakeTuple({Value::String(k), v}));
      }
      return Value::MakeIterator(std::move(out), "dict_items");
    }),
    M(kDict, "keys", {
      List out;
      for (const auto& [k, v] : self.dict().items()) out.push_back(Value::String(k));
      return Value::MakeIterator(std::move(out), "dict_keys");
    }),
    M(kDict, "values", {
      List out;
      for (const auto& [k, v] : self.dict().items()) out.push_back(v);
      return Value::MakeIterator(std::move(out), "dict_values");
    }),
    M(kDict, "get", {
      const Value* key = FindArg(args, 0, "key");
      if (key == nullptr) return InvalidArgument("get expected at least 1 argument, got 0");
      const Value* dflt = FindArg(args, 1, "default");
      if (key->is_string()) {
        if (const Value* v = self.dict().Find(key->str())) return *v;
      }
      return dflt ? *dflt : Value::None();
    }),
    M(kDict, "copy", { return Value::MakeDict(self.dict()); }),
    M(kList, "index", {
      const Value* x = FindArg(args, 0, "value");
      if (x == nullptr) return InvalidArgument("index expected at least 1 argument, got 0");
      for (size_t i = 0; i < self.list().size(); ++i) {
        if (self.list()[i].Equals(*x)) return Value::Int(static_cast<int64_t>(i));
      }
      return InvalidArgument(x->ShortRepr() + " is not in list");
    }),
    M(kList, "count", {
      const Value* x = FindArg(args, 0, "value");
      if (x == nullptr) return InvalidArgument("count() takes exactly one argument (0 given)");
      int64_t n = 0;
      for (const Value& v : self.list()) n += v.Equals(*x) ? 1 : 0;
      return Value::Int(n);
    }),
};

#undef M

// Methods that would mutate a list or dict: jinja2's ImmutableSandboxedEnvironment refuses them.
const char* const kUnsafeList[] = {"append", "extend", "insert", "pop", "remove",
                                   "clear",  "sort",   "reverse"};
const char* const kUnsafeDict[] = {"pop", "popitem", "setdefault", "update", "clear"};

class UnsafeMethod : public Callable {
 public:
  UnsafeMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  StatusOr<Value> Call(Interpreter&, CallArgs&) override { return Unsafe(self_, name_.c_str()); }
  std::string Describe() const override { return ""; }
  const Value* BoundSelf() const override { return &self_; }

 private:
  Value self_;
  std::string name_;
};

}  // namespace

Value FindMethod(const Value& obj, const std::string& name) {
  ValueKind kind = obj.kind();
  for (const MethodEntry& m : kMethods) {
    if (m.kind == kind && name == m.name) {
      return Value::Function(std::make_shared<BoundMethod>(obj, name, m.fn));
    }
  }
  if (kind == ValueKind::kList) {
    for (const char* u : kUnsafeList) {
      if (name == u) return Value::Function(std::make_shared<UnsafeMethod>(obj, name));
    }
  }
  if (kind == ValueKind::kDict) {
    for (const char* u : kUnsafeDict) {
      if (name == u) return Value::Function(std::make_shared<UnsafeMethod>(obj, name));
    }
  }
  return Value::Undefined(std::string("'") + obj.TypeName() + " object' has no attribute '" +
                          CutForMessage(name) + "'");
}

}  // namespace loom::jinja
