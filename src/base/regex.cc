// Regex over PCRE2 (UTF mode) for Python patterns: TranslatePythonRegex first, then PCRE2.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "base/regex.h"

#include <pcre2.h>

#include <new>

#include "base/json.h"
#include "base/py_regex.h"

namespace loom {

// Patterns come from files (adapter configs, quantization configs) and are matched against
// every module name: a backtracking pattern may take at most this many steps per name (PCRE2's
// default is 10 million; a real pattern over a module name takes hundreds). Past it the name
// does not match.
constexpr uint32_t kMatchLimit = 100000;

struct Regex::Code {
  pcre2_code* code = nullptr;
  pcre2_match_context* limits = nullptr;  // kMatchLimit; read-only while matching
  std::string what;                       // the pattern's origin, for RegexLimitScope
  bool group1 = false;                    // PCRE2's group 1 is Python's (capture_group1)
  ~Code() {
    pcre2_match_context_free(limits);
    pcre2_code_free(code);
  }
};

StatusOr<Regex> Regex::Compile(const std::string& pattern, const std::string& what,
                               bool capture_group1) {
  // The pattern and PCRE2's words about it go into messages: clipped, control bytes escaped.
  const std::string quoted = std::string("'").append(TextForMessage(pattern)).append("'");
  // Real patterns are under 1 KB. The translation writes some escapes out long (\s is a ~100-byte
  // set), and PCRE2 takes ~4 bytes a pattern byte: a 16 MiB config of "\s\s…" took ~3-4 GB.
  if (pattern.size() > kMaxPatternBytes) {
    return InvalidArgument(what + ": regular expression " + quoted + " is " +
                           std::to_string(pattern.size()) + " bytes; loom allows " +
                           std::to_string(kMaxPatternBytes));
  }
  StatusOr<PcreTranslation> t = Internal("not translated");
  try {
    t = TranslatePythonRegex(pattern, capture_group1);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted(what + ": out of memory translating " + quoted);
  }
  if (!t.ok()) {
    return InvalidArgument(what + ": invalid regular expression " + quoted + ": " +
                           TextForMessage(t.status().message()));
  }
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  if (context == nullptr) return ResourceExhausted(what + ": out of memory");
  // Python's . and $ know \n only; its multiline ^ also matches after a final \n
  // (ALT_CIRCUMFLEX); \d \w \b are Unicode-aware in a str pattern (UCP) unless (?a).
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  pcre2_set_max_pattern_length(context, 64 * kMaxPatternBytes);  // the translation's worst growth
  const uint32_t options =
      PCRE2_UTF | PCRE2_ALT_CIRCUMFLEX | PCRE2_NEVER_BACKSLASH_C | (t->ascii ? 0 : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(t->pattern.data()),
                                   t->pattern.size(), options, &error, &offset, context);
  pcre2_compile_context_free(context);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgument(what + ": invalid regular expression " + quoted +
                           ": PCRE2 cannot compile it (" +
                           TextForMessage(reinterpret_cast<char*>(message)) + ")");
  }
  uint32_t captures = 0;
  pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &captures);
  if (captures > static_cast<uint32_t>(kMaxCaptures)) {
    pcre2_code_free(code);
    return InvalidArgument(what + ": regular expression " + quoted + " refers back to " +
                           std::to_string(captures) + " groups (back-references, conditions); " +
                           "loom allows " + std::to_string(kMaxCaptures));
  }
  Regex r;
  r.pattern_ = pattern;
  r.python_groups_ = t->python_groups;
  r.top_level_alternation_ = t->top_level_alternation;
  r.code_ = std::make_shared<Code>();
  r.code_->code = code;
  r.code_->what = what;
  r.code_->group1 = capture_group1;
  r.code_->limits = pcre2_match_context_create(nullptr);
  if (r.code_->limits == nullptr) return ResourceExhausted(what + ": out of memory");
  pcre2_set_match_limit(r.code_->limits, kMatchLimit);
  return r;
}

namespace {

thread_local RegexLimitScope* innermost_scope = nullptr;

bool Match(const std::string& pattern, const std::string& what, pcre2_code* code,
           pcre2_match_context* limits, const std::string& text, uint32_t options,
           std::optional<std::string>* group1 = nullptr) {
  if (RegexLimitScope::Failed()) return false;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (md == nullptr) return false;
  const auto start = std::chrono::steady_clock::now();
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             options, md, limits);
  RegexLimitScope::Spent(std::chrono::steady_clock::now() - start);
  if (group1 != nullptr) {
    group1->reset();
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
    if (rc > 1 && ovector[2] != PCRE2_UNSET) {
      *group1 = text.substr(ovector[2], ovector[3] - ovector[2]);
    }
  }
  pcre2_match_data_free(md);
  if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT) {
    RegexLimitScope::Record(what, pattern, text);
  }
  return rc >= 0;
}

}  // namespace

bool Regex::FullMatch(const std::string& text) const {
  return Match(pattern_, code_->what, code_->code, code_->limits, text,
               PCRE2_ANCHORED | PCRE2_ENDANCHORED);
}

bool Regex::PrefixMatch(const std::string& text) const {
  return Match(pattern_, code_->what, code_->code, code_->limits, text, PCRE2_ANCHORED);
}

bool Regex::PrefixMatch(const std::string& text, std::optional<std::string>* group1) const {
  if (!code_->group1) {  // PCRE2's group 1, if any, is another group: nothing to read
    group1->reset();
    return PrefixMatch(text);
  }
  return Match(pattern_, code_->what, code_->code, code_->limits, text, PCRE2_ANCHORED, group1);
}

RegexLimitScope::RegexLimitScope() : outer_(innermost_scope) { innermost_scope = this; }

bool RegexLimitScope::Failed() {
  RegexLimitScope* s = innermost_scope;
  return s != nullptr && !s->first_.empty();
}

void RegexLimitScope::Spent(std::chrono::steady_clock::duration d) {
  RegexLimitScope* s = innermost_scope;
  if (s == nullptr) return;
  s->spent_ += d;
  if (s->first_.empty() && s->spent_ > std::chrono::milliseconds(kScopeBudgetMs)) {
    s->over_time_ = true;
    s->first_ = "regular expressions from the configuration took more than " +
                std::to_string(kScopeBudgetMs / 1000) +
                " s in total to match the model's names (too many patterns, or patterns close to "
                "the step limit); simplify them";
  }
}

RegexLimitScope::~RegexLimitScope() { innermost_scope = outer_; }

void RegexLimitScope::Record(const std::string& what, const std::string& pattern,
                             const std::string& text) {
  RegexLimitScope* s = innermost_scope;
  if (s == nullptr || !s->first_.empty()) return;
  // Both come from files: at most 200 bytes of each in the message, control bytes escaped.
  s->first_ = what + ": regular expression '" + TextForMessage(pattern) + "' took more than " +
              std::to_string(kMatchLimit) + " backtracking steps on '" + TextForMessage(text) +
              "' (a nested or ambiguous repetition?); simplify the pattern";
}

Status RegexLimitScope::status() const {
  return first_.empty() ? OkStatus() : InvalidArgument(first_);
}

}  // namespace loom
