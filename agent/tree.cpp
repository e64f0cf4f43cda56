#include "agent/tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "agent/raw.hpp"

namespace sbx::agent {

namespace {

// How long a kill may keep scanning for stragglers; a tree that still forks
// after that is left to the next kill (the agent's loop must go on).
constexpr long kKillDeadlineMs = 2000;

// What one scan of /proc can hold. The default pids cap is 256; with more
// processes than this a scan sees the first ones only, and the kill rounds,
// which repeat until a scan finds nobody, reach the rest as those die.
constexpr int kMaxProcs = 4096;

struct ProcStat {
  pid_t pid, ppid, pgrp, session;
  bool member;
};

// One look at /proc: the living processes (zombies hold nothing but their pid;
// their parent or the agent reaps them), sorted by pid.
struct Scan {
  ProcStat procs[kMaxProcs];
  int count = 0;
  bool truncated = false;
};

// This file runs in an exec's shim too, which shares the agent's memory: no
// allocation and no libc call that could set errno (agent/raw.hpp). Hence the
// hand-made number formatting and parsing.
char* put_number(char* at, long n) {
  char digits[24];
  int k = 0;
  do digits[k++] = static_cast<char>('0' + n % 10);
  while ((n /= 10) > 0);
  while (k > 0) *at++ = digits[--k];
  return at;
}

const char* get_number(const char* p, long& out) {
  while (*p == ' ') ++p;
  bool negative = *p == '-';
  if (negative) ++p;
  if (*p < '0' || *p > '9') return nullptr;
  long n = 0;
  for (; *p >= '0' && *p <= '9'; ++p) n = n * 10 + (*p - '0');
  out = negative ? -n : n;
  return p;
}

bool read_stat(pid_t pid, ProcStat& info) {
  char path[48] = "/proc/", buf[512];
  char* end = put_number(path + 6, pid);
  const char tail[] = "/stat";
  for (size_t i = 0; i < sizeof tail; ++i) end[i] = tail[i];
  long fd = raw::sys(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  long n = raw::sys(SYS_read, fd, buf, sizeof buf - 1);
  raw::sys(SYS_close, fd);
  if (n <= 0) return false;
  buf[n] = 0;
  // The command name may hold spaces and parentheses: parse after the last ')'.
  const char* p = nullptr;
  for (long i = n - 1; i >= 0 && !p; --i)
    if (buf[i] == ')') p = buf + i + 1;
  if (!p || p[0] != ' ' || !p[1]) return false;
  char state = p[1];
  if (state == 'Z' || state == 'X') return false;
  long ppid, pgrp, session;
  if (!(p = get_number(p + 2, ppid)) || !(p = get_number(p, pgrp)) || !get_number(p, session)) return false;
  info = {pid, static_cast<pid_t>(ppid), static_cast<pid_t>(pgrp), static_cast<pid_t>(session), false};
  return true;
}

// `skip`: a pid left out of the scan (0: none).
void read_proc(Scan& scan, pid_t skip) {
  scan.count = 0;
  scan.truncated = false;
  long dir = raw::sys(SYS_openat, AT_FDCWD, "/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  alignas(8) char buf[4096];
  for (;;) {
    long n = raw::sys(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      auto* e = reinterpret_cast<struct dirent64*>(buf + at);
      at += e->d_reclen;
      long pid;
      const char* end = get_number(e->d_name, pid);
      if (!end || *end || pid <= 1 || pid == skip) continue;
      if (scan.count == kMaxProcs) {
        scan.truncated = true;
        continue;
      }
      if (read_stat(static_cast<pid_t>(pid), scan.procs[scan.count])) ++scan.count;
    }
  }
  raw::sys(SYS_close, dir);
  std::sort(scan.procs, scan.procs + scan.count, [](const ProcStat& a, const ProcStat& b) { return a.pid < b.pid; });
}

// Marks the living members of root's tree (root included when alive, unless
// spare_root: then root is not read at all, three calls fewer, each a trap
// to gVisor's sentry at every exec's leftover scan): descendants by parent
// links, and whatever is in root's process group or session.
void find_members(pid_t root, Scan& scan, bool spare_root = false) {
  read_proc(scan, spare_root ? root : 0);
  ProcStat* first = scan.procs;
  ProcStat* last = scan.procs + scan.count;
  auto is_member = [&](pid_t pid) {
    if (pid == root) return true;
    ProcStat* it = std::lower_bound(first, last, pid, [](const ProcStat& a, pid_t p) { return a.pid < p; });
    return it != last && it->pid == pid && it->member;
  };
  for (bool grew = true; grew;) {
    grew = false;
    for (ProcStat* p = first; p != last; ++p) {
      if (p->member) continue;
      if (p->pid == root || p->session == root || p->pgrp == root || is_member(p->ppid)) {
        p->member = true;
        grew = true;
      }
    }
  }
}

long mono_ms() {
  timespec ts{};
  raw::sys(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000;
}

void pause_briefly() {
  timespec ts{0, 1'000'000};
  raw::sys(SYS_nanosleep, &ts, nullptr);
}

// The processes a kill has stopped, sorted, to stop each once.
struct Stopped {
  pid_t pids[kMaxProcs];
  int count = 0;
  bool full = false;
  bool insert(pid_t pid) {
    pid_t* it = std::lower_bound(pids, pids + count, pid);
    if (it != pids + count && *it == pid) return false;
    if (count == kMaxProcs) {
      full = true;
      return true;  // stopped again, which is harmless
    }
    std::copy_backward(it, pids + count, pids + count + 1);
    *it = pid;
    ++count;
    return true;
  }
};

void kill_all(pid_t root, bool spare_root) {
  // Read after the first scan: most scans (every exec's under gVisor) find
  // nobody, and the clock is a raw system call here (agent/raw.hpp).
  long deadline = 0;
  Scan scan;
  Stopped stopped;
  // Freeze first: every member found is stopped, and a scan that finds no one
  // new means nothing is left that could still fork (a child forked before its
  // parent stopped shows up in the next scan and is stopped in turn).
  bool truncated = false;
  for (bool found_new = true; found_new && (!deadline || mono_ms() < deadline);) {
    found_new = false;
    find_members(root, scan, spare_root);
    truncated = truncated || scan.truncated;
    for (int i = 0; i < scan.count; ++i) {
      pid_t pid = scan.procs[i].pid;
      if (!scan.procs[i].member || (spare_root && pid == root) || !stopped.insert(pid)) continue;
      raw::sys(SYS_kill, pid, SIGSTOP);
      found_new = true;
    }
    // Past what a scan holds, stopping cannot tell old from new: kill.
    if (stopped.full) break;
    if (found_new && !deadline) deadline = mono_ms() + kKillDeadlineMs;
  }
  // A leftover scan that found no member: nobody is left who could have
  // forked one since, so a second scan would only find nobody again. Under
  // gVisor the shim cannot be a subreaper, so every exec ends with a scan.
  if (spare_root && stopped.count == 0 && !truncated) return;
  if (!deadline) deadline = mono_ms() + kKillDeadlineMs;
  // Then kill, and again until a scan finds nobody alive (SIGKILL lands at
  // once on a stopped process, but a straggler may have forked meanwhile).
  for (int round = 0;; ++round) {
    bool any = false;
    find_members(root, scan, spare_root);
    for (int i = 0; i < scan.count; ++i) {
      pid_t pid = scan.procs[i].pid;
      if (!scan.procs[i].member || (spare_root && pid == root)) continue;
      raw::sys(SYS_kill, pid, SIGKILL);
      any = true;
    }
    if (!spare_root) {
      // The whole group in one call: a fork racing it cannot escape.
      raw::sys(SYS_kill, -root, SIGKILL);
      raw::sys(SYS_kill, root, SIGKILL);
    }
    if ((!any && !scan.truncated) || mono_ms() >= deadline) return;
    if (round > 0) pause_briefly();  // let the kills land before looking again
  }
}

}  // namespace

void kill_tree(pid_t root) { kill_all(root, false); }

void kill_descendants(pid_t root) { kill_all(root, true); }

void signal_command(pid_t shim, int term_fd, int sig) {
  if (sig == SIGKILL) return kill_tree(shim);
  ::kill(-shim, sig);
  if (term_fd < 0) return;
  // A job-control shell moves its jobs into groups of their own. Where the
  // master cannot tell the foreground group (gVisor), the whole tree hears it.
  pid_t fg = ::tcgetpgrp(term_fd);
  if (fg < 0) signal_tree(shim, sig);
  else if (fg > 1 && fg != shim) ::kill(-fg, sig);
}

void signal_tree(pid_t root, int sig) {
  if (sig == SIGKILL) return kill_tree(root);
  Scan scan;
  find_members(root, scan);
  for (int i = 0; i < scan.count; ++i)
    if (scan.procs[i].member && scan.procs[i].pid != root) ::kill(scan.procs[i].pid, sig);
}

}  // namespace sbx::agent
