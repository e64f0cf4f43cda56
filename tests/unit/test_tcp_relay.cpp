// The agent's TCP relay (agent/tcp_relay.hpp) against real loopback sockets
// in this process, driven the way the agent's poll loop drives it.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "agent/tcp_relay.hpp"
#include "core/error.hpp"
#include "core/fd.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Fd;
using sbx::agent::TcpRelay;
using sbx_test::loopback_listener;
namespace proto = sbx::proto;

namespace {

// The host's side: the frames the relay sent, per channel, and whether its queue counts as full.
struct Host {
  std::vector<proto::Frame> frames;
  bool congested = false;
  bool takes_sockets = false;  // the pass_socket hook succeeds (a Unix stream to a host sharing the kernel)
  Fd passed;
  TcpRelay relay{{[this](int, std::string_view head, std::string_view body) {
                    proto::Decoder d;
                    d.feed(head.data(), head.size());
                    d.feed(body.data(), body.size());
                    while (auto f = d.pop()) frames.push_back(*f);
                  },
                  [this](int) { return congested; },
                  {},
                  [this](int, std::string_view frame, int sock) {
                    if (!takes_sockets) return false;
                    proto::Decoder d;
                    d.feed(frame.data(), frame.size());
                    while (auto f = d.pop()) frames.push_back(*f);
                    passed.reset(::dup(sock));
                    return true;
                  }}};
  // One round of the agent's loop (bounded wait).
  void round(int timeout_ms = 1000) {
    std::vector<pollfd> p;
    relay.add_polls(p);
    if (p.empty()) return;
    REQUIRE(::poll(p.data(), p.size(), timeout_ms) >= 0);
    for (auto& x : p)
      if (x.revents) relay.ready(x.fd, x.revents);
  }
  bool has(proto::Type t) const {
    for (auto& f : frames)
      if (f.type == t) return true;
    return false;
  }
  std::string data() const {
    std::string out;
    for (auto& f : frames)
      if (f.type == proto::Type::data) out += f.payload;
    return out;
  }
};

proto::Frame frame(proto::Type t, uint32_t ch, std::string payload = {}) { return {t, ch, std::move(payload)}; }

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace

TEST_CASE("tcp relay: data both ways, each end passed on, then the channel is done") {
  uint16_t port = 0;
  Fd l = loopback_listener(port);
  Host h;
  h.relay.open(3, 7, {{"port", port}});
  for (int i = 0; i < 20 && !h.has(proto::Type::ok); ++i) h.round();
  REQUIRE(h.has(proto::Type::ok));
  CHECK(h.relay.owns(3, 7));
  CHECK_FALSE(h.relay.owns(4, 7));
  Fd server(::accept(l.get(), nullptr, nullptr));
  REQUIRE(server);
  // Host -> server, then the host's end arrives as the server's EOF.
  h.relay.frame(3, frame(proto::Type::data, 7, "ping"));
  h.relay.frame(3, frame(proto::Type::end, 7));
  CHECK(read_all(server.get()) == "ping");
  // Server -> host, then its EOF is the host's end, and the link is gone.
  REQUIRE(::write(server.get(), "pong", 4) == 4);
  ::shutdown(server.get(), SHUT_WR);
  for (int i = 0; i < 20 && !h.has(proto::Type::end); ++i) h.round();
  CHECK(h.data() == "pong");
  CHECK(h.has(proto::Type::end));
  CHECK(h.relay.open_count() == 0);
}

TEST_CASE("tcp relay: asked to pass, the connected socket goes to the host and nothing stays") {
  uint16_t port = 0;
  Fd l = loopback_listener(port);
  for (bool takes : {true, false}) {
    Host h;
    h.takes_sockets = takes;
    h.relay.open(3, 9, {{"port", port}, {"pass", true}});
    for (int i = 0; i < 20 && !h.has(proto::Type::ok); ++i) h.round();
    REQUIRE(h.has(proto::Type::ok));
    Fd server(::accept(l.get(), nullptr, nullptr));
    REQUIRE(server);
    if (takes) {
      // The host has the socket and the answer says so; the relay keeps nothing of it.
      CHECK(h.frames.back().json().value("passed", false));
      CHECK(h.relay.open_count() == 0);
      REQUIRE(h.passed);
      REQUIRE(::write(h.passed.get(), "direct", 6) == 6);
      h.passed.reset();
      CHECK(read_all(server.get()) == "direct");
    } else {
      // The hook could not pass it (a micro-VM's serial line): relayed as usual.
      CHECK_FALSE(h.frames.back().json().value("passed", false));
      CHECK(h.relay.open_count() == 1);
      h.relay.frame(3, frame(proto::Type::data, 9, "relayed"));
      h.relay.frame(3, frame(proto::Type::end, 9));
      CHECK(read_all(server.get()) == "relayed");
    }
  }
}

TEST_CASE("tcp relay: nothing listening is an error that names the port") {
  uint16_t port = 0;
  { Fd l = loopback_listener(port); }  // closed again: the port is free
  Host h;
  std::string message;
  try {
    h.relay.open(3, 1, {{"port", port}});
    for (int i = 0; i < 20 && h.frames.empty(); ++i) h.round();
    REQUIRE(h.frames.size() == 1);
    CHECK(h.frames[0].type == proto::Type::error);
    message = h.frames[0].json().value("message", "");
  } catch (const sbx::Error& e) {
    message = e.what();  // refused at once (Linux loopback)
  }
  CHECK(message == "nothing listens on 127.0.0.1:" + std::to_string(port) + " in the sandbox");
  CHECK(h.relay.open_count() == 0);
  CHECK_THROWS_AS(h.relay.open(3, 2, {{"port", 0}}), sbx::Error);
}

TEST_CASE("tcp relay: a congested host or a pause stops reading; held host data stops the host being read") {
  uint16_t port = 0;
  Fd l = loopback_listener(port);
  Host h;
  h.relay.open(3, 1, {{"port", port}});
  for (int i = 0; i < 20 && !h.has(proto::Type::ok); ++i) h.round();
  Fd server(::accept(l.get(), nullptr, nullptr));
  REQUIRE(::write(server.get(), "x", 1) == 1);
  std::vector<pollfd> p;
  h.congested = true;
  h.relay.add_polls(p);
  CHECK(p.empty());  // nothing to wait for while the host's queue is full
  h.congested = false;
  h.relay.frame(3, frame(proto::Type::signal, 1, R"({"signal": 19})"));  // SIGSTOP
  p.clear();
  h.relay.add_polls(p);
  CHECK(p.empty());
  h.relay.frame(3, frame(proto::Type::signal, 1, R"({"signal": 18})"));  // SIGCONT
  for (int i = 0; i < 20 && h.data().empty(); ++i) h.round();
  CHECK(h.data() == "x");
  // The server does not read: host data piles up until the host is no longer read.
  std::string mb(1 << 20, 'y');
  for (int i = 0; i < 64 && !h.relay.holds_input(3); ++i) h.relay.frame(3, frame(proto::Type::data, 1, mb));
  CHECK(h.relay.holds_input(3));
  CHECK_FALSE(h.relay.holds_input(4));
  // The host vanishes: its connections close (the server sees EOF after the bytes that went through).
  h.relay.drop_conn(3);
  CHECK(h.relay.open_count() == 0);
  CHECK_FALSE(h.relay.owns(3, 1));
}
