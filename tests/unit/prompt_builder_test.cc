// TruncatePrompts (vLLM's truncate_prompt_tokens) with a real tokenizer that adds BOS
// (TinyLlama's, Llama 2's tokenizer): a text prompt keeps its BOS and its last k - 1 text tokens,
// as transformers' truncation=True, max_length=k on the left side gives; token-id prompts are a
// plain slice.
#include "server/prompt_builder.h"

#include <gtest/gtest.h>

namespace loom::server {
namespace {

const std::string kTinyLlama = std::string(LOOM_FIXTURES) + "/tokenizers/TinyLlama-1.1B-Chat-v1.0";

TEST(TruncatePrompts, ATextPromptKeepsItsSpecialTokens) {
  auto tok = tokenizer::Tokenizer::FromModelDir(kTinyLlama);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ServerContext ctx;
  ctx.tokenizer = tok->get();
  ctx.max_model_len = 4096;
  const std::string text = "The quick brown fox jumps over the lazy dog again and again";
  auto full = (*tok)->Encode(text, /*add_special_tokens=*/true);
  auto plain = (*tok)->Encode(text, /*add_special_tokens=*/false);
  ASSERT_TRUE(full.ok() && plain.ok());
  ASSERT_EQ(full->size(), plain->size() + 1);  // BOS
  const int32_t bos = full->front();

  OpenAiRequest r;
  r.prompts = {text, std::vector<int32_t>(*plain)};
  r.add_special_tokens = true;
  r.echo = true;
  r.truncate_prompt_tokens = 5;
  std::vector<std::vector<int32_t>> prompts = {*full, *plain};
  ApiError error;
  ASSERT_TRUE(TruncatePrompts(ctx, &r, &prompts, &error)) << error.message;
  std::vector<int32_t> want = {bos};
  want.insert(want.end(), plain->end() - 4, plain->end());
  EXPECT_EQ(prompts[0], want);
  EXPECT_EQ(prompts[1], std::vector<int32_t>(plain->end() - 5, plain->end()));
  // Echo shows the kept text, without the BOS.
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.prompts[0]),
            std::vector<int32_t>(plain->end() - 4, plain->end()));

  // Above the context length: a 400 naming the field, in vLLM's words.
  r.truncate_prompt_tokens = 4097;
  EXPECT_FALSE(TruncatePrompts(ctx, &r, &prompts, &error));
  EXPECT_EQ(error.param, "truncate_prompt_tokens");
  EXPECT_NE(error.message.find("Please, select a smaller truncation size"), std::string::npos);
}

}  // namespace
}  // namespace loom::server
