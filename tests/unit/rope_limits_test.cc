// RoPE values that pass the config's checks (> 0 in double) but underflow in float: the model
// loaded and every request failed at its first token (NaN logits). Now refused at load.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "adversarial_util.h"
#include "model/model.h"

namespace loom {
namespace {

using namespace loom::testing;
using nlohmann::json;

// `fixture` copied to a temporary folder with `edit` applied to its config.json; Model::Load's status.
Status LoadEdited(const std::string& fixture, const std::function<void(json&)>& edit) {
  TempDir tmp;
  const std::string dir = tmp.Path("m");
  CopyDir(std::string(LOOM_FIXTURES) + "/models/" + fixture, dir);
  json config = json::parse(ReadBytes(dir + "/config.json"));
  edit(config);
  WriteBytes(dir + "/config.json", config.dump());
  auto m = Model::Load(dir);
  return m.ok() ? OkStatus() : m.status();
}

TEST(RopeLimits, FrequenciesThatUnderflowInFloatAreRefusedAtLoad) {
  EXPECT_TRUE(LoadEdited("llama_f32", [](json&) {}).ok());
  for (const auto& edit : std::vector<std::function<void(json&)>>{
           [](json& c) { c["rope_parameters"]["rope_theta"] = 1e-300; },
           [](json& c) { c["rope_parameters"]["factor"] = 1e-300; },
           [](json& c) {
             c["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 1e-300}, {"rope_theta", 10000.0}};
           },
       }) {
    Status st = LoadEdited("llama_f32", edit);
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(Contains(st.message(), "config.json: the RoPE parameters")) << st.message();
  }
}

TEST(RopeLimits, LongRopeAttentionFactorMustBeFinite) {
  EXPECT_TRUE(LoadEdited("phi3_f32", [](json&) {}).ok());
  Status st = LoadEdited("phi3_f32", [](json& c) {
    if (c.contains("rope_parameters") && c["rope_parameters"].contains("original_max_position_embeddings")) {
      c["rope_parameters"]["original_max_position_embeddings"] = 1;
    }
    c["original_max_position_embeddings"] = 1;
  });
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Contains(st.message(), "RoPE attention factor")) << st.message();
}

}  // namespace
}  // namespace loom
