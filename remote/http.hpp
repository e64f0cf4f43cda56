// One HTTP request to a manager, by either of two transports: libcurl (for
// https://, proxies and anything unusual) or a small plain-HTTP client (a
// socket plus Debian's http-parser) for http:// managers. The plain one
// exists for speed: loading libcurl and the TLS stack behind it costs ~4 ms,
// twice the whole budget of a forwarded exec.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>  // for CURLcode only: both transports report in its terms

#include "core/error.hpp"

namespace sbx::remote_http {

inline constexpr long kConnectTimeoutMs = 2000;
inline constexpr long kCallTimeoutMs = 30000;
/// A JSON answer (a list of every sandbox) may be large; an error body is shown, so it is cut short.
inline constexpr size_t kMaxJsonAnswer = 64u << 20;
inline constexpr size_t kMaxErrorBody = 64u << 10;

/// Converts whatever a malformed answer throws into one protocol error.
template <class F>
auto decode(const std::string& what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    throw Error(Errc::protocol, "the manager sent " + what + " sbx cannot read: " + e.what());
  }
}

struct Request {
  std::string method = "GET";
  std::string url;    ///< the full URL
  std::string shown;  ///< the manager's URL as messages show it
  std::string api_key;
  std::vector<std::string> headers;  ///< "Name: value"
  std::string body;                  ///< sent for POST
  /// PUT's body, pulled as it is sent (chunked encoding: its size is not known up front):
  /// fills up to `max` bytes, 0 at the end; an exception aborts the request without ending
  /// the body, so the manager sees an upload cut off, never a short one that looks whole.
  std::function<size_t(char* buf, size_t max)> upload_read;
  long timeout_ms = kCallTimeoutMs;  ///< 0 = none
  long connect_timeout_ms = kConnectTimeoutMs;
  bool stall_limit = false;  ///< abort when nothing moves for 30 s (long transfers without a total timeout)
  std::function<void(std::string_view)> on_body;  ///< receives a 2xx body; otherwise it is collected
  std::function<bool()> abort;                    ///< polled during the transfer; true stops it
};

struct Response {
  CURLcode rc = CURLE_OK;  ///< transport outcome, in libcurl's terms whichever transport ran
  long status = 0;
  std::string body;
  long os_errno = 0;
  std::string curl_message;
  double seconds = 0;
};

/// Runs one request. HTTP error statuses are returned, not thrown; an
/// exception raised inside a callback is rethrown here.
Response perform(const Request& req);

/// Percent-encodes everything but RFC 3986's unreserved characters.
std::string url_escape(std::string_view s);

}  // namespace sbx::remote_http
