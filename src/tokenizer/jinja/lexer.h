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
// The longest template Parse takes by default (real chat templates are 1–50 KB).
inline constexpr size_t kMaxTemplateBytes = size_t{1} << 20;

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  // Tokens and syntax nodes take ~50–300 bytes each for as little as 2 bytes of source: a
  // 200 MB template of `{{[0,0,0,…]}}` would take tens of GB to parse. (Tests of the parser's
  // depth limits raise it.)
  size_t max_source_bytes = kMaxTemplateBytes;
};

// Tokenizes `source`. `{% raw %}` blocks come out as kText. Errors name the line.
StatusOr<std::vector<Token>> Tokenize(const std::string& source, const LexerOptions& options);

}  // namespace loom::jinja
