// vLLM's request fields that loom accepts without effect: at their default value only (what they
// ask for is not in loom), or at any valid value where vLLM itself ignores them on these routes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/openai_request.h"

namespace loom::server {

// If `key` is one of these fields on `endpoint` (a generation endpoint), returns true and sets
// *message: empty when `v` is accepted (no effect), else the 400's message, which says what loom
// does not support (the 400's param is `key`). False, *message untouched, for any other key.
//
// Clients that serialise vLLM's own request models (vllm.entrypoints.openai.*.protocol) send
// every field, most at their default or null: those are accepted, a value that asks for
// something loom does not do is refused by name (docs/API.md, "vLLM's request fields").
bool CheckNoEffectField(const std::string& key, const nlohmann::ordered_json& v, Endpoint endpoint,
                        std::string* message);

}  // namespace loom::server
