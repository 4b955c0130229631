// base/json: the bounded parse (size, depth pre-scan), typed getters and their messages.
#include "base/json.h"

#include <gtest/gtest.h>

#include <cmath>

#include "adversarial_util.h"

namespace loom {
namespace {

using json = nlohmann::json;
using testing::Contains;

TEST(ParseJson, ValidDocumentsParse) {
  auto j = ParseJson(R"({"a": [1, 2, {"b": "]]]}}}\"[[["}], "c": null})", "t.json");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["a"][2]["b"], "]]]}}}\"[[[");
  auto o = ParseOrderedJson(R"({"z": 1, "a": 2})", "t.json");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->begin().key(), "z");  // file order kept
}

TEST(ParseJson, DeepNestingIsRefusedByThePreScanNamingTheSource) {
  for (const char* open_close : {"[]", "{}"}) {
    std::string deep;
    if (open_close[0] == '[') {
      deep = std::string(200000, '[') + std::string(200000, ']');
    } else {
      for (int i = 0; i < 200000; ++i) deep += "{\"a\":";
      deep += "1" + std::string(200000, '}');
    }
    auto j = ParseJson(deep, "batch.json");
    ASSERT_FALSE(j.ok());
    EXPECT_STATUS(j.status(), StatusCode::kInvalidArgument, "batch.json",
                  "JSON nested deeper than 128 levels", "at byte");
  }
  // Exactly the limit parses; brackets inside strings (also after escaped quotes) do not count.
  EXPECT_TRUE(ParseJson(std::string(128, '[') + std::string(128, ']'), "x").ok());
  EXPECT_FALSE(ParseJson(std::string(129, '[') + std::string(129, ']'), "x").ok());
  const std::string in_string = "[\"\\\"" + std::string(1000, '[') + "\"]";
  EXPECT_TRUE(ParseJson(in_string, "x").ok());
  JsonLimits shallow;
  shallow.max_depth = 2;
  EXPECT_FALSE(ParseJson("[[[1]]]", "x", shallow).ok());
}

TEST(ParseJson, SizeLimitAndSyntaxErrorsAreStatuses) {
  JsonLimits small;
  small.max_bytes = 10;
  EXPECT_STATUS(ParseJson("[1,2,3,4,5,6]", "req", small).status(), StatusCode::kInvalidArgument,
                "req", "13 bytes, above the limit of 10");
  EXPECT_STATUS(ParseJson("{\"a\": ", "cfg.json").status(), StatusCode::kInvalidArgument,
                "cfg.json", "not valid JSON", "column 7");
  EXPECT_STATUS(ParseJson("", "empty").status(), StatusCode::kInvalidArgument, "not valid JSON");
  EXPECT_STATUS(ParseJson("\"\xff\"", "utf8").status(), StatusCode::kInvalidArgument,
                "not valid JSON");
  // nlohmann's message quotes the bytes last read; they come back as printable ASCII.
  const Status bytes = ParseJson("{\"k\": tr\xc3\xa9\xff}", "q.json").status();
  EXPECT_STATUS(bytes, StatusCode::kInvalidArgument, "q.json", "not valid JSON", "\\xc3");
  for (unsigned char c : bytes.message()) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << bytes.message();
  EXPECT_FALSE(ParseJson("[1] [2]", "two").ok());
}

TEST(JsonGetters, IntegersAreRangeCheckedAndNeverWrap) {
  const json j = json::parse(
      R"({"n": 16, "f": 16.0, "half": 16.5, "s": "16", "big": 4294967297, "huge": 18446744073709551615,
          "neg": -3, "b": true, "null": null, "e": 1e300})");
  int64_t v = 0;
  ASSERT_TRUE(GetInt(j, "n", "w.json", &v).ok());
  EXPECT_EQ(v, 16);
  ASSERT_TRUE(GetInt(j, "f", "w.json", &v).ok());
  EXPECT_EQ(v, 16);
  EXPECT_STATUS(GetInt(j, "half", "w.json", &v), StatusCode::kInvalidArgument,
                "w.json: field 'half' must be an integer, got 16.5");
  EXPECT_STATUS(GetInt(j, "s", "w.json", &v), StatusCode::kInvalidArgument,
                "field 's' must be an integer, got \"16\"");
  EXPECT_STATUS(GetInt(j, "b", "w.json", &v), StatusCode::kInvalidArgument, "must be an integer");
  int i32 = 7;
  EXPECT_STATUS(GetInt(j, "big", "w.json", &i32), StatusCode::kInvalidArgument,
                "field 'big' is 4294967297, above the maximum 2147483647");
  EXPECT_EQ(i32, 7);  // unchanged on error
  EXPECT_STATUS(GetInt(j, "huge", "w.json", &v), StatusCode::kInvalidArgument, "above the maximum");
  EXPECT_STATUS(GetInt(j, "e", "w.json", &v), StatusCode::kInvalidArgument, "above the maximum");
  EXPECT_STATUS(GetInt(j, "neg", "w.json", &v, 0, 10), StatusCode::kInvalidArgument,
                "field 'neg' is -3, below the minimum 0");
  EXPECT_STATUS(GetInt(j, "missing", "w.json", &v), StatusCode::kInvalidArgument,
                "w.json: missing required field 'missing'");
  EXPECT_STATUS(GetInt(j, "null", "w.json", &v), StatusCode::kInvalidArgument, "missing required");
  v = 5;
  EXPECT_TRUE(GetOptionalInt(j, "missing", "w.json", &v).ok());
  EXPECT_TRUE(GetOptionalInt(j, "null", "w.json", &v).ok());
  EXPECT_EQ(v, 5);
  EXPECT_STATUS(GetInt(json::array({1}), "n", "w.json", &v), StatusCode::kInvalidArgument,
                "expected a JSON object, got a list");
}

TEST(JsonGetters, FloatsStringsBoolsAndLists) {
  const json j = json::parse(R"({"x": 0.5, "i": 3, "s": "a", "b": false, "ids": [1, 2, 3],
                                 "bad_ids": [1, "2"], "neg_ids": [0, -1], "alpha": "16"})");
  double d = 0;
  ASSERT_TRUE(GetFloat(j, "x", "w", &d).ok());
  EXPECT_EQ(d, 0.5);
  ASSERT_TRUE(GetFloat(j, "i", "w", &d).ok());
  EXPECT_EQ(d, 3.0);
  EXPECT_STATUS(GetFloat(j, "alpha", "adapter_config.json", &d), StatusCode::kInvalidArgument,
                "adapter_config.json: field 'alpha' must be a number, got \"16\"");
  EXPECT_STATUS(GetFloat(j, "x", "w", &d, 1.0, 2.0), StatusCode::kInvalidArgument,
                "below the minimum");
  float temperature = 1.0f;
  ASSERT_TRUE(GetOptionalFloat(j, "x", "request body", &temperature, 0.0, 2.0).ok());
  EXPECT_EQ(temperature, 0.5f);
  EXPECT_STATUS(GetOptionalFloat(json::parse(R"({"t": 1e300})"), "t", "request body", &temperature),
                StatusCode::kInvalidArgument, "field 't'", "above the maximum");
  EXPECT_EQ(temperature, 0.5f);
  std::string s;
  ASSERT_TRUE(GetString(j, "s", "w", &s).ok());
  EXPECT_EQ(s, "a");
  EXPECT_STATUS(GetString(j, "i", "w", &s), StatusCode::kInvalidArgument, "must be a string, got 3");
  bool b = true;
  ASSERT_TRUE(GetBool(j, "b", "w", &b).ok());
  EXPECT_FALSE(b);
  EXPECT_STATUS(GetOptionalBool(j, "s", "w", &b), StatusCode::kInvalidArgument,
                "must be true or false");
  std::vector<int32_t> ids;
  ASSERT_TRUE(GetIntList(j, "ids", "w", &ids, 0, 10).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_STATUS(GetIntList(j, "bad_ids", "w", &ids, 0, 10), StatusCode::kInvalidArgument,
                "field 'bad_ids' entry 1 must be an integer");
  EXPECT_STATUS(GetIntList(j, "neg_ids", "w", &ids, 0, 10), StatusCode::kInvalidArgument,
                "field 'neg_ids' entry 1 is -1, below the minimum 0");
  EXPECT_STATUS(GetIntList(j, "ids", "w", &ids, 0, 10, 2), StatusCode::kInvalidArgument,
                "has 3 entries, above the maximum 2");
  EXPECT_STATUS(GetIntList(j, "s", "w", &ids, 0, 10), StatusCode::kInvalidArgument,
                "must be a list of integers");
  // ordered_json instantiations behave the same.
  const auto o = nlohmann::ordered_json::parse(R"({"n": "x"})");
  int64_t v = 0;
  EXPECT_STATUS(GetInt(o, "n", "o.json", &v), StatusCode::kInvalidArgument, "must be an integer");
}

TEST(JsonToString, InvalidUtf8NeverThrowsAndLongValuesAreCut) {
  json j = std::string("a\xff\xfe b");
  EXPECT_NO_THROW((void)JsonToString(j));
  EXPECT_TRUE(Contains(JsonToString(j), "\xef\xbf\xbd"));  // U+FFFD
  const std::string cut = JsonToString(json(std::string(500, 'x')), -1, 20);
  EXPECT_EQ(cut.size(), 23u);
  EXPECT_TRUE(Contains(cut, "..."));
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// An ordered object's inserts are linear searches: a 200k-member object would take minutes.
TEST(ParseJson, OrderedParseBoundsMembersPerObject) {
  std::string many = "{";
  for (int i = 0; i < 5000; ++i) many += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  many += "}";
  auto ordered = ParseOrderedJson(many, "request body");
  ASSERT_FALSE(ordered.ok());
  EXPECT_NE(ordered.status().message().find("more than 4096 members"), std::string::npos);
  EXPECT_TRUE(ParseJson(many, "tokenizer.json").ok());  // std::map: no such cost
  // Colons inside strings and members of nested objects are not counted against the outer one.
  auto nested = ParseOrderedJson(R"({"a": "x:y:z", "b": {"c": 1, "d": 2}, "e": [1, 2]})", "t",
                                 JsonLimits{1024, 16, 3});
  EXPECT_TRUE(nested.ok()) << nested.status().ToString();
}

TEST(ParseJson, ContainersAndValuesOfTheWholeDocumentAreBounded) {
  // 3 containers ({, [, {}) and 1 + 3 + 5 commas = 9 values at most (the true count is 8: the
  // empty object's first element is counted); commas, brackets and braces inside strings do not.
  const std::string doc = R"({"a": [1, 2, "x,[{", {}], "b": 3, "c": "]}, ,"})";
  JsonLimits limits;
  limits.max_containers = 3;
  limits.max_values = 9;
  EXPECT_TRUE(ParseJson(doc, "t", limits).ok());
  limits.max_containers = 2;
  auto containers = ParseJson(doc, "t", limits);
  ASSERT_FALSE(containers.ok());
  EXPECT_NE(containers.status().message().find("t: more than 2 JSON arrays and objects"),
            std::string::npos)
      << containers.status().message();
  limits.max_containers = 3;
  limits.max_values = 8;
  auto values = ParseOrderedJson(doc, "t", limits);
  ASSERT_FALSE(values.ok());
  EXPECT_NE(values.status().message().find("more than 8 JSON values"), std::string::npos);
  // Many empty arrays in one array: refused on the text, before any is built.
  std::string many = "[";
  for (int i = 0; i < 100000; ++i) many += i ? ",[]" : "[]";
  many += "]";
  limits = JsonLimits{};
  limits.max_containers = 65536;
  EXPECT_FALSE(ParseJson(many, "body", limits).ok());
}

TEST(CountJsonValues, CountsEveryValueAndStopsPastTheBound) {
  const auto j = nlohmann::ordered_json::parse(R"([{"role": "user", "x": [1, [2, 3], {}]}, "s"])");
  // [ {..} role-value x-value 1 [2,3] 2 3 {} "s" = 10
  EXPECT_EQ(CountJsonValues(j, 100), 10);
  EXPECT_EQ(CountJsonValues(j, 4), 5);  // one past the bound, then it stops
  EXPECT_EQ(CountJsonValues(nlohmann::ordered_json(1), 0), 1);
}

}  // namespace
}  // namespace loom
