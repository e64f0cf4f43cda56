#include "backends/subprocess/launch.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <grp.h>

#include "backends/common/disk.hpp"
#include "backends/common/hostview.hpp"
#include "backends/common/net/dns.hpp"
#include "backends/common/own_dir.hpp"
#include "backends/common/process.hpp"
#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/fsutil.hpp"
#include "core/unix_socket.hpp"

namespace sbx::subprocess {

namespace {

constexpr uint32_t kIdCount = 65536;
constexpr int kListenFd = 3;
constexpr int kAgentFd = 4;
constexpr int kReportFd = 5;

// Each step the init takes between fork and exec, so a failure names it.
enum Step : int {
  kStepPrivate = 1, kStepTmpfs, kStepLayers, kStepOverlay, kStepBind, kStepBindRo, kStepDirs, kStepProc,
  kStepProcSys, kStepDev, kStepDevNode, kStepDevPts, kStepShm, kStepHostname, kStepLoopback, kStepPivot,
  kStepUserns, kStepWaitMaps, kStepSetId, kStepFds, kStepExec, kStepNetns, kStepResolv,
};

const char* step_name(int s) {
  switch (s) {
    case kStepPrivate: return "making mounts private";
    case kStepTmpfs: return "mounting the writable layer (its disk image)";
    case kStepLayers: return "preparing the overlay directories";
    case kStepOverlay: return "mounting the overlay root filesystem";
    case kStepBind: return "bind-mounting the host's read-only directories";
    case kStepBindRo: return "making the base read-only";
    case kStepDirs: return "creating the sandbox's own directories";
    case kStepProc: return "mounting /proc";
    case kStepProcSys: return "making /proc/sys read-only";
    case kStepDev: return "mounting /dev";
    case kStepDevNode: return "binding device nodes";
    case kStepDevPts: return "mounting /dev/pts";
    case kStepShm: return "mounting /dev/shm";
    case kStepHostname: return "setting the hostname";
    case kStepLoopback: return "bringing up loopback";
    case kStepPivot: return "switching to the sandbox root (pivot_root)";
    case kStepUserns: return "creating the user namespace";
    case kStepWaitMaps: return "waiting for the uid map";
    case kStepSetId: return "becoming the sandbox's root";
    case kStepFds: return "preparing descriptors";
    case kStepExec: return "starting sbx-agent";
    case kStepNetns: return "joining the network jail's namespace";
    case kStepResolv: return "writing /etc/resolv.conf";
  }
  return "starting the sandbox";
}

struct Failure {
  int step;
  int err;
};

// All strings the init needs, built before fork: after fork in a possibly
// multi-threaded process only raw system calls are safe.
struct Prepared {
  std::string mnt, upper, work, root, overlay_opts, layer_dev;
  std::vector<std::pair<std::string, std::string>> binds;  // host -> target
  // Directories the sandbox's root must own, as seen inside it (own_dir::make).
  std::vector<std::string> own_dirs;
  std::string proc, proc_sys, dev, dev_pts, dev_shm, dev_ptmx;
  std::vector<std::pair<std::string, std::string>> dev_nodes;  // host -> target
  std::vector<std::pair<std::string, std::string>> dev_links;  // target -> link path
  std::string hostname;
  std::string etc, resolv_conf;  // resolv_conf empty: leave the base's
  std::vector<std::string> argv_store;
  std::vector<char*> argv;
  std::vector<char*> envp;
  uint32_t uid_base;
};

[[noreturn]] void fail(int fd, int step) {
  Failure f{step, errno};
  ssize_t ignored = ::write(fd, &f, sizeof f);
  (void)ignored;
  ::_exit(1);
}

void bring_up_loopback(int report_fd) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) fail(report_fd, kStepLoopback);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) < 0) fail(report_fd, kStepLoopback);
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
  if (::ioctl(s, SIOCSIFFLAGS, &ifr) < 0) fail(report_fd, kStepLoopback);
  ::close(s);
}

// The sandbox's init, from fork to exec. Runs as the host's root inside the
// new mount/PID/net/IPC/UTS/cgroup namespaces until it enters its user namespace.
[[noreturn]] void init_child(const Prepared& p, int report_fd, int go_fd, int listen_fd, int agent_fd, int log_fd) {
  int r = report_fd;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(r, kStepPrivate);
  // Mounted in this namespace only: when the sandbox ends, so does the mount, and the loop device detaches itself.
  if (::mount(p.layer_dev.c_str(), p.mnt.c_str(), "ext4", MS_NOSUID | MS_NODEV, disk::kMountOptions) != 0)
    fail(r, kStepTmpfs);
  // They exist already when a persistent sandbox starts again on its old disk.
  for (auto* d : {&p.upper, &p.work, &p.root})
    if (::mkdir(d->c_str(), 0755) != 0 && errno != EEXIST) fail(r, kStepLayers);
  if (::chown(p.upper.c_str(), p.uid_base, p.uid_base) != 0) fail(r, kStepLayers);
  if (::mount("overlay", p.root.c_str(), "overlay", MS_NOSUID | MS_NODEV, p.overlay_opts.c_str()) != 0)
    fail(r, kStepOverlay);
  for (auto& [host, target] : p.binds) {
    if (::mount(host.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) fail(r, kStepBind);
    if (::mount(nullptr, target.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
      fail(r, kStepBindRo);
  }
  {
    int root_fd = ::open(p.root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root_fd < 0) fail(r, kStepDirs);
    for (auto& d : p.own_dirs) {
      bool replaced = false;  // the sandbox's own link or file stays; the host goes no further
      if ((errno = own_dir::make(root_fd, d.c_str(), p.uid_base, p.uid_base, &replaced)) != 0) fail(r, kStepDirs);
    }
    ::close(root_fd);
  }
  if (!p.resolv_conf.empty() && (errno = net::dns::write_resolv_conf(p.etc.c_str(), p.resolv_conf.data(), p.resolv_conf.size())) != 0)
    fail(r, kStepResolv);
  ::mkdir(p.proc.c_str(), 0555);
  if (::mount("proc", p.proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) fail(r, kStepProc);
  if (::mount(p.proc_sys.c_str(), p.proc_sys.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
      ::mount(nullptr, p.proc_sys.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              nullptr) != 0)
    fail(r, kStepProcSys);
  ::mkdir(p.dev.c_str(), 0755);
  if (::mount("tmpfs", p.dev.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=64k") != 0) fail(r, kStepDev);
  for (auto& [host, target] : p.dev_nodes) {
    int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) fail(r, kStepDevNode);
    ::close(fd);
    if (::mount(host.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) fail(r, kStepDevNode);
  }
  for (auto& [target, link] : p.dev_links)
    if (::symlink(target.c_str(), link.c_str()) != 0) fail(r, kStepDev);
  if (::mkdir(p.dev_pts.c_str(), 0755) != 0 ||
      ::mount("devpts", p.dev_pts.c_str(), "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620") != 0)
    fail(r, kStepDevPts);
  if (::mkdir(p.dev_shm.c_str(), 01777) != 0 ||
      ::mount("shm", p.dev_shm.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m") != 0)
    fail(r, kStepShm);
  if (::sethostname(p.hostname.data(), p.hostname.size()) != 0) fail(r, kStepHostname);
  bring_up_loopback(r);
  if (::chdir(p.root.c_str()) != 0) fail(r, kStepPivot);
  // pivot_root(".", ".") stacks the old root under the new one; detaching it leaves only the sandbox.
  if (::syscall(SYS_pivot_root, ".", ".") != 0) fail(r, kStepPivot);
  if (::umount2(".", MNT_DETACH) != 0) fail(r, kStepPivot);
  if (::chdir("/") != 0) fail(r, kStepPivot);
  // A user namespace's owner is the uid that makes it, and the kernel charges
  // per-user counts inside it (inotify instances and watches) to the owner in
  // the parent as well: owned by host root, every sandbox would share root's
  // budget (fs.inotify.max_user_instances, 128) and one exhauster would starve
  // the host and its neighbours. Owned by the sandbox's own host uid, each has
  // its own. Capabilities stay (no setuid fixup), so no policy on unprivileged
  // user namespaces applies.
  if (::prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP) != 0 || ::setgroups(0, nullptr) != 0 ||
      ::setresgid(p.uid_base, p.uid_base, p.uid_base) != 0 || ::setresuid(p.uid_base, p.uid_base, p.uid_base) != 0)
    fail(r, kStepUserns);
  if (::unshare(CLONE_NEWUSER) != 0) fail(r, kStepUserns);
  // Tell the host to write our uid/gid maps, then wait until it has.
  char c = 'U';
  if (::write(report_fd, &c, 1) != 1) fail(r, kStepWaitMaps);
  if (::read(go_fd, &c, 1) != 1) fail(r, kStepWaitMaps);
  if (::setresgid(0, 0, 0) != 0 || ::setgroups(0, nullptr) != 0 || ::setresuid(0, 0, 0) != 0) fail(r, kStepSetId);
  // Only the listening socket and the agent binary pass to the agent; stdin is
  // /dev/null, output goes to the log. Everything moves above 100 first so the
  // final dup3s cannot overwrite a descriptor still to be moved.
  int hi_listen = ::fcntl(listen_fd, F_DUPFD_CLOEXEC, 100);
  int hi_agent = ::fcntl(agent_fd, F_DUPFD_CLOEXEC, 100);
  int hi_report = ::fcntl(report_fd, F_DUPFD_CLOEXEC, 100);
  int hi_log = ::fcntl(log_fd, F_DUPFD_CLOEXEC, 100);
  if (hi_listen < 0 || hi_agent < 0 || hi_report < 0 || hi_log < 0) fail(r, kStepFds);
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(hi_log, 1) < 0 || ::dup2(hi_log, 2) < 0) fail(r, kStepFds);
  if (::dup3(hi_listen, kListenFd, 0) < 0 || ::dup3(hi_agent, kAgentFd, O_CLOEXEC) < 0 ||
      ::dup3(hi_report, kReportFd, O_CLOEXEC) < 0)
    fail(r, kStepFds);
  r = kReportFd;
  ::close_range(kReportFd + 1, ~0U, 0);
  ::syscall(SYS_execveat, kAgentFd, "", p.argv.data(), p.envp.data(), AT_EMPTY_PATH);
  fail(r, kStepExec);
}

Prepared prepare(const LaunchPlan& plan) {
  Prepared p;
  p.mnt = plan.state_dir + "/mnt";
  p.upper = p.mnt + "/upper";
  p.work = p.mnt + "/work";
  p.root = p.mnt + "/root";
  p.layer_dev = plan.layer_dev;
  // volatile: a scratch layer needs no syncs. Not for a persistent one: overlayfs
  // refuses to mount a workdir a volatile mount used before, and it must mount again after a reboot.
  p.overlay_opts = "lowerdir=" + plan.lower + ",upperdir=" + p.upper + ",workdir=" + p.work;
  if (!plan.persistent) p.overlay_opts += ",volatile";
  for (auto& b : plan.ro_binds) p.binds.emplace_back(b, p.root + b);
  p.own_dirs = hostview::own_dirs(plan.workdir);
  hostview::check_own_dirs(plan.lower, p.own_dirs);
  p.proc = p.root + "/proc";
  p.proc_sys = p.proc + "/sys";
  p.dev = p.root + "/dev";
  p.dev_pts = p.dev + "/pts";
  p.dev_shm = p.dev + "/shm";
  for (auto* n : {"null", "zero", "full", "random", "urandom", "tty"})
    p.dev_nodes.emplace_back(std::string("/dev/") + n, p.dev + "/" + n);
  p.dev_links = {{"pts/ptmx", p.dev + "/ptmx"},
                 {"/proc/self/fd", p.dev + "/fd"},
                 {"/proc/self/fd/0", p.dev + "/stdin"},
                 {"/proc/self/fd/1", p.dev + "/stdout"},
                 {"/proc/self/fd/2", p.dev + "/stderr"}};
  p.hostname = plan.hostname;
  p.etc = p.root + "/etc";
  p.resolv_conf = plan.resolv_conf;
  p.uid_base = plan.uid_base;
  p.argv_store = {plan.title, "--listen-fd", std::to_string(kListenFd)};
  for (auto& a : p.argv_store) p.argv.push_back(a.data());
  p.argv.push_back(nullptr);
  static char env_path[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  p.envp = {env_path, nullptr};
  return p;
}


void write_id_maps(pid_t pid, uint32_t base) {
  std::string map = "0 " + std::to_string(base) + " " + std::to_string(kIdCount) + "\n";
  std::string proc = "/proc/" + std::to_string(pid);
  write_knob(proc + "/uid_map", map);
  write_knob(proc + "/gid_map", map);
}

}  // namespace


Launched launch(const LaunchPlan& plan, const cgroup::Group& group) {
  make_dirs(plan.state_dir + "/mnt", 0700);
  Fd lsock = listen_unix(plan.state_dir + "/agent.sock");
  Fd agent(::open(plan.agent_path.c_str(), O_PATH | O_CLOEXEC));
  if (!agent) throw sys_error("cannot open " + plan.agent_path, errno);
  Fd log(::open((plan.state_dir + "/agent.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!log) throw sys_error("cannot create the agent log", errno);
  Prepared prep = prepare(plan);
  Fd netns;
  if (!plan.netns.empty()) {
    netns = Fd(::open(plan.netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!netns) throw sys_error("cannot open the network namespace " + plan.netns, errno);
  }

  int report[2], go[2], pidpipe[2];
  if (::pipe2(report, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(pidpipe, O_CLOEXEC) != 0)
    throw sys_error("pipe", errno);
  Fd report_r(report[0]), report_w(report[1]), go_r(go[0]), go_w(go[1]), pid_r(pidpipe[0]), pid_w(pidpipe[1]);

  // The intermediate process unshares and forks the init, then exits, so the
  // sandbox outlives this sbx process and is no child of it.
  pid_t mid = ::fork();
  if (mid < 0) throw sys_error("cannot fork", errno);
  if (mid == 0) {
    char c;
    if (::read(go_r.get(), &c, 1) != 1) ::_exit(1);  // joined to the cgroup by the parent
    ::setsid();
    // A jail's namespace was made by host root, so the sandbox's root (in a
    // child user namespace) cannot reconfigure it; otherwise a fresh one.
    int step = kStepNetns;
    int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;
    if (!netns) flags |= CLONE_NEWNET;
    bool ok = !netns || ::setns(netns.get(), CLONE_NEWNET) == 0;
    if (ok) {
      step = kStepPrivate;
      ok = ::unshare(flags) == 0;
    }
    if (!ok) {
      Failure f{step, errno};
      ssize_t ignored = ::write(report_w.get(), &f, sizeof f);
      (void)ignored;
      ::_exit(1);
    }
    pid_t init = ::fork();
    if (init == 0) init_child(prep, report_w.get(), go_r.get(), lsock.get(), agent.get(), log.get());
    ssize_t ignored = ::write(pid_w.get(), &init, sizeof init);
    (void)ignored;
    ::_exit(init > 0 ? 0 : 1);
  }
  report_w.reset();
  pid_w.reset();
  auto reap_mid = [&] {
    int st;
    while (::waitpid(mid, &st, 0) < 0 && errno == EINTR) {
    }
  };
  try {
    group.add(mid);
  } catch (...) {
    ::kill(mid, SIGKILL);
    reap_mid();
    throw;
  }
  char c = 'G';
  write_all(go_w.get(), std::string_view(&c, 1));
  pid_t init = -1;
  bool got_pid = read_exact(pid_r.get(), &init, sizeof init);
  reap_mid();
  // From here the init is the source of truth: it reports 'U' (maps please),
  // a Failure, or EOF once the agent is exec'd (the report pipe is close-on-exec).
  auto read_failure = [&](char first) -> Error {
    Failure f{};
    auto* raw = reinterpret_cast<char*>(&f);
    raw[0] = first;
    if (!read_exact(report_r.get(), raw + 1, sizeof f - 1)) f = {0, 0};
    return Error(errc_from_errno(f.err), step_name(f.step), f.err);
  };
  char msg;
  ssize_t n = ::read(report_r.get(), &msg, 1);
  if (!got_pid || init <= 0) {
    if (n == 1) throw read_failure(msg);
    throw Error(Errc::io, "could not start the sandbox's init process");
  }
  if (n != 1) throw Error(Errc::io, "the sandbox's init died before entering its user namespace");
  if (msg != 'U') throw read_failure(msg);
  try {
    write_id_maps(init, plan.uid_base);
  } catch (Error& e) {
    ::kill(init, SIGKILL);
    throw e.add_context("mapping the sandbox's user ids");
  }
  write_all(go_w.get(), std::string_view(&c, 1));
  n = ::read(report_r.get(), &msg, 1);
  if (n == 1) throw read_failure(msg);
  Launched out;
  out.pid = init;
  out.start_time = proc::start_time(init);
  if (!out.start_time) throw Error(Errc::io, "the sandbox's agent exited at once; see " + plan.state_dir + "/agent.log");
  return out;
}

}  // namespace sbx::subprocess
