#include "cli/common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "backends/drivers.hpp"
#include "core/local_backend.hpp"
#include "remote/backend.hpp"
#include "remote/index.hpp"
#include "core/units.hpp"

namespace sbx::cli {

void add_global_flags(CLI::App& app, Globals& g) {
  app.add_option("--config", g.config, "configuration file (default $SBX_CONFIG or /etc/sbx/config.yaml)")
      ->type_name("FILE");
  app.add_option("--state-dir", g.state_dir, "state root (default $SBX_STATE_DIR or /var/lib/sbx)")->type_name("DIR");
}

std::vector<const CLI::Option*> add_spec_flags(CLI::App* sub, SpecFlags& f) {
  size_t before = sub->get_options().size();
  sub->add_option("--name", f.name, "a name to use instead of the id (unique; a-z, 0-9, _ . -)")->type_name("NAME");
  sub->add_option("--driver", f.driver, "driver: subprocess, runsc, microvm, deno, remote (default: fallback chain)")
      ->type_name("NAME");
  sub->add_option("--image", f.image, "read-only base: an image name or id (sbx image ls), host for the host view, or a directory (default: defaults.image)")
      ->type_name("IMAGE");
  sub->add_option("--memory", f.memory, "memory cap, e.g. 256M (default 512M)")->type_name("SIZE");
  sub->add_option("--pids", f.pids, "maximum number of processes (default 256)")->type_name("N");
  sub->add_option("--cpus", f.cpus, "CPU cap in cores, e.g. 0.5 (default 1)")->type_name("N");
  sub->add_option("--disk", f.disk, "size cap of the writable layer (default 1G)")->type_name("SIZE");
  sub->add_option("--network", f.network, "none or jail (default none)")->type_name("MODE");
  sub->add_option("--idle-timeout", f.idle_timeout, "collect after this long unused; 0 = never (default 10m)")
      ->type_name("DUR");
  sub->add_option("--idle-action", f.idle_action, "at the idle timeout: pause or remove (default remove; pause if --persistent)")
      ->type_name("ACTION");
  sub->add_option("--ttl", f.ttl, "collect this long after creation; 0 = never")->type_name("DUR");
  sub->add_flag("--persistent", f.persistent, "never removed by idle or TTL gc (paused when idle)");
  // One value per occurrence: `-l a=1 ID` must not swallow the id as a second label.
  sub->add_option("-l,--label", f.labels, "label KEY=VALUE (repeatable)")->type_name("KEY=VALUE")->allow_extra_args(false);
  sub->add_option("--allow", f.allow, "with --network jail: reach only this network or domain (repeatable)")
      ->type_name("CIDR|DOMAIN")
      ->allow_extra_args(false);
  auto all = sub->get_options();
  return {all.begin() + static_cast<std::ptrdiff_t>(before), all.end()};
}

std::map<std::string, std::string> parse_key_values(const std::vector<std::string>& items, const char* what) {
  std::map<std::string, std::string> out;
  for (auto& item : items) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(Errc::usage, std::string(what) + " '" + item + "' is not KEY=VALUE");
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

namespace {
// The record keeps idle timeouts and TTLs in seconds: cutting 1.5s to 1s (or
// 500ms to 0, "never") would quietly change what was asked for.
uint64_t whole_seconds(const std::string& text, const char* flag) {
  uint64_t ms = with_context(flag, [&] { return parse_duration_ms(text); });
  if (ms % 1000)
    throw Error(Errc::usage, std::string(flag) + " " + text + " is not a whole number of seconds")
        .set_hint("idle timeouts and TTLs count whole seconds, e.g. 2s, 90s, 10m");
  return ms / 1000;
}
}  // namespace

SandboxSpec spec_from_flags(const SpecFlags& f) {
  SandboxSpec s;
  s.name = f.name;
  s.driver = f.driver;
  s.image = f.image;
  auto mib = [](const std::string& v, const char* flag) -> uint64_t {
    uint64_t bytes = with_context(flag, [&] { return parse_size(v); });
    return (bytes + (1 << 20) - 1) >> 20;
  };
  if (!f.memory.empty()) s.limits.memory_mb = mib(f.memory, "--memory");
  if (!f.disk.empty()) s.limits.disk_mb = mib(f.disk, "--disk");
  if (!f.pids.empty()) {
    try {
      s.limits.pids = std::stoull(f.pids);
    } catch (...) {
      throw Error(Errc::usage, "--pids takes a whole number, not '" + f.pids + "'");
    }
  }
  if (!f.cpus.empty()) {
    try {
      s.limits.cpus = std::stod(f.cpus);
    } catch (...) {
      throw Error(Errc::usage, "--cpus takes a number of cores, not '" + f.cpus + "'");
    }
  }
  s.network = f.network;
  s.idle_timeout_s = f.idle_timeout.empty() ? kUseDefault : whole_seconds(f.idle_timeout, "--idle-timeout");
  s.ttl_s = f.ttl.empty() ? kUseDefault : whole_seconds(f.ttl, "--ttl");
  s.persistent = f.persistent;
  s.idle_action = f.idle_action;
  s.env = parse_key_values(f.env, "--env");
  s.labels = parse_key_values(f.labels, "--label");
  s.workdir = f.workdir;
  s.allow = f.allow;
  return s;
}

Config load_config(const Globals& g, const std::string& driver_flag) {
  ConfigInputs in = inputs_from_process();
  if (!g.config.empty()) in.config_flag = g.config;
  if (!g.state_dir.empty()) in.state_dir_flag = g.state_dir;
  if (!driver_flag.empty()) in.driver_flag = driver_flag;
  Config cfg = resolve_config(in);
  for (auto& w : cfg.warnings) warn(w);
  return cfg;
}

std::unique_ptr<Backend> backend_for_new(const Config& cfg, std::string& driver) {
  Selection sel = select_backend(cfg, builtin_drivers(), [&](const std::string& url) { return check_manager_health(cfg, url); });
  if (sel.fell_back && cfg.use_remote && !cfg.manager_url.empty())
    warn("falling back to the local " + sel.driver + " backend: " + sel.fallback_reason);
  if (sel.driver == "remote") {
    if (cfg.manager_url.empty())
      throw Error(Errc::invalid_argument, "--driver remote needs SANDBOX_MANAGER_URL").set_hint("set SANDBOX_MANAGER_URL to a running sbx serve");
    driver.clear();  // the manager picks its own default driver
    return std::make_unique<RemoteBackend>(cfg, cfg.manager_url, cfg.api_key);
  }
  driver = sel.driver;
  return std::make_unique<LocalBackend>(cfg, builtin_drivers());
}

namespace {
// The remembered remote sandbox whose id begins with prefix.
std::optional<std::string> remote_with_prefix(const Config& cfg, const std::string& prefix) {
  if (prefix.size() < 5) return std::nullopt;
  std::vector<std::string> hits;
  for (auto& [rid, url] : remote_sandboxes(cfg.state_dir))
    if (rid.compare(0, prefix.size(), prefix) == 0) hits.push_back(rid);
  if (hits.size() > 1)
    throw Error(Errc::invalid_argument, "'" + prefix + "' matches more than one sandbox")
        .set_hint("give more characters of the id");
  return hits.empty() ? std::nullopt : std::optional<std::string>(hits.front());
}
}  // namespace

std::unique_ptr<Backend> backend_for_existing(const Config& cfg, std::string& ref) {
  auto local = std::make_unique<LocalBackend>(cfg, builtin_drivers());
  if (ref.empty()) return local;
  auto here = [&](const std::optional<SandboxRecord>& rec) { return rec ? (ref = rec->id, true) : false; };
  auto there = [&](const std::optional<std::string>& id) { return id ? (ref = *id, true) : false; };
  // A sandbox remembers the manager that holds it, whatever the chain says today.
  auto remembered = [&] { return std::make_unique<RemoteBackend>(cfg, *remote_location(cfg.state_dir, ref), cfg.api_key); };
  if (valid_sandbox_id(ref)) {
    if (local->registry().has(ref)) return local;  // the backend reads it
    if (remote_location(cfg.state_dir, ref)) return remembered();
  } else {
    // This host's sandboxes share one owner: those without an sbx.owner label.
    if (valid_sandbox_name(ref)) {
      if (here(find_named(local->registry(), ref, std::string()))) return local;
      if (there(remote_named(cfg.state_dir, ref))) return remembered();
    }
    if (here(local->registry().find(ref))) return local;
    if (there(remote_with_prefix(cfg, ref))) return remembered();
  }
  if (cfg.use_remote && !cfg.manager_url.empty() && !check_manager_health(cfg, cfg.manager_url))
    return std::make_unique<RemoteBackend>(cfg, cfg.manager_url, cfg.api_key);
  return local;
}

std::vector<std::unique_ptr<Backend>> all_backends(const Config& cfg) {
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(std::make_unique<LocalBackend>(cfg, builtin_drivers()));
  if (cfg.use_remote && !cfg.manager_url.empty()) {
    if (auto problem = check_manager_health(cfg, cfg.manager_url))
      warn("manager " + cfg.manager_url + " skipped: " + *problem);
    else
      out.push_back(std::make_unique<RemoteBackend>(cfg, cfg.manager_url, cfg.api_key));
  }
  return out;
}

namespace {
// Optimal string alignment distance: one wrong, missing, extra or swapped letter costs 1.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// "did you mean X?" when one candidate is a likely typo of word.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates, const std::string& help) {
  size_t best = word.size() <= 5 ? 1 : 2;  // further off is another word, not a typo
  std::string guess;
  for (auto& c : candidates) {
    size_t dist = edit_distance(word, c);
    if (dist < best || (dist == best && guess.empty())) best = dist, guess = c;
  }
  return guess.empty() ? "see `" + help + " --help`" : "did you mean " + guess + "?";
}

const CLI::Option* option_named(const CLI::App& app, const std::string& name) {
  try {
    return app.get_option_no_throw(name);
  } catch (...) {
    return nullptr;
  }
}

std::vector<std::string> long_flags(const CLI::App& app) {
  std::vector<std::string> out;
  for (auto* o : app.get_options())
    for (auto& l : o->get_lnames()) out.push_back("--" + l);
  return out;
}

const CLI::App* subcommand_named(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->get_name() == name) return sub;
  return nullptr;
}
}  // namespace

std::optional<Error> explain_unknown(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* scope = &app;
  std::string path = "sbx";
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    const std::string& tok = args[i];
    if (tok.size() > 1 && tok[0] == '-') {
      std::string name = tok.substr(0, tok.find('='));
      const CLI::Option* opt = option_named(*scope, name);
      if (!opt) opt = option_named(app, name);  // global flags are taken everywhere
      if (!opt && name.rfind("--", 0) == 0) {
        auto flags = long_flags(*scope);
        if (scope != &app) for (auto& f : long_flags(app)) flags.push_back(f);
        return Error(Errc::usage, "unknown flag " + name + " for " + path).set_hint(did_you_mean(name, flags, path));
      }
      if (opt && opt->get_items_expected_min() > 0 && tok.find('=') == std::string::npos) ++i;
      continue;
    }
    if (auto* sub = subcommand_named(*scope, tok)) {
      scope = sub;
      path += " " + tok;
      continue;
    }
    // A word where a subcommand is wanted (sbx, sbx pool); elsewhere an operand, the subcommand's to judge.
    std::vector<std::string> names;
    for (const CLI::App* sub : scope->get_subcommands([](const CLI::App*) { return true; }))
      names.push_back(sub->get_name());
    if (!names.empty())
      return Error(Errc::usage, "unknown subcommand '" + tok + "' of " + path).set_hint(did_you_mean(tok, names, path));
  }
  return std::nullopt;
}

void print_error(const Error& e) {
  std::fprintf(stderr, "sbx: error: %s\n", e.what());
  if (!e.hint().empty()) std::fprintf(stderr, "sbx: hint: %s\n", e.hint().c_str());
}

int print_gc_report(const std::vector<PlacedGcAction>& actions, bool dry_run, bool json) {
  int failures = 0;
  nlohmann::json arr = nlohmann::json::array();
  for (auto& [where, a] : actions) {
    if (!dry_run && !a.done) ++failures;
    nlohmann::json j = {{"kind", a.kind}, {"target", a.target}, {"reason", a.reason}, {"done", a.done}, {"error", a.error}};
    if (!where.empty()) j["where"] = where;
    arr.push_back(std::move(j));
    if (json) continue;
    bool pause = a.kind == "pause";  // an idle sandbox whose idle action is pause
    const char* verb = dry_run ? (pause ? "would pause" : "would remove")
                       : a.done ? (pause ? "paused" : "removed")
                                : (pause ? "failed to pause" : "failed to remove");
    std::string place = where.empty() || where == "local" ? "" : " on " + where;
    std::printf("%s %s %s%s: %s%s%s\n", verb, pause ? "sandbox" : a.kind.c_str(), a.target.c_str(), place.c_str(), a.reason.c_str(),
                a.error.empty() ? "" : " — ", a.error.c_str());
  }
  if (json) std::printf("%s\n", nlohmann::json{{"dry_run", dry_run}, {"actions", arr}}.dump(2).c_str());
  else if (arr.empty()) std::printf("nothing to collect\n");
  return failures ? exit_status(Errc::io) : 0;
}

void warn(const std::string& message) { std::fprintf(stderr, "sbx: warning: %s\n", message.c_str()); }

bool is_tty(int fd) { return ::isatty(fd) == 1; }

int parse_pid(const std::string& text) {
  size_t used = 0;
  long pid = 0;
  try {
    pid = std::stol(text, &used);
  } catch (...) {
  }
  if (used != text.size() || pid <= 0 || pid > INT32_MAX)
    throw Error(Errc::usage, "'" + text + "' is not a process id").set_hint("`sbx ps ID` lists the background processes and their pids");
  return static_cast<int>(pid);
}

void register_per_sandbox(CLI::App& app, Globals& g, Outcome& out, const std::string& name, const std::string& help,
                          std::function<SandboxRecord(Backend&, const std::string&)> fn) {
  auto* sub = app.add_subcommand(name, help);
  auto ids = std::make_shared<std::vector<std::string>>();
  sub->add_option("ids", *ids, "sandbox ids (or unambiguous prefixes)")->required();
  sub->callback([&g, &out, ids, fn = std::move(fn)] {
    Config cfg = load_config(g);
    int failures = 0;
    for (auto& id : *ids) {
      try {
        std::printf("%s\n", fn(*backend_for_existing(cfg, id), id).id.c_str());
      } catch (const Error& e) {
        print_error(e);
        ++failures;
      }
    }
    out.status = failures ? exit_status(Errc::io) : 0;
  });
}

}  // namespace sbx::cli
