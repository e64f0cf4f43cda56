// sbx __dns-forwarder: the network jails' DNS forwarder (backends/common/net/forwarder.hpp),
// an internal subcommand that sbx starts detached; not for users.
#pragma once

namespace sbx::cli {

inline constexpr const char* kDnsForwarder = "__dns-forwarder";
/// Runs the forwarder until killed; the process's exit status.
int run_dns_forwarder();

}  // namespace sbx::cli
