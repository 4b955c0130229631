// Tests of adapter_config.json's module selection as PEFT's check_target_module_exists (target /
// exclude / layer rules) and of rank_pattern / alpha_pattern and the scale.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "lora/lora_config.h"
#include "unit/lora_config_util.h"

namespace loom {
namespace {

// ---------------------------------------------------------------------------------------
// Which modules: PEFT's check_target_module_exists.

// File text reaches a message clipped to 200 bytes and with control bytes escaped: a 16 MB
// peft_type made a 16 MB 400 body, and an ESC byte reached the terminal reading the log.
TEST(LoraConfigTest, FileTextInMessagesIsClippedAndEscaped) {
  const std::string text = "\x1b]0;pwned\x07" + std::string(1 << 20, 'q');
  for (const char* field : {"peft_type", "init_lora_weights", "bias"}) {
    ojson patch = {{field, text}};
    auto c = ParseLoraConfig(Config(patch), kWhere);
    ASSERT_FALSE(c.ok()) << field;
    const std::string& m = c.status().message();
    EXPECT_LT(m.size(), 500u) << field;
    EXPECT_EQ(m.find('\x1b'), std::string::npos) << field;
    EXPECT_TRUE(Contains(m, std::string(field) + " '\\x1b]0;pwned\\x07qqq") ||
                Contains(m, std::string(field) + " \\x1b]0;pwned\\x07qqq"))
        << m.substr(0, 300);
  }
  const std::string key = "\x1b[2J" + std::string(100000, 'k');
  auto c = ParseLoraConfig(Config({{"rank_pattern", {{key, "4"}}}}), kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_LT(c.status().message().size(), 300u);
  EXPECT_TRUE(Contains(c.status().message(), "rank_pattern value for '\\x1b[2Jkkk"));
}

// layers_to_transform is bounded (a model has at most hundreds of layers), and so is every list
// before the JSON is built: 16 MB of "0," was a 5.4M-entry list and 318 MB of memory.
TEST(LoraConfigTest, LayersToTransformAndListsAreBounded) {
  std::vector<int> many(70000, 1);
  auto c = ParseLoraConfig(Config({{"layers_to_transform", many}}), kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(
      Contains(c.status().message(), "layers_to_transform has 70000 entries, more than 65536"));
  std::string huge =
      R"({"peft_type": "LORA", "target_modules": ["q_proj"], "layers_to_transform": [)";
  for (int i = 0; i < 5400000; ++i) huge += i ? ",0" : "0";
  huge += "]}";
  c = ParseLoraConfig(huge, kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "a JSON array has more than 1048576 elements"));
  MustParse(Config({{"layers_to_transform", std::vector<int>(65536, 2)}}));
  // Each layers_pattern entry is a compiled regex: 64 at most (a 4 MB list was ~1 M compiles).
  std::vector<std::string> patterns(64, "layers");
  MustParse(Config({{"layers_to_transform", 1}, {"layers_pattern", patterns}}));
  patterns.push_back("h");
  c = ParseLoraConfig(Config({{"layers_to_transform", 1}, {"layers_pattern", patterns}}), kWhere);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "layers_pattern has 65 entries, more than 64"));
}

TEST(LoraConfigTargetsTest, ListMatchesExactPathOrDottedSuffix) {
  LoraConfig c = MustParse(Config({{"target_modules", {"q_proj", "model.layers.1.mlp.up_proj"}}}));
  EXPECT_TRUE(c.Targets("model.layers.0.self_attn.q_proj", kLinearNames));
  EXPECT_TRUE(c.Targets("q_proj", kLinearNames));  // equal to an entry
  EXPECT_TRUE(c.Targets("model.layers.1.mlp.up_proj", kLinearNames));
  EXPECT_FALSE(c.Targets("model.layers.2.mlp.up_proj", kLinearNames));
  EXPECT_FALSE(c.Targets("model.layers.0.self_attn.xq_proj", kLinearNames));  // not after a dot
  EXPECT_FALSE(c.Targets("model.layers.0.self_attn.q_proj.base_layer", kLinearNames));
  EXPECT_FALSE(c.Targets("model.layers.0.self_attn.k_proj", kLinearNames));
  EXPECT_FALSE(c.Targets("lm_head", kLinearNames));
  // A suffix of several segments.
  LoraConfig s = MustParse(Config({{"target_modules", {"self_attn.v_proj"}}}));
  EXPECT_TRUE(s.Targets("model.layers.3.self_attn.v_proj", kLinearNames));
  EXPECT_FALSE(s.Targets("model.layers.3.mlp.v_proj", kLinearNames));
}

TEST(LoraConfigTargetsTest, RegexStringMustMatchTheWholePath) {
  LoraConfig c =
      MustParse(Config({{"target_modules", "model\\.layers\\.[01]\\.self_attn\\.(q|v)_proj"}}));
  ASSERT_TRUE(c.target_regex.has_value());
  EXPECT_TRUE(c.Targets("model.layers.0.self_attn.q_proj", kLinearNames));
  EXPECT_TRUE(c.Targets("model.layers.1.self_attn.v_proj", kLinearNames));
  EXPECT_FALSE(c.Targets("model.layers.2.self_attn.q_proj", kLinearNames));
  EXPECT_FALSE(c.Targets("model.layers.0.self_attn.k_proj", kLinearNames));
  EXPECT_FALSE(
      c.Targets("model.layers.10.self_attn.q_proj", kLinearNames));  // fullmatch, not search
  // A bare name as a regex is a full match too: it matches no module path.
  LoraConfig bare = MustParse(Config({{"target_modules", "q_proj"}}));
  EXPECT_TRUE(Targeted(bare, 2).empty());
  LoraConfig any = MustParse(Config({{"target_modules", ".*q_proj"}}));
  EXPECT_EQ(Targeted(any, 2).size(), 2u);
}

// PEFT's LoraConfig.__post_init__ refuses layers_to_transform / layers_pattern (any non-null
// value, [] included) with a string target_modules, "all-linear" included: loom ignored them.
TEST(LoraConfigTargetsTest, LayerFiltersWithAStringTargetAreRefused) {
  for (const char* target : {".*\\.q_proj", "all-linear"}) {
    for (const char* key : {"layers_to_transform", "layers_pattern"}) {
      for (const ojson& value : {ojson(0), ojson::array(), ojson("layers")}) {
        // Values of each key's own type (a wrong type is its own error, checked first).
        if (std::string(key) == "layers_to_transform" ? value.is_string() : value.is_number())
          continue;
        auto parsed = ParseLoraConfig(Config({{"target_modules", target}, {key, value}}), "cfg");
        ASSERT_FALSE(parsed.ok()) << target << " " << key << " " << value.dump();
        EXPECT_NE(parsed.status().message().find(std::string(key) + " cannot be used when "
                                                                    "target_modules is a string"),
                  std::string::npos)
            << parsed.status().message();
      }
    }
  }
  // Null is PEFT's default: accepted.
  EXPECT_TRUE(ParseLoraConfig(Config({{"target_modules", "all-linear"},
                                      {"layers_to_transform", nullptr},
                                      {"layers_pattern", nullptr}}),
                              "cfg")
                  .ok());
}

// PEFT 0.21's check_target_module_exists takes the FIRST numbered segment (lazy `.*?`), or the
// first after a layers_pattern: the layer index, not an expert index after it (loom followed the
// greedy regex of older PEFT, which compared the expert index; checked against PEFT 0.21.2's
// function on these paths).
TEST(LoraConfigTargetsTest, LayerIndexIsTheFirstNumberedSegmentAsPeft) {
  const std::vector<std::string> names = {"w1"};
  LoraConfig c = MustParse(Config({{"target_modules", {"w1"}}, {"layers_to_transform", {5}}}));
  EXPECT_FALSE(c.Targets("model.layers.3.mlp.experts.5.w1", names));
  EXPECT_TRUE(c.Targets("model.layers.5.mlp.experts.3.w1", names));
  // Two segments before the number and one after (`.*\.[^.]*\.(\d+)\.`): "layers.5.w1" has
  // no index, "x.layers.5" neither.
  EXPECT_FALSE(c.Targets("layers.5.w1", names));
  LoraConfig p = MustParse(Config(
      {{"target_modules", {"w1"}}, {"layers_to_transform", {3}}, {"layers_pattern", "layers"}}));
  EXPECT_TRUE(p.Targets("model.layers.3.mlp.experts.5.w1", names));
  EXPECT_FALSE(p.Targets("model.layers.5.mlp.experts.3.w1", names));
  // A dotted pattern: the text before the number, after a dot (its dots match any character).
  LoraConfig dotted = MustParse(Config({{"target_modules", {"w1"}},
                                        {"layers_to_transform", {3}},
                                        {"layers_pattern", "model.layers"}}));
  EXPECT_TRUE(dotted.Targets("base.model.layers.3.mlp.w1", names));
  EXPECT_FALSE(dotted.Targets("base.other.layers.3.mlp.w1", names));
  EXPECT_TRUE(dotted.Targets("model.layers.3.mlp.w1", names));  // (?:^|…): at the start too
}

TEST(LoraConfigTargetsTest, LayerIndexPastAnyIntIsNoLayer) {
  LoraConfig c = MustParse(Config({{"target_modules", {"q_proj"}}, {"layers_to_transform", {0}}}));
  EXPECT_TRUE(c.Targets("model.layers.0.self_attn.q_proj", kLinearNames));
  EXPECT_FALSE(c.Targets("model.layers.99999999999999999999.self_attn.q_proj", kLinearNames));
}

TEST(LoraConfigTargetsTest, AllLinearIsEveryProjectionButNotLmHeadOrEmbedding) {
  for (const char* spelling : {"all-linear", "ALL-LINEAR"}) {  // PEFT lowercases it
    SCOPED_TRACE(spelling);
    LoraConfig c = MustParse(Config({{"target_modules", spelling}}));
    EXPECT_TRUE(c.all_linear);
    const auto t = Targeted(c, 3);
    EXPECT_EQ(t.size(), 21u);
    EXPECT_FALSE(t.count("lm_head"));
    EXPECT_FALSE(t.count("model.embed_tokens"));
    EXPECT_TRUE(t.count("model.layers.2.mlp.down_proj"));
  }
}

TEST(LoraConfigTargetsTest, ExcludeListAndRegexWinOverTargets) {
  LoraConfig l =
      MustParse(Config({{"target_modules", "all-linear"},
                        {"exclude_modules", {"down_proj", "model.layers.0.self_attn.q_proj"}}}));
  EXPECT_FALSE(l.Targets("model.layers.1.mlp.down_proj", kLinearNames));
  EXPECT_FALSE(l.Targets("model.layers.0.self_attn.q_proj", kLinearNames));
  EXPECT_TRUE(l.Targets("model.layers.1.self_attn.q_proj", kLinearNames));
  EXPECT_EQ(Targeted(l, 2).size(), 14u - 2u - 1u);

  LoraConfig r =
      MustParse(Config({{"target_modules", {"q_proj", "model.layers.1.self_attn.v_proj"}},
                        {"exclude_modules", ".*\\.layers\\.1\\..*"}}));
  EXPECT_TRUE(r.Targets("model.layers.0.self_attn.q_proj", kLinearNames));
  EXPECT_FALSE(r.Targets("model.layers.1.self_attn.q_proj", kLinearNames));
  EXPECT_FALSE(r.Targets("model.layers.1.self_attn.v_proj", kLinearNames));  // even an exact target
  // An exclude regex is a full match as well.
  LoraConfig partial = MustParse(Config({{"exclude_modules", "layers\\.1"}}));
  EXPECT_TRUE(partial.Targets("model.layers.1.self_attn.q_proj", kLinearNames));
}

// PEFT matches re.match(rf".*\.{layers_pattern}\.(\d+)\.", path) and takes group 1 as the layer:
// "lay.rs" and "(?:layers|h)" find layer 3 there, where loom compared literal text and found
// none (nothing targeted). Patterns PEFT fails on are refused, each with its reason.
TEST(LoraConfigTargetsTest, LayersPatternIsARegexAsInPeft) {
  const std::vector<std::string> names = {"q_proj"};
  for (const char* pattern : {"lay.rs", "(?:layers|h)", "l[a-z]+", "layers?"}) {
    LoraConfig c = MustParse(Config({{"target_modules", {"q_proj"}},
                                     {"layers_to_transform", {3}},
                                     {"layers_pattern", pattern}}));
    EXPECT_TRUE(c.Targets("model.layers.3.self_attn.q_proj", names)) << pattern;
    EXPECT_FALSE(c.Targets("model.layers.4.self_attn.q_proj", names)) << pattern;
  }
  const std::vector<std::pair<const char*, const char*>> refused = {
      // group(1) is "layers" (int() fails), or None on the left of the |.
      {"(layers)", "layers_pattern '(layers)' has a capturing group"},
      {"layers|h", "layers_pattern 'layers|h' has a | outside any group"},
      {"lay(?i)ers", "global flags not at the start of the expression"},
      {"lay(ers", "missing ), unterminated subpattern"},
  };
  for (const auto& [pattern, why] : refused) {
    auto c = ParseLoraConfig(Config({{"target_modules", {"q_proj"}},
                                     {"layers_to_transform", {3}},
                                     {"layers_pattern", {"h", pattern}}}),
                             kWhere);
    ASSERT_FALSE(c.ok()) << pattern;
    EXPECT_TRUE(Contains(c.status().message(), why));
    EXPECT_TRUE(Contains(c.status().message(), "layers_pattern"));
  }
}

TEST(LoraConfigTargetsTest, LayersToTransformIntOrListWithAndWithoutPattern) {
  const std::string q = "model.layers.%.self_attn.q_proj";
  auto path = [&](int layer) {
    std::string p = q;
    return p.replace(p.find('%'), 1, std::to_string(layer));
  };
  LoraConfig one = MustParse(Config({{"layers_to_transform", 1}}));
  EXPECT_EQ(one.layers_to_transform, std::vector<int>{1});
  EXPECT_FALSE(one.Targets(path(0), kLinearNames));
  EXPECT_TRUE(one.Targets(path(1), kLinearNames));
  EXPECT_FALSE(one.Targets(path(11), kLinearNames));  // a whole segment, not a prefix
  EXPECT_EQ(Targeted(one, 4).size(), 2u);             // q and v of layer 1

  LoraConfig list = MustParse(Config({{"layers_to_transform", {0, 2}}}));
  EXPECT_TRUE(list.Targets(path(0), kLinearNames));
  EXPECT_FALSE(list.Targets(path(1), kLinearNames));
  EXPECT_TRUE(list.Targets(path(2), kLinearNames));

  LoraConfig pattern =
      MustParse(Config({{"layers_to_transform", {0, 2}}, {"layers_pattern", "layers"}}));
  EXPECT_EQ(Targeted(pattern, 4), Targeted(list, 4));
  LoraConfig patterns =
      MustParse(Config({{"layers_to_transform", {2}}, {"layers_pattern", {"h", "layers"}}}));
  EXPECT_EQ(Targeted(patterns, 4), (std::set<std::string>{"model.layers.2.self_attn.q_proj",
                                                          "model.layers.2.self_attn.v_proj"}));
  // A pattern naming no segment of the path: no layer index, so nothing is targeted (PEFT).
  LoraConfig wrong = MustParse(Config({{"layers_to_transform", {0, 1}}, {"layers_pattern", "h"}}));
  EXPECT_TRUE(Targeted(wrong, 2).empty());
  // An empty list means every layer.
  LoraConfig empty = MustParse(Config({{"layers_to_transform", ojson::array()}}));
  EXPECT_EQ(Targeted(empty, 3).size(), 6u);
  // A module listed by its full path is targeted whatever the layer list says (PEFT: `key in
  // target_modules` comes first).
  LoraConfig exact =
      MustParse(Config({{"target_modules", {"model.layers.0.self_attn.q_proj", "v_proj"}},
                        {"layers_to_transform", {1}}}));
  EXPECT_EQ(Targeted(exact, 3), (std::set<std::string>{"model.layers.0.self_attn.q_proj",
                                                       "model.layers.1.self_attn.v_proj"}));
}

// ---------------------------------------------------------------------------------------
// rank_pattern / alpha_pattern and the scale.

TEST(LoraConfigPatternTest, FirstKeyInFileOrderWins) {
  // Keys deliberately not in sorted order: a sorted map would try the full path first.
  const std::string text = R"({
    "peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": "all-linear",
    "rank_pattern": {
      "v_proj": 4,
      "model.layers.0.self_attn.v_proj": 2,
      "^layers.1.mlp.down_proj": 12,
      "layers.1.mlp.down_proj": 3,
      "^model.layers.2.mlp.down_proj": 6,
      "proj": 1
    },
    "alpha_pattern": {"self_attn.v_proj": 5, "v_proj": 7, "model.layers.0.mlp.up_proj": 40}
  })";
  LoraConfig c = MustParse(text);
  ASSERT_EQ(c.rank_pattern.size(), 6u);
  EXPECT_EQ(c.rank_pattern[0].first.pattern(), "(.*\\.)?(v_proj)$");  // file order kept
  EXPECT_EQ(c.RankFor("model.layers.0.self_attn.v_proj"), 4);  // "v_proj" comes first in the file
  EXPECT_EQ(c.RankFor("model.layers.5.self_attn.v_proj"), 4);
  // "^" anchors at the start of the path: "^layers.1..." cannot match "model.layers.1...".
  EXPECT_EQ(c.RankFor("model.layers.1.mlp.down_proj"), 3);
  EXPECT_EQ(c.RankFor("model.layers.2.mlp.down_proj"), 6);
  // A key matches whole trailing segments: "proj" does not match "q_proj".
  EXPECT_EQ(c.RankFor("model.layers.0.self_attn.q_proj"), 8);
  EXPECT_EQ(c.RankFor("model.layers.3.mlp.down_proj"), 8);

  EXPECT_DOUBLE_EQ(c.AlphaFor("model.layers.0.self_attn.v_proj"), 5);
  EXPECT_DOUBLE_EQ(c.AlphaFor("model.layers.0.mlp.up_proj"), 40);
  EXPECT_DOUBLE_EQ(c.AlphaFor("model.layers.1.mlp.up_proj"), 16);
  EXPECT_DOUBLE_EQ(c.AlphaFor("model.layers.0.self_attn.q_proj"), 16);

  // scale = alpha_for / rank_for, each from its own pattern.
  EXPECT_DOUBLE_EQ(c.ScaleFor("model.layers.0.self_attn.v_proj"), 5.0 / 4.0);
  EXPECT_DOUBLE_EQ(c.ScaleFor("model.layers.2.mlp.down_proj"), 16.0 / 6.0);
  EXPECT_DOUBLE_EQ(c.ScaleFor("model.layers.0.mlp.up_proj"), 40.0 / 8.0);
  EXPECT_DOUBLE_EQ(c.ScaleFor("model.layers.0.self_attn.q_proj"), 2.0);
}

TEST(LoraConfigPatternTest, ReversedFileOrderGivesTheOtherRank) {
  // The same two keys as above in the other order: now the full path wins for layer 0.
  LoraConfig c = MustParse(R"({"peft_type": "LORA", "r": 8, "target_modules": ["v_proj"],
      "rank_pattern": {"model.layers.0.self_attn.v_proj": 2, "v_proj": 4}})");
  EXPECT_EQ(c.RankFor("model.layers.0.self_attn.v_proj"), 2);
  EXPECT_EQ(c.RankFor("model.layers.1.self_attn.v_proj"), 4);
}

TEST(LoraConfigPatternTest, RsloraScaleIsAlphaOverSqrtRank) {
  LoraConfig plain = MustParse(Config({{"r", 16}, {"lora_alpha", 32}}));
  EXPECT_DOUBLE_EQ(plain.ScaleFor("model.layers.0.self_attn.q_proj"), 2.0);
  LoraConfig rs = MustParse(Config({{"r", 16},
                                    {"lora_alpha", 32},
                                    {"use_rslora", true},
                                    {"rank_pattern", {{"v_proj", 4}}},
                                    {"alpha_pattern", {{"v_proj", 10}}}}));
  EXPECT_DOUBLE_EQ(rs.ScaleFor("model.layers.0.self_attn.q_proj"), 32.0 / 4.0);
  EXPECT_DOUBLE_EQ(rs.ScaleFor("model.layers.0.self_attn.v_proj"), 10.0 / 2.0);
  LoraConfig odd = MustParse(Config({{"r", 8}, {"lora_alpha", 16}, {"use_rslora", true}}));
  EXPECT_DOUBLE_EQ(odd.ScaleFor("model.layers.0.self_attn.q_proj"), 16.0 / std::sqrt(8.0));
}

}  // namespace
}  // namespace loom
