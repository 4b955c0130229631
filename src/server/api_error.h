// ApiError: an OpenAI-style error (HTTP status, type, param, message) and its JSON body.
#pragma once

#include <string>

#include "base/status.h"

namespace loom::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string param;  // the request field at fault, or empty (null in the body)
  std::string type;   // empty = derived from http_status

  std::string Body() const;  // {"error": {"message", "type", "param", "code"}}
};

ApiError BadRequest(std::string param, std::string message);
// Maps an engine / loader Status to an error (kInvalidArgument → 400, kNotFound → 404,
// kResourceExhausted → 400 (the request cannot fit), kUnavailable → 503, else 500).
ApiError FromStatus(const Status& status, std::string param = "");

}  // namespace loom::server
