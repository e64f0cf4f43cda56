#include "core/unix_socket.hpp"

#include <signal.h>
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

void block_sigpipe_in_this_thread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

ssize_t send_passing(int sock, std::string_view data, int pass, bool block) {
  iovec iov{const_cast<char*>(data.data()), data.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &pass, sizeof pass);
  ssize_t n;
  do n = ::sendmsg(sock, &msg, (block ? 0 : MSG_DONTWAIT) | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

bool read_exact_passing(int sock, char* buf, size_t n, Fd& passed) {
  size_t got = 0;
  while (got < n) {
    iovec iov{buf + got, n - got};
    // Room for a few: a peer that sends more than one must not leave any open here.
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw sys_error("read failed", errno);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (!passed) passed.reset(fd);
        else ::close(fd);
      }
    }
    if (r == 0) {
      if (got == 0) return false;
      throw Error(Errc::protocol, "unexpected end of stream");
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace sbx
