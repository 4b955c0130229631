// TruncatePrompts (vLLM's truncate_prompt_tokens) with a real tokenizer that adds BOS
// (TinyLlama's, Llama 2's tokenizer): a text prompt keeps its BOS and its last k - 1 text tokens,
// as transformers' truncation=True, max_length=k on the left side gives; token-id prompts are a
// plain slice. RenderChatPrompt's `developer` role as vLLM 0.32 (ConvertDeveloperToSystem).
#include "server/prompt_builder.h"

#include <gtest/gtest.h>

namespace loom::server {
namespace {

using json = nlohmann::ordered_json;

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

// vLLM 0.32's explicit truncation_side: the whole encoding sliced, special tokens and all ("left"
// drops a text prompt's BOS; "right" keeps the first k tokens), token-id prompts alike.
TEST(TruncatePrompts, AnExplicitSideSlicesTheWholeEncoding) {
  auto tok = tokenizer::Tokenizer::FromModelDir(kTinyLlama);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ServerContext ctx;
  ctx.tokenizer = tok->get();
  ctx.max_model_len = 4096;
  const std::string text = "The quick brown fox jumps over the lazy dog again and again";
  auto full = (*tok)->Encode(text, /*add_special_tokens=*/true);
  auto plain = (*tok)->Encode(text, /*add_special_tokens=*/false);
  ASSERT_TRUE(full.ok() && plain.ok());
  for (const std::string side : {"left", "right"}) {
    OpenAiRequest r;
    r.prompts = {text, std::vector<int32_t>(*plain)};
    r.add_special_tokens = true;
    r.echo = true;
    r.truncate_prompt_tokens = 5;
    r.truncation_side = side;
    std::vector<std::vector<int32_t>> prompts = {*full, *plain};
    ApiError error;
    ASSERT_TRUE(TruncatePrompts(ctx, &r, &prompts, &error)) << error.message;
    auto kept = [&](const std::vector<int32_t>& ids) {
      return side == "left" ? std::vector<int32_t>(ids.end() - 5, ids.end())
                            : std::vector<int32_t>(ids.begin(), ids.begin() + 5);
    };
    EXPECT_EQ(prompts[0], kept(*full)) << side;  // "right" keeps the BOS, "left" drops it
    EXPECT_EQ(prompts[1], kept(*plain)) << side;
    EXPECT_EQ(std::get<std::vector<int32_t>>(r.prompts[0]), kept(*full)) << side;  // echoed
  }
}

// vLLM 0.32's renderers/hf.py: developer → system, then the system messages merged at the front
// when one is not first or there are several ("\n\n"-joined, empty ones left out).
TEST(ConvertDeveloperToSystem, RenamesThenMergesAsVllm) {
  struct Case {
    const char* messages;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           // Alone and first: renamed, its other keys kept but `tools`.
           {R"([{"role":"developer","content":"be nice","name":"d","tools":[1]},
                {"role":"user","content":"x"}])",
            R"([{"role":"system","content":"be nice","name":"d"},{"role":"user","content":"x"}])"},
           {R"([{"role":"system","content":"A"},{"role":"developer","content":"B"},
                {"role":"user","content":"x"}])",
            R"([{"role":"system","content":"A\n\nB"},{"role":"user","content":"x"}])"},
           // Later ones move to the front; text parts joined by "\n"; null and "" left out.
           {R"([{"role":"user","content":"x"},
                {"role":"developer","content":[{"type":"text","text":"a"},
                                               {"type":"text","text":"b"}]},
                {"role":"system","content":null},{"role":"assistant","content":"y"},
                {"role":"developer","content":""},{"role":"system","content":"S"}])",
            R"([{"role":"system","content":"a\nb\n\nS"},{"role":"user","content":"x"},
                {"role":"assistant","content":"y"}])"},
           // Merged system messages keep only role and content.
           {R"([{"role":"user","content":"x"},{"role":"developer","content":"D","name":"n"}])",
            R"([{"role":"system","content":"D"},{"role":"user","content":"x"}])"},
       }) {
    json messages = json::parse(c.messages);
    ConvertDeveloperToSystem(&messages);
    EXPECT_EQ(messages, json::parse(c.want)) << c.messages;
  }
}

// RenderChatPrompt (the chat route's and /tokenize's) converts only when a message is a
// developer one and the template does not name the role.
TEST(RenderChatPrompt, DeveloperRoleBecomesSystemUnlessTheTemplateNamesIt) {
  auto tok = tokenizer::Tokenizer::FromModelDir(kTinyLlama);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ServerContext ctx;
  ctx.tokenizer = tok->get();
  ctx.max_model_len = 4096;
  // tests/e2e/tiny_model.py's template.
  const std::string plain =
      "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}";
  auto render = [&](const std::string& source, const char* messages) {
    auto t = ChatTemplate::Parse(source);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    ctx.chat_template = std::move(t).value();
    OpenAiRequest r;
    r.endpoint = Endpoint::kChat;
    r.messages = json::parse(messages);
    std::string text;
    ApiError error;
    EXPECT_TRUE(RenderChatPrompt(ctx, r, &text, &error)) << error.message;
    return text;
  };
  const char* dev = R"([{"role":"developer","content":"be nice"},{"role":"user","content":"x"}])";
  EXPECT_EQ(render(plain, dev), "<|system|>be nice\n<|user|>x\n<|assistant|>");
  EXPECT_EQ(render(plain, R"([{"role":"system","content":"A"},{"role":"developer","content":"B"},
                              {"role":"user","content":"x"}])"),
            "<|system|>A\n\nB\n<|user|>x\n<|assistant|>");
  // Text parts are joined first, as the template gets them.
  EXPECT_EQ(render(plain, R"([{"role":"user","content":"x"},{"role":"developer","content":
                              [{"type":"text","text":"a"},{"type":"text","text":"b"}]}])"),
            "<|system|>a\nb\n<|user|>x\n<|assistant|>");
  // Without a developer message nothing moves, not even several system messages.
  EXPECT_EQ(render(plain, R"([{"role":"user","content":"x"},{"role":"system","content":"A"}])"),
            "<|user|>x\n<|system|>A\n<|assistant|>");
  // A template that names the role ("developer" or 'developer') gets it as sent.
  for (const std::string named :
       {"{% if false %}\"developer\"{% endif %}", "{% set r = 'developer' %}"}) {
    EXPECT_EQ(render(named + plain, dev), "<|developer|>be nice\n<|user|>x\n<|assistant|>");
  }
  // Unquoted, the word is no sign of support (vLLM's check).
  EXPECT_EQ(render("{# developer #}" + plain, dev), "<|system|>be nice\n<|user|>x\n<|assistant|>");
}

}  // namespace
}  // namespace loom::server
