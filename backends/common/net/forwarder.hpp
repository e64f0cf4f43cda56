// The DNS forwarder of network jails whose allowlist names domains.
//
// One host-wide detached process (`sbx __dns-forwarder`), because a jail
// outlives whoever made it (a CLI-only `sbx create` exits; `sbx serve` may
// restart). It listens on kAddr:53/udp; the filter DNATs such a jail's DNS
// (to its gateway) there, keeping the sandbox's address as the source, by
// which the forwarder finds the jail's lease (run_dir()/leases/<id>: its
// names, its upstream). It answers only those names and the CNAME chains
// they lead to (REFUSED otherwise), asks the jail's upstream, and before
// replying opens each A answer of the chain in the jail's nftables set dyn4
// for the answer's TTL (filter::open_address). So a changed answer opens
// the new address and the old one closes when its TTL ends, and an address
// no allowed name resolved to is never open.
//
// Fails closed: when it is down, the DNAT'ed queries meet a closed port,
// nothing resolves and nothing new opens. It holds run_dir()/dns-forwarder.lock
// while it lives (that lock, not the pid file, says whether it runs). Started
// on demand by net::setup, stopped when the last jail with names goes,
// restarted (or stopped) by reconcile(), which `sbx gc` calls. Host-wide, in
// run_dir() and not in a state root: one forwarder serves the jails of every
// state root, as the one filter table does.
#pragma once

#include <cstdint>
#include <string>

namespace sbx::net::forwarder {

/// 127.2.13.53: a loopback address no resolver of the host listens on.
inline constexpr uint32_t kAddr = 0x7F020D35;
inline constexpr const char* kSubcommand = "__dns-forwarder";  // cli/dns_forwarder.hpp

/// Runs the forwarder in this process until killed (the internal subcommand).
/// Returns 0 when another one holds the lock for 3 s (it runs, or is slow to go).
int serve();
/// Whether a forwarder holds the lock now.
bool running();
/// Starts one (detached, in its own session) unless one runs, and waits until it answers. Throws unavailable.
void ensure_running();
/// Stops the running one, if any.
void stop();
/// What gc should do about it: "dns-forwarder restart" (a jail names a
/// domain and it is dead), "dns-forwarder stop" (it runs, none does), or "".
std::string needs_reconcile();
/// Does what needs_reconcile() said (the stop only if still no jail names a domain).
void reconcile(const std::string& what);

}  // namespace sbx::net::forwarder
