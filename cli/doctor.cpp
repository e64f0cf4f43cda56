// sbx doctor: what works on this host, what does not and what to do about
// it, and which backend the fallback chain picks with this configuration.
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>

#include "backends/drivers.hpp"
#include "cli/common.hpp"
#include "core/fsutil.hpp"
#include "core/images.hpp"
#include "core/json_number.hpp"
#include "core/units.hpp"
#include "remote/backend.hpp"
#include "remote/probe.hpp"

namespace sbx::cli {

namespace {

std::string fmt_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  return buf;
}

Probe state_root_probe(const Config& cfg) {
  Probe p{false, "state root " + cfg.state_dir, "", "choose a writable state root with --state-dir or SBX_STATE_DIR"};
  try {
    make_dirs(cfg.state_dir, 0711);
    p.ok = ::access(cfg.state_dir.c_str(), W_OK) == 0;
    p.detail = p.ok ? "writable" : "not writable";
  } catch (const Error& e) {
    p.detail = e.what();
  }
  return p;
}

// The image sandboxes get when they name none: built or not. Advisory: without
// the built-in default, subprocess and runsc sandboxes see the host's /usr.
Probe default_image_probe(const Config& cfg) {
  const std::string& name = cfg.default_image;
  Probe p{false, "default image " + name, "", "run sbx image build " + name, true};
  if (name == images::kHostView) {
    p.ok = true;
    p.detail = "the host view (defaults.image is host)";
    return p;
  }
  try {
    auto store = images::store_for(cfg);
    if (auto img = store.find(name)) {
      p.ok = true;
      p.detail = img->id.substr(0, 19) + ", " + format_size(img->meta.value("size", uint64_t{0})) + ", in " + store.dir();
    } else {
      auto origin = cfg.origin.find("defaults.image");
      // The built-in default missing costs packages; a configured one missing fails every create.
      p.advisory = origin == cfg.origin.end() || origin->second == "default";
      p.detail = "not built (in " + store.dir() + ")" +
                 (p.advisory ? ": sandboxes get the host view" : ": creating a sandbox fails until it is");
    }
  } catch (const Error& e) {
    p.detail = e.what();
  }
  return p;
}

nlohmann::json probe_json(const Probe& p) {
  return {{"name", p.name}, {"ok", p.ok}, {"detail", p.detail}, {"remedy", p.remedy}, {"advisory", p.advisory}};
}

void print_probe(const Probe& p, const char* indent) {
  const char* mark = p.ok ? "\u2713" : p.advisory ? "!" : "\u2717";
  std::printf("%s%s %s: %s\n", indent, mark, p.name.c_str(), p.detail.c_str());
  if (!p.ok && !p.remedy.empty()) std::printf("%s    fix: %s\n", indent, p.remedy.c_str());
}

// The operator's screen for a manager: each check with its remedy.
int remote_report(const Config& cfg, const std::string& url, bool as_json) {
  ManagerProbe p = probe_manager(cfg, url);
  std::vector<Probe> checks;
  checks.push_back({p.reachable, "reachable", p.reachable ? "connected in " + fmt_ms(p.rtt_ms) : p.error,
                    url.rfind("https://", 0) == 0 && p.error.find("certificate") != std::string::npos
                        ? "the certificate is not trusted: set SBX_CA_FILE to the CA bundle that signed it"
                        : "check the URL and that `sbx serve` runs there and is reachable from here"});
  if (p.reachable) {
    checks.push_back({true, "TLS", p.tls ? "https, certificate verified" : "plain http (use --tls-cert/--tls-key on a network)", ""});
    bool auth = p.http_status != 401 && p.http_status != 403;
    checks.push_back({auth, "auth",
                      auth ? "the API key was accepted"
                           : "the API key was refused (HTTP " + std::to_string(p.http_status) +
                                 "); sbx stops there and never falls back to local execution",
                      "set ADMIN_API_KEY to the manager's key"});
    if (auth && p.health) {
      auto& h = *p.health;
      std::string perms = h.contains("key") ? h["key"].value("permissions", "?") : "?";
      std::string name = h.contains("key") ? h["key"].value("name", "?") : "?";
      bool can_run = perms.find("sandboxes:run") != std::string::npos;
      checks.push_back({can_run, "permissions", "key '" + name + "': " + perms,
                        "exec needs sandboxes:run; ask the operator for a key that has it"});
      checks.push_back({true, "manager version", h.value("version", "?"), ""});
      bool healthy = p.http_status == 200;
      std::string drivers;
      for (auto& d : h.value("drivers", nlohmann::json::array()))
        drivers += (drivers.empty() ? "" : ", ") + d.value("name", "?") + (d.value("ok", false) ? " ok" : " FAILING");
      checks.push_back({healthy, "health", std::string(healthy ? "healthy" : h.value("status", "unhealthy")) +
                                               " (default driver " + h.value("default_driver", "?") + "; " + drivers + ")",
                        "run `sbx doctor` on the manager's host"});
      if (h.contains("sandboxes")) {
        auto total = json_number<int64_t>(h["sandboxes"].value("total", nlohmann::json())).value_or(0);
        checks.push_back({true, "sandboxes", std::to_string(total) + " " +
                                                 h["sandboxes"].value("by_state", nlohmann::json::object()).dump(),
                          ""});
      }
      checks.push_back({p.rtt_ms < 100, "round trip", fmt_ms(p.rtt_ms), "the manager is far or loaded"});
      if (p.clock_skew_ms) {
        bool ok = std::llabs(*p.clock_skew_ms) < 2000;
        checks.push_back({ok, "clock skew", std::to_string(*p.clock_skew_ms) + " ms", "sync both clocks (NTP): idle timeouts and TTLs depend on them"});
      }
    } else if (auth) {
      checks.push_back({false, "health", "HTTP " + std::to_string(p.http_status) + " without a JSON body",
                        "is this an sbx manager? check the URL"});
    }
  }
  bool ok = true;
  for (auto& c : checks) ok = ok && (c.ok || c.advisory);
  if (as_json) {
    nlohmann::json j{{"url", url}, {"ok", ok}, {"checks", nlohmann::json::array()}};
    for (auto& c : checks) j["checks"].push_back(probe_json(c));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("manager %s\n", url.c_str());
    for (auto& c : checks) print_probe(c, "    ");
    std::printf("%s\n", ok ? "\u2713 the manager is usable" : "\u2717 the manager is not usable from here");
  }
  return ok ? 0 : 1;
}

}  // namespace

void register_doctor(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("doctor", "Check what works on this host and which backend would run");
  struct State {
    bool json = false;
    std::string driver;
    std::vector<std::string> remote;
  };
  auto st = std::make_shared<State>();
  sub->add_flag("--json", st->json, "JSON report");
  sub->add_option("--driver", st->driver, "check this driver instead of the configured chain")->type_name("NAME");
  auto* remote = sub->add_option("--remote", st->remote, "check the manager at URL (default SANDBOX_MANAGER_URL)")
                     ->type_name("URL")
                     ->expected(0, 1);
  sub->callback([&g, &out, st, remote] {
    Config cfg = load_config(g, st->driver);
    if (remote->count() > 0) {
      // A bare --remote leaves an empty value (CLI11) or none: the configured manager then.
      std::string url = st->remote.empty() || st->remote.front().empty() ? cfg.manager_url : st->remote.front();
      if (url.empty())
        throw Error(Errc::usage, "no manager to check").set_hint("sbx doctor --remote URL, or set SANDBOX_MANAGER_URL");
      while (!url.empty() && url.back() == '/') url.pop_back();
      out.status = remote_report(cfg, url, st->json);
      return;
    }
    nlohmann::json report;
    utsname u{};
    ::uname(&u);
    std::vector<Probe> host{state_root_probe(cfg)};
    host.push_back({true, "kernel", std::string(u.sysname) + " " + u.release + " " + u.machine, ""});
    host.push_back(default_image_probe(cfg));
    report["version"] = SBX_VERSION;
    report["config_file"] = cfg.config_file;
    report["origin"] = cfg.origin;
    for (auto& p : host) report["host"].push_back(probe_json(p));

    std::map<std::string, bool> driver_ok;
    for (auto& d : builtin_drivers()) {
      auto probes = d.probe(cfg, true);
      bool ok = true;
      for (auto& p : probes) ok = ok && (p.ok || p.advisory);
      // Advisory: a driver without them still runs sandboxes.
      if (ok) probes.push_back(d.make(cfg)->memory_snapshots());
      driver_ok[d.name] = ok;
      nlohmann::json dj{{"name", d.name}, {"summary", d.summary}, {"ok", ok}, {"checks", nlohmann::json::array()}};
      for (auto& p : probes) dj["checks"].push_back(probe_json(p));
      report["drivers"].push_back(dj);
    }
    // The remote manager is a link of the chain, not a driver: checked once, here.
    if (cfg.use_remote && !cfg.manager_url.empty()) {
      Probe p{false, "manager " + cfg.manager_url, "",
              "start sbx serve there, or check the URL and ADMIN_API_KEY; `sbx doctor --remote` says more"};
      try {
        auto problem = check_manager_health(cfg, cfg.manager_url);
        p.ok = !problem;
        p.detail = problem ? *problem : "healthy";
      } catch (const Error& e) {  // a refused key: a configuration error, not an unhealthy manager
        p.detail = e.message();
        p.remedy = e.hint();
      }
      driver_ok["remote"] = p.ok;
      report["remote"] = probe_json(p);
    }
    bool usable = host.front().ok;
    nlohmann::json sel_json;
    // The check above has just asked (and cached) the manager's health.
    Selection sel = explain_selection(cfg, builtin_drivers(),
                                      [&](const std::string& url) { return check_manager_health(cfg, url); });
    sel_json = {{"driver", sel.driver}, {"steps", sel.steps}, {"fell_back", sel.fell_back}};
    if (sel.failure) {
      usable = false;
      sel_json["driver"] = nullptr;
      sel_json["error"] = sel.failure->what();
      sel_json["hint"] = sel.failure->hint();
    } else if (!driver_ok[sel.driver]) {
      usable = false;
      sel_json["error"] = "driver " + sel.driver + " cannot run on this host (see its checks above)";
    }
    sel_json["ok"] = usable;
    report["selection"] = sel_json;
    out.status = usable ? 0 : 1;

    if (st->json) {
      std::printf("%s\n", report.dump(2).c_str());
      return;
    }
    std::printf("sbx %s%s\n", SBX_VERSION, cfg.config_file.empty() ? "" : (" (config " + cfg.config_file + ")").c_str());
    for (auto& p : host) print_probe(p, "");
    for (auto& d : report["drivers"]) {
      std::printf("%s driver %s: %s\n", d["ok"].get<bool>() ? "\u2713" : "\u2717", d["name"].get<std::string>().c_str(),
                  d["summary"].get<std::string>().c_str());
      for (auto& c : d["checks"])
        print_probe({c["ok"], c["name"], c["detail"], c["remedy"], c["advisory"]}, "    ");
    }
    if (report.contains("remote")) {
      auto& r = report["remote"];
      print_probe({r["ok"], r["name"], r["detail"], r["remedy"], r["advisory"]}, "");
    }
    std::printf("backend selection:\n");
    if (sel_json.contains("steps"))
      for (auto& s : sel_json["steps"]) std::printf("    %s\n", s.get<std::string>().c_str());
    if (sel_json.contains("error")) {
      std::printf("\u2717 %s\n", sel_json["error"].get<std::string>().c_str());
      if (sel_json.contains("hint") && !sel_json["hint"].get<std::string>().empty())
        std::printf("    fix: %s\n", sel_json["hint"].get<std::string>().c_str());
    } else {
      std::printf("\u2713 sandboxes run on the %s driver\n", sel_json["driver"].get<std::string>().c_str());
    }
  });
}

}  // namespace sbx::cli
