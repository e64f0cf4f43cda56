#include "core/port_forward.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include "core/error.hpp"

namespace sbx {

namespace {

uint16_t parse_port(const std::string& s, const std::string& spec, bool zero_ok) {
  bool digits = !s.empty() && s.size() <= 5 && s.find_first_not_of("0123456789") == std::string::npos;
  unsigned long v = digits ? std::stoul(s) : 0;
  if (!digits || v > 65535 || (v == 0 && !zero_ok))
    throw Error(Errc::usage, "bad port '" + s + "' in '" + spec + "'")
        .set_hint("give [LOCAL:]REMOTE with ports 1-65535 (LOCAL 0: any free port), e.g. 8080 or 9000:8080");
  return static_cast<uint16_t>(v);
}

Fd listen_loopback(uint16_t port) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) throw sys_error("socket", errno);
  int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int e = errno;
    if (e == EADDRINUSE)
      throw Error(Errc::conflict, "127.0.0.1:" + std::to_string(port) + " is already in use on this host")
          .set_hint("pick another local port (LOCAL:REMOTE), or 0:REMOTE for any free one");
    throw sys_error("cannot listen on 127.0.0.1:" + std::to_string(port), e);
  }
  if (::listen(s.get(), 128) != 0) throw sys_error("listen", errno);
  return s;
}

}  // namespace

ForwardPorts parse_forward_ports(const std::string& spec) {
  auto colon = spec.find(':');
  ForwardPorts p;
  if (colon == std::string::npos) {
    p.remote = parse_port(spec, spec, false);
    p.local = p.remote;
  } else {
    p.local = parse_port(spec.substr(0, colon), spec, true);
    p.remote = parse_port(spec.substr(colon + 1), spec, false);
  }
  return p;
}

struct PortForwarder::Conn {
  Fd client;
  std::thread thread;
  std::atomic<bool> done{false};
};

PortForwarder::PortForwarder(Backend& backend, std::string id, ForwardPorts ports)
    : backend_(backend), id_(std::move(id)), remote_(ports.remote) {
  SandboxRecord rec = backend_.get(id_);
  // A paused sandbox is resumed by each connection, as exec and cp resume it.
  if (rec.state != SandboxState::running && rec.state != SandboxState::paused)
    throw Error(Errc::conflict, "sandbox " + rec.id + " is " + std::string(state_name(rec.state)))
        .set_hint("port-forward needs a running sandbox; see `sbx ls`");
  id_ = rec.id;
  listen_ = listen_loopback(ports.local);
  sockaddr_in got{};
  socklen_t len = sizeof got;
  ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&got), &len);
  local_ = ntohs(got.sin_port);
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) throw sys_error("pipe", errno);
  wake_r_.reset(p[0]);
  wake_w_.reset(p[1]);
}

PortForwarder::~PortForwarder() { reap(true); }

void PortForwarder::serve(Conn& c, const std::function<void(const Error&)>& on_error) {
  try {
    backend_.forward_port(id_, remote_, c.client.get());
  } catch (const Error& e) {
    // Nothing listening is this connection's problem; a sandbox that is gone ends the forwarding.
    bool gone = false;
    try {
      auto st = backend_.get(id_).state;
      gone = st != SandboxState::running && st != SandboxState::paused;
    } catch (const Error&) {
      gone = true;
    }
    ::shutdown(c.client.get(), SHUT_RDWR);  // the client sees its connection end at once
    std::lock_guard lock(mu_);
    if (gone && !fatal_)
      fatal_ = std::make_unique<Error>(Error(Errc::unavailable, "sandbox " + id_ + " is gone; stopped forwarding")
                                           .add_context(e.what()));
    else if (!gone)
      on_error(e);
  }
  c.done = true;
  // Wakes run() to reap this connection (and to stop, when the sandbox is gone).
  char b = 1;
  ssize_t ignored = ::write(wake_w_.get(), &b, 1);
  (void)ignored;
}

void PortForwarder::reap(bool all) {
  std::list<std::unique_ptr<Conn>> finished;
  {
    std::lock_guard lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      Conn& c = **it;
      if (all && !c.done) {
        // Ends the relay (its side of the connection is gone); a thread still opening its port returns shortly.
        ::shutdown(c.client.get(), SHUT_RDWR);
      }
      if (all || c.done) finished.splice(finished.end(), conns_, it++);
      else ++it;
    }
  }
  for (auto& c : finished)
    if (c->thread.joinable()) c->thread.join();
}

void PortForwarder::run(int stop_fd, const std::function<void(const Error&)>& on_error) {
  for (;;) {
    pollfd p[3] = {{listen_.get(), POLLIN, 0}, {stop_fd, POLLIN, 0}, {wake_r_.get(), POLLIN, 0}};
    if (::poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      throw sys_error("poll", errno);
    }
    if (p[2].revents) {
      char buf[64];
      while (::read(wake_r_.get(), buf, sizeof buf) > 0) {
      }
    }
    reap(false);
    if (p[1].revents) break;
    {
      std::lock_guard lock(mu_);
      if (fatal_) break;
    }
    if (!p[0].revents) continue;
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the client gave up already, or out of descriptors for now
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_unique<Conn>();
    c->client.reset(fd);
    Conn& ref = *c;
    std::lock_guard lock(mu_);
    conns_.push_back(std::move(c));
    ref.thread = std::thread([this, &ref, &on_error] { serve(ref, on_error); });
  }
  reap(true);
  std::lock_guard lock(mu_);
  if (fatal_) throw *fatal_;
}

}  // namespace sbx
