// --chat FILE.json: render messages with the model folder's chat template, as apply_chat_template.
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/json.h"
#include "cli/commands.h"
#include "tokenizer/chat_template.h"

namespace loom::cli {

StatusOr<std::string> RenderChatFile(const tokenizer::Tokenizer& tok, const std::string& model_dir,
                                     const std::string& chat_path, bool add_generation_prompt) {
  ASSIGN_OR_RETURN(std::string text, ReadFileBounded(chat_path, kMaxRequestFileBytes));
  // ordered_json keeps the messages' key order, which tojson output depends on. The depth
  // bound keeps the template engine's recursive value conversion off deep input.
  ASSIGN_OR_RETURN(nlohmann::ordered_json doc, ParseOrderedJson(text, chat_path));
  nlohmann::ordered_json messages, tools = nullptr;
  if (doc.is_array()) {
    messages = doc;
  } else if (doc.is_object() && doc.contains("messages")) {
    messages = doc["messages"];
    if (doc.contains("tools")) tools = doc["tools"];
  }
  if (!messages.is_array() || messages.empty()) {
    return InvalidArgument(chat_path + ": expected a list of messages, or {\"messages\": [...], \"tools\": [...]}");
  }
  ASSIGN_OR_RETURN(std::string source, LoadChatTemplate(model_dir, "", !tools.is_null()));
  ChatTemplateOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.special_tokens = tok.config().special_tokens;
  options.tools = tools;
  return RenderChatTemplate(source, messages, options);
}

}  // namespace loom::cli
