// Hostile chat templates found by review: long operator/attribute/filter/elif chains (stack
// overflow), quadratic substring search inside one step, a namespace that holds itself twice
// (exponential repr), unpacking or splitting huge strings (GBs before the size check), chains of
// bound methods (stack overflow when freed), INT64_MIN % -1 (SIGFPE), quadratic strip(chars).
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::jinja {
namespace {

StatusOr<std::string> RenderText(const std::string& text) {
  LexerOptions lex;
  lex.max_source_bytes = SIZE_MAX;  // the parser's own depth limits are under test
  ASSIGN_OR_RETURN(Program program, Parse(text, lex));
  RETURN_IF_ERROR(ValidateNames(program));
  RenderOptions options;
  // No clock: each case must be stopped by the size, depth or step limit it is about (under a
  // sanitizer on a busy CI core, splitting 16 MB hit the 1 s budget first).
  options.limits.max_render_ms = 0;
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
  // Nested ifs, each a chain of 256 elifs: each elif nests the next, so 250 × 257 levels of
  // statements passed the parser (each chain alone was within the limit) into the recursive
  // load-time name check and destructor (deep enough to overflow a sanitized build's stack).
  // The elifs count against the nesting limit now.
  std::string nested;
  for (int i = 0; i < 250; ++i) nested += "{% if a %}" + Repeat("{% elif a %}", 256);
  for (int i = 0; i < 250; ++i) nested += "{% endif %}";
  ExpectError(nested, StatusCode::kInvalidArgument, "nested too deeply");
  ExpectRender("{% set a = 2 %}" + Repeat("{% if b %}{% elif a %}", 100) + "x" +
                   Repeat("{% endif %}", 100),
               "x");
  // Chains of the length real templates use still render.
  ExpectRender("{{ 1" + Repeat(" + 1", 100) + " }}", "101");
  ExpectRender("{{ 'a'" + Repeat(" ~ 'a'", 99) + " }}", std::string(100, 'a'));
  ExpectRender("{% set x = 3 %}{% if x == 0 %}0" + Repeat("{% elif x == 1 %}1", 100) +
                   "{% elif x == 3 %}3{% endif %}",
               "3");
  ExpectRender("{{ ' a '" + Repeat("|trim", 50) + " }}", "a");
}

// map('map', 'map', ...) called a filter by name per argument, each level copying the rest: a
// C++ frame a level with no stack check (a crash under ASan) and quadratic memory. A call takes
// at most 256 arguments, and filters called by name check the stack as Eval does.
TEST(JinjaHostileTest, FiltersCallingFiltersByNameAreBounded) {
  ExpectError("{{ 'a' | map(" + Repeat("'map', ", 300) + "'upper') | list }}",
              StatusCode::kInvalidArgument, "more than 256 arguments in one call");
  ExpectError("{{ f(" + Repeat("1, ", 300) + "1) }}", StatusCode::kInvalidArgument,
              "more than 256 arguments in one call");
  ExpectRender("{{ ['a', 'b'] | map('upper') | join(',') }}", "A,B");
  ExpectRender("{{ ['ab'] | map('map', 'upper') | map('join') | join }}", "AB");
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

// `{'a': ns.m}.get` holds its dict, which holds the previous method: 1,000,000 links freed
// recursively overflowed the stack (SIGSEGV in ~BoundMethod) because a function value had depth
// 0. A bound method is now one level deeper than what it holds, so max_value_depth refuses the
// chain, and the collection limits count what it holds.
TEST(JinjaHostileTest, BoundMethodChainsAreDepthLimitedNotAStackOverflow) {
  ExpectError("{% set ns = namespace(m=none) %}{% for j in range(10) %}"
              "{% for i in range(100000) %}{% set ns.m = {'a': ns.m}.get %}{% endfor %}"
              "{% endfor %}done",
              StatusCode::kResourceExhausted, "RenderLimits::max_value_depth");
  ExpectError("{% set ns = namespace(m=none) %}{% for i in range(100000) %}"
              "{% set ns.m = [ns.m].index %}{% endfor %}",
              StatusCode::kResourceExhausted, "RenderLimits::max_value_depth");
  // A method bound to a 1 MB dict counts the dict: a list of 100 of them is 100 MB.
  ExpectError("{{ [{'a': 'x' * 1000000}.get] * 100 }}", StatusCode::kResourceExhausted,
              "max_collection_bytes");
  // Short chains and ordinary method calls still work.
  ExpectRender("{% set ns = namespace(m=none) %}{% for i in range(10) %}"
               "{% set ns.m = {'a': ns.m}.get %}{% endfor %}{{ ns.m('a')('a')('b', 7) }}",
               "7");
  ExpectRender("{{ {'a': 1}.get('a') }} {{ 'abc'.upper() }} {{ [1, 2].index(2) }}", "1 ABC 1");
}

// INT64_MIN % -1 traps in C++ (SIGFPE); Python says divisible, 0, and only // overflows.
TEST(JinjaHostileTest, Int64MinByMinusOneIsNotATrap) {
  ExpectRender("{{ (-9223372036854775807 - 1) is divisibleby(-1) }} "
               "{{ (-9223372036854775807 - 1) % -1 }} {{ 7 is divisibleby(-1) }} {{ 7 % -1 }} "
               "{{ 7 // -1 }} {{ 7 is divisibleby(-7) }} {{ 7 is divisibleby(2) }}",
               "True 0 True 0 -7 True False");
  ExpectError("{{ (-9223372036854775807 - 1) // -1 }}", StatusCode::kInvalidArgument,
              "OverflowError");
  ExpectError("{{ 7 is divisibleby(0) }}", StatusCode::kInvalidArgument, "modulo by zero");
}

// strip(chars) looked each character up in the chars string: 200,000 × 200,001 comparisons took
// 26 s in one uncharged step. The characters are now a sorted set.
// strip/trim with a set of characters: one sorted set looked up per character (it was a scan of
// the set per character, O(n·m): 26 s for 200 K characters against a 200 K set, one step of the
// render's budget). Sizes here are small; the results are Python's.
TEST(JinjaHostileTest, StripWithManyCharsMatchesPython) {
  ExpectRender("{{ ('a' * 2000).strip('b' * 2000 ~ 'a')|length }} "
               "{{ ('a' * 2000 ~ 'c')|trim('b' * 2000 ~ 'a') }} "
               "{{ (('a' * 2000 ~ 'cd')|reverse).lstrip('b' * 2000 ~ 'ad')|length }}",
               "0 c 2001");
  // Python's results: any order, repeats, multi-byte characters.
  ExpectRender("{{ 'xyzaxzy'.strip('zyx') }}|{{ 'ééaé'.strip('é') }}|{{ 'abcba'.rstrip('aab') }}|"
               "{{ 'abc'.lstrip('') }}|{{ '  a  '|trim }}",
               "a|a|abc|abc|a");
}

}  // namespace
}  // namespace loom::jinja
