// sbx doctor: what works on this host, what does not and what to do about
// it, and which backend the fallback chain picks with this configuration.
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>

#include "backends/drivers.hpp"
#include "cli/common.hpp"
#include "core/fsutil.hpp"

namespace sbx::cli {

namespace {

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

nlohmann::json probe_json(const Probe& p) {
  return {{"name", p.name}, {"ok", p.ok}, {"detail", p.detail}, {"remedy", p.remedy}, {"advisory", p.advisory}};
}

void print_probe(const Probe& p, const char* indent) {
  const char* mark = p.ok ? "\u2713" : p.advisory ? "!" : "\u2717";
  std::printf("%s%s %s: %s\n", indent, mark, p.name.c_str(), p.detail.c_str());
  if (!p.ok && !p.remedy.empty()) std::printf("%s    fix: %s\n", indent, p.remedy.c_str());
}

}  // namespace

void register_doctor(CLI::App& app, Globals& g, Outcome& out) {
  auto* sub = app.add_subcommand("doctor", "Check what works on this host and which backend would run");
  struct State {
    bool json = false;
    std::string driver;
  };
  auto st = std::make_shared<State>();
  sub->add_flag("--json", st->json, "JSON report");
  sub->add_option("--driver", st->driver, "check this driver instead of the configured chain")->type_name("NAME");
  sub->callback([&g, &out, st] {
    Config cfg = load_config(g, st->driver);
    nlohmann::json report;
    utsname u{};
    ::uname(&u);
    std::vector<Probe> host{state_root_probe(cfg)};
    host.push_back({true, "kernel", std::string(u.sysname) + " " + u.release + " " + u.machine, ""});
    report["version"] = SBX_VERSION;
    report["config_file"] = cfg.config_file;
    report["origin"] = cfg.origin;
    for (auto& p : host) report["host"].push_back(probe_json(p));

    std::map<std::string, bool> driver_ok;
    for (auto& d : builtin_drivers()) {
      auto probes = d.probe(cfg);
      bool ok = true;
      for (auto& p : probes) ok = ok && (p.ok || p.advisory);
      driver_ok[d.name] = ok;
      nlohmann::json dj{{"name", d.name}, {"summary", d.summary}, {"ok", ok}, {"checks", nlohmann::json::array()}};
      for (auto& p : probes) dj["checks"].push_back(probe_json(p));
      report["drivers"].push_back(dj);
    }
    bool usable = host.front().ok;
    nlohmann::json sel_json;
    Selection sel = explain_selection(cfg, builtin_drivers(), nullptr);
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
