// Many managers (server/fleet.hpp): the id encoding, the fleet config, the
// owner rule, URL templating and the refusal of a second hop.
#include "server/fleet.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/config.hpp"
#include "core/spec.hpp"
#include "tests/unit/fake_backend.hpp"
#include "tests/unit/helpers.hpp"

using nlohmann::json;
using sbx::FleetConfig;
using sbx::server::FleetRoute;

namespace {

sbx::Config fleet_config(std::map<std::string, std::string> env, const std::string& hostname = "sbx-2",
                         const std::string& yaml = "") {
  sbx::ConfigInputs in;
  in.env = std::move(env);
  in.hostname = hostname;
  return sbx::resolve_config_text(in, yaml, "/etc/sbx/fleet.yaml");
}

std::string error_of_config(std::map<std::string, std::string> env, const std::string& hostname = "sbx-2") {
  try {
    fleet_config(std::move(env), hostname);
  } catch (const sbx::Error& e) {
    return e.what();
  }
  FAIL("no error");
  return "";
}

FleetConfig three(int self) {
  FleetConfig f;
  f.size = 3;
  f.self = self;
  f.peer_url = "http://sbx-{n}.sbx-headless:8000";
  return f;
}

std::vector<sbx::Probe> no_probes(const sbx::Config&, bool) { return {}; }
std::unique_ptr<sbx::Driver> no_driver(const sbx::Config&) { return nullptr; }

}  // namespace

TEST_CASE("fleet: a sandbox id names its owner and keeps the sbx_ form", "[fleet]") {
  for (int n : {0, 1, 2, 31, 32, 500, 1023}) {
    std::string id = sbx::new_sandbox_id(n);
    INFO(id);
    CHECK(sbx::valid_sandbox_id(id));
    CHECK(sbx::sandbox_id_owner(id) == n);
  }
  CHECK(sbx::new_sandbox_id(2).substr(0, 6) == "sbx_ac");  // readable: manager 2's ids start sbx_ac
  CHECK(sbx::new_sandbox_id(2) != sbx::new_sandbox_id(2));
  // Outside a fleet an id is random as before; a process in a fleet makes its own ordinal's.
  CHECK(sbx::valid_sandbox_id(sbx::new_sandbox_id()));
  sbx::set_sandbox_id_owner(7);
  for (int i = 0; i < 20; ++i) CHECK(sbx::sandbox_id_owner(sbx::new_sandbox_id()) == 7);
  sbx::set_sandbox_id_owner(-1);
}

TEST_CASE("fleet: config from the environment, the ordinal from a StatefulSet hostname", "[fleet][config]") {
  CHECK_FALSE(fleet_config({}).server.fleet.enabled());  // off by default
  auto c = fleet_config({{"SBX_FLEET_SIZE", "3"}, {"SBX_FLEET_PEER_URL", "http://sbx-{n}.sbx-headless:8000/"}});
  CHECK(c.server.fleet.size == 3);
  CHECK(c.server.fleet.self == 2);
  CHECK(c.server.fleet.url_of(0) == "http://sbx-0.sbx-headless:8000");
  CHECK(fleet_config({{"SBX_FLEET_SIZE", "3"}, {"SBX_FLEET_PEER_URL", "http://127.0.0.1:81{n}0"}, {"SBX_FLEET_SELF", "1"}},
                     "laptop")
            .server.fleet.url_of(1) == "http://127.0.0.1:8110");
  CHECK(fleet_config({}, "sbx-1.sbx-headless.default.svc", "server:\n  fleet:\n    size: 2\n    peer_url: http://sbx-{n}:8000\n")
            .server.fleet.self == 1);
}

TEST_CASE("fleet: a config that cannot work is refused, saying what to set", "[fleet][config]") {
  const std::string url = "http://sbx-{n}.sbx-headless:8000";
  CHECK_THAT(error_of_config({{"SBX_FLEET_SIZE", "3"}}), Catch::Contains("SBX_FLEET_SIZE is set alone"));
  CHECK_THAT(error_of_config({{"SBX_FLEET_SIZE", "2"}, {"SBX_FLEET_PEER_URL", url}}), Catch::Contains("not below the fleet size 2"));
  CHECK_THAT(error_of_config({{"SBX_FLEET_SIZE", "3"}, {"SBX_FLEET_PEER_URL", url}}, "laptop"),
             Catch::Contains("does not end in a number"));
  CHECK_THAT(error_of_config({{"SBX_FLEET_SIZE", "3"}, {"SBX_FLEET_PEER_URL", "https://sbx-{n}:8000"}}),
             Catch::Contains("{n}"));
  CHECK_THAT(error_of_config({{"SBX_FLEET_SIZE", "3"}, {"SBX_FLEET_PEER_URL", "http://sbx:8000"}}), Catch::Contains("{n}"));
  CHECK_THAT(error_of_config({{"SBX_FLEET_SIZE", "3"}, {"SBX_FLEET_PEER_URL", "http://sbx-{n}:8000/api"}}),
             Catch::Contains("{n}"));
  CHECK_THAT(error_of_config({{"SBX_FLEET_SIZE", "1025"}, {"SBX_FLEET_PEER_URL", url}}), Catch::Contains("1025"));
}

TEST_CASE("fleet: the owner rule", "[fleet]") {
  auto nowhere = [](const std::string&) { return false; };
  auto everywhere = [](const std::string&) { return true; };
  std::string of0 = sbx::new_sandbox_id(0), of2 = sbx::new_sandbox_id(2);
  // Off: everything here, exactly as a lone manager.
  CHECK(sbx::server::fleet_route(FleetConfig{}, "/v1/sandboxes/" + of2, false, nowhere).kind == FleetRoute::here);
  auto f = three(0);
  CHECK(sbx::server::fleet_route(f, "/v1/sandboxes/" + of0 + "/exec", false, nowhere).kind == FleetRoute::here);
  auto r = sbx::server::fleet_route(f, "/v1/sandboxes/" + of2 + "/exec", false, nowhere);
  CHECK(r.kind == FleetRoute::forward);
  CHECK(r.owner == 2);
  // Held here (made before the fleet was on, its id naming a random ordinal): answered here.
  CHECK(sbx::server::fleet_route(f, "/v1/sandboxes/" + of2, false, everywhere).kind == FleetRoute::here);
  // Names, lists and the other routes are answered where they arrive.
  for (const char* p : {"/v1/sandboxes", "/v1/sandboxes/my-name/exec", "/healthz", "/v1/run", "/v1/gc"})
    CHECK(sbx::server::fleet_route(f, p, false, nowhere).kind == FleetRoute::here);
  CHECK(sbx::server::path_sandbox_id("/v1/sandboxes/" + of2 + "/processes/3/attach") == of2);
}

TEST_CASE("fleet: a passed-on request for a third manager's sandbox is an error, never a second hop", "[fleet]") {
  auto nowhere = [](const std::string&) { return false; };
  auto r = sbx::server::fleet_route(three(1), "/v1/sandboxes/" + sbx::new_sandbox_id(2), true, nowhere);
  CHECK(r.kind == FleetRoute::misrouted);
  // Passed on to the right owner, which does not have it: the ordinary 404.
  CHECK(sbx::server::fleet_route(three(2), "/v1/sandboxes/" + sbx::new_sandbox_id(2), true, nowhere).kind ==
        FleetRoute::here);

  sbx_test::TempDir state{"fleet"};
  sbx::DriverTable drivers{sbx::DriverInfo{"subprocess", "fake", &no_probes, &no_driver, true}};
  sbx_test::FakeBackend backend;
  sbx::Config cfg;
  cfg.state_dir = state.path;
  cfg.local_backend = "subprocess";
  sbx::server::ApiKey key{"admin", "admin-secret-0123456789", sbx::server::kAll};
  sbx::server::KeyRing keys;
  keys.add(key);
  sbx::server::Api api(cfg, drivers, backend, keys, {});
  FleetConfig f = three(1);
  f.peer_url = "http://127.0.0.1:{n}";  // ports 0 and 2: nothing listens, so the peers are down
  api.set_fleet(std::make_shared<sbx::server::Fleet>(f));
  auto call = [&](const std::string& path, bool forwarded, std::map<std::string, std::string> query = {}) {
    sbx::server::HttpRequest req;
    req.method = "GET";
    req.path = path;
    req.key = &key;
    req.query = std::move(query);
    req.request_id = "req_000000000000000001";
    if (forwarded) req.headers.emplace_back(sbx::server::kForwardedHeader, "0");
    return api.handle(req);
  };
  std::string of2 = sbx::new_sandbox_id(2);
  auto loop = call("/v1/sandboxes/" + of2, true);
  CHECK(loop.status == 502);
  CHECK_THAT(loop.body, Catch::Contains("fleet settings disagree"));
  // Not passed on yet, its owner down: 503 naming the owner, never a wrong sandbox.
  auto down = call("/v1/sandboxes/" + of2, false);
  CHECK(down.status == 503);
  INFO(down.body);
  CHECK(json::parse(down.body)["error"]["owner"]["ordinal"] == 2);
  CHECK_THAT(down.body, Catch::Contains("manager 2 (http://127.0.0.1:2)"));
  // The list: every manager's or an error naming who is missing; scope=local is this one's alone.
  CHECK(call("/v1/sandboxes", false).status == 503);
  CHECK(call("/v1/sandboxes", false, {{"scope", "local"}}).status == 200);
  CHECK(call("/v1/sandboxes", true).status == 200);
  CHECK(call("/v1/sandboxes", false, {{"scope", "all"}}).status == 400);
}
