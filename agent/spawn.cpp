#include "agent/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "agent/confine.hpp"
#include "agent/pty.hpp"
#include "agent/raw.hpp"
#include "agent/tree.hpp"
#include "core/error.hpp"

namespace sbx::agent {

namespace {

enum Stage : int { kChdir = 1, kConfine = 2, kExec = 4, kSetup = 5, kStart = 6 };

struct ChildReport {
  int stage;
  int err;
};

// Everything from here to run_shim runs in the shim or the command's vfork,
// which share the agent's memory and its thread's TLS (see spawn): raw system
// calls only (agent/raw.hpp), no allocation, no errno, no libc state.
[[noreturn]] void child_fail(int report_fd, int stage, int err) {
  ChildReport r{stage, err};
  raw::sys(SYS_write, report_fd, &r, sizeof r);
  raw::exit_group(125);
}

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) throw sys_error("pipe", errno);
}

// What the shim needs to start the command, built by the agent before the
// clone. argv[0] is a spare slot for /bin/sh (a script with no #! line); the
// command's own arguments start at argv[1].
struct ExecPlan {
  char** argv;
  char* const* envp;
  const char* path;  ///< where to look for a command named without a slash
};

// execve, and for a file the kernel cannot run (no #! line), the shell on it,
// as execvp does. Returns the errno.
int try_exec(const char* file, const ExecPlan& plan) {
  long r = raw::sys(SYS_execve, file, plan.argv + 1, plan.envp);
  if (r != -ENOEXEC) return static_cast<int>(-r);
  char* saved[2] = {plan.argv[0], plan.argv[1]};
  plan.argv[0] = const_cast<char*>("/bin/sh");
  plan.argv[1] = const_cast<char*>(file);
  raw::sys(SYS_execve, "/bin/sh", plan.argv, plan.envp);
  plan.argv[0] = saved[0];
  plan.argv[1] = saved[1];
  return ENOEXEC;
}

// execvpe's search of PATH, which libc would do with errno and, for a long
// name, malloc. Returns the errno of the failure to report.
int exec_command(const ExecPlan& plan) {
  const char* file = plan.argv[1];
  size_t len = 0;
  bool slash = false;
  for (; file[len]; ++len) slash = slash || file[len] == '/';
  if (len == 0) return ENOENT;
  if (slash) return try_exec(file, plan);
  bool denied = false;
  char full[PATH_MAX];
  for (const char* dir = plan.path;;) {
    const char* end = dir;
    while (*end && *end != ':') ++end;
    size_t dir_len = static_cast<size_t>(end - dir);
    // An empty entry is the working directory.
    if (dir_len + 1 + len < sizeof full) {
      size_t at = 0;
      for (; at < dir_len; ++at) full[at] = dir[at];
      if (dir_len) full[at++] = '/';
      for (size_t i = 0; i <= len; ++i) full[at + i] = file[i];
      switch (int e = try_exec(full, plan)) {
        case EACCES: denied = true; break;
        case ENOENT: case ESTALE: case ENOTDIR: case ENODEV: case ETIMEDOUT: break;
        default: return e;
      }
    }
    if (!*end) break;
    dir = end + 1;
  }
  return denied ? EACCES : ENOENT;
}

// vfork: the command shares the shim's memory until it execs, so no address
// space is copied for it (under gVisor each new one costs a host stub
// process). A function of its own, so nothing the child could clobber lives
// in the shim's frame; the child only execs or reports and exits.
__attribute__((noinline)) pid_t start_command(const ExecPlan& plan, int report_fd) {
  long cmd = sbx_raw_vfork();
  if (cmd < 0) child_fail(report_fd, kStart, static_cast<int>(-cmd));
  if (cmd == 0) {
    // When the sandbox's memory fills (on cgroup v1 a big write's page cache
    // can do it, with every process small), the OOM killer must take the
    // command, never the agent: the agent is the sandbox's pid 1, whose end is
    // the sandbox's, and a namespace's pid 1 is not spared as the host's is.
    // Raising the score needs no privilege (lowering the agent's would need
    // CAP_SYS_RESOURCE, which a manager in a container often lacks). On the
    // host too, untrusted code then goes before the host's own processes.
    // A vfork child's score is its own: the kernel spreads a new score to the
    // processes sharing a memory, the agent and its shims, only when the
    // writer is not a vfork child.
    long adj = raw::sys(SYS_openat, AT_FDCWD, "/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (adj >= 0) {
      raw::sys(SYS_write, adj, "1000", 4);
      raw::sys(SYS_close, adj);
    }
    child_fail(report_fd, kExec, exec_command(plan));
  }
  return static_cast<pid_t>(cmd);
}

// What the shim's command gets as stdin, stdout and stderr: pipe ends, or a
// terminal to open once the shim leads its own session.
struct ShimIO {
  int in, out, err, report;
  const char* tty;           ///< the terminal's slave, or nullptr
  bool signal_keys = false;  ///< raise the signals the agent says were typed (agent/pty.hpp)
};

// Where the shim keeps its terminal for raise_typed (signal keys only): a
// fixed descriptor, since the shims share the agent's globals.
constexpr int kShimTerminal = 3;

uint64_t signal_bit(int sig) { return 1ULL << (sig - 1); }

void set_signal_mask(uint64_t mask) { raw::sys(SYS_rt_sigprocmask, SIG_SETMASK, &mask, nullptr, sizeof mask); }

// The kernel's own sigaction, for rt_sigaction without libc, whose handlers
// return through a restorer of the caller's.
constexpr unsigned long kSaRestorer = 0x04000000;
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

// A signal key the agent found in the user's input: what the kernel's line
// discipline would have done with it.
void raise_typed(int shim_signal) {
  int sig = typed_signal_of(shim_signal);
  pid_t fg = 0;
  if (raw::sys(SYS_ioctl, kShimTerminal, TIOCGPGRP, &fg) == 0 && sig && fg > 0) raw::sys(SYS_kill, -fg, sig);
  termios t{};  // the kernel fills its leading part, which libc's layout shares
  if (raw::sys(SYS_ioctl, kShimTerminal, TCGETS, &t) == 0 && (t.c_lflag & ECHO) && (t.c_lflag & ECHOCTL)) {
    cc_t key = t.c_cc[sig == SIGINT ? VINTR : sig == SIGQUIT ? VQUIT : VSUSP];
    char echo[2] = {'^', static_cast<char>(key ^ 0x40)};
    if (key < 0x20) raw::sys(SYS_write, kShimTerminal, echo, 2);
  }
}

// The shim keeps its terminal and raises the typed signals.
void keep_terminal_for_signal_keys() {
  raw::sys(SYS_dup2, 0, kShimTerminal);
  KernelSigaction sa{raise_typed, kSaRestorer, sbx_raw_sigreturn, 0};
  for (int sig : {SIGINT, SIGQUIT, SIGTSTP})
    raw::sys(SYS_rt_sigaction, shim_signal_for(sig), &sa, nullptr, sizeof(uint64_t));
}

// The leftover rule: once the command has ended, whatever it started goes too.
// With a working subreaper every living descendant is below the shim, so no
// child left means nothing left, and the /proc scan is skipped.
void end_leftovers(bool subreaper) {
  siginfo_t si{};
  if (subreaper && raw::sys(SYS_waitid, P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT, nullptr) == -ECHILD) return;
  // Again until no child is left: one kill has a deadline (under TCG a fork
  // bomb can outlast it, and a blocking wait then waited for the bomb, so the
  // exec never returned); the shim has nothing else to do, and only it is waited for.
  for (;;) {
    kill_descendants(static_cast<pid_t>(raw::sys(SYS_getpid)));
    int ignored;
    long done;
    while ((done = raw::sys(SYS_wait4, -1, &ignored, WNOHANG, nullptr)) > 0 || done == -EINTR) {
    }
    if (done < 0) return;  // ECHILD: nobody left
    // Children still alive: the ones just killed are on their way out.
    timespec ts{0, 2'000'000};
    raw::sys(SYS_nanosleep, &ts, nullptr);
  }
}

// Ends the shim as the command ended: by the same signal, or with its code.
[[noreturn]] void mirror(int status) {
  if (WIFSIGNALED(status)) {
    // No core file of the shim for a command's SIGSEGV: the shim shares the
    // agent's memory, which the agent made not dumpable.
    int sig = WTERMSIG(status);
    KernelSigaction dfl{SIG_DFL, 0, nullptr, 0};
    raw::sys(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof(uint64_t));
    set_signal_mask(~signal_bit(sig));
    raw::sys(SYS_kill, raw::sys(SYS_getpid), sig);
    raw::exit_group(128 + sig);
  }
  raw::exit_group(WIFEXITED(status) ? WEXITSTATUS(status) : 125);
}

// Made before the clone; the request and the plan are the agent's, read by
// the shim only until it closes its report pipe.
struct ShimArgs {
  const SpawnRequest* req;
  ExecPlan plan;
  ShimIO io;
};

// The exec's shim: the session leader and a child subreaper, so whatever the
// command starts stays below it even after a double fork and setsid, and
// killing the shim's tree kills all of it (a timeout must not leave a daemon
// behind). It mirrors the command's end as its own.
[[noreturn]] void run_shim(const ShimArgs& args) {
  ShimIO io = args.io;  // on the shim's own stack: the agent's copy goes once the report closes
  int report_fd = io.report;
  // Dispositions are all default already (reset_signal_dispositions); the
  // agent's mask (its signalfd's signals) is not the command's.
  set_signal_mask(0);
  if (long r = raw::sys(SYS_setsid); r < 0) child_fail(report_fd, kSetup, static_cast<int>(-r));
  if (io.tty) {
    // Opened by the new session's leader without O_NOCTTY, the terminal becomes
    // its controlling one; TIOCSCTTY says so outright for kernels that wait to be asked.
    long t = raw::sys(SYS_openat, AT_FDCWD, io.tty, O_RDWR);
    if (t < 0) child_fail(report_fd, kSetup, static_cast<int>(-t));
    raw::sys(SYS_ioctl, t, TIOCSCTTY, 0);
    io.in = io.out = io.err = static_cast<int>(t);
  }
  for (int fd = 0; fd <= 2; ++fd)
    if (long r = raw::sys(SYS_dup2, fd == 0 ? io.in : fd == 1 ? io.out : io.err, fd); r < 0)
      child_fail(report_fd, kSetup, static_cast<int>(-r));
  // Whatever else the agent holds (its sockets, other commands' pipes, the
  // write end of this command's stdin) stays with the agent: the shim never
  // execs, so close-on-exec flags would not help. Only the report pipe moves to 3.
  if (report_fd != 3) {
    if (long r = raw::sys(SYS_dup3, report_fd, 3, O_CLOEXEC); r < 0) child_fail(report_fd, kSetup, static_cast<int>(-r));
    report_fd = 3;
  }
  // gVisor (runsc 20221219) refuses a last descriptor above INT_MAX with EINVAL.
  if (long r = raw::sys(SYS_close_range, 4, ~0U, 0); r != 0 && (r = raw::sys(SYS_close_range, 4, INT_MAX, 0)) != 0)
    child_fail(report_fd, kSetup, static_cast<int>(-r));
  const SpawnRequest& req = *args.req;
  if (!req.cwd.empty())
    if (long r = raw::sys(SYS_chdir, req.cwd.c_str()); r != 0) child_fail(report_fd, kChdir, static_cast<int>(-r));
  if (req.confine) {
    // The seccomp filter is already in force: the agent installed it on itself.
    int e = drop_privileges();
    if (e) child_fail(report_fd, kConfine, e);
  }
  // gVisor (runsc 20221219) has no child subreapers (EINVAL): orphans of the
  // command then go to the agent, the container's init, which reaps them; the
  // leftover scan still finds them by session and process group, but a
  // re-parented daemon in a session of its own escapes it there.
  long sub = raw::sys(SYS_prctl, PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  if (sub != 0 && sub != -EINVAL) child_fail(report_fd, kSetup, static_cast<int>(-sub));
  pid_t cmd = start_command(args.plan, report_fd);
  // The shim keeps no end of the command's pipes or the report pipe, so EOF
  // on them means what it says. Signals to the process group are the
  // command's business, not the shim's. From here on, nothing of the agent's
  // is read: once the report closes, spawn returns and frees it.
  raw::sys(SYS_close, report_fd);
  // Blocked, not ignored one by one (one call, not 60): the shim outlives
  // whatever is sent to the command's group or session, and waitpid needs no
  // signal. Only the typed-signal relays of a terminal stay deliverable.
  uint64_t all = ~0ULL;
  if (io.tty && io.signal_keys) {
    keep_terminal_for_signal_keys();
    for (int sig : {SIGINT, SIGQUIT, SIGTSTP}) all &= ~signal_bit(shim_signal_for(sig));
  }
  set_signal_mask(all);
  for (int fd = 0; fd <= 2; ++fd) raw::sys(SYS_close, fd);
  int status = 0;
  for (;;) {
    long done = raw::sys(SYS_wait4, -1, &status, 0, nullptr);
    if (done == cmd) break;
    if (done < 0 && done != -EINTR) raw::exit_group(125);
    // Anything else is an orphan of the command, adopted by the shim: reaped.
  }
  end_leftovers(sub == 0);
  mirror(status);
}

int shim_main(void* args) { run_shim(*static_cast<const ShimArgs*>(args)); }

// The shims' stacks. A shim runs on one until it exits, which the kernel
// marks by zeroing its slot's word (CLONE_CHILD_CLEARTID); the next spawn
// then reuses it, pages already faulted in. Slots are never freed: the
// kernel writes to them when a shim ends.
struct ShimStack {
  char* base;
  pid_t running;  ///< nonzero while a shim runs on it
};
constexpr size_t kShimStackSize = 256 * 1024;  // kill_descendants' scan of /proc takes ~100 KB
constexpr size_t kGuard = 4096;

ShimStack& free_shim_stack() {
  static std::vector<std::unique_ptr<ShimStack>> stacks;
  for (auto& s : stacks)
    if (__atomic_load_n(&s->running, __ATOMIC_ACQUIRE) == 0) return *s;
  void* m = ::mmap(nullptr, kShimStackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) throw sys_error("cannot map a stack for the command's shim", errno);
  ::mprotect(m, kGuard, PROT_NONE);  // an overflow faults instead of writing into the agent's memory
  stacks.push_back(std::make_unique<ShimStack>(ShimStack{static_cast<char*>(m), 0}));
  return *stacks.back();
}

// A command's stdin when it is given none: one /dev/null (without one, the
// root directory, whose reads fail at once), opened by the first exec and
// kept, not opened and closed by each (two calls, each a trap to gVisor's
// sentry). Commands share its open file, which is harmless: /dev/null holds
// no data and no position, so flags one command sets change nothing another
// reads.
int kept_null_input() {
  static int fd = -1;
  if (fd < 0) fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd < 0) fd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return fd;
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
    child.in = kept_null_input();
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

// Not a fork: the shim shares the agent's memory (CLONE_VM) on a stack of
// its own. A fork write-protected every page of the agent, whose next writes
// were then copy-on-write faults, and the shim faulted in again every page it
// ran and unmapped its copy at exit: under a nested hypervisor each of those
// traps, and they were about half of an exec's cost in the agent
// (docs/speed.md). The shim's code is written for it: raw system calls,
// nothing allocated, nothing of the agent's written, and the request read
// only until the report pipe closes, which spawn waits for. The agent is not
// dumpable, and dumpability is the memory's, so a command cannot ptrace its
// shim into the agent's memory either.
pid_t start_shim(ShimArgs& args) {
  ShimStack& stack = free_shim_stack();
  __atomic_store_n(&stack.running, 1, __ATOMIC_RELEASE);
  pid_t pid = ::clone(shim_main, stack.base + kShimStackSize, CLONE_VM | CLONE_CHILD_CLEARTID | SIGCHLD, &args,
                      nullptr, nullptr, &stack.running);
  if (pid < 0) {
    int e = errno;
    __atomic_store_n(&stack.running, 0, __ATOMIC_RELEASE);
    throw sys_error("cannot start the command's shim", e);
  }
  return pid;
}

}  // namespace

void reset_signal_dispositions(bool fresh) {
  if (fresh) return;  // started by a kernel, every disposition default
  // Of what the agent's starter set, only an ignored signal outlives exec:
  // reset those the kernel lists, or all when it does not say (gVisor).
  unsigned long ignored = ~0ul;
  raw::status_mask("SigIgn", ignored);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP && (ignored >> (sig - 1) & 1)) ::signal(sig, SIG_DFL);
}

Spawned spawn(const SpawnRequest& req, SpawnFailure& failure) {
  if (req.argv.empty()) throw Error(Errc::invalid_argument, "empty command");
  // Built before the clone: the shim must not allocate.
  std::vector<std::string> env_strings;
  for (auto& [k, v] : req.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv{nullptr}, envp;  // argv[0]: exec_command's spare slot
  for (auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  auto path_it = req.env.find("PATH");
  const char* path = path_it != req.env.end() ? path_it->second.c_str() : "/usr/local/bin:/usr/bin:/bin";

  Spawned s;
  Pty pty;
  ShimArgs args{&req, {argv.data(), envp.data(), path}, {-1, -1, -1, -1, nullptr}};
  ShimIO& child = args.io;
  // The child's ends are the agent's to close once the child holds them
  // (but the kept /dev/null).
  auto close_child_ends = [&] {
    for (int fd : {child.in, child.out, child.err, child.report})
      if (fd >= 0 && fd != kept_null_input()) ::close(fd);
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
  pid_t pid;
  try {
    pid = start_shim(args);
  } catch (...) {
    close_child_ends();
    ::close(report[0]);
    throw;
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
