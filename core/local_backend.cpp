#include "core/local_backend.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <set>
#include <thread>

#include <fmt/core.h>

#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/images.hpp"
#include "core/netaddr.hpp"
#include "core/pinned_pid.hpp"
#include "core/units.hpp"

namespace sbx {

namespace {
bool valid_env_key(const std::string& k) {
  if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos) return false;
  return true;
}

// A cap above the host's cores is no cap at all and says the caller expects
// a machine this is not; refused with the count, alike from the CLI and the API.
void check_cpus_fit_host(double cpus) {
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cores <= 0 || cpus <= static_cast<double>(cores)) return;
  throw Error(Errc::invalid_argument, fmt::format("--cpus {:g} is more than this host's {} core{}", cpus, cores,
                                                  cores == 1 ? "" : "s"))
      .set_hint(fmt::format("ask for at most {} (limits.cpus in the API)", cores));
}
}  // namespace

void forget_record(Registry& registry, const SandboxRecord& rec) {
  registry.remove(rec.id);
  images::drop_user(rec.spec.image, rec.id);
}

std::map<std::string, std::string> base_exec_env() {
  return {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
          {"HOME", "/root"},
          {"LANG", "C.UTF-8"}};
}

SandboxSpec normalize_spec(SandboxSpec spec, const Config& cfg, const DriverTable& drivers) {
  auto* info = find_driver(drivers, spec.driver);
  if (!info)
    throw Error(Errc::invalid_argument, "unknown driver '" + spec.driver + "'")
        .set_hint("drivers: " + driver_names(drivers));
  auto& l = spec.limits;
  const auto& d = cfg.default_limits;
  if (l.cpus == 0) l.cpus = d.cpus;
  if (l.memory_mb == 0) l.memory_mb = d.memory_mb;
  if (l.pids == 0) l.pids = d.pids;
  if (l.disk_mb == 0) l.disk_mb = d.disk_mb;
  if (l.memory_mb < 16) throw Error(Errc::invalid_argument, "memory limit below 16M cannot start a sandbox");
  if (l.pids < 8) throw Error(Errc::invalid_argument, "pids limit below 8 cannot start a sandbox");
  if (l.cpus < 0.01) throw Error(Errc::invalid_argument, "cpus must be at least 0.01");
  check_cpus_fit_host(l.cpus);
  if (l.disk_mb < 1) throw Error(Errc::invalid_argument, "disk limit must be at least 1M");
  if (spec.idle_timeout_s == kUseDefault) spec.idle_timeout_s = cfg.default_idle_timeout_s;
  if (spec.ttl_s == kUseDefault) spec.ttl_s = cfg.default_ttl_s;
  if (spec.idle_action.empty()) spec.idle_action = spec.persistent ? "pause" : "remove";
  if (spec.idle_action != "pause" && spec.idle_action != "remove")
    throw Error(Errc::invalid_argument, "unknown idle action '" + spec.idle_action + "'").set_hint("actions: pause, remove");
  if (spec.persistent && spec.idle_action == "remove")
    throw Error(Errc::invalid_argument, "a persistent sandbox is never removed by gc, so it cannot have the idle action remove")
        .set_hint("leave out --idle-action (a persistent sandbox is paused when idle), or --persistent");
  if (spec.network.empty()) spec.network = cfg.default_network;
  if (spec.network != "none" && spec.network != "jail")
    throw Error(Errc::invalid_argument, "unknown network mode '" + spec.network + "'").set_hint("modes: none, jail");
  if (!spec.allow.empty() && spec.network != "jail")
    throw Error(Errc::invalid_argument, "an allowlist needs the network jail")
        .set_hint("add --network jail (with --network none the sandbox reaches nothing)");
  for (auto& a : spec.allow) a = normalize_allow_entry(a);
  if (spec.workdir.empty()) spec.workdir = "/work";
  if (spec.workdir.front() != '/')
    throw Error(Errc::invalid_argument, "workdir must be an absolute path, not '" + spec.workdir + "'");
  if (!spec.image.empty()) {
    struct stat st {};
    if (spec.image.front() != '/')
      throw Error(Errc::invalid_argument, "image must be an absolute path, not '" + spec.image + "'");
    if (::stat(spec.image.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw Error(Errc::not_found, "image directory " + spec.image + " does not exist")
          .set_hint("give an image of `sbx image ls` by name, or a root directory that exists");
  }
  for (auto& [k, v] : spec.env)
    if (!valid_env_key(k)) throw Error(Errc::invalid_argument, "invalid environment variable name '" + k + "'");
  if (!spec.name.empty()) check_sandbox_name(spec.name);
  return spec;
}

bool one_shot_client_gone(const SandboxRecord& rec) {
  const OneShotClient& c = rec.one_shot;
  return c.pid && c.pid_ns == proc::pid_namespace() && !proc::alive(c.pid, c.start);
}

LocalBackend::LocalBackend(const Config& cfg, const DriverTable& drivers)
    : cfg_(cfg), drivers_(drivers), registry_(cfg.state_dir, cfg.uid_base),
      pool_(cfg_, drivers_, registry_, [this](const SandboxRecord& r) { return alive(r); }) {}

std::unique_ptr<Driver> LocalBackend::driver_for(const SandboxRecord& rec) {
  auto* info = find_driver(drivers_, rec.spec.driver);
  if (!info)
    throw Error(Errc::unavailable, "sandbox " + rec.id + " uses driver '" + rec.spec.driver +
                                       "', which this build of sbx does not have");
  return info->make(cfg_);
}

SandboxRecord LocalBackend::create(const SandboxSpec& in, const Progress& progress) {
  return create_for(in, progress, {});
}

SandboxRecord LocalBackend::create_for(const SandboxSpec& in, const Progress& progress, const OneShotClient& one_shot) {
  SandboxSpec spec = in;
  // A name (or none: the default image) becomes the rootfs directory drivers take;
  // a snapshot's files go on top of the image (directory) they were written over.
  if (spec.from_snapshot.empty()) spec.image = images::resolve(in.image, in.driver, cfg_, drivers_);
  else apply_snapshot(spec);
  spec = normalize_spec(std::move(spec), cfg_, drivers_);
  SandboxRecord probe_rec;
  probe_rec.spec = spec;
  auto driver = driver_for(probe_rec);
  // From a snapshot too: a `snapshot:NAME` pool starts sandboxes on its files ahead.
  if (auto pooled = pool_.claim(spec, *driver)) {
    if (one_shot.pid) {
      pooled->one_shot = one_shot;
      registry_.save(*pooled);
    }
    return std::move(*pooled);
  }
  return start_new(spec, *driver, progress, false, one_shot);
}

SandboxRecord LocalBackend::start_new(const SandboxSpec& spec, Driver& driver, const Progress& progress,
                                      bool for_pool, const OneShotClient& one_shot) {
  if (progress)
    if (auto note = driver.start_note(spec)) progress(*note);
  // Held until the sandbox is up (or cleaned up): should this process die
  // meanwhile, gc sees the lock free and reaps the remains at once.
  Fd creating;
  // The one-shot's client is in the first record, not a second save of it (each
  // save that replaces a record costs 0.1-0.45 ms here: ext4's auto_da_alloc).
  SandboxRecord rec = registry_.create(spec, &creating, one_shot);
  rec.from_pool = for_pool;
  std::string dir = registry_.dir(rec.id);
  try {
    // Before it starts: from here `sbx image rm` refuses to delete its image.
    images::add_user(spec.image, rec.id, dir);
    if (!spec.from_snapshot.empty()) seed_from_snapshot(rec, driver, dir);
    with_context("starting sandbox " + rec.id, [&] { driver.start(rec, dir); });
    fault::point("create.started");
    registry_.save(rec);
    fault::point("create.saved");
    wait_ready(rec, driver, dir, progress);
    driver.finish_start(rec, dir);
    fault::point("create.ready");
    rec.state = for_pool ? SandboxState::pooled : SandboxState::running;
    registry_.save(rec);
    registry_.touch(rec.id);
    fault::point("create.done");
    return rec;
  } catch (Error& e) {
    try {
      driver.destroy(rec, dir);
      forget_record(registry_, rec);
    } catch (const Error& cleanup) {
      e.add_context("(cleanup also failed: " + std::string(cleanup.what()) + ")");
    }
    throw;
  }
}

void LocalBackend::wait_ready(SandboxRecord& rec, Driver& driver, const std::string& dir, const Progress& progress) {
  // Ready means the agent answers, not merely that a process exists.
  int timeout_ms = driver.ready_timeout_ms(rec);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  int waited = 0;
  for (int delay_us = 200;; delay_us = std::min(delay_us * 2, 50'000)) {
    try {
      AgentClient agent(driver.connect(rec, dir));
      agent.ping();
      return;
    } catch (const Error& e) {
      // A socket path that cannot exist (too long) never starts answering.
      if (e.code() == Errc::invalid_argument) throw;
      if (!driver.alive(rec)) throw Error(Errc::unavailable, "the sandbox exited while starting").add_context(e.what());
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(Errc::timeout, "the sandbox's agent did not answer within " +
                                       std::to_string(timeout_ms / 1000) + " s")
            .add_context("last attempt: " + std::string(e.what()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    waited += delay_us;
    if (progress && waited >= 1'000'000 && waited - delay_us < 1'000'000) progress("waiting for the sandbox to boot");
  }
}

AgentClient LocalBackend::connect(SandboxRecord& rec, Driver& driver) {
  if (rec.state != SandboxState::running)
    throw Error(Errc::conflict, "sandbox " + rec.id + " is " + std::string(state_name(rec.state)))
        .set_hint(rec.error.empty() ? "remove it with `sbx rm " + rec.id + "`" : rec.error);
  try {
    return AgentClient(driver.connect(rec, registry_.dir(rec.id)));
  } catch (Error& e) {
    if (!driver.alive(rec)) {
      rec.state = SandboxState::dead;
      rec.error = "its agent is gone";
      registry_.save(rec);
      throw Error(Errc::unavailable, "sandbox " + rec.id + " died (its agent is gone)")
          .set_hint(rec.spec.persistent ? "start it again, with its files, with `sbx start " + rec.id + "`"
                                        : "remove it with `sbx rm " + rec.id + "`; `sbx gc` collects dead sandboxes");
    }
    throw;
  }
}

ExecResult LocalBackend::exec(const std::string& id, const ExecRequest& in, ExecIO& io) {
  if (in.argv.empty()) throw Error(Errc::usage, "no command given").set_hint("sbx exec ID -- CMD [ARG...]");
  check_background_request(in, false);
  SandboxRecord rec = registry_.get(id);
  auto driver = driver_for(rec);
  ExecRequest req = in;
  std::map<std::string, std::string> env = base_exec_env();
  for (auto& [k, v] : rec.spec.env) env[k] = v;
  for (auto& [k, v] : in.env) {
    if (!valid_env_key(k)) throw Error(Errc::invalid_argument, "invalid environment variable name '" + k + "'");
    env[k] = v;
  }
  req.env = std::move(env);
  if (req.cwd.empty()) req.cwd = rec.spec.workdir;
  Driver::ExecMarks before;
  AgentClient agent = connect_in_use(rec, *driver, before);
  fault::point("exec.connected");
  ExecResult res;
  try {
    res = agent.exec(req, io);
    fault::point("exec.finished");
  } catch (Error& e) {
    if (e.code() != Errc::protocol) throw;
    return agent_lost(rec, *driver, before);
  }
  registry_.touch(rec.id);
  if (req.background) return res;  // it runs on; ping's `running` counts it as activity for gc
  if (res.signal == SIGKILL && !res.timed_out && driver->oom_kills(rec) > before.oom_kills) res.oom_killed = true;
  // One rule for every driver, the CLI and both API styles: a command its
  // timeout killed ends with 124, as timeout(1) and `sbx exec --timeout` do.
  // The agents report the kill (137); `signal` keeps saying it was SIGKILL.
  if (res.timed_out) res.exit_code = exit_status(Errc::timeout);
  return res;
}

namespace {
constexpr const char* kAgentGone = "its agent is gone";
}  // namespace

std::optional<std::string> LocalBackend::mark_dead_if_gone(SandboxRecord& rec, Driver& driver, const Driver::ExecMarks& before) {
  // The stream closes as the sandbox dies; the process itself may take a moment longer.
  for (int i = 0; i < 50 && driver.alive(rec); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (driver.alive(rec)) return std::nullopt;  // a broken stream, not a dead sandbox
  // rm or gc may be what ended it: they tear down under the sandbox's lock, and
  // a removed sandbox must stay removed. No O_CREAT, so a lock file is never
  // made again in a directory being deleted.
  Fd guard(::open((registry_.dir(rec.id) + "/lock").c_str(), O_RDWR | O_CLOEXEC));
  if (!guard || ::flock(guard.get(), LOCK_SH) != 0) return std::nullopt;
  auto current = registry_.find(rec.id);
  if (!current || current->id != rec.id || current->state != SandboxState::running) return std::nullopt;
  rec.state = SandboxState::dead;
  rec.error = driver.oom_kills(rec) > before.oom_kills
                  ? "killed by its memory limit (" + std::to_string(rec.spec.limits.memory_mb) + " MiB)"
                  : kAgentGone;
  if (rec.error == kAgentGone && driver.pids_limit_hits(rec))
    rec.error = std::string(kAgentGone) + " after reaching its process limit (" + std::to_string(rec.spec.limits.pids) + " pids)";
  registry_.save(rec);
  return rec.error;
}

AgentClient LocalBackend::connect_in_use(SandboxRecord& rec, Driver& driver, Driver::ExecMarks& before) {
  resume_if_paused(rec);
  // Shared lock: gc and rm (exclusive) wait until this call is registered with the agent.
  Fd guard = registry_.lock(rec.id, false);
  registry_.touch(rec.id);
  before = driver.exec_marks(rec, registry_.dir(rec.id));
  return connect(rec, driver);
}

ExecResult LocalBackend::agent_lost(SandboxRecord& rec, Driver& driver, const Driver::ExecMarks& before) {
  auto original = std::current_exception();
  auto why = mark_dead_if_gone(rec, driver, before);
  ExecResult res;
  res.exit_code = 128 + SIGKILL;
  res.signal = SIGKILL;
  res.oom_killed = true;
  if (!why) {
    // The sandbox lives on (deno's supervisor starts a new agent), but its memory cap
    // ended the process that ran the command (the OOM killer, or the runtime's own
    // cap: V8's heap limit): say so, as for any OOM kill.
    if (driver.oom_kills(rec) > before.oom_kills || driver.runtime_memory_cap_hit(rec, registry_.dir(rec.id), before))
      return res;
    std::rethrow_exception(original);
  }
  if (why->rfind(kAgentGone, 0) == 0)
    throw Error(Errc::unavailable, "sandbox " + rec.id + " died while the command ran" +
                                       (*why == kAgentGone ? std::string() : " (" + *why + ")"))
        .set_hint("remove it with `sbx rm " + rec.id + "`; `sbx gc` collects dead sandboxes" +
                  (*why == kAgentGone ? std::string() : "; give the next one more --pids"));
  res.sandbox_ended = true;
  return res;
}

LocalBackend::PortConn LocalBackend::port_client(const std::string& id, uint16_t port) {
  SandboxRecord rec = registry_.get(id);
  auto driver = driver_for(rec);
  Driver::ExecMarks before;
  // An agent connection of its own per TCP connection: the agent's backpressure then holds back only this one.
  AgentClient agent = connect_in_use(rec, *driver, before);
  Fd socket;
  try {
    socket = agent.connect_port(port, driver->agent_passes_sockets());
  } catch (const Error& e) {
    // The agent's refusal, named with the sandbox; any other error (deno's: no listening sockets there) as it is.
    if (e.code() != Errc::unavailable || std::string_view(e.what()).find("nothing listens") == std::string_view::npos) throw;
    throw Error(Errc::unavailable, "nothing listens on 127.0.0.1:" + std::to_string(port) + " in sandbox " + rec.id)
        .set_hint("start the server in the sandbox first, listening on 127.0.0.1 or 0.0.0.0");
  }
  return {std::move(agent), std::move(socket)};
}

void LocalBackend::forward_port(const std::string& id, uint16_t port, int local_fd) {
  PortConn c = port_client(id, port);
  if (c.socket) return splice_streams(local_fd, c.socket.get());
  c.agent.relay_port(local_fd);
}

Fd LocalBackend::open_port(const std::string& id, uint16_t port) {
  PortConn c = port_client(id, port);
  if (c.socket) {
    // The agent made it non-blocking; the caller reads and writes it as a plain connected socket.
    ::fcntl(c.socket.get(), F_SETFL, ::fcntl(c.socket.get(), F_GETFL) & ~O_NONBLOCK);
    return std::move(c.socket);
  }
  AgentClient agent = std::move(c.agent);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw sys_error("socketpair", errno);
  Fd ours(sv[0]), theirs(sv[1]);
  std::thread([agent = std::move(agent), ours = std::move(ours)]() mutable { agent.relay_port(ours.get()); }).detach();
  return theirs;
}

std::vector<SandboxRecord> LocalBackend::list() {
  auto recs = registry_.list();
  // A one-shot whose client has exited is being torn down by the process it
  // left that to (or, were that killed, is gc's): wait for its lock, then see.
  std::erase_if(recs, [&](const SandboxRecord& r) {
    return one_shot_client_gone(r) && !registry_.lock_if_present(r.id, false);
  });
  for (auto& r : recs) {
    if (!has_agent(r.state)) continue;
    auto* info = find_driver(drivers_, r.spec.driver);
    if (info && !info->make(cfg_)->alive(r)) {
      // A dead pooled sandbox stays out of sight (ls hides the pool); gc reaps it.
      if (r.state != SandboxState::pooled) r.state = SandboxState::dead;
      r.error = "its agent is gone";
    }
  }
  return recs;
}

bool LocalBackend::alive(const SandboxRecord& rec) {
  if (rec.state != SandboxState::running && rec.state != SandboxState::pooled) return false;
  auto* info = find_driver(drivers_, rec.spec.driver);
  return info && info->make(cfg_)->alive(rec);
}

PoolFillReport LocalBackend::fill_pool(Fd turn) {
  return pool_.fill(
      [this](const SandboxSpec& spec) {
        SandboxRecord probe_rec;
        probe_rec.spec = spec;
        return start_new(spec, *driver_for(probe_rec), nullptr, true);
      },
      std::move(turn));
}

Fd LocalBackend::settle_pool() {
  // A one-shot's detached removal takes the pool's turn before its record goes
  // and refills under it (remove_in_background). So: wait for each one-shot
  // record's lock (its removal holds it), then for the turn.
  for (auto& rec : registry_.list())
    if (rec.one_shot.pid != 0) registry_.lock_if_present(rec.id, false);
  return pool_.take_turn();
}

std::vector<std::string> LocalBackend::settle_removals() {
  std::vector<std::string> running;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRemovalWaitMs);
  for (auto& path : registry_.unfinished_removals()) {
    auto end = registry_.await_removal(path, deadline);
    if (end == Registry::RemovalEnd::abandoned) registry_.finish_removal(path);
    if (end == Registry::RemovalEnd::running) running.push_back(path);
  }
  return running;
}

std::vector<PoolStatus> LocalBackend::pool_status() {
  return pool_.status();
}

std::vector<std::string> LocalBackend::drain_pool(const std::string& driver) {
  Fd turn = settle_pool();
  std::vector<std::string> out;
  for (auto& rec : registry_.list()) {
    if (rec.state != SandboxState::pooled || (!driver.empty() && rec.spec.driver != driver)) continue;
    Fd guard = registry_.lock(rec.id, true);
    auto cur = registry_.find(rec.id);
    if (!cur || cur->state != SandboxState::pooled) continue;  // claimed or removed meanwhile
    auto* info = find_driver(drivers_, rec.spec.driver);
    if (!info) continue;
    with_context("removing pooled sandbox " + rec.id, [&] { info->make(cfg_)->destroy(*cur, registry_.dir(rec.id)); });
    forget_record(registry_, *cur);
    out.push_back(rec.id);
  }
  return out;
}

SandboxRecord LocalBackend::get(const std::string& id) {
  SandboxRecord r = registry_.get(id);
  if (has_agent(r.state) && !driver_for(r)->alive(r)) {
    if (r.state != SandboxState::pooled) r.state = SandboxState::dead;
    r.error = "its agent is gone";
  }
  return r;
}

void LocalBackend::destroy(const SandboxRecord& rec) {
  Fd guard = registry_.lock_if_present(rec.id, true);
  if (guard) destroy_locked(rec);  // else removed while this waited: done
}

void LocalBackend::destroy_locked(const SandboxRecord& rec) {
  fault::point("rm.locked");
  auto* info = find_driver(drivers_, rec.spec.driver);
  if (info) info->make(cfg_)->destroy(rec, registry_.dir(rec.id));
  fault::point("rm.destroyed");
  forget_record(registry_, rec);
}

void LocalBackend::remove(const std::string& id) {
  SandboxRecord rec = registry_.get(id);
  with_context("removing sandbox " + rec.id, [&] { destroy(rec); });
}

SandboxRecord LocalBackend::start(const std::string& id) {
  SandboxRecord rec = registry_.get(id);
  Fd guard = registry_.lock(rec.id, true);
  rec = registry_.get(rec.id);
  auto driver = driver_for(rec);
  if (has_agent(rec.state) && driver->alive(rec))
    throw Error(Errc::conflict, "sandbox " + rec.id + " is already " + std::string(state_name(rec.state)));
  if (!rec.spec.persistent)
    throw Error(Errc::conflict, "sandbox " + rec.id + " is not persistent: its files went with its agent")
        .set_hint("remove it with `sbx rm " + rec.id + "`; create sandboxes with --persistent to keep them across restarts");
  std::string dir = registry_.dir(rec.id);
  // What the old run left (cgroup, network jail, mounts, a loop device) goes;
  // the disk image in the state directory stays, and the driver starts on it.
  SandboxRecord last_run = rec;
  last_run.driver_data["keep_disk"] = true;  // destroy() would take the disk with it
  with_context("clearing what the last run of " + rec.id + " left", [&] { driver->destroy(last_run, dir); });
  rec.error.clear();
  try {
    with_context("starting sandbox " + rec.id, [&] { driver->start(rec, dir); });
    registry_.save(rec);
    wait_ready(rec, *driver, dir, nullptr);
  } catch (Error& e) {
    try {
      driver->destroy(last_run, dir);
    } catch (const Error& cleanup) {
      e.add_context("(cleanup also failed: " + std::string(cleanup.what()) + ")");
    }
    rec.state = SandboxState::dead;
    rec.error = e.what();
    registry_.save(rec);
    throw;
  }
  rec.state = SandboxState::running;
  registry_.save(rec);
  registry_.touch(rec.id);
  return rec;
}

std::optional<FileEntry> LocalBackend::stat(const std::string& id, const std::string& path) {
  SandboxRecord rec = registry_.get(id);
  resume_if_paused(rec);
  auto driver = driver_for(rec);
  AgentClient agent = connect(rec, *driver);
  try {
    auto entries = agent.list(path, false);
    if (entries.empty()) return std::nullopt;
    return entries.front();
  } catch (const Error& e) {
    if (e.code() == Errc::not_found) return std::nullopt;
    throw;
  }
}

template <class F>
uint64_t LocalBackend::with_files(const std::string& id, const char* what, F&& f) {
  SandboxRecord rec = registry_.get(id);
  auto driver = driver_for(rec);
  Driver::ExecMarks before;
  AgentClient agent = connect_in_use(rec, *driver, before);
  fault::point("cp.connected");
  try {
    return f(agent);
  } catch (Error& e) {
    // A sandbox that dies mid-copy shows only as a reset connection: say it died, and why.
    if (e.code() != Errc::protocol && e.code() != Errc::io) throw;
    auto why = mark_dead_if_gone(rec, *driver, before);
    if (!why) throw;
    throw Error(Errc::unavailable, "sandbox " + rec.id + " died during the " + what + ": " + *why + " (" + e.what() + ")")
        .set_hint("remove it with `sbx rm " + rec.id + "`" +
                  (*why == kAgentGone                                      ? std::string("; `sbx gc` collects dead sandboxes")
                   : why->find("process limit") != std::string::npos ? "; give the next one more --pids"
                                                                      : "; give the next one more --memory"));
  }
}

uint64_t LocalBackend::put(const std::string& id, const std::string& target, EntrySource& source, uint64_t max_bytes) {
  return with_files(id, "copy into it", [&](AgentClient& agent) {
    auto sink = sandbox_sink(agent, target);
    try {
      return transfer(source, *sink, max_bytes);
    } catch (const Error& e) {
      throw upload_error(e, registry_.get(id).spec.limits.disk_mb);
    }
  });
}

uint64_t LocalBackend::get_files(const std::string& id, const std::string& path, EntrySink& sink, uint64_t max_bytes) {
  return with_files(id, "copy out of it", [&](AgentClient& agent) {
    auto source = sandbox_source(agent, path);
    return transfer(*source, sink, max_bytes);
  });
}
}  // namespace sbx
