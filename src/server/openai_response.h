// OpenAI response bodies: full completions / chat completions and their SSE stream chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation_state.h"
#include "server/openai_request.h"
#include "server/server_context.h"

namespace loom::server {

struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
  int prompt_tokens = 0;
};

// `prefix` + 16 random hex digits: a response's or a model permission's id.
std::string RandomId(const char* prefix);
const char* FinishReasonField(FinishReason r);  // "stop" | "length" | "abort" | "error"

// The non-streaming body; `state`'s choices are all finished and consumed.
nlohmann::ordered_json BuildFullResponse(const ServerContext& ctx, const OpenAiRequest& r,
                                         const ResponseMeta& meta, const GenerationState& state,
                                         const std::vector<std::vector<int32_t>>& prompts);

// Writes one request's SSE stream, chunk by chunk as the engine delivers updates.
// Thread-safety: one thread at a time (the connection's I/O thread, or a worker for a large chunk).
class StreamWriter {
 public:
  StreamWriter(const ServerContext& ctx, const OpenAiRequest& r, ResponseMeta meta,
               std::shared_ptr<GenerationState> state);
  // Appends the SSE events of the updates delivered so far to *out, without waiting, stopping
  // after the event that makes what it appended `max_bytes` or more (the rest stays pending; the
  // next Pump goes on from that choice, so the events come in the order one Pump would write
  // them); true once the last chunk and [DONE] are appended.
  bool Pump(std::string* out, size_t max_bytes = SIZE_MAX);
  // Whether the next Pump may build much JSON: an echo's prompt log-probs (a choice's first chunk
  // with echo and logprobs) or chat echo's message once per choice, megabytes; or the log-prob
  // entries of more than kLargePumpEntries pending tokens and alternatives, each decoded with its
  // context (512 sequences × 20 alternatives: ~10,000 a step). Built off the I/O thread
  // (StreamSource).
  bool NextPumpIsLarge() const;
  // Whether the updates waiting for this stream hold more than kMaxPendingBytes, or more than a
  // sixteenth of that while all requests' together hold more than kMaxAllPendingBytes: its
  // client, not reading, is dropped (StreamSource::Overrun) rather than pinning the engine's
  // output for it.
  bool Overrun() const;

  // A pending token weighs 1, plus its alternatives with logprobs: a Pump of more is large.
  static constexpr size_t kLargePumpEntries = 64;
  // Generous: 512 sequences × 120 tokens with 20 alternatives, the whole request, hold ~25 MiB.
  static constexpr size_t kMaxPendingBytes = 64u << 20;
  // All requests' pending updates together (GenerationState::all_pending_bytes).
  static constexpr size_t kMaxAllPendingBytes = size_t{1} << 30;

  // The stream ended on a choice's error: the request's other sequences are to be aborted.
  bool failed() const { return failed_; }

 private:
  nlohmann::ordered_json Chunk() const;
  nlohmann::ordered_json ChoiceChunk(size_t index, const SequenceUpdate& u);
  nlohmann::ordered_json Usage() const;
  // Writes choice `i`'s update `u` as its chunk (if it carries anything); false when it was the
  // choice's error, which ends the stream.
  bool WriteUpdate(std::string* out, size_t i, const SequenceUpdate& u);
  static void Write(std::string* out, const nlohmann::ordered_json& j);

  const ServerContext& ctx_;
  OpenAiRequest request_;  // a copy: the stream outlives the handler's frame
  ResponseMeta meta_;
  std::shared_ptr<GenerationState> state_;
  bool started_ = false;
  std::vector<size_t> text_offset_;  // completions logprobs text_offset per choice
  std::vector<bool> first_sent_;     // completions: the choice's first chunk is out
  size_t next_choice_ = 0;           // where the next Pump starts taking updates
  int completion_tokens_ = 0;
  bool ended_ = false;
  bool failed_ = false;
};

}  // namespace loom::server
