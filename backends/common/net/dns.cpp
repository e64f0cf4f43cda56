#include "backends/common/net/dns.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/netaddr.hpp"

namespace sbx::net::dns {

uint32_t first_nameserver(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    std::string key, value;
    l >> key >> value;
    if (key != "nameserver") continue;
    if (auto a = parse_ipv4(value)) return *a;
  }
  return 0;
}

uint32_t upstream(const std::string& configured) {
  if (!configured.empty()) {
    auto a = parse_ipv4(configured);
    if (!a) throw Error(Errc::invalid_argument, "network.dns '" + configured + "' is not an IPv4 address");
    return *a;
  }
  uint32_t a = first_nameserver(read_file_if_exists("/etc/resolv.conf").value_or(""));
  if (!a)
    throw Error(Errc::unavailable, "the host's /etc/resolv.conf names no IPv4 nameserver for the network jail")
        .set_hint("set network.dns in the config file (or SBX_NET_DNS) to a resolver's IPv4 address");
  return a;
}

int write_resolv_conf(const char* etc_dir, const char* text, unsigned long len) {
  int dfd = ::open(etc_dir, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0 && errno == ENOENT) {
    if (::mkdir(etc_dir, 0755) != 0) return errno;
    dfd = ::open(etc_dir, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (dfd < 0) return errno;
  if (::unlinkat(dfd, "resolv.conf", 0) != 0 && errno != ENOENT) {
    int e = errno;
    ::close(dfd);
    return e;
  }
  int fd = ::openat(dfd, "resolv.conf", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  int e = fd < 0 ? errno : 0;
  ::close(dfd);
  if (fd < 0) return e;
  while (len > 0) {
    ssize_t w = ::write(fd, text, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      e = errno ? errno : EIO;
      ::close(fd);
      return e;
    }
    text += w;
    len -= static_cast<unsigned long>(w);
  }
  ::close(fd);
  return 0;
}

}  // namespace sbx::net::dns
