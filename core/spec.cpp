#include "core/spec.hpp"

#include <sys/random.h>

#include <atomic>
#include <chrono>
#include <set>

#include "core/error.hpp"
#include "core/json_number.hpp"

namespace sbx {

using nlohmann::json;

std::string_view state_name(SandboxState s) {
  switch (s) {
    case SandboxState::creating: return "creating";
    case SandboxState::running: return "running";
    case SandboxState::dead: return "dead";
    case SandboxState::failed: return "failed";
    case SandboxState::pooled: return "pooled";
    case SandboxState::paused: return "paused";
  }
  return "failed";
}

SandboxState parse_state(std::string_view s) {
  if (s == "creating") return SandboxState::creating;
  if (s == "running") return SandboxState::running;
  if (s == "dead") return SandboxState::dead;
  if (s == "failed") return SandboxState::failed;
  if (s == "pooled") return SandboxState::pooled;
  if (s == "paused") return SandboxState::paused;
  throw Error(Errc::invalid_argument, "unknown sandbox state '" + std::string(s) + "'")
      .set_hint("states are creating, running, paused, dead, failed, pooled");
}

void reject_unknown_fields(const json& j, std::initializer_list<const char*> allowed, std::string_view what) {
  if (!j.is_object()) throw Error(Errc::invalid_argument, std::string(what) + " must be a JSON object");
  std::set<std::string_view> ok(allowed.begin(), allowed.end());
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!ok.count(it.key())) {
      std::string list;
      for (auto* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      throw Error(Errc::invalid_argument, "unknown field '" + it.key() + "' in " + std::string(what))
          .set_hint("accepted fields: " + list);
    }
  }
}

namespace {
// Reads an optional field with a type check whose error names the field.
template <class T>
void opt(const json& j, const char* key, T& out) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    out = number_field(j, key, out);  // range-checked: a cast of 1e66 to an integer is undefined
  } else {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    try {
      out = it->get<T>();
    } catch (const json::exception&) {
      throw Error(Errc::invalid_argument, std::string("field '") + key + "' has the wrong type");
    }
  }
}
}  // namespace

void to_json(json& j, const Limits& l) {
  j = json{{"cpus", l.cpus}, {"memory_mb", l.memory_mb}, {"pids", l.pids}, {"disk_mb", l.disk_mb}};
}
void from_json(const json& j, Limits& l) {
  reject_unknown_fields(j, {"cpus", "memory_mb", "pids", "disk_mb"}, "limits");
  opt(j, "cpus", l.cpus);
  opt(j, "memory_mb", l.memory_mb);
  opt(j, "pids", l.pids);
  opt(j, "disk_mb", l.disk_mb);
  if (l.cpus < 0) throw Error(Errc::invalid_argument, "limits.cpus must not be negative");
}

void to_json(json& j, const SandboxSpec& s) {
  j = json{{"name", s.name},               {"driver", s.driver},           {"image", s.image},
           {"limits", s.limits},           {"network", s.network},
           {"idle_timeout_s", s.idle_timeout_s}, {"ttl_s", s.ttl_s},
           {"persistent", s.persistent},   {"env", s.env},
           {"labels", s.labels},           {"workdir", s.workdir},
           {"allow", s.allow}};
  // Only when set: most specs have none, and older readers reject unknown fields.
  if (!s.from_snapshot.empty()) j["from_snapshot"] = s.from_snapshot;
  if (!s.idle_action.empty()) j["idle_action"] = s.idle_action;
}
void from_json(const json& j, SandboxSpec& s) {
  reject_unknown_fields(j, {"name", "driver", "image", "limits", "network", "idle_timeout_s", "ttl_s", "persistent",
                            "env", "labels", "workdir", "allow", "from_snapshot", "idle_action"},
                        "sandbox spec");
  opt(j, "name", s.name);  // absent from records written before names existed
  opt(j, "driver", s.driver);
  opt(j, "image", s.image);
  if (j.contains("limits") && !j["limits"].is_null()) s.limits = j["limits"].get<Limits>();
  opt(j, "network", s.network);
  opt(j, "idle_timeout_s", s.idle_timeout_s);
  opt(j, "ttl_s", s.ttl_s);
  opt(j, "persistent", s.persistent);
  opt(j, "env", s.env);
  opt(j, "labels", s.labels);
  opt(j, "workdir", s.workdir);
  opt(j, "allow", s.allow);
  opt(j, "from_snapshot", s.from_snapshot);
  opt(j, "idle_action", s.idle_action);
}

void to_json(json& j, const SandboxRecord& r) {
  j = json{{"id", r.id},
           {"spec", r.spec},
           {"state", state_name(r.state)},
           {"created_ms", r.created_ms},
           {"last_active_ms", r.last_active_ms},
           {"agent_pid", r.agent_pid},
           {"agent_start", r.agent_start},
           {"uid_base", r.uid_base},
           {"slot", r.slot},
           {"error", r.error},
           {"driver_data", r.driver_data},
           {"from_pool", r.from_pool}};
  if (r.one_shot.pid)
    j["one_shot"] = {{"pid", r.one_shot.pid}, {"start", r.one_shot.start}, {"pid_ns", r.one_shot.pid_ns}};
}
void from_json(const json& j, SandboxRecord& r) {
  r.id = j.at("id").get<std::string>();
  r.spec = j.at("spec").get<SandboxSpec>();
  r.state = parse_state(j.at("state").get<std::string>());
  opt(j, "created_ms", r.created_ms);
  opt(j, "last_active_ms", r.last_active_ms);
  opt(j, "agent_pid", r.agent_pid);
  opt(j, "agent_start", r.agent_start);
  opt(j, "uid_base", r.uid_base);
  opt(j, "slot", r.slot);
  opt(j, "error", r.error);
  if (j.contains("driver_data")) r.driver_data = j["driver_data"];
  opt(j, "from_pool", r.from_pool);
  if (auto it = j.find("one_shot"); it != j.end() && it->is_object()) {
    opt(*it, "pid", r.one_shot.pid);
    opt(*it, "start", r.one_shot.start);
    opt(*it, "pid_ns", r.one_shot.pid_ns);
  }
}

void to_json(json& j, const ExecRequest& r) {
  j = json{{"cmd", r.argv}, {"env", r.env}, {"cwd", r.cwd}, {"timeout_ms", r.timeout_ms}, {"stdin", r.stdin_open}};
  if (r.tty) j["tty"] = true, j["rows"] = r.rows, j["cols"] = r.cols;
  if (r.background) j["background"] = true;
}
void from_json(const json& j, ExecRequest& r) {
  reject_unknown_fields(j, {"cmd", "env", "cwd", "timeout_ms", "stdin", "tty", "rows", "cols", "background"},
                        "exec request");
  opt(j, "cmd", r.argv);
  opt(j, "env", r.env);
  opt(j, "cwd", r.cwd);
  opt(j, "timeout_ms", r.timeout_ms);
  opt(j, "stdin", r.stdin_open);
  opt(j, "tty", r.tty);
  opt(j, "rows", r.rows);
  opt(j, "cols", r.cols);
  opt(j, "background", r.background);
}

void to_json(json& j, const ExecResult& r) {
  j = json{{"exit_code", r.exit_code}, {"signal", r.signal},         {"timed_out", r.timed_out},
           {"oom_killed", r.oom_killed}, {"duration_ms", r.duration_ms}};
  if (r.sandbox_ended) j["sandbox_ended"] = true;
  if (r.pid) j["pid"] = r.pid;
}
void from_json(const json& j, ExecResult& r) {
  opt(j, "exit_code", r.exit_code);
  opt(j, "signal", r.signal);
  opt(j, "timed_out", r.timed_out);
  opt(j, "oom_killed", r.oom_killed);
  opt(j, "sandbox_ended", r.sandbox_ended);
  opt(j, "duration_ms", r.duration_ms);
  opt(j, "pid", r.pid);
}

void to_json(json& j, const ProcessInfo& p) {
  j = json{{"pid", p.pid}, {"cmd", p.argv}, {"state", p.state}, {"started_ms", p.started_ms}, {"tty", p.tty}};
  if (p.state == "exited") j["exit_code"] = p.exit_code, j["signal"] = p.signal;
}
void from_json(const json& j, ProcessInfo& p) {
  opt(j, "pid", p.pid);
  opt(j, "cmd", p.argv);
  opt(j, "state", p.state);
  opt(j, "started_ms", p.started_ms);
  opt(j, "exit_code", p.exit_code);
  opt(j, "signal", p.signal);
  opt(j, "tty", p.tty);
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

namespace {
constexpr char kIdAlphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
std::atomic<int> id_owner{-1};

int base32_value(char c) { return c >= 'a' && c <= 'z' ? c - 'a' : c - '2' + 26; }
}  // namespace

std::string new_sandbox_id(int ordinal) {
  unsigned char raw[12];
  if (::getrandom(raw, sizeof raw, 0) != static_cast<ssize_t>(sizeof raw))
    throw Error(Errc::internal, "getrandom failed");
  std::string id = "sbx_";
  for (unsigned char c : raw) id += kIdAlphabet[c & 31];
  if (ordinal >= 0) {
    // Big-endian base32, so an operator reads the owner off the id: sbx_aa... is manager 0, sbx_ac... manager 2.
    id[4] = kIdAlphabet[(ordinal >> 5) & 31];
    id[5] = kIdAlphabet[ordinal & 31];
  }
  return id;
}

std::string new_sandbox_id() { return new_sandbox_id(id_owner.load()); }

void set_sandbox_id_owner(int ordinal) { id_owner = ordinal; }

int sandbox_id_owner(std::string_view id) { return base32_value(id[4]) << 5 | base32_value(id[5]); }

bool valid_sandbox_id(std::string_view s) {
  if (s.size() != 16 || s.substr(0, 4) != "sbx_") return false;
  for (char c : s.substr(4))
    if (!((c >= 'a' && c <= 'z') || (c >= '2' && c <= '7'))) return false;
  return true;
}

bool valid_sandbox_name(std::string_view s) {
  if (s.empty() || s.size() > 63 || valid_sandbox_id(s)) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(s.front())) return false;
  for (char c : s)
    if (!alnum(c) && c != '_' && c != '.' && c != '-') return false;
  return true;
}

void check_sandbox_name(const std::string& name) {
  if (valid_sandbox_name(name)) return;
  std::string shown = name.size() > 80 ? name.substr(0, 77) + "..." : name;
  throw Error(Errc::invalid_argument, "invalid sandbox name '" + shown + "'")
      .set_hint(valid_sandbox_id(name) ? "a name cannot have the form of a sandbox id (sbx_ and 12 characters)"
                                       : "a name is 1-63 characters of a-z, 0-9, '_', '.' and '-', "
                                         "starting with a letter or digit");
}

std::string sandbox_owner(const SandboxSpec& spec) {
  auto it = spec.labels.find(kOwnerLabel);
  return it == spec.labels.end() ? std::string() : it->second;
}

SandboxState parse_state_filter(std::string_view value) {
  try {
    return parse_state(value);
  } catch (Error& e) {
    e.add_context("the filter state=" + std::string(value).substr(0, 64));
    throw;
  }
}

}  // namespace sbx
