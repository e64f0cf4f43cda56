#include "agent/tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <vector>

namespace sbx::agent {

namespace {

// How long a kill may keep scanning for stragglers; a tree that still forks
// after that is left to the next kill (the agent's loop must go on).
constexpr long kKillDeadlineMs = 2000;

struct ProcStat {
  pid_t ppid, pgrp, session;
  char state;
};

bool read_stat(pid_t pid, ProcStat& info) {
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
  return std::sscanf(p + 1, " %c %d %d %d", &info.state, &info.ppid, &info.pgrp, &info.session) == 4;
}

// The living members of root's tree (root included when alive): descendants
// by parent links, and whatever is in root's process group or session.
std::vector<pid_t> members(pid_t root) {
  std::map<pid_t, ProcStat> procs;
  if (DIR* d = ::opendir("/proc")) {
    while (auto* e = ::readdir(d)) {
      char* end;
      long pid = std::strtol(e->d_name, &end, 10);
      if (*end || pid <= 1) continue;
      ProcStat info{};
      if (read_stat(static_cast<pid_t>(pid), info)) procs[static_cast<pid_t>(pid)] = info;
    }
    ::closedir(d);
  }
  std::set<pid_t> tree{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (auto& [pid, info] : procs) {
      if (tree.count(pid)) continue;
      if (tree.count(info.ppid) || info.session == root || info.pgrp == root) {
        tree.insert(pid);
        grew = true;
      }
    }
  }
  std::vector<pid_t> out;
  for (pid_t pid : tree) {
    auto it = procs.find(pid);
    // A zombie holds nothing but its pid; its parent or the agent reaps it.
    if (it != procs.end() && it->second.state != 'Z' && it->second.state != 'X') out.push_back(pid);
  }
  return out;
}

long mono_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000;
}

void pause_briefly() {
  timespec ts{0, 1'000'000};
  ::nanosleep(&ts, nullptr);
}

void kill_all(pid_t root, bool spare_root) {
  long deadline = mono_ms() + kKillDeadlineMs;
  // Freeze first: every member found is stopped, and a scan that finds no one
  // new means nothing is left that could still fork (a child forked before its
  // parent stopped shows up in the next scan and is stopped in turn).
  std::set<pid_t> stopped;
  for (bool found_new = true; found_new && mono_ms() < deadline;) {
    found_new = false;
    for (pid_t pid : members(root)) {
      if ((spare_root && pid == root) || !stopped.insert(pid).second) continue;
      ::kill(pid, SIGSTOP);
      found_new = true;
    }
  }
  // A leftover scan that found no member: nobody is left who could have
  // forked one since, so a second scan would only find nobody again. Under
  // gVisor the shim cannot be a subreaper, so every exec ends with a scan.
  if (spare_root && stopped.empty()) return;
  // Then kill, and again until a scan finds nobody alive (SIGKILL lands at
  // once on a stopped process, but a straggler may have forked meanwhile).
  for (int round = 0;; ++round) {
    bool any = false;
    for (pid_t pid : members(root)) {
      if (spare_root && pid == root) continue;
      ::kill(pid, SIGKILL);
      any = true;
    }
    if (!spare_root) {
      // The whole group in one call: a fork racing it cannot escape.
      ::kill(-root, SIGKILL);
      ::kill(root, SIGKILL);
    }
    if (!any || mono_ms() >= deadline) return;
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
  for (pid_t pid : members(root))
    if (pid != root) ::kill(pid, sig);
}

}  // namespace sbx::agent
