// The agent's side of `connect {port}` (core/protocol.hpp): TCP connections to
// 127.0.0.1:port inside the sandbox, each relayed over one channel of a host
// connection. Loopback exists in every sandbox's network namespace, also with
// --network none, so this needs no network configuration. Non-blocking, driven
// by the agent's one poll loop (agent/server.cpp).
#pragma once

#include <poll.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fd.hpp"
#include "core/protocol.hpp"

namespace sbx::agent {

/// What the relay needs of the agent's loop.
struct RelayHooks {
  /// Queues a frame for a host connection: its bytes are head then body (a data frame's
  /// header and payload, sent as they are without building the frame; or a whole frame and "").
  std::function<void(int conn_fd, std::string_view head, std::string_view body)> send;
  /// Whether that connection's queue is over the high-water mark (its sockets are not read then).
  std::function<bool(int conn_fd)> congested;
  /// Optional, when nothing waits for that connection: splices what the socket has into one
  /// data frame on the channel (OutQueue::splice_frame: bytes moved, 0 at EOF, -1 and errno).
  std::function<ssize_t(int conn_fd, uint32_t channel, int sock_fd)> splice;
  /// Optional: sends the whole frame on that connection with sock_fd passed along
  /// (SCM_RIGHTS), when nothing is queued before it; false when it cannot (not a
  /// Unix socket, or busy): the connection is then relayed as usual.
  std::function<bool(int conn_fd, std::string_view frame, int sock_fd)> pass_socket;
};

class TcpRelay {
 public:
  explicit TcpRelay(RelayHooks hooks) : hooks_(std::move(hooks)) {}

  /// A `connect {port}` request: starts a non-blocking connect; ok or error follows.
  void open(int conn_fd, uint32_t channel, const nlohmann::json& req);
  /// Whether frames on (conn_fd, channel) are this relay's (see frame()).
  bool owns(int conn_fd, uint32_t channel) const { return by_channel_.count({conn_fd, channel}) > 0; }
  /// A host frame on an owned channel: data, end (half-close), error (abort), or
  /// signal SIGSTOP / SIGCONT (the micro-VM relay's flow control: stop / resume reading the socket).
  void frame(int conn_fd, const proto::Frame& f);
  /// Appends the sockets that wait for something to `out`.
  void add_polls(std::vector<pollfd>& out);
  /// A socket add_polls gave was reported ready.
  void ready(int sock_fd, short revents);
  /// Whether the host connection should not be read for now: its connections
  /// hold more of its data than their sockets took (the host's TCP window, in effect).
  bool holds_input(int conn_fd) const;
  /// The host connection is gone: its TCP connections close.
  void drop_conn(int conn_fd);
  /// Connections open (for tests and diagnostics).
  size_t open_count() const { return links_.size(); }

 private:
  struct Link {
    int conn_fd = -1;
    uint32_t channel = 0;
    uint16_t port = 0;
    Fd sock;
    bool connecting = true;
    std::string to_sock;     // the host's data the socket has not taken yet
    size_t off = 0;
    bool host_ended = false; // the host sent end: shut the socket's write side once to_sock is out
    bool shut_wr = false;
    bool sock_eof = false;   // the socket's EOF was passed on as end
    bool paused = false;
    bool no_splice = false;  // the socket (or the host's stream) takes no splices: read it
    bool pass = false;       // the host asked for the socket itself (connect {pass: true})
  };
  void connected(Link& l);
  void read_sock(Link& l);
  ssize_t splice_sock(Link& l);
  void write_sock(Link& l);
  void fail(Link& l, const std::string& message);
  void close(int sock_fd);
  void maybe_done(int sock_fd);

  RelayHooks hooks_;
  std::map<int, Link> links_;                              // by socket
  std::map<std::pair<int, uint32_t>, int> by_channel_;     // (conn, channel) -> socket
  std::set<int> polled_;                                   // sockets add_polls gave this round
};

}  // namespace sbx::agent
