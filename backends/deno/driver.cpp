#include "backends/deno/driver.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <linux/close_range.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "backends/common/cgroup.hpp"
#include "backends/common/disk.hpp"
#include "backends/common/process.hpp"
#include "backends/deno/cache_prune.hpp"
#include "backends/deno/runtime.hpp"
#include "backends/deno/store_copy.hpp"
#include "backends/drivers.hpp"
#include "core/agent_client.hpp"
#include "core/error.hpp"
#include "core/fault.hpp"
#include "core/fsutil.hpp"
#include "core/unix_socket.hpp"

namespace sbx::deno {

namespace {

// Where, inside the agent's own mount namespace, its state directory appears:
// a path the sandbox's uid can reach even when the state root is private (0700).
constexpr const char* kMountBase = "/run/sbx-deno";
// The agent's exit status for "start me again": this Deno cannot stop a Worker
// stuck in a loop (terminate() leaves its thread spinning), so after such an
// exec the agent replaces its whole process. Must match agent-deno/agent.ts.
constexpr int kRestartStatus = 75;

// Steps of the child between fork and exec, so a failure names the one that failed.
enum Step : int { kStepWait = 1, kStepFds, kStepMountNs, kStepBind, kStepNetNs, kStepIds, kStepCaps, kStepExec };

const char* step_name(int s) {
  switch (s) {
    case kStepWait: return "waiting to join the cgroup";
    case kStepFds: return "preparing descriptors";
    case kStepMountNs: return "creating the mount namespace";
    case kStepBind: return "binding the state directory";
    case kStepNetNs: return "creating the network namespace";
    case kStepIds: return "switching to the sandbox's uid";
    case kStepCaps: return "dropping capabilities";
    case kStepExec: return "starting deno";
  }
  return "starting the deno agent";
}

struct Failure {
  int step;
  int err;
};

// Everything the child needs, built before fork: after fork in a possibly
// multi-threaded process only raw system calls are safe.
struct Plan {
  std::string exe;        // deno; argv[0] is the sandbox's title
  std::vector<std::string> argv, env;
  std::optional<proc::Title> title;  // the supervisor's, which forks but never execs
  std::string state;      // <dir>/deno on the host
  std::string mount_at;   // where the agent sees it ("" = as is: not root)
  std::string log;
  uid_t uid = 0;
  bool root = false;
};

[[noreturn]] void child_fail(int report, int step) {
  Failure f{step, errno};
  [[maybe_unused]] auto n = ::write(report, &f, sizeof f);
  ::_exit(127);
}

[[noreturn]] void run_child(const Plan& p, char* const* argv, char* const* envp, int sync, int report, int log) {
  char go;
  if (::read(sync, &go, 1) != 1) child_fail(report, kStepWait);
  ::setsid();
  if (p.title) p.title->apply();  // while it may still set the whole title (CAP_SYS_RESOURCE)
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(log, 1) < 0 || ::dup2(log, 2) < 0) child_fail(report, kStepFds);
  // The supervisor lives as long as the sandbox: it must hold nothing of the
  // sbx that started it (a manager's sockets, other sandboxes' files).
  if (report > 3) ::syscall(SYS_close_range, 3u, static_cast<unsigned>(report - 1), 0u);
  ::syscall(SYS_close_range, static_cast<unsigned>(report + 1), ~0u, 0u);
  if (p.root) {
    // The agent's view of its own state: a bind of <dir>/deno at a path every
    // uid can traverse; nothing else of the host's mounts changes.
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      child_fail(report, kStepMountNs);
    if (::mount(p.state.c_str(), p.mount_at.c_str(), nullptr, MS_BIND, nullptr) != 0) child_fail(report, kStepBind);
    // A network namespace of its own: not even loopback is up, so neither the
    // agent nor any code it runs can reach a socket on the host.
    if (::unshare(CLONE_NEWNET) != 0) child_fail(report, kStepNetNs);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(p.uid, p.uid, p.uid) != 0 || ::setresuid(p.uid, p.uid, p.uid) != 0)
      child_fail(report, kStepIds);
  } else {
    // Without root: a user namespace buys an empty network namespace when the host allows it.
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) errno = 0;
  }
  // No capabilities in any set, none to regain through exec.
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capset, &hdr, data) != 0) child_fail(report, kStepCaps);
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  // This process stays as the agent's supervisor (the sandbox's pid): it runs
  // deno, and runs it again when the agent asks for a fresh process.
  bool first = true;
  long backoff_ms = 25;
  for (;;) {
    pid_t c = ::fork();
    if (c < 0) child_fail(report, kStepExec);
    if (c == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  // never outlives its supervisor
      // The report pipe closes on exec: EOF tells the host deno started.
      ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
      ::execve(p.exe.c_str(), argv, envp);
      child_fail(report, kStepExec);
    }
    if (first) {
      ::close(report);  // the child holds the only copy now
      report = -1;
      first = false;
    }
    int status = 0;
    while (::waitpid(c, &status, 0) < 0 && errno == EINTR) {
    }
    // Asked for (a stuck Worker), or killed (the memory cap's OOM killer): the
    // files are safe in SQLite, so a new agent keeps the sandbox usable. Any
    // other exit (a start-up error) ends the sandbox rather than loop.
    bool again = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == kRestartStatus);
    if (!again) ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    timespec pause{0, backoff_ms * 1'000'000L};
    ::nanosleep(&pause, nullptr);
    backoff_ms = backoff_ms >= 800 ? 1000 : backoff_ms * 2;  // a crash loop costs little CPU
  }
}

// Until the agent's socket appears in `dir` (inotify: no poll interval added
// to every start), the supervisor `pid` exits, or a few seconds pass; the
// caller's readiness check (a ping) decides what it means.
void wait_for_socket(const std::string& dir, pid_t pid) {
  const std::string sock = dir + "/agent.sock";
  Fd in(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!in || ::inotify_add_watch(in.get(), dir.c_str(), IN_CREATE | IN_MOVED_TO) < 0) return;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!path_exists(sock) && std::chrono::steady_clock::now() < deadline) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) return;
    pollfd pfd{in.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 50) > 0) {
      alignas(inotify_event) char buf[4096];
      while (::read(in.get(), buf, sizeof buf) > 0) {
      }
    }
  }
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string other_drivers() {
  std::string out;
  for (auto& d : builtin_drivers())
    if (d.name != "deno" && d.name != "remote") out += (out.empty() ? "" : ", ") + d.name;
  return out;
}

class DenoDriver : public Driver {
 public:
  explicit DenoDriver(const Config& cfg) : cfg_(cfg) {}

  void start(SandboxRecord& rec, const std::string& dir) override {
    // Refused rather than ignored: a caller who asked for public egress must
    // not get a sandbox that silently has none.
    if (rec.spec.network != "none")
      throw Error(Errc::unavailable, "network mode '" + rec.spec.network + "' is not available on the deno driver")
          .set_hint("use --network none (deno sandboxes have no network), or the subprocess or runsc driver for the jail");
    if (!rec.spec.image.empty())
      throw Error(Errc::unavailable, "--image does not apply to the deno driver: its files live in SQLite")
          .set_hint("drop --image, or use the subprocess or runsc driver");
    // Only as root: without it there is no cgroup and no cap to defer.
    const bool load_python = ::geteuid() == 0 && is_python(rec.one_shot.command);
    Runtime rt = find_runtime();
    std::string cache = cache_dir();
    std::string agent = stage_agent(rt, cache);
    std::string why;
    std::string snapshot = ensure_snapshot(Runtime{rt.home, rt.deno, rt.pyodide, agent, rt.version}, cache, &why);
    bool root = ::geteuid() == 0;

    Plan p;
    p.root = root;
    p.uid = rec.uid_base;
    p.state = dir + "/deno";
    make_dirs(p.state, 0700);
    std::optional<cgroup::Group> group;
    if (root) {
      if (::chown(p.state.c_str(), p.uid, p.uid) != 0) throw sys_error("chown " + p.state, errno);
      rec.driver_data["cgroup_scope"] = scope();
      // A Python one-shot loads its interpreter before its exec, without the
      // CPU cap (V8 compiles Pyodide on every core: ~300 ms of the load under
      // one core's quota); finish_start sets the cap once the load has settled.
      Limits boot = rec.spec.limits;
      if (load_python) {
        boot.cpus = 0;
        rec.driver_data[kCapDeferred] = true;
      }
      group = with_context("creating the cgroup", [&] { return cgroup::Group::create(scope(), rec.id, boot); });
      fault::point("create.cgroup");
      p.mount_at = std::string(kMountBase) + "/" + rec.id;
      make_dirs(kMountBase, 0711);
      make_dirs(p.mount_at, 0700);
      if (::chown(p.mount_at.c_str(), p.uid, p.uid) != 0) throw sys_error("chown " + p.mount_at, errno);
    }
    const std::string seen = root ? p.mount_at : p.state;
    // The V8 heap of each isolate (agent, every Worker) stays well inside the
    // cgroup's memory cap, so a runaway exec dies of a heap limit first.
    const uint64_t mem = rec.spec.limits.memory_mb;
    uint64_t heap_mb = std::max<uint64_t>(64, mem / 2);
    // Likewise each Python interpreter's WebAssembly memory: Python gets a
    // MemoryError before the cgroup's OOM killer takes the whole agent. The
    // agent with one interpreter loaded takes ~300 MiB; every further
    // interpreter (for concurrent execs) needs room of its own.
    uint64_t pythons = std::clamp<uint64_t>(mem > 300 ? (mem - 300) / 250 : 0, 1, 4);
    // Three quarters of its share: output on its way out needs memory too.
    uint64_t wasm_mb = std::max<uint64_t>(64, (mem > 300 ? (mem - 300) / pythons * 3 / 4 : 0));
    uint64_t wasm_pages = wasm_mb * 16;  // 64 KiB pages
    // Output past this ends the exec with a marker (1/16 of the memory cap, at most 64 MiB).
    uint64_t max_output = std::clamp<uint64_t>(mem / 16, 1, 64) << 20;
    // Its own writable DENO_DIR (a shared read-only one was measured to add
    // ~150 ms to the first exec: each failed cache write costs), whose
    // transpiled agent is the host's shared copy (~150 ms less per start).
    const std::string v8_flags =
        "--max-old-space-size=" + std::to_string(heap_mb) + ",--wasm-max-mem-pages=" + std::to_string(wasm_pages);
    const Runtime staged{rt.home, rt.deno, rt.pyodide, agent, rt.version};
    const std::string deno_dir = p.state + "/cache";
    make_dirs(deno_dir, 0700);
    if (root && ::chown(deno_dir.c_str(), p.uid, p.uid) != 0) throw sys_error("chown " + deno_dir, errno);
    const std::string transpiled = ensure_transpiled(staged, cache, &why);
    if (!transpiled.empty()) {
      const std::string gen = deno_dir + "/gen";
      make_dirs(gen, 0700);
      if (::symlink(transpiled.c_str(), (gen + "/file").c_str()) != 0) throw sys_error("linking " + gen + "/file", errno);
      if (root && ::chown(gen.c_str(), p.uid, p.uid) != 0) throw sys_error("chown " + gen, errno);
    }
    const std::string compiled = ensure_code_cache(staged, cache, snapshot, v8_flags, &why);
    if (!compiled.empty()) seed_code_cache(compiled, deno_dir, p.uid);
    std::string read = "--allow-read=" + rt.pyodide + "," + agent + "," + seen;
    if (!snapshot.empty()) read += "," + snapshot;
    p.exe = rt.deno;
    p.title.emplace(sandbox_process_title(rec));
    p.argv = {sandbox_process_title(rec), "run", "--quiet", "--no-prompt", "--no-config", "--no-npm", "--no-remote",
              "--unstable-worker-options", "--v8-flags=" + v8_flags, read,
              "--allow-write=" + seen, "--allow-net=unix:" + seen + "/agent.sock", agent + "/agent.ts",
              "--socket", seen + "/agent.sock", "--store", seen + "/store.db", "--pyodide", rt.pyodide,
              "--workdir", rec.spec.workdir, "--other-drivers", other_drivers(),
              "--pythons", std::to_string(pythons), "--max-output", std::to_string(max_output)};
    if (!snapshot.empty()) p.argv.insert(p.argv.end(), {"--snapshot", snapshot});
    // A pool's spare loads Python ahead (its point is a fast first exec); any
    // other sandbox on its first Python exec, so an idle one costs ~30 MiB, not ~200.
    if (load_python) p.argv.emplace_back("--load-python");
    else if (rec.from_pool) p.argv.emplace_back("--warm-python");
    p.env = {"DENO_DIR=" + seen + "/cache", "HOME=" + seen, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1",
             "LANG=C.UTF-8"};
    auto argv = c_strings(p.argv);
    auto envp = c_strings(p.env);

    Fd log(::open((p.state + "/agent.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!log) throw sys_error("opening " + p.state + "/agent.log", errno);
    if (!why.empty()) write_all(log.get(), "sbx: " + why + "\n");
    int sync[2], report[2];
    if (::pipe2(sync, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
    Fd sync_r(sync[0]), sync_w(sync[1]), report_r(report[0]), report_w(report[1]);
    pid_t pid = ::fork();
    if (pid < 0) throw sys_error("fork", errno);
    if (pid == 0) run_child(p, argv.data(), envp.data(), sync_r.get(), report_w.get(), log.get());
    sync_r.reset();
    report_w.reset();
    rec.agent_pid = pid;
    try {
      // Joined before it execs, so deno and every thread it starts are capped.
      if (group) group->add(pid);
    } catch (...) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      throw;
    }
    write_all(sync_w.get(), "g");
    Failure f{};
    if (read_exact(report_r.get(), &f, sizeof f)) {
      ::waitpid(pid, nullptr, 0);
      throw Error(Errc::unavailable, std::string(step_name(f.step)) + ": " + std::strerror(f.err));
    }
    rec.agent_start = proc::start_time(pid);
    fault::point("create.agent");
    wait_for_socket(p.state, pid);
    // Not our child to reap after this: sbx exits long before the sandbox ends
    // (init adopts it); a serve that outlives it reaps via SIGCHLD handling.
  }

  void finish_start(SandboxRecord& rec, const std::string& dir) override {
    auto deferred = rec.driver_data.find(kCapDeferred);
    if (deferred == rec.driver_data.end()) return;
    // Whatever the load comes to (loaded, failed, or still going after 60 s:
    // the exec then waits for it, capped), the cap is set before create returns.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    try {
      AgentClient agent(connect(rec, dir));
      while (!agent.ping().value("python_settled", true) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } catch (const Error&) {
      // The exec finds the agent's state for itself, under the cap.
    }
    rec.driver_data.erase(deferred);
    auto group = group_of(rec);
    if (!group) throw Error(Errc::internal, "sandbox " + rec.id + " has no cgroup to set its CPU cap in");
    with_context("setting the sandbox's CPU cap", [&] { group->set_limits(rec.spec.limits); });
  }

  Fd connect(const SandboxRecord& rec, const std::string& dir) override {
    // While the supervisor replaces a stuck agent process (once the execs
    // running in it end, at most 10 s, then a second or so to start), the
    // socket is gone or refuses: wait for the new one rather than fail.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    for (;;) {
      try {
        return connect_unix(dir + "/deno/agent.sock", "the sandbox's deno agent");
      } catch (const Error&) {
        if (rec.state != SandboxState::running || !alive(rec) || std::chrono::steady_clock::now() > deadline) throw;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  bool alive(const SandboxRecord& rec) override {
    return proc::alive(rec.agent_pid, rec.agent_start);
  }

  void destroy(const SandboxRecord& rec, const std::string& /*dir*/) override {
    if (auto g = group_of(rec)) g->thaw_if_frozen();  // a frozen process takes no SIGKILL on v1
    proc::kill_pinned(rec.agent_pid, rec.agent_start);
    if (rec.agent_pid > 0) ::waitpid(rec.agent_pid, nullptr, WNOHANG);  // ours when this process started it
    if (rec.id.empty()) return;
    // A creator killed before the record got its driver data made the group
    // in this state root's scope all the same (as root): look there then.
    auto scope_it = rec.driver_data.find("cgroup_scope");
    bool recorded = scope_it != rec.driver_data.end() && scope_it->is_string();
    if (recorded || ::geteuid() == 0) {
      std::string scope = recorded ? scope_it->get<std::string>() : this->scope();
      cgroup::Group::open(scope, rec.id).destroy();
      cgroup::remove_scope_if_empty(scope);
    }
    ::rmdir((std::string(kMountBase) + "/" + rec.id).c_str());
  }

  // The host-wide cache of staged agents, snapshots and code caches (cache_prune.hpp).
  std::vector<std::pair<std::string, std::string>> stale_caches(int64_t now_ms) override {
    std::vector<std::pair<std::string, std::string>> out;
    for (auto& e : stale_cache_entries(cache_dir(), now_ms / 1000)) out.emplace_back(e.path, e.reason);
    return out;
  }
  bool drop_cache(const std::string& what, int64_t now_ms) override {
    return drop_cache_entry(cache_dir(), what, now_ms / 1000);
  }

  // The cgroup freezer; without root there is no group, and no pause.
  void pause(const SandboxRecord& rec, const std::string& /*dir*/) override { freezable(rec).freeze(true); }
  void resume(const SandboxRecord& rec, const std::string& /*dir*/) override { freezable(rec).freeze(false); }

  // The files are the store: copied with SQLite's backup API while the agent is frozen
  // (its last committed exec is in the copy whole), and a new sandbox starts on a copy.
  void copy_layer(const SandboxRecord& /*rec*/, const std::string& dir, const std::string& dest) override {
    backup_store(dir + "/deno/store.db", dest);
  }
  void seed_layer(const SandboxRecord& rec, const std::string& dir, const std::string& layer,
                  uint32_t /*from_uid_base*/) override {
    // A snapshot is one quiescent file (backup_store): a file copy is a whole database.
    const std::string state = dir + "/deno", store = state + "/store.db";
    make_dirs(state, 0700);
    disk::copy_image(layer, store);
    if (::geteuid() == 0 && ::chown(store.c_str(), rec.uid_base, rec.uid_base) != 0)
      throw sys_error("chown " + store, errno);
  }

  uint64_t oom_kills(const SandboxRecord& rec) override {
    auto it = rec.driver_data.find("cgroup_scope");
    if (it == rec.driver_data.end() || !it->is_string()) return 0;
    return cgroup::Group::open(it->get<std::string>(), rec.id).oom_kills();
  }

  ExecMarks exec_marks(const SandboxRecord& rec, const std::string& dir) override {
    struct stat st{};
    uint64_t log_end = ::stat((dir + "/deno/agent.log").c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
    return {oom_kills(rec), log_end};
  }

  // V8 reports a heap past --max-old-space-size on the agent's stderr (agent.log) and
  // ends the process (SIGTRAP): no cgroup OOM kill counts it. The report is written
  // before the process ends, so before the host sees the agent's stream close.
  bool runtime_memory_cap_hit(const SandboxRecord&, const std::string& dir, const ExecMarks& marks) override {
    Fd log(::open((dir + "/deno/agent.log").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!log) return false;
    std::string tail(256 << 10, '\0');
    ssize_t n = ::pread(log.get(), tail.data(), tail.size(), static_cast<off_t>(marks.log_end));
    if (n <= 0) return false;
    tail.resize(static_cast<size_t>(n));
    return tail.find("Reached heap limit") != std::string::npos ||
           tail.find("JavaScript heap out of memory") != std::string::npos;
  }

  // Only the cgroup's caps change in place. The agent's own caps (V8 heap,
  // each interpreter's WebAssembly memory, how many interpreters, the output
  // cap) are deno's command line, derived from the memory cap at start and
  // fixed for the life of the process: a different memory cap would leave
  // them sized for another sandbox (a smaller cap: the OOM killer instead of
  // a MemoryError; a larger one: less memory than asked for). Restarting the
  // agent with new ones costs what a cold start does, so the claim starts cold.
  bool set_limits(const SandboxRecord& rec, const Limits& limits) override {
    if (limits.memory_mb != rec.spec.limits.memory_mb) return false;
    auto it = rec.driver_data.find("cgroup_scope");
    // Not root: no cgroup, so no cpu or pids cap could be set at all.
    if (it == rec.driver_data.end() || !it->is_string()) return false;
    cgroup::Group::open(it->get<std::string>(), rec.id).set_limits(limits);
    return true;
  }

  // Leftover cgroups share the subprocess driver's per-state-root scope, whose
  // orphan sweep already reports and frees them.

 private:
  std::string scope() const { return cgroup::scope_for(cfg_.state_dir); }
  // Set in driver_data while a sandbox runs without its CPU cap (see start).
  static constexpr const char* kCapDeferred = "cpu_cap_deferred";

  static bool is_python(const std::string& program) {
    std::string base = program.substr(program.find_last_of('/') + 1);
    return base == "python3" || base == "python";
  }

  static std::optional<cgroup::Group> group_of(const SandboxRecord& rec) {
    auto it = rec.driver_data.find("cgroup_scope");
    if (rec.id.empty() || it == rec.driver_data.end() || !it->is_string()) return std::nullopt;
    return cgroup::Group::open(it->get<std::string>(), rec.id);
  }
  static cgroup::Group freezable(const SandboxRecord& rec) {
    auto g = group_of(rec);
    if (!g) throw Error(Errc::unavailable, "sandbox " + rec.id + " has no cgroup to freeze (sbx ran without root)");
    return *g;
  }
  Config cfg_;
};

}  // namespace

std::vector<Probe> probe(const Config& /*cfg*/, bool deep) {
  std::vector<Probe> out;
  Runtime rt;
  try {
    rt = find_runtime();
    out.push_back({true, "deno runtime", rt.version + " at " + rt.home, ""});
    out.push_back({true, "deno agent", rt.agent, ""});
  } catch (const Error& e) {
    out.push_back({false, "deno runtime", e.message(), e.hint()});
    return out;
  }
  std::string cache = cache_dir();
  if (deep) {
    std::string why;
    std::string snap;
    try {
      snap = ensure_snapshot(Runtime{rt.home, rt.deno, rt.pyodide, stage_agent(rt, cache), rt.version}, cache, &why);
    } catch (const Error& e) {
      why = e.what();
    }
    out.push_back({!snap.empty(), "Pyodide snapshot", snap.empty() ? why : snap,
                   "check that " + cache + " is writable; without it Python starts in ~2 s instead of ~0.2 s", true});
  }
  bool root = ::geteuid() == 0;
  out.push_back({root, "isolation beyond Deno's permissions",
                 root ? "cgroup caps, own uid, empty network namespace, no capabilities"
                      : "not root: Deno's permission sandbox only, no cgroup caps",
                 "run sbx as root for cgroup memory/pids caps and a separate uid", true});
  return out;
}

std::unique_ptr<Driver> make(const Config& cfg) { return std::make_unique<DenoDriver>(cfg); }

}  // namespace sbx::deno
