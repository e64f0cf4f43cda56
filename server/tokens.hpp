// Short-lived tokens for callers that cannot send X-API-Key: a browser opening
// a WebSocket, a preview link to a sandbox's port. A token names the key that
// made it, one sandbox, what it is good for and when it expires, and is signed
// with HMAC-SHA256 under a secret the manager draws at start (so a restart
// voids every token: they live minutes, not days). It grants no more than its
// key may do, and stops working when the key is removed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sbx::server {

/// What a token lets its bearer do.
struct TokenGrant {
  std::string key;      ///< the API key's name that made it (its permissions apply)
  std::string sandbox;  ///< the sandbox id it is for
  std::string scope;    ///< "ws": the sandbox's WebSocket routes; "port": the port proxy (and tcp) of `port`
  uint16_t port = 0;    ///< scope "port" only
  int64_t expires_ms = 0;
};

/// Token scopes, as POST /v1/sandboxes/{id}/tokens takes them.
inline constexpr const char* kScopeWs = "ws";
inline constexpr const char* kScopePort = "port";

/// A fresh random signing secret (32 bytes).
std::string new_token_secret();
/// The token for grant: base64url(payload) "." hex(HMAC-SHA256(secret, payload)); URL-safe as is.
std::string sign_token(std::string_view secret, const TokenGrant& grant);
/// The grant of a token signed with secret and not expired at now_ms; nullopt for
/// anything else (forged, altered, expired, malformed), never an exception.
std::optional<TokenGrant> verify_token(std::string_view secret, std::string_view token, int64_t now_ms);
/// Whether grant covers `path` (the request's, e.g. /v1/sandboxes/ID/exec/ws).
bool token_covers(const TokenGrant& grant, std::string_view path);

}  // namespace sbx::server
