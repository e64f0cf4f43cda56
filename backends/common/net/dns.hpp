// DNS for network jails: which resolver the host uses (the jail's DNS is
// forwarded there, or to the forwarder of forwarder.hpp when its allowlist
// names domains), and writing a sandbox's /etc/resolv.conf.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sbx::net::dns {

/// The first IPv4 nameserver of resolv_conf_text (the host's /etc/resolv.conf); 0 when none.
uint32_t first_nameserver(const std::string& resolv_conf_text);
/// The configured upstream (`network.dns`), else the host's first IPv4 nameserver; throws unavailable when neither.
uint32_t upstream(const std::string& configured);

/// Replaces <etc_dir>/resolv.conf by `text` without following symlinks
/// (an image's resolv.conf may point anywhere on the host); creates etc_dir
/// when missing. Only raw system calls: safe between fork and exec.
/// Returns 0 or an errno value.
int write_resolv_conf(const char* etc_dir, const char* text, unsigned long len);

}  // namespace sbx::net::dns
