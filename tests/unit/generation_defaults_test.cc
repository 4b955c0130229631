// LoadGenerationDefaults: generation_config.json's recommended sampling as vLLM takes it (a real
// model's file, transformers' to_diff_dict no-ops, --generation-config modes, the override and
// its cap), every bad value an error naming the source and the field, and Apply's given set.
#include "engine/generation_defaults.h"

#include <gtest/gtest.h>

#include "adversarial_util.h"

namespace loom {
namespace {

using testing::kFixtures;
using testing::TempDir;
using testing::WriteBytes;

TEST(GenerationDefaults, ARealInstructModelsRecommendedSampling) {
  // Llama-3.2-3B-Instruct's file: do_sample, temperature 0.6, top_p 0.9, max_length (not a
  // sampling field vLLM takes).
  const std::string dir = kFixtures + "/shared/model_configs/Llama-3.2-3B-Instruct-unsloth-merged";
  auto d = LoadGenerationDefaults("auto", dir, "");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_TRUE(d->temperature && d->top_p);
  EXPECT_FLOAT_EQ(*d->temperature, 0.6f);
  EXPECT_FLOAT_EQ(*d->top_p, 0.9f);
  EXPECT_FALSE(d->top_k || d->min_p || d->repetition_penalty || d->max_tokens || d->max_tokens_cap);
  EXPECT_EQ(d->Describe(), "temperature=0.6, top_p=0.9");
  // --generation-config vllm: none; a folder without the file under auto: none.
  auto off = LoadGenerationDefaults("vllm", dir, "");
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->empty());
  TempDir empty;
  auto none = LoadGenerationDefaults("auto", empty.path(), "");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
}

TEST(GenerationDefaults, TransformersDefaultsAreNoOpsAndAFolderCaps) {
  TempDir t;
  WriteBytes(t.Path("generation_config.json"),
             R"({"temperature": 1.0, "top_k": 50, "top_p": 0.8, "min_p": 0.05,
                 "repetition_penalty": 1.05, "max_new_tokens": 256, "do_sample": true})");
  auto d = LoadGenerationDefaults("auto", t.path(), "");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->temperature) << "1.0 is GenerationConfig's default: to_diff_dict drops it";
  EXPECT_FALSE(d->top_k) << "50 is GenerationConfig's default";
  EXPECT_FLOAT_EQ(*d->top_p, 0.8f);
  EXPECT_FLOAT_EQ(*d->min_p, 0.05f);
  EXPECT_FLOAT_EQ(*d->repetition_penalty, 1.05f);
  EXPECT_EQ(*d->max_tokens, 256);
  EXPECT_FALSE(d->max_tokens_cap) << "auto: the file's max_new_tokens is a default, not a cap";
  // The same file named by --generation-config DIR: its max_new_tokens also caps.
  auto folder = LoadGenerationDefaults(t.path(), "/nonexistent-model", "");
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  EXPECT_EQ(*folder->max_tokens_cap, 256);
  // The override is laid over as given (1.0 counts there) and its max_new_tokens caps.
  auto o = LoadGenerationDefaults("auto", t.path(), R"({"temperature": 1.0, "top_k": 50,
                                                         "max_new_tokens": 64})");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_FLOAT_EQ(*o->temperature, 1.0f);
  EXPECT_EQ(*o->top_k, 50);
  EXPECT_EQ(*o->max_tokens, 64) << "the override's max_new_tokens is chat's default too";
  EXPECT_EQ(*o->max_tokens_cap, 64);
  // A null in the override removes the file's value (vLLM drops None after the update).
  auto n = LoadGenerationDefaults("auto", t.path(), R"({"top_p": null, "max_new_tokens": null})");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_FALSE(n->top_p || n->max_tokens || n->max_tokens_cap);
  EXPECT_FLOAT_EQ(*n->min_p, 0.05f);
}

TEST(GenerationDefaults, BadValuesNameTheSourceAndTheField) {
  TempDir t;
  struct Case {
    const char* file;      // generation_config.json, or null
    const char* override;  // --override-generation-config
    const char* mode;
    const char* want1;
    const char* want2;
  } cases[] = {
      {R"({"temperature": 101})", "", "auto", "generation_config.json", "temperature"},
      {R"({"top_k": "x"})", "", "auto", "generation_config.json", "top_k"},
      {R"({"top_p": 0})", "", "auto", "generation_config.json", "top_p"},
      {R"({"max_new_tokens": 0})", "", "auto", "generation_config.json", "max_new_tokens"},
      {R"({"max_new_tokens": 1e12})", "", "auto", "generation_config.json", "max_new_tokens"},
      {R"([1])", "", "auto", "generation_config.json", "object"},
      {R"({"temperature": )", "", "auto", "generation_config.json", ""},
      {nullptr, R"({"temprature": 0.5})", "auto", "--override-generation-config", "temprature"},
      {nullptr, R"([0.5])", "auto", "--override-generation-config", "object"},
      {nullptr, R"({"repetition_penalty": 0})", "auto", "--override-generation-config",
       "repetition_penalty"},
      {nullptr, "", "/nonexistent-folder", "--generation-config", "generation_config.json"},
      {nullptr, "", "", "--generation-config", "auto"},
  };
  for (const auto& c : cases) {
    std::filesystem::remove(t.Path("generation_config.json"));
    if (c.file) WriteBytes(t.Path("generation_config.json"), c.file);
    auto d = LoadGenerationDefaults(c.mode, t.path(), c.override);
    ASSERT_FALSE(d.ok()) << (c.file ? c.file : c.override);
    const std::string& m = d.status().message();
    EXPECT_NE(m.find(c.want1), std::string::npos) << m;
    EXPECT_NE(m.find(c.want2), std::string::npos) << m;
  }
  // The file itself given where a folder is meant (its path + "/generation_config.json" failed
  // with "a part of the path is not a folder").
  WriteBytes(t.Path("generation_config.json"), R"({"temperature": 0.5})");
  auto d = LoadGenerationDefaults(t.Path("generation_config.json"), t.path(), "");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("--generation-config " + t.Path("generation_config.json") + ": not a folder"),
            std::string::npos) << d.status().message();
}

TEST(GenerationDefaults, ApplyFillsOnlyWhatTheRequestLeftUnset) {
  GenerationDefaults d;
  d.temperature = 0.6f;
  d.top_p = 0.9f;
  d.top_k = 20;
  d.min_p = 0.1f;
  d.repetition_penalty = 1.1f;
  SamplingParams p;
  p.temperature = 0;  // the request's: set
  p.top_k = 5;        // the request's: set
  d.Apply(
      [](const char* f) { return std::string(f) == "temperature" || std::string(f) == "top_k"; },
      &p);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_k, 5);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_FLOAT_EQ(p.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
}

}  // namespace
}  // namespace loom
