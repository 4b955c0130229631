// ApiError bodies as the OpenAI API (and vLLM) returns them.
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace loom::server {

std::string ApiError::Body() const {
  std::string t = type;
  if (t.empty()) {
    switch (http_status) {
      case 400: t = "BadRequestError"; break;
      case 401: t = "AuthenticationError"; break;
      case 404: t = "NotFoundError"; break;
      case 405: t = "MethodNotAllowed"; break;
      case 411: t = "LengthRequired"; break;
      case 413: t = "RequestTooLargeError"; break;
      case 414: t = "URITooLong"; break;
      case 415: t = "UnsupportedMediaType"; break;
      case 429: t = "RateLimitError"; break;
      case 431: t = "RequestHeaderFieldsTooLarge"; break;
      case 501: t = "NotImplemented"; break;
      case 503: t = "ServiceUnavailableError"; break;
      default: t = http_status >= 500 ? "InternalServerError" : "BadRequestError"; break;
    }
  }
  nlohmann::json j;
  j["error"] = {{"message", message},
                {"type", t},
                {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                {"code", http_status}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError BadRequest(std::string param, std::string message) {
  return ApiError{400, std::move(message), std::move(param), ""};
}

ApiError FromStatus(const Status& status, std::string param) {
  int code = 500;
  switch (status.code()) {
    case StatusCode::kOk: code = 200; break;
    case StatusCode::kInvalidArgument: code = 400; break;
    case StatusCode::kFailedPrecondition: code = 400; break;
    case StatusCode::kNotFound: code = 404; break;
    case StatusCode::kResourceExhausted: code = 400; break;
    case StatusCode::kUnavailable: code = 503; break;
    case StatusCode::kInternal: code = 500; break;
  }
  return ApiError{code, status.message(), std::move(param), ""};
}

}  // namespace loom::server
