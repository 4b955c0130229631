// Jinja globals as transformers defines them (range, namespace, dict, raise_exception,
// strftime_now) and the argument helpers shared by the built-ins.
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

// Same bound as jinja2's sandbox (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

using GlobalFn = StatusOr<Value> (*)(Interpreter& interp, CallArgs& args);

class GlobalCallable : public Callable {
 public:
  GlobalCallable(const char* name, GlobalFn fn) : name_(name), fn_(fn) {}
  StatusOr<Value> Call(Interpreter& interp, CallArgs& args) override { return fn_(interp, args); }
  std::string Describe() const override { return "<function " + name_ + ">"; }

 private:
  std::string name_;
  GlobalFn fn_;
};

StatusOr<Value> Range(Interpreter& interp, CallArgs& args) {
  RETURN_IF_ERROR(CheckArgs(args, "range", 3, ""));
  if (args.positional.empty()) return InvalidArgument("range expected at least 1 argument, got 0");
  for (const Value& v : args.positional) {
    if (!v.is_int() && !v.is_bool()) {
      return InvalidArgument(std::string("'") + v.TypeName() +
                             "' object cannot be interpreted as an integer");
    }
  }
  int64_t start = 0, stop, step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].as_int();
  } else {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (args.positional.size() == 3) step = args.positional[2].as_int();
  }
  if (step == 0) return InvalidArgument("range() arg 3 must not be zero");
  // Count without overflow: the sandbox bound keeps the loop small.
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      return InvalidArgument(
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    out.push_back(Value::Int(i));
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  RETURN_IF_ERROR(interp.Charge(static_cast<int64_t>(out.size())));
  return Value::MakeList(std::move(out));
}

StatusOr<Dict> KeywordDict(const char* fn, CallArgs& args) {
  Dict d;
  if (args.positional.size() > 1) {
    return InvalidArgument(std::string(fn) + " expected at most 1 positional argument");
  }
  if (args.positional.size() == 1) {
    if (!args.positional[0].is_dict()) {
      return InvalidArgument(std::string(fn) + "() argument must be a mapping");
    }
    d = args.positional[0].dict();
  }
  for (auto& [k, v] : args.keyword) d.Set(k, v);
  return d;
}

StatusOr<Value> Namespace(Interpreter& interp, CallArgs& args) {
  ASSIGN_OR_RETURN(Dict d, KeywordDict("namespace", args));
  for (const auto& [k, v] : d.items()) {
    if (!k.empty() && k[0] == '_') {
      return InvalidArgument(
          "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
          k + "'. Please rename the attribute.");
    }
  }
  // Kept until the render ends (tracked to break cycles): counted as built.
  RETURN_IF_ERROR(interp.ChargeBuilt(kValueBytes * (1 + d.size())));
  Value ns = Value::MakeNamespace(std::move(d));
  interp.TrackMutable(ns);  // `ns.self = ns` makes a cycle; the render breaks it at its end
  return ns;
}

StatusOr<Value> DictFn(Interpreter& interp, CallArgs& args) {
  ASSIGN_OR_RETURN(Dict d, KeywordDict("dict", args));
  return Value::MakeDict(std::move(d));
}

StatusOr<Value> RaiseException(Interpreter& interp, CallArgs& args) {
  const Value* msg = FindArg(args, 0, "message");
  std::string text = msg == nullptr ? "" : PyStr(*msg);
  // The client reads it in a 400: real templates raise a sentence; a 16 MB one is cut.
  constexpr size_t kMaxRaisedBytes = 4096;
  if (text.size() > kMaxRaisedBytes) text = std::string(Utf8Prefix(text, kMaxRaisedBytes)) + "...";
  return Status(kRaisedCode, std::move(text));
}

StatusOr<Value> StrftimeNow(Interpreter& interp, CallArgs& args) {
  const Value* fmt = FindArg(args, 0, "format");
  if (fmt == nullptr || !fmt->is_string()) {
    return InvalidArgument("strftime_now() needs a format string");
  }
  if (fmt->str().empty()) return Value::String("");
  std::tm now = interp.options().now;
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), fmt->str().c_str(), &now);
  if (n == 0) return InvalidArgument("strftime_now(): format too long or invalid");
  return Value::String(std::string(buf, n));
}

}  // namespace

void AddGlobals(Dict* globals) {
  auto add = [&](const char* name, GlobalFn fn) {
    globals->Set(name, Value::Function(std::make_shared<GlobalCallable>(name, fn)));
  };
  add("range", Range);
  add("namespace", Namespace);
  add("dict", DictFn);
  add("raise_exception", RaiseException);
  add("strftime_now", StrftimeNow);
}

const Value* FindArg(const CallArgs& args, size_t index, const char* name) {
  if (index < args.positional.size()) return &args.positional[index];
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Status CheckArgs(const CallArgs& args, const char* fn, size_t max_positional,
                 const char* allowed) {
  if (args.positional.size() > max_positional) {
    return InvalidArgument(std::string(fn) + "() takes at most " +
                           std::to_string(max_positional) + " positional argument(s), got " +
                           std::to_string(args.positional.size()));
  }
  std::string list = std::string(",") + allowed + ",";
  for (const auto& [k, unused] : args.keyword) {
    if (list.find("," + k + ",") == std::string::npos) {
      return InvalidArgument(std::string(fn) + "() got an unexpected keyword argument '" + k +
                             "'");
    }
  }
  return OkStatus();
}

std::string PyStr(const Value& v) { return v.ToString(); }

}  // namespace loom::jinja
