#include "server/http_relay.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "core/unix_socket.hpp"

namespace sbx::server::relay {

namespace {

constexpr size_t kMaxHeadBytes = 64 * 1024;
constexpr size_t kChunk = 64 * 1024;

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  auto e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string percent_encode(const std::string& s, const char* keep) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || std::strchr(keep, c)) out += static_cast<char>(c);
    else out += {'%', hex[c >> 4], hex[c & 15]};
  }
  return out;
}

// The answer's body as it comes, unframed (libmicrohttpd frames it again for the client).
class Body : public ResponseStream {
 public:
  enum class Framing { none, length, chunked, until_close };
  Body(Fd sock, std::string rest, Framing framing, uint64_t length, Fail fail, Reuse reuse)
      : sock_(std::move(sock)), buf_(std::move(rest)), framing_(framing), left_(length), fail_(std::move(fail)),
        reuse_(std::move(reuse)) {
    if (framing_ == Framing::none || (framing_ == Framing::length && !left_)) ended();
  }

  ssize_t read(char* out, size_t max) override {
    try {
      return next(out, max);
    } catch (const Error&) {
      return -1;  // cut short: the client sees an answer that did not end properly
    }
  }
  void cancel() override { ::shutdown(sock_.get(), SHUT_RDWR); }

 private:
  // Reads more from the far side; false at its EOF.
  bool fill() {
    // What was taken goes first: a server whose writes all end inside a chunk's size line
    // (so that a read never ends where the buffer empties) grew it by the whole body.
    if (off_ > 0) buf_.erase(0, off_), off_ = 0;
    char tmp[kChunk];
    for (;;) {
      ssize_t n = ::read(sock_.get(), tmp, sizeof tmp);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw fail_(Errc::io, std::string("could not be read: ") + std::strerror(errno));
      buf_.append(tmp, static_cast<size_t>(n));
      return n > 0;
    }
  }
  // Up to max bytes of the body that are buffered, at most `limit`.
  ssize_t take(char* out, size_t max, uint64_t limit) {
    size_t n = static_cast<size_t>(std::min<uint64_t>({max, limit, buf_.size() - off_}));
    std::memcpy(out, buf_.data() + off_, n);
    off_ += n;
    if (off_ == buf_.size()) buf_.clear(), off_ = 0;
    return static_cast<ssize_t>(n);
  }
  // A whole line (a chunk size, the CRLF after a chunk) from the stream.
  std::string line() {
    size_t at;
    while ((at = buf_.find("\r\n", off_)) == std::string::npos) {
      if (buf_.size() - off_ > 4096 || !fill()) throw fail_(Errc::protocol, "sent a bad chunked encoding");
    }
    std::string l = buf_.substr(off_, at - off_);
    off_ = at + 2;
    return l;
  }
  ssize_t next(char* out, size_t max) {
    switch (framing_) {
      case Framing::none: return 0;
      case Framing::until_close:
        if (off_ == buf_.size() && !fill()) return 0;
        return take(out, max, UINT64_MAX);
      case Framing::length:
        if (!left_) return 0;
        if (off_ == buf_.size() && !fill()) throw fail_(Errc::protocol, "ended its answer early");
        {
          ssize_t n = take(out, max, left_);
          left_ -= static_cast<uint64_t>(n);
          if (!left_) ended();  // libmicrohttpd asks no more once it has Content-Length bytes
          return n;
        }
      case Framing::chunked:
        if (!left_) {
          if (in_chunk_) line();  // the CRLF that ends the last chunk
          left_ = std::strtoull(line().c_str(), nullptr, 16);
          in_chunk_ = true;
          if (!left_) {
            framing_ = Framing::none;
            // Trailers are read only when the connection is to be used again; else it closes with them unread.
            if (reuse_) {
              while (!line().empty()) {
              }
              ended();
            }
            return 0;
          }
        }
        if (off_ == buf_.size() && !fill()) throw fail_(Errc::protocol, "ended its answer early");
        {
          ssize_t n = take(out, max, left_);
          left_ -= static_cast<uint64_t>(n);
          return n;
        }
    }
    return 0;
  }

  Fd sock_;
  std::string buf_;
  size_t off_ = 0;
  Framing framing_;
  uint64_t left_;
  bool in_chunk_ = false;
  Fail fail_;
  Reuse reuse_;

  // The answer was read to its exact end: the connection may carry another exchange.
  void ended() {
    if (!reuse_ || off_ != buf_.size()) return;
    auto reuse = std::move(reuse_);
    reuse_ = nullptr;
    reuse(std::move(sock_));
  }
};

}  // namespace

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}


// Expect: libmicrohttpd sent the 100 already.
bool hop_by_hop(const std::string& name, const std::set<std::string>& listed_in_connection) {
  static const std::set<std::string> fixed = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                                              "proxy-authorization", "te", "trailer", "trailers",
                                              "transfer-encoding", "upgrade", "expect"};
  return fixed.count(name) || listed_in_connection.count(name);
}

std::set<std::string> connection_tokens(const Headers& headers) {
  std::set<std::string> out;
  for (auto& [k, v] : headers) {
    if (lower(k) != "connection") continue;
    for (size_t pos = 0; pos <= v.size();) {
      size_t end = std::min(v.find(',', pos), v.size());
      if (auto t = lower(trim(v.substr(pos, end - pos))); !t.empty()) out.insert(t);
      pos = end + 1;
    }
  }
  return out;
}


namespace {

// The raw form of `tail`, a tail of the decoded req.path: the prefix before it
// (an id, a port: no encoded slashes) has as many segments raw as decoded.
std::optional<std::string> raw_tail(const HttpRequest& req, const std::string& tail, std::string_view raw_path) {
  if (req.path.size() < tail.size() || req.path.compare(req.path.size() - tail.size(), tail.size(), tail) != 0 ||
      raw_path.empty() || raw_path[0] != '/')
    return std::nullopt;
  auto slashes = std::count(req.path.begin(), req.path.end() - static_cast<std::ptrdiff_t>(tail.size()), '/');
  size_t at = 0;
  for (; slashes > 0 && at != std::string_view::npos; --slashes) at = raw_path.find('/', at + 1);
  if (tail.empty() || at == std::string_view::npos) return std::nullopt;
  return std::string(raw_path.substr(at));
}

}  // namespace

std::string request_target(const std::string& path, const HttpRequest& req, std::string_view drop_arg) {
  std::string_view raw = req.raw_target;
  size_t q = raw.find('?');
  if (auto t = raw_tail(req, path, raw.substr(0, q))) {
    if (q == std::string_view::npos) return *t;
    char sep = '?';
    for (std::string_view rest = raw.substr(q + 1); !rest.empty();) {
      size_t amp = rest.find('&');
      std::string_view arg = rest.substr(0, amp);
      rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
      if (arg.empty() || (!drop_arg.empty() && arg.substr(0, arg.find('=')) == drop_arg)) continue;
      *t += sep;
      *t += arg;
      sep = '&';
    }
    return *t;
  }
  std::string t = percent_encode(path, "/-._~!$&'()*+,;=:@");
  char sep = '?';
  for (auto& [k, v] : req.args) {
    if (!drop_arg.empty() && k == drop_arg) continue;
    t += sep + percent_encode(k, "-._~") + "=" + percent_encode(v, "-._~");
    sep = '&';
  }
  return t;
}

bool has_header(const HttpRequest& req, const std::string& name, const std::string& value_part) {
  for (auto& [k, v] : req.headers)
    if (lower(k) == name && lower(v).find(value_part) != std::string::npos) return true;
  return false;
}

void send_body(int sock, const HttpRequest& req, bool chunked) {
  auto piece = [&](std::string_view data) {
    if (data.empty()) return;
    if (!chunked) return send_all(sock, data);
    char len[24];
    std::snprintf(len, sizeof len, "%zx\r\n", data.size());
    send_all(sock, std::string(len) + std::string(data) + "\r\n");
  };
  if (req.body_fd < 0) piece(req.body);
  else {
    char buf[kChunk];
    for (ssize_t n; (n = ::read(req.body_fd, buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw sys_error("reading the request body", errno);
      piece(std::string_view(buf, static_cast<size_t>(n)));
    }
    if (req.body_complete && !req.body_complete())
      throw Error(Errc::io, "the client went away before the whole request body came");
  }
  if (chunked) send_all(sock, "0\r\n\r\n");
}

std::string request_head(const HttpRequest& req, const std::string& target, const std::set<std::string>& drop,
                         const std::string& extra, const std::string& connection) {
  std::string h = req.method + " " + target + " HTTP/1.1\r\n";
  auto listed = connection_tokens(req.headers);
  bool chunked = has_header(req, "transfer-encoding", "chunked");
  for (auto& [k, v] : req.headers) {
    std::string n = lower(k);
    if (hop_by_hop(n, listed) || drop.count(n)) continue;
    h += k + ": " + v + "\r\n";
  }
  // A body of unknown length (the client sent it chunked; libmicrohttpd took the chunks apart) goes on chunked.
  if (chunked) h += "Transfer-Encoding: chunked\r\n";
  h += extra;
  h += "Connection: " + connection + "\r\n\r\n";
  return h;
}

std::string read_head(int sock, std::string& buf, int timeout_ms, int hangup_fd, bool upgrade, const Fail& fail) {
  for (;;) {
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
      if (buf.size() > kMaxHeadBytes) throw fail(Errc::protocol, "sent headers over 64 KiB");
      pollfd p[2] = {{sock, POLLIN, 0}, {hangup_fd, POLLRDHUP, 0}};
      int r = ::poll(p, hangup_fd >= 0 ? 2 : 1, timeout_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0)
        throw fail(Errc::timeout, "did not answer within " + std::to_string(timeout_ms / 1000) + " s");
      if (hangup_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) && !(p[0].revents & POLLIN))
        throw Error(Errc::io, "the client went away before the answer");
      char tmp[kChunk];
      ssize_t n = ::read(sock, tmp, sizeof tmp);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw fail(Errc::protocol, "closed the connection without an HTTP answer");
      buf.append(tmp, static_cast<size_t>(n));
    }
    std::string head = buf.substr(0, end + 2);
    buf.erase(0, end + 4);
    bool interim = head.size() > 12 && head.compare(0, 5, "HTTP/") == 0 && head[9] == '1';
    if (interim && !(upgrade && head.compare(9, 3, "101") == 0)) continue;  // 100 Continue and friends
    return head;
  }
}

namespace {

// The header lines of an HTTP head (its first line being the status or request line).
Headers head_fields(const std::string& head) {
  Headers headers;
  for (size_t pos = head.find("\r\n"); pos != std::string::npos && pos + 2 < head.size();) {
    pos += 2;
    size_t e = head.find("\r\n", pos);
    std::string line = head.substr(pos, e - pos);
    pos = e;
    auto colon = line.find(':');
    if (colon != std::string::npos) headers.emplace_back(trim(line.substr(0, colon)), trim(line.substr(colon + 1)));
  }
  return headers;
}

}  // namespace

HttpResponse response_from(Fd sock, const std::string& head, std::string rest, const std::string& method,
                           const std::set<std::string>& drop, const Fail& fail, Reuse reuse) {
  HttpResponse r;
  auto eol = head.find("\r\n");
  std::string status_line = head.substr(0, eol);
  if (status_line.size() < 12 || status_line.compare(0, 5, "HTTP/") != 0)
    throw fail(Errc::protocol, "answered something that is not HTTP");
  r.status = std::atoi(status_line.c_str() + 9);
  if (r.status < 200 || r.status > 599) throw fail(Errc::protocol, "answered status " + status_line.substr(9, 3));
  Headers headers = head_fields(head);
  auto listed = connection_tokens(headers);
  auto framing = Body::Framing::until_close;
  uint64_t length = 0;
  r.content_type.clear();  // none unless the server sent one
  for (auto& [k, v] : headers) {
    std::string n = lower(k);
    if (n == "transfer-encoding" && lower(v).find("chunked") != std::string::npos) framing = Body::Framing::chunked;
    else if (n == "content-length" && framing != Body::Framing::chunked)
      framing = Body::Framing::length, length = std::strtoull(v.c_str(), nullptr, 10);
    if (n == "content-length" || hop_by_hop(n, listed) || drop.count(n)) continue;
    if (n == "content-type") r.content_type = v;
    else r.headers.emplace_back(k, v);
  }
  if (method == "HEAD" || r.status == 204 || r.status == 304) framing = Body::Framing::none;
  if (framing == Body::Framing::until_close || listed.count("close") || status_line.compare(0, 8, "HTTP/1.1") != 0)
    reuse = nullptr;
  if (framing == Body::Framing::length && rest.size() >= length) {
    // The whole body came with the head (a small answer): handed on as one buffer, which
    // libmicrohttpd sends with its head in one packet; the connection is free at once.
    r.body = rest.substr(0, length);
    if (reuse && rest.size() == length) reuse(std::move(sock));
    return r;
  }
  if (framing == Body::Framing::length) r.stream_size = static_cast<int64_t>(length);
  r.stream = std::make_shared<Body>(std::move(sock), std::move(rest), framing, length, fail, std::move(reuse));
  return r;
}

namespace {

// Writes all of data to fd (the client's socket may be non-blocking).
bool write_fully(int fd, const char* p, size_t n) {
  while (n) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      pollfd q{fd, POLLOUT, 0};
      ::poll(&q, 1, -1);
      continue;
    }
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

// Bytes both ways between the client's upgraded socket and the owner's until both
// directions ended (each EOF is passed on as a half-close); the client's socket stays open.
void splice_both_ways(int client, Fd owner, const std::string& to_client, const std::string& to_owner) {
  if (!write_fully(client, to_client.data(), to_client.size()) ||
      !write_fully(owner.get(), to_owner.data(), to_owner.size()))
    return;
  int fds[2] = {client, owner.get()};
  bool open[2] = {true, true};
  char buf[64 * 1024];
  while (open[0] || open[1]) {
    pollfd p[2] = {{fds[0], static_cast<short>(open[0] ? POLLIN : 0), 0}, {fds[1], static_cast<short>(open[1] ? POLLIN : 0), 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        open[i] = false;
        ::shutdown(fds[1 - i], SHUT_WR);
        if (n < 0) return;  // a reset: the other side goes too
        continue;
      }
      if (!write_fully(fds[1 - i], buf, static_cast<size_t>(n))) return;
    }
  }
}

bool is_switching(const std::string& head) { return head.size() > 12 && head.compare(9, 3, "101") == 0; }

HttpResponse switched_to(Fd sock, const std::string& head, std::string rest) {
  HttpResponse r;
  r.status = 101;
  // What the server chose (Sec-WebSocket-Protocol, -Extensions) goes to the
  // client, whose bytes then pass untouched; the Accept is the manager's own
  // (the same key's, so the same value).
  Headers fields = head_fields(head);
  auto listed = connection_tokens(fields);
  for (auto& [k, v] : fields)
    if (std::string n = lower(k); !hop_by_hop(n, listed) && n != "sec-websocket-accept") r.headers.emplace_back(k, v);
  r.upgraded = [upstream = std::make_shared<Fd>(std::move(sock)), rest = std::move(rest)](int client, std::string extra) {
    splice_both_ways(client, std::move(*upstream), rest, extra);
  };
  return r;
}

}  // namespace sbx::server::relay
