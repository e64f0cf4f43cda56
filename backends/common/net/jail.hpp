// The network jail shared by every driver (`--network jail`).
//
// Each jail is a network namespace created by host root (so the sandbox's
// root, in a child user namespace, cannot change its addresses, routes or
// rules), bind-mounted under /run/sbx/netjail/netns/<id> so it outlives the
// creating process, joined to the host by a veth pair: "sbx<12 id chars>" on
// the host, "eth0" inside, a /30 of the configured pool between them. The
// host filters (filter.hpp), NATs out through its default route and forwards
// DNS to the gateway address to the upstream resolver.
//
// A micro-VM attaches differently: Attach::tap makes the host-side interface
// a persistent tap (same name, same address, same filter) and no namespace;
// the VM opens it by name (open_tap) and configures its guest with
// sandbox_addr/prefix, gateway host_addr, nameserver host_addr.
//
// Host-wide bookkeeping under /run/sbx/netjail (gone at reboot, like the
// namespaces themselves): leases/<id> (what to tear down), addrs/<a.b.c.d>
// (a symlink to the id: the atomic address claim), netns/<id>, and one lock.
// It survives restarts of sbx and its manager; gc finds leftovers via leases().
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/fd.hpp"
#include "core/netaddr.hpp"
#include "core/spec.hpp"

namespace sbx::net {

enum class Attach {
  netns,  ///< namespace + veth (subprocess, runsc)
  tap,    ///< host-side tap, no namespace (micro-VM)
};

struct JailRequest {
  std::string id;                  ///< the sandbox's id
  std::string state_dir;           ///< its state root (gc sweeps only its own)
  std::string driver;              ///< its driver (each driver reaps its own)
  Cidr4 pool{0x0AD50000, 16};      ///< where /30s come from (10.213.0.0/16)
  std::string dns;                 ///< upstream resolver; empty = the host's first
  std::vector<std::string> allow;  ///< normalised allowlist entries; empty = all public destinations
  Attach attach = Attach::netns;
};

struct Jail {
  std::string id;
  std::string ifname;        ///< host-side interface
  std::string netns;         ///< namespace file to join (empty for a tap)
  uint32_t host_addr = 0;    ///< gateway and DNS address as the sandbox sees it
  uint32_t sandbox_addr = 0;
  int prefix = 30;
  uint32_t dns_upstream = 0;

  /// The sandbox's /etc/resolv.conf.
  std::string resolv_conf() const;
};

/// The request for sandbox rec of `driver` under configuration cfg (pool, DNS, allowlist).
JailRequest request_for(const SandboxRecord& rec, const Config& cfg, const std::string& driver);

/// What `sbx ls --json` may show of a jail (driver_data.netjail): interface and addresses.
nlohmann::json describe(const Jail& jail);

/// Host-wide directory of the jails' bookkeeping.
std::string run_dir();
/// "sbx" + the id's 12 random characters: fits IFNAMSIZ and the filter's "sbx*".
std::string ifname_for(const std::string& id);
/// The i-th /30 of pool (host byte order network address).
uint32_t block_of(const Cidr4& pool, uint64_t i);

/// The first route of a /proc/net/route text that overlaps pool and is not a
/// jail's own (nor the default route), as "a.b.c.d/n dev IF"; empty when none.
std::string pool_clash(const Cidr4& pool, const std::string& proc_net_route);

/// Builds a jail. On failure leaves nothing behind and throws.
Jail setup(const JailRequest& req);
/// Removes everything of sandbox id's jail (filter elements, link, namespace,
/// address claim, lease; the table and ip_forward when it was the last).
/// Idempotent; a no-op for a sandbox that never had one.
void teardown(const std::string& id);
/// Ids that hold a jail of (state_dir, driver) but are not in live_ids.
std::vector<std::string> leftovers(const std::string& state_dir, const std::string& driver,
                                   const std::set<std::string>& live_ids);
/// What the DNS forwarder (forwarder.hpp) needs of a jail whose allowlist names domains.
struct NamePolicy {
  std::string id, ifname;
  uint32_t upstream = 0;
  std::vector<std::string> names;  ///< normalised (lower case, no trailing dot)
};
/// The policy of the jail whose sandbox has address `sandbox_addr`; nullopt when none has or it names no domain.
std::optional<NamePolicy> name_policy(uint32_t sandbox_addr);
/// Whether any jail on this host names a domain (and so needs the forwarder).
bool any_names();
/// Runs fn under the host-wide lock that setup and teardown hold.
void with_jails_locked(const std::function<void()>& fn);

/// Opens the tap of a Attach::tap jail for a VM monitor (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR).
Fd open_tap(const Jail& jail);

}  // namespace sbx::net
