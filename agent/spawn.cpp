#include "agent/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <linux/close_range.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "agent/confine.hpp"
#include "agent/pty.hpp"
#include "agent/tree.hpp"
#include "core/error.hpp"

namespace sbx::agent {

namespace {

enum Stage : int { kChdir = 1, kConfine = 2, kExec = 4, kSetup = 5, kStart = 6 };

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
  if (cmd < 0) child_fail(report_fd, kStart, errno);
  if (cmd == 0) {
    // When the sandbox's memory fills (on cgroup v1 a big write's page cache
    // can do it, with every process small), the OOM killer must take the
    // command, never the agent: the agent is the sandbox's pid 1, whose end is
    // the sandbox's, and a namespace's pid 1 is not spared as the host's is.
    // Raising the score needs no privilege (lowering the agent's would need
    // CAP_SYS_RESOURCE, which a manager in a container often lacks). On the
    // host too, untrusted code then goes before the host's own processes.
    if (int adj = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); adj >= 0) {
      ssize_t ignored = ::write(adj, "1000", 4);
      (void)ignored;
      ::close(adj);
    }
    ::execvpe(argv[0], argv, envp);
    child_fail(report_fd, kExec, errno);
  }
  return cmd;
}

// What the shim's command gets as stdin, stdout and stderr: pipe ends, or a
// terminal to open once the shim leads its own session.
struct ShimIO {
  int in, out, err, report;
  const char* tty;           ///< the terminal's slave, or nullptr
  bool signal_keys = false;  ///< raise the signals the agent says were typed (agent/pty.hpp)
};

// The shim's terminal, for raise_typed (signal keys only).
int g_terminal = -1;

// A signal key the agent found in the user's input: what the kernel's line
// discipline would have done with it. Async-signal-safe calls only.
void raise_typed(int shim_signal) {
  int saved = errno;
  int sig = typed_signal_of(shim_signal);
  pid_t fg = ::tcgetpgrp(g_terminal);
  if (sig && fg > 0) ::kill(-fg, sig);
  termios t{};
  if (::tcgetattr(g_terminal, &t) == 0 && (t.c_lflag & ECHO) && (t.c_lflag & ECHOCTL)) {
    cc_t key = t.c_cc[sig == SIGINT ? VINTR : sig == SIGQUIT ? VQUIT : VSUSP];
    char echo[2] = {'^', static_cast<char>(key ^ 0x40)};
    if (key < 0x20) {
      ssize_t ignored = ::write(g_terminal, echo, 2);
      (void)ignored;
    }
  }
  errno = saved;
}

// The shim keeps its terminal and raises the typed signals.
void keep_terminal_for_signal_keys() {
  g_terminal = ::fcntl(0, F_DUPFD, 3);
  struct sigaction sa{};
  sa.sa_handler = raise_typed;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGQUIT, SIGTSTP}) ::sigaction(shim_signal_for(sig), &sa, nullptr);
}

// The leftover rule: once the command has ended, whatever it started goes too.
// With a working subreaper every living descendant is below the shim, so no
// child left means nothing left, and the /proc scan is skipped.
void end_leftovers(bool subreaper) {
  siginfo_t si{};
  if (subreaper && ::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD) return;
  // Again until no child is left: one kill has a deadline (under TCG a fork
  // bomb can outlast it, and a blocking wait then waited for the bomb, so the
  // exec never returned); the shim has nothing else to do, and only it is waited for.
  for (;;) {
    kill_descendants(::getpid());
    int ignored;
    pid_t done;
    while ((done = ::waitpid(-1, &ignored, WNOHANG)) > 0 || (done < 0 && errno == EINTR)) {
    }
    if (done < 0) return;  // ECHILD: nobody left
    // Children still alive: the ones just killed are on their way out.
    timespec ts{0, 2'000'000};
    ::nanosleep(&ts, nullptr);
  }
}

// The exec's shim, from fork on: the session leader and a child subreaper, so
// whatever the command starts stays below it even after a double fork and
// setsid, and killing the shim's tree kills all of it (a timeout must not leave
// a daemon behind). It mirrors the command's end as its own.
[[noreturn]] void run_shim(const SpawnRequest& req, char* const* argv, char* const* envp, ShimIO io) {
  int report_fd = io.report;
  // Dispositions are all default already (reset_signal_dispositions); the
  // agent's mask (its signalfd's signals) is not the command's.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::setsid() < 0) child_fail(report_fd, kSetup, errno);
  if (io.tty) {
    // Opened by the new session's leader without O_NOCTTY, the terminal becomes
    // its controlling one; TIOCSCTTY says so outright for kernels that wait to be asked.
    int t = ::open(io.tty, O_RDWR);
    if (t < 0) child_fail(report_fd, kSetup, errno);
    ::ioctl(t, TIOCSCTTY, 0);
    io.in = io.out = io.err = t;
  }
  if (::dup2(io.in, 0) < 0 || ::dup2(io.out, 1) < 0 || ::dup2(io.err, 2) < 0) child_fail(report_fd, kSetup, errno);
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
  // command then go to the agent, the container's init, which reaps them; the
  // leftover scan still finds them by session and process group, but a
  // re-parented daemon in a session of its own escapes it there.
  bool subreaper = ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
  if (!subreaper && errno != EINVAL) child_fail(report_fd, kSetup, errno);
  pid_t cmd = start_command(argv, envp, report_fd);
  // The shim keeps no end of the command's pipes or the report pipe, so EOF
  // on them means what it says. Signals to the process group are the
  // command's business, not the shim's.
  ::close(report_fd);
  // Blocked, not ignored one by one (one call, not 60): the shim outlives
  // whatever is sent to the command's group or session, and waitpid needs no
  // signal. Only the typed-signal relays of a terminal stay deliverable.
  sigset_t all;
  sigfillset(&all);
  if (io.tty && io.signal_keys) {
    keep_terminal_for_signal_keys();
    for (int sig : {SIGINT, SIGQUIT, SIGTSTP}) sigdelset(&all, shim_signal_for(sig));
  }
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  for (int fd = 0; fd <= 2; ++fd) ::close(fd);
  int status = 0;
  for (;;) {
    pid_t done = ::waitpid(-1, &status, 0);
    if (done == cmd) break;
    if (done < 0 && errno != EINTR) ::_exit(125);
    // Anything else is an orphan of the command, adopted by the shim: reaped.
  }
  end_leftovers(subreaper);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    ::signal(sig, SIG_DFL);
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);  // no core file of the shim for a command's SIGSEGV
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
    ::kill(::getpid(), sig);
    ::_exit(128 + sig);
  }
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 125);
}

// The command's stdin, stdout and stderr: the agent's ends in `s`, the
// child's in `child`.
void make_stdio(const SpawnRequest& req, Pty& pty, Spawned& s, ShimIO& child) {
  if (req.tty) {
    pty = open_pty(req.rows, req.cols);
    int rd = ::fcntl(pty.master.get(), F_DUPFD_CLOEXEC, 0), wr = ::fcntl(pty.master.get(), F_DUPFD_CLOEXEC, 0);
    s.out.reset(rd);
    s.in.reset(wr);
    if (rd < 0 || wr < 0) throw sys_error("dup", errno);
    child.tty = pty.slave_path.c_str();
    child.signal_keys = s.signal_keys = !terminal_sends_signals();
    return;
  }
  int out[2], err[2], in[2];
  make_pipe(out);
  s.out.reset(out[0]);
  child.out = out[1];
  make_pipe(err);
  s.err.reset(err[0]);
  child.err = err[1];
  if (req.stdin_open) {
    make_pipe(in);
    s.in.reset(in[1]);
    child.in = in[0];
  } else {
    child.in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (child.in < 0) child.in = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // no /dev/null: read fails at once
  }
}

SpawnFailure describe(const SpawnRequest& req, const ChildReport& r) {
  const std::string& cmd = req.argv[0];
  switch (r.stage) {
    case kExec:
      if (r.err == ENOENT) return {127, cmd + ": command not found"};
      if (r.err == EACCES || r.err == ENOEXEC) return {126, cmd + ": permission denied or not executable"};
      return {126, cmd + ": cannot execute: " + std::strerror(r.err)};
    case kChdir: return {125, "cannot enter working directory " + req.cwd + ": " + std::strerror(r.err)};
    case kStart:
      return {125, std::string("cannot start the command: ") + std::strerror(r.err) +
                       (r.err == EAGAIN ? " (the sandbox's process limit is reached; see `sbx ps` and `sbx kill`)" : "")};
    default: return {125, std::string("cannot confine the command: ") + std::strerror(r.err)};
  }
}

}  // namespace

void reset_signal_dispositions() {
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
}

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

  Spawned s;
  Pty pty;
  ShimIO child{-1, -1, -1, -1, nullptr};
  // The child's ends are the agent's to close once the child holds them.
  auto close_child_ends = [&] {
    for (int fd : {child.in, child.out, child.err, child.report})
      if (fd >= 0) ::close(fd);
  };
  int report[2];
  try {
    make_stdio(req, pty, s, child);
    make_pipe(report);
  } catch (...) {
    close_child_ends();
    throw;
  }
  child.report = report[1];
  ::setenv("PATH", path.c_str(), 1);
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    close_child_ends();
    ::close(report[0]);
    throw sys_error("cannot fork", e);
  }
  if (pid == 0) {
    ::close(report[0]);
    run_shim(req, argv.data(), envp.data(), child);
  }
  close_child_ends();
  s.pid = pid;
  ChildReport r{};
  ssize_t n;
  do n = ::read(report[0], &r, sizeof r);
  while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof r)) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    failure = describe(req, r);
    s.pid = -1;
    return s;
  }
  // F_SETFL sets the status flags only (the access mode stays), and pipe2 and
  // the terminal's dups set none but O_NONBLOCK would add: no F_GETFL first.
  for (int fd : {s.out.get(), s.err.get(), s.in.get()})
    if (fd >= 0) ::fcntl(fd, F_SETFL, O_NONBLOCK);
  s.term = std::move(pty.master);
  return s;
}

}  // namespace sbx::agent
