// Response and SSE chunk bodies in OpenAI's (and vLLM's) shapes, with usage and log-probs.
#include "server/openai_response.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "server/logprob_text.h"

namespace loom::server {

using json = nlohmann::ordered_json;

std::string RandomId(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

const char* FinishReasonField(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "";
}

namespace {

// A token's text decoded alone (what vLLM shows for an entry it has no log-prob record of).
std::string TokenText(const ServerContext& ctx, int32_t id) {
  if (ctx.tokenizer == nullptr) return "token_id:" + std::to_string(id);
  const int32_t one[1] = {id};
  return ctx.tokenizer->Decode(std::span<const int32_t>(one, 1), /*skip_special_tokens=*/false);
}

// A token's text in log-probs, as vLLM gives it (server/logprob_text.h).
std::string DecodedToken(const ServerContext& ctx, int32_t id, std::span<const int32_t> context) {
  if (ctx.tokenizer == nullptr) return "token_id:" + std::to_string(id);
  return LogprobTokenText(*ctx.tokenizer, id, context);
}

// vLLM's return_tokens_as_token_ids (the request's, else --return-tokens-as-token-ids): a log-prob
// entry names its token "token_id:" and the id, e.g. "token_id:1234" (vLLM's
// format_token_id_placeholder), so that tokens whose text is
// not valid UTF-8 on its own, or that decode alike, are told apart. vLLM changes the completions
// `tokens`, the `top_logprobs` keys and an echoed prompt's tokens (`text_offset` then counts the
// names' characters), and chat's `token` and its `top_logprobs`' `token` and `bytes`, but not the
// chosen token's `bytes` (its decoded text's) nor prompt_logprobs' `decoded_token`.
bool TokensAsIds(const ServerContext& ctx, const OpenAiRequest& r) {
  return r.return_tokens_as_token_ids.value_or(ctx.options.return_tokens_as_token_ids);
}
std::string TokenIdName(int32_t id) { return "token_id:" + std::to_string(id); }

// text_offset counts characters, as OpenAI's legacy API and vLLM (Python's len of the token's
// text): UTF-8 lead bytes, not continuation bytes.
size_t Chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// vLLM's stop_reason: the stop string, or the stop token id, or null (EOS, length).
json StopReason(const std::string& text, int32_t token) {
  if (!text.empty()) return text;
  if (token >= 0) return token;
  return nullptr;
}

// vLLM's get_chat_request_role: "assistant", or without add_generation_prompt the role of the
// last message (the one the model continues).
std::string ResponseRole(const OpenAiRequest& r) {
  if (r.add_generation_prompt || !r.messages.is_array() || r.messages.empty()) return "assistant";
  const auto& last = r.messages.back();
  return last.contains("role") && last["role"].is_string() ? last["role"].get<std::string>()
                                                           : "assistant";
}

// Chat `echo` (vLLM): the last message's content when its role is the response's ("" else);
// text parts joined by newlines, as vLLM's string content format joins them.
std::string EchoedContent(const OpenAiRequest& r) {
  if (!r.echo_last_message || !r.messages.is_array() || r.messages.empty()) return "";
  const auto& last = r.messages.back();
  if (!last.contains("role") || last["role"] != ResponseRole(r) || !last.contains("content")) {
    return "";
  }
  const auto& content = last["content"];
  if (content.is_string()) return content.get<std::string>();
  std::string joined;
  if (content.is_array()) {  // the parser admitted text parts only
    for (size_t i = 0; i < content.size(); ++i) {
      if (i > 0) joined += '\n';
      joined += content[i]["text"].get_ref<const std::string&>();
    }
  }
  return joined;
}

json FinishField(FinishReason r) {
  if (r == FinishReason::kNone) return nullptr;
  return FinishReasonField(r);
}

// echo with max_tokens 0: the one token that ran is dropped, so is what ended it (a stop token's
// id, a stop string it made): nothing was generated, "length" as OpenAI's legacy API answers.
FinishReason EchoOnlyFinish(FinishReason r) {
  return r == FinishReason::kStop ? FinishReason::kLength : r;
}

// Chat log-prob entries of tokens [from, to) of a choice.
json ChatLogprobs(const ServerContext& ctx, const OpenAiRequest& r, const std::vector<int32_t>& ids,
                  const std::vector<TokenLogprob>& lps,
                  const std::vector<std::vector<TokenLogprob>>& tops, size_t from, size_t to) {
  const bool as_ids = TokensAsIds(ctx, r);
  json content = json::array();
  for (size_t i = from; i < to; ++i) {
    const auto context = LogprobContext(ids, i);
    const std::string text = DecodedToken(ctx, ids[i], context);
    json top = json::array();
    for (int k = 0; k < r.logprobs && k < static_cast<int>(tops[i].size()); ++k) {
      const TokenLogprob& alt = tops[i][static_cast<size_t>(k)];
      const std::string t = as_ids ? TokenIdName(alt.token) : DecodedToken(ctx, alt.token, context);
      top.push_back({{"token", t}, {"logprob", alt.logprob}, {"bytes", Bytes(t)}});
    }
    // The chosen token's bytes stay its text's with token ids (vLLM: its decoded_token's).
    content.push_back({{"token", as_ids ? TokenIdName(ids[i]) : text},
                       {"logprob", lps[i].logprob},
                       {"bytes", Bytes(text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Completions log-probs of tokens [from, to); offsets count from `offset`.
json CompletionLogprobs(const ServerContext& ctx, const OpenAiRequest& r,
                        const std::vector<int32_t>& ids, const std::vector<TokenLogprob>& lps,
                        const std::vector<std::vector<TokenLogprob>>& tops, size_t from, size_t to,
                        size_t* offset) {
  const bool as_ids = TokensAsIds(ctx, r);
  json tokens = json::array(), token_lps = json::array(), top_lps = json::array(),
       offsets = json::array();
  for (size_t i = from; i < to; ++i) {
    const auto context = LogprobContext(ids, i);
    const std::string tok = as_ids ? TokenIdName(ids[i]) : DecodedToken(ctx, ids[i], context);
    tokens.push_back(tok);
    token_lps.push_back(lps[i].logprob);
    // OpenAI's legacy contract, as vLLM: the chosen token first, then the top N other than it
    // (up to N + 1 entries; logprobs 0 gives the chosen token alone). Keys are decoded text, so
    // two ids that decode alike share one key, the later value kept (a Python dict's rule).
    json top = json::object();
    top[tok] = lps[i].logprob;
    for (int k = 0; k < r.logprobs && k < static_cast<int>(tops[i].size()); ++k) {
      const TokenLogprob& alt = tops[i][static_cast<size_t>(k)];
      if (alt.token != ids[i]) {
        top[as_ids ? TokenIdName(alt.token) : DecodedToken(ctx, alt.token, context)] = alt.logprob;
      }
    }
    top_lps.push_back(top);
    offsets.push_back(*offset);
    *offset += Chars(tok);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", top_lps},
          {"text_offset", offsets}};
}

// Appends each list of a completions log-probs object to *into's.
void AppendLogprobs(json* into, json from) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
    if (!into->contains(key)) (*into)[key] = json::array();
    for (auto& v : from[key]) (*into)[key].push_back(std::move(v));
  }
}

// echo with logprobs: the prompt's entries in the completions shape, as vLLM and OpenAI's
// legacy API; offsets count from 0. Null log-probs where nothing scored the token: the first
// (nothing predicts it), and any after a sequence that failed before scoring its prompt.
json PromptCompletionLogprobs(const ServerContext& ctx, const OpenAiRequest& r,
                              const std::vector<int32_t>& prompt, const ChoiceState& c,
                              size_t* offset) {
  const size_t scored = std::min(c.prompt_logprobs.size(), prompt.size() - 1);
  json out = json::object();
  auto unscored = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const std::string tok =
          TokensAsIds(ctx, r) ? TokenIdName(prompt[i]) : TokenText(ctx, prompt[i]);
      AppendLogprobs(&out, {{"tokens", json::array({tok})},
                            {"token_logprobs", json::array({nullptr})},
                            {"top_logprobs", json::array({nullptr})},
                            {"text_offset", json::array({*offset})}});
      *offset += Chars(tok);
    }
  };
  unscored(0, 1);
  const std::vector<int32_t> predicted(prompt.begin() + 1, prompt.end());  // [i] ↔ entry i
  AppendLogprobs(&out, CompletionLogprobs(ctx, r, predicted, c.prompt_logprobs, c.prompt_top, 0,
                                          scored, offset));
  unscored(1 + scored, prompt.size());
  return out;
}

// vLLM's prompt_logprobs: [null, {"id": {logprob, rank, decoded_token}}, ...], each entry the
// prompt token itself (its rank in the vocabulary: the logits at or above its own) and the
// top-N (ranks 1..N; the prompt token, when among them, has its place there).
json VllmPromptLogprobs(const ServerContext& ctx, const OpenAiRequest& r,
                        const std::vector<int32_t>& prompt, const ChoiceState& c) {
  json out = json::array();
  out.push_back(nullptr);
  for (size_t i = 1; i < prompt.size() && i - 1 < c.prompt_logprobs.size(); ++i) {
    json entry = json::object();
    const int32_t id = prompt[i];
    const auto context = LogprobContext(prompt, i, 1);  // vLLM's first entry (None) gives none
    entry[std::to_string(id)] = {{"logprob", c.prompt_logprobs[i - 1].logprob},
                                 {"rank", c.prompt_ranks[i - 1]},
                                 {"decoded_token", DecodedToken(ctx, id, context)}};
    const auto& alts = c.prompt_top[i - 1];
    // The engine scored max(prompt_logprobs, logprobs) alternatives when echo asked for more.
    for (size_t k = 0; k < alts.size() && k < static_cast<size_t>(r.prompt_logprobs); ++k) {
      // The prompt token among them takes its place here (vLLM builds a dict, the top-N
      // written after the prompt token): rank k + 1, whatever ties its own rank counted.
      const std::string key = std::to_string(alts[k].token);
      entry[key] = {{"logprob", alts[k].logprob},
                    {"rank", static_cast<int64_t>(k) + 1},
                    {"decoded_token", DecodedToken(ctx, alts[k].token, context)}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

json UsageJson(int prompt, int completion) {
  return {{"prompt_tokens", prompt},
          {"total_tokens", prompt + completion},
          {"completion_tokens", completion}};
}

// A whole (non-streamed) response's usage: vLLM's UsageInfo with every field, as it dumps it.
json FullUsageJson(int prompt, int completion) {
  json u = UsageJson(prompt, completion);
  u["prompt_tokens_details"] = nullptr;
  return u;
}

}  // namespace

json BuildFullResponse(const ServerContext& ctx, const OpenAiRequest& r, const ResponseMeta& meta,
                       const GenerationState& state,
                       const std::vector<std::vector<int32_t>>& prompts) {
  const bool chat = r.endpoint == Endpoint::kChat;
  json choices = json::array();
  int completion_tokens = 0;
  // echo with max_tokens 0 (vLLM's echo_without_generation): one token ran and is dropped.
  static const ChoiceState kNothing;
  const std::string echoed = chat ? EchoedContent(r) : std::string();
  for (size_t i = 0; i < state.choices.size(); ++i) {
    const ChoiceState& c = state.choices[i];
    const ChoiceState& gen = r.echo_only ? kNothing : c;  // what the choice generated
    completion_tokens += static_cast<int>(gen.token_ids.size());
    json choice;
    choice["index"] = i;
    if (chat) {
      // vLLM's ChatMessage, every field as it dumps them (null or empty where loom has none):
      // clients written against vLLM read message.tool_calls as a list.
      choice["message"] = {
          {"role", ResponseRole(r)},     {"content", echoed + c.text}, {"refusal", nullptr},
          {"annotations", nullptr},      {"audio", nullptr},     {"function_call", nullptr},
          {"tool_calls", json::array()}, {"reasoning", nullptr}, {"reasoning_content", nullptr}};
      choice["logprobs"] = r.want_logprobs
                               ? ChatLogprobs(ctx, r, c.token_ids, c.logprobs, c.top, 0,
                                              c.token_ids.size())
                               : json(nullptr);
    } else {
      std::string text = gen.text;
      if (r.echo) {
        // EchoTokenPromptsAsText has made every prompt text.
        const auto* s = std::get_if<std::string>(&r.prompts[static_cast<size_t>(c.prompt_index)]);
        if (s != nullptr) text = *s + text;
      }
      choice["text"] = text;
      size_t offset = 0;
      const auto& prompt = prompts[static_cast<size_t>(c.prompt_index)];
      if (r.want_logprobs) {
        json lps = r.echo ? PromptCompletionLogprobs(ctx, r, prompt, c, &offset) : json::object();
        AppendLogprobs(&lps, CompletionLogprobs(ctx, r, gen.token_ids, gen.logprobs, gen.top, 0,
                                                gen.token_ids.size(), &offset));
        choice["logprobs"] = std::move(lps);
      } else {
        choice["logprobs"] = nullptr;
      }
    }
    choice["finish_reason"] =
        FinishField(r.echo_only ? EchoOnlyFinish(c.finish_reason) : c.finish_reason);
    choice["stop_reason"] = r.echo_only ? json(nullptr) : StopReason(c.stop_reason, c.stop_token);
    // vLLM's optional choice fields, null unless asked for (its responses always carry them).
    choice["token_ids"] = r.return_token_ids ? json(gen.token_ids) : json(nullptr);
    if (!chat) {
      const auto& prompt = prompts[static_cast<size_t>(c.prompt_index)];
      choice["prompt_logprobs"] =
          r.prompt_logprobs >= 0 ? VllmPromptLogprobs(ctx, r, prompt, c) : json(nullptr);
    }
    // loom's chat choices carry their prompt's ids too (vLLM's only beside the choices).
    if (!chat || r.return_token_ids) {
      choice["prompt_token_ids"] =
          r.return_token_ids ? json(prompts[static_cast<size_t>(c.prompt_index)]) : json(nullptr);
    }
    choices.push_back(std::move(choice));
  }
  json body;
  body["id"] = meta.id;
  body["object"] = chat ? "chat.completion" : "text_completion";
  body["created"] = meta.created;
  body["model"] = meta.model;
  body["choices"] = std::move(choices);
  // Fields of vLLM's responses that loom has no value for: null, as vLLM dumps them.
  body["service_tier"] = nullptr;
  body["system_fingerprint"] = nullptr;
  body["usage"] = FullUsageJson(meta.prompt_tokens, completion_tokens);
  if (chat) {
    // vLLM gives a chat's prompt log-probs and ids once, beside the choices (every choice has
    // its prompt).
    const bool lps = r.prompt_logprobs >= 0 && !state.choices.empty();
    body["prompt_logprobs"] =
        lps ? VllmPromptLogprobs(ctx, r, prompts.at(0), state.choices[0]) : json(nullptr);
    body["prompt_token_ids"] =
        r.return_token_ids && !prompts.empty() ? json(prompts[0]) : json(nullptr);
  }
  body["kv_transfer_params"] = nullptr;
  return body;
}

StreamWriter::StreamWriter(const ServerContext& ctx, const OpenAiRequest& r, ResponseMeta meta,
                           std::shared_ptr<GenerationState> state)
    : ctx_(ctx), request_(r), meta_(std::move(meta)), state_(std::move(state)) {
  text_offset_.assign(state_->choices.size(), 0);
  first_sent_.assign(state_->choices.size(), false);
}

json StreamWriter::Chunk() const {
  json j;
  j["id"] = meta_.id;
  j["object"] = request_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
  j["created"] = meta_.created;
  j["model"] = meta_.model;
  return j;
}

json StreamWriter::Usage() const { return UsageJson(meta_.prompt_tokens, completion_tokens_); }

void StreamWriter::Write(std::string* out, const json& j) {
  *out += "data: ";
  *out += j.dump(-1, ' ', false, json::error_handler_t::replace);
  *out += "\n\n";
}

json StreamWriter::ChoiceChunk(size_t index, const SequenceUpdate& u) {
  ChoiceState& c = state_->choices[index];
  json choice;
  choice["index"] = index;
  const bool has_lp = request_.want_logprobs && u.has_token;
  const size_t n = c.token_ids.size();
  if (request_.endpoint == Endpoint::kChat) {
    // As vLLM 0.32 without a reasoning or tool parser (DeltaMessage(content=delta_text)): every
    // delta carries its text, "" too, also the finish chunk's when the last token adds none.
    choice["delta"] = json{{"content", u.text}};
    choice["logprobs"] =
        has_lp ? ChatLogprobs(ctx_, request_, c.token_ids, c.logprobs, c.top, n - 1, n) : json(nullptr);
  } else {
    // echo: the choice's first chunk leads with its prompt (text, and with logprobs the prompt's
    // entries), as vLLM's stream; with max_tokens 0 the prompt alone (its one token is dropped).
    const bool echo_now = request_.echo && !first_sent_[index];
    const bool gen = !request_.echo_only && u.has_token;
    std::string text = request_.echo_only ? std::string() : u.text;
    const auto p = static_cast<size_t>(c.prompt_index);
    if (echo_now) {
      if (const auto* s = std::get_if<std::string>(&request_.prompts[p])) text = *s + text;
    }
    choice["text"] = std::move(text);
    json lps = nullptr;
    if (request_.want_logprobs && (echo_now || gen)) {
      lps = echo_now ? PromptCompletionLogprobs(ctx_, request_, state_->prompt_ids.at(p), c,
                                                &text_offset_[index])
                     : json::object();
      if (gen) {
        AppendLogprobs(&lps, CompletionLogprobs(ctx_, request_, c.token_ids, c.logprobs, c.top,
                                                n - 1, n, &text_offset_[index]));
      }
    }
    choice["logprobs"] = std::move(lps);
    if (echo_now) {  // sent: a stream's memory stays flat
      std::vector<TokenLogprob>().swap(c.prompt_logprobs);
      std::vector<int32_t>().swap(c.prompt_ranks);
      std::vector<std::vector<TokenLogprob>>().swap(c.prompt_top);
    }
  }
  choice["finish_reason"] =
      FinishField(request_.echo_only ? EchoOnlyFinish(u.finish_reason) : u.finish_reason);
  choice["stop_reason"] =
      request_.echo_only ? json(nullptr) : StopReason(u.stop_reason, u.stop_token);
  if (request_.return_token_ids) {
    const bool dropped = request_.echo_only;  // the one token echo without generation ran
    choice["token_ids"] = u.has_token && !dropped ? json::array({u.token}) : json::array();
    // vLLM's completions stream: the prompt's ids in each choice's first chunk.
    const auto p = static_cast<size_t>(c.prompt_index);
    if (request_.endpoint != Endpoint::kChat && !first_sent_[index] &&
        p < state_->prompt_ids.size()) {
      choice["prompt_token_ids"] = state_->prompt_ids[p];
    }
  }
  first_sent_[index] = true;
  return choice;
}

bool StreamWriter::WriteUpdate(std::string* out, size_t i, const SequenceUpdate& u) {
  ChoiceState& c = state_->choices[i];
  KeepLast(&c, u);  // a chunk needs only its own token: a stream's memory stays flat
  if (u.has_token && !request_.echo_only) ++completion_tokens_;
  if (u.finish_reason == FinishReason::kError) {
    // As vLLM: the error event ends the whole stream — [DONE] next, no usage chunk, no more
    // deltas of the other choices (the source aborts them: failed()).
    json err = {{"error",
                 {{"message", "generation failed: " + u.error},
                  {"type", "InternalServerError"},
                  {"param", nullptr},
                  {"code", 500}}}};
    Write(out, err);
    *out += "data: [DONE]\n\n";
    ended_ = failed_ = true;
    return false;
  }
  // One chunk per token, as vLLM (text may be empty while a character or a possible stop
  // string is held back), so clients can time every token.
  const bool worth = u.has_token || !u.text.empty() || u.finish_reason != FinishReason::kNone;
  if (!worth) return true;
  json j = Chunk();
  j["choices"] = json::array({ChoiceChunk(i, u)});
  // vLLM's continuous usage: this choice's prompt and the tokens it has generated so far.
  if (request_.include_usage && request_.continuous_usage_stats) {
    j["usage"] = UsageJson(u.prompt_tokens, request_.echo_only ? 0 : u.generated_tokens);
  }
  Write(out, j);
  return true;
}

bool StreamWriter::NextPumpIsLarge() const {
  if (ended_) return false;
  // Chat echo's first pump: the echoed message (up to a body's size) once per choice.
  if (!started_ && request_.echo_last_message) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  // Completions echo: each choice's first chunk leads with its prompt's text (64 prompts × n 16 of
  // long token-id prompts: megabytes a pump), with logprobs its entries too. Only a choice with
  // an update to send counts: one still prefilling made every pump a worker's, and the worker's
  // re-pump another (a busy loop until every choice had sent its first chunk).
  if (request_.echo) {
    for (size_t i = 0; i < first_sent_.size(); ++i) {
      if (!first_sent_[i] && !state_->choices[i].pending.empty()) return true;
    }
  }
  // Each pending token's chunk: its text, and with logprobs the token and each alternative
  // decoded (a character split over tokens decoded again with up to 4 tokens before it).
  const size_t entries = 1 + (request_.want_logprobs ? static_cast<size_t>(request_.logprobs) : 0);
  return state_->pending_updates * entries > kLargePumpEntries;
}

bool StreamWriter::Overrun() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->pending_bytes > kMaxPendingBytes) return true;
  // Past the server-wide bound, a stream more than kMaxPendingBytes / 16 behind is dropped: many
  // slow readers, each within its own bound, held the engine's output for all of them.
  return state_->all_pending_bytes != nullptr &&
         state_->all_pending_bytes->load() > kMaxAllPendingBytes &&
         state_->pending_bytes > kMaxPendingBytes / 16;
}

bool StreamWriter::Pump(std::string* out, size_t max_bytes) {
  if (ended_) return true;
  const size_t appended_from = out->size();
  const bool chat = request_.endpoint == Endpoint::kChat;
  if (!started_) {
    started_ = true;
    if (chat) {
      for (size_t i = 0; i < state_->choices.size(); ++i) {
        json j = Chunk();
        j["choices"] = json::array({{{"index", i},
                                     {"delta", {{"role", ResponseRole(request_)}, {"content", ""}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
        // vLLM's chat stream: the prompt's ids beside the role chunk's choices.
        if (request_.return_token_ids && !state_->prompt_ids.empty()) {
          j["prompt_token_ids"] = state_->prompt_ids[0];
        }
        if (request_.include_usage && request_.continuous_usage_stats) {
          j["usage"] = UsageJson(meta_.prompt_tokens, 0);  // chat has one prompt
        }
        Write(out, j);
      }
      // vLLM's chat echo: after the role chunks, a chunk per choice with the echoed content.
      const std::string echoed = EchoedContent(request_);
      for (size_t i = 0; !echoed.empty() && i < state_->choices.size(); ++i) {
        json j = Chunk();
        j["choices"] = json::array({{{"index", i},
                                     {"delta", {{"content", echoed}}},
                                     {"logprobs", nullptr},
                                     {"finish_reason", nullptr}}});
        if (request_.include_usage && request_.continuous_usage_stats) {
          j["usage"] = UsageJson(meta_.prompt_tokens, 0);
        }
        Write(out, j);
      }
    }
  }
  const size_t num_choices = state_->choices.size();
  // One pass over the choices from next_choice_, each one's pending updates in order; the pass
  // stops at the bound, and the next Pump resumes at that choice.
  for (size_t k = 0; k < num_choices; ++k) {
    const size_t i = (next_choice_ + k) % num_choices;
    ChoiceState& c = state_->choices[i];
    for (;;) {
      if (out->size() - appended_from >= max_bytes) {
        next_choice_ = i;
        return false;
      }
      SequenceUpdate u;
      {
        std::lock_guard<std::mutex> lock(state_->mu);
        if (c.pending.empty()) break;
        u = std::move(c.pending.front());
        c.pending.pop_front();
        --state_->pending_updates;
        state_->TakePending(PendingBytes(u));
      }
      if (!WriteUpdate(out, i, u)) return true;  // an error event ended the stream
    }
  }
  bool all_done = false;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    all_done = state_->unfinished == 0 && state_->pending_updates == 0;
  }
  if (all_done) {
    if (request_.include_usage) {
      json j = Chunk();
      j["choices"] = json::array();
      j["usage"] = Usage();
      Write(out, j);
    }
    *out += "data: [DONE]\n\n";
    ended_ = true;
  }
  return ended_;
}

}  // namespace loom::server
