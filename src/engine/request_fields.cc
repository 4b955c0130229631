// Typed request-field values and the sampling fields, shared by the server and the CLI.
#include "engine/request_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "base/json.h"

namespace loom {

using json = nlohmann::ordered_json;

namespace {

std::string FormatNum(double d) {
  json j = d;
  return j.dump();
}

}  // namespace

Status JsonInt(const std::string& field, const json& v, int64_t lo, int64_t hi, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) {
        return InvalidArgument(field + " must be at most " + std::to_string(hi) + ", got " + v.dump());
      }
      *out = static_cast<int64_t>(u);
    } else {
      *out = v.get<int64_t>();
    }
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) {
      return InvalidArgument(field + " must be an integer, got " + v.dump());
    }
    if (std::fabs(d) > 9.0e15) {  // an integer past int64 (JSON parsed it as a double)
      return InvalidArgument(field + " must be in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "], got " + v.dump());
    }
    *out = static_cast<int64_t>(d);
  } else {
    return InvalidArgument(field + " must be an integer, got " + std::string(v.type_name()));
  }
  if (*out < lo || *out > hi) {
    return InvalidArgument(field + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "], got " + std::to_string(*out));
  }
  return OkStatus();
}

Status JsonInt32(const std::string& field, const json& v, int64_t lo, int64_t hi, int* out) {
  int64_t x = 0;
  RETURN_IF_ERROR(JsonInt(field, v, lo, hi, &x));
  *out = static_cast<int>(x);
  return OkStatus();
}

Status JsonNumber(const std::string& field, const json& v, double lo, double hi, float* out,
                  bool lo_open) {
  if (!v.is_number()) {
    return InvalidArgument(field + " must be a number, got " + std::string(v.type_name()));
  }
  const double d = v.get<double>();
  // An open bound is checked on the float too: top_p = 1e-50 rounds to 0 as a float.
  if (!std::isfinite(d) || d < lo || d > hi ||
      (lo_open && (d == lo || static_cast<float>(d) == static_cast<float>(lo)))) {
    return InvalidArgument(field + " must be in " + std::string(lo_open ? "(" : "[") + FormatNum(lo) +
                           ", " + FormatNum(hi) + "], got " + v.dump());
  }
  *out = static_cast<float>(d);
  return OkStatus();
}

Status JsonBool(const std::string& field, const json& v, bool* out) {
  if (!v.is_boolean()) {
    return InvalidArgument(field + " must be a boolean, got " + std::string(v.type_name()));
  }
  *out = v.get<bool>();
  return OkStatus();
}

namespace {

// OpenAI's {"token id": bias}: keys are decimal token ids, values numbers, clamped to
// [-100, 100] as vLLM does; a token given twice keeps its last bias (as Python's dict).
// Whether each id is in the vocabulary is SamplingParams::Validate's (it knows the size).
Status ParseLogitBias(const json& v, std::vector<std::pair<int32_t, float>>* out) {
  if (!v.is_object()) {
    return InvalidArgument("logit_bias must be an object of token id → bias, got " +
                           std::string(v.type_name()));
  }
  std::map<int32_t, float> bias;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int64_t id = digits ? std::stoll(key) : -1;
    if (!digits || id > std::numeric_limits<int32_t>::max()) {
      return InvalidArgument("logit_bias keys must be token ids (decimal digits), got '" +
                             KeyForMessage(key) + "'");
    }
    const json& b = it.value();
    if (!b.is_number() || !std::isfinite(b.get<double>())) {
      return InvalidArgument("logit_bias[\"" + key + "\"] must be a number, got " +
                             std::string(b.type_name()));
    }
    bias[static_cast<int32_t>(id)] = static_cast<float>(std::clamp(b.get<double>(), -100.0, 100.0));
  }
  out->assign(bias.begin(), bias.end());
  return OkStatus();
}

// vLLM's allowed_token_ids: a non-empty list of token ids, kept sorted and unique. Whether each
// is in the vocabulary is SamplingParams::Validate's.
Status ParseAllowedTokenIds(const json& v, std::shared_ptr<const std::vector<int32_t>>* out) {
  if (!v.is_array() || v.empty()) {
    return InvalidArgument("allowed_token_ids must be a non-empty list of token ids");
  }
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const auto& x : v) {
    int id = 0;  // an integral float too, as the other integer fields
    RETURN_IF_ERROR(JsonInt32("allowed_token_ids", x, 0, std::numeric_limits<int32_t>::max(), &id));
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  *out = std::make_shared<const std::vector<int32_t>>(std::move(ids));
  return OkStatus();
}

}  // namespace

bool ParseSamplingField(const std::string& key, const json& v, SamplingParams* p, Status* status) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  Status st;
  if (key == "max_tokens") {
    if (!v.is_null()) st = JsonInt32(key, v, 1, kMaxTokensLimit, &p->max_tokens);
  } else if (key == "temperature") {
    // SPEC-api: a temperature ≤ 0 is greedy (llama.cpp's reading; vLLM and OpenAI refuse a
    // negative one). Any value ≤ 0 is stored as 0 (-1e39 is out of a float's range).
    if (v.is_number() && v.get<double>() <= 0) {
      p->temperature = 0;
    } else if (!v.is_null()) {
      st = JsonNumber(key, v, 0, 100, &p->temperature);
      if (!st.ok() && v.is_number()) {
        st = InvalidArgument("temperature must be at most 100 (≤ 0 is greedy), got " + v.dump());
      }
    }
  } else if (key == "top_p") {
    if (!v.is_null()) st = JsonNumber(key, v, 0, 1, &p->top_p, /*lo_open=*/true);
  } else if (key == "top_k") {
    if (!v.is_null()) st = JsonInt32(key, v, -1, kInt32Max, &p->top_k);
  } else if (key == "min_p") {
    if (!v.is_null()) st = JsonNumber(key, v, 0, 1, &p->min_p);
  } else if (key == "presence_penalty") {
    if (!v.is_null()) st = JsonNumber(key, v, -2, 2, &p->presence_penalty);
  } else if (key == "frequency_penalty") {
    if (!v.is_null()) st = JsonNumber(key, v, -2, 2, &p->frequency_penalty);
  } else if (key == "repetition_penalty") {
    if (!v.is_null()) st = JsonNumber(key, v, 0, 10, &p->repetition_penalty, /*lo_open=*/true);
  } else if (key == "seed") {
    if (!v.is_null()) {
      int64_t seed = 0;
      st = JsonInt(key, v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                   &seed);
      if (st.ok()) p->seed = static_cast<uint64_t>(seed);
    }
  } else if (key == "ignore_eos") {
    if (!v.is_null()) st = JsonBool(key, v, &p->ignore_eos);
  } else if (key == "min_tokens") {
    if (!v.is_null()) st = JsonInt32(key, v, 0, kMaxTokensLimit, &p->min_tokens);
  } else if (key == "logit_bias") {
    if (!v.is_null()) st = ParseLogitBias(v, &p->logit_bias);
  } else if (key == "allowed_token_ids") {
    if (!v.is_null()) st = ParseAllowedTokenIds(v, &p->allowed_token_ids);
  } else {
    return false;
  }
  *status = st;
  return true;
}

}  // namespace loom
