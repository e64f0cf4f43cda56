// The owner rule and the Api's fleet hooks; the proxying itself is fleet_proxy.cpp.
#include "server/fleet.hpp"

#include <strings.h>
#include <sys/socket.h>

#include "core/error.hpp"
#include "core/spec.hpp"
#include "core/wire.hpp"
#include "server/api_internal.hpp"

namespace sbx::server {

std::string path_sandbox_id(const std::string& path) {
  const std::string prefix = "/v1/sandboxes/";
  if (path.rfind(prefix, 0) != 0) return "";
  std::string id = path.substr(prefix.size(), path.find('/', prefix.size()) - prefix.size());
  return valid_sandbox_id(id) ? id : "";
}

FleetRoute fleet_route(const FleetConfig& fleet, const std::string& path, bool forwarded,
                       const std::function<bool(const std::string& id)>& held_here) {
  if (!fleet.enabled()) return {};
  std::string id = path_sandbox_id(path);
  if (id.empty() || held_here(id)) return {};
  int owner = sandbox_id_owner(id);
  if (owner == fleet.self) return {};  // ours, and gone (or never made): the ordinary 404
  if (forwarded) return {FleetRoute::misrouted, owner};
  // An ordinal past the fleet's size: a manager scaled away (its volume keeps its sandboxes), or an id
  // made before the fleet was on that is not here. The owner's address answers either way (503 when down).
  return {FleetRoute::forward, owner};
}

std::string Fleet::name(int ordinal) const {
  return "manager " + std::to_string(ordinal) + " (" + cfg_.url_of(ordinal) + ")";
}

HttpResponse owner_down(const Fleet& fleet, const std::string& what, int owner, const std::string& why) {
  Error e = Error(Errc::unavailable, what + " belongs to " + fleet.name(owner) + ", which does not answer: " + why)
                .set_hint("its sandboxes answer again once that manager is back (Kubernetes restarts it); "
                          "every other manager's keep serving");
  HttpResponse r = Api::error_response(e);
  auto j = nlohmann::json::parse(r.body);
  j["error"]["owner"] = {{"ordinal", owner}, {"url", fleet.config().url_of(owner)}};
  r.body = json_line(j);
  r.headers.emplace_back("Retry-After", "5");
  r.headers.emplace_back("X-Sbx-Owner", std::to_string(owner));
  return r;
}

bool forwarded_request(const HttpRequest& req) {
  for (auto& [k, v] : req.headers)
    if (strcasecmp(k.c_str(), kForwardedHeader) == 0) return true;
  return false;
}

int Api::fleet_owner(const std::string& path, bool forwarded) {
  if (!fleet_) return -1;
  FleetRoute route = fleet_route(fleet_->config(), path, forwarded, [this](const std::string& id) {
    try {
      backend_.get(id);
      return true;
    } catch (const Error& e) {
      if (e.code() == Errc::not_found) return false;
      throw;
    }
  });
  if (route.kind == FleetRoute::misrouted)
    throw Error(Errc::protocol, "another manager passed on a request for sandbox " + path_sandbox_id(path) +
                                    ", which names " + fleet_->name(route.owner) + ", to this one (" +
                                    fleet_->name(fleet_->config().self) + ")")
        .set_hint("the managers' fleet settings disagree: give every manager the same SBX_FLEET_PEER_URL, and "
                  "each its own ordinal (SBX_FLEET_SELF or the StatefulSet's hostname)");
  return route.kind == FleetRoute::forward ? route.owner : -1;
}

HttpResponse Api::fleet_forward(const HttpRequest& req, int owner) {
  HttpResponse r = fleet_->forward(req, owner);
  if (r.upgraded) {
    // A relayed WebSocket counts as in flight, and a drain (SIGTERM) ends it like this manager's own sessions.
    r.upgraded = [this, relay = std::move(r.upgraded)](int sock, std::string extra) {
      std::function<void()> cancel = [sock] { ::shutdown(sock, SHUT_RDWR); };
      auto tracked = track_session(&cancel);
      relay(sock, std::move(extra));
    };
  }
  return r;
}

HttpResponse Api::fleet_list(const HttpRequest& req, nlohmann::json here) {
  if (!fleet_) return json_response(200, here);
  const std::string* scope = query(req, "scope");
  if (scope && *scope != kLocalScope)
    throw Error(Errc::invalid_argument, "unknown scope '" + scope->substr(0, 40) + "'")
        .set_hint("scope=local lists this manager's sandboxes only; leave it out for the whole fleet's");
  if (scope || forwarded_request(req)) return json_response(200, here);
  return fleet_->list(req, std::move(here));
}

}  // namespace sbx::server
