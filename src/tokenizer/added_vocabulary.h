// Added tokens (tokenizer.json "added_tokens"): found in text before the model runs, with the
// special / lstrip / rstrip / normalized / single_word rules of HF tokenizers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// A piece of text [begin, end): an added token (id >= 0) or text for the model (id == -1).
struct TextSegment {
  size_t begin;
  size_t end;
  int32_t id;
};

// Leftmost-longest matcher over a set of patterns (what HF builds with aho-corasick). Immutable
// after construction; thread-safe.
class AddedTokenMatcher {
 public:
  // `patterns[i]` finds `tokens[i]`; an empty pattern never matches. On equal matches the
  // earlier pattern wins.
  AddedTokenMatcher(const std::vector<AddedToken>* tokens, std::vector<std::string> patterns);

  bool empty() const { return nodes_.size() <= 1; }
  // Splits `text` as AddedVocabulary::find_matches does (lstrip/rstrip widen a match over
  // whitespace; single_word drops matches inside words). Appends to `out`.
  void Split(std::string_view text, std::vector<TextSegment>* out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                  // index into *tokens_
  };
  // Index of the longest pattern starting at text[pos], or -1; *end gets its end.
  int32_t LongestAt(std::string_view text, size_t pos, size_t* end) const;

  const std::vector<AddedToken>* tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace loom::tokenizer
