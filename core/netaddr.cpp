#include "core/netaddr.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <charconv>

#include "core/error.hpp"

namespace sbx {

std::string Cidr4::str() const { return ipv4_str(addr) + "/" + std::to_string(prefix); }

std::optional<uint32_t> parse_ipv4(std::string_view s) {
  // inet_pton, not inet_aton: "10.1" or octal forms are no address a user means.
  std::string z(s);
  in_addr a{};
  if (s.empty() || s.size() > 15 || ::inet_pton(AF_INET, z.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

std::string ipv4_str(uint32_t a) {
  return std::to_string(a >> 24) + "." + std::to_string((a >> 16) & 255) + "." + std::to_string((a >> 8) & 255) +
         "." + std::to_string(a & 255);
}

std::optional<Cidr4> parse_cidr4(std::string_view s) {
  auto slash = s.find('/');
  auto a = parse_ipv4(s.substr(0, slash));
  if (!a) return std::nullopt;
  Cidr4 c{*a, 32};
  if (slash != std::string_view::npos) {
    auto p = s.substr(slash + 1);
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), c.prefix);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || c.prefix < 0 || c.prefix > 32) return std::nullopt;
  }
  uint32_t host_mask = c.prefix == 0 ? ~0u : (c.prefix == 32 ? 0u : (~0u >> c.prefix));
  if (c.addr & host_mask) return std::nullopt;
  return c;
}

bool valid_domain(std::string_view s) {
  if (!s.empty() && s.back() == '.') s.remove_suffix(1);
  if (s.empty() || s.size() > 253) return false;
  bool any_alpha = false;
  size_t label = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '.') {
      if (label == 0 || label > 63 || s[i - 1] == '-' || s[i - label] == '-') return false;
      label = 0;
      continue;
    }
    char c = s[i];
    if (std::isalpha(static_cast<unsigned char>(c))) any_alpha = true;
    else if (!std::isdigit(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
    ++label;
  }
  return any_alpha;
}

std::string normalize_allow_entry(std::string_view entry) {
  std::string e(entry);
  if (auto c = parse_cidr4(e)) return c->str();
  if (e.find(':') != std::string::npos)
    throw Error(Errc::invalid_argument, "allowlist entry '" + e + "': a network jail routes no IPv6")
        .set_hint("allow IPv4 networks (a.b.c.d/n) or domain names");
  if (e.find('/') != std::string::npos || parse_ipv4(e.substr(0, e.find('/'))) ||
      (!e.empty() && std::isdigit(static_cast<unsigned char>(e.back())) && e.find_first_not_of("0123456789./") == std::string::npos))
    throw Error(Errc::invalid_argument, "allowlist entry '" + e + "' is not an IPv4 network")
        .set_hint("write networks as a.b.c.d/n with the host bits zero, e.g. 203.0.113.0/24");
  if (!valid_domain(e))
    throw Error(Errc::invalid_argument, "allowlist entry '" + e + "' is neither an IPv4 network nor a domain name")
        .set_hint("use a.b.c.d/n or a name such as pypi.org");
  std::string out;
  for (char c : e) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (out.back() == '.') out.pop_back();
  return out;
}

}  // namespace sbx
