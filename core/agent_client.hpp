// The host's side of the agent protocol: one connected stream to a sandbox's
// agent, used for one request at a time by this client (the agent itself
// serves many clients and channels at once).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fd.hpp"
#include "core/spec.hpp"

namespace sbx {

/// A file, directory or symlink inside a sandbox, as listed by the agent.
struct FileEntry {
  std::string path;    ///< relative to the listed path ("" for the path itself)
  std::string type;    ///< file | dir | symlink | other
  unsigned mode = 0;   ///< permission bits
  uint64_t size = 0;
  int64_t mtime = 0;   ///< seconds since the epoch
  std::string target;  ///< symlink target
};
void from_json(const nlohmann::json& j, FileEntry& e);

/// Where an exec's output goes and its input comes from.
struct ExecIO {
  std::function<void(std::string_view)> on_stdout;  ///< called as output arrives
  std::function<void(std::string_view)> on_stderr;
  int stdin_fd = -1;        ///< forwarded until EOF when the request has stdin_open
  std::string stdin_data;   ///< used instead when stdin_fd < 0 and stdin_open
  int signal_fd = -1;       ///< when readable, an int signal number to forward (a self-pipe)
  int resize_fd = -1;       ///< when readable, a WindowSize to forward to a tty exec (a self-pipe)
  int hangup_fd = -1;       ///< a connected socket (the manager's client): when its peer hangs up, the command is killed (an attach detaches)
  bool detach_keys = false; ///< attach with input: Ctrl-P Ctrl-Q on stdin detaches instead of reaching the process
  std::string error;        ///< out: why the command did not start (e.g. "x: command not found")
};

class AgentClient {
 public:
  explicit AgentClient(Fd stream) : fd_(std::move(stream)) {}

  /// {version, running, uptime_ms, pid}; throws protocol/timeout when the agent does not answer in time.
  /// sync_first: the agent calls sync(2) before it answers (and says `synced`).
  nlohmann::json ping(int timeout_ms = 2000, bool sync_first = false);
  /// Asks the agent to let go of every host socket (proto detach) and waits until it
  /// has: the stream's end. It listens again at SIGUSR1. Throws conflict while another host is connected.
  void detach(int timeout_ms = 5000);
  /// Runs a command, streaming through io; returns how it ended. A background
  /// request returns once it started: ExecResult::pid (or the reason in io.error).
  ExecResult exec(const ExecRequest& req, ExecIO& io);
  /// The sandbox's background processes, running and exited.
  std::vector<ProcessInfo> processes();
  /// Replays a background process's kept output through io, then follows it
  /// (opts.follow) and feeds it io's input (opts.input). How it ended, or
  /// nullopt when this returned first (not following, or detached).
  std::optional<ExecResult> attach(int pid, const AttachOptions& opts, ExecIO& io);
  /// Sends sig to a background process's whole tree.
  void signal_process(int pid, int sig);
  /// Lists path (its own entry first), recursively when asked.
  std::vector<FileEntry> list(const std::string& path, bool recursive);
  /// Reads a regular file, handing its content to sink chunk by chunk; returns its entry.
  FileEntry read_file(const std::string& path, const std::function<void(std::string_view)>& sink);
  /// Starts reading a regular file chunk by chunk (the pull form of read_file): returns
  /// its entry; then call read_chunk until it returns false before any other request.
  FileEntry open_read(const std::string& path);
  /// The next chunk of the file open_read started; false (chunk empty) at its end.
  bool read_chunk(std::string& chunk);
  /// Creates a file (content pulled from `source` until it returns false), directory or symlink.
  void write_entry(const std::string& path, const FileEntry& meta,
                   const std::function<bool(std::string&)>& source);
  /// Opens a TCP connection to 127.0.0.1:port inside the sandbox (no network
  /// needed: the agent connects over loopback). Throws unavailable, with the
  /// agent's message, when nothing listens there. Then call relay_port, unless
  /// take_socket (the agent shares the host's kernel) and the agent passed the
  /// connected socket itself: returned, a TCP socket (anything else is refused).
  Fd connect_port(uint16_t port, bool take_socket = false);
  /// Relays the connection connect_port opened and the stream socket local_fd
  /// until both directions ended or either broke (core/port_relay.hpp). The
  /// client is spent afterwards.
  void relay_port(int local_fd);

 private:
  uint32_t next_channel() { return ++channel_; }
  /// The `ok` answer on channel ch (other channels' frames skipped); throws what an error frame says.
  nlohmann::json answer(uint32_t ch);
  /// Streams a started exec or attach on ch: output to io, io's input to the
  /// agent, until exit (its result) or end (nullopt).
  std::optional<ExecResult> relay(uint32_t ch, ExecIO& io, bool stdin_open, bool attach);
  Fd fd_;
  uint32_t channel_ = 0;
};

}  // namespace sbx
