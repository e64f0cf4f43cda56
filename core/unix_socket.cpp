#include "core/unix_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace sbx {

namespace {
sockaddr_un address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path)
    throw Error(Errc::invalid_argument, "path too long for a unix socket: " + path)
        .set_hint("use a shorter --state-dir");
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  return addr;
}
}  // namespace

Fd connect_unix(const std::string& path, const std::string& peer) {
  sockaddr_un addr = address(path);
  Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) throw sys_error("socket", errno);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw sys_error("cannot reach " + peer + " at " + path, errno);
  return s;
}

Fd listen_unix(const std::string& path) {
  sockaddr_un addr = address(path);
  Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) throw sys_error("socket", errno);
  ::unlink(path.c_str());  // a stale socket of an earlier run would make bind fail
  // No umask games here: the umask is process-wide, and sbx serve creates
  // sandboxes from several threads. A single-threaded caller may narrow the
  // umask around this call to close the moment before the chmod.
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw sys_error("cannot bind " + path, errno);
  if (::chmod(path.c_str(), 0600) != 0) throw sys_error("cannot chmod " + path, errno);
  if (::listen(s.get(), 128) != 0) throw sys_error("cannot listen on " + path, errno);
  return s;
}

void send_all(int sock, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(sock, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw sys_error("write failed", errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace sbx
