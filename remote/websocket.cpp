#include "remote/websocket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/unix_socket.hpp"
#include "core/terminal.hpp"
#include "remote/tls_tunnel.hpp"
#include "core/wire.hpp"

namespace sbx::remote_ws {

using nlohmann::json;

namespace {

constexpr char kStdin = 0, kStdout = 1, kStderr = 2;
constexpr int kConnectTimeoutMs = 2000;

struct HostPort {
  std::string host, port;
  bool tls = false;
  std::string path;  ///< the URL's path prefix ("" or "/base")
};

HostPort host_port(const std::string& base_url) {
  HostPort hp;
  hp.tls = base_url.rfind("https://", 0) == 0;
  size_t start = hp.tls ? 8 : 7;
  size_t slash = base_url.find('/', start);
  std::string authority = base_url.substr(start, slash - start);
  if (slash != std::string::npos) hp.path = base_url.substr(slash);
  if (!hp.path.empty() && hp.path.back() == '/') hp.path.pop_back();
  const char* default_port = hp.tls ? "443" : "80";
  if (authority.find('@') != std::string::npos)
    throw Error(Errc::invalid_argument, "interactive sessions do not take credentials in the manager URL")
        .set_hint("use the API key (ADMIN_API_KEY) instead");
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    hp.host = authority.substr(1, close - 1);
    hp.port = close + 1 < authority.size() ? authority.substr(close + 2) : default_port;
  } else {
    size_t colon = authority.rfind(':');
    hp.host = authority.substr(0, colon);
    hp.port = colon == std::string::npos ? default_port : authority.substr(colon + 1);
  }
  return hp;
}

Fd connect_tcp(const HostPort& hp, const std::string& shown) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  if (int rc = ::getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &ai); rc != 0)
    throw Error(Errc::unavailable, "manager " + shown + " unreachable: could not resolve " + hp.host + ": " + ::gai_strerror(rc));
  int err = ECONNREFUSED;
  Fd sock;
  for (addrinfo* a = ai; a && !sock; a = a->ai_next) {
    Fd s(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s) continue;
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        err = errno;
        continue;
      }
      pollfd p{s.get(), POLLOUT, 0};
      if (::poll(&p, 1, kConnectTimeoutMs) != 1) {
        err = ETIMEDOUT;
        continue;
      }
      socklen_t len = sizeof err;
      int so_error = 0;
      ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &so_error, &len);
      if (so_error) {
        err = so_error;
        continue;
      }
    }
    sock = std::move(s);
  }
  ::freeaddrinfo(ai);
  if (!sock)
    throw Error(Errc::unavailable, "manager " + shown + " unreachable: " + std::strerror(err))
        .set_hint("check SANDBOX_MANAGER_URL and that sbx serve runs there");
  int one = 1;
  ::setsockopt(sock.get(), IPPROTO_TCP, 1 /* TCP_NODELAY */, &one, sizeof one);  // keystrokes go out at once
  return sock;
}

// io's input to the manager until the session ends (wake readable).
void pump_input(ws::Connection& c, ExecIO& io, int wake) {
  bool stdin_open = io.stdin_fd >= 0;
  std::string buf(64 * 1024, '\0');
  DetachKeys keys;
  for (;;) {
    pollfd p[4];
    nfds_t n = 0;
    p[n++] = {wake, POLLIN, 0};
    int in = -1, sig = -1, rsz = -1;
    if (stdin_open) in = static_cast<int>(n), p[n++] = {io.stdin_fd, POLLIN, 0};
    if (io.signal_fd >= 0) sig = static_cast<int>(n), p[n++] = {io.signal_fd, POLLIN, 0};
    if (io.resize_fd >= 0) rsz = static_cast<int>(n), p[n++] = {io.resize_fd, POLLIN, 0};
    if (::poll(p, n, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[0].revents) return;
    bool sent = true;
    bool typed = in >= 0 && p[in].revents;
    // The size first: what was typed after a resize must find the new size.
    if (rsz >= 0 && (p[rsz].revents || typed)) {
      if (auto w = take_window_size(io.resize_fd))
        if (!c.send(ws::Kind::text, json{{"resize", {{"rows", w->rows}, {"cols", w->cols}}}}.dump())) return;
    }
    if (typed) {
      ssize_t got = ::read(io.stdin_fd, buf.data() + 1, buf.size() - 1);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        stdin_open = false;
        sent = c.send(ws::Kind::text, R"({"eof":true})");
      } else if (io.detach_keys) {
        // Ctrl-P Ctrl-Q ends the attachment, not the process: the manager is
        // told to detach and nothing typed after the keys is sent.
        std::string kept(1, kStdin);
        bool detach = keys.feed(std::string_view(buf).substr(1, static_cast<size_t>(got)), kept);
        if (kept.size() > 1) sent = c.send(ws::Kind::binary, kept);
        if (detach) {
          stdin_open = false;
          sent = c.send(ws::Kind::text, R"({"detach":true})") && sent;
        }
      } else {
        buf[0] = kStdin;
        sent = c.send(ws::Kind::binary, buf.substr(0, static_cast<size_t>(got) + 1));
      }
    }
    if (sig >= 0 && p[sig].revents) {
      int s = 0;
      if (::read(io.signal_fd, &s, sizeof s) == static_cast<ssize_t>(sizeof s) && s > 0)
        sent = c.send(ws::Kind::text, json{{"signal", s}}.dump()) && sent;
    }
    if (!sent) return;
  }
}

}  // namespace

std::unique_ptr<ws::Connection> dial(const std::string& base_url, const std::string& shown, const std::string& api_key,
                                     const std::string& target, const OnRefusal& on_refusal) {
  HostPort hp = host_port(base_url);
  Fd sock = hp.tls ? tls_tunnel(hp.host, hp.port, shown) : connect_tcp(hp, shown);
  std::string path = hp.path + target;
  ws::Refusal refusal;
  auto c = ws::Connection::connect(std::move(sock), hp.host, path, {{"X-API-Key", api_key}}, refusal);
  if (!c) {
    on_refusal(refusal.status, refusal.body);
    throw Error(Errc::protocol, "manager " + shown + " refused the WebSocket: HTTP " + std::to_string(refusal.status));
  }
  return c;
}

Outcome run_session(ws::Connection& c, const json* first, ExecIO& io) {
  if (first) c.send(ws::Kind::text, first->dump());
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
  Fd wake_r(p[0]), wake_w(p[1]);
  // SIGWINCH is the pump's, the thread that sends what is typed: its handler
  // then runs before the pump looks at keys typed after the resize, so the
  // new size goes first (on another thread it could come after them).
  sigset_t winch, before;
  sigemptyset(&winch);
  sigaddset(&winch, SIGWINCH);
  pthread_sigmask(SIG_BLOCK, &winch, &before);
  std::thread pump([&] {
    block_sigpipe_in_this_thread();
    pthread_sigmask(SIG_UNBLOCK, &winch, nullptr);
    pump_input(c, io, wake_r.get());
  });
  Outcome out;
  bool ended = false;
  std::optional<Error> failure;
  ws::Closed how = c.run([&](ws::Message& m) {
    try {
      if (m.kind == ws::Kind::binary) {
        if (m.data.empty()) return true;
        std::string_view d = std::string_view(m.data).substr(1);
        if (m.data[0] == kStdout && io.on_stdout) io.on_stdout(d);
        else if (m.data[0] == kStderr && io.on_stderr) io.on_stderr(d);
        return true;
      }
      json j = json::parse(m.data, nullptr, false);
      if (!j.is_object()) return true;
      if (auto e = j.find("error"); e != j.end() && e->is_object()) {
        failure = error_from_json(*e, Errc::internal, "the manager failed the session");
        ended = true;
      } else if (auto x = j.find("exit"); x != j.end() && x->is_object()) {
        out.exit = x->get<ExecResult>();
        out.error = str_field(*x, "error");
        ended = true;
      } else if (j.value("detached", false)) {
        ended = true;
      }
    } catch (const std::exception& e) {
      failure = Error(Errc::protocol, std::string("the manager sent a message sbx cannot read: ") + e.what());
      c.abort();
    }
    return true;
  });
  ssize_t ignored = ::write(wake_w.get(), "x", 1);
  (void)ignored;
  pump.join();
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (failure) throw *failure;
  if (!ended)
    throw Error(Errc::protocol, how.code == ws::kGoingAway ? "the manager shut down during the session"
                                                           : "the manager closed the session before the command finished");
  return out;
}

Fd tunnel(std::unique_ptr<ws::Connection> c) {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) throw sys_error("socketpair", errno);
  Fd mine(sp[0]);
  std::thread([conn = std::move(c), fd = Fd(sp[1])]() mutable {
    block_sigpipe_in_this_thread();
    ws::relay(*conn, fd.get());
  }).detach();
  return mine;
}

}  // namespace sbx::remote_ws
