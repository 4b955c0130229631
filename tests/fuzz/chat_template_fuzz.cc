// libFuzzer target for chat templates: any template source is parsed and, when it parses,
// rendered with messages (and tools) that may be fuzzed too. Any bytes give a Status or a text
// within the output limit; nothing crashes, throws or runs without bound.
//
// Input: TEMPLATE [\0 MESSAGES_JSON [\0 TOOLS_JSON]] (JSON cannot hold a raw NUL). Without
// messages (or when they are not a JSON list) a fixed conversation with a tool call is used.
// Seeds: corpus/chat_template/ (every real template of tests/fixtures/chat_templates with one
// of the reference conversations, and the inputs that once crashed or hung).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokenizer/chat_template.h"
#include "tokenizer/json_limits.h"

namespace {

constexpr const char* kConversation = R"([
  {"role": "system", "content": "You can call tools."},
  {"role": "user", "content": "What's the weather in Z\u00fcrich?"},
  {"role": "assistant", "content": "", "reasoning_content": "Use the tool.",
   "tool_calls": [{"id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": {"city": "Z\u00fcrich"}}}]},
  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"t\": 21.5}"},
  {"role": "user", "content": "Thanks!"}
])";

nlohmann::ordered_json Parsed(std::string_view text, const char* what,
                              nlohmann::ordered_json fallback) {
  auto j = loom::tokenizer::ParseOrderedJsonText(text, what);
  return j.ok() ? std::move(j).value() : std::move(fallback);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t first = input.find('\0');
  const std::string source(input.substr(0, first));
  static const nlohmann::ordered_json kDefaultMessages =
      nlohmann::ordered_json::parse(kConversation);
  nlohmann::ordered_json messages = kDefaultMessages;
  loom::ChatTemplateOptions options;
  if (first != std::string_view::npos) {
    const std::string_view rest = input.substr(first + 1);
    const size_t second = rest.find('\0');
    messages = Parsed(rest.substr(0, second), "messages", kDefaultMessages);
    if (second != std::string_view::npos) {
      options.tools = Parsed(rest.substr(second + 1), "tools", nullptr);
    }
  }
  // Small budgets keep each run short; max_render_ms stays off so runs are deterministic.
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_collection_bytes = 4 << 20;
  options.limits.max_built_bytes = 32 << 20;
  options.limits.max_steps = 200'000;
  options.limits.max_render_ms = 0;
  options.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  std::tm now{};
  now.tm_year = 124;
  now.tm_mday = 26;
  options.now = now;

  auto t = loom::ChatTemplate::Parse(source);
  if (!t.ok()) {
    if (t.status().message().empty()) std::abort();
    return 0;
  }
  for (bool add_generation_prompt : {false, true}) {
    options.add_generation_prompt = add_generation_prompt;
    auto out = t->Render(messages, options);
    if (out.ok()) {
      if (out->size() > options.limits.max_output_bytes) std::abort();
    } else if (out.status().code() != loom::jinja::kRaisedCode &&
               out.status().message().empty()) {
      std::abort();
    }
  }
  return 0;
}
