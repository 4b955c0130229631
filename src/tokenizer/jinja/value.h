// Jinja value: the dynamic type the chat-template interpreter computes with, with Python semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace loom::jinja {

class Value;
class Interpreter;

enum class ValueKind {
  kUndefined,  // a missing variable / key / attribute (jinja2's default `Undefined`)
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,       // Python list, or tuple when `is_tuple()`
  kDict,       // insertion-ordered, string keys (what JSON and templates use)
  kNamespace,  // jinja2 `namespace(...)`: the one mutable object a template can change
  kFunction,   // macros, globals, bound methods, loop.cycle
};

// Positional and keyword arguments of a call, already evaluated.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Something a template can call. Not thread-safe; lives as long as the values that hold it.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual StatusOr<Value> Call(Interpreter& interp, CallArgs& args) = 0;
  // What repr() shows, e.g. "<function raise_exception>".
  virtual std::string Describe() const = 0;
  // The value a bound method keeps alive (`{'a': x}.get` holds its dict), or nullptr. It counts
  // toward the function value's depth and bytes: a chain of methods bound to dicts holding the
  // previous method nests like a list would, and freeing a deep one recursed off the stack.
  virtual const Value* BoundSelf() const { return nullptr; }
};

using List = std::vector<Value>;

// Insertion-ordered string-keyed map (Python dict order is insertion order, and tojson keeps it).
class Dict {
 public:
  const Value* Find(const std::string& key) const;
  Value* Find(const std::string& key);
  void Set(const std::string& key, Value value);
  // Appends a key the caller knows is not present (O(1), unlike Set).
  void AppendNew(std::string key, Value value);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const;  // defined below Value (clang instantiates it eagerly)

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

// A value. Copies share lists, dicts and namespaces (like Python references) and strings
// (immutable, as Python's: a copy of a 16 MB string held by a loop variable, a namespace or a
// filter's result list costs a reference, not 16 MB).
// Not thread-safe.
class Value {
 public:
  Value() = default;  // undefined
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  // markupsafe.Markup (from `|safe` / `|escape`): `+` with a plain string HTML-escapes the other
  // side, as jinja2 does.
  static Value SafeString(std::string s);
  static Value MakeList(List items);
  static Value MakeTuple(List items);
  static Value MakeDict(Dict dict);
  // A Python iterator or view over `items` that jinja2 filters return lazily: `type_name` is
  // "generator" (map, select, ...), "list_reverseiterator" or "dict_items"/"dict_keys"/
  // "dict_values". It iterates like a list but has no len() (except views), cannot be indexed
  // and is not JSON serializable; a generator is always truthy.
  static Value MakeIterator(List items, std::string type_name);
  static Value MakeNamespace(Dict attrs);
  // Depth 0, or 1 + the depth of the value a bound method holds (Callable::BoundSelf).
  static Value Function(std::shared_ptr<Callable> fn);
  // JSON → value (objects keep their key order). For trusted JSON; untrusted input goes through
  // FromJsonChecked.
  static Value FromJson(const nlohmann::ordered_json& j);
  // Same, for untrusted JSON: kResourceExhausted naming `what` when arrays / objects nest deeper
  // than `max_depth` (the conversion recurses once per level). Linear in the size of `j`.
  static StatusOr<Value> FromJsonChecked(const nlohmann::ordered_json& j, int max_depth,
                                         const std::string& what);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_safe() const { return kind_ == ValueKind::kString && is_safe_; }
  bool is_list() const { return kind_ == ValueKind::kList; }
  bool is_tuple() const { return kind_ == ValueKind::kList && is_tuple_; }
  // A lazy iterator or dict view (see MakeIterator); a plain list/tuple otherwise.
  bool is_iterator() const { return kind_ == ValueKind::kList && !iter_type_.empty(); }
  // A view with a length (dict_items/keys/values) rather than a one-shot iterator.
  bool is_view() const { return is_iterator() && iter_type_.rfind("dict_", 0) == 0; }
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_namespace() const { return kind_ == ValueKind::kNamespace; }
  bool is_function() const { return kind_ == ValueKind::kFunction; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return is_bool() ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return is_float() ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return s_ ? *s_ : kEmpty; }
  // Undefined: why it is undefined ("'foo' is undefined"); used in error messages.
  const std::string& undefined_hint() const { return str(); }
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }
  Dict& mutable_dict() const { return *dict_; }  // namespaces only
  const std::shared_ptr<Callable>& function() const { return fn_; }

  // Container nesting: 0 for scalars, 1 + the deepest element for lists and dicts, 1 + the
  // bound value's depth for a bound method.
  int depth() const { return depth_; }

  // Python truthiness.
  bool Truthy() const;
  // Python `type(x).__name__`, for error messages ("str", "int", "dict", "Undefined").
  std::string TypeName() const;
  // Python str(x): what `{{ x }}` prints. Undefined prints as "".
  std::string ToString() const;
  // Python repr(x): how x prints inside a list or dict. Cut with "..." past 200 levels (a
  // namespace can hold itself) and past kMaxReprBytes (two self-references double the text per
  // level: 2^200 calls otherwise); either is far above what a render may output.
  std::string Repr() const {
    std::string out;
    ReprInto(&out, 0, kMaxReprBytes);
    return out;
  }
  // Just above RenderLimits' default max_output_bytes (16 MiB): a longer text could not be
  // output anyway, and one step that prints a self-referencing namespace (a `lower` test on it
  // inside `select` over 100,000 items) built 64 MiB and decoded it, ~0.5 s a step.
  static constexpr size_t kMaxReprBytes = (size_t{16} << 20) + 64;
  // repr(x) cut to `max_bytes` (on a character boundary) followed by "..." when longer, built
  // without writing more than about that much: what an error or Undefined message quotes of a
  // key a template computed (a dict key may be a 16 MB string).
  std::string ShortRepr(size_t max_bytes = kMaxMessageQuote) const;
  static constexpr size_t kMaxMessageQuote = 200;
  // Python `==` (1 == 1.0 == True; containers element-wise; undefined == undefined).
  bool Equals(const Value& other) const;
  // Python `<`; an error for unorderable types, named like Python's TypeError.
  StatusOr<bool> Less(const Value& other) const;
  // json.dumps(x, ensure_ascii=False, indent, separators, sort_keys) as transformers' tojson does.
  // indent < 0 means None.
  // kResourceExhausted once the text passes `max_bytes` (checked as it is written: an indent
  // repeats per nesting level on every line, so the text can be far larger than the value).
  StatusOr<std::string> ToJson(int indent, const std::string& item_sep, const std::string& key_sep,
                               bool sort_keys, size_t max_bytes = SIZE_MAX) const;

 private:
  void ReprInto(std::string* out, int depth, size_t max_bytes) const;

  ValueKind kind_ = ValueKind::kUndefined;
  int depth_ = 0;
  bool b_ = false;
  bool is_tuple_ = false;
  bool is_safe_ = false;  // Markup string
  std::string iter_type_;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // strings and Undefined hints; null = ""
  static const std::string kEmpty;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

inline size_t Dict::size() const { return items_.size(); }

// markupsafe.escape: & < > " ' as HTML entities.
std::string HtmlEscape(const std::string& s);
// Python float repr ("1.0", "0.1", "1e-05", "1e+20", "inf", "nan").
std::string FloatRepr(double f);
// Python repr of a string ('abc', "it's", with \n \t \\ escapes).
std::string StringRepr(const std::string& s);
// `name` cut to Value::kMaxMessageQuote bytes (on a character boundary) followed by "..." when
// longer: what an error or Undefined message quotes of an attribute name a template computed.
// Copies of an Undefined share its message.
std::string CutForMessage(const std::string& name);

}  // namespace loom::jinja
