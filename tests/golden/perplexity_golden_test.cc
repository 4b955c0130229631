// Golden: `loom perplexity` (ComputePerplexity) equals transformers' windowed perplexity (tools/ref/make_perplexity.py) on fixture models, and refuses bad input by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/perplexity.h"
#include "golden/golden_util.h"
#include "model/model.h"

namespace loom {
namespace {

nlohmann::json Reference() {
  std::ifstream in(std::string(LOOM_FIXTURES) + "/golden/perplexity.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// Mean NLL relative tolerance. Per logit, f32 weights match transformers within 1e-4 and bf16
// weights (loom's default single bf16 rounding of activations) within 2e-3 (golden_util); over
// 393 scored tokens these errors mostly cancel in the mean NLL (~9.8 nats). Measured relative
// difference: 3e-9 (f32), ≤ 1e-7 (bf16). Bounds: 1e-6 and 1e-5.
TEST(PerplexityGolden, EqualsTransformersWindowedPerplexity) {
  const nlohmann::json ref = Reference();
  const std::vector<int32_t> tokens = ref["tokens"].get<std::vector<int32_t>>();
  const int ctx = ref["ctx"].get<int>();
  for (const auto& [name, want] : ref["models"].items()) {
    SCOPED_TRACE(name);
    auto model = Model::Load(std::string(LOOM_FIXTURES) + "/models/" + name);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    auto got = ComputePerplexity(model->get(), tokens, ctx);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->predicted, want["predicted"].get<int64_t>());
    EXPECT_EQ(got->windows, want["windows"].get<int64_t>());
    const double want_mean = want["nll_sum"].get<double>() / want["predicted"].get<double>();
    const double got_mean = got->nll_sum / static_cast<double>(got->predicted);
    const double tol = name.ends_with("f32") ? 1e-6 : 1e-5;  // measured 3e-9 and ≤ 1e-7
    EXPECT_NEAR(got_mean / want_mean, 1.0, tol) << "loom " << got_mean << " transformers " << want_mean;
    std::printf("%s: mean NLL loom %.6f transformers %.6f (relative %.2e), perplexity %.2f / %.2f\n",
                name.c_str(), got_mean, want_mean, std::fabs(got_mean / want_mean - 1),
                got->Perplexity(), want["perplexity"].get<double>());
  }
}

TEST(PerplexityGolden, RefusesBadInput) {
  auto model = Model::Load(std::string(LOOM_FIXTURES) + "/models/llama_f32");
  ASSERT_TRUE(model.ok());
  auto r = ComputePerplexity(model->get(), {1, 2, 3}, 1);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--ctx 1"), std::string::npos) << r.status().message();
  r = ComputePerplexity(model->get(), {1}, 64);
  EXPECT_NE(r.status().message().find("at least 2 tokens"), std::string::npos);
  r = ComputePerplexity(model->get(), {1, 2, 300}, 64);
  EXPECT_NE(r.status().message().find("token 300 at position 2"), std::string::npos);
  r = ComputePerplexity(model->get(), {1, 2, 3}, 100000);
  EXPECT_NE(r.status().message().find("exceeds the model's 512 positions"), std::string::npos);
}

// The CLI on the bundled demo model (a real tokenizer): text in, perplexity out; --quantize and
// a pre-quantized folder are honoured (int8 differs from bf16), --per-token writes every NLL.
TEST(PerplexityGolden, CliOnTheDemoModel) {
  const std::string demo = std::string(LOOM_FIXTURES) + "/../../models/demo";
  char tmpl[] = "/tmp/loom_ppl_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    std::ofstream text(dir + "/text.txt");
    text << "Where does the penguin live? The penguin lives in Antarctica. What colour is the "
            "sky? The sky is blue. Tell me a story about a cat.";
  }
  auto run = [](const std::string& args) {
    std::string out;
    FILE* p = popen((std::string(LOOM_BINARY) + " " + args + " 2>/dev/null").c_str(), "r");
    char buf[4096];
    size_t n;
    while (p && (n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    if (p) pclose(p);
    return out;
  };
  auto ppl = [&](const std::string& flags) {
    const std::string out = run(flags + " perplexity --json --model " + demo + " --text " + dir +
                                "/text.txt --ctx 16 --per-token " + dir + "/nll.json");
    return nlohmann::json::parse(out.substr(out.find('{')));
  };
  const nlohmann::json bf16 = ppl("");
  EXPECT_EQ(bf16["windows"].get<int>(), (bf16["tokens"].get<int>() + 15) / 16);
  EXPECT_GT(bf16["perplexity"].get<double>(), 1.0);
  std::ifstream per_token(dir + "/nll.json");
  std::stringstream ss;
  ss << per_token.rdbuf();
  EXPECT_EQ(nlohmann::json::parse(ss.str()).size(), bf16["predicted"].get<size_t>());
  const nlohmann::json int8 = ppl("--quantize int8");
  EXPECT_EQ(int8["weights"], "int8");
  EXPECT_NE(int8["perplexity"].get<double>(), bf16["perplexity"].get<double>());
  run("quantize --model " + demo + " --out " + dir + "/q8 --scheme int8");
  const std::string out = run("perplexity --json --model " + dir + "/q8 --text " + dir + "/text.txt --ctx 16");
  const nlohmann::json written = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(written["weights"], "compressed-tensors");
  EXPECT_EQ(written["perplexity"].get<double>(), int8["perplexity"].get<double>());  // same bits
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace loom
