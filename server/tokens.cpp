#include "server/tokens.hpp"

#include <sys/random.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/sha256.hpp"
#include "core/wire.hpp"

namespace sbx::server {

using nlohmann::json;

namespace {

constexpr size_t kBlock = 64;  // SHA-256's block size, HMAC's key width

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// RFC 2104 over SHA-256.
std::string hmac_sha256_hex(std::string_view secret, std::string_view message) {
  std::string key = secret.size() > kBlock ? unhex(sha256_hex(secret)) : std::string(secret);
  key.resize(kBlock, '\0');
  std::string ipad = key, opad = key;
  for (size_t i = 0; i < kBlock; ++i) {
    ipad[i] = static_cast<char>(ipad[i] ^ 0x36);
    opad[i] = static_cast<char>(opad[i] ^ 0x5c);
  }
  return sha256_hex(opad + unhex(sha256_hex(ipad + std::string(message))));
}

// base64url without padding: a token goes in a query string as it is.
std::string to_base64url(std::string_view data) {
  std::string s = base64_encode(data);
  while (!s.empty() && s.back() == '=') s.pop_back();
  for (char& c : s) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return s;
}

std::string from_base64url(std::string_view text) {
  std::string s(text);
  for (char& c : s) c = c == '-' ? '+' : c == '_' ? '/' : c;
  while (s.size() % 4) s.push_back('=');
  return base64_decode(s);
}

bool equal_in_constant_time(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = static_cast<unsigned char>(diff | (a[i] ^ b[i]));
  return diff == 0;
}

}  // namespace

std::string new_token_secret() {
  char raw[32];
  if (::getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw)) throw sys_error("getrandom", errno);
  return std::string(raw, sizeof raw);
}

std::string sign_token(std::string_view secret, const TokenGrant& g) {
  json payload{{"k", g.key}, {"s", g.sandbox}, {"c", g.scope}, {"e", g.expires_ms}};
  if (g.port) payload["p"] = g.port;
  std::string body = to_base64url(payload.dump());
  return body + "." + hmac_sha256_hex(secret, body);
}

std::optional<TokenGrant> verify_token(std::string_view secret, std::string_view token, int64_t now_ms) {
  size_t dot = token.find('.');
  if (dot == std::string_view::npos || token.size() > 4096) return std::nullopt;
  std::string_view body = token.substr(0, dot);
  if (!equal_in_constant_time(hmac_sha256_hex(secret, body), token.substr(dot + 1))) return std::nullopt;
  try {
    json p = json::parse(from_base64url(body));
    TokenGrant g{p.at("k").get<std::string>(), p.at("s").get<std::string>(), p.at("c").get<std::string>(),
                 p.value<uint16_t>("p", 0), p.at("e").get<int64_t>()};
    if (g.expires_ms <= now_ms) return std::nullopt;
    return g;
  } catch (const std::exception&) {  // signed by us but unreadable: cannot happen short of a bug; refuse it
    return std::nullopt;
  }
}

bool token_covers(const TokenGrant& g, std::string_view path) {
  std::string prefix = "/v1/sandboxes/" + g.sandbox + "/";
  if (path.substr(0, prefix.size()) != prefix) return false;
  std::string_view sub = path.substr(prefix.size());
  auto numbered = [&](std::string_view head, std::string_view tail) {
    if (sub.substr(0, head.size()) != head) return false;
    std::string_view rest = sub.substr(head.size());
    size_t end = rest.find('/');
    std::string_view num = rest.substr(0, end);
    if (num.empty() || num.find_first_not_of("0123456789") != std::string_view::npos) return false;
    std::string_view after = end == std::string_view::npos ? std::string_view() : rest.substr(end);
    if (g.scope == kScopePort && num != std::to_string(g.port)) return false;
    return tail == "*" ? true : after == tail;
  };
  if (g.scope == kScopeWs) return sub == "exec/ws" || numbered("processes/", "/attach") || numbered("tcp/", "");
  if (g.scope == kScopePort) return numbered("tcp/", "") || numbered("ports/", "*");
  return false;
}

}  // namespace sbx::server
