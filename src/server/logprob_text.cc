// A token's text in log-prob entries, as vLLM 0.32 writes it.
#include "server/logprob_text.h"

#include <algorithm>

namespace loom::server {

namespace {

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

// vLLM's _correct_decoded_token: a token whose text ends in U+FFFD (a byte of a character split
// over tokens) gets what it completes, decoded with 1-4 of the sequence's preceding ids; "" while
// the character is still incomplete.
std::string CompletedText(const tokenizer::Tokenizer& tok, int32_t id,
                          std::span<const int32_t> context) {
  const size_t max_ctx = std::min<size_t>(context.size(), 4);
  for (size_t num = 1; num <= max_ctx; ++num) {
    std::vector<int32_t> ids(context.end() - static_cast<std::ptrdiff_t>(num), context.end());
    const std::vector<int32_t> c = ids;
    ids.push_back(id);
    const std::string full = tok.Decode(ids, false);
    if (EndsWithReplacement(full)) continue;
    // The context ids that are themselves parts of the character (each ending in U+FFFD alone)
    // belong to this token's text; the clean ones before them are its prefix.
    size_t clean_end = c.size();
    for (size_t j = c.size(); j-- > 0;) {
      const int32_t one[1] = {c[j]};
      if (!EndsWithReplacement(tok.Decode(std::span<const int32_t>(one, 1), false))) break;
      clean_end = j;
    }
    const std::string prefix =
        clean_end > 0 ? tok.Decode(std::span<const int32_t>(c).first(clean_end), false) : "";
    size_t common = 0;  // the longest common prefix, in whole characters (Python compares those)
    while (common < prefix.size() && common < full.size() && prefix[common] == full[common]) {
      ++common;
    }
    while (common > 0 && common < full.size() &&
           (static_cast<unsigned char>(full[common]) & 0xC0) == 0x80) {
      --common;
    }
    return full.substr(common);
  }
  return "";
}

}  // namespace

std::string LogprobTokenText(const tokenizer::Tokenizer& tok, int32_t id,
                             std::span<const int32_t> context) {
  const int32_t one[1] = {id};
  std::string text = tok.Decode(std::span<const int32_t>(one, 1), /*skip_special_tokens=*/false);
  const std::string& marker = tok.leading_space_marker();
  const std::string* raw = marker.empty() ? nullptr : tok.IdToToken(id);
  if (raw != nullptr) {
    size_t markers = 0;
    for (size_t at = 0; at < raw->size() && raw->compare(at, marker.size(), marker) == 0;
         at += marker.size()) {
      ++markers;
    }
    const size_t first_other = text.find_first_not_of(' ');
    const size_t existing = first_other == std::string::npos ? text.size() : first_other;
    if (markers > existing) text.insert(0, markers - existing, ' ');
  }
  if (EndsWithReplacement(text)) text = CompletedText(tok, id, context);
  return text;
}

std::span<const int32_t> LogprobContext(const std::vector<int32_t>& ids, size_t i, size_t first) {
  const size_t from = std::max(first, i >= 4 ? i - 4 : 0);
  if (from >= i) return {};
  return std::span<const int32_t>(ids).subspan(from, i - from);
}

}  // namespace loom::server
