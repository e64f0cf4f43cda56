// A request for another manager's sandbox, passed on to it: one HTTP/1.1
// exchange (http_relay.hpp) on a kept-alive connection to that peer, the client's key and
// headers kept, the body streamed from the client to the owner as it comes and
// the answer from the owner to the client as it comes; a WebSocket upgrade goes
// to the owner first and the client gets the 101 only once the owner gave one,
// then bytes are relayed both ways untouched.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <future>
#include <map>
#include <mutex>

#include "core/error.hpp"
#include "core/unix_socket.hpp"
#include "server/api_internal.hpp"
#include "server/fleet.hpp"
#include "server/http_relay.hpp"

namespace sbx::server {

namespace {

// A peer that does not take the connection this fast is down (Kubernetes drops an
// unready pod from the headless Service's DNS, so most downs fail at once).
constexpr int kConnectTimeoutMs = 2000;
// A list from one peer: the answer's head must come within this (it is a registry read).
constexpr int kListTimeoutMs = 10'000;
constexpr size_t kMaxListBytes = 64u << 20;

struct HostPort {
  std::string host, port;
};

HostPort host_port(const std::string& url) {
  std::string hp = url.substr(7);  // config checked: http://HOST[:PORT], no path
  if (hp.front() == '[') {
    auto close = hp.find(']');
    return {hp.substr(1, close - 1), close + 2 < hp.size() ? hp.substr(close + 2) : "80"};
  }
  auto colon = hp.rfind(':');
  if (colon == std::string::npos) return {hp, "80"};
  return {hp.substr(0, colon), hp.substr(colon + 1)};
}

// A TCP connection to the peer, or an error saying why not (for the 503).
Fd connect_peer(const std::string& url) {
  HostPort t = host_port(url);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  if (int rc = ::getaddrinfo(t.host.c_str(), t.port.c_str(), &hints, &ai); rc != 0)
    throw Error(Errc::unavailable, std::string("cannot resolve ") + t.host + ": " + ::gai_strerror(rc));
  int err = ECONNREFUSED;
  Fd sock;
  for (addrinfo* a = ai; a && !sock; a = a->ai_next) {
    Fd s(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s) continue;
    int rc = ::connect(s.get(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.get(), POLLOUT, 0};
      rc = ::poll(&p, 1, kConnectTimeoutMs) == 1 ? 0 : (errno = ETIMEDOUT, -1);
      socklen_t len = sizeof err;
      if (rc == 0 && ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err) rc = -1, errno = err;
    }
    if (rc != 0) {
      err = errno;
      continue;
    }
    ::fcntl(s.get(), F_SETFL, ::fcntl(s.get(), F_GETFL) & ~O_NONBLOCK);
    sock = std::move(s);
  }
  ::freeaddrinfo(ai);
  if (!sock) throw Error(Errc::unavailable, std::strerror(err));
  int one = 1;
  ::setsockopt(sock.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Exec streams have no total timeout: keepalive notices a peer that vanished without a FIN.
  ::setsockopt(sock.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  return sock;
}

// What every passed-on request carries besides the client's own headers.
std::string forward_headers(const FleetConfig& f, const std::string& url, const HttpRequest& req) {
  return "Host: " + url.substr(7) + "\r\n" + kForwardedHeader + ": " + std::to_string(f.self) +
         "\r\nX-Request-Id: " + req.request_id + "\r\n";
}

// Headers of the client's request the owner gets from this manager instead.
const std::set<std::string> kReplaced = {"host", "x-request-id", "x-sbx-forwarded-by"};
// The owner's X-Request-Id is this request's (passed on), which this manager sends itself.
const std::set<std::string> kOwnAnswer = {"x-request-id"};

}  // namespace

// Connections to peers whose last answer was read to its end, kept for the next
// request: a new connection costs the owner a thread and ~1 ms.
class Fleet::Pool {
 public:
  Fd take(int owner) {
    std::lock_guard lock(mu_);
    auto& idle = idle_[owner];
    while (!idle.empty()) {
      auto [fd, since] = std::move(idle.back());
      idle.pop_back();
      // Younger than libmicrohttpd's idle cutoff (60 s), and not closed or written to since.
      pollfd p{fd.get(), POLLIN | POLLRDHUP, 0};
      if (std::chrono::steady_clock::now() - since < kMaxIdle && ::poll(&p, 1, 0) == 0) return std::move(fd);
    }
    return Fd();
  }
  void give(int owner, Fd fd) {
    std::lock_guard lock(mu_);
    auto& idle = idle_[owner];
    if (idle.size() < kMaxIdlePerPeer) idle.emplace_back(std::move(fd), std::chrono::steady_clock::now());
  }

 private:
  static constexpr auto kMaxIdle = std::chrono::seconds(20);
  static constexpr size_t kMaxIdlePerPeer = 16;
  std::mutex mu_;
  std::map<int, std::vector<std::pair<Fd, std::chrono::steady_clock::time_point>>> idle_;
};

Fleet::Fleet(FleetConfig cfg) : cfg_(std::move(cfg)), pool_(std::make_shared<Pool>()) {}

HttpResponse Fleet::forward(const HttpRequest& req, int owner) const {
  const std::string url = cfg_.url_of(owner);
  const std::string what = "sandbox " + path_sandbox_id(req.path);
  // Kept by the answer's body stream, which outlives this call: no references.
  relay::Fail down = [](Errc, const std::string& why) { return Error(Errc::unavailable, why); };
  bool ws = !req.websocket_key.empty();
  Fd sock = ws ? Fd() : pool_->take(owner);
  try {
    if (!sock) sock = connect_peer(url);
  } catch (const Error& e) {
    return owner_down(*this, what, owner, e.what());
  }
  std::string head = relay::request_head(req, relay::request_target(req.path, req), kReplaced,
                                         forward_headers(cfg_, url, req) + (ws ? "Upgrade: websocket\r\n" : ""),
                                         ws ? "Upgrade" : "keep-alive");
  bool chunked = relay::has_header(req, "transfer-encoding", "chunked");
  // A body in hand goes with the head, in one packet: the owner has the whole request in one read.
  bool in_hand = req.body_fd < 0 && !chunked;
  try {
    send_all(sock.get(), in_hand ? head + req.body : head);
  } catch (const Error& e) {
    return owner_down(*this, what, owner, e.what());
  }
  try {
    if (!in_hand) relay::send_body(sock.get(), req, chunked);
  } catch (const Error&) {
    // The owner answered before the whole body (an early error): its answer still comes through.
  }
  std::string buf, answer;
  try {
    // No time limit: a buffered exec answers when its command ends; a client that hangs up ends the wait.
    answer = relay::read_head(sock.get(), buf, -1, req.client_fd, ws, down);
  } catch (const Error& e) {
    if (e.code() != Errc::unavailable) throw;
    return owner_down(*this, what, owner, e.what());
  }
  if (ws && relay::is_switching(answer)) return relay::switched_to(std::move(sock), answer, std::move(buf));
  return relay::response_from(std::move(sock), answer, std::move(buf), req.method, kOwnAnswer, down,
                              [pool = pool_, owner](Fd fd) { pool->give(owner, std::move(fd)); });
}

namespace {

// One peer's own list (GET /v1/sandboxes?...&scope=local with the caller's key), parsed.
nlohmann::json peer_list(const FleetConfig& f, int ordinal, const HttpRequest& req) {
  std::string url = f.url_of(ordinal);
  relay::Fail fail = [](Errc, const std::string& why) { return Error(Errc::unavailable, why); };
  Fd sock = connect_peer(url);
  HttpRequest get;
  get.method = "GET";
  get.args = req.args;
  get.args.emplace_back("scope", kLocalScope);
  for (auto& [k, v] : req.headers)
    if (relay::lower(k) == "x-api-key") get.headers.emplace_back(k, v);
  send_all(sock.get(), relay::request_head(get, relay::request_target("/v1/sandboxes", get), {},
                                           forward_headers(f, url, req)));
  std::string buf;
  std::string head = relay::read_head(sock.get(), buf, kListTimeoutMs, -1, false, fail);
  HttpResponse r = relay::response_from(std::move(sock), head, std::move(buf), "GET", {}, fail);
  std::string body = std::move(r.body);  // all of it when it came with the head, else streamed
  char tmp[64 * 1024];
  for (ssize_t n; r.stream && (n = r.stream->read(tmp, sizeof tmp)) != 0;) {
    if (n < 0 || body.size() > kMaxListBytes) throw Error(Errc::unavailable, "its list was cut off");
    body.append(tmp, static_cast<size_t>(n));
  }
  auto j = nlohmann::json::parse(body, nullptr, false);
  // The filters were checked here already; a peer refusing the key has other keys (its Secret differs).
  if (r.status != 200 || !j.is_array()) throw Error(Errc::unavailable, "it answered " + std::to_string(r.status));
  return j;
}

}  // namespace

HttpResponse Fleet::list(const HttpRequest& req, nlohmann::json here) const {
  std::vector<std::pair<int, std::future<nlohmann::json>>> asks;
  for (int n = 0; n < cfg_.size; ++n)
    if (n != cfg_.self) asks.emplace_back(n, std::async(std::launch::async, [this, n, &req] { return peer_list(cfg_, n, req); }));
  std::string down;
  int first_down = -1;
  for (auto& [n, f] : asks) {
    try {
      for (auto& rec : f.get()) here.push_back(std::move(rec));
    } catch (const std::exception& e) {
      down += (down.empty() ? "" : "; ") + name(n) + ": " + e.what();
      if (first_down < 0) first_down = n;
    }
  }
  // A partial list would look whole to a client that reconciles against it: fail instead, naming who is missing.
  if (first_down >= 0) return owner_down(*this, "part of the list", first_down, down);
  return json_response(200, here);
}

}  // namespace sbx::server
