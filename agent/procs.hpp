// Background processes (`sbx exec -d`): started on one host connection, they
// outlive it. Their output goes to a kept log on the sandbox's disk
// (proc_log.hpp) and to whoever is attached (`sbx logs -f`, `sbx attach`);
// the table remembers them after they exit (the last kMaxExited), so their
// status and output can be asked for later.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/proc_log.hpp"
#include "agent/spawn.hpp"
#include "core/fd.hpp"
#include "core/protocol.hpp"
#include "core/spec.hpp"

namespace sbx::agent {

/// Exited background processes kept in the table (with their logs); older ones are dropped.
inline constexpr size_t kMaxExited = 64;

/// {exit_code, signal} of a wait status: 128+N for a death by signal N.
nlohmann::json exit_status_json(int status);

/// How the table reaches the host connections the server holds.
struct Outlet {
  std::function<void(int conn, const std::string& frame)> send;
  std::function<bool(int conn)> congested;  ///< the connection's queue is over its high-water mark
};

class ProcTable {
 public:
  explicit ProcTable(Outlet out) : out_(std::move(out)) {}
  ProcTable(const ProcTable&) = delete;
  ProcTable& operator=(const ProcTable&) = delete;

  /// A background exec: answers `started {pid}`, or `exit` with the reason it could not start.
  void start(int conn, uint32_t channel, const SpawnRequest& req);
  /// proc_list, proc_attach or proc_signal.
  void request(int conn, const proto::Frame& f);
  /// stdin_data, stdin_eof, resize, signal or end on an attach channel;
  /// false when (conn, channel) is not attached to a process.
  bool input(int conn, const proto::Frame& f);
  /// A host connection closed: its attachers go (the processes do not).
  void drop_conn(int conn);

  /// A descriptor to poll for the table, and what it is.
  struct Watch {
    int fd;
    short events;
    pid_t pid;
    int stream;  ///< 1 stdout, 2 stderr, 0 stdin (POLLOUT)
  };
  /// What to poll now; output is not read while an attached host is congested.
  std::vector<Watch> watches() const;
  /// poll said w is ready.
  void ready(const Watch& w);
  /// A child was reaped; true when it was a background process (now exited).
  bool reaped(pid_t pid, int status);
  /// Background processes still running (ping's `running`, so idle gc keeps the sandbox).
  size_t running() const;
  /// Milliseconds since the last background process ended (ping's `quiet_ms`:
  /// idleness counts from then), or -1 when none has.
  int64_t quiet_ms() const;
  /// The agent stops: every running background process dies with its tree.
  void kill_all();

 private:
  struct Attacher {
    int conn;
    uint32_t channel;
    bool follow, input;
    bool paused = false;  ///< the micro-VM relay's flow control: SIGSTOP / SIGCONT on the channel
  };
  struct Proc {
    ProcessInfo info;
    Fd out, err, in, term;
    bool signal_keys = false;  ///< agent/pty.hpp
    std::string stdin_buf;
    bool stdin_eof = false;
    KeptLog out_log, err_log;
    std::vector<Attacher> attachers;
    int64_t start_mono_ms = 0;
    int64_t duration_ms = 0;  ///< once exited
  };
  Proc& find(const nlohmann::json& req);
  void list(int conn, uint32_t channel);
  void attach(int conn, uint32_t channel, const nlohmann::json& req);
  void signal(int conn, uint32_t channel, const nlohmann::json& req);
  /// An attacher reads slowly (its connection is congested, or the micro-VM relay paused it):
  /// the process's output waits, and so, once its pipe is full, does the process.
  bool held_back(const Proc& p) const;
  void pump(Proc& p, int stream, bool drain);
  void flush_stdin(Proc& p);
  void forget_oldest_exited();
  const std::string& log_dir();

  Outlet out_;
  std::map<pid_t, Proc> procs_;
  std::deque<pid_t> exited_;  // oldest first
  int64_t last_exit_mono_ms_ = -1;
  std::string dir_;
  uint64_t next_log_ = 0;
};

}  // namespace sbx::agent
