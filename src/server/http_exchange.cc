// HttpRequest header lookups (case-insensitive names, as HTTP defines them); error responses.
#include "server/http_exchange.h"

#include <cctype>

namespace loom::server {

bool CaseEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string HttpRequest::header(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (CaseEqual(k, name)) return v;
  }
  return "";
}

bool HttpRequest::has_header(const std::string& name) const { return header_count(name) > 0; }

int HttpRequest::header_count(const std::string& name) const {
  int n = 0;
  for (const auto& [k, v] : headers) n += CaseEqual(k, name) ? 1 : 0;
  return n;
}

HttpResponse ErrorReply(const ApiError& error) {
  HttpResponse r;
  r.status = error.http_status;
  if (error.http_status == 503) r.headers.emplace_back("Retry-After", "1");
  r.body = error.Body();
  return r;
}

}  // namespace loom::server
