// The client of a remote manager: a Backend that forwards every call to an
// `sbx serve` (docs/api.md), and the health check the fallback chain asks.
// The wire format it shares with the server is core/wire.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/backend.hpp"
#include "core/config.hpp"
#include "core/websocket.hpp"
#include "core/wire.hpp"

namespace sbx {

/// Presents a tar of one tree ("base", "base/a", ...) as the tree itself
/// ("", "a", ...): the manager names a tar's root after the path's base name,
/// while sinks expect entries relative to the transfer's root.
class StripRootSource : public EntrySource {
 public:
  explicit StripRootSource(EntrySource& inner) : inner_(inner) {}
  /// Throws protocol when an entry lies outside the first entry's root.
  bool next(FileEntry& entry) override;
  bool read(std::string& chunk) override { return inner_.read(chunk); }

 private:
  EntrySource& inner_;
  std::optional<std::string> root_;
};

class RemoteBackend : public Backend {
 public:
  /// `url` is the manager's base URL (http:// or https://); throws invalid_argument otherwise.
  RemoteBackend(const Config& cfg, std::string url, std::string api_key);

  std::string where() const override { return url_; }
  SandboxRecord create(const SandboxSpec& spec, const Progress& progress) override;
  ExecResult exec(const std::string& id, const ExecRequest& req, ExecIO& io) override;
  OneShotResult run_once(const SandboxSpec& spec, const ExecRequest& req, ExecIO& io) override;
  std::vector<SandboxRecord> list() override;
  SandboxRecord get(const std::string& id) override;
  void remove(const std::string& id) override;
  SandboxRecord pause(const std::string& id) override;
  SandboxRecord resume(const std::string& id) override;
  GcReport gc(bool dry_run) override;
  std::optional<FileEntry> stat(const std::string& id, const std::string& path) override;
  uint64_t put(const std::string& id, const std::string& target, EntrySource& source, uint64_t max_bytes) override;
  uint64_t get_files(const std::string& id, const std::string& path, EntrySink& sink, uint64_t max_bytes) override;
  std::vector<ProcessInfo> processes(const std::string& id) override;
  std::optional<ExecResult> attach(const std::string& id, int pid, const AttachOptions& opts, ExecIO& io) override;
  void signal_process(const std::string& id, int pid, int sig) override;
  Fd open_port(const std::string& id, uint16_t port) override;
  // The manager's snapshots (remote/snapshots.cpp): its routes, its owner rules.
  SnapshotInfo snapshot(const std::string& id, const std::string& name, bool memory) override;
  std::vector<SnapshotInfo> snapshots() override;
  void remove_snapshot(const std::string& name) override;
  SandboxRecord fork(const std::string& id, const Progress& progress, bool memory) override;

 private:
  /// POSTs body (GETs when null) to path and relays the NDJSON answer to io; a signal
  /// on io.signal_fd drops the call. nullopt when the stream ended without an exit line.
  std::optional<ExecResult> stream_exec(const std::string& path, const nlohmann::json* body, ExecIO& io);
  /// stream_exec of a command, which must end with its exit line.
  ExecResult finished_exec(const std::string& path, const nlohmann::json& body, ExecIO& io);
  /// An exec over the WebSocket at path (remote/interactive.cpp): live stdin, signals, a terminal.
  ExecResult ws_exec(const std::string& path, const nlohmann::json& first, ExecIO& io);
  /// attach without the CLI's wording of an unknown pid.
  std::optional<ExecResult> attach_pid(const std::string& id, int pid, const AttachOptions& opts, ExecIO& io);
  /// POST .../exec with background: the started process's pid.
  ExecResult background(const std::string& id, const ExecRequest& req);
  /// A WebSocket to path; the manager's refusal becomes its error.
  std::unique_ptr<ws::Connection> dial(const std::string& path);
  /// Throws the error of the manager's answer (status, body) to path.
  [[noreturn]] void refused(const std::string& path, int status, const std::string& body) const;
  /// A JSON request with a JSON answer; throws the manager's error.
  nlohmann::json call_json(const std::string& method, const std::string& path, const nlohmann::json* body);
  std::string sandbox_path(const std::string& id) const;
  /// The create body for a spec, with this client's default network when the spec names none.
  nlohmann::json spec_body(const SandboxSpec& spec) const;
  /// A manager's record as this host shows it: driver "remote", the manager's driver in driver_data.
  SandboxRecord as_seen_here(SandboxRecord rec) const;
  /// A call on the manager whose answer is one sandbox record (GET, pause, resume).
  SandboxRecord record_call(const std::string& method, const std::string& path);
  /// Records where a sandbox the manager just made lives; removes it there when that fails.
  void remember_or_remove(const SandboxRecord& rec);
  /// A manager's snapshot as this host shows it: driver "remote", like its sandboxes.
  SnapshotInfo as_seen_here(SnapshotInfo snap) const;

  std::string state_dir_;
  std::string default_network_;  ///< the client's defaults.network, sent when the spec does not say
  std::string url_;  ///< without a trailing slash
  std::string api_key_;
};

/// Whether the manager at url answers GET /healthz (200 with a JSON body) with
/// cfg.api_key: nullopt when healthy, else a short reason ("connection refused",
/// "HTTP 503: ...", "timed out after 1.5 s"). Cached for 5 s in
/// <state_dir>/remote-health.json so a burst of CLI calls pays for one check.
/// A refused key (HTTP 401 or 403) is no verdict on health but a configuration
/// error: thrown (unauthenticated or forbidden, naming the manager), never cached.
std::optional<std::string> check_manager_health(const Config& cfg, const std::string& url);

}  // namespace sbx
