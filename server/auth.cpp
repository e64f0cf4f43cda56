#include "server/auth.hpp"


#include <set>

#include "core/error.hpp"

namespace sbx::server {

Permission parse_permission(std::string_view name) {
  if (name == "sandboxes:read") return kRead;
  if (name == "sandboxes:write") return kWrite;
  if (name == "sandboxes:run") return kRun;
  if (name == "sandboxes:admin") return kAdmin;
  throw Error(Errc::invalid_argument, "unknown permission '" + std::string(name) + "'")
      .set_hint("permissions: sandboxes:read, sandboxes:write, sandboxes:run, sandboxes:admin");
}

std::string permission_names(unsigned perms) {
  std::string out;
  for (auto [bit, name] : {std::pair{kRead, "sandboxes:read"}, {kWrite, "sandboxes:write"}, {kRun, "sandboxes:run"},
                                {kAdmin, "sandboxes:admin"}})
    if (perms & bit) out += (out.empty() ? "" : ",") + std::string(name);
  return out.empty() ? "none" : out;
}

void KeyRing::add(ApiKey key) { keys_.push_back(std::move(key)); }

namespace {
// Constant-time for equal lengths; a length mismatch is folded into the
// result without an early return, and the comparison always runs over the
// stored key's length.
bool same(std::string_view stored, std::string_view presented) {
  unsigned char diff = stored.size() == presented.size() ? 0 : 1;
  for (size_t i = 0; i < stored.size(); ++i) {
    unsigned char p = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    diff |= static_cast<unsigned char>(static_cast<unsigned char>(stored[i]) ^ p);
  }
  return diff == 0;
}
}  // namespace

const ApiKey* KeyRing::authenticate(std::string_view presented) const {
  const ApiKey* found = nullptr;
  for (auto& k : keys_)
    if (same(k.secret, presented) && !found) found = &k;
  if (!found && anonymous_) return &*anonymous_;
  return found;
}

std::string weak_key_reason(std::string_view secret) {
  if (secret.size() < 16) return "shorter than 16 characters";
  std::set<char> distinct(secret.begin(), secret.end());
  if (distinct.size() < 6) return "made of fewer than 6 distinct characters";
  for (auto* word : {"changeme", "password", "secret", "admin", "test"})
    if (secret.find(word) != std::string_view::npos) return std::string("contains the word '") + word + "'";
  return {};
}

}  // namespace sbx::server
