// Jinja built-ins: filters, tests, methods of str/dict/list, and the globals transformers defines.
#pragma once

#include <string>

#include "base/status.h"
#include "tokenizer/jinja/value.h"

namespace loom::jinja {

class Interpreter;

using FilterFn = StatusOr<Value> (*)(Interpreter& interp, const Value& input, CallArgs& args);
using TestFn = StatusOr<bool> (*)(Interpreter& interp, const Value& input, CallArgs& args);

// nullptr when there is no filter / test with that name.
FilterFn FindFilter(const std::string& name);
// The number filters (filters_numeric.cc): int, float, abs, round.
StatusOr<Value> IntFilter(Interpreter& interp, const Value& input, CallArgs& args);
StatusOr<Value> FloatFilter(Interpreter& interp, const Value& input, CallArgs& args);
StatusOr<Value> AbsFilter(Interpreter& interp, const Value& input, CallArgs& args);
StatusOr<Value> RoundFilter(Interpreter& interp, const Value& input, CallArgs& args);
TestFn FindTest(const std::string& name);

// `obj.name` as a method (str.strip, dict.items, ...): a bound callable, or an Undefined value
// when obj has no such method.
Value FindMethod(const Value& obj, const std::string& name);

// range, namespace, dict, raise_exception, strftime_now.
void AddGlobals(Dict* globals);

// Argument helpers for built-ins: positional index or keyword name, with a default.
const Value* FindArg(const CallArgs& args, size_t index, const char* name);
// Errors naming `fn` when args has more positional arguments than `max_positional`, or a keyword
// not in `allowed` (a comma-separated list).
Status CheckArgs(const CallArgs& args, const char* fn, size_t max_positional,
                 const char* allowed);

// Python's str(x), int(x), float(x).
std::string PyStr(const Value& v);

}  // namespace loom::jinja
