// Jinja parser: tokens → AST, following jinja2's grammar and operator precedence.
#pragma once

#include <string>

#include "base/status.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace loom::jinja {

// A parsed template. Immutable after Parse; safe to render from several threads at once.
struct Program {
  Body body;
};

// Parses `source`. A construct loom does not implement (extends, include, import, call blocks,
// ...) is an error naming the tag and its line; so is any syntax error; so is a source longer
// than options.max_source_bytes (kResourceExhausted). Throws nothing (out of memory:
// kResourceExhausted).
StatusOr<Program> Parse(const std::string& source, const LexerOptions& options = {});

}  // namespace loom::jinja
