#include "core/selector.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/config.hpp"
#include "core/driver.hpp"
#include "tests/unit/helpers.hpp"

using sbx::Config;
using sbx::DriverInfo;
using sbx::DriverTable;
using sbx::Errc;
using sbx::Selection;
using sbx_test::contains;
using sbx_test::error_of;

namespace {

const std::string kUrl = "http://manager.internal:8000";

std::vector<sbx::Probe> no_probes(const Config&, bool) { return {}; }
std::unique_ptr<sbx::Driver> no_driver(const Config&) { return nullptr; }

DriverInfo row(const std::string& name) { return DriverInfo{name, "fake " + name, &no_probes, &no_driver}; }

// The table lists local drivers only; the remote manager is the selector's own link.
DriverTable local_only() { return {row("subprocess"), row("deno")}; }

// A health check that records its calls and answers as told.
struct FakeHealth {
  std::optional<std::string> problem;
  std::vector<std::string> calls;
  sbx::HealthCheck fn() {
    return [this](const std::string& url) {
      calls.push_back(url);
      return problem;
    };
  }
};

Config cfg(bool use_remote, const std::string& url, const std::string& local = "deno") {
  Config c;
  c.use_remote = use_remote;
  c.manager_url = url;
  c.local_backend = local;
  return c;
}

std::string all_steps(const Selection& s) {
  std::string out;
  for (auto& st : s.steps) out += st + "\n";
  return out;
}

}  // namespace

TEST_CASE("selector: USE_REMOTE_SANDBOX=false uses the local backend without asking the manager", "[selector]") {
  FakeHealth h;
  for (const std::string& url : {std::string(), kUrl}) {
    CAPTURE(url);
    Selection s = sbx::explain_selection(cfg(false, url), local_only(), h.fn());
    CHECK(s.driver == "deno");
    CHECK_FALSE(s.fell_back);
    CHECK(s.fallback_reason.empty());
    CHECK_FALSE(s.failure);
    CHECK(contains(all_steps(s), "USE_REMOTE_SANDBOX is false"));
  }
  CHECK(h.calls.empty());
  Selection sub = sbx::select_backend(cfg(false, kUrl, "subprocess"), local_only(), h.fn());
  CHECK(sub.driver == "subprocess");
}

TEST_CASE("selector: remote on but SANDBOX_MANAGER_URL unset falls back to local", "[selector]") {
  FakeHealth h;
  Selection s = sbx::explain_selection(cfg(true, ""), local_only(), h.fn());
  CHECK(s.driver == "deno");
  CHECK(s.fell_back);
  CHECK(contains(s.fallback_reason, "SANDBOX_MANAGER_URL"));
  CHECK_FALSE(s.failure);
  CHECK(h.calls.empty());
  CHECK(s.steps.size() >= 2);
}

TEST_CASE("selector: a healthy manager is used", "[selector]") {
  FakeHealth h;
  Selection s = sbx::select_backend(cfg(true, kUrl), local_only(), h.fn());
  CHECK(s.driver == "remote");
  CHECK_FALSE(s.fell_back);
  CHECK_FALSE(s.failure);
  REQUIRE(h.calls.size() == 1);
  CHECK(h.calls[0] == kUrl);
  CHECK(contains(all_steps(s), kUrl));
  CHECK(contains(all_steps(s), "syd"));
  // Even with LOCAL_SANDBOX_BACKEND=none, a healthy manager is fine.
  Selection n = sbx::select_backend(cfg(true, kUrl, "none"), local_only(), h.fn());
  CHECK(n.driver == "remote");
  CHECK_FALSE(n.failure);
}

TEST_CASE("selector: an unhealthy manager falls back and the reason names the URL", "[selector]") {
  FakeHealth h;
  h.problem = "connection refused";
  Selection s = sbx::explain_selection(cfg(true, kUrl), local_only(), h.fn());
  CHECK(s.driver == "deno");
  CHECK(s.fell_back);
  CHECK(contains(s.fallback_reason, kUrl));
  CHECK(contains(s.fallback_reason, "connection refused"));
  CHECK_FALSE(s.failure);
  CHECK(h.calls.size() == 1);
}

TEST_CASE("selector: a manager that refuses the key is an error, never a fallback", "[selector]") {
  // The manager is up and says no: running the code on this host instead would
  // hide a configuration error (and run untrusted code where it was not meant to).
  for (Errc code : {Errc::unauthenticated, Errc::forbidden}) {
    for (const std::string& local : {std::string("subprocess"), std::string("deno"), std::string("none")}) {
      CAPTURE(sbx::code_name(code), local);
      std::vector<std::string> calls;
      sbx::HealthCheck refusing = [&](const std::string& url) -> std::optional<std::string> {
        calls.push_back(url);
        throw sbx::Error(code, "manager " + url + " refused the API key (HTTP 401: no)").set_hint("set ADMIN_API_KEY");
      };
      Selection s = sbx::explain_selection(cfg(true, kUrl, local), local_only(), refusing);
      CHECK(s.driver.empty());
      CHECK_FALSE(s.fell_back);
      REQUIRE(s.failure);
      CHECK(s.failure->code() == code);
      CHECK(contains(s.failure->what(), kUrl));
      CHECK(contains(s.failure->what(), "refused the API key"));
      CHECK(s.failure->hint() == "set ADMIN_API_KEY");
      CHECK(contains(all_steps(s), "not falling back"));
      CHECK_FALSE(contains(all_steps(s), "using the local"));
      auto e = error_of([&] { sbx::select_backend(cfg(true, kUrl, local), local_only(), refusing); });
      CHECK(e.code() == code);
      CHECK(calls.size() == 2);
    }
  }
}

TEST_CASE("selector: no health check function counts as unhealthy", "[selector]") {
  Selection s = sbx::explain_selection(cfg(true, kUrl), local_only(), sbx::HealthCheck{});
  CHECK(s.driver == "deno");
  CHECK(s.fell_back);
  CHECK(contains(s.fallback_reason, kUrl));
}

TEST_CASE("selector: LOCAL_SANDBOX_BACKEND=none fails closed in every fallback case", "[selector]") {
  FakeHealth h;
  h.problem = "HTTP 500";
  struct Case {
    const char* name;
    Config c;
    DriverTable table;
  };
  std::vector<Case> cases = {
      {"remote off, no URL", cfg(false, "", "none"), local_only()},
      {"remote off, URL set", cfg(false, kUrl, "none"), local_only()},
      {"URL unset", cfg(true, "", "none"), local_only()},
      {"unhealthy", cfg(true, kUrl, "none"), local_only()},
  };
  for (auto& c : cases) {
    CAPTURE(c.name);
    Selection s = sbx::explain_selection(c.c, c.table, h.fn());
    CHECK(s.driver.empty());
    REQUIRE(s.failure);
    CHECK(s.failure->code() == Errc::unavailable);
    CHECK(contains(s.failure->what(), "LOCAL_SANDBOX_BACKEND=none"));
    CHECK_FALSE(s.failure->hint().empty());
    if (!c.c.manager_url.empty()) CHECK(contains(s.failure->hint(), kUrl));
    else CHECK(contains(s.failure->hint(), "SANDBOX_MANAGER_URL"));
    CHECK(contains(all_steps(s), "none"));
    // select_backend throws that same failure.
    auto e = error_of([&] { sbx::select_backend(c.c, c.table, h.fn()); });
    CHECK(e.code() == Errc::unavailable);
    CHECK(std::string(e.what()) == std::string(s.failure->what()));
  }
}

TEST_CASE("selector: a fail-closed failure after an unhealthy manager names the URL", "[selector]") {
  FakeHealth h;
  h.problem = "HTTP 503";
  Selection s = sbx::explain_selection(cfg(true, kUrl, "none"), local_only(), h.fn());
  REQUIRE(s.failure);
  CHECK(contains(s.failure->what(), kUrl));
  CHECK(contains(s.failure->what(), "HTTP 503"));
}

TEST_CASE("selector: --driver skips the chain", "[selector]") {
  FakeHealth h;
  Config c = cfg(true, kUrl, "none");
  c.driver_override = "subprocess";
  Selection s = sbx::select_backend(c, local_only(), h.fn());
  CHECK(s.driver == "subprocess");
  CHECK_FALSE(s.fell_back);
  CHECK_FALSE(s.failure);
  CHECK(h.calls.empty());
  REQUIRE(s.steps.size() == 1);
  CHECK(contains(s.steps[0], "--driver subprocess"));

  c.driver_override = "remote";
  h.problem = "down";
  Selection r = sbx::select_backend(c, local_only(), h.fn());
  CHECK(r.driver == "remote");
  CHECK(h.calls.empty());
}

TEST_CASE("selector: an unknown --driver is invalid_argument listing the drivers", "[selector]") {
  FakeHealth h;
  Config c = cfg(true, kUrl);
  c.driver_override = "firecracker";
  Selection s = sbx::explain_selection(c, local_only(), h.fn());
  CHECK(s.driver.empty());
  REQUIRE(s.failure);
  CHECK(s.failure->code() == Errc::invalid_argument);
  CHECK(contains(s.failure->what(), "firecracker"));
  CHECK(contains(s.failure->hint(), "subprocess"));
  CHECK(contains(s.failure->hint(), "deno"));
  CHECK(contains(s.failure->hint(), "remote"));
  CHECK(error_of([&] { sbx::select_backend(c, local_only(), h.fn()); }).code() == Errc::invalid_argument);
  CHECK(h.calls.empty());
  // "remote" is no row of the table, yet always a valid --driver: the manager's backend.
  c.driver_override = "remote";
  CHECK(sbx::select_backend(c, local_only(), h.fn()).driver == "remote");
}

TEST_CASE("selector: a local backend missing from the table is unavailable with a hint", "[selector]") {
  FakeHealth h;
  DriverTable only_sub = {row("subprocess")};
  for (bool remote : {false, true}) {
    CAPTURE(remote);
    Selection s = sbx::explain_selection(cfg(remote, "", "deno"), only_sub, h.fn());
    CHECK(s.driver.empty());
    REQUIRE(s.failure);
    CHECK(s.failure->code() == Errc::unavailable);
    CHECK(contains(s.failure->what(), "deno"));
    CHECK(contains(s.failure->hint(), "subprocess"));
    CHECK(error_of([&] { sbx::select_backend(cfg(remote, "", "deno"), only_sub, h.fn()); }).code() ==
          Errc::unavailable);
  }
  // An empty table: nothing to run, still a clean failure.
  Selection e = sbx::explain_selection(cfg(false, ""), DriverTable{}, h.fn());
  REQUIRE(e.failure);
  CHECK(e.failure->code() == Errc::unavailable);
}

TEST_CASE("selector: a missing local backend after an unhealthy manager names the URL", "[selector][bug]") {
  // selector.hpp: "When the chain ends at `none` (or at a backend this build
  // lacks), `failure` names the manager URL and what went wrong." The failure
  // only says the local backend is missing; why the manager was skipped is lost.
  FakeHealth h;
  h.problem = "connection refused";
  DriverTable table = {row("subprocess")};
  Selection s = sbx::explain_selection(cfg(true, kUrl, "deno"), table, h.fn());
  REQUIRE(s.failure);
  CHECK(s.failure->code() == Errc::unavailable);
  CHECK(contains(s.failure->what(), kUrl));
}
