// PCRE2 wrapper: Oniguruma-compatible \s, JIT matching, find-all with empty-match handling.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <cstdio>
#include <ctime>

#include "tokenizer/cancel.h"
#include "tokenizer/jinja/utf8.h"
#include "tokenizer/unicode.h"

namespace loom::tokenizer {

namespace {

// White_Space, as Oniguruma's \s matches it in Unicode mode.
constexpr const char* kWhiteSpaceItems =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string RewriteWhitespaceClasses(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpaceItems) : "[" + std::string(kWhiteSpaceItems) + "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceItems) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string EscapeLiteral(std::string_view s) {
  std::string out = "\\Q";
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "\\E") == 0) {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out += s[i];
    }
  }
  return out + "\\E";
}

struct JitStack {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  JitStack() {
    pcre2_jit_stack_assign(context, nullptr, stack);
    pcre2_set_match_limit(context, Regex::kMatchLimit);
    pcre2_set_heap_limit(context, Regex::kHeapLimitKib);
  }
  ~JitStack() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

pcre2_match_context* ThreadMatchContext() {
  thread_local JitStack jit;
  return jit.context;
}

int64_t ClockNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// This thread's open RegexBudgetScope, if any. Its CPU time is read (a system call, ~0.7 us
// here) only once the wall clock (vDSO, ~30 ns) has passed the budget: a thread cannot have
// used more CPU time than has elapsed.
struct Budget {
  bool on = false;
  int64_t budget_ns = 0;
  int64_t wall_start = 0;  // CLOCK_MONOTONIC
  int64_t cpu_start = 0;   // CLOCK_THREAD_CPUTIME_ID
  size_t text_bytes = 0;
  uint32_t calls = 0;  // pcre2_match calls since the scope opened; clocks read every 8
  bool exhausted = false;

  bool Spent() {
    if (exhausted) return true;
    if ((++calls & 7) != 0) return false;
    if (ClockNs(CLOCK_MONOTONIC) - wall_start <= budget_ns) return false;
    exhausted = ClockNs(CLOCK_THREAD_CPUTIME_ID) - cpu_start > budget_ns;
    return exhausted;
  }
};
thread_local Budget budget;

}  // namespace

StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  const std::string rewritten = RewriteWhitespaceClasses(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgument("regex '" + std::string(pattern) + "' does not compile at offset " +
                           std::to_string(offset) + ": " + reinterpret_cast<char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
  std::unique_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  re->code_ = code;
  return re;
}

StatusOr<std::unique_ptr<Regex>> Regex::Literal(std::string_view literal) {
  ASSIGN_OR_RETURN(auto re, Compile(EscapeLiteral(literal)));
  re->pattern_ = std::string(literal);
  return re;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

RegexBudgetScope::RegexBudgetScope(size_t text_bytes) {
  if (budget.on) return;
  owner_ = true;
  budget.on = true;
  budget.budget_ns = static_cast<int64_t>(SecondsFor(text_bytes) * 1e9);
  budget.wall_start = ClockNs(CLOCK_MONOTONIC);
  budget.cpu_start = ClockNs(CLOCK_THREAD_CPUTIME_ID);
  budget.text_bytes = text_bytes;
  budget.calls = 0;
  budget.exhausted = false;
}

bool RegexBudgetScope::exhausted() const { return owner_ && budget.exhausted; }

RegexBudgetScope::~RegexBudgetScope() {
  if (owner_) budget.on = false;
}

Status Regex::FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (md == nullptr) return ResourceExhausted("regex '" + pattern_ + "': out of memory");
  pcre2_match_context* ctx = ThreadMatchContext();
  size_t start = 0;
  size_t last_match_end = static_cast<size_t>(-1);
  Status status;
  while (start <= s.size()) {
    if (EncodeCancelled()) {
      status = EncodeCancelledError("a regex");
      break;
    }
    if (budget.on && budget.Spent()) {
      char spent[32];
      std::snprintf(spent, sizeof(spent), "%.1f", static_cast<double>(budget.budget_ns) / 1e9);
      status = ResourceExhausted(
          std::string("the tokenizer ran out of its time budget (") + spent + " s of CPU for a " +
          std::to_string(budget.text_bytes) + "-byte text) in regex '" + pattern_ + "' at byte " +
          std::to_string(start) + " of a " + std::to_string(s.size()) +
          "-byte piece: a tokenizer.json pattern that backtracks on every match?");
      break;
    }
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start,
                               PCRE2_NO_UTF_CHECK, md, ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      status = ResourceExhausted("regex '" + pattern_ + "' gave up at byte " +
                                 std::to_string(start) + " of a " + std::to_string(s.size()) +
                                 "-byte piece: " + reinterpret_cast<char*>(message) +
                                 " (catastrophic backtracking; match limit " +
                                 std::to_string(kMatchLimit) + ")");
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (b == e && last_match_end == e) {
      // No empty match right after the previous match: step one character.
      if (start >= s.size()) break;
      start += Utf8Length(static_cast<uint8_t>(s[start]));
      continue;
    }
    out->emplace_back(b, e);
    last_match_end = e;
    if (b == e) {
      if (e >= s.size()) break;
      start = e + Utf8Length(static_cast<uint8_t>(s[e]));
    } else {
      start = e;
    }
  }
  pcre2_match_data_free(md);
  return status;
}

namespace {

// `s` with each match replaced by `content`, refused before it is built when over `max_bytes`.
StatusOr<std::string> ReplaceMatches(std::string_view s,
                                      const std::vector<std::pair<size_t, size_t>>& matches,
                                      std::string_view content, size_t max_bytes,
                                      const std::string& pattern) {
  if (matches.empty()) {
    if (s.size() > max_bytes) {
      return ResourceExhausted("replacing '" + pattern + "': text exceeds " +
                               std::to_string(max_bytes) + " bytes");
    }
    return std::string(s);
  }
  // Output size = input - matched bytes + matches * content, computed without overflow.
  size_t matched = 0;
  for (const auto& [b, e] : matches) matched += e - b;
  const size_t kept = s.size() - matched;
  if (content.size() > 0 && matches.size() > (max_bytes - std::min(kept, max_bytes)) / content.size()) {
    return ResourceExhausted("replacing '" + pattern + "' with a " +
                             std::to_string(content.size()) + "-byte string " +
                             std::to_string(matches.size()) + " times would exceed " +
                             std::to_string(max_bytes) + " bytes");
  }
  if (kept > max_bytes) {
    return ResourceExhausted("replacing '" + pattern + "': text exceeds " +
                             std::to_string(max_bytes) + " bytes");
  }
  std::string out;
  out.reserve(kept + matches.size() * content.size());
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    out.append(s.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(s.substr(prev));
  return out;
}

}  // namespace

}  // namespace loom::tokenizer

#include <nlohmann/json.hpp>

namespace loom::tokenizer {

StatusOr<Pattern> Pattern::FromJson(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgument(where + ": pattern must be an object");
  if (j.contains("String") && j["String"].is_string()) {
    return FromLiteral(j["String"].get<std::string>());
  }
  if (j.contains("Regex") && j["Regex"].is_string()) {
    ASSIGN_OR_RETURN(auto re, Regex::Compile(j["Regex"].get<std::string>()));
    Pattern p;
    p.regex_ = std::move(re);
    return p;
  }
  return InvalidArgument(where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}, got " +
                         j.dump());
}

StatusOr<Pattern> Pattern::FromLiteral(std::string literal) {
  Pattern p;
  p.literal_ = std::move(literal);
  return p;
}

Status Pattern::FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const {
  if (regex_) return regex_->FindAll(s, out);
  if (literal_.empty()) return OkStatus();
  size_t pos = 0;
  // Linear in the text whatever the literal (string_view::find is O(n·m) in the worst case: a
  // tokenizer.json Split on a 1 MB literal took 28 s over a 2 MB prompt); polled for a stop.
  while ((pos = jinja::FindSubstring(s, literal_, pos)) != std::string_view::npos) {
    if (EncodeCancelled()) return EncodeCancelledError("a literal pattern");
    out->emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
  return OkStatus();
}

StatusOr<std::string> Pattern::ReplaceAll(std::string_view s, std::string_view content,
                                          size_t max_bytes,
                                          std::vector<std::pair<size_t, size_t>>* matches) const {
  std::vector<std::pair<size_t, size_t>> local;
  if (matches == nullptr) matches = &local;
  matches->clear();
  RETURN_IF_ERROR(FindAll(s, matches));
  return ReplaceMatches(s, *matches, content, max_bytes, regex_ ? regex_->pattern() : literal_);
}

}  // namespace loom::tokenizer
