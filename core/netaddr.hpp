// IPv4 prefixes and the entries of a sandbox's network allowlist. Lives in
// core because spec validation (normalize_spec) checks entries before any
// driver runs; the jail itself (backends/common/net) uses the same parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sbx {

/// An IPv4 network: address (host byte order, host bits zero) and prefix length.
struct Cidr4 {
  uint32_t addr = 0;
  int prefix = 32;

  bool contains(uint32_t a) const { return prefix == 0 || (a >> (32 - prefix)) == (addr >> (32 - prefix)); }
  uint64_t size() const { return uint64_t{1} << (32 - prefix); }
  std::string str() const;
};

/// "a.b.c.d" in host byte order, or nullopt.
std::optional<uint32_t> parse_ipv4(std::string_view s);
/// "a.b.c.d" for a host-order address.
std::string ipv4_str(uint32_t a);
/// "a.b.c.d/n" or "a.b.c.d" (= /32); nullopt when malformed or host bits are set.
std::optional<Cidr4> parse_cidr4(std::string_view s);
/// Whether s is a DNS name (letters, digits, '-', '_', dots; labels of 1..63; not all numeric).
bool valid_domain(std::string_view s);

/// One allowlist entry, normalised: "a.b.c.d/n" or a lower-case domain name.
/// Throws invalid_argument with a hint for anything else (IPv6 included:
/// a jail routes no IPv6).
std::string normalize_allow_entry(std::string_view entry);

}  // namespace sbx
