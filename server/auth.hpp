// Who may call the manager: API keys with permissions, compared in constant time.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sbx::server {

enum Permission : unsigned {
  kRead = 1,   ///< sandboxes:read
  kWrite = 2,  ///< sandboxes:write
  kRun = 4,    ///< sandboxes:run — never implied by the others
  kAdmin = 8,  ///< sandboxes:admin — sees every owner's sandboxes (the others still gate what it may do)
  kAll = 15,
};

/// "sandboxes:read" -> kRead; throws invalid_argument naming the accepted ones.
Permission parse_permission(std::string_view name);
/// "sandboxes:read,sandboxes:run" for logs and doctor.
std::string permission_names(unsigned perms);

struct ApiKey {
  std::string name;    ///< shown in logs instead of the key
  std::string secret;  ///< never logged, never in an error
  unsigned perms = 0;
};

class KeyRing {
 public:
  void add(ApiKey key);
  /// The key matching `presented`, or nullptr. Every stored key is compared in
  /// full, so the time taken says nothing about which key or prefix matched.
  const ApiKey* authenticate(std::string_view presented) const;
  bool empty() const { return keys_.empty(); }
  /// Development mode on loopback: requests without a valid key act as `anonymous` (all permissions).
  void allow_anonymous() { anonymous_ = ApiKey{"anonymous-dev", "", kAll}; }
  const std::vector<ApiKey>& keys() const { return keys_; }

 private:
  std::vector<ApiKey> keys_;
  std::optional<ApiKey> anonymous_;
};

/// Why a key is weak (short, one repeated character, a well-known word), or empty when it is fine.
std::string weak_key_reason(std::string_view secret);

}  // namespace sbx::server
