// Jinja lexer: splits template source into text and tag tokens, applying jinja2's whitespace control.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace loom::jinja {

enum class TokenType {
  kText,        // literal template text (already trimmed by whitespace control)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // value = the decoded string
  kInt,         // value = digits (underscores removed)
  kFloat,       // value = the literal
  kOperator,    // value = the operator text: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  int line;
};

// Lexer options; transformers renders chat templates with both on.
struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Tokenizes `source`. `{% raw %}` blocks come out as kText. Errors name the line.
StatusOr<std::vector<Token>> Tokenize(const std::string& source, const LexerOptions& options);

}  // namespace loom::jinja
