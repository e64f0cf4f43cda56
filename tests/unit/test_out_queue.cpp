// The agent's output queue (agent/out_queue.hpp) over a real unix socket pair, with a
// real loopback TCP connection spliced into it: a data frame left half-sent (its header
// out, its payload partly still in the pipe) and frames queued behind it arrive whole
// and in order.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <string>
#include <vector>

#include "agent/out_queue.hpp"
#include "core/fd.hpp"
#include "core/protocol.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Fd;
using sbx::agent::OutQueue;
using sbx_test::loopback_listener;
namespace proto = sbx::proto;

namespace {

// A connected loopback TCP pair: {the writer, the reader (non-blocking)}.
std::pair<Fd, Fd> tcp_pair() {
  uint16_t port = 0;
  Fd l = loopback_listener(port);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Fd w(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(w.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  Fd r(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  REQUIRE(r);
  return {std::move(w), std::move(r)};
}

// Reads what the stream has now into the decoder; false once nothing came.
bool take_some(int fd, proto::Decoder& d, size_t at_most) {
  std::vector<char> buf(at_most);
  ssize_t n = ::read(fd, buf.data(), buf.size());
  if (n <= 0) return false;
  d.feed(buf.data(), static_cast<size_t>(n));
  return true;
}

}  // namespace

TEST_CASE("out queue: a spliced frame left half-sent, and what was queued behind it, arrive whole and in order") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
  Fd stream(sv[0]), host(sv[1]);
  int small = 4096;  // the stream takes little at a time: the payload waits in the pipe
  ::setsockopt(stream.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  auto [server, sock] = tcp_pair();
  std::string sent(300 << 10, '\0');
  std::mt19937 rng(7);
  for (auto& c : sent) c = static_cast<char>(rng());
  REQUIRE(::write(server.get(), sent.data(), sent.size()) == static_cast<ssize_t>(sent.size()));

  OutQueue q;
  REQUIRE(q.can_splice());
  bool broke = false, left_half_sent = false;
  proto::Decoder d;
  std::vector<proto::Frame> frames;
  size_t spliced = 0;
  while (spliced < sent.size()) {
    if (!q.pending()) {
      ssize_t n = q.splice_frame(stream.get(), sock.get(), 5, broke);
      if (n > 0) {
        spliced += static_cast<size_t>(n);
        if (q.congested()) {
          left_half_sent = true;
          // Room in the stream, and a frame queued behind the one in the pipe: it must not overtake it.
          while (take_some(host.get(), d, 65536)) {
          }
          q.send(stream.get(), proto::encode(proto::Type::stdout_data, 6, "after " + std::to_string(spliced)), {}, broke);
        }
      }
    }
    take_some(host.get(), d, 1000 + rng() % 60000);
    q.flush(stream.get(), broke);
    REQUIRE_FALSE(broke);
  }
  while (q.pending()) {
    take_some(host.get(), d, 65536);
    q.flush(stream.get(), broke);
  }
  while (take_some(host.get(), d, 65536)) {
  }
  while (auto f = d.pop()) frames.push_back(*f);
  CHECK(left_half_sent);
  std::string got;
  size_t data_so_far = 0;
  for (auto& f : frames) {
    if (f.type == proto::Type::data) {
      CHECK(f.channel == 5);
      got += f.payload;
      data_so_far += f.payload.size();
    } else {
      REQUIRE(f.type == proto::Type::stdout_data);
      // Each note says how much data was spliced before it was queued: all of it came first.
      CHECK(f.payload == "after " + std::to_string(data_so_far));
    }
  }
  CHECK(got == sent);
}

TEST_CASE("out queue: a source that cannot be spliced says EINVAL and queues nothing") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
  Fd stream(sv[0]), host(sv[1]);
  Fd ev(::eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC));
  OutQueue q;
  bool broke = false;
  errno = 0;
  CHECK(q.splice_frame(stream.get(), ev.get(), 1, broke) == -1);
  CHECK(errno == EINVAL);
  CHECK_FALSE(broke);
  CHECK(q.pending() == 0);
  CHECK_FALSE(q.congested());
  // The queue still sends as bytes.
  q.send(stream.get(), proto::encode(proto::Type::end, 1), {}, broke);
  char buf[64];
  CHECK(::read(host.get(), buf, sizeof buf) == static_cast<ssize_t>(proto::kHeaderSize));
}
