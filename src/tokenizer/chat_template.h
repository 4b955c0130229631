// Chat templates: picks a model's Hugging Face chat_template and renders messages with it,
// byte-identical to transformers' apply_chat_template(tokenize=False).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace loom {

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  // Template variables bos_token, eos_token, unk_token, ... (transformers renders with its
  // special_tokens_map: the ones the tokenizer sets; TokenizerConfig::special_tokens).
  std::vector<std::pair<std::string, std::string>> special_tokens;
  // A list of JSON-schema tools, or null (the template then sees tools = none).
  nlohmann::ordered_json tools = nullptr;
  // RAG documents, or null.
  nlohmann::ordered_json documents = nullptr;
  // Further template variables (e.g. {"enable_thinking": false}); an object or null.
  nlohmann::ordered_json extra = nullptr;
  // What strftime_now() formats; the current local time when unset.
  std::optional<std::tm> now;
  jinja::RenderLimits limits;
};

// A parsed chat template. Immutable after Parse; Render may run from several threads at once.
class ChatTemplate {
 public:
  // Errors name the line and what is wrong (syntax, an unsupported tag, an unknown filter).
  static StatusOr<ChatTemplate> Parse(const std::string& source);

  // Renders `messages` (a list of message objects; key order is kept, as tojson shows it).
  // Like transformers, keys whose value is null are dropped from each message and reasoning
  // given as reasoning_content / thinking / reasoning is visible under the first two names.
  // A template's raise_exception(msg) gives kFailedPrecondition with exactly `msg`.
  StatusOr<std::string> Render(const nlohmann::ordered_json& messages,
                               const ChatTemplateOptions& options) const;

  // Whether the template's text names the `developer` role ("developer" or 'developer', quotes
  // included), as vLLM 0.32 detects a template that supports it (renderers/hf.py).
  bool names_developer_role() const { return names_developer_role_; }

 private:
  static StatusOr<ChatTemplate> ParseUnguarded(const std::string& source);
  StatusOr<std::string> RenderUnguarded(const nlohmann::ordered_json& messages,
                                        const ChatTemplateOptions& options) const;

  std::shared_ptr<const jinja::Program> program_;
  bool names_developer_role_ = false;
};

// Parse + Render in one call.
StatusOr<std::string> RenderChatTemplate(const std::string& template_source,
                                         const nlohmann::ordered_json& messages,
                                         const ChatTemplateOptions& options);

// The template a tokenizer_config.json names, as transformers' get_chat_template picks it:
// `chat_template` is a string, or a list of {name, template}; from a list, `name` if given,
// else "tool_use" when tools are passed and it exists, else "default".
StatusOr<std::string> SelectChatTemplate(const nlohmann::json& tokenizer_config,
                                         const std::string& name, bool has_tools);

// The chat template of a model folder: chat_template.jinja (plus
// additional_chat_templates/<name>.jinja), as transformers v5 saves it, takes precedence over
// tokenizer_config.json's chat_template; a processor's chat_template.json is the last resort.
// kNotFound when the folder has none.
StatusOr<std::string> LoadChatTemplate(const std::string& model_dir, const std::string& name,
                                       bool has_tools);

}  // namespace loom
