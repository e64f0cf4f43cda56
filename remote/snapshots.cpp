// The manager's snapshots through its routes (docs/api.md): POST
// /v1/sandboxes/{id}/snapshot and /fork, GET /v1/snapshots, DELETE
// /v1/snapshots/{name}. The manager applies its owner rules: this key sees
// and removes its own snapshots only (an admin key, every one).
#include "remote/backend.hpp"
#include "remote/http.hpp"

namespace sbx {

using nlohmann::json;
using remote_http::decode;
using remote_http::url_escape;

SnapshotInfo RemoteBackend::as_seen_here(SnapshotInfo snap) const {
  snap.spec.driver = "remote";  // as its sandboxes show: `create --from` it goes to the manager
  return snap;
}

SnapshotInfo RemoteBackend::snapshot(const std::string& id, const std::string& name, bool memory) {
  json body{{"memory", memory}};
  if (!name.empty()) body["name"] = name;
  json answer = call_json("POST", sandbox_path(id) + "/snapshot", &body);
  return as_seen_here(decode("a snapshot", [&] { return answer.get<SnapshotInfo>(); }));
}

std::vector<SnapshotInfo> RemoteBackend::snapshots() {
  json answer = call_json("GET", "/v1/snapshots", nullptr);
  auto snaps = decode("a snapshot list", [&] { return answer.get<std::vector<SnapshotInfo>>(); });
  for (auto& s : snaps) s = as_seen_here(std::move(s));
  return snaps;
}

void RemoteBackend::remove_snapshot(const std::string& name) {
  check_snapshot_name(name);  // before it goes into a URL
  call_json("DELETE", "/v1/snapshots/" + url_escape(name), nullptr);
}

SandboxRecord RemoteBackend::fork(const std::string& id, const Progress&, bool memory) {
  json body{{"memory", memory}};
  json answer = call_json("POST", sandbox_path(id) + "/fork", &body);
  auto rec = as_seen_here(decode("a sandbox record", [&] { return answer.get<SandboxRecord>(); }));
  remember_or_remove(rec);
  return rec;
}

}  // namespace sbx
