#include "agent/spawn.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <set>

#include "agent/confine.hpp"
#include "core/error.hpp"

namespace sbx::agent {

namespace {

enum Stage : int { kChdir = 1, kConfine = 2, kExec = 4, kSetup = 5 };

// The shim's own signal for end_tree_with_command: never sent to the group,
// so the command does not see it.
constexpr int kEndTreeSignal = SIGUSR1;
volatile sig_atomic_t g_end_tree = 0;
extern "C" void note_end_tree(int) { g_end_tree = 1; }

void kill_descendants(pid_t root);

struct ChildReport {
  int stage;
  int err;
};

[[noreturn]] void child_fail(int report_fd, int stage, int err) {
  ChildReport r{stage, err};
  ssize_t ignored = ::write(report_fd, &r, sizeof r);
  (void)ignored;
  ::_exit(125);
}

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
}

// Everything between fork and exec: only async-signal-safe calls, because
// the agent may be mid-allocation in its own frame when it forks.
// vfork: the command shares the shim's memory until it execs, so no address
// space is copied for it (under gVisor each new one costs a host stub
// process). A function of its own, so nothing the child could clobber lives
// in the shim's frame; the child only execs or reports and exits.
__attribute__((noinline)) pid_t start_command(char* const* argv, char* const* envp, int report_fd) {
  pid_t cmd = ::vfork();
  if (cmd < 0) child_fail(report_fd, kSetup, errno);
  if (cmd == 0) {
    ::execvpe(argv[0], argv, envp);
    child_fail(report_fd, kExec, errno);
  }
  return cmd;
}

// The exec's shim, from fork on: the session leader and a child subreaper, so
// whatever the command starts stays below it even after a double fork and
// setsid, and killing the shim's tree kills all of it (a timeout must not leave
// a daemon behind). It mirrors the command's end as its own.
[[noreturn]] void run_shim(const SpawnRequest& req, char* const* argv, char* const* envp, int in_fd, int out_fd,
                           int err_fd, int report_fd) {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
  // Before anything can see the shim: the host may ask at once. The command
  // starts with the default again (exec resets handled signals).
  struct sigaction end_tree {};
  end_tree.sa_handler = note_end_tree;
  ::sigaction(kEndTreeSignal, &end_tree, nullptr);
  if (::setsid() < 0) child_fail(report_fd, kSetup, errno);
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) child_fail(report_fd, kSetup, errno);
  // Whatever else the agent holds (its sockets, other commands' pipes, the
  // write end of this command's stdin) stays with the agent: the shim never
  // execs, so close-on-exec flags would not help. Only the report pipe moves to 3.
  if (report_fd != 3) {
    if (::dup3(report_fd, 3, O_CLOEXEC) < 0) child_fail(report_fd, kSetup, errno);
    report_fd = 3;
  }
  // gVisor (runsc 20221219) refuses a last descriptor above INT_MAX with EINVAL.
  if (::close_range(4, ~0U, 0) != 0 && ::close_range(4, INT_MAX, 0) != 0) child_fail(report_fd, kSetup, errno);
  if (!req.cwd.empty() && ::chdir(req.cwd.c_str()) != 0) child_fail(report_fd, kChdir, errno);
  if (req.confine) {
    // The seccomp filter is already in force: the agent installed it on itself.
    int e = drop_privileges();
    if (e) child_fail(report_fd, kConfine, e);
  }
  // gVisor (runsc 20221219) has no child subreapers (EINVAL): orphans of the
  // command then go to the agent, the container's init, which reaps them; only
  // kill_tree's reach over re-parented daemons is lost there.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 && errno != EINVAL) child_fail(report_fd, kSetup, errno);
  pid_t cmd = start_command(argv, envp, report_fd);
  // The shim keeps no end of the command's pipes or the report pipe, so EOF
  // on them means what it says. Signals to the process group are the
  // command's business, not the shim's.
  ::close(report_fd);
  for (int fd = 0; fd <= 2; ++fd) ::close(fd);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGCHLD && sig != SIGKILL && sig != SIGSTOP && sig != kEndTreeSignal) ::signal(sig, SIG_IGN);
  int status = 0;
  for (;;) {
    pid_t done = ::waitpid(-1, &status, 0);
    if (done == cmd) break;
    if (done < 0 && errno != EINTR) ::_exit(125);
    // Anything else is an orphan of the command, adopted by the shim: reaped.
  }
  if (g_end_tree) {
    // The host asked the command to go: what it left behind (a `sleep &` that
    // ignores SIGINT, a daemon) goes with it. Still the subreaper, the shim
    // sees all of it, then reaps it before mirroring the command's status.
    kill_descendants(::getpid());
    int ignored;
    while (::waitpid(-1, &ignored, 0) > 0 || errno == EINTR) {
    }
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    ::signal(sig, SIG_DFL);
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);  // no core file of the shim for a command's SIGSEGV
    ::kill(::getpid(), sig);
    ::_exit(128 + sig);
  }
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 125);
}

}  // namespace

Spawned spawn(const SpawnRequest& req, SpawnFailure& failure) {
  if (req.argv.empty()) throw Error(Errc::invalid_argument, "empty command");
  // Built before fork: the child must not allocate.
  std::vector<std::string> env_strings;
  for (auto& [k, v] : req.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  // execvpe searches PATH from the environment it is given, so set ours to match.
  auto path_it = req.env.find("PATH");
  std::string path = path_it != req.env.end() ? path_it->second : "/usr/local/bin:/usr/bin:/bin";

  int out[2], err[2], in[2], report[2];
  make_pipe(out);
  make_pipe(err);
  if (req.stdin_open) {
    make_pipe(in);
  } else {
    in[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    in[1] = -1;
    if (in[0] < 0) in[0] = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // no /dev/null: read fails at once
  }
  make_pipe(report);
  ::setenv("PATH", path.c_str(), 1);
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1], in[0], in[1], report[0], report[1]})
      if (fd >= 0) ::close(fd);
    throw sys_error("cannot fork", e);
  }
  if (pid == 0) {
    ::close(report[0]);
    run_shim(req, argv.data(), envp.data(), in[0], out[1], err[1], report[1]);
  }
  ::close(out[1]);
  ::close(err[1]);
  ::close(in[0]);
  ::close(report[1]);
  Spawned s;
  s.pid = pid;
  s.out.reset(out[0]);
  s.err.reset(err[0]);
  s.in.reset(in[1]);
  ChildReport r{};
  ssize_t n;
  do n = ::read(report[0], &r, sizeof r);
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof r)) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const std::string& cmd = req.argv[0];
    switch (r.stage) {
      case kExec:
        if (r.err == ENOENT) failure = {127, cmd + ": command not found"};
        else if (r.err == EACCES || r.err == ENOEXEC) failure = {126, cmd + ": permission denied or not executable"};
        else failure = {126, cmd + ": cannot execute: " + std::strerror(r.err)};
        break;
      case kChdir:
        failure = {125, "cannot enter working directory " + req.cwd + ": " + std::strerror(r.err)};
        break;
      default:
        failure = {125, std::string("cannot confine the command: ") + std::strerror(r.err)};
    }
    s.pid = -1;
    return s;
  }
  for (int fd : {s.out.get(), s.err.get(), s.in.get()})
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return s;
}

namespace {
struct ProcInfo {
  pid_t ppid, pgrp, session;
};

bool read_stat(pid_t pid, ProcInfo& info) {
  char path[64], buf[512];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  // The command name may hold spaces and parentheses: parse after the last ')'.
  char* p = std::strrchr(buf, ')');
  if (!p) return false;
  char state;
  return std::sscanf(p + 1, " %c %d %d %d", &state, &info.ppid, &info.pgrp, &info.session) == 4;
}

// One pass: SIGKILLs what lies below root (by parent links, or in its process
// group or session), read from /proc; root itself is spared.
void kill_below(pid_t root) {
  std::map<pid_t, ProcInfo> procs;
  if (DIR* d = ::opendir("/proc")) {
    while (auto* e = ::readdir(d)) {
      char* end;
      long pid = std::strtol(e->d_name, &end, 10);
      if (*end || pid <= 1) continue;
      ProcInfo info{};
      if (read_stat(static_cast<pid_t>(pid), info)) procs[static_cast<pid_t>(pid)] = info;
    }
    ::closedir(d);
  }
  std::set<pid_t> doomed{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (auto& [pid, info] : procs) {
      if (doomed.count(pid)) continue;
      if (doomed.count(info.ppid) || info.session == root || info.pgrp == root) {
        doomed.insert(pid);
        grew = true;
      }
    }
  }
  for (pid_t pid : doomed)
    if (pid != root) ::kill(pid, SIGKILL);
}

// Twice, to catch forks in flight.
void kill_descendants(pid_t root) {
  for (int round = 0; round < 2; ++round) kill_below(root);
}

}  // namespace

void kill_tree(pid_t root) {
  // Collect first, kill after: killing the shim first would hand its adopted
  // orphans to init before the scan could see them as its descendants.
  for (int round = 0; round < 2; ++round) {
    kill_below(root);
    ::kill(-root, SIGKILL);
    ::kill(root, SIGKILL);
  }
}

void end_tree_with_command(pid_t shim) { ::kill(shim, kEndTreeSignal); }

}  // namespace sbx::agent
