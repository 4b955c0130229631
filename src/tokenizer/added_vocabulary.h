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
//
// Linear in the text whatever the patterns: an Aho-Corasick automaton over the reversed
// patterns, run backwards over a block of text, gives the longest pattern starting at each
// position of the block (a forward trie walk per position costs the pattern length each time:
// a token "aaa…ab" against "aaa…a" was quadratic).
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
    int32_t token = -1;     // index into *tokens_ when a (reversed) pattern ends here
    int32_t depth = 0;      // pattern bytes from the root
    int32_t fail = 0;       // longest proper suffix that is also a node
    int32_t terminal = -1;  // this node or the deepest node on its fail chain with a token
  };
  // The longest pattern starting at each position of text[begin, end): (*len)[i - begin] bytes
  // of pattern (*index)[i - begin], 0 when none. Reads at most max_len_ bytes past `end`.
  void LongestFrom(std::string_view text, size_t begin, size_t end, std::vector<int32_t>* len,
                   std::vector<int32_t>* index) const;
  int32_t Child(int32_t node, uint8_t c) const;

  const std::vector<AddedToken>* tokens_;
  std::vector<Node> nodes_;  // trie of the reversed patterns; node 0 is the root
  size_t max_len_ = 0;       // longest pattern
};

}  // namespace loom::tokenizer
