// Request → prompt token ids: the chat template rendered over messages, text prompts tokenized.
#include "server/prompt_builder.h"

#include <algorithm>
#include <optional>

#include "tokenizer/cancel.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::server {

using json = nlohmann::ordered_json;

void ConvertDeveloperToSystem(json* messages) {
  bool merge = false;  // a system message after the first message, or several
  bool seen = false;
  for (size_t i = 0; i < messages->size(); ++i) {
    json& m = (*messages)[i];
    if (m["role"] == "developer") {
      m["role"] = "system";
      m.erase("tools");
    }
    if (m["role"] != "system") continue;
    merge = merge || i > 0 || seen;
    seen = true;
  }
  if (!merge) return;
  std::string joined;
  bool first = true;
  json merged = json::array({json{{"role", "system"}, {"content", ""}}});
  for (auto& m : *messages) {
    if (m["role"] != "system") {
      merged.push_back(std::move(m));
      continue;
    }
    std::string content;  // vLLM: a list's text parts joined by "\n"; null or absent: ""
    if (const auto c = m.find("content"); c != m.end() && c->is_string()) {
      content = c->get<std::string>();
    } else if (c != m.end() && c->is_array()) {
      for (size_t k = 0; k < c->size(); ++k) {
        content += (k > 0 ? "\n" : "") + (*c)[k]["text"].get<std::string>();
      }
    }
    if (content.empty()) continue;
    joined += (first ? "" : "\n\n") + content;
    first = false;
  }
  merged[0]["content"] = std::move(joined);
  *messages = std::move(merged);
}

bool RenderChatPrompt(const ServerContext& ctx, const OpenAiRequest& r, std::string* text,
                      ApiError* error) {
  if (!ctx.chat_template.has_value()) {
    *error =
        BadRequest("messages", r.endpoint == Endpoint::kTokenize
                                   ? "the model folder has no chat template; send a text prompt"
                                   : "the model folder has no chat template; use /v1/completions");
    return false;
  }
  ChatTemplateOptions options;
  options.add_generation_prompt = r.add_generation_prompt;
  const auto& cfg = ctx.tokenizer->config();
  options.special_tokens = cfg.special_tokens;
  options.extra = r.chat_template_kwargs;
  // Text parts ([{"type": "text", "text": ...}]) become one string joined by "\n", as vLLM
  // does for templates that expect string content.
  nlohmann::ordered_json messages = r.messages;
  for (auto& m : messages) {
    if (m.contains("content") && m["content"].is_array()) {
      std::string joined;
      for (size_t i = 0; i < m["content"].size(); ++i) {
        if (i > 0) joined += "\n";
        joined += m["content"][i]["text"].get<std::string>();
      }
      m["content"] = joined;
    }
  }
  if (!ctx.chat_template->names_developer_role() &&
      std::any_of(messages.begin(), messages.end(),
                  [](const json& m) { return m["role"] == "developer"; })) {
    ConvertDeveloperToSystem(&messages);
  }
  auto rendered = ctx.chat_template->Render(messages, options);
  if (!rendered.ok()) {
    const std::string& m = rendered.status().message();
    *error = BadRequest("messages", m.rfind("chat template", 0) == 0 ? m : "chat template: " + m);
    return false;
  }
  *text = std::move(rendered).value();
  if (r.continue_final_message) {
    // transformers' apply_chat_template(continue_final_message=True) over what the template saw
    // (text parts joined as above): the last occurrence of the stripped content, cut after it
    // with its trailing whitespace where the template kept it, else after the stripped text.
    const json& last = messages.back();
    if (!last.contains("content") || !last["content"].is_string()) {
      *error = BadRequest("continue_final_message",
                          "continue_final_message needs a final message with text content");
      return false;
    }
    // Python's str.strip(): Unicode whitespace, as transformers strips it.
    const std::string content = last["content"].get<std::string>();
    const std::string lstripped = jinja::PyStrip(content, true, false, nullptr);
    const std::string stripped = jinja::PyStrip(content, true, true, nullptr);
    // The last occurrence, found as the first of the reversed content in the reversed text: in
    // linear time (rfind is O(n·m) where the template does not show the content verbatim, and a
    // request picks both sizes). "" (all whitespace): the end, as Python's rindex.
    const std::string rtext(text->rbegin(), text->rend());
    const std::string rstripped(stripped.rbegin(), stripped.rend());
    const size_t rat = jinja::FindSubstring(rtext, rstripped);
    const size_t at = rat == std::string::npos ? rat : text->size() - rat - stripped.size();
    if (at == std::string::npos) {
      *error = BadRequest("continue_final_message",
                          "the chat template does not show the final message's content verbatim");
      return false;
    }
    const bool kept = text->compare(at, lstripped.size(), content) == 0;
    text->resize(at + (kept ? lstripped.size() : stripped.size()));
  }
  return true;
}

bool BuildPrompts(const ServerContext& ctx, const OpenAiRequest& r,
                  std::vector<std::vector<int32_t>>* prompts, ApiError* error,
                  const std::function<bool()>& gone) {
  bool left = false;  // the client left while a text was being tokenized
  auto encode = [&](const std::string& text, const char* field) -> bool {
    if (ctx.tokenizer == nullptr) {
      *error = BadRequest(
          field,
          "the model folder has no tokenizer (tokenizer.json, tokenizer.model or "
          "vocab.json + merges.txt)" +
              std::string(r.endpoint == Endpoint::kCompletions ? "; send token ids" : ""));
      return false;
    }
    // A client that leaves, or the drain deadline (the gate closed), stops the tokenizing: a
    // long text takes seconds of a core.
    const std::function<bool()> stop = [&] { return (gone && gone()) || ctx.encode_gate.closed(); };
    const tokenizer::EncodeCancelScope cancel(&stop);
    auto ids = ctx.tokenizer->Encode(text, r.add_special_tokens);
    // Only a stopped encode is kUnavailable (tokenizer::EncodeCancelledError); any other error
    // is the text's, whatever became of the client.
    const bool stopped = !ids.ok() && ids.status().code() == StatusCode::kUnavailable;
    if (!ids.ok()) {
      if (stopped && gone && gone()) {
        left = true;
        *error = ApiError{400, "the client closed the connection while its prompt was tokenized",
                          "", ""};
        return false;
      }
      if (stopped && ctx.encode_gate.closed()) {
        *error = ApiError{503, "the server is shutting down", "", ""};
        return false;
      }
      *error = BadRequest(field, ids.status().message());
      return false;
    }
    prompts->push_back(std::move(ids).value());
    return true;
  };
  // Large texts are tokenized one at a time (EncodeGate), counted over the whole request: 31
  // prompts of 255 KiB each passed one by one under the threshold.
  auto enter = [&](size_t bytes) -> std::optional<EncodeGate::Pass> {
    EncodeGate::Pass pass = ctx.encode_gate.Enter(bytes, gone);
    if (!pass.ok()) {
      *error =
          pass.closed() ? ApiError{503, "the server is shutting down", "", ""}
          : pass.gone()
              ? ApiError{400, "the client closed the connection while its prompt waited", "", ""}
              : ApiError{503, "the server is tokenizing other large prompts; retry later", "", ""};
      return std::nullopt;
    }
    return pass;
  };
  // A large text stopped because its client left is counted (/metrics).
  auto stopped = [&](const EncodeGate::Pass& pass) {
    if (left && pass.holds()) ctx.encode_gate.CountAbandoned();
    return false;
  };
  if (r.has_messages()) {
    std::string text;
    if (!RenderChatPrompt(ctx, r, &text, error)) return false;
    const auto pass = enter(text.size());
    if (!pass.has_value()) return false;
    return encode(text, "messages") || stopped(*pass);
  }
  size_t total = 0;
  for (const Prompt& p : r.prompts) {
    if (const auto* s = std::get_if<std::string>(&p)) total += s->size();
  }
  const auto pass = enter(total);
  if (!pass.has_value()) return false;
  for (const Prompt& p : r.prompts) {
    if (const auto* s = std::get_if<std::string>(&p)) {
      if (!encode(*s, "prompt")) return stopped(*pass);
    } else {
      prompts->push_back(std::get<std::vector<int32_t>>(p));
    }
  }
  return true;
}

bool TruncatePrompts(const ServerContext& ctx, OpenAiRequest* r,
                     std::vector<std::vector<int32_t>>* prompts, ApiError* error) {
  if (r->truncate_prompt_tokens == 0) return true;
  const int64_t k = r->truncate_prompt_tokens < 0 ? ctx.max_model_len : r->truncate_prompt_tokens;
  if (k > ctx.max_model_len) {
    *error = BadRequest(
        "truncate_prompt_tokens",
        "truncate_prompt_tokens value (" + std::to_string(k) + ") is greater than max_model_len (" +
            std::to_string(ctx.max_model_len) + "). Please, select a smaller truncation size.");
    return false;
  }
  // What the tokenizer adds around a text prompt (BOS, say), found by encoding "" once.
  std::optional<std::vector<int32_t>> specials;
  for (size_t i = 0; i < prompts->size(); ++i) {
    std::vector<int32_t>& ids = (*prompts)[i];
    if (static_cast<int64_t>(ids.size()) <= k) continue;
    // vLLM 0.32's explicit truncation_side (renderers/params.py): the tokens are encoded whole
    // and sliced, special tokens and all.
    if (!r->truncation_side.empty()) {
      if (r->truncation_side == "right") {
        ids.resize(static_cast<size_t>(k));
      } else {
        ids.erase(ids.begin(), ids.end() - k);
      }
      if (r->echo && i < r->prompts.size()) r->prompts[i] = ids;
      continue;
    }
    const bool text = i < r->prompts.size() && std::holds_alternative<std::string>(r->prompts[i]);
    if (text && r->add_special_tokens && ctx.tokenizer != nullptr) {
      // vLLM encodes with truncation=True, max_length=k, truncating on the left: transformers
      // keeps the special tokens and cuts the text to k minus their count ([BOS] + the last
      // k - 1 text tokens for Llama), so the model still sees its BOS.
      if (!specials) {
        auto e = ctx.tokenizer->Encode("", /*add_special_tokens=*/true);
        specials = e.ok() ? std::move(e).value() : std::vector<int32_t>{};
      }
      const std::vector<int32_t>& sp = *specials;
      size_t pre = 0;
      while (pre < sp.size() && pre < ids.size() && ids[pre] == sp[pre]) ++pre;
      const size_t post = sp.size() - pre;
      if (!sp.empty() && static_cast<int64_t>(sp.size()) < k && pre + post <= ids.size() &&
          std::equal(sp.begin() + static_cast<long>(pre), sp.end(),
                     ids.end() - static_cast<long>(post))) {
        const size_t keep = static_cast<size_t>(k) - sp.size();
        std::vector<int32_t> content(ids.end() - static_cast<long>(post + keep),
                                     ids.end() - static_cast<long>(post));
        if (r->echo) r->prompts[i] = content;  // echoed as its text, without the specials
        std::vector<int32_t> cut(ids.begin(), ids.begin() + static_cast<long>(pre));
        cut.insert(cut.end(), content.begin(), content.end());
        cut.insert(cut.end(), ids.end() - static_cast<long>(post), ids.end());
        ids = std::move(cut);
        continue;
      }
    }
    ids.erase(ids.begin(), ids.end() - k);  // the last k (vLLM truncates on the left)
    if (r->echo && i < r->prompts.size()) r->prompts[i] = ids;
  }
  return true;
}

bool EncodeBadWords(const ServerContext& ctx, OpenAiRequest* r, ApiError* error) {
  if (r->bad_words.empty()) return true;
  if (ctx.tokenizer == nullptr) {
    *error = BadRequest("bad_words",
                        "bad_words needs the model's tokenizer, and the model "
                        "folder has none");
    return false;
  }
  auto& out = r->params.bad_words_token_ids;
  for (const std::string& word : r->bad_words) {
    const std::string stripped = jinja::PyStrip(word, true, false, nullptr);
    for (const bool space : {false, true}) {
      auto ids = ctx.tokenizer->Encode(space ? " " + stripped : stripped,
                                       /*add_special_tokens=*/false);
      if (!ids.ok()) {
        *error = BadRequest("bad_words", ids.status().message());
        return false;
      }
      if (ids->empty()) {
        *error = BadRequest("bad_words", "bad_words: a word encodes to no tokens");
        return false;
      }
      const std::vector<int32_t>& plain = space ? out.back() : *ids;
      if (!space || ((*ids)[0] != plain[0] && ids->size() == plain.size())) {
        out.push_back(std::move(ids).value());
      }
    }
  }
  return true;
}

bool EchoTokenPromptsAsText(const ServerContext& ctx, OpenAiRequest* r, ApiError* error) {
  for (Prompt& p : r->prompts) {
    const auto* ids = std::get_if<std::vector<int32_t>>(&p);
    if (ids == nullptr) continue;
    if (ctx.tokenizer == nullptr) {
      *error = BadRequest("echo",
                          "echo of a token-id prompt needs the model's tokenizer, and the model "
                          "folder has none");
      return false;
    }
    auto text = ctx.tokenizer->DecodeChecked(*ids, /*skip_special_tokens=*/false);
    if (!text.ok()) {
      *error = BadRequest("prompt", text.status().message());
      return false;
    }
    p = std::move(text).value();
  }
  return true;
}

}  // namespace loom::server
