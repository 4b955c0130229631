// Jinja interpreter against jinja2 on random templates: random_vectors.json (made by
// tools/ref/make_jinja_random_vectors.py) holds seeded random chat-template-like templates and
// what jinja2 renders for them, or that it raised; loom must render the same text or fail too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"
#include "unit/fixed_now.h"

namespace loom::jinja {
namespace {

namespace fs = std::filesystem;

StatusOr<std::string> RenderText(const std::string& text, const Dict& globals) {
  ASSIGN_OR_RETURN(Program program, Parse(text));
  RETURN_IF_ERROR(ValidateNames(program));
  RenderOptions options;
  options.now = FixedNow();
  return Render(program, globals, options);
}

TEST(JinjaRandomTest, EveryVectorMatchesJinja2) {
  std::ifstream in(fs::path(LOOM_FIXTURES) / "chat_templates" / "random_vectors.json");
  std::ostringstream ss;
  ss << in.rdbuf();
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(ss.str());
  std::vector<Dict> contexts;
  for (const auto& c : doc["contexts"]) {
    Dict globals;
    for (const auto& [k, v] : c.items()) globals.Set(k, Value::FromJson(v));
    contexts.push_back(std::move(globals));
  }
  const auto& vectors = doc["vectors"];
  ASSERT_GT(vectors.size(), 1000u);
  size_t failures = 0;
  for (size_t i = 0; i < vectors.size(); ++i) {
    const auto& v = vectors[i];
    const std::string text = v["template"].get<std::string>();
    const Dict& globals = contexts.at(v["context"].get<size_t>());
    StatusOr<std::string> got = RenderText(text, globals);
    std::string why;
    if (v.contains("loom_error")) {  // a feature docs/ARCHITECTURE.md says loom rejects
      const std::string want = v["loom_error"].get<std::string>();
      if (got.ok()) {
        why = "rendered '" + *got + "', want an error naming " + want;
      } else if (got.status().message().find(want) == std::string::npos) {
        why = "error '" + got.status().ToString() + "' does not say " + want;
      }
    } else if (v.contains("error")) {
      const std::string error = v["error"].get<std::string>();
      if (got.ok()) {
        why = "rendered '" + *got + "' but jinja2 raised " + error;
      } else {
        // jinja2's compile-time errors (syntax, unknown names outside an if, Python's own
        // SyntaxError from generated code) are loom's Parse / ValidateNames errors; every other
        // exception comes from running the template, as loom's Render errors must.
        const bool compile_time = error.rfind("TemplateSyntaxError", 0) == 0 ||
                                  error.rfind("TemplateAssertionError", 0) == 0 ||
                                  error.rfind("SyntaxError", 0) == 0;
        StatusOr<Program> program = Parse(text);
        const bool loom_compile_time = !program.ok() || !ValidateNames(*program).ok();
        if (compile_time != loom_compile_time) {
          why = std::string("jinja2 raised ") + (compile_time ? "compiling" : "rendering") +
                " (" + error + ") but loom failed " +
                (loom_compile_time ? "parsing" : "rendering") + " (" + got.status().ToString() +
                ")";
        }
      }
    } else if (!got.ok()) {
      why = "failed (" + got.status().ToString() + ") but jinja2 rendered '" +
            v["expected"].get<std::string>() + "'";
    } else if (*got != v["expected"].get<std::string>()) {
      why =
          "rendered '" + *got + "' but jinja2 rendered '" + v["expected"].get<std::string>() + "'";
    }
    if (!why.empty()) {
      ++failures;
      ADD_FAILURE() << "vector " << i << " (context " << v["context"] << "): " << why
                    << "\n--- template ---\n"
                    << text << "\n----------------";
    }
  }
  EXPECT_EQ(failures, 0u) << "of " << vectors.size() << " vectors";
}

}  // namespace
}  // namespace loom::jinja
