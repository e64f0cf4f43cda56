// WebSocket connections (RFC 6455) for the manager's interactive routes, both
// ends: the server side over a socket libmicrohttpd has already answered
// `101 Switching Protocols` on, and the client side (the remote driver) over a
// connected socket. Boost.Beast does the framing; it is heavy, so it lives in
// websocket.cpp alone and nothing here names it.
//
// One thread runs a connection (run()); any thread may send or close. Sends
// queue and block while a slow peer has more than a megabyte waiting, so a
// fast command is slowed down rather than filling the manager's memory.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/fd.hpp"

namespace sbx::ws {

enum class Kind { text, binary };

struct Message {
  Kind kind = Kind::text;
  std::string data;
};

/// Close codes this project sends.
inline constexpr uint16_t kNormalClose = 1000;
inline constexpr uint16_t kGoingAway = 1001;    ///< the manager is shutting down
inline constexpr uint16_t kPolicy = 1008;       ///< a bad first message, a refused request
inline constexpr uint16_t kServerError = 1011;
inline constexpr uint16_t kAbnormal = 1006;     ///< no close frame: the peer vanished

/// How a connection ended.
struct Closed {
  uint16_t code = kAbnormal;  ///< the peer's close code, or kAbnormal when the connection dropped
  std::string reason;
  bool by_peer = false;       ///< the peer sent the first close frame (or vanished)
};

/// A refused client handshake: the server's HTTP answer.
struct Refusal {
  int status = 0;
  std::string body;
};

class Connection {
 public:
  /// Called in run()'s thread for each message; returning false pauses reading until resume().
  using OnMessage = std::function<bool(Message&)>;

  /// The server side of a socket whose upgrade libmicrohttpd already answered (with
  /// accept_key(client_key)): `fd` stays its owner's (never closed here, only shut
  /// down); `extra_in` are bytes the client sent after its request, read by libmicrohttpd.
  static std::unique_ptr<Connection> accept_upgraded(int fd, std::string_view client_key, std::string_view extra_in);
  /// The client side over a connected socket: sends the upgrade request for `target`
  /// with `headers`. nullptr (and `refusal` filled) when the server answers anything
  /// but 101; throws Error(protocol/unavailable) when the connection fails.
  static std::unique_ptr<Connection> connect(Fd fd, const std::string& host, const std::string& target,
                                             const std::vector<std::pair<std::string, std::string>>& headers,
                                             Refusal& refusal);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Reads messages until the connection closes; returns how it did.
  Closed run(const OnMessage& on_message);
  /// Queues a message (thread-safe); blocks while the queue is over a megabyte.
  /// False once the connection is closing or gone.
  bool send(Kind kind, std::string data);
  /// Sends a close frame once the queued messages are out (thread-safe); run()
  /// returns when the peer answers it, or 5 s later.
  void close(uint16_t code, std::string reason = {});
  /// Reading goes on after on_message returned false (thread-safe).
  void resume();
  /// Drops the connection at once, without a close frame (thread-safe).
  void abort();

  struct Impl;

 private:
  explicit Connection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Writes what a peer sends into an fd on a thread of its own, so a reader
/// that does not keep up (a command not reading its stdin, a server not
/// reading its socket) never stalls the connection, whose thread also carries
/// the other direction; past a megabyte queued, reading from the peer pauses
/// (Connection::resume once the fd's reader caught up).
class Feeder {
 public:
  /// at_eof runs on the feeder's thread once eof() was called and everything is written.
  Feeder(Connection& c, int fd, std::function<void()> at_eof);
  ~Feeder() { stop(); }
  Feeder(const Feeder&) = delete;
  Feeder& operator=(const Feeder&) = delete;

  /// Queues data; false when the peer should pause (return it from on_message).
  bool push(std::string data);
  /// No more data: at_eof runs once the queue is written.
  void eof();
  /// Drops what is still queued and joins the thread (the fd's reader must be gone or reading).
  void stop();
  /// Once the connection ended: when eof() came first (the peer finished cleanly and
  /// its close may overtake the last bytes here), writes what is queued; else stop().
  void finish();

 private:
  void loop();
  Connection& c_;
  int fd_;
  std::function<void()> at_eof_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  size_t bytes_ = 0;
  bool eof_ = false, stop_ = false, paused_ = false;
  std::atomic<bool> broken_{false};  ///< a write failed (the reader is gone): the rest is dropped
  std::thread thread_;
};

/// Relays bytes between c and a stream socket until both directions ended:
/// binary messages are the data, a text {"eof":true} ends one direction
/// (shutdown(SHUT_WR) on the socket; its EOF is sent the same way); then a
/// normal close. Returns when the connection is closed; the socket stays open.
void relay(Connection& c, int fd);

/// Sec-WebSocket-Accept for a client's Sec-WebSocket-Key.
std::string accept_key(std::string_view client_key);

}  // namespace sbx::ws
