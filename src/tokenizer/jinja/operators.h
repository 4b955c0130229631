// Jinja operators with Python semantics: arithmetic, comparison, `in`, slicing.
#pragma once

#include <string>

#include "base/status.h"
#include "tokenizer/jinja/value.h"

namespace loom::jinja {

class Interpreter;

// op: + - * / // % ** ~
StatusOr<Value> BinaryOp(Interpreter& interp, const std::string& op, const Value& a,
                         const Value& b);
// op: - +
StatusOr<Value> UnaryOp(const std::string& op, const Value& v);
// op: == != < <= > >= in, not in
StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b);
// Python `item in container`.
StatusOr<bool> Contains(const Value& container, const Value& item);
// Python obj[start:stop:step] for lists, tuples and strings; None means omitted.
StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

}  // namespace loom::jinja
