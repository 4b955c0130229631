// The loom binary on hostile flags and files (the issue's reproductions): every case ends with
// exit code 1 or 2 and a message naming the flag, field or file — no abort, no hang, no
// figures made up from invalid sizes — and nothing on disk changes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "adversarial_util.h"

namespace loom {
namespace {

using namespace loom::testing;

const std::string kModel = kFixtures + "/models/llama_f32";

void ExpectFails(const std::string& args, int code, const std::vector<std::string>& fragments) {
  SCOPED_TRACE("loom " + args);
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = RunLoom(args);
  EXPECT_EQ(r.exit_code, code) << r.output;
  for (const auto& f : fragments) EXPECT_TRUE(Contains(r.output, f)) << "'" << f << "' not in: " << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

TEST(AdversarialCli, MaxTokensIsValidatedBeforeTheKvCacheIsSized) {
  for (const char* n : {"2000000000", "10000000", "2147483647"}) {
    ExpectFails("generate --model " + kModel + " --prompt-tokens 1,2,3 --max-tokens " + n, 2,
                {"--max-tokens: ", "exceeds the maximum context length"});
  }
  ExpectFails("generate --model " + kModel + " --prompt-tokens 1,2,3 --max-tokens 0", 2,
              {"--max-tokens: max_tokens must be at least 1"});
  ExpectFails("generate --model " + kModel + " --prompt-tokens 4294967297", 2,
              {"'4294967297' is not a token id"});
}

// chat checked nothing before its loop: each turn reported the bad flag and the command exited 0.
TEST(AdversarialCli, ChatChecksItsFlagsBeforeTheConversation) {
  ExpectFails("chat --model " + kModel + " --max-tokens 0", 2, {"max_tokens must be at least 1"});
  ExpectFails("chat --model " + kModel + " --temperature 1000", 2, {"--temperature: temperature must be a number at most 100"});
  ExpectFails("chat --model " + kModel + " --max-model-len 100000000", 2,
              {"--max-model-len 100000000 exceeds the model's max_position_embeddings"});
}

// CLI11 read "-1" into an unsigned flag as 2^64 - 1 and saturated values past int64's range.
TEST(AdversarialCli, IntegerFlagsNeitherWrapNorSaturate) {
  for (const char* seed : {"-5", "9223372036854775808", "99999999999999999999999", "1e3"}) {
    ExpectFails("generate --model " + kModel + " --prompt-tokens 1,2 --seed " + seed, 2,
                {"--seed", "is not an integer in [0, 9223372036854775807]"});
  }
  ExpectFails("generate --model " + kModel + " --prompt-tokens 1,2, --max-tokens 2", 2, {"is not a token id"});
  TempDir dir;
  for (const char* size : {"-1", "-18446744073709551615"}) {
    ExpectFails("merge --model " + kModel + " --lora " + kFixtures +
                    "/adapters/llama_qv_r8_f32 --out " + dir.Path("o") + " --max-shard-size " +
                    size,
                2, {"--max-shard-size", "is not an integer"});
  }
  EXPECT_FALSE(fs::exists(dir.Path("o")));
}

// --per-token pointed at the model's weights overwrote them (exit 0).
TEST(AdversarialCli, PerplexityNeverWritesIntoItsInputs) {
  TempDir dir;
  const std::string model = dir.Path("model");
  CopyDir(kModel, model);
  WriteBytes(dir.Path("text.txt"), "hello world, hello world");
  const auto before = Snapshot(dir.path());
  for (const std::string& out : {model + "/model.safetensors", dir.Path("text.txt"), model + "/new.json"}) {
    ExpectFails("perplexity --model " + model + " --text " + dir.Path("text.txt") + " --per-token " + out, 2,
                {"--per-token", "loom never writes into its inputs"});
  }
  EXPECT_EQ(Snapshot(dir.path()), before);
}

TEST(AdversarialCli, BatchFilesWithWrongTypesOrHugeValuesAreErrorsNamingEntryAndField) {
  TempDir dir;
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"[[1,2]]", {"entry 0: needs {\"prompt_tokens\": [ids], ...}"}},
      {R"([{"prompt_tokens": [1], "max_tokens": "x"}])",
       {"entry 0: max_tokens must be an integer, got string"}},
      {R"([{"prompt_tokens": [1], "max_tokens": 4294967297}])",
       {"max_tokens must be at most 16777216, got 4294967297"}},
      // Sampling fields go through the server's parser: typos and bad values are errors.
      {R"([{"prompt_tokens": [1], "temprature": 0}])", {"entry 0: unknown field 'temprature'"}},
      {R"([{"prompt_tokens": [1]}, {"prompt_tokens": [1], "top_p": 0}])",
       {"entry 1: top_p must be in (0.0, 1.0], got 0"}},
      {R"([{"prompt_tokens": [1], "temperature": "hot"}])", {"temperature must be a number"}},
      {R"([{"prompt_tokens": [1], "logprobs": 99}])", {"entry 0: logprobs must be at most 20, got 99"}},
      {R"([{"prompt_tokens": [4294967297]}])",
       {"field 'prompt_tokens' entry 0 is 4294967297, above the maximum"}},
      {R"([{"prompt_tokens": [2000000000]}])", {"entry 0 is 2000000000, above the maximum"}},
      {R"([{"prompt_tokens": [1], "max_tokens": 2000000000}])",
       {"max_tokens must be at most 16777216, got 2000000000"}},
      {R"([{"prompt_tokens": [1], "max_tokens": 600}])", {"exceeds the maximum context length"}},
      {R"([{"prompt_tokens": []}])", {"prompt_tokens is empty"}},
      {R"([{"prompt_tokens": "1,2"}])", {"must be a list of integers"}},
      {R"([{"prompt_tokens": [1], "adapter": 5}])", {"adapter 5 is not loaded"}},
      {deep, {"JSON nested deeper than 128 levels"}},
      {"[1, 2", {"not valid JSON"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string file = dir.Path("batch" + std::to_string(i) + ".json");
    WriteBytes(file, cases[i].first);
    std::vector<std::string> want = cases[i].second;
    want.push_back(file);
    ExpectFails("generate --model " + kModel + " --batch " + file, 2, want);
  }
  ASSERT_EQ(::mkfifo(dir.Path("fifo.json").c_str(), 0600), 0);
  ExpectFails("generate --model " + kModel + " --batch " + dir.Path("fifo.json"), 2,
              {"fifo.json", "is a FIFO"});
  ExpectFails("generate --model " + kModel + " --batch " + dir.path(), 2, {"is a folder"});
}

// A sampling field in a --batch entry takes effect (it used to be dropped silently): with
// "temperature": 0 the entry is greedy whatever --seed says; without it, --temperature 1 samples
// and two seeds give different tokens.
TEST(AdversarialCli, BatchEntrySamplingFieldsOverrideTheFlags) {
  TempDir dir;
  auto tokens = [&](const std::string& entry, int seed) {
    const std::string file = dir.Path("b" + std::to_string(seed) + ".json");
    WriteBytes(file, "[" + entry + "]");
    const RunResult r = RunLoom("generate --model " + kModel + " --batch " + file +
                                " --temperature 1 --seed " + std::to_string(seed));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.find("\"generated_tokens\":[");
    EXPECT_NE(at, std::string::npos) << r.output;
    return at == std::string::npos ? std::string() : r.output.substr(at, r.output.find(']', at) - at);
  };
  const std::string greedy = R"({"prompt_tokens": [5, 6, 7], "max_tokens": 12, "temperature": 0})";
  const std::string sampled = R"({"prompt_tokens": [5, 6, 7], "max_tokens": 12})";
  EXPECT_EQ(tokens(greedy, 1), tokens(greedy, 2));
  EXPECT_NE(tokens(sampled, 1), tokens(sampled, 2));
}

TEST(AdversarialCli, ThreadsAreCappedToTheCoresWithAWarning) {
  const RunResult r =
      RunLoom("--threads 100000 generate --model " + kModel + " --prompt-tokens 1,2 --max-tokens 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "warning: 100000 threads requested")) << r.output;
  ExpectFails("--threads -3 generate --model " + kModel + " --prompt-tokens 1", 2, {"--threads"});
}

TEST(AdversarialCli, BenchRefusesSizesItWouldMakeFiguresUpFrom) {
  ExpectFails("bench --model " + kModel + " --batch -2", 2, {"--batch -2 is outside [1, 4096]"});
  ExpectFails("bench --model " + kModel + " --batch 0", 2, {"--batch 0 is outside"});
  ExpectFails("bench --model " + kModel + " --prompt-len 0", 2, {"--prompt-len must be at least 1"});
  ExpectFails("bench --model " + kModel + " --gen-tokens 100000000", 2,
              {"exceeds the maximum context length"});
}

// Review findings: flags that were accepted and then did nothing.
TEST(AdversarialCli, FlagsThatWouldDoNothingAreRefused) {
  const std::string tok = kFixtures + "/tokenizers/TinyLlama-1.1B-Chat-v1.0";
  ExpectFails("tokenize --model " + tok + " --text hi --bench 0", 2, {"--bench"});
  ExpectFails("tokenize --model " + tok + " --text hi --bench -1", 2, {"--bench"});
  ExpectFails("bench --model " + kModel + " --closed-loop 0", 2, {"--closed-loop"});
  ExpectFails("--quantize-head generate --model " + kModel + " --prompt-tokens 1,2", 1,
              {"--quantize-head applies with --quantize"});
  ExpectFails("--quantize int8 --quantize-group-size 32 generate --model " + kModel +
                  " --prompt-tokens 1,2",
              1, {"--quantize-group-size 32 applies to --quantize int4 only"});
  TempDir dir;
  ExpectFails(
      "quantize --model " + kModel + " --scheme int8 --group-size 32 --out " + dir.Path("q"), 2,
      {"--group-size 32 applies to --scheme int4 only"});
  EXPECT_FALSE(fs::exists(dir.Path("q")));
  // A read-only audit's findings: flags read by no path of the command, and a bound.
  ExpectFails("tokenize --model " + tok + " --text hi --bench 2000000", 2,
              {"--bench"});  // kept each time
  ExpectFails("tokenize --model " + tok + " --text hi --add-generation-prompt", 2,
              {"--add-generation-prompt applies to --chat only"});
  ExpectFails("detokenize --model " + tok + " --ids 1,999999999", 2, {"--ids", "999999999", "outside the vocabulary"});
  ExpectFails("bench --model " + kModel + " --requests 5", 2, {"--requests applies to --closed-loop only"});
  ExpectFails("bench --model " + kModel + " --seed 7 --target-step-ms 10", 2, {"applies to --closed-loop only"});
  ExpectFails("bench --model " + kModel + " --closed-loop 1 --batch 2", 2, {"--batch is not read with --closed-loop"});
  ExpectFails("bench --model " + kModel + " --batch 3 --lora " + kFixtures + "/adapters/llama_qv_r8_f32", 2,
              {"--batch 3 with --lora"});
  ExpectFails("generate --model " + kModel + " --prompt-tokens 1,2 --logprobs 3", 2,
              {"--logprobs needs --output json"});
  ExpectFails("chat --model " + kModel + " --logprobs 3", 2, {"--logprobs is not shown by chat"});
}

TEST(AdversarialCli, TokenizeFileMustBeARegularFile) {
  TempDir dir;
  const std::string model = dir.Path("m");
  CopyDir(kFixtures + "/tokenizers/TinyLlama-1.1B-Chat-v1.0", model);
  ExpectFails("tokenize --model " + model + " --file " + dir.path(), 2, {"--file", "is a folder"});
  ExpectFails("tokenize --model " + model + " --file /dev/zero", 2, {"is a character device"});
  // --chat files are bounded JSON too.
  WriteBytes(dir.Path("chat.json"), std::string(200000, '[') + std::string(200000, ']'));
  ExpectFails("tokenize --model " + model + " --chat " + dir.Path("chat.json"), 2,
              {"chat.json", "JSON nested deeper than 128 levels"});
}

// An exception from code that still throws (here std::filesystem inside the tokenizer, on a
// symlink loop) is caught at the top of the CLI: an error line and exit 1, never an abort.
TEST(AdversarialCli, ExceptionsNeverAbortTheProcess) {
  TempDir dir;
  const std::string model = dir.Path("m");
  CopyDir(kFixtures + "/tokenizers/TinyLlama-1.1B-Chat-v1.0", model);
  fs::remove(model + "/tokenizer_config.json");
  fs::create_symlink("loop_b", model + "/loop_a");
  fs::create_symlink("loop_a", model + "/loop_b");
  fs::create_symlink("loop_a", model + "/tokenizer_config.json");
  const RunResult r = RunLoom("tokenize --model " + model + " --text hi");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r.output, "error:")) << r.output;
  ExpectFails("detokenize --model " + model + " --ids 4294967297", 2, {"is not a token id"});
}

TEST(AdversarialCli, MergeIntoItsInputsIsRefusedAndNothingChanges) {
  TempDir dir;
  const std::string model = dir.Path("model");
  const std::string adapter = dir.Path("adapter");
  CopyDir(kModel, model);
  CopyDir(kFixtures + "/adapters/llama_qv_r8_f32", adapter);
  const auto before = Snapshot(dir.path());
  for (const std::string& out : {model, model + "/./", adapter, model + "/merged"}) {
    ExpectFails("merge --model " + model + " --lora " + adapter + " --out " + out, 2,
                {"--out", "loom merge never writes into its inputs"});
  }
  EXPECT_EQ(Snapshot(dir.path()), before);
}

// A config.json the checkpoint writers cannot read back (an object of more than 4,096 members:
// the ordered parser's limit) is refused before the model loads, not after the merge or the
// quantization ran (Model::Load reads it without that limit).
TEST(AdversarialCli, MergeAndQuantizeRefuseAConfigTheyCannotRewriteFirst) {
  TempDir dir;
  const std::string model = dir.Path("m");
  CopyDir(kModel, model);
  auto cfg = nlohmann::json::parse(ReadBytes(model + "/config.json"));
  for (int i = 0; i < 5000; ++i) cfg["extra_" + std::to_string(i)] = i;
  WriteBytes(model + "/config.json", cfg.dump());
  const std::string adapter = kFixtures + "/adapters/llama_qv_r8_f32";
  ExpectFails("merge --model " + model + " --lora " + adapter + " --out " + dir.Path("out1"), 2,
              {"config.json", "more than 4096 members"});
  ExpectFails("quantize --model " + model + " --scheme int8 --out " + dir.Path("out2"), 2,
              {"config.json", "more than 4096 members"});
  EXPECT_FALSE(fs::exists(dir.Path("out1")));
  EXPECT_FALSE(fs::exists(dir.Path("out2")));
}

TEST(AdversarialCli, ConfigFromDevZeroIsAnErrorNotAHangOrCrash) {
  TempDir dir;
  const std::string model = dir.Path("m");
  CopyDir(kModel, model);
  fs::remove(model + "/config.json");
  fs::create_symlink("/dev/zero", model + "/config.json");
  ExpectFails("inspect --model " + model, 1, {"config.json", "is a character device"});
}

}  // namespace
}  // namespace loom
