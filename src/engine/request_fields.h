// Request fields shared by the HTTP server and the CLI's --batch files: typed JSON values with
// messages that name the field, and the sampling fields parsed into SamplingParams one way.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "engine/sampler.h"

namespace loom {

inline constexpr int64_t kMaxTokensLimit = 1 << 24;

// An integer in [lo, hi] (an integral JSON float is accepted, as pydantic's lax mode does).
// Errors: "FIELD must be an integer, got ...", "FIELD must be in [lo, hi], got N".
Status JsonInt(const std::string& field, const nlohmann::ordered_json& v, int64_t lo, int64_t hi,
               int64_t* out);
Status JsonInt32(const std::string& field, const nlohmann::ordered_json& v, int64_t lo, int64_t hi,
                 int* out);
// A finite number in [lo, hi] ((lo, hi] when lo_open).
Status JsonNumber(const std::string& field, const nlohmann::ordered_json& v, double lo, double hi,
                  float* out, bool lo_open = false);
Status JsonBool(const std::string& field, const nlohmann::ordered_json& v, bool* out);

// If `key` is a sampling field (max_tokens, temperature, top_p, top_k, min_p, presence_penalty,
// frequency_penalty, repetition_penalty, seed, ignore_eos, min_tokens, logit_bias,
// allowed_token_ids), parses `v` into
// *params (null leaves the default) and returns true with *status set (OK or kInvalidArgument
// naming the field); otherwise returns false and leaves both alone. Ranges are the OpenAI / vLLM
// ones.
bool ParseSamplingField(const std::string& key, const nlohmann::ordered_json& v,
                        SamplingParams* params, Status* status);

}  // namespace loom
