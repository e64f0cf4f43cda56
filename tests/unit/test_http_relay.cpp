// The port proxy's reading of a chunked answer from a server inside a sandbox
// (server/http_relay.hpp; found while writing tests/fuzz/fuzz_http_relay):
// the body's buffer dropped what was taken only when a read happened to end
// where a chunk's data did, so a server whose writes all end inside a chunk's
// size line made the manager keep the whole body in memory, however long.
#include <malloc.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <thread>

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"
#include "server/http_relay.hpp"

// Under ASan (build-asan) malloc is the sanitizer's: its count; else glibc's.
extern "C" size_t __sanitizer_get_current_allocated_bytes() __attribute__((weak));

namespace {

size_t allocated_bytes() {
  if (__sanitizer_get_current_allocated_bytes) return __sanitizer_get_current_allocated_bytes();
  struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}

}  // namespace

TEST_CASE("http_relay: a chunked body streams in bounded memory, whatever the server's writes", "[http_relay]") {
  namespace relay = sbx::server::relay;
  int sp[2];
  // Each read takes one write whole (SOCK_SEQPACKET): all of them end inside a size line.
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);
  sbx::Fd sock(sp[0]);
  const std::string data(100, 'x');
  const int kWrites = 2000, kChunksPerWrite = 100;  // 100 chunks of 100 bytes a write: 20 MB of body
  std::thread server([fd = sbx::Fd(sp[1]), &data] {
    try {
      sbx::write_all(fd.get(), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r");
      std::string piece;
      for (int i = 0; i < kChunksPerWrite; ++i) piece += "\n" + data + "\r\n64\r";  // ends inside a size line
      for (int i = 0; i < kWrites; ++i) sbx::write_all(fd.get(), piece);
      sbx::write_all(fd.get(), "\n" + data + "\r\n0\r\n\r\n");
    } catch (const sbx::Error&) {
    }
  });
  relay::Fail fail = [](sbx::Errc code, const std::string& what) { return sbx::Error(code, what); };
  std::string buf;
  std::string head = relay::read_head(sock.get(), buf, 10'000, -1, false, fail);
  sbx::server::HttpResponse r = relay::response_from(std::move(sock), head, std::move(buf), "GET", {}, fail);
  REQUIRE(r.stream);
  size_t before = allocated_bytes(), peak = before, total = 0;
  std::string out(32 * 1024, '\0');
  ssize_t n;
  for (int reads = 0; (n = r.stream->read(out.data(), out.size())) > 0; ++reads) {
    total += static_cast<size_t>(n);
    if (reads % 16 == 0) peak = std::max(peak, allocated_bytes());
  }
  server.join();
  CHECK(n == 0);
  CHECK(total == data.size() * (size_t{kWrites} * kChunksPerWrite + 1));
  // A read (64 KiB) and a partial line at most; it was the whole body (20 MB).
  CAPTURE(peak - before);
  CHECK(peak - before < 4u << 20);
}
