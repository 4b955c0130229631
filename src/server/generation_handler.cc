// /v1/completions and /v1/chat/completions: request → prompts → sequences → JSON body or SSE stream.
#include "server/generation_handler.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "server/generation_state.h"
#include "server/openai_response.h"
#include "server/prompt_builder.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

// The error's field for an engine validation failure.
std::string ParamFor(const Status& st) {
  const std::string& m = st.message();
  if (m.rfind("stop strings", 0) == 0) return "stop";  // a model folder without tokenizer.json
  if (m.rfind("min_tokens", 0) == 0) return "min_tokens";  // names max_tokens too
  if (m.rfind("logit_bias", 0) == 0) return "logit_bias";
  if (m.rfind("prompt_logprobs", 0) == 0) return "prompt_logprobs";
  if (m.rfind("allowed_token_ids", 0) == 0) return "allowed_token_ids";
  if (m.rfind("bad_words", 0) == 0) return "bad_words";
  if (m.find("max_tokens") != std::string::npos) return "max_tokens";
  if (m.find("prompt") != std::string::npos) return "prompt";
  if (m.find("stop_token_ids") != std::string::npos) return "stop_token_ids";
  return "";
}

// A sequence's max_tokens, as vLLM 0.32's get_max_tokens: the request's (a chat without one:
// the model's recommended max_new_tokens, else no bound), capped by --override-generation-config's
// max_new_tokens and by the room the prompt leaves in the context (the sequence then ends there
// with finish_reason "length"). Only a max_tokens above the whole context is refused
// (CheckMaxTokens). `prompt_len` is below the context (longer prompts are refused first).
int MaxTokensFor(const ServerContext& ctx, const OpenAiRequest& r, size_t prompt_len) {
  const int room = std::max(1, ctx.max_model_len - static_cast<int>(prompt_len));
  int max_tokens = r.params.max_tokens;
  const GenerationDefaults& defaults = ctx.options.generation_defaults;
  if (!r.max_tokens_given && r.endpoint == Endpoint::kChat) {
    max_tokens = defaults.max_tokens ? *defaults.max_tokens : room;
  }
  if (defaults.max_tokens_cap) max_tokens = std::min(max_tokens, *defaults.max_tokens_cap);
  return std::min(max_tokens, room);
}

// As vLLM 0.32 (renderers/params.py's TokenizeParams): a max_tokens above the whole context can
// never run, a 400 in vLLM's words naming the field the request sent (a completion's default 16
// counts; a chat without one has none; echo with max_tokens 0 asks for none).
bool CheckMaxTokens(const ServerContext& ctx, const OpenAiRequest& r, ApiError* error) {
  if (r.echo_only || (!r.max_tokens_given && r.endpoint == Endpoint::kChat)) return true;
  if (r.params.max_tokens <= ctx.max_model_len) return true;
  *error =
      BadRequest(r.max_tokens_field,
                 r.max_tokens_field + "=" + std::to_string(r.params.max_tokens) +
                     " cannot be greater than max_model_len=" + std::to_string(ctx.max_model_len) +
                     ". Please request fewer output tokens.");
  return false;
}

// A non-streamed reply is held whole until its last sequence ends (each token's update, then
// the JSON tree and its text at once): 64 prompts × n 16 × 4,000 tokens × 21 log-probs asked
// ~8 GB of one request. At most kMaxReplyEntries tokens and alternatives (~75 bytes each at the
// peak, ~300 MB); beyond, a 400 naming the field that sized it. A stream keeps a few tokens.
constexpr int64_t kMaxReplyEntries = int64_t{1} << 22;
bool CheckReplyBudget(const ServerContext& ctx, const OpenAiRequest& r,
                      const std::vector<std::vector<int32_t>>& prompts, ApiError* error) {
  if (r.stream) return true;
  const int64_t per_token = 1 + (r.want_logprobs ? std::max(1, r.logprobs) : 0);
  // echo: each choice also carries its prompt (its text; with logprobs its entries, which the
  // prompt log-prob budget bounds too).
  int64_t tokens = 0, echoed = 0;
  for (const auto& p : prompts) {
    tokens += static_cast<int64_t>(MaxTokensFor(ctx, r, p.size())) * r.n;
    if (r.echo) echoed += static_cast<int64_t>(p.size()) * r.n;
  }
  const int64_t generated = tokens;
  tokens += echoed;
  if (tokens * per_token <= kMaxReplyEntries) return true;  // ≤ 1024 × 2^31 × 21: no overflow
  // A chat without max_tokens (it fills the context) names n when several, else max_tokens;
  // echo when the echoed prompts are most of it.
  const std::string field =
      echoed > generated ? std::string("echo")
      : r.max_tokens_given || r.endpoint == Endpoint::kCompletions || r.n == 1
          ? r.max_tokens_field
          : std::string("n");
  *error = BadRequest(field, "this request could return " + std::to_string(tokens) +
                                 " tokens (prompts × n × max_tokens" +
                                 (r.echo ? ", and the prompts echoed" : "") + ") with " +
                                 std::to_string(per_token - 1) +
                                 " log-prob alternatives each; a reply without stream holds at "
                                 "most " +
                                 std::to_string(kMaxReplyEntries) +
                                 " tokens and alternatives: set stream, or lower max_tokens, n "
                                 "or logprobs");
  return false;
}

struct Submission {
  std::shared_ptr<GenerationState> state;
  std::vector<std::vector<int32_t>> prompts;
  int prompt_tokens = 0;
};

bool Submit(ServerContext& ctx, const OpenAiRequest& r, std::shared_ptr<const Adapter> adapter,
            const std::shared_ptr<Exchange>& ex, Clock::time_point received, Submission* sub,
            ApiError* error) {
  auto& state = *sub->state;  // made by the caller, whose guard aborts what is submitted here
  state.start = received;
  // The engine's callbacks wake the connection (a weak reference: a connection that is gone
  // is not kept alive by its sequences). A completion only needs its last update.
  state.wake_each_update = r.stream;
  state.wake = [weak = std::weak_ptr<Exchange>(ex)] {
    if (auto e = weak.lock()) e->Wake();
  };
  const size_t num = sub->prompts.size() * static_cast<size_t>(r.n);
  state.choices.resize(num);
  state.unfinished = static_cast<int>(num);
  auto make = [&](size_t p, int j) {
    GenerationRequest g;
    g.prompt = sub->prompts[p];
    g.adapter = adapter;
    g.params = r.params;
    if (r.params.seed.has_value()) g.params.seed = *r.params.seed + static_cast<uint64_t>(j);
    g.params.max_tokens = MaxTokensFor(ctx, r, g.prompt.size());
    g.params.logprobs = r.want_logprobs ? std::max(1, r.logprobs) : 0;
    // echo with logprobs scores the prompt too (what lm-evaluation-harness's loglikelihood
    // sends); prompt_logprobs asks for it directly.
    g.prompt_logprobs = PromptLogprobsTop(r);
    g.cache_salt = r.cache_salt;
    g.stop = r.stop;
    g.stop_token_ids = r.stop_token_ids;
    g.include_stop_str_in_output = r.include_stop_str_in_output;
    g.skip_special_tokens = r.skip_special_tokens;
    g.detokenize = ctx.tokenizer != nullptr;
    return g;
  };
  auto refuse = [&](const Status& st) {
    const std::string param = ParamFor(st);
    *error = FromStatus(st, param == "max_tokens" ? r.max_tokens_field : param);
    return false;
  };
  // Every prompt is validated before any is queued: a later prompt's refusal must not leave
  // the earlier ones' sequences run (and counted as aborted requests). The n copies of a prompt
  // differ only in their seed.
  for (size_t p = 0; p < sub->prompts.size(); ++p) {
    GenerationRequest g = make(p, 0);
    // min_tokens above the max_tokens the context leaves this prompt: vLLM 0.32 refuses it too
    // (SamplingParams: "min_tokens must be less than or equal to max_tokens"), after the cap.
    const int room = ctx.max_model_len - static_cast<int>(g.prompt.size());
    if (g.params.min_tokens > g.params.max_tokens && g.params.max_tokens == room) {
      *error = BadRequest("min_tokens", "min_tokens must be at most max_tokens, got " +
                                            std::to_string(g.params.min_tokens) + ": a prompt of " +
                                            std::to_string(g.prompt.size()) +
                                            " tokens leaves room for " + std::to_string(room) +
                                            " more in the model's " +
                                            std::to_string(ctx.max_model_len) + "-token context");
      return false;
    }
    if (Status st = ctx.engine->engine().Validate(g); !st.ok()) return refuse(st);
  }
  // Each prompt's detokenizer is primed here, once per prompt, and before any is submitted (so
  // that no other handler's queue check counts this request's first sequences while the rest
  // prime): a prompt ending in ids that never decode cleanly primes with all of its ids (as
  // vLLM), which on the engine thread, once per copy, stalled every stream.
  std::vector<std::shared_ptr<tokenizer::StreamingDetokenizer>> primed(sub->prompts.size());
  for (size_t p = 0; ctx.tokenizer != nullptr && p < sub->prompts.size(); ++p) {
    primed[p] =
        std::make_shared<tokenizer::StreamingDetokenizer>(ctx.tokenizer, r.skip_special_tokens);
    primed[p]->Prime(sub->prompts[p]);
  }
  std::vector<int64_t> submitted;
  for (size_t p = 0; p < sub->prompts.size(); ++p) {
    sub->prompt_tokens += static_cast<int>(sub->prompts[p].size());
    for (int j = 0; j < r.n; ++j) {
      const size_t index = p * static_cast<size_t>(r.n) + static_cast<size_t>(j);
      state.choices[index].prompt_index = static_cast<int>(p);
      GenerationRequest g = make(p, j);
      g.primed = primed[p];
      auto id =
          ctx.engine->Submit(std::move(g), MakeChoiceCallback(sub->state, index, &ctx.metrics));
      if (!id.ok()) {  // only "shutting down" is left to fail here
        for (int64_t s : submitted) ctx.engine->Abort(s);
        return refuse(id.status());
      }
      {
        std::lock_guard<std::mutex> lock(state.mu);
        state.choices[index].seq_id = *id;
      }
      submitted.push_back(*id);
    }
  }
  return true;
}

void AbortUnfinished(ServerContext& ctx, GenerationState& state) {
  std::vector<int64_t> ids;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    for (const auto& c : state.choices) {
      if (!c.finished && c.seq_id >= 0) ids.push_back(c.seq_id);
    }
  }
  for (int64_t id : ids) ctx.engine->Abort(id);
}

// A completion's body, built once every choice has finished.
class CompletionReply : public DeferredReply {
 public:
  CompletionReply(ServerContext& ctx, OpenAiRequest r, ResponseMeta meta, Submission sub)
      : ctx_(ctx), r_(std::move(r)), meta_(std::move(meta)), sub_(std::move(sub)) {}

  bool Ready() override {
    {
      std::lock_guard<std::mutex> lock(sub_.state->mu);
      if (sub_.state->unfinished == 0) return true;
      if (!sub_.state->failed || cancelled_siblings_) return false;
    }
    cancelled_siblings_ = true;  // a choice failed: the reply is a 500 once the others stop
    AbortUnfinished(ctx_, *sub_.state);
    return false;
  }

  HttpResponse Build() override {
    GenerationState& state = *sub_.state;
    {
      std::lock_guard<std::mutex> lock(state.mu);
      for (auto& c : state.choices) {
        for (const auto& u : c.pending) Accumulate(&c, u);
        c.pending.clear();
      }
      state.pending_updates = 0;
      state.TakePending(state.pending_bytes);
    }
    for (const auto& c : state.choices) {
      if (c.finish_reason == FinishReason::kError) {
        return ErrorReply(ApiError{500, "generation failed: " + c.error, "", ""});
      }
    }
    json body = BuildFullResponse(ctx_, r_, meta_, state, sub_.prompts);
    HttpResponse res;
    res.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
    return res;
  }
  // The client left (as vLLM: its sequences are cancelled and their blocks freed).
  void Abandon() override { AbortUnfinished(ctx_, *sub_.state); }

 private:
  ServerContext& ctx_;
  OpenAiRequest r_;
  ResponseMeta meta_;
  Submission sub_;
  bool cancelled_siblings_ = false;
};

// A streamed completion: SSE chunks as the engine delivers tokens.
class CompletionStream : public StreamSource {
 public:
  CompletionStream(ServerContext& ctx, const OpenAiRequest& r, ResponseMeta meta,
                   std::shared_ptr<GenerationState> state)
      : ctx_(ctx), state_(state), writer_(ctx, r, std::move(meta), std::move(state)) {}
  bool Pull(std::string* out, size_t max_bytes) override {
    const bool done = writer_.Pump(out, max_bytes);
    if (writer_.failed()) AbortUnfinished(ctx_, *state_);  // a choice failed: the stream ended
    return done;
  }
  bool NextPullIsLarge() override { return writer_.NextPumpIsLarge(); }
  bool Overrun() override { return writer_.Overrun(); }
  void Abandon() override { AbortUnfinished(ctx_, *state_); }

 private:
  ServerContext& ctx_;
  std::shared_ptr<GenerationState> state_;
  StreamWriter writer_;
};

}  // namespace

void HandleGeneration(ServerContext& ctx, Endpoint endpoint, const HttpRequest& req,
                      const std::shared_ptr<Exchange>& ex, std::shared_ptr<const void> load) {
  auto fail = [&ex](const ApiError& e) { ex->Reply(ErrorReply(e)); };
  OpenAiRequest r;
  ApiError error;
  if (!ParseOpenAiRequest(req.body, endpoint, &r, &error, ctx.options.max_json_depth)) {
    return fail(error);
  }
  if (r.model.empty()) r.model = ctx.options.DefaultModel();  // no model: the base (as vLLM)
  // The model's recommended sampling where the request set none (vLLM's generation config).
  ctx.options.generation_defaults.Apply(
      [&r](const char* field) {
        return std::find(r.sampling_given.begin(), r.sampling_given.end(), field) !=
               r.sampling_given.end();
      },
      &r.params);
  // The adapter: the base model's name, or an adapter's (loaded now if needed, not on the
  // engine thread).
  std::shared_ptr<const Adapter> adapter;
  // A request refused after its adapter was acquired (a 400, a 503) drops its lease here and
  // lets the store evict back to its bounds now, not at the next acquire or finished sequence.
  struct DropLease {
    std::shared_ptr<const Adapter>& adapter;
    AdapterStore* store;
    void Drop() noexcept {
      if (adapter == nullptr || store == nullptr) return;
      adapter.reset();
      try {  // called from a destructor: nothing may leave it
        store->Trim();
      } catch (...) {
      }
    }
    ~DropLease() { Drop(); }
  } drop_lease{adapter, ctx.adapters};
  // An adapter's name is checked now (404), its weights acquired (loaded if needed) only after
  // the cheap refusals — the request's 400s and a full queue's 503: a load (serialized, on the
  // CPU the engine needs) and the eviction of a warm adapter were spent on requests refused
  // anyway, once per client retry of an overloaded server.
  const bool wants_adapter = !ctx.options.NamesBase(r.model);
  const ApiError no_such_model{404, "The model `" + r.model + "` does not exist.", "model", ""};
  if (wants_adapter && ctx.adapters == nullptr) return fail(no_such_model);
  auto acquire = [&]() -> bool {
    auto lease = ctx.adapters->Acquire(r.model);
    if (!lease.ok()) {
      fail(lease.status().code() == StatusCode::kNotFound ? no_such_model
                                                          : FromStatus(lease.status(), "model"));
      return false;
    }
    adapter = std::move(lease).value();
    return true;
  };
  // A name the store does not know (or whose folder it refuses: a link out of the root) is
  // answered now; Acquire loads nothing for it.
  if (wants_adapter && !ctx.adapters->Knows(r.model) && !acquire()) return;
  if (!CheckMaxTokens(ctx, r, &error)) return fail(error);
  Submission sub;
  if (!BuildPrompts(ctx, r, &sub.prompts, &error, [&ex] { return ex->Gone(); })) return fail(error);
  if (!TruncatePrompts(ctx, &r, &sub.prompts, &error)) return fail(error);
  if (!EncodeBadWords(ctx, &r, &error)) return fail(error);
  // A prompt that can never fit is a 400 before the queue limit: a 503 would have the client
  // retry it.
  const char* prompt_field = endpoint == Endpoint::kChat ? "messages" : "prompt";
  for (const auto& p : sub.prompts) {
    if (static_cast<int64_t>(p.size()) >= ctx.max_model_len) {
      // vLLM's words, which clients match case-sensitively (LiteLLM's context-window check).
      return fail(BadRequest(prompt_field,
                             "This model's maximum context length is " +
                                 std::to_string(ctx.max_model_len) +
                                 " tokens. However, your request has " + std::to_string(p.size()) +
                                 " input tokens (room is needed for at least one more). Please "
                                 "reduce the length of the input " +
                                 (endpoint == Endpoint::kChat ? "messages." : "prompt.")));
    }
    if (p.empty()) return fail(BadRequest(prompt_field, std::string(prompt_field) + " is empty"));
  }
  // After the prompts are rendered and the model's recommended sampling applied, as vLLM's.
  if (!CheckGreedyChoices(r, &error)) return fail(error);
  // Queue limit: sequences submitted but not running, this request's (prompts × n) included,
  // so one request of 64 prompts × n = 16 cannot carry the queue past it. A request of more
  // sequences than run and wait at once is a 400 (it was admitted into an empty queue whatever
  // its size, and everyone else got 503 until hundreds of its sequences had run). The engine's last
  // snapshot may lag a step behind: the bound is approximate by a few sequences, never unbounded.
  // This request's are reserved from the check until Submit has handed them to the engine
  // (num_in_flight): handlers checking at once see each other's.
  const int64_t wanted = static_cast<int64_t>(sub.prompts.size()) * r.n;
  const int64_t room = int64_t{ctx.options.max_waiting} + ctx.engine->engine().max_num_seqs();
  if (wanted > room) {
    return fail(BadRequest(r.n > 1 ? "n" : prompt_field,
                           "this request asks for " + std::to_string(wanted) +
                               " sequences (prompts × n), more than the " + std::to_string(room) +
                               " the server runs and queues at once (--max-num-seqs + "
                               "--max-waiting); send fewer prompts or a lower n"));
  }
  if (!CheckLogitBiasBudget(r, wanted, &error)) return fail(error);
  if (!CheckPromptLogprobBudget(r, sub.prompts, &error)) return fail(error);
  if (!CheckReplyBudget(ctx, r, sub.prompts, &error)) return fail(error);
  struct Unreserve {
    std::atomic<int64_t>& admitting;
    int64_t n = 0;
    void Release() { admitting.fetch_sub(std::exchange(n, 0)); }
    ~Unreserve() { Release(); }
  } unreserve{ctx.admitting};
  // Reserves this request's sequences; false (answered 503) when the queue cannot take them.
  auto reserve = [&] {
    const int64_t others = ctx.admitting.fetch_add(wanted);
    unreserve.n = wanted;
    const int64_t queued = ctx.engine->num_in_flight() - ctx.engine->Stats().num_running + others;
    if (queued > 0 && queued + wanted > ctx.options.max_waiting) {
      fail(ApiError{503,
                    "the server is overloaded (" + std::to_string(queued) +
                        " sequences waiting, this request adds " + std::to_string(wanted) +
                        "); retry later",
                    "", ""});
      return false;
    }
    return true;
  };
  if (!reserve()) return;
  if (wants_adapter && adapter == nullptr) {
    // Checked first (a full queue refuses before a load), but not held while the adapter loads:
    // loads run one at a time and take seconds, and other requests (the base's too) would be
    // refused meanwhile against sequences that are not queued yet.
    unreserve.Release();
    if (!acquire() || !reserve()) return;
  }
  // After the cheap refusals (queue, lengths): the decode may take the tokenizer's budget.
  if (r.echo && !EchoTokenPromptsAsText(ctx, &r, &error)) return fail(error);
  // Until the response owns them, the request's sequences are aborted on any way out (an
  // exception while submitting or building the response left them running for nobody).
  struct AbortUnlessAnswered {
    ServerContext& ctx;
    std::shared_ptr<GenerationState> state;  // set before Submit
    bool answered = false;
    ~AbortUnlessAnswered() {
      if (answered || state == nullptr) return;
      try {
        AbortUnfinished(ctx, *state);
      } catch (...) {
      }
    }
  } abort_unless_answered{ctx, nullptr};
  // A client that left while its adapter loaded (or its prompt was tokenized) is not submitted:
  // its sequences would only be aborted again on the first write, counted and timed as aborts.
  if (ex->Gone()) return;
  // The guard holds the state before the first sequence is submitted: an exception inside Submit
  // after some went in (out of memory building the next) aborts those too.
  sub.state = std::make_shared<GenerationState>();
  sub.state->load_hold = std::move(load);
  // Streams count toward the server's bound (a non-streamed reply holds its updates until it is
  // built whole, bounded by CheckReplyBudget, and is never dropped for them).
  if (r.stream) sub.state->all_pending_bytes = &ctx.pending_update_bytes;
  abort_unless_answered.state = sub.state;
  const bool submitted = Submit(ctx, r, adapter, ex, req.received, &sub, &error);
  unreserve.Release();  // in num_in_flight now (or refused): not counted twice
  if (!submitted) return fail(error);
  // The sequences hold their own leases now; holding this one until the response is written
  // kept the adapter pinned past the engine's release. Dropped with a Trim, as on the ways out
  // above: the engine's trim when the sequences finish may run before this reset (a no-op
  // while the store is within its bounds, which it keeps by refusing loads past them).
  drop_lease.Drop();

  ResponseMeta meta;
  // vLLM names a response after the client's X-Request-Id (gateways trace by it), else the
  // body's request_id (checked by the parser); an unusable header is passed over.
  const char* id_prefix = endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-";
  const std::string client_id = req.header("X-Request-Id");
  meta.id = UsableRequestId(client_id) ? id_prefix + client_id
            : !r.request_id.empty() ? id_prefix + r.request_id
                                    : RandomId(id_prefix);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = r.model;
  meta.prompt_tokens = sub.prompt_tokens;
  // The reply keeps the request while its sequences run: of the chat only the last message (the
  // response's role, chat echo), of the prompts only their text for echo. A long chat, its
  // chat_template_kwargs and token-id prompts were held whole until the end, outside the body
  // budget (an 8 MiB body parses into ~64 MB of JSON; 512 waiting requests, GBs).
  r.chat_template_kwargs = nullptr;
  if (r.messages.is_array() && r.messages.size() > 1) {
    json last = std::move(r.messages.back());
    r.messages = json::array();
    r.messages.push_back(std::move(last));
  }
  if (!r.echo) std::vector<Prompt>().swap(r.prompts);
  if (!r.stream) {
    ex->Defer(std::make_shared<CompletionReply>(ctx, std::move(r), std::move(meta), std::move(sub)));
    abort_unless_answered.answered = true;  // the reply aborts what is left if its client goes
    return;
  }
  HttpResponse head;
  head.content_type = "text/event-stream";
  head.headers.emplace_back("Cache-Control", "no-cache");
  auto state = sub.state;
  if (r.return_token_ids || r.echo) state->prompt_ids = std::move(sub.prompts);
  ex->Stream(std::move(head), std::make_shared<CompletionStream>(ctx, r, std::move(meta), std::move(state)));
  abort_unless_answered.answered = true;
}

}  // namespace loom::server
