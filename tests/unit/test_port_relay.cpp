// Host-side moving of a port's bytes (core/port_relay.hpp) and the descriptor
// passing it rests on for the subprocess driver (core/unix_socket.hpp), on
// real loopback TCP connections and Unix socket pairs in this process.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "core/fd.hpp"
#include "core/port_relay.hpp"
#include "core/unix_socket.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Fd;
using sbx_test::loopback_listener;

namespace {

// A connected pair of TCP loopback sockets: {ours, theirs}.
std::pair<Fd, Fd> tcp_pair() {
  uint16_t port = 0;
  Fd l = loopback_listener(port);
  Fd c = sbx_test::loopback_connect(port);
  Fd s(::accept(l.get(), nullptr, nullptr));
  REQUIRE(s);
  return {std::move(c), std::move(s)};
}

std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

void write_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    REQUIRE(n > 0);
    off += static_cast<size_t>(n);
  }
}

}  // namespace

TEST_CASE("splice_streams: both ways, each EOF passed on as a half-close, then it returns") {
  auto [client, a] = tcp_pair();
  auto [b, server] = tcp_pair();
  std::thread relay([&] { sbx::splice_streams(a.get(), b.get()); });
  std::string up(3 << 20, 'u'), down(5 << 20, 'd');
  std::thread sender([&] {
    write_all(client.get(), up);
    ::shutdown(client.get(), SHUT_WR);
  });
  CHECK(read_all(server.get()) == up);  // the client's EOF reached the server
  sender.join();
  // The server answers after the client's half-close: the other direction still flows.
  std::thread answer([&] {
    write_all(server.get(), down);
    ::shutdown(server.get(), SHUT_WR);
  });
  CHECK(read_all(client.get()) == down);
  answer.join();
  relay.join();
}

TEST_CASE("splice_streams: a side shut down both ways ends it though the other is idle") {
  // What sbx port-forward does to its connections when it stops: the server
  // says nothing and must not keep the relay (and Ctrl-C) waiting.
  auto [client, a] = tcp_pair();
  auto [b, server] = tcp_pair();
  std::thread relay([&] { sbx::splice_streams(a.get(), b.get()); });
  write_all(client.get(), "hello");
  char buf[5];
  REQUIRE(::read(server.get(), buf, sizeof buf) == 5);
  ::shutdown(a.get(), SHUT_RDWR);
  relay.join();
  CHECK(read_all(server.get()).empty());  // the server saw the connection end
}

TEST_CASE("splice_streams: a reset side ends it, and the other sees the end") {
  auto [client, a] = tcp_pair();
  auto [b, server] = tcp_pair();
  std::thread relay([&] { sbx::splice_streams(a.get(), b.get()); });
  linger lg{1, 0};  // close with RST
  ::setsockopt(server.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  server.reset();
  relay.join();
  CHECK(read_all(client.get()).empty());
}

TEST_CASE("descriptor passing: the socket arrives with the bytes, close-on-exec; nothing travels on a non-socket") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  Fd x(sv[0]), y(sv[1]);
  auto [tcp, peer] = tcp_pair();
  REQUIRE(sbx::send_passing(x.get(), "framehead", tcp.get()) == 9);
  Fd got;
  char buf[9];
  REQUIRE(sbx::read_exact_passing(y.get(), buf, sizeof buf, got));
  CHECK(std::string(buf, 9) == "framehead");
  REQUIRE(got);
  CHECK((::fcntl(got.get(), F_GETFD) & FD_CLOEXEC) != 0);
  struct stat st{};
  REQUIRE(::fstat(got.get(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  write_all(got.get(), "via");
  got.reset();
  tcp.reset();
  CHECK(read_all(peer.get()) == "via");
  // Not a socket: nothing can travel (what a micro-VM's serial line gives).
  Fd devnull(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  CHECK(sbx::send_passing(devnull.get(), "x", x.get()) < 0);
}
