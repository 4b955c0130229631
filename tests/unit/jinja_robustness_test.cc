// Jinja interpreter robustness: hostile or broken templates end in an error Status, never a crash
// or a hang (nesting limits, step budget, output size, macro recursion, random mutations).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace loom::jinja {
namespace {

namespace fs = std::filesystem;

StatusOr<std::string> RenderText(const std::string& text, RenderLimits limits = {}) {
  LexerOptions lex;
  lex.max_source_bytes = SIZE_MAX;  // the parser's own depth limits are under test
  ASSIGN_OR_RETURN(Program program, Parse(text, lex));
  RETURN_IF_ERROR(ValidateNames(program));
  RenderOptions options;
  options.limits = limits;
  return Render(program, Dict(), options);
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JinjaRobustnessTest, DeepExpressionNestingIsASyntaxError) {
  // Unclosed brackets are already a lexer error; balanced ones reach the parser's depth limit.
  for (const char* open : {"(", "[", "{'a': "}) {
    EXPECT_FALSE(RenderText("{{ " + Repeat(open, 100000) + "1 }}").ok()) << open;
  }
  const std::pair<std::string, std::string> balanced[] = {
      {"(", ")"}, {"[", "]"}, {"not ", ""}, {"-", ""}, {"{'a': ", "}"}, {"x|default(", ")"}};
  for (const auto& [open, close] : balanced) {
    StatusOr<std::string> r =
        RenderText("{{ " + Repeat(open, 100000) + "1" + Repeat(close, 100000) + " }}");
    ASSERT_FALSE(r.ok()) << open;
    EXPECT_NE(r.status().message().find("nested too deeply"), std::string::npos)
        << r.status().message();
  }
}

TEST(JinjaRobustnessTest, DeepBlockNestingIsASyntaxError) {
  StatusOr<std::string> r =
      RenderText(Repeat("{% if true %}", 50000) + "x" + Repeat("{% endif %}", 50000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested too deeply"), std::string::npos)
      << r.status().message();
}

TEST(JinjaRobustnessTest, ModerateNestingStillWorks) {
  StatusOr<std::string> r = RenderText("{{ " + Repeat("(", 50) + "1" + Repeat(")", 50) + " }}" +
                                       Repeat("{% if true %}", 50) + "x" +
                                       Repeat("{% endif %}", 50));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "1x");
}

TEST(JinjaRobustnessTest, HugeLoopsRunOutOfSteps) {
  RenderLimits limits;
  limits.max_steps = 200'000;  // any bound does: 1e10 iterations are asked for
  limits.max_render_ms = 0;  // the step limit alone, whatever the machine's speed
  StatusOr<std::string> r = RenderText(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("evaluation steps"), std::string::npos);
}

TEST(JinjaRobustnessTest, OutputAndValueSizeAreBounded) {
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  StatusOr<std::string> r =
      RenderText("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  r = RenderText("{{ 'x' * 1000000000 }}", limits);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  r = RenderText("{% set ns = namespace(s='xx') %}{% for i in range(64) %}"
                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 limits);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST(JinjaRobustnessTest, BuiltValuesCannotNestWithoutBound) {
  StatusOr<std::string> r = RenderText(
      "{% set ns = namespace(x=[]) %}{% for i in range(10000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("nested deeper than"), std::string::npos);
}

TEST(JinjaRobustnessTest, RecursiveMacroHitsTheCallDepth) {
  StatusOr<std::string> r = RenderText("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("macro calls nested deeper than"), std::string::npos);
}

TEST(JinjaRobustnessTest, SelfReferencingNamespacePrints) {
  StatusOr<std::string> r = RenderText("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->find("..."), std::string::npos);
  r = RenderText("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}");
  EXPECT_FALSE(r.ok());
}

TEST(JinjaRobustnessTest, RandomMutationsOfRealTemplatesNeverCrash) {
  const fs::path dir = fs::path(LOOM_FIXTURES) / "chat_templates";
  std::vector<std::string> templates;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".jinja") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    templates.push_back(ss.str());
  }
  ASSERT_FALSE(templates.empty());
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
          {"role": "assistant", "content": "a"}, {"role": "user", "content": "u2"}])");
  const std::string alphabet = "{}%#-+()[]|.,:'\"~=<>!*/ \nifforsetendmacro";
  std::mt19937 rng(1234);
  int rendered = 0, rejected = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::string t = templates[rng() % templates.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !t.empty(); ++k) {
      size_t pos = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t.erase(pos, 1 + rng() % 8);
          break;
        case 1:
          t.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          t.insert(pos, t.substr(rng() % t.size(), 1 + rng() % 16));
      }
    }
    ChatTemplateOptions opts;
    opts.add_generation_prompt = (iter % 2) == 0;
    opts.special_tokens = {{"bos_token", "<s>"}};
    opts.limits.max_steps = 200000;
    StatusOr<std::string> r = RenderChatTemplate(t, messages, opts);
    (r.ok() ? rendered : rejected)++;
  }
  EXPECT_GT(rendered + rejected, 0);
  std::printf("mutated templates: %d rendered, %d rejected with a Status\n", rendered, rejected);
}

}  // namespace
}  // namespace loom::jinja
