// Strict OpenAI request parsing: every key is dispatched to a handler; an unknown key is a 400.
#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "base/json.h"
#include "engine/request_fields.h"
#include "server/vllm_fields.h"
#include "tokenizer/jinja/utf8.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

struct Parser {
  const json& body;
  ApiError* error;
  bool failed = false;

  bool Fail(const std::string& field, const std::string& message) {
    if (!failed) *error = BadRequest(field, message);
    failed = true;
    return false;
  }
  bool Check(const std::string& field, const Status& st) {
    return st.ok() ? true : Fail(field, st.message());
  }
  bool Int(const std::string& field, const json& v, int64_t lo, int64_t hi, int64_t* out) {
    return Check(field, JsonInt(field, v, lo, hi, out));
  }
  bool Int32(const std::string& field, const json& v, int64_t lo, int64_t hi, int* out) {
    return Check(field, JsonInt32(field, v, lo, hi, out));
  }
  bool Bool(const std::string& field, const json& v, bool* out) {
    return Check(field, JsonBool(field, v, out));
  }
  bool TokenIds(const std::string& field, const json& v, std::vector<int32_t>* out) {
    if (!v.is_array()) return Fail(field, field + " must be a list of token ids");
    out->clear();
    for (const auto& x : v) {
      int64_t id = 0;
      if (!x.is_number_integer()) return Fail(field, field + " must be a list of integer token ids");
      if (!Int(field, x, 0, std::numeric_limits<int32_t>::max(), &id)) return false;
      out->push_back(static_cast<int32_t>(id));
    }
    return true;
  }
};

using Handler = std::function<bool(Parser&, const json&, OpenAiRequest*)>;

// A field accepted without effect when null or when `ok` holds for it; anything else fails
// with `message` (a 400 naming the field).
Handler NoEffect(std::string field, std::function<bool(const json&)> ok, std::string message) {
  return [field = std::move(field), ok = std::move(ok), message = std::move(message)](
             Parser& p, const json& v, OpenAiRequest*) {
    return v.is_null() || ok(v) || p.Fail(field, message);
  };
}
bool IsString(const json& v) { return v.is_string(); }
bool IsBool(const json& v) { return v.is_boolean(); }
bool Never(const json&) { return false; }
// Null or one of `values`.
Handler NullOrOneOf(const char* field, std::vector<std::string> values, const char* message) {
  return NoEffect(
      field,
      [values = std::move(values)](const json& v) {
        return std::find(values.begin(), values.end(), v) != values.end();
      },
      message);
}

// A boolean field; null leaves the default.
Handler OptionalBool(const char* field, bool OpenAiRequest::*member) {
  return [field, member](Parser& p, const json& v, OpenAiRequest* r) {
    return v.is_null() || p.Bool(field, v, &(r->*member));
  };
}

void AddModel(std::map<std::string, Handler>* h) {
  // null and "" are as absent: a request without a model names the base (as vLLM, whose
  // `model` is optional on every route and whose _is_model_supported takes any falsy name as
  // the base; OpenAI's API requires it).
  (*h)["model"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (!v.is_string()) return p.Fail("model", "model must be a string");
    r->model = v.get<std::string>();
    return true;
  };
}

// Fields both generation endpoints share.
void AddCommon(std::map<std::string, Handler>* h) {
  auto& m = *h;
  AddModel(h);
  m["n"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    return p.Int32("n", v, 1, 16, &r->n);
  };
  m["stream"] = OptionalBool("stream", &OpenAiRequest::stream);
  m["stream_options"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (!v.is_object()) return p.Fail("stream_options", "stream_options must be an object");
    // vLLM 0.32's StreamOptions: both default to false (null too), and continuous_usage_stats
    // acts only with include_usage (should_include_usage).
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() == "include_usage") {
        if (!it.value().is_null() &&
            !p.Bool("stream_options.include_usage", it.value(), &r->include_usage)) {
          return false;
        }
      } else if (it.key() == "continuous_usage_stats") {
        if (!it.value().is_null() &&
            !p.Bool("stream_options.continuous_usage_stats", it.value(),
                    &r->continuous_usage_stats)) {
          return false;
        }
      } else {
        const std::string field = "stream_options." + KeyForMessage(it.key());
        return p.Fail(field, "unknown field '" + field + "'");
      }
    }
    return true;
  };
  m["stop"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (v.is_string()) {
      r->stop = {v.get<std::string>()};
    } else if (v.is_array()) {
      if (v.size() > 16) return p.Fail("stop", "stop takes at most 16 strings");
      for (const auto& s : v) {
        if (!s.is_string()) return p.Fail("stop", "stop must be a string or a list of strings");
        r->stop.push_back(s.get<std::string>());
      }
    } else {
      return p.Fail("stop", "stop must be a string or a list of strings");
    }
    for (const auto& s : r->stop) {
      if (s.empty()) return p.Fail("stop", "stop strings must not be empty");
      if (s.size() > 256) return p.Fail("stop", "stop strings are limited to 256 bytes");
    }
    return true;
  };
  m["stop_token_ids"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (v.is_array() && v.size() > 256) return p.Fail("stop_token_ids", "at most 256 stop_token_ids");
    return p.TokenIds("stop_token_ids", v, &r->stop_token_ids);
  };
  m["include_stop_str_in_output"] =
      OptionalBool("include_stop_str_in_output", &OpenAiRequest::include_stop_str_in_output);
  m["skip_special_tokens"] =
      OptionalBool("skip_special_tokens", &OpenAiRequest::skip_special_tokens);
  // Fast tokenizers (loom's tokenizer.json) put no spaces between special tokens either way;
  // vLLM's fast detokenizer, with it false, writes an added token after another as its raw
  // content, the same text with loom's decoders but for content they rewrite (docs/API.md).
  m["spaces_between_special_tokens"] =
      NoEffect("spaces_between_special_tokens", IsBool, "spaces_between_special_tokens must be a boolean");
  m["add_special_tokens"] = OptionalBool("add_special_tokens", &OpenAiRequest::add_special_tokens);
  m["return_token_ids"] = OptionalBool("return_token_ids", &OpenAiRequest::return_token_ids);
  m["return_tokens_as_token_ids"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    bool as_ids = false;
    if (!p.Bool("return_tokens_as_token_ids", v, &as_ids)) return false;
    r->return_tokens_as_token_ids = as_ids;
    return true;
  };
  m["prompt_logprobs"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    return v.is_null() || p.Int32("prompt_logprobs", v, 0, 20, &r->prompt_logprobs);
  };
  m["bad_words"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (!v.is_array()) return p.Fail("bad_words", "bad_words must be a list of strings");
    if (v.size() > 64) return p.Fail("bad_words", "at most 64 bad_words");
    for (const auto& w : v) {
      if (!w.is_string()) return p.Fail("bad_words", "bad_words must be a list of strings");
      const std::string s = w.get<std::string>();
      if (s.size() > 256) return p.Fail("bad_words", "bad_words are limited to 256 bytes each");
      // vLLM encodes each word with its leading whitespace stripped (Python's str.lstrip): a
      // blank one has no tokens.
      if (jinja::PyStrip(s, true, false, nullptr).empty()) {
        return p.Fail("bad_words", "bad_words must not be empty or whitespace");
      }
      r->bad_words.push_back(s);
    }
    return true;
  };
  m["truncate_prompt_tokens"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (!p.Int32("truncate_prompt_tokens", v, -1, kMaxTokensLimit, &r->truncate_prompt_tokens)) {
      return false;
    }
    if (r->truncate_prompt_tokens == 0) {
      return p.Fail("truncate_prompt_tokens", "truncate_prompt_tokens must be -1 or at least 1");
    }
    return true;
  };
  // vLLM's cache_salt, checked as vLLM 0.32's validate_cache_salt: a non-empty string of at
  // most 128 characters without '@', '/', '\\' or NUL (null: none).
  m["cache_salt"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
      return p.Fail("cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.");
    }
    const std::string& salt = v.get_ref<const std::string&>();
    size_t characters = 0;  // as Python's len: the JSON reader has checked the UTF-8
    for (unsigned char c : salt) characters += (c & 0xC0) != 0x80;
    if (characters > 128 || salt.find_first_of(std::string("@/\\\0", 4)) != std::string::npos) {
      return p.Fail("cache_salt",
                    "Parameter 'cache_salt' must be at most 128 characters and must not contain "
                    "'@', '/', '\\\\', or NUL.");  // two backslashes, as vLLM's message
    }
    r->cache_salt = salt;
    return true;
  };
  m["truncation_side"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (v != "left" && v != "right") {
      return p.Fail("truncation_side", "`truncation_side` must be either 'left' or 'right'.");
    }
    r->truncation_side = v.get<std::string>();
    return true;
  };
  // Accepted with no effect (docs/API.md): an end-user id for abuse monitoring.
  m["user"] = NoEffect("user", IsString, "user must be a string");
  // vLLM's request_id: the response's id ("chatcmpl-" / "cmpl-" + it) when no X-Request-Id
  // header names one.
  m["request_id"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (!v.is_string() || !UsableRequestId(v.get_ref<const std::string&>())) {
      return p.Fail("request_id", "request_id must be a string of 1 to 128 visible ASCII characters");
    }
    r->request_id = v.get<std::string>();
    return true;
  };
}

// Fields both generation endpoints take as chat does: OpenAI's storage fields (no effect) and
// response_format as plain text. vLLM's CompletionRequest has response_format; vLLM declares no
// store, metadata or service_tier on either endpoint and ignores them.
void AddOpenAiShared(std::map<std::string, Handler>* h) {
  auto& m = *h;
  // OpenAI fields with no meaning for a self-hosted server, accepted with no effect
  // (docs/API.md): storing the completion, its tags and the service tier.
  m["store"] = NoEffect("store", IsBool, "store must be a boolean");
  m["metadata"] = [](Parser& p, const json& v, OpenAiRequest*) {
    if (v.is_null()) return true;
    // OpenAI's limits: at most 16 pairs, keys of at most 64 characters, values of 512.
    if (!v.is_object() || v.size() > 16) {
      return p.Fail("metadata", "metadata must be an object of at most 16 strings");
    }
    // Characters, as OpenAI counts them (the JSON reader has checked the UTF-8): a 64-character
    // key in a non-Latin script is up to 256 bytes.
    auto characters = [](const std::string& s) {
      size_t n = 0;
      for (unsigned char c : s) n += (c & 0xC0) != 0x80;
      return n;
    };
    for (const auto& [key, value] : v.items()) {
      if (!value.is_string() || characters(key) > 64 ||
          characters(value.get_ref<const std::string&>()) > 512) {
        return p.Fail("metadata",
                      "metadata values must be strings of at most 512 characters, keys of 64");
      }
    }
    return true;
  };
  m["service_tier"] =
      NullOrOneOf("service_tier", {"auto", "default", "flex", "scale", "priority"},
                  "service_tier must be one of auto, default, flex, scale, priority");
  m["response_format"] = [](Parser& p, const json& v, OpenAiRequest*) {
    if (v.is_null()) return true;
    if (v.is_object() && v.size() == 1 && v.contains("type") && v["type"] == "text") return true;
    return p.Fail("response_format",
                  "response_format other than {\"type\": \"text\"} is not supported yet");
  };
}

void AddCompletions(std::map<std::string, Handler>* h) {
  auto& m = *h;
  AddOpenAiShared(h);
  m["prompt"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    auto one = [&](const json& x) -> bool {
      if (x.is_string()) {
        r->prompts.emplace_back(x.get<std::string>());
        return true;
      }
      std::vector<int32_t> ids;
      if (!p.TokenIds("prompt", x, &ids)) return false;
      r->prompts.emplace_back(std::move(ids));
      return true;
    };
    if (v.is_string()) return one(v);
    if (!v.is_array() || v.empty()) {
      return p.Fail("prompt", "prompt must be a string, a list of token ids, or a non-empty list of those");
    }
    if (v[0].is_number()) return one(v);
    if (v.size() > 64) return p.Fail("prompt", "at most 64 prompts in one request");
    for (const auto& x : v) {
      if (!x.is_string() && !x.is_array()) {
        return p.Fail("prompt", "prompt list entries must be strings or lists of token ids");
      }
      if (!one(x)) return false;
    }
    return true;
  };
  m["echo"] = OptionalBool("echo", &OpenAiRequest::echo);
  m["logprobs"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (!p.Int32("logprobs", v, 0, 20, &r->logprobs)) return false;
    r->want_logprobs = true;
    return true;
  };
  m["best_of"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    int best_of = 0;
    if (!p.Int32("best_of", v, 1, 16, &best_of)) return false;
    // best_of == n is the same as not asking; anything else would need ranking.
    if (best_of != 1 && best_of != r->n) {
      return p.Fail("best_of", "best_of other than 1 or n is not supported");
    }
    return true;
  };
  m["suffix"] = [](Parser& p, const json& v, OpenAiRequest*) {
    if (v.is_null()) return true;
    return p.Fail("suffix", "suffix is not supported");
  };
}

// The fields that make a chat prompt: /v1/chat/completions and /tokenize's messages form.
void AddChatPrompt(std::map<std::string, Handler>* h) {
  auto& m = *h;
  m["messages"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;  // as absent: chat requires it, /tokenize then needs prompt
    if (!v.is_array() || v.empty()) return p.Fail("messages", "messages must be a non-empty list");
    if (CountJsonValues(v, kMaxTemplateValues) > kMaxTemplateValues) {
      return p.Fail("messages", "messages holds more than " + std::to_string(kMaxTemplateValues) +
                                    " JSON values (each becomes a template value)");
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const json& msg = v[i];
      const std::string where = "messages[" + std::to_string(i) + "]";
      if (!msg.is_object()) return p.Fail(where, where + " must be an object");
      if (!msg.contains("role") || !msg["role"].is_string()) {
        return p.Fail(where + ".role", where + ".role must be a string");
      }
      if (msg.contains("content")) {
        const json& c = msg["content"];
        if (!c.is_string() && !c.is_null() && !c.is_array()) {
          return p.Fail(where + ".content", where + ".content must be a string or a list of parts");
        }
        if (c.is_array()) {
          for (const auto& part : c) {
            if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
                !part.contains("text") || !part["text"].is_string()) {
              return p.Fail(where + ".content",
                            where + ".content parts must be {\"type\": \"text\", \"text\": ...}; "
                                    "images and audio are not supported");
            }
          }
        }
      }
    }
    r->messages = v;
    return true;
  };
  m["chat_template_kwargs"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    if (!v.is_object()) return p.Fail("chat_template_kwargs", "chat_template_kwargs must be an object");
    if (CountJsonValues(v, kMaxTemplateValues) > kMaxTemplateValues) {
      return p.Fail("chat_template_kwargs", "chat_template_kwargs holds more than " +
                                                std::to_string(kMaxTemplateValues) +
                                                " JSON values");
    }
    r->chat_template_kwargs = v;
    return true;
  };
  m["add_generation_prompt"] =
      OptionalBool("add_generation_prompt", &OpenAiRequest::add_generation_prompt);
  m["continue_final_message"] =
      OptionalBool("continue_final_message", &OpenAiRequest::continue_final_message);
  m["tools"] = [](Parser& p, const json& v, OpenAiRequest*) {
    if (v.is_null() || (v.is_array() && v.empty())) return true;
    return p.Fail("tools", "tools are not supported yet");
  };
}

void AddChat(std::map<std::string, Handler>* h) {
  auto& m = *h;
  AddChatPrompt(h);
  AddOpenAiShared(h);
  m["max_completion_tokens"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    r->max_tokens_given = true;
    r->max_tokens_field = "max_completion_tokens";
    return p.Int32("max_completion_tokens", v, 1, kMaxTokensLimit, &r->params.max_tokens);
  };
  m["logprobs"] = OptionalBool("logprobs", &OpenAiRequest::want_logprobs);
  m["echo"] = OptionalBool("echo", &OpenAiRequest::echo_last_message);
  m["top_logprobs"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (v.is_null()) return true;
    return p.Int32("top_logprobs", v, 0, 20, &r->logprobs);
  };
  m["tool_choice"] =
      NullOrOneOf("tool_choice", {"none"}, "tool_choice is not supported yet (only \"none\")");
  // No effect without tools, which are rejected.
  m["parallel_tool_calls"] = NoEffect("parallel_tool_calls", IsBool, "must be a boolean");
  // Reasoning effort and verbosity: vLLM accepts them and a model without reasoning ignores
  // them; so does loom (no model it serves reasons).
  m["reasoning_effort"] = NullOrOneOf("reasoning_effort", {"minimal", "low", "medium", "high"},
                                      "reasoning_effort must be minimal, low, medium or high");
  m["verbosity"] =
      NullOrOneOf("verbosity", {"low", "medium", "high"}, "verbosity must be low, medium or high");
  // Accepted with no effect: the prompt-cache key (loom caches prefixes by itself) and the
  // end-user id.
  for (const char* field : {"prompt_cache_key", "safety_identifier"}) {
    m[field] = NoEffect(field, IsString, std::string(field) + " must be a string");
  }
  // OpenAI capabilities loom does not have: null (as SDKs send an unset field) or the value
  // that asks for nothing is accepted, anything else is a 400 naming the field.
  m["functions"] = NoEffect(
      "functions", [](const json& v) { return v.is_array() && v.empty(); },
      "functions are not supported yet");
  m["function_call"] =
      NullOrOneOf("function_call", {"none"}, "function_call is not supported yet (only \"none\")");
  m["modalities"] = NoEffect(
      "modalities", [](const json& v) { return v == json::array({"text"}); },
      "only the text modality is supported ([\"text\"])");
  for (const char* field : {"audio", "prediction", "web_search_options"}) {
    m[field] = NoEffect(field, Never, std::string(field) + " is not supported");
  }
}

// vLLM's /tokenize ({"prompt": text} or the chat prompt's fields) and /detokenize.
void AddTokenize(std::map<std::string, Handler>* h) {
  auto& m = *h;
  AddModel(h);
  AddChatPrompt(h);
  m["prompt"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    if (!v.is_string())
      return p.Fail("prompt", "prompt must be a string (send token ids to /detokenize)");
    r->prompts.emplace_back(v.get<std::string>());
    return true;
  };
  m["add_special_tokens"] = OptionalBool("add_special_tokens", &OpenAiRequest::add_special_tokens);
  m["return_token_strs"] = OptionalBool("return_token_strs", &OpenAiRequest::return_token_strs);
}

void AddDetokenize(std::map<std::string, Handler>* h) {
  AddModel(h);
  (*h)["tokens"] = [](Parser& p, const json& v, OpenAiRequest* r) {
    return p.TokenIds("tokens", v, &r->tokens);
  };
}

}  // namespace

bool ParseOpenAiRequest(const std::string& body, Endpoint endpoint, OpenAiRequest* out,
                        ApiError* error, int max_nesting) {
  *out = OpenAiRequest{};
  out->endpoint = endpoint;
  const bool generation = endpoint == Endpoint::kCompletions || endpoint == Endpoint::kChat;
  if (endpoint == Endpoint::kCompletions) out->params.max_tokens = 16;
  JsonLimits limits;
  limits.max_bytes = body.size();  // the HTTP layer bounds it (--max-body)
  limits.max_depth = max_nesting;
  limits.max_containers = kMaxRequestContainers;
  auto parsed = ParseOrderedJson(body, "request body", limits);
  if (!parsed.ok()) {
    *error = BadRequest("", parsed.status().message());
    return false;
  }
  json j = std::move(parsed).value();
  if (!j.is_object()) {
    *error = BadRequest("", "the request body must be a JSON object");
    return false;
  }
  // Special tokens are added to text prompts, not to a rendered chat (as vLLM).
  out->add_special_tokens =
      endpoint == Endpoint::kCompletions ||
      (endpoint == Endpoint::kTokenize && (!j.contains("messages") || j["messages"].is_null()));
  std::map<std::string, Handler> handlers;
  switch (endpoint) {
    case Endpoint::kCompletions:
      AddCommon(&handlers);
      AddCompletions(&handlers);
      break;
    case Endpoint::kChat:
      AddCommon(&handlers);
      AddChat(&handlers);
      break;
    case Endpoint::kTokenize:
      AddTokenize(&handlers);
      break;
    case Endpoint::kDetokenize:
      AddDetokenize(&handlers);
      break;
  }
  // max_tokens 0 asks for the echoed prompt alone (checked against echo below): one token runs.
  if (endpoint == Endpoint::kCompletions && j.contains("max_tokens") &&
      j["max_tokens"].is_number() && j["max_tokens"].get<double>() == 0) {
    j["max_tokens"] = 1;
    out->echo_only = true;
  }
  Parser p{j, error};
  // n first: best_of is checked against it.
  if (generation && j.contains("n") && !handlers["n"](p, j["n"], out)) return false;
  // max_completion_tokens last: when both are sent it wins over max_tokens whatever the key
  // order (vLLM: max_completion_tokens or max_tokens).
  const bool completion_tokens_last = handlers.count("max_completion_tokens") > 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (generation && it.key() == "n") continue;
    if (completion_tokens_last && it.key() == "max_completion_tokens") continue;
    // Sampling fields: one parser for the server and the CLI's --batch files.
    Status sampling;
    if (generation && ParseSamplingField(it.key(), it.value(), &out->params, &sampling)) {
      if (!sampling.ok()) {
        *error = BadRequest(it.key(), sampling.message());
        return false;
      }
      if (it.key() == "max_tokens" && !it.value().is_null()) out->max_tokens_given = true;
      if (!it.value().is_null()) out->sampling_given.push_back(it.key());
      continue;
    }
    auto h = handlers.find(it.key());
    if (h == handlers.end()) {
      // vLLM's fields that have no effect here (at their default, or ignored by vLLM too).
      std::string refusal;
      if (generation && CheckNoEffectField(it.key(), it.value(), endpoint, &refusal)) {
        if (refusal.empty()) continue;
        *error = BadRequest(it.key(), refusal);
        return false;
      }
      const std::string field = KeyForMessage(it.key());
      *error = BadRequest(field, "unknown field '" + field + "'");
      return false;
    }
    if (!h->second(p, it.value(), out)) return false;
  }
  if (completion_tokens_last && j.contains("max_completion_tokens") &&
      !handlers["max_completion_tokens"](p, j["max_completion_tokens"], out)) {
    return false;
  }
  if (endpoint == Endpoint::kTokenize) {
    if (out->has_messages() == !out->prompts.empty()) {
      *error = out->has_messages()
                   ? BadRequest("messages", "send either prompt or messages, not both")
                   : BadRequest("prompt", "prompt (text) or messages is required");
      return false;
    }
    if (!out->has_messages()) {
      for (const char* key :
           {"add_generation_prompt", "continue_final_message", "chat_template_kwargs", "tools"}) {
        if (j.contains(key) && !j[key].is_null()) {
          *error = BadRequest(key, std::string(key) + " applies to messages, not to a text prompt");
          return false;
        }
      }
    }
  }
  if (endpoint == Endpoint::kDetokenize && !j.contains("tokens")) {
    *error = BadRequest("tokens", "tokens is required");
    return false;
  }
  if (endpoint == Endpoint::kCompletions && out->prompts.empty()) {
    *error = BadRequest("prompt", "prompt is required");
    return false;
  }
  if (endpoint == Endpoint::kChat && out->messages.is_null()) {
    *error = BadRequest("messages", "messages is required");
    return false;
  }
  if (out->has_messages()) {
    if (out->logprobs > 0 && !out->want_logprobs) {
      *error = BadRequest("top_logprobs", "top_logprobs needs logprobs=true");
      return false;
    }
    // vLLM 0.32 merges the request's own fields over chat_template_kwargs (build_chat_params:
    // merge_kwargs(chat_template_kwargs, {add_generation_prompt, continue_final_message, ...}),
    // which keeps a kwarg only where the field is None or "auto"; these two are booleans with
    // defaults, never None): add_generation_prompt / continue_final_message there have no
    // effect, whatever their value. messages / tools there clash with the request's own
    // (transformers: a duplicate keyword, a 400 in vLLM too): refused by name; so are documents,
    // which vLLM renders and loom does not support (as the request's `documents`).
    if (out->chat_template_kwargs.is_object()) {
      json& kw = out->chat_template_kwargs;
      kw.erase("add_generation_prompt");
      kw.erase("continue_final_message");
      for (const std::string key : {"messages", "tools"}) {
        if (kw.contains(key)) {
          *error = BadRequest("chat_template_kwargs", "chat_template_kwargs." + key +
                                                          " is not accepted: send the request's '" +
                                                          key + "' field");
          return false;
        }
      }
      if (kw.contains("documents")) {
        *error = BadRequest("chat_template_kwargs",
                            "chat_template_kwargs.documents is not supported (RAG documents are "
                            "not rendered)");
        return false;
      }
    }
    if (out->continue_final_message && out->add_generation_prompt) {
      *error = BadRequest("continue_final_message",
                          "continue_final_message and add_generation_prompt cannot both be true");
      return false;
    }
  }
  // As vLLM: any non-empty stream_options without stream=true is refused (even
  // {"include_usage": false}).
  if (!out->stream && j.contains("stream_options") && j["stream_options"].is_object() &&
      !j["stream_options"].empty()) {
    *error = BadRequest("stream_options", "stream_options needs stream=true");
    return false;
  }
  if (out->echo_only && !out->echo) {
    *error = BadRequest("max_tokens", "max_tokens must be at least 1 (0 only with echo)");
    return false;
  }
  if (out->echo_only && out->params.min_tokens > 0) {  // checked here: one token runs inside
    *error = BadRequest("min_tokens", "min_tokens must be in [0, max_tokens = 0], got " +
                                          std::to_string(out->params.min_tokens));
    return false;
  }
  // As vLLM: a stream carries no prompt log-probs; 0 is accepted there with no effect (vLLM
  // computes them and streams nothing), more is refused with vLLM's message.
  if (out->prompt_logprobs > 0 && out->stream) {
    *error = BadRequest("prompt_logprobs", "`prompt_logprobs` are not available when `stream=True`.");
    return false;
  }
  if (out->stream) out->prompt_logprobs = -1;
  return true;
}

bool UsableRequestId(std::string_view id) {
  return !id.empty() && id.size() <= 128 &&
         std::all_of(id.begin(), id.end(), [](char ch) { return ch > 0x20 && ch < 0x7F; });
}

bool CheckLogitBiasBudget(const OpenAiRequest& r, int64_t sequences, ApiError* error) {
  const auto entries = static_cast<int64_t>(r.params.logit_bias.size());
  if (entries * sequences <= kMaxLogitBiasEntries) return true;
  *error = BadRequest("logit_bias", "logit_bias has " + std::to_string(entries) + " entries for " +
                                        std::to_string(sequences) + " sequences; at most " +
                                        std::to_string(kMaxLogitBiasEntries) +
                                        " entries × sequences per request");
  return false;
}

bool CheckGreedyChoices(const OpenAiRequest& r, ApiError* error) {
  if (r.n <= 1 || !Sampler::IsGreedy(r.params)) return true;
  *error =
      BadRequest("n", "n must be 1 when using greedy sampling, got " + std::to_string(r.n) + ".");
  return false;
}

int PromptLogprobsTop(const OpenAiRequest& r) {
  return std::max(r.prompt_logprobs, r.echo && r.want_logprobs ? r.logprobs : -1);
}

bool CheckPromptLogprobBudget(const OpenAiRequest& r, const std::vector<std::vector<int32_t>>& prompts,
                              ApiError* error) {
  const int top = PromptLogprobsTop(r);
  if (top < 0) return true;
  int64_t tokens = 0;
  for (const auto& p : prompts) tokens += static_cast<int64_t>(p.size());
  const int64_t entries = tokens * r.n * (top + 1);
  const int64_t limit = r.stream ? kMaxStreamPromptLogprobEntries : kMaxPromptLogprobEntries;
  if (entries <= limit) return true;
  const char* field = r.prompt_logprobs >= 0 ? "prompt_logprobs" : "logprobs";
  *error = BadRequest(field, std::string(field) + " asks for " + std::to_string(entries) +
                                 " prompt log-prob entries (" + std::to_string(tokens) + " prompt tokens × n " +
                                 std::to_string(r.n) + " × " + std::to_string(top + 1) + "); at most " +
                                 std::to_string(limit) + " per request" +
                                 (r.stream ? " with stream=true (more without stream)" : "") +
                                 ": send fewer or shorter prompts, or fewer alternatives");
  return false;
}

}  // namespace loom::server
