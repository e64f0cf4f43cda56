#include "server/api.hpp"

#include <time.h>

#include <chrono>
#include <thread>

#include "core/error.hpp"
#include "core/images.hpp"
#include "core/registry.hpp"
#include "core/wire.hpp"
#include "server/api_internal.hpp"
#include "server/exec_stream.hpp"
#include "server/fleet.hpp"

namespace sbx::server {

using nlohmann::json;

namespace {

// "2026-12-01T15:07:11.123Z": the platform's created_at / last_activity.
std::string iso8601_utc(int64_t ms) {
  time_t secs = static_cast<time_t>(ms / 1000);
  tm t{};
  ::gmtime_r(&secs, &t);
  char buf[40];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &t);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(ms % 1000));
  return buf;
}

bool may_see(const ApiKey& key, const SandboxRecord& rec) {
  return (key.perms & kAdmin) || sandbox_owner(rec.spec) == key.name;
}

Error no_such_sandbox(const std::string& id) {
  return Error(Errc::not_found, "sandbox " + id.substr(0, 64) + " does not exist")
      .set_hint("GET /v1/sandboxes (sbx ls) lists the sandboxes this key can see");
}

// The methods each known path answers, for 405's Allow.
std::string allowed_methods(const std::string& path) {
  static const std::pair<const char*, const char*> fixed[] = {
      {"/v1/sandboxes", "GET, POST"}, {"/v1/run", "POST"},   {"/v1/run/ws", "GET"},
      {"/v1/gc", "POST"},             {"/healthz", "GET"}, {"/metrics", "GET"}, {"/v1/snapshots", "GET"}};
  for (auto& [p, m] : fixed)
    if (path == p) return m;
  if (path.rfind("/v1/snapshots/", 0) == 0) return "DELETE";
  const std::string prefix = "/v1/sandboxes/";
  if (path.rfind(prefix, 0) != 0) return "";
  std::string rest = path.substr(prefix.size());
  auto slash = rest.find('/');
  if (slash == std::string::npos) return "GET, DELETE";
  std::string sub = rest.substr(slash + 1);
  if (sub == "exec" || sub == "commands" || sub == "tokens" || sub == "pause" || sub == "resume" || sub == "snapshot" ||
      sub == "fork")
    return "POST";
  if (sub.rfind("ports/", 0) == 0) return kPortProxyMethods;
  if (sub == "stat" || sub == "exec/ws" || sub == "processes" || sub.rfind("tcp/", 0) == 0) return "GET";
  if (sub.rfind("processes/", 0) == 0) return sub.size() > 7 && sub.ends_with("/signal") ? "POST" : "GET";
  if (sub == "files") return "GET, PUT, POST";
  return "";
}

// What a /v1/sandboxes/{id}/sub route needs: reaching code in the sandbox
// (exec, a terminal, a process's input or signals, a port) is run; reading is read.
unsigned permission_for(const std::string& method, const std::string& sub) {
  bool runs = sub == "exec" || sub == "commands" || sub == "exec/ws" || sub == "tokens" || sub.rfind("tcp/", 0) == 0 ||
              sub.rfind("ports/", 0) == 0 ||
              (sub.rfind("processes/", 0) == 0 && (sub.ends_with("/attach") || sub.ends_with("/signal")));
  if (runs) return kRun;
  return method == "GET" ? kRead : kWrite;
}

uint16_t port_number(const std::string& text) {
  int port = text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos ? 0 : std::stoi(text);
  if (port < 1 || port > 65535)
    throw Error(Errc::invalid_argument, "'" + text.substr(0, 40) + "' is not a port number (1-65535)");
  return static_cast<uint16_t>(port);
}

// Whether `method` is one of the comma-separated names in `allow` (whole names: "E" is not "DELETE").
bool method_allowed(const std::string& allow, const std::string& method) {
  for (size_t pos = 0; pos < allow.size();) {
    size_t end = allow.find(',', pos);
    if (end == std::string::npos) end = allow.size();
    if (allow.compare(pos, end - pos, method) == 0 && end - pos == method.size()) return true;
    pos = end + 1;
    while (pos < allow.size() && allow[pos] == ' ') ++pos;
  }
  return false;
}

}  // namespace

std::string json_line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

HttpResponse json_response(int status, const json& j) {
  HttpResponse r;
  r.status = status;
  r.body = json_line(j);
  return r;
}

json parse_body(const HttpRequest& req) {
  if (req.body.empty()) return json::object();
  auto j = json::parse(req.body, nullptr, false);
  if (j.is_discarded()) throw Error(Errc::invalid_argument, "the request body is not valid JSON");
  if (!j.is_object()) throw Error(Errc::invalid_argument, "the request body must be a JSON object");
  return j;
}

void put_output(json& j, const char* name, const std::string& data) {
  if (valid_utf8(data)) j[name] = data;
  else j[std::string(name) + "_b64"] = base64_encode(data);
}

const std::string* query(const HttpRequest& req, const char* name) {
  auto it = req.query.find(name);
  return it == req.query.end() ? nullptr : &it->second;
}

json public_record(const SandboxRecord& rec) {
  // sbx.* labels are the manager's bookkeeping (the owning key, the platform's label), not the caller's labels.
  SandboxSpec spec = rec.spec;
  std::erase_if(spec.labels, [](const auto& kv) { return kv.first.rfind("sbx.", 0) == 0; });
  auto label = rec.spec.labels.find(kPlatformLabel);
  return {{"id", rec.id},
          {"spec", spec},
          {"state", state_name(rec.state)},
          {"created_ms", rec.created_ms},
          {"last_active_ms", rec.last_active_ms},
          {"error", rec.error},
          {"from_pool", rec.from_pool},
          // The platform's names for the same facts.
          {"status", state_name(rec.state)},
          {"created_at", iso8601_utc(rec.created_ms)},
          {"last_activity", iso8601_utc(rec.last_active_ms ? rec.last_active_ms : rec.created_ms)},
          {"label", label == rec.spec.labels.end() ? json(nullptr) : json(label->second)},
          {"persistent", rec.spec.persistent}};
}

Api::Api(const Config& cfg, const DriverTable& drivers, Backend& backend, KeyRing keys, Limits limits)
    : cfg_(cfg), drivers_(drivers), keys_(std::move(keys)), limits_(limits), backend_(backend) {
  if (!cfg.driver_override.empty()) default_driver_ = cfg.driver_override;
  else if (find_driver(drivers, cfg.local_backend)) default_driver_ = cfg.local_backend;
  else default_driver_ = "subprocess";
  refresh_probes();
}

Api::~Api() = default;

HttpResponse Api::error_response(const Error& e, int status_override) {
  HttpResponse r = json_response(status_override ? status_override : http_status(e.code()), {{"error", error_json(e)}});
  // The platform's client retries on 429 after Retry-After seconds.
  if (r.status == 429) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse Api::handle(const HttpRequest& req) {
  ++in_flight_;
  struct Done {
    std::atomic<int>& n;
    ~Done() { --n; }
  } done{in_flight_};
  HttpResponse r;
  try {
    if (draining_ && req.path != "/healthz" && req.path != "/metrics")
      throw Error(Errc::unavailable, "the manager is shutting down").set_hint("retry against another manager");
    if (int owner = fleet_owner(req.path, forwarded_request(req)); owner >= 0) r = fleet_forward(req, owner);
    else if (!req.key) throw Error(Errc::unauthenticated, "the token was refused");  // one meant for another manager
    else r = route(req);
  } catch (const Error& e) {
    r = error_response(e);
  } catch (const std::exception& e) {
    r = error_response(Error(Errc::internal, e.what()));
  }
  metrics_.request(req.method, r.status);
  return r;
}

namespace {
void need(const HttpRequest& req, unsigned perm) {
  if (!(req.key->perms & perm))
    throw Error(Errc::forbidden, "the API key '" + req.key->name + "' lacks " + permission_names(perm))
        .set_hint(perm == kRun ? "running code needs sandboxes:run, which no other permission implies"
                               : "ask the operator for a key with " + permission_names(perm));
}
}  // namespace

HttpResponse Api::route(const HttpRequest& req) {
  const std::string& p = req.path;
  const std::string& m = req.method;
  if (p == "/healthz" && m == "GET") return healthz(*req.key);
  if (p == "/metrics" && m == "GET") return metrics_text();
  if (p == "/v1/run" && m == "POST") return need(req, kRun), need(req, kWrite), exec(req, nullptr);
  if (p == "/v1/run/ws" && m == "GET") return need(req, kRun), need(req, kWrite), exec_ws(req, nullptr);
  if (p == "/v1/gc" && m == "POST") return need(req, kWrite), gc(req);
  if (p == "/v1/sandboxes" && m == "POST") return need(req, kWrite), create(req);
  if (p == "/v1/sandboxes" && m == "GET") return need(req, kRead), list(req);
  if (p == "/v1/snapshots" || p.rfind("/v1/snapshots/", 0) == 0) {
    need(req, m == "GET" ? kRead : kWrite);
    if (HttpResponse r = snapshots_route(req); r.status) return r;
  }
  const std::string prefix = "/v1/sandboxes/";
  if (p.rfind(prefix, 0) == 0) {
    HttpResponse r = sandbox_route(req, p.substr(prefix.size()));
    if (r.status) return r;
  }
  if (std::string allow = allowed_methods(p); !allow.empty()) {
    HttpResponse r = error_response(
        Error(Errc::invalid_argument, "method " + m + " is not allowed on " + p.substr(0, 200)).set_hint("allowed: " + allow),
        405);
    r.headers.emplace_back("Allow", allow);
    return r;
  }
  throw Error(Errc::not_found, "no such endpoint: " + m + " " + p.substr(0, 200)).set_hint("see docs/api.md");
}

// /v1/sandboxes/{id}[/sub]; status 0 when no route matches the method.
HttpResponse Api::sandbox_route(const HttpRequest& req, const std::string& rest) {
  const std::string& m = req.method;
  auto slash = rest.find('/');
  std::string id = rest.substr(0, slash);
  std::string sub = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (!method_allowed(allowed_methods(req.path), m)) {
    HttpResponse none;
    none.status = 0;
    return none;
  }
  // The permission first: a key lacking it gets 403 whatever the id, existing, missing or malformed.
  bool ports = sub.rfind("ports/", 0) == 0;
  need(req, permission_for(m, sub));
  // Then ownership: another key's sandbox is a 404 on every route, whatever the route.
  SandboxRecord rec = owned(req, id);
  id = rec.id;
  if (sub.empty()) return m == "GET" ? json_response(200, public_record(rec)) : remove(req, rec);
  if (sub == "exec") return exec(req, &rec);
  if (sub == "exec/ws") return exec_ws(req, &rec);
  if (sub == "tokens") return tokens(req, rec);
  if (sub == "pause") return json_response(200, public_record(backend_.pause(id)));
  if (sub == "resume") return json_response(200, public_record(backend_.resume(id)));
  if (sub == "snapshot" || sub == "fork") return snapshot_action(req, rec, sub);
  if (sub == "processes" || sub.rfind("processes/", 0) == 0) return processes_route(req, rec, sub);
  if (sub.rfind("tcp/", 0) == 0) return tcp_ws(req, rec, port_number(sub.substr(4)));
  if (sub == "commands") return commands(req, rec);
  if (sub == "stat") return stat(req, id);
  if (ports) return port_proxy(req, rec, sub);
  bool json_files = query(req, "encoding") || req.content_type.rfind("application/json", 0) == 0 ||
                    (m == "GET" && req.accept.rfind("application/json", 0) == 0);
  if (m == "POST") return files_json_post(req, rec);
  if (m == "GET") return json_files ? files_json_get(req, rec) : files_get(req, id);
  return files_put(req, id);
}

SandboxRecord Api::owned(const HttpRequest& req, const std::string& ref) {
  std::string id = ref;
  if (!valid_sandbox_id(ref)) {
    // A name, looked up among what this key may see only (its own; every owner's for an admin).
    if (!valid_sandbox_name(ref)) throw no_such_sandbox(ref);
    std::vector<SandboxRecord> visible;
    for (auto& r : backend_.list())
      if (r.state != SandboxState::pooled && may_see(*req.key, r)) visible.push_back(std::move(r));
    auto owner = (req.key->perms & kAdmin) ? std::nullopt : std::optional<std::string>(req.key->name);
    auto hit = find_sandbox(visible, ref, owner);
    if (!hit) throw no_such_sandbox(ref);
    id = hit->id;
  }
  SandboxRecord rec;
  try {
    rec = backend_.get(id);
  } catch (const Error& e) {
    if (e.code() == Errc::not_found) throw no_such_sandbox(id);
    throw;
  }
  if (!may_see(*req.key, rec) || rec.state == SandboxState::pooled) throw no_such_sandbox(id);
  return rec;
}

SandboxSpec Api::manager_spec(SandboxSpec spec, const json& body, const ApiKey& key) const {
  if (spec.driver.empty()) spec.driver = default_driver_;
  for (auto& [k, v] : spec.labels)
    if (k.rfind("sbx.", 0) == 0) throw Error(Errc::invalid_argument, "labels starting with 'sbx.' are reserved");
  spec.labels[kOwnerLabel] = key.name;
  // The guide's sandboxes are network-jailed; a driver without a jail (deno) has no network at all.
  if (auto* info = find_driver(drivers_, spec.driver); info && info->network_jail && !body.contains("network"))
    spec.network = cfg_.default_network;
  if (!spec.image.empty() && spec.image != images::kHostView) {
    // Over the API an image is a name, never a host path (`/` would hand out the
    // host's root): one the operator listed in server.images, else one of the image store.
    auto it = cfg_.server.images.find(spec.image);
    std::optional<images::Image> stored;
    if (it == cfg_.server.images.end() && spec.image.front() != '/' && spec.image.find("..") == std::string::npos)
      stored = images::store_for(cfg_).find(spec.image);
    if (it == cfg_.server.images.end() && !stored) {
      std::string names;
      for (auto& [n, dir] : cfg_.server.images) names += (names.empty() ? "" : ", ") + n;
      for (auto& img : images::store_for(cfg_).list())
        for (auto& n : img.names) names += (names.empty() ? "" : ", ") + n;
      throw Error(Errc::invalid_argument, "image '" + spec.image.substr(0, 200) + "' is not one this manager has")
          .set_hint(names.empty() ? "this manager has no images (server.images in its config, `sbx image build`); leave image out for the default"
                                  : "images: " + names + ", host");
    }
    spec.image = stored ? stored->rootfs : it->second;
  }
  return spec;
}

HttpResponse Api::create(const HttpRequest& req) {
  auto t0 = std::chrono::steady_clock::now();
  json body = parse_body(req);
  SandboxSpec spec;
  std::optional<std::string> label;
  if (auto it = body.find("label"); it != body.end()) {
    if (!it->is_null() && !it->is_string()) throw Error(Errc::invalid_argument, "label must be a string or null");
    if (it->is_string()) label = it->get<std::string>();
    body.erase(it);
  }
  try {
    spec = body.get<SandboxSpec>();
  } catch (const json::exception& e) {
    throw Error(Errc::invalid_argument, std::string("sandbox spec: ") + e.what());
  }
  spec = manager_spec(std::move(spec), body, *req.key);
  if (!spec.from_snapshot.empty()) check_snapshot_access(req, spec.from_snapshot);
  if (label) spec.labels[kPlatformLabel] = *label;
  auto slot = reserve_sandbox(req.key->name);
  try {
    SandboxRecord rec = backend_.create(spec, nullptr);
    metrics_.create_latency(rec.spec.driver, seconds_since(t0));
    metrics_.create_source(rec.spec.driver, rec.from_pool);
    return json_response(201, public_record(rec));
  } catch (const Error&) {
    metrics_.failure("create");
    throw;
  }
}

std::shared_ptr<void> Api::reserve_sandbox(const std::string& key) {
  // Counted and reserved under one lock: concurrent creates cannot all see room for one more.
  std::lock_guard lock(mu_);
  int owned = creating_per_key_[key];
  for (auto& r : backend_.list())
    if (sandbox_owner(r.spec) == key && r.state != SandboxState::pooled) ++owned;
  if (owned >= limits_.max_sandboxes_per_key)
    throw Error(Errc::limit_exceeded, "the API key '" + key + "' already holds " + std::to_string(owned) +
                                          " sandboxes (the limit)")
        .set_hint("remove some, or raise server.max_sandboxes_per_key");
  ++creating_per_key_[key];
  return std::shared_ptr<void>(nullptr, [this, key](void*) {
    std::lock_guard l(mu_);
    --creating_per_key_[key];
  });
}

std::shared_ptr<void> Api::reserve_exec(const std::string& key) {
  std::lock_guard lock(mu_);
  int& n = execs_per_key_[key];
  if (n >= limits_.max_execs_per_key)
    throw Error(Errc::limit_exceeded, "the API key '" + key + "' already runs " + std::to_string(n) +
                                          " commands (the limit)")
        .set_hint("wait for some to finish, or raise server.max_execs_per_key");
  ++n;
  // Freed when the last holder lets go, on every path out: an answer, an error, a stream's end.
  return std::shared_ptr<void>(nullptr, [this, key](void*) {
    std::lock_guard l(mu_);
    --execs_per_key_[key];
  });
}

HttpResponse Api::list(const HttpRequest& req) {
  json arr = json::array();
  const std::string* state = query(req, "state");
  std::optional<SandboxState> want;
  if (state) want = parse_state_filter(*state);  // ?state=bogus is a 400 with `sbx ls`'s words
  for (auto& r : backend_.list()) {
    if (want && r.state != *want) continue;
    // The warm pool's unclaimed sandboxes belong to no key: only an admin sees them, and only when asking by state.
    if (r.state == SandboxState::pooled ? !(want && (req.key->perms & kAdmin)) : !may_see(*req.key, r)) continue;
    if (auto d = query(req, "driver"); d && r.spec.driver != *d) continue;
    if (auto l = query(req, "label")) {
      auto eq = l->find('=');
      std::string k = l->substr(0, eq), v = eq == std::string::npos ? "" : l->substr(eq + 1);
      auto it = r.spec.labels.find(k);
      if (it == r.spec.labels.end() || (eq != std::string::npos && it->second != v)) continue;
    }
    arr.push_back(public_record(r));
  }
  // A bare array: the platform's SDK reads the list as one (sbx's own client does too).
  return fleet_list(req, std::move(arr));
}

HttpResponse Api::remove(const HttpRequest& /*req*/, const SandboxRecord& rec) {
  try {
    backend_.remove(rec.id);
  } catch (const Error&) {
    metrics_.failure("remove");
    throw;
  }
  return json_response(200, {{"success", true}, {"id", rec.id}});
}

HttpResponse Api::gc(const HttpRequest& req) {
  json body = parse_body(req);
  reject_unknown_fields(body, {"dry_run"}, "gc request");
  bool dry = body.value("dry_run", false);
  GcReport rep = backend_.gc(dry);
  metrics_.gc_run();
  json arr = json::array();
  size_t removed = 0;
  for (auto& a : rep.actions) {
    removed += a.done;
    arr.push_back({{"kind", a.kind}, {"target", a.target}, {"reason", a.reason}, {"done", a.done}, {"error", a.error}});
  }
  metrics_.gc_removed(removed);
  return json_response(200, {{"dry_run", dry}, {"actions", arr}});
}

size_t Api::reap() {
  GcReport rep = backend_.gc(false);
  metrics_.gc_run();
  size_t removed = 0;
  for (auto& a : rep.actions) removed += a.done;
  metrics_.gc_removed(removed);
  return removed;
}

void Api::refresh_probes() {
  json drivers = json::array();
  bool default_ok = false;
  for (auto& d : drivers_) {
    bool ok = true;
    json checks = json::array();
    for (auto& p : d.probe(cfg_, false)) {
      ok = ok && (p.ok || p.advisory);
      checks.push_back({{"name", p.name}, {"ok", p.ok}, {"detail", p.detail}});
    }
    if (d.name == default_driver_) default_ok = ok;
    drivers.push_back({{"name", d.name}, {"ok", ok}, {"checks", checks}});
  }
  std::lock_guard lock(probes_mu_);
  probed_drivers_ = std::move(drivers);
  default_driver_ok_ = default_ok;
}

HttpResponse Api::healthz(const ApiKey& caller) {
  json drivers;
  bool default_ok;
  {
    std::lock_guard lock(probes_mu_);
    drivers = probed_drivers_;
    default_ok = default_driver_ok_;
  }
  json counts = json::object();
  int total = 0;
  for (auto& r : backend_.list()) {
    counts[std::string(state_name(r.state))] = counts.value(std::string(state_name(r.state)), 0) + 1;
    ++total;
  }
  bool ok = default_ok && !draining_;
  return json_response(ok ? 200 : 503, {{"status", ok ? "ok" : draining_ ? "draining" : "degraded"},
                                        {"version", SBX_VERSION},
                                        {"default_driver", default_driver_},
                                        {"drivers", drivers},
                                        {"sandboxes", {{"total", total}, {"by_state", counts}}},
                                        {"in_flight", in_flight_.load()},
                                        {"draining", draining_.load()},
                                        {"key", {{"name", caller.name}, {"permissions", permission_names(caller.perms)}}},
                                        {"time_ms", now_ms()}});
}

HttpResponse Api::metrics_text() {
  std::map<std::pair<std::string, std::string>, int> counts;
  for (auto& r : backend_.list()) ++counts[{r.spec.driver, std::string(state_name(r.state))}];
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.render(counts, in_flight_.load());
  return r;
}

HttpResponse Api::ndjson_response(std::shared_ptr<ResponseStream> stream) {
  {
    std::lock_guard lock(mu_);
    std::erase_if(streams_, [](auto& w) { return w.expired(); });
    streams_.push_back(stream);
  }
  HttpResponse r;
  r.content_type = "application/x-ndjson";
  r.stream = std::move(stream);
  return r;
}

void Api::cancel_all() {
  std::lock_guard lock(mu_);
  for (auto& w : streams_)
    if (auto s = w.lock()) std::static_pointer_cast<ExecStream>(s)->interrupt();
  streams_.clear();
  // WebSocket sessions end with their command (killed; an attach detaches) and close frame 1001.
  for (auto* cancel : sessions_) (*cancel)();
}

}  // namespace sbx::server
