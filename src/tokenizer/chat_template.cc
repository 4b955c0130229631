// Chat templates: transformers' message preprocessing, template selection and rendering.
#include "tokenizer/chat_template.h"

#include "base/file.h"
#include "base/no_throw.h"

#include <filesystem>
#include <new>
#include <system_error>

#include "tokenizer/json_limits.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

using tokenizer::kMaxJsonDepth;


// Untrusted JSON from a request → template value, nesting checked first (iteratively) because
// copying, dumping and converting nlohmann values recurse once per level.
StatusOr<jinja::Value> RequestValue(const nlohmann::ordered_json& j, const std::string& what) {
  RETURN_IF_ERROR(tokenizer::CheckJsonValueDepth(j, kMaxJsonDepth, what));
  return jinja::Value::FromJsonChecked(j, kMaxJsonDepth, what);
}

// transformers: _normalize_chat_messages (drop null keys) + _alias_reasoning_fields, straight
// into template values (linear in the number of keys: nlohmann's ordered_json looks each key up
// on insertion, which is quadratic for a message with many keys).
StatusOr<jinja::Value> PrepareMessages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return InvalidArgument("chat messages must be a JSON array");
  RETURN_IF_ERROR(tokenizer::CheckJsonValueDepth(messages, kMaxJsonDepth, "chat messages"));
  jinja::List out;
  out.reserve(messages.size());
  for (const auto& m : messages) {
    if (!m.is_object()) {
      return InvalidArgument("Chat messages should be dicts, but got " + m.dump());
    }
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
      auto it = m.find(field);
      if (it != m.end() && !it->is_null()) {
        reasoning = &*it;
        break;
      }
    }
    jinja::Dict msg;
    jinja::Value reasoning_value;
    if (reasoning != nullptr) {
      // transformers rebuilds the dict as {"thinking": r, **msg, "thinking": r,
      // "reasoning_content": r}: thinking first, reasoning_content where it was (or last).
      ASSIGN_OR_RETURN(reasoning_value,
                       jinja::Value::FromJsonChecked(*reasoning, kMaxJsonDepth, "chat messages"));
      msg.AppendNew("thinking", reasoning_value);
    }
    bool has_reasoning_content = false;
    for (const auto& [k, v] : m.items()) {
      if (v.is_null()) continue;
      if (reasoning != nullptr && k == "thinking") continue;
      if (reasoning != nullptr && k == "reasoning_content") {
        has_reasoning_content = true;
        msg.AppendNew(k, reasoning_value);
        continue;
      }
      ASSIGN_OR_RETURN(jinja::Value value,
                       jinja::Value::FromJsonChecked(v, kMaxJsonDepth - 2, "chat messages"));
      msg.AppendNew(k, std::move(value));
    }
    if (reasoning != nullptr && !has_reasoning_content) {
      msg.AppendNew("reasoning_content", reasoning_value);
    }
    out.push_back(jinja::Value::MakeDict(std::move(msg)));
  }
  return jinja::Value::MakeList(std::move(out));
}

StatusOr<std::string> ReadFile(const fs::path& path) {
  return tokenizer::ReadTextFile(path.string());
}

StatusOr<nlohmann::json> ReadJson(const fs::path& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return tokenizer::ParseJsonText(text, path.string());
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::Parse(const std::string& source) {
  return NoThrow("chat template", [&]() -> StatusOr<ChatTemplate> { return ParseUnguarded(source); });
}

StatusOr<ChatTemplate> ChatTemplate::ParseUnguarded(const std::string& source) {
  StatusOr<jinja::Program> parsed = jinja::Parse(source);
  if (!parsed.ok()) {
    return Status(parsed.status().code(), "chat template: " + parsed.status().message());
  }
  jinja::Program program = std::move(parsed).value();
  Status names = jinja::ValidateNames(program);
  if (!names.ok()) return Status(names.code(), "chat template: " + names.message());
  ChatTemplate t;
  t.program_ = std::make_shared<const jinja::Program>(std::move(program));
  t.names_developer_role_ = source.find("\"developer\"") != std::string::npos ||
                            source.find("'developer'") != std::string::npos;
  return t;
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                           const ChatTemplateOptions& options) const {
  return NoThrow("chat template", [&]() -> StatusOr<std::string> {
    return RenderUnguarded(messages, options);
  });
}

StatusOr<std::string> ChatTemplate::RenderUnguarded(const nlohmann::ordered_json& messages,
                                                    const ChatTemplateOptions& options) const {
  jinja::Dict context;
  for (const auto& [name, content] : options.special_tokens) {
    context.Set(name, jinja::Value::String(content));
  }
  // Extra variables override the special tokens (transformers: {**special_tokens_map, **kwargs})
  // but not messages, tools, documents or add_generation_prompt, set below (a server lifts or
  // refuses those keys before; see openai_request.cc).
  if (options.extra.is_object()) {
    RETURN_IF_ERROR(tokenizer::CheckJsonValueDepth(options.extra, kMaxJsonDepth,
                                                   "chat template extra variables"));
    for (const auto& [k, v] : options.extra.items()) {
      ASSIGN_OR_RETURN(jinja::Value value, RequestValue(v, "chat template variable '" + k + "'"));
      context.Set(k, std::move(value));
    }
  } else if (!options.extra.is_null()) {
    return InvalidArgument("chat template extra variables must be a JSON object");
  }
  ASSIGN_OR_RETURN(jinja::Value msgs, PrepareMessages(messages));
  context.Set("messages", std::move(msgs));
  ASSIGN_OR_RETURN(jinja::Value tools, RequestValue(options.tools, "chat tools"));
  context.Set("tools", std::move(tools));
  ASSIGN_OR_RETURN(jinja::Value documents, RequestValue(options.documents, "chat documents"));
  context.Set("documents", std::move(documents));
  context.Set("add_generation_prompt", jinja::Value::Bool(options.add_generation_prompt));

  jinja::RenderOptions render_options;
  render_options.limits = options.limits;
  if (options.now) {
    render_options.now = *options.now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &render_options.now);
  }
  StatusOr<std::string> out = jinja::Render(*program_, context, render_options);
  if (!out.ok() && out.status().code() != jinja::kRaisedCode) {
    return Status(out.status().code(), "chat template: " + out.status().message());
  }
  return out;
}

StatusOr<std::string> RenderChatTemplate(const std::string& template_source,
                                         const nlohmann::ordered_json& messages,
                                         const ChatTemplateOptions& options) {
  ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::Parse(template_source));
  return t.Render(messages, options);
}

namespace {

StatusOr<std::string> SelectUnguarded(const nlohmann::json& tokenizer_config,
                                      const std::string& name, bool has_tools);

}  // namespace

StatusOr<std::string> SelectChatTemplate(const nlohmann::json& tokenizer_config,
                                         const std::string& name, bool has_tools) {
  return NoThrow("chat template selection", [&]() -> StatusOr<std::string> {
    return SelectUnguarded(tokenizer_config, name, has_tools);
  });
}

namespace {

StatusOr<std::string> SelectUnguarded(const nlohmann::json& tokenizer_config,
                                      const std::string& name, bool has_tools) {
  if (!tokenizer_config.is_object() || !tokenizer_config.contains("chat_template") ||
      tokenizer_config["chat_template"].is_null()) {
    return NotFound("tokenizer_config.json has no chat_template");
  }
  const nlohmann::json& ct = tokenizer_config["chat_template"];
  if (ct.is_string()) {
    if (!name.empty() && name != "default") {
      return NotFound("chat template '" + name + "' not found: the model has a single template");
    }
    return ct.get<std::string>();
  }
  if (!ct.is_array()) {
    return InvalidArgument("tokenizer_config.json: chat_template must be a string or a list");
  }
  std::vector<std::pair<std::string, std::string>> named;
  for (const auto& t : ct) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
        !t.contains("template") || !t["template"].is_string()) {
      return InvalidArgument(
          "tokenizer_config.json: each chat_template entry needs a string name and template");
    }
    named.emplace_back(t["name"].get<std::string>(), t["template"].get<std::string>());
  }
  auto find = [&](const std::string& n) -> const std::string* {
    for (const auto& [k, v] : named) {
      if (k == n) return &v;
    }
    return nullptr;
  };
  if (!name.empty()) {
    if (const std::string* t = find(name)) return *t;
  } else {
    if (has_tools) {
      if (const std::string* t = find("tool_use")) return *t;
    }
    if (const std::string* t = find("default")) return *t;
  }
  std::string names;
  for (const auto& [k, v] : named) names += (names.empty() ? "" : ", ") + k;
  return NotFound("chat template '" + (name.empty() ? std::string("default") : name) +
                  "' not found; the model has: " + names);
}

StatusOr<std::string> LoadUnguarded(const std::string& model_dir, const std::string& name,
                                    bool has_tools) {
  const fs::path dir(model_dir);
  const fs::path jinja_file = dir / "chat_template.jinja";
  const fs::path extra_dir = dir / "additional_chat_templates";
  std::error_code ec;
  // Optional files: absent is fine; a loop, FIFO or folder in their place is an error.
  ASSIGN_OR_RETURN(const bool has_jinja, RegularFileExists(jinja_file.string()));
  const bool has_extra = fs::is_directory(extra_dir, ec);
  if (has_jinja || has_extra) {
    // Same shape transformers builds: {"default": chat_template.jinja, <name>: <name>.jinja}.
    nlohmann::json config = {{"chat_template", nlohmann::json::array()}};
    if (has_jinja) {
      ASSIGN_OR_RETURN(std::string t, ReadFile(jinja_file));
      config["chat_template"].push_back({{"name", "default"}, {"template", t}});
    }
    if (has_extra) {
      fs::directory_iterator it(extra_dir, ec), end;
      if (ec) return NotFound("cannot list " + extra_dir.string() + ": " + ec.message());
      for (; it != end; it.increment(ec)) {
        if (ec) return NotFound("cannot list " + extra_dir.string() + ": " + ec.message());
        const fs::directory_entry& entry = *it;
        if (entry.path().extension() != ".jinja") continue;
        ASSIGN_OR_RETURN(std::string t, ReadFile(entry.path()));
        config["chat_template"].push_back(
            {{"name", entry.path().stem().string()}, {"template", t}});
      }
    }
    return SelectChatTemplate(config, name, has_tools);
  }
  const fs::path config_file = dir / "tokenizer_config.json";
  ASSIGN_OR_RETURN(const bool has_config, RegularFileExists(config_file.string()));
  if (has_config) {
    ASSIGN_OR_RETURN(nlohmann::json config, ReadJson(config_file));
    if (config.contains("chat_template") && !config["chat_template"].is_null()) {
      return SelectChatTemplate(config, name, has_tools);
    }
  }
  const fs::path processor_file = dir / "chat_template.json";
  ASSIGN_OR_RETURN(const bool has_processor, RegularFileExists(processor_file.string()));
  if (has_processor) {
    ASSIGN_OR_RETURN(nlohmann::json config, ReadJson(processor_file));
    return SelectChatTemplate(config, name, has_tools);
  }
  return NotFound(model_dir + " has no chat template (chat_template.jinja, tokenizer_config.json "
                              "chat_template or chat_template.json)");
}

}  // namespace

StatusOr<std::string> LoadChatTemplate(const std::string& model_dir, const std::string& name,
                                       bool has_tools) {
  return NoThrow(model_dir, [&]() -> StatusOr<std::string> {
    return LoadUnguarded(model_dir, name, has_tools);
  });
}

}  // namespace loom
