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
      if (got.ok()) {
        why = "rendered '" + *got + "' but jinja2 raised " + v["error"].get<std::string>();
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
