// The host-side filter of network jails: one nftables table (inet sbx_jail)
// whose chains match every jail's host interface by the name prefix "sbx",
// and per-jail set elements (its DNS upstream, its allowlist) keyed by that
// interface name. Filtering on the host side works for every driver alike:
// gVisor's netstack writes through packet sockets, which a filter inside
// the sandbox's namespace would never see, and a VM's tap is host-side too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/netaddr.hpp"

namespace sbx::net::filter {

inline constexpr const char* kTable = "sbx_jail";
inline constexpr const char* kIfPrefix = "sbx";

/// What the filter knows of one jail.
struct JailRules {
  std::string ifname;          ///< host-side interface (veth or tap)
  uint32_t dns_upstream = 0;   ///< the resolver the jail's DNS is answered by
  bool restricted = false;     ///< an allowlist applies
  std::vector<Cidr4> allow;    ///< the allowlist's networks (its names open addresses in dyn4)
  uint32_t dns_via = 0;        ///< where its DNS (to its gateway, port 53) is sent; 0 = dns_upstream
};

/// One address an allowed name resolved to, open for a jail until the answer's TTL ends.
struct Opening {
  std::string ifname;
  uint32_t addr = 0;
  uint32_t seconds = 0;
};

/// The nft script that creates the table with its sets and chains.
std::string table_script();
/// The nft commands that add (or delete) one jail's elements.
std::string jail_script(const JailRules& j, bool add);
/// Drops networks contained in another one (nft refuses overlapping intervals).
std::vector<Cidr4> merge(std::vector<Cidr4> nets);

/// Runs an nft script through libnftables; throws with nft's own message.
/// dry_run: the kernel checks it but nothing changes.
void run(const std::string& script, const char* what, bool dry_run = false);
/// Whether the table exists.
bool table_exists();
/// Adds a jail's elements, creating the table first when it is missing.
/// The caller holds the host-wide jail lock.
void add_jail(const JailRules& j);
/// Deletes what is left of a jail's elements (idempotent).
void remove_jail(const JailRules& j);
/// Opens (or keeps open for `seconds` from now) an address for a jail's new connections.
void open_address(const Opening& o);
/// The addresses open for ifname in dyn4 now.
std::vector<uint32_t> open_addresses(const std::string& ifname);
/// Closes every address open for ifname (idempotent).
void close_addresses(const std::string& ifname);
/// Deletes the whole table (when no jail remains).
void delete_table();

}  // namespace sbx::net::filter
