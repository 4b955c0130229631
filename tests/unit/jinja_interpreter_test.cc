// Jinja interpreter: each construct renders as jinja2 does (snippets.json, made by
// tools/ref/make_chat_vectors.py with transformers' environment), and each error path is an error
// that names the construct and its line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace loom::jinja {
namespace {

namespace fs = std::filesystem;

nlohmann::ordered_json LoadSnippets() {
  std::ifstream in(fs::path(LOOM_FIXTURES) / "chat_templates" / "snippets.json");
  std::ostringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

std::tm FixedNow() {  // 2024-07-26 13:45:00, as the reference pins strftime_now
  std::tm t{};
  t.tm_year = 124;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 13;
  t.tm_min = 45;
  time_t secs = timegm(&t);
  gmtime_r(&secs, &t);
  return t;
}

StatusOr<std::string> RenderText(const std::string& text, const nlohmann::ordered_json& context,
                                 RenderLimits limits = {}) {
  ASSIGN_OR_RETURN(Program program, Parse(text));
  RETURN_IF_ERROR(ValidateNames(program));
  Dict globals;
  for (const auto& [k, v] : context.items()) globals.Set(k, Value::FromJson(v));
  RenderOptions options;
  options.limits = limits;
  options.now = FixedNow();
  return Render(program, globals, options);
}

TEST(JinjaInterpreterTest, SnippetsMatchJinja2) {
  const nlohmann::ordered_json doc = LoadSnippets();
  ASSERT_GT(doc["snippets"].size(), 40u);
  for (const auto& s : doc["snippets"]) {
    const std::string name = s["name"].get<std::string>();
    StatusOr<std::string> got = RenderText(s["template"].get<std::string>(), s["context"]);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    EXPECT_EQ(*got, s["expected"].get<std::string>()) << name;
  }
}

// What loom says for each template jinja2 also rejects (snippets.json "errors").
struct ExpectedError {
  const char* name;
  StatusCode code;
  const char* message;  // exact for raise_exception, a substring otherwise
};

const ExpectedError kErrors[] = {
    {"unknown_filter", StatusCode::kInvalidArgument, "line 2: no filter named 'no_such_filter'"},
    {"unknown_test", StatusCode::kInvalidArgument, "line 1: no test named 'no_such_test'"},
    {"unknown_tag", StatusCode::kInvalidArgument,
     "line 1: syntax error: encountered unknown tag 'frobnicate'"},
    {"unclosed_if", StatusCode::kInvalidArgument,
     "syntax error: unexpected end of template, expected 'elif'"},
    {"unclosed_string", StatusCode::kInvalidArgument, "line 1: syntax error: unterminated string"},
    {"raise_exception", StatusCode::kFailedPrecondition,
     "Conversation roles must alternate user/assistant/user/assistant/..."},
    {"undefined_attribute_chain", StatusCode::kInvalidArgument, "line 1: 'nope' is undefined"},
    {"call_undefined", StatusCode::kInvalidArgument, "line 1: 'nope' is undefined"},
    {"add_str_int", StatusCode::kInvalidArgument,
     "line 1: can only concatenate str (not \"int\") to str"},
    {"iterate_none", StatusCode::kInvalidArgument, "line 1: 'NoneType' object is not iterable"},
    {"tojson_undefined", StatusCode::kInvalidArgument,
     "Object of type Undefined is not JSON serializable"},
    {"list_append_unsafe", StatusCode::kInvalidArgument,
     "access to attribute 'append' of 'list' object is unsafe."},
    {"namespace_underscore", StatusCode::kInvalidArgument,
     "cannot store underscore-prefixed attributes on a namespace, but got '_x'"},
    {"range_too_big", StatusCode::kInvalidArgument,
     "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."},
    {"division_by_zero", StatusCode::kInvalidArgument, "line 1: division by zero"},
    {"compare_int_str", StatusCode::kInvalidArgument,
     "'<' not supported between instances of 'int' and 'str'"},
    {"include_tag", StatusCode::kInvalidArgument,
     "line 1: syntax error: unsupported tag 'include' (loom's chat template interpreter does not "
     "implement it)"},
    {"break_outside_loop", StatusCode::kInvalidArgument,
     "line 1: syntax error: 'break' outside a loop"},
};

TEST(JinjaInterpreterTest, EveryJinja2ErrorIsALoomErrorNamingIt) {
  const nlohmann::ordered_json doc = LoadSnippets();
  size_t checked = 0;
  for (const auto& s : doc["errors"]) {
    const std::string name = s["name"].get<std::string>();
    const ExpectedError* want = nullptr;
    for (const ExpectedError& e : kErrors) {
      if (name == e.name) want = &e;
    }
    ASSERT_NE(want, nullptr) << "no expectation for error snippet " << name;
    StatusOr<std::string> got = RenderText(s["template"].get<std::string>(), s["context"]);
    ASSERT_FALSE(got.ok()) << name << " rendered '" << *got << "' but jinja2 says "
                           << s["jinja2_error"].get<std::string>();
    EXPECT_EQ(got.status().code(), want->code) << name << ": " << got.status().ToString();
    if (want->code == kRaisedCode) {
      EXPECT_EQ(got.status().message(), want->message) << name;
    } else {
      EXPECT_NE(got.status().message().find(want->message), std::string::npos)
          << name << ": " << got.status().message();
    }
    ++checked;
  }
  EXPECT_EQ(checked, sizeof(kErrors) / sizeof(kErrors[0]));
}

TEST(JinjaInterpreterTest, UnknownFilterIsRejectedEvenWhenNotExecuted) {
  // jinja2 checks filter names at compile time.
  StatusOr<std::string> r = RenderText("{% if false %}\n\n{{ x | nope }}{% endif %}", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "line 3: no filter named 'nope'");
}

TEST(JinjaInterpreterTest, RuntimeErrorsNameTheInnermostLine) {
  StatusOr<std::string> r = RenderText(
      "{% macro m(x) %}\n{{ x + 1 }}\n{% endmacro %}\n{{ m('a') }}", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "line 2: can only concatenate str (not \"int\") to str");
}

TEST(JinjaInterpreterTest, SyntaxErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"a\nb\n{{ 1 + }}", "line 3: syntax error: unexpected end of print statement '}}'"},
      {"{% for x in %}{% endfor %}", "line 1: syntax error"},
      {"{% endif %}", "line 1: syntax error: encountered unknown tag 'endif'"},
      {"{{ (1, 2 }}", "line 1: syntax error: unexpected '}'"},
      {"\n{% macro f(a=1, b) %}{% endmacro %}", "line 2: syntax error: non-default argument"},
      {"{% call foo() %}{% endcall %}", "unsupported tag 'call'"},
      {"{% extends 'base' %}", "unsupported tag 'extends'"},
      {"{# never closed", "line 1: syntax error: missing end of comment tag"},
      {"{% raw %} never closed", "line 1: syntax error: missing end of raw directive"},
      {"{{ f(*args) }}", "unsupported: *args / **kwargs in calls"},
      {"{% for x in y recursive %}{% endfor %}", "unsupported: recursive for loops"},
      {"{{ 1 @ 2 }}", "line 1: syntax error: unexpected char '@'"},
  };
  for (const Case& c : cases) {
    StatusOr<Program> p = Parse(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_NE(p.status().message().find(c.message), std::string::npos)
        << c.text << " → " << p.status().message();
  }
}

TEST(JinjaInterpreterTest, MacroArgumentErrors) {
  StatusOr<std::string> r = RenderText("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", {});
  EXPECT_NE(r.status().message().find("macro 'f' takes not more than 1 argument(s)"),
            std::string::npos);
  r = RenderText("{% macro f(a) %}{% endmacro %}{{ f(b=1) }}", {});
  EXPECT_NE(r.status().message().find("macro 'f' takes no keyword argument 'b'"),
            std::string::npos);
}

TEST(JinjaInterpreterTest, SetOnNonNamespaceIsAnError) {
  StatusOr<std::string> r = RenderText("{% set d = {} %}{% set d.x = 1 %}", {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot assign attribute on non-namespace object 'd'"),
            std::string::npos);
}

}  // namespace
}  // namespace loom::jinja
