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
  size_t bytes = 0;
  for (const Value& item : items) {
    // The copy of the other arguments is work too.
    RETURN_IF_ERROR(interp.Charge(static_cast<int64_t>(args.positional.size())));
    CallArgs a;
    a.positional.assign(args.positional.begin() + 1, args.positional.end());
    a.keyword = args.keyword;
    ASSIGN_OR_RETURN(Value x, interp.ApplyFilter(filter, item, a));
    // The list's size as it grows (the whole list was checked only once built: 100,000 results
    // of 16 MB each first).
    const size_t cap = interp.options().limits.max_collection_bytes;
    bytes += kValueBytes + Interpreter::ValueBytes(x, cap);
    RETURN_IF_ERROR(interp.CheckCollectionBytes(bytes));
    RETURN_IF_ERROR(interp.ChargeBuilt(kValueBytes + (x.is_string() ? x.str().size() : 0)));
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
  // Appended piece by piece (GCC 12 warned -Wrestrict on the temporaries of "\n" + ind).
  if (blank && blank->Truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out.append(1, '\n').append(ind);
      out.append(lines[i]);
    }
  } else {
    if (!lines.empty()) out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out.append(1, '\n');
      if (!lines[i].empty()) out.append(ind).append(lines[i]);
    }
  }
  if (first && first->Truthy()) out.insert(0, ind);
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
    // The last batch is padded to linecount: bound it before filling, the fill value counted in
    // every slot as a list of them is (a 16 MB fill a million times passed a slots-only check).
    const size_t each = kValueBytes + Interpreter::ValueBytes(*fill, SIZE_MAX / 2);
    const size_t bytes = static_cast<uint64_t>(count->as_int()) > SIZE_MAX / each
                             ? SIZE_MAX
                             : static_cast<size_t>(count->as_int()) * each;
    RETURN_IF_ERROR(interp.CheckCollectionBytes(bytes));
    RETURN_IF_ERROR(interp.ChargeBuilt(static_cast<size_t>(count->as_int()) * kValueBytes));
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
    {"int", IntFilter},
    {"float", FloatFilter},
    {"abs", AbsFilter},
    {"round", RoundFilter},
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
