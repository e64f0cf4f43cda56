#include "agent/tcp_relay.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/json_number.hpp"

namespace sbx::agent {

namespace {

// Host data held for one connection's sockets before the host connection is
// no longer read (the same mark the agent uses for its output queues).
constexpr size_t kHighWater = 1 << 20;
constexpr size_t kReadChunk = 256 << 10;
constexpr int kHostSndBuf = 1 << 20;

std::string refused_message(uint16_t port) {
  return "nothing listens on 127.0.0.1:" + std::to_string(port) + " in the sandbox";
}

}  // namespace

void TcpRelay::open(int conn_fd, uint32_t channel, const nlohmann::json& req) {
  int port = number_field(req, "port", 0);
  if (port < 1 || port > 65535) throw Error(Errc::invalid_argument, "port " + std::to_string(port) + " is not 1-65535");
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s) throw sys_error("cannot make a TCP socket in the sandbox", errno);
  int one = 1;
  // Each frame's bytes go out at once: an interactive protocol must not wait for Nagle.
  ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = ::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (rc != 0 && errno == ECONNREFUSED) throw Error(Errc::unavailable, refused_message(static_cast<uint16_t>(port)));
  if (rc != 0 && errno != EINPROGRESS)
    throw sys_error("cannot connect to 127.0.0.1:" + std::to_string(port) + " in the sandbox", errno);
  // A deeper queue to the host lets a bulk transfer run longer between wake-ups (capped by
  // net.core.wmem_max; not a socket, as virtio-serial is not: nothing changes).
  int sndbuf = kHostSndBuf;
  ::setsockopt(conn_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  int fd = s.get();
  Link l;
  l.conn_fd = conn_fd;
  l.channel = channel;
  l.port = static_cast<uint16_t>(port);
  l.pass = req.value("pass", false);
  l.sock = std::move(s);
  auto [it, _] = links_.emplace(fd, std::move(l));
  by_channel_[{conn_fd, channel}] = fd;
  if (rc == 0) connected(it->second);
}

void TcpRelay::connected(Link& l) {
  l.connecting = false;
  // The host shares this kernel: it takes the socket and moves the bytes itself,
  // one relay and two copies fewer. Nothing of ours stays with the connection.
  if (l.pass && l.to_sock.empty() && !l.host_ended && hooks_.pass_socket &&
      hooks_.pass_socket(l.conn_fd, proto::encode_json(proto::Type::ok, l.channel, {{"passed", true}}), l.sock.get())) {
    close(l.sock.get());
    return;
  }
  hooks_.send(l.conn_fd, proto::encode_json(proto::Type::ok, l.channel, nlohmann::json::object()), {});
  write_sock(l);  // what the host sent before the answer
}

void TcpRelay::frame(int conn_fd, const proto::Frame& f) {
  auto at = by_channel_.find({conn_fd, f.channel});
  if (at == by_channel_.end()) return;
  int fd = at->second;
  Link& l = links_.at(fd);
  switch (f.type) {
    case proto::Type::data:
      if (l.host_ended) return;  // nothing may follow the host's end
      l.to_sock += f.payload;
      if (!l.connecting) write_sock(l);
      return;
    case proto::Type::end:
      l.host_ended = true;
      if (!l.connecting) write_sock(l);
      return;
    case proto::Type::error: close(fd); return;  // the host gave up: the server sees the connection close
    case proto::Type::signal: {
      int sig = number_field(f.json(), "signal", 0);
      if (sig == SIGSTOP) l.paused = true;
      else if (sig == SIGCONT) l.paused = false;
      return;
    }
    default:
      close(fd);
      throw Error(Errc::conflict, "channel " + std::to_string(f.channel) + " carries a TCP connection");
  }
}

void TcpRelay::fail(Link& l, const std::string& message) {
  hooks_.send(l.conn_fd, proto::encode_error(l.channel, code_name(Errc::unavailable), 0, message), {});
  close(l.sock.get());
}

void TcpRelay::close(int sock_fd) {
  auto it = links_.find(sock_fd);
  if (it == links_.end()) return;
  by_channel_.erase({it->second.conn_fd, it->second.channel});
  polled_.erase(sock_fd);
  links_.erase(it);
}

void TcpRelay::maybe_done(int sock_fd) {
  auto it = links_.find(sock_fd);
  // Both directions ended (each side saw the other's end): nothing more to say.
  if (it != links_.end() && it->second.shut_wr && it->second.sock_eof) close(sock_fd);
}

void TcpRelay::write_sock(Link& l) {
  while (l.off < l.to_sock.size()) {
    ssize_t n = ::send(l.sock.get(), l.to_sock.data() + l.off, l.to_sock.size() - l.off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      l.off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;  // poll says when there is room
    return fail(l, "the connection to 127.0.0.1:" + std::to_string(l.port) + " in the sandbox broke: " + std::strerror(errno));
  }
  if (l.off == l.to_sock.size()) {
    l.to_sock.clear();
    l.off = 0;
  } else if (l.off > kHighWater) {
    l.to_sock.erase(0, l.off);
    l.off = 0;
  }
  if (l.host_ended && l.to_sock.empty() && !l.shut_wr) {
    ::shutdown(l.sock.get(), SHUT_WR);
    l.shut_wr = true;
    maybe_done(l.sock.get());
  }
}

ssize_t TcpRelay::splice_sock(Link& l) {
  if (l.no_splice || !hooks_.splice) return -2;
  ssize_t n = hooks_.splice(l.conn_fd, l.channel, l.sock.get());
  if (n >= 0 || (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)) return n;
  l.no_splice = true;  // gVisor or an older kernel: nothing moved, read instead
  return -2;
}

void TcpRelay::read_sock(Link& l) {
  // Big reads: a bulk transfer costs a syscall and a frame per quarter megabyte, not per 64 KiB.
  static char buf[kReadChunk];
  int fd = l.sock.get();
  // Stop at the host's high-water mark; the rest waits in the socket (the server then blocks, as over TCP).
  while (!hooks_.congested(l.conn_fd)) {
    // The bulk path: socket -> pipe -> host stream, the bytes never copied by the agent.
    ssize_t n = splice_sock(l);
    if (n == -2) {
      n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        char head[proto::kHeaderSize];
        proto::put_header(head, proto::Type::data, l.channel, static_cast<size_t>(n));
        hooks_.send(l.conn_fd, std::string_view(head, sizeof head), std::string_view(buf, static_cast<size_t>(n)));
      }
    }
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0) return fail(l, "the connection to 127.0.0.1:" + std::to_string(l.port) + " in the sandbox broke: " + std::strerror(errno));
    l.sock_eof = true;
    hooks_.send(l.conn_fd, proto::encode(proto::Type::end, l.channel), {});
    return maybe_done(fd);
  }
}

void TcpRelay::add_polls(std::vector<pollfd>& out) {
  polled_.clear();
  for (auto& [fd, l] : links_) {
    short ev = 0;
    if (l.connecting) ev = POLLOUT;
    else {
      if (!l.sock_eof && !l.paused && !hooks_.congested(l.conn_fd)) ev |= POLLIN;
      if (l.off < l.to_sock.size()) ev |= POLLOUT;
    }
    // A socket waiting for nothing is left out: one whose peer hung up would report POLLHUP on every round.
    if (!ev) continue;
    out.push_back({fd, ev, 0});
    polled_.insert(fd);
  }
}

void TcpRelay::ready(int sock_fd, short revents) {
  // Only a socket of this round: one opened meanwhile may have reused the number.
  if (!polled_.count(sock_fd)) return;
  Link& l = links_.at(sock_fd);
  if (l.connecting) {
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(sock_fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == ECONNREFUSED) return fail(l, refused_message(l.port));
    if (err) return fail(l, "cannot connect to 127.0.0.1:" + std::to_string(l.port) + " in the sandbox: " + std::strerror(err));
    return connected(l);
  }
  if (revents & POLLOUT) write_sock(l);
  if (!links_.count(sock_fd)) return;
  if (revents & (POLLIN | POLLHUP | POLLERR)) read_sock(l);
}

bool TcpRelay::holds_input(int conn_fd) const {
  size_t held = 0;
  for (auto& [fd, l] : links_)
    if (l.conn_fd == conn_fd) held += l.to_sock.size() - l.off;
  return held >= kHighWater;
}

void TcpRelay::drop_conn(int conn_fd) {
  for (auto it = links_.begin(); it != links_.end();) {
    if (it->second.conn_fd != conn_fd) {
      ++it;
      continue;
    }
    by_channel_.erase({conn_fd, it->second.channel});
    polled_.erase(it->first);
    it = links_.erase(it);
  }
}

}  // namespace sbx::agent
