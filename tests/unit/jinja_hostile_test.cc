// Hostile chat templates found by review: long operator/attribute/filter/elif chains (stack
// overflow), quadratic substring search inside one step, a namespace that holds itself twice
// (exponential repr), unpacking or splitting huge strings (GBs before the size check).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

StatusOr<std::string> RenderText(const std::string& text) {
  ASSIGN_OR_RETURN(Program program, Parse(text));
  RETURN_IF_ERROR(ValidateNames(program));
  RenderOptions options;
  return Render(program, Dict(), options);
}

void ExpectError(const std::string& text, StatusCode code, const std::string& fragment) {
  StatusOr<std::string> r = RenderText(text);
  ASSERT_FALSE(r.ok()) << text.substr(0, 80) << " gave " << r->substr(0, 80);
  EXPECT_EQ(r.status().code(), code) << text.substr(0, 80) << ": " << r.status().ToString();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos)
      << text.substr(0, 80) << ": " << r.status().message();
}

void ExpectRender(const std::string& text, const std::string& expected) {
  StatusOr<std::string> r = RenderText(text);
  ASSERT_TRUE(r.ok()) << text.substr(0, 80) << ": " << r.status().ToString();
  EXPECT_EQ(*r, expected) << text.substr(0, 80);
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// Each link of a left-leaning chain nests the tree one level: 100,000 links crashed the process
// (SIGSEGV in the recursive name check and destructor) before the limit counted them.
TEST(JinjaHostileTest, LongChainsAreRefusedNotAStackOverflow) {
  ExpectError("{{ x" + Repeat(".a", 50000) + " }}", StatusCode::kInvalidArgument, "nested too deeply");
  ExpectError("{{ 1" + Repeat("+1", 1000000) + " }}", StatusCode::kInvalidArgument, "nested too deeply");
  ExpectError("{{ 'x'" + Repeat(" ~ 'y'", 100000) + " }}", StatusCode::kInvalidArgument, "nested too deeply");
  ExpectError("{{ x" + Repeat("|trim", 100000) + " }}", StatusCode::kInvalidArgument, "nested too deeply");
  ExpectError("{{ x" + Repeat(" or x", 100000) + " }}", StatusCode::kInvalidArgument, "nested too deeply");
  ExpectError("{{ x" + Repeat("[0]", 100000) + " }}", StatusCode::kInvalidArgument, "nested too deeply");
  ExpectError("{% if x %}" + Repeat("{% elif x %}", 100000) + "{% endif %}",
              StatusCode::kInvalidArgument, "nested too deeply");
  // Chains of the length real templates use still render.
  ExpectRender("{{ 1" + Repeat(" + 1", 100) + " }}", "101");
  ExpectRender("{{ 'a'" + Repeat(" ~ 'a'", 99) + " }}", std::string(100, 'a'));
  ExpectRender("{% set x = 3 %}{% if x == 0 %}0" + Repeat("{% elif x == 1 %}1", 100) +
                   "{% elif x == 3 %}3{% endif %}",
               "3");
  ExpectRender("{{ ' a '" + Repeat("|trim", 50) + " }}", "a");
}

// Substring search is linear (std::string::find is O(n·m): minutes in one uncharged step), and
// find / count / split / rsplit / replace / in keep Python's results, overlaps included.
TEST(JinjaHostileTest, SubstringSearchIsLinearAndPythonExact) {
  ExpectRender("{%- set h = 'a' * 2000000 -%}{%- set n = 'a' * 1000000 ~ 'b' -%}"
               "{{ n in h }} {{ h.find(n) }} {{ h.count(n) }} {{ h.split(n)|length }}",
               "False -1 0 1");
  // Python: 'aaa'.rsplit('aa') == ['a', ''], 'aaa'.split('aa') == ['', 'a'], ...
  ExpectRender("{{ 'aaa'.rsplit('aa') }} {{ 'aaa'.split('aa') }} {{ 'abcabc'.rsplit('b', 1) }}",
               "['a', ''] ['', 'a'] ['abca', 'c']");
  ExpectRender("{{ 'a,b,,c'.rsplit(',', 2) }} {{ 'ééé'.rsplit('é') }} {{ 'héllo wörld'.find('wö') }}",
               "['a,b', '', 'c'] ['', '', '', ''] 6");
  ExpectRender("{{ 'aaaa'.count('aa') }} {{ 'aaaa'.replace('aa', 'b') }} {{ 'x' in 'abc' }} "
               "{{ '' in 'abc' }} {{ 'bc' in 'abc' }}",
               "2 bb False True True");
}

// ns.a = ns; ns.b = ns: printing doubled per level down to the 200-level cut, 2^200 calls and
// GBs of text; the repr now stops at Value::kMaxReprBytes and the output limit refuses it.
TEST(JinjaHostileTest, ANamespaceHoldingItselfTwicePrintsBounded) {
  ExpectError("{%- set ns = namespace(a=1, b=2) -%}{%- set ns.a = ns -%}{%- set ns.b = ns -%}{{ ns }}",
              StatusCode::kResourceExhausted, "max_output_bytes");
  ExpectRender("{%- set ns = namespace(a=1) -%}{%- set ns.b = [ns.a, 'x'] -%}{{ ns }}",
               "<Namespace {'a': 1, 'b': [1, 'x']}>");
}

TEST(JinjaHostileTest, UnpackingAndSplittingHugeStringsFailBeforeBuilding) {
  ExpectError("{%- set s = 'a' * 16000000 -%}{%- set x, y = s -%}", StatusCode::kInvalidArgument,
              "too many values to unpack (expected 2)");
  ExpectError("{%- for x, y in ['a' * 16000000] -%}{%- endfor -%}", StatusCode::kInvalidArgument,
              "too many values to unpack (expected 2)");
  ExpectRender("{%- set x, y = 'ab' -%}{{ y }}{%- set a, b, c = 'héé' -%}{{ a }}{{ c }}", "bhé");
  ExpectError("{{ 'abc' | list | length }}{%- set x, y, z, w = 'abc' -%}", StatusCode::kInvalidArgument,
              "not enough values to unpack (expected 4, got 3)");
  ExpectError("{{ (',' * 16000000).split(',') | length }}", StatusCode::kResourceExhausted,
              "max_collection_bytes");
  ExpectError("{{ (',' * 16000000).rsplit(',') | length }}", StatusCode::kResourceExhausted,
              "max_collection_bytes");
  ExpectError("{{ ('a ' * 8000000).split() | length }}", StatusCode::kResourceExhausted,
              "max_collection_bytes");
}

// FindSubstring searches a window at a time: every match position, also one straddling a window
// edge (64 KiB) and needles longer than a window, is std::string_view::find's.
TEST(JinjaHostileTest, FindSubstringAgreesWithFindAcrossWindowEdges) {
  std::mt19937 rng(11);
  for (size_t size : {size_t{0}, size_t{5}, size_t{65535}, size_t{65536}, size_t{65537},
                      size_t{200000}, size_t{300001}}) {
    std::string hay(size, 'a');
    for (char& c : hay) c = static_cast<char>('a' + rng() % 3);
    const size_t edge = 65536;
    if (size > edge + 4) hay.replace(edge - 3, 7, "xyzWxyz");  // a match across the first edge
    const std::string needles[] = {"a",
                                   "abc",
                                   "cab",
                                   "xyzWxyz",
                                   "zWx",
                                   std::string(70000, 'a'),
                                   hay.size() > 80000 ? hay.substr(1000, 70000) : "q",
                                   hay.size() > 5 ? hay.substr(hay.size() - 5) : "b"};
    for (const std::string& sub : needles) {
      std::string_view h(hay);
      for (size_t from : {size_t{0}, size_t{1}, edge - 2, edge, size / 2, size}) {
        if (from > size) continue;
        size_t want = h.find(sub, from);
        int hits = 0;
        for (size_t p = FindSubstring(h, sub, from); p != std::string::npos && hits < 3;
             p = FindSubstring(h, sub, p + 1), ++hits) {
          ASSERT_EQ(p, want) << "size " << size << " sub " << sub.size() << " from " << from;
          want = h.find(sub, p + 1);
        }
        if (hits < 3) {
          EXPECT_EQ(want, std::string::npos) << size << " " << sub.size();
        }
      }
    }
  }
  EXPECT_EQ(FindSubstring("abc", "", 3), 3u);
  EXPECT_EQ(FindSubstring("abc", "c", 4), std::string::npos);
}

}  // namespace
}  // namespace loom::jinja
