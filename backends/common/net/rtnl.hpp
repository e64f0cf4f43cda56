// The few rtnetlink requests a network jail needs (a veth pair with one end
// in another namespace, IPv4 addresses, link up, a default route, deleting a
// link), sent over libmnl sockets instead of spawning `ip` per step.
#pragma once

#include <cstdint>
#include <string>

#include "core/fd.hpp"

struct mnl_socket;

namespace sbx::net {

/// An rtnetlink socket bound to the network namespace it was opened in.
class Rtnl {
 public:
  /// Opens one in the calling thread's current network namespace.
  Rtnl();
  ~Rtnl();
  Rtnl(Rtnl&& o) noexcept;
  Rtnl& operator=(Rtnl&&) = delete;
  Rtnl(const Rtnl&) = delete;

  /// Index of interface `name` in this socket's namespace; 0 when there is none.
  unsigned index(const std::string& name) const;
  /// A veth pair: `name` here, `peer` created directly inside the namespace `peer_netns_fd`.
  void add_veth(const std::string& name, const std::string& peer, int peer_netns_fd);
  /// Adds a.b.c.d/prefix (host byte order) to interface ifindex.
  void add_addr4(unsigned ifindex, uint32_t addr, int prefix);
  /// Sets IFF_UP on interface ifindex.
  void set_up(unsigned ifindex);
  /// default via gw (host byte order), in the main table.
  void add_default_route4(uint32_t gw);
  /// Deletes link `name`; false when there was none (deleting a veth end deletes both).
  bool del_link(const std::string& name);

 private:
  void request(void* nlh, const char* what);
  mnl_socket* nl_ = nullptr;
  Fd ioctl_sock_;  ///< an AF_INET socket of the same namespace, for SIOCGIFINDEX
  uint32_t seq_ = 0;
};

}  // namespace sbx::net
