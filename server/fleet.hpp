// Many managers, one owner per sandbox (docs/fleet.md). Kubernetes runs the
// managers as a StatefulSet and does membership, restarts and placement; this
// adds only the rule that a request reaches the manager owning its sandbox:
// a sandbox id names its owner's ordinal (core/spec.hpp), and a manager that
// gets a request for another's sandbox passes it on there, one hop, streamed.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "server/api.hpp"

namespace sbx::server {

/// Marks a request one manager passed on to another (its value: the sender's
/// ordinal). The receiver answers it itself, never passing it on again.
inline constexpr const char* kForwardedHeader = "X-Sbx-Forwarded-By";
/// `?scope=local` on GET /v1/sandboxes: this manager's sandboxes only.
inline constexpr const char* kLocalScope = "local";

/// Whether `req` carries kForwardedHeader (another manager passed it on).
bool forwarded_request(const HttpRequest& req);

/// Where a request goes in a fleet.
struct FleetRoute {
  enum Kind { here, forward, misrouted } kind = here;
  int owner = -1;  ///< forward, misrouted: the ordinal the id names
};

/// The sandbox id a path names (/v1/sandboxes/{id}[/...] with an id of the
/// sbx_ form), or empty: names, lists and other routes are answered where they arrive.
std::string path_sandbox_id(const std::string& path);

/// The owner rule. A sandbox this manager holds is answered here whatever its id
/// says (ids made before the fleet was on name a random ordinal); else the id's
/// ordinal is its owner, and a request for another's is passed on, unless it was
/// passed on already (`forwarded`): then the managers disagree on who owns what,
/// an error, never a second hop.
FleetRoute fleet_route(const FleetConfig& fleet, const std::string& path, bool forwarded,
                       const std::function<bool(const std::string& id)>& held_here);

class Fleet {
 public:
  explicit Fleet(FleetConfig cfg);
  const FleetConfig& config() const { return cfg_; }
  /// How messages name a manager: "manager 2 (http://sbx-2.sbx-headless:8000)".
  std::string name(int ordinal) const;
  /// The owner's answer to `req`: status, headers and body streamed both ways
  /// (a WebSocket once the owner answered 101); 503 naming it when it does not answer.
  HttpResponse forward(const HttpRequest& req, int owner) const;
  /// GET /v1/sandboxes across the fleet: `here` (this manager's, filtered) and
  /// every peer's own list; 503 naming the managers that did not answer.
  HttpResponse list(const HttpRequest& req, nlohmann::json here) const;

 private:
  class Pool;
  FleetConfig cfg_;
  std::shared_ptr<Pool> pool_;  ///< kept-alive connections to peers (fleet_proxy.cpp)
};

/// The 503 of a sandbox whose owner does not answer (`why`: what failed).
HttpResponse owner_down(const Fleet& fleet, const std::string& what, int owner, const std::string& why);

}  // namespace sbx::server
