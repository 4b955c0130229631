// HttpRequest header lookups (case-insensitive names, as HTTP defines them); a response's head and error responses.
#include "server/http_exchange.h"

#include <boost/beast/http/status.hpp>
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

std::string ResponseHead(const HttpResponse& r, const std::string& framing, bool close,
                         bool http10) {
  namespace http = boost::beast::http;
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " ";
  out += std::string(http::obsolete_reason(static_cast<http::status>(r.status)));
  out += "\r\n";
  if (!r.content_type.empty()) out += "Content-Type: " + r.content_type + "\r\n";
  for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
  out += framing;
  if (close) {
    out += "Connection: close\r\n";
  } else if (http10) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  return out;
}

HttpResponse ErrorReply(const ApiError& error) {
  HttpResponse r;
  r.status = error.http_status;
  if (error.http_status == 503) r.headers.emplace_back("Retry-After", "1");
  r.body = error.Body();
  return r;
}

}  // namespace loom::server
