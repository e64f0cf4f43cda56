// Small helpers shared by the unit tests: a private temp directory, file
// writing/reading, and catching the sbx::Error a call must throw.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"
#include "tests/temp_dir.hpp"

namespace sbx_test {

/// Writes text to path (created or truncated) with the given mode.
inline void write_text(const std::string& path, const std::string& text, mode_t mode = 0644) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  REQUIRE(fd >= 0);
  sbx::write_all(fd, text);
  ::close(fd);
  REQUIRE(::chmod(path.c_str(), mode) == 0);  // not subject to the umask
}

/// The whole content of a host file.
inline std::string read_text(const std::string& path) { return sbx::read_file(path); }

/// The whole content readable from fd (from its current offset).
inline std::string read_fd(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n >= 0);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

/// Whether a path exists, without following a final symlink.
// A listening loopback TCP socket on a free port (set in port).
inline sbx::Fd loopback_listener(uint16_t& port) {
  sbx::Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(s.get(), 8) == 0);
  socklen_t len = sizeof a;
  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return s;
}

// A TCP connection to 127.0.0.1:port.
inline sbx::Fd loopback_connect(uint16_t port) {
  sbx::Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return s;
}

inline bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// Runs f, which must throw sbx::Error, and returns that error.
template <class F>
sbx::Error error_of(F&& f) {
  try {
    f();
  } catch (const sbx::Error& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("a non-sbx exception escaped: " << e.what());
  }
  FAIL("no exception was thrown");
  return sbx::Error(sbx::Errc::internal, "unreachable");
}

}  // namespace sbx_test
