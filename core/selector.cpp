#include "core/selector.hpp"

#include "core/error.hpp"

namespace sbx {

Selection select_backend(const Config& cfg, const DriverTable& drivers, const HealthCheck& health) {
  Selection s = explain_selection(cfg, drivers, health);
  if (s.failure) throw *s.failure;
  return s;
}

Selection explain_selection(const Config& cfg, const DriverTable& drivers, const HealthCheck& health) {
  Selection s;
  if (!cfg.driver_override.empty()) {
    // "remote" is no row of the table: it is the manager's backend, not a local driver.
    if (cfg.driver_override != "remote" && !find_driver(drivers, cfg.driver_override)) {
      s.failure = Error(Errc::invalid_argument, "unknown driver '" + cfg.driver_override + "'");
      s.failure->set_hint("drivers: " + driver_names(drivers) + ", remote");
      return s;
    }
    s.driver = cfg.driver_override;
    s.steps.push_back("--driver " + s.driver + " given: the fallback chain is skipped");
    return s;
  }
  if (!cfg.use_remote) {
    s.steps.push_back("USE_REMOTE_SANDBOX is false: the remote manager is not used");
  } else if (cfg.manager_url.empty()) {
    s.fell_back = true;
    s.fallback_reason = "SANDBOX_MANAGER_URL is not set";
    s.steps.push_back("USE_REMOTE_SANDBOX is true but SANDBOX_MANAGER_URL is not set: falling back");
  } else {
    std::optional<std::string> problem = "no health check available";
    try {
      if (health) problem = health(cfg.manager_url);
    } catch (const Error& e) {
      s.steps.push_back(e.message() + ": not falling back (fix the configuration; a refused key is no outage)");
      s.failure = e;
      return s;
    }
    if (!problem) {
      s.driver = "remote";
      s.steps.push_back("manager " + cfg.manager_url + " is healthy: using it (" + cfg.remote_backend + ")");
      return s;
    }
    s.fell_back = true;
    s.fallback_reason = "manager " + cfg.manager_url + " is unhealthy: " + *problem;
    s.steps.push_back(s.fallback_reason + ": falling back");
  }
  if (cfg.local_backend == "none") {
    s.steps.push_back("LOCAL_SANDBOX_BACKEND is none: failing closed");
    std::string why = s.fell_back ? s.fallback_reason : "USE_REMOTE_SANDBOX is false";
    s.failure = Error(Errc::unavailable, "no sandbox backend: " + why + ", and LOCAL_SANDBOX_BACKEND=none forbids local execution");
    if (!cfg.use_remote)
      s.failure->set_hint((cfg.manager_url.empty() ? std::string("set USE_REMOTE_SANDBOX=true with SANDBOX_MANAGER_URL")
                                                   : "set USE_REMOTE_SANDBOX=true to use the manager at " + cfg.manager_url) +
                          ", or LOCAL_SANDBOX_BACKEND to deno or subprocess");
    else if (cfg.manager_url.empty())
      s.failure->set_hint("set SANDBOX_MANAGER_URL to a running sbx serve, or choose a local backend");
    else
      s.failure->set_hint("start or fix the manager at " + cfg.manager_url +
                          ", or set LOCAL_SANDBOX_BACKEND to deno or subprocess");
    return s;
  }
  if (!find_driver(drivers, cfg.local_backend)) {
    s.steps.push_back("LOCAL_SANDBOX_BACKEND is " + cfg.local_backend + ", which this build does not have");
    s.failure = Error(Errc::unavailable, (s.fell_back ? s.fallback_reason + ", and the" : std::string("the")) +
                                             " local backend '" + cfg.local_backend + "' is not available in this build of sbx");
    s.failure->set_hint("set LOCAL_SANDBOX_BACKEND=subprocess or pass --driver subprocess (drivers: " +
                        driver_names(drivers) + ")");
    return s;
  }
  s.driver = cfg.local_backend;
  s.steps.push_back("LOCAL_SANDBOX_BACKEND is " + s.driver + ": using the local " + s.driver + " driver");
  return s;
}

}  // namespace sbx
