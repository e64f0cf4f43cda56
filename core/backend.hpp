// A Backend is where sandboxes live: this host (LocalBackend, through the
// drivers) or a remote sbx serve (the remote driver). The CLI and the server
// speak only to this interface.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/agent_client.hpp"
#include "core/copy.hpp"
#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/port_relay.hpp"
#include "core/snapshots.hpp"
#include "core/spec.hpp"

namespace sbx {

/// One thing gc did or would do.
struct GcAction {
  std::string kind;    ///< sandbox | pause | stray_dir | snapshot_copy | orphan | cache
  std::string target;  ///< sandbox id, directory or driver-specific orphan name
  std::string reason;  ///< "idle for 12m (timeout 10m)", "agent gone", ...
  bool done = false;   ///< false on --dry-run or failure
  std::string error;   ///< why it failed, if it did
};

struct GcReport {
  std::vector<GcAction> actions;
};

/// Records `a` in `out`, first running `fn` unless this is a dry run: done
/// when fn returns, its error when it throws (gc goes on with the next one).
inline void run_gc_action(std::vector<GcAction>& out, bool dry_run, GcAction a, const std::function<void()>& fn) {
  if (!dry_run) {
    try {
      fn();
      a.done = true;
    } catch (const Error& e) {
      a.error = e.what();
    }
  }
  out.push_back(std::move(a));
}

/// A sandbox's record plus what only a live check can tell.
struct SandboxStatus {
  SandboxRecord record;
  int running_execs = -1;  ///< from the agent; -1 when unknown
};

/// How a one-shot went (Backend::run_once).
struct OneShotResult {
  ExecResult exec;            ///< how the command ended
  SandboxSpec spec;           ///< the sandbox's spec, resolved as far as this side knows it
  std::string cleanup_error;  ///< why the sandbox could not be removed afterwards (gc will), or empty
};

/// Receives progress lines for steps that take over a second.
using Progress = std::function<void(const std::string&)>;

class Backend {
 public:
  virtual ~Backend() = default;
  /// Where this backend runs sandboxes, for messages ("local", a URL).
  virtual std::string where() const = 0;
  /// Creates and starts a sandbox; returns once its agent answers.
  virtual SandboxRecord create(const SandboxSpec& spec, const Progress& progress) = 0;
  /// Runs a command in a sandbox.
  virtual ExecResult exec(const std::string& id, const ExecRequest& req, ExecIO& io) = 0;
  /// A one-shot: creates a sandbox, runs one command in it and removes it. The
  /// sandbox lives no longer than this call's process (locally: its record
  /// names the process, and gc removes it once that is gone) or HTTP request
  /// (remotely: the manager removes it when the request goes away).
  virtual OneShotResult run_once(const SandboxSpec& spec, const ExecRequest& req, ExecIO& io) = 0;
  /// For a process that exits once a one-shot's result is out (the CLI): run_once
  /// then returns when the command has ended, and a detached process removes the
  /// sandbox, holding its lock, so that ls, rm and gc wait for it instead of
  /// seeing it. Not for a manager, which stays (and is multi-threaded).
  virtual void tear_down_one_shots_in_background() {}
  /// Every sandbox, with dead ones marked as such.
  virtual std::vector<SandboxRecord> list() = 0;
  /// One sandbox (an unambiguous id prefix works locally).
  virtual SandboxRecord get(const std::string& id) = 0;
  /// Destroys a sandbox and frees what it held.
  virtual void remove(const std::string& id) = 0;
  /// Starts a persistent sandbox again whose agent is gone (a host rebooted), on its own disk.
  virtual SandboxRecord start(const std::string& id) {
    throw Error(Errc::unavailable, "sbx start " + id + ": not supported by the " + where() + " backend");
  }
  /// Stops every process of a running sandbox (no CPU; memory and files kept): state paused.
  /// Pausing a paused sandbox is no error. Anything that needs its agent resumes it first.
  virtual SandboxRecord pause(const std::string& id) {
    throw Error(Errc::unavailable, "sbx pause " + id + ": not supported by the " + where() + " backend");
  }
  /// Lets a paused sandbox run again: state running. Resuming a running sandbox is no error.
  virtual SandboxRecord resume(const std::string& id) {
    throw Error(Errc::unavailable, "sbx resume " + id + ": not supported by the " + where() + " backend");
  }
  /// Copies a running or paused sandbox's files into a snapshot named `name` (a made-up
  /// name when empty): paused for the copy, resumed after (also on failure) unless it was
  /// paused already. A snapshot of that name is replaced. With `memory`, the sandbox's
  /// memory and processes too (docs/snapshots.md: runsc), saved at the moment its files are.
  virtual SnapshotInfo snapshot(const std::string& id, const std::string& name, bool memory) {
    (void)name, (void)memory;
    throw Error(Errc::unavailable, "sbx snapshot " + id + ": not supported by the " + where() + " backend");
  }
  /// Every snapshot, oldest first.
  virtual std::vector<SnapshotInfo> snapshots() {
    throw Error(Errc::unavailable, "sbx snapshot ls: not supported by the " + where() + " backend");
  }
  /// Removes a snapshot by name (its layer goes with its last name).
  virtual void remove_snapshot(const std::string& name) {
    throw Error(Errc::unavailable, "sbx snapshot rm " + name + ": not supported by the " + where() + " backend");
  }
  /// A new sandbox whose files (and with `memory` its running processes) are a copy of
  /// this one's now (a snapshot no name keeps).
  virtual SandboxRecord fork(const std::string& id, const Progress& progress, bool memory) {
    (void)progress, (void)memory;
    throw Error(Errc::unavailable, "sbx fork " + id + ": not supported by the " + where() + " backend");
  }
  /// The sandbox's background processes (`sbx exec -d`), running and exited.
  virtual std::vector<ProcessInfo> processes(const std::string& id) {
    throw Error(Errc::unavailable, "sbx ps " + id + ": not supported by the " + where() + " backend");
  }
  /// `sbx logs` (opts.input false) and `sbx attach`: replays a background process's kept
  /// output through io, then follows it live when opts.follow. Returns how the process
  /// ended, or nullopt when this returned first (not following, or the user detached).
  virtual std::optional<ExecResult> attach(const std::string& id, int pid, const AttachOptions& opts, ExecIO& io) {
    (void)pid, (void)opts, (void)io;
    throw Error(Errc::unavailable, "sbx attach " + id + ": not supported by the " + where() + " backend");
  }
  /// Sends sig to a background process's whole tree (`sbx kill`).
  virtual void signal_process(const std::string& id, int pid, int sig) {
    (void)pid, (void)sig;
    throw Error(Errc::unavailable, "sbx kill " + id + ": not supported by the " + where() + " backend");
  }
  /// A connected stream socket whose bytes reach 127.0.0.1:port inside the sandbox
  /// (over the agent's stream: no network needed) and whose reads are its replies;
  /// shutdown(SHUT_WR) on it is the EOF passed on. Throws unavailable when nothing listens.
  virtual Fd open_port(const std::string& id, uint16_t port) {
    (void)port;
    throw Error(Errc::unavailable, "sbx port-forward " + id + ": not supported by the " + where() + " backend");
  }
  /// Relays the connected stream socket local_fd to 127.0.0.1:port inside the sandbox until
  /// both directions ended (what sbx port-forward does per connection); throws as open_port
  /// does before any byte moves. The default relays through open_port's socket; a backend
  /// may relay local_fd directly, one hop less.
  virtual void forward_port(const std::string& id, uint16_t port, int local_fd) {
    Fd s = open_port(id, port);
    splice_streams(local_fd, s.get());
  }
  /// Collects idle, expired and dead sandboxes and orphans.
  virtual GcReport gc(bool dry_run) = 0;
  /// What is at path inside the sandbox, or nullopt.
  virtual std::optional<FileEntry> stat(const std::string& id, const std::string& path) = 0;
  /// Writes entries into the sandbox as `target`.
  virtual uint64_t put(const std::string& id, const std::string& target, EntrySource& source, uint64_t max_bytes) = 0;
  /// Reads `path` (a file or a tree) from the sandbox into sink.
  virtual uint64_t get_files(const std::string& id, const std::string& path, EntrySink& sink, uint64_t max_bytes) = 0;
};

}  // namespace sbx
