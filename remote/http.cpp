#include "remote/http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <http_parser.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/lazy_libs.hpp"
#include "core/units.hpp"

namespace sbx::remote_http {

namespace {

// Where a chunk of an answer goes, for either transport: a 2xx body to the
// caller's sink (or collected, capped), an error body collected and cut short.
void deliver_body(const Request& req, Response& res, bool success, std::string_view chunk) {
  if (success && req.on_body) {
    req.on_body(chunk);
  } else if (success) {
    if (res.body.size() + chunk.size() > kMaxJsonAnswer)
      throw Error(Errc::protocol, "the manager's answer is larger than " + format_size(kMaxJsonAnswer));
    res.body.append(chunk);
  } else if (res.body.size() < kMaxErrorBody) {
    res.body.append(chunk.substr(0, kMaxErrorBody - res.body.size()));
  }
}

const CurlApi& cu() { return curl_api(); }

class CurlHandle {
 public:
  CurlHandle() : h_(cu().curl_easy_init()) {
    if (!h_) throw Error(Errc::internal, "curl_easy_init failed");
  }
  ~CurlHandle() { cu().curl_easy_cleanup(h_); }
  CurlHandle(const CurlHandle&) = delete;
  CurlHandle& operator=(const CurlHandle&) = delete;
  CURL* get() const { return h_; }
  template <class T>
  void set(CURLoption opt, T value) {
    if (cu().curl_easy_setopt(h_, opt, value) != CURLE_OK)
      throw Error(Errc::internal, "libcurl refused option " + std::to_string(static_cast<int>(opt)));
  }

 private:
  CURL* h_;
};

class HeaderList {
 public:
  HeaderList() = default;
  ~HeaderList() {
    if (list_) cu().curl_slist_free_all(list_);
  }
  HeaderList(const HeaderList&) = delete;
  HeaderList& operator=(const HeaderList&) = delete;
  void add(const std::string& h) {
    curl_slist* n = cu().curl_slist_append(list_, h.c_str());
    if (!n) throw Error(Errc::internal, "out of memory building HTTP headers");
    list_ = n;
  }
  curl_slist* get() const { return list_; }

 private:
  curl_slist* list_ = nullptr;
};

// What the C callbacks share; exceptions are parked here, never thrown across libcurl.
struct Transfer {
  Transfer(const Request& rq, Response& rs, CURL* handle) : req(rq), res(rs), h(handle) {}
  const Request& req;
  Response& res;
  CURL* h;
  bool status_known = false;
  bool success = false;
  std::exception_ptr failure;
};

size_t on_write(char* data, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  size_t len = size * n;
  try {
    if (!t->status_known) {
      long st = 0;
      cu().curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &st);
      t->res.status = st;
      t->success = st >= 200 && st < 300;
      t->status_known = true;
    }
    std::string_view chunk(data, len);
    deliver_body(t->req, t->res, t->success, chunk);
    return len;
  } catch (...) {
    t->failure = std::current_exception();
    return 0;
  }
}

size_t on_read(char* buf, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  try {
    return t->req.upload_read(buf, size * n);
  } catch (...) {
    t->failure = std::current_exception();
    return CURL_READFUNC_ABORT;
  }
}

int on_progress(void* p, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(p);
  try {
    return t->req.abort() ? 1 : 0;
  } catch (...) {
    t->failure = std::current_exception();
    return 1;
  }
}

// Runs one request. HTTP error statuses are returned, not thrown; an
// exception raised inside a callback is rethrown here.
Response perform_curl(const Request& req) {
  Response res;
  CurlHandle h;
  HeaderList headers;
  Transfer t(req, res, h.get());
  char errbuf[CURL_ERROR_SIZE] = {};
  h.set(CURLOPT_URL, req.url.c_str());
  h.set(CURLOPT_NOSIGNAL, 1L);
  h.set(CURLOPT_ERRORBUFFER, errbuf);
  h.set(CURLOPT_USERAGENT, "sbx/" SBX_VERSION);
  h.set(CURLOPT_CONNECTTIMEOUT_MS, req.connect_timeout_ms);
  h.set(CURLOPT_TIMEOUT_MS, req.timeout_ms);
  // Exec streams have no total timeout, so keepalive is what notices a vanished manager.
  h.set(CURLOPT_TCP_KEEPALIVE, 1L);
  if (req.stall_limit) {
    h.set(CURLOPT_LOW_SPEED_LIMIT, 1L);
    h.set(CURLOPT_LOW_SPEED_TIME, 30L);
  }
  if (const char* ca = std::getenv("SBX_CA_FILE"); ca && *ca) h.set(CURLOPT_CAINFO, ca);
  if (!req.api_key.empty()) headers.add("X-API-Key: " + req.api_key);
  for (auto& extra : req.headers) headers.add(extra);
  if (req.method == "POST") {
    h.set(CURLOPT_POST, 1L);
    h.set(CURLOPT_POSTFIELDS, req.body.data());
    h.set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
  } else if (req.method == "PUT") {
    h.set(CURLOPT_UPLOAD, 1L);
    h.set(CURLOPT_READFUNCTION, &on_read);
    h.set(CURLOPT_READDATA, &t);
    h.set(CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(-1));
    headers.add("Transfer-Encoding: chunked");
    // Without this curl waits up to a second for a "100 Continue" some servers never send.
    headers.add("Expect:");
  } else if (req.method != "GET") {
    h.set(CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }
  h.set(CURLOPT_HTTPHEADER, headers.get());
  h.set(CURLOPT_WRITEFUNCTION, &on_write);
  h.set(CURLOPT_WRITEDATA, &t);
  if (req.abort) {
    h.set(CURLOPT_NOPROGRESS, 0L);
    h.set(CURLOPT_XFERINFOFUNCTION, &on_progress);
    h.set(CURLOPT_XFERINFODATA, &t);
  }
  res.rc = cu().curl_easy_perform(h.get());
  if (t.failure) std::rethrow_exception(t.failure);
  cu().curl_easy_getinfo(h.get(), CURLINFO_RESPONSE_CODE, &res.status);
  cu().curl_easy_getinfo(h.get(), CURLINFO_OS_ERRNO, &res.os_errno);
  cu().curl_easy_getinfo(h.get(), CURLINFO_TOTAL_TIME, &res.seconds);
  res.curl_message = errbuf[0] ? errbuf : cu().curl_easy_strerror(res.rc);
  return res;
}

}  // namespace

std::string url_escape(std::string_view s) {
  if (s.size() > (1u << 20)) throw Error(Errc::invalid_argument, "a path of " + format_size(s.size()) + " is too long");
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

// Where a plain http:// URL points; nullopt for anything the plain client leaves to libcurl.
struct Target {
  std::string host, port, path;
};

std::optional<Target> plain_target(const std::string& url) {
  if (url.rfind("http://", 0) != 0) return std::nullopt;
  // libcurl honours proxy variables and credentials in URLs; the plain client does neither.
  for (const char* v : {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"})
    if (const char* p = std::getenv(v); p && *p) return std::nullopt;
  if (const char* force = std::getenv("SBX_HTTP_CLIENT"); force && std::string(force) == "curl") return std::nullopt;
  size_t host_start = 7;
  size_t path_start = url.find('/', host_start);
  std::string authority = url.substr(host_start, path_start == std::string::npos ? std::string::npos : path_start - host_start);
  if (authority.find('@') != std::string::npos || authority.empty()) return std::nullopt;
  Target t;
  t.path = path_start == std::string::npos ? "/" : url.substr(path_start);
  if (authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos) return std::nullopt;
    t.host = authority.substr(1, close - 1);
    t.port = close + 2 <= authority.size() && authority[close + 1] == ':' ? authority.substr(close + 2) : "80";
  } else {
    size_t colon = authority.rfind(':');
    t.host = authority.substr(0, colon);
    t.port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  }
  if (t.port.empty()) t.port = "80";
  return t;
}

// State shared with http-parser's C callbacks; exceptions are parked, never thrown through C.
struct PlainTransfer {
  const Request& req;
  Response& res;
  bool success = false;
  bool complete = false;
  std::exception_ptr failure;
};

int plain_on_headers(http_parser* p) {
  auto* t = static_cast<PlainTransfer*>(p->data);
  t->res.status = p->status_code;
  t->success = p->status_code >= 200 && p->status_code < 300;
  return 0;
}

int plain_on_body(http_parser* p, const char* at, size_t len) {
  auto* t = static_cast<PlainTransfer*>(p->data);
  try {
    std::string_view chunk(at, len);
    deliver_body(t->req, t->res, t->success, chunk);
    return 0;
  } catch (...) {
    t->failure = std::current_exception();
    return 1;
  }
}

int plain_on_complete(http_parser* p) {
  static_cast<PlainTransfer*>(p->data)->complete = true;
  return 0;
}

// Waits for fd to be ready within the request's deadlines, polling the abort
// hook every 100 ms. Returns CURLE_OK, or why it gave up.
CURLcode wait_ready(int fd, short events, const Request& req, Clock::time_point deadline, Clock::time_point& last_move) {
  for (;;) {
    auto now = Clock::now();
    if (req.timeout_ms > 0 && now >= deadline) return CURLE_OPERATION_TIMEDOUT;
    if (req.stall_limit && now - last_move > std::chrono::seconds(30)) return CURLE_OPERATION_TIMEDOUT;
    int slice = req.abort ? 100 : 1000;
    if (req.timeout_ms > 0)
      slice = static_cast<int>(std::min<long long>(
          slice, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, slice);
    if (n < 0 && errno != EINTR) return CURLE_RECV_ERROR;
    if (n > 0) return CURLE_OK;
    if (req.abort && req.abort()) return CURLE_ABORTED_BY_CALLBACK;
  }
}

// Sends PUT's body in chunks of HTTP/1.1's chunked encoding. Stops early
// (CURLE_RECV_ERROR) when the manager has answered before the body's end (a
// refused upload: reading the answer beats pushing the rest into a socket
// nobody reads) or hung up.
template <class SendAll>
CURLcode send_chunked(int sock, const Request& req, SendAll& send_all) {
  constexpr size_t kData = 64 * 1024;
  std::string buf(16 + kData + 2, '\0');  // room for the size line and the CRLF after the data
  for (;;) {
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) return CURLE_RECV_ERROR;
    size_t n = req.upload_read(buf.data() + 16, kData);
    if (n == 0) return send_all(std::string_view("0\r\n\r\n"));
    char line[16];
    int len = std::snprintf(line, sizeof line, "%zx\r\n", n);
    char* start = buf.data() + 16 - len;
    std::memcpy(start, line, static_cast<size_t>(len));
    std::memcpy(buf.data() + 16 + n, "\r\n", 2);
    CURLcode rc = send_all(std::string_view(start, static_cast<size_t>(len) + n + 2));
    if (rc == CURLE_SEND_ERROR) return CURLE_RECV_ERROR;  // a hang-up; an answer may be waiting
    if (rc != CURLE_OK) return rc;
  }
}

Response perform_plain(const Request& req, const Target& t) {
  Response res;
  auto start = Clock::now();
  auto deadline = start + std::chrono::milliseconds(req.timeout_ms > 0 ? req.timeout_ms : 0);
  auto last_move = start;
  auto fail = [&](CURLcode rc, int err, const std::string& msg) {
    res.rc = rc;
    res.os_errno = err;
    res.curl_message = msg;
    res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return res;
  };
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  if (int rc = ::getaddrinfo(t.host.c_str(), t.port.c_str(), &hints, &ai); rc != 0)
    return fail(CURLE_COULDNT_RESOLVE_HOST, 0, std::string("could not resolve ") + t.host + ": " + ::gai_strerror(rc));
  Fd sock;
  int last_err = ECONNREFUSED;
  auto connect_deadline = start + std::chrono::milliseconds(req.connect_timeout_ms);
  for (addrinfo* a = ai; a && !sock; a = a->ai_next) {
    Fd s(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s) continue;
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_err = errno;
        continue;
      }
      Request connect_only;
      connect_only.timeout_ms = req.connect_timeout_ms;
      connect_only.abort = req.abort;
      auto moved = Clock::now();
      CURLcode w = wait_ready(s.get(), POLLOUT, connect_only, connect_deadline, moved);
      if (w != CURLE_OK) {
        ::freeaddrinfo(ai);
        return fail(w == CURLE_OPERATION_TIMEDOUT ? CURLE_OPERATION_TIMEDOUT : w, 0,
                    w == CURLE_OPERATION_TIMEDOUT ? "connection timed out" : "aborted");
      }
      int so_error = 0;
      socklen_t len = sizeof so_error;
      ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
      if (so_error) {
        last_err = so_error;
        continue;
      }
    }
    sock = std::move(s);
  }
  ::freeaddrinfo(ai);
  if (!sock) return fail(CURLE_COULDNT_CONNECT, last_err, std::strerror(last_err));
  int one = 1;
  ::setsockopt(sock.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Exec streams have no total timeout, so keepalive is what notices a vanished manager.
  ::setsockopt(sock.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);

  std::string head = req.method + " " + t.path + " HTTP/1.1\r\nHost: " +
                     (t.host.find(':') != std::string::npos ? "[" + t.host + "]" : t.host) + ":" + t.port +
                     "\r\nUser-Agent: sbx/" SBX_VERSION "\r\nConnection: close\r\n";
  if (!req.api_key.empty()) head += "X-API-Key: " + req.api_key + "\r\n";
  for (auto& h : req.headers) head += h + "\r\n";
  if (req.method == "PUT") head += "Transfer-Encoding: chunked\r\n";
  else if (req.method == "POST") head += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  head += "\r\n";
  if (req.method == "POST") head += req.body;

  auto send_all = [&](std::string_view data) -> CURLcode {
    while (!data.empty()) {
      ssize_t n = ::send(sock.get(), data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        last_move = Clock::now();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) {
        if (CURLcode w = wait_ready(sock.get(), POLLOUT, req, deadline, last_move); w != CURLE_OK) return w;
        continue;
      }
      return CURLE_SEND_ERROR;
    }
    return CURLE_OK;
  };
  if (CURLcode rc = send_all(head); rc != CURLE_OK) return fail(rc, errno, "sending the request failed");
  if (req.method == "PUT") {
    if (CURLcode rc = send_chunked(sock.get(), req, send_all); rc != CURLE_OK && rc != CURLE_RECV_ERROR)
      return fail(rc, errno, "sending the upload failed");
    // CURLE_RECV_ERROR: the manager answered (or hung up) before the body's end; its answer says why.
  }

  PlainTransfer tr{req, res, false, false, nullptr};
  http_parser parser;
  http_parser_init(&parser, HTTP_RESPONSE);
  parser.data = &tr;
  http_parser_settings settings{};
  settings.on_headers_complete = plain_on_headers;
  settings.on_body = plain_on_body;
  settings.on_message_complete = plain_on_complete;
  std::string buf(64 * 1024, '\0');
  while (!tr.complete) {
    ssize_t n = ::recv(sock.get(), buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (CURLcode w = wait_ready(sock.get(), POLLIN, req, deadline, last_move); w != CURLE_OK)
        return fail(w, 0, w == CURLE_ABORTED_BY_CALLBACK ? "aborted" : "timed out");
      continue;
    }
    if (n < 0) return fail(CURLE_RECV_ERROR, errno, std::strerror(errno));
    last_move = Clock::now();
    size_t parsed = http_parser_execute(&parser, &settings, buf.data(), static_cast<size_t>(n));
    if (tr.failure) std::rethrow_exception(tr.failure);
    if (n == 0) break;  // EOF: http-parser was told (a zero-length execute) and ends a close-delimited body
    if (parsed != static_cast<size_t>(n) || HTTP_PARSER_ERRNO(&parser) != HPE_OK)
      return fail(CURLE_WEIRD_SERVER_REPLY, 0,
                  std::string("malformed HTTP answer: ") + http_errno_description(HTTP_PARSER_ERRNO(&parser)));
  }
  if (!tr.complete)
    return fail(res.status ? CURLE_PARTIAL_FILE : CURLE_GOT_NOTHING, 0,
                res.status ? "the manager closed the connection mid-answer" : "the manager sent no answer");
  res.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return res;
}

}  // namespace

Response perform(const Request& req) {
  if (auto t = plain_target(req.url)) return perform_plain(req, *t);
  return perform_curl(req);
}


}  // namespace sbx::remote_http
