// HttpRequest header lookups (case-insensitive names, as HTTP defines them).
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

}  // namespace loom::server
