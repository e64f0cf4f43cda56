// The port proxy's reading of an answer from a server inside a sandbox
// (server/http_relay.hpp, as api_ports.cpp uses it; the fleet proxy's
// keep-alive too): the input is what that server sends, arriving over a socket
// in pieces of a chosen size. read_head takes the status line and headers (1xx
// skipped, a 101 kept when the client asked for an upgrade); then either
// response_from makes the answer, whose body the client reads to its end as
// the HTTP layer does, or switched_to's relay splices the upgraded connection.
// Only sbx::Error escapes; a body never holds more bytes than the server sent,
// one with a Content-Length that ends cleanly has exactly that many, and what
// follows a 101's head reaches the client untouched.
//
// Input: one byte of options, then the server's bytes.
//   bit 0: the client asked for a WebSocket upgrade
//   bit 1: the method is HEAD (else GET)
//   bit 2: the connection may carry another exchange (response_from's reuse)
//   bits 3-5: the pieces the server's bytes arrive in: all at once, 1, 2, 3, 5, 8, 64, 1000 bytes
//   bits 6-7: how much the client takes per read: 32 KiB, 1, 7, 4096 bytes
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "server/api.hpp"
#include "server/http_relay.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace relay = sbx::server::relay;

namespace {

// The server in the sandbox: sends its bytes in pieces, each one read of a
// SOCK_SEQPACKET socket, then its EOF. What does not fit in the socket at once
// goes from a thread of its own, as the relay reads.
class Server {
 public:
  Server(sbx::Fd sock, std::string_view bytes, size_t piece) : sock_(std::move(sock)), bytes_(bytes), piece_(piece) {
    if (!send(MSG_DONTWAIT)) thread_ = std::thread([this] { send(0); });
  }
  /// Once the relay let go of its end (a send blocked on it fails).
  ~Server() {
    if (thread_.joinable()) thread_.join();
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  // False when the socket is full.
  bool send(int flags) {
    while (at_ < bytes_.size()) {
      size_t n = std::min(piece_, bytes_.size() - at_);
      ssize_t w = ::send(sock_.get(), bytes_.data() + at_, n, flags | MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN && (flags & MSG_DONTWAIT)) return false;
      if (w < 0) return true;  // the relay is gone
      at_ += static_cast<size_t>(w);
    }
    ::shutdown(sock_.get(), SHUT_WR);
    return true;
  }

  sbx::Fd sock_;
  std::string_view bytes_;
  size_t piece_;
  size_t at_ = 0;
  std::thread thread_;
};

sbx::Error fail(sbx::Errc code, const std::string& what) {
  return sbx::Error(code == sbx::Errc::timeout ? code : sbx::Errc::protocol, "the server on port 8080 " + what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A socket's buffer holds what the upgraded client is sent before it reads it.
  if (size < 1 || size > 64 * 1024) return 0;
  const uint8_t options = data[0];
  const std::string_view sent = sbx_fuzz::as_view(data + 1, size - 1);
  const bool upgrade = options & 1;
  const std::string method = options & 2 ? "HEAD" : "GET";
  const bool keep_alive = options & 4;
  const size_t pieces[] = {64 * 1024, 1, 2, 3, 5, 8, 64, 1000};
  const size_t reads[] = {32 * 1024, 1, 7, 4096};
  const size_t piece = pieces[(options >> 3) & 7], read_size = reads[options >> 6];

  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) std::abort();
  Server server(sbx::Fd(sp[1]), sent, piece);
  sbx::Fd sock(sp[0]);  // the relay's end: closed before the server's thread is joined
  sbx::Fd reused;
  int reuses = 0;

  std::string buf, head;
  try {
    // As Api::port_proxy, after it sent the request.
    head = relay::read_head(sock.get(), buf, 5'000, -1, upgrade, fail);
  } catch (const sbx::Error& e) {
    if (e.code() == sbx::Errc::timeout) std::abort();  // the server's EOF came: nothing to wait for
    return 0;
  }
  if (upgrade && relay::is_switching(head)) {
    sbx::server::HttpResponse r = relay::switched_to(std::move(sock), head, std::move(buf));
    if (r.status != 101 || !r.upgraded) std::abort();
    int cp[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, cp) != 0) std::abort();
    sbx::Fd client(cp[0]), manager(cp[1]);
    ::shutdown(client.get(), SHUT_WR);  // the client sends nothing past its request
    r.upgraded(manager.get(), "client bytes past the request");
    r.upgraded = nullptr;
    manager.reset();
    std::string got;
    char b[4096];
    for (ssize_t n; (n = ::read(client.get(), b, sizeof b)) > 0;) got.append(b, static_cast<size_t>(n));
    // Everything after the 101's head, untouched.
    size_t at = sent.size() - std::min(got.size(), sent.size());
    if (got.size() > sent.size() || sent.substr(at) != got || at < 4 || sent.substr(at - 4, 4) != "\r\n\r\n")
      std::abort();
    return 0;
  }
  sbx::server::HttpResponse r;
  try {
    r = relay::response_from(std::move(sock), head, std::move(buf), method, {}, fail,
                             keep_alive ? relay::Reuse([&](sbx::Fd fd) {
                               reused = std::move(fd);
                               ++reuses;
                             })
                                        : relay::Reuse());
  } catch (const sbx::Error&) {
    return 0;
  }
  if (r.status < 200 || r.status > 599 || r.body.size() > sent.size()) std::abort();
  if (r.stream) {
    // As the HTTP layer takes a streamed body: reads until the end (0) or a failure (-1).
    std::string out(read_size, '\0');
    size_t total = 0;
    ssize_t n;
    while ((n = r.stream->read(out.data(), read_size)) > 0) {
      if (static_cast<size_t>(n) > read_size) std::abort();
      total += static_cast<size_t>(n);
      if (total > sent.size()) std::abort();  // bytes the server never sent
    }
    if (n != 0 && n != -1) std::abort();
    if (n == 0 && r.stream_size >= 0 && total != static_cast<uint64_t>(r.stream_size)) std::abort();
    r.stream.reset();
  }
  if (reuses > 1) std::abort();
  return 0;
}
