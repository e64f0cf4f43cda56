// Snapshot routes (docs/api.md): POST /v1/sandboxes/{id}/snapshot and /fork,
// GET /v1/snapshots, DELETE /v1/snapshots/{name}. A snapshot belongs to the
// owner of the sandbox it was taken from (its spec's sbx.owner label); an
// admin key sees every owner's.
#include "server/api.hpp"
#include "server/api_internal.hpp"

namespace sbx::server {

using nlohmann::json;

namespace {
bool may_use(const ApiKey& key, const SnapshotInfo& s) {
  return (key.perms & kAdmin) || sandbox_owner(s.spec) == key.name;
}
}  // namespace

HttpResponse Api::snapshot_action(const HttpRequest& req, const SandboxRecord& rec, const std::string& sub) {
  json body = req.body.empty() ? json::object() : parse_body(req);
  // `memory`: the sandbox's processes too (runsc; 503 with the reason where the driver cannot).
  if (body.contains("memory") && !body["memory"].is_boolean())
    throw Error(Errc::invalid_argument, "memory must be true or false");
  bool memory = body.value("memory", false);
  if (sub == "fork") {
    reject_unknown_fields(body, {"memory"}, "fork request");
    return json_response(201, public_record(backend_.fork(rec.id, nullptr, memory)));
  }
  reject_unknown_fields(body, {"name", "memory"}, "snapshot request");
  if (body.contains("name") && !body["name"].is_string()) throw Error(Errc::invalid_argument, "name must be a string");
  std::string name = body.value("name", "");
  if (!name.empty()) {
    // Replacing a snapshot is for its owner only.
    for (auto& s : backend_.snapshots())
      if (s.name == name && !may_use(*req.key, s))
        throw Error(Errc::conflict, "snapshot name '" + name + "' is taken").set_hint("choose another name");
  }
  return json_response(201, json(backend_.snapshot(rec.id, name, memory)));
}

void Api::check_snapshot_access(const HttpRequest& req, const std::string& ref) {
  std::string hex = ref.rfind("sha256:", 0) == 0 ? ref.substr(7) : ref;
  for (auto& s : backend_.snapshots()) {
    bool named = s.name == ref || (hex.size() >= 8 && s.digest.compare(7, hex.size(), hex) == 0);
    if (named && may_use(*req.key, s)) return;
  }
  // Another owner's snapshot is as missing as none: its name tells nothing.
  throw Error(Errc::not_found, "no such snapshot: " + ref.substr(0, 80));
}

HttpResponse Api::snapshots_route(const HttpRequest& req) {
  const std::string prefix = "/v1/snapshots";
  std::string rest = req.path.substr(prefix.size());
  if (rest.empty() && req.method == "GET") {
    json out = json::array();
    for (auto& s : backend_.snapshots())
      if (may_use(*req.key, s)) out.push_back(s);
    return json_response(200, out);
  }
  if (rest.size() > 1 && rest[0] == '/' && req.method == "DELETE") {
    std::string name = rest.substr(1);
    bool found = false;
    for (auto& s : backend_.snapshots()) found = found || (s.name == name && may_use(*req.key, s));
    if (!found) throw Error(Errc::not_found, "no such snapshot: " + name.substr(0, 80));
    backend_.remove_snapshot(name);
    return json_response(200, json{{"name", name}, {"success", true}});  // as DELETE /v1/sandboxes/{id}
  }
  HttpResponse none;
  none.status = 0;
  return none;
}

}  // namespace sbx::server
