// The remote driver: a Backend that is a client of `sbx serve` (docs/api.md).
// Also the pieces of that protocol the server reuses or tests need alone:
// base64, the UTF-8 check, the spec's request form, the exec stream parser.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/backend.hpp"
#include "core/config.hpp"

namespace sbx {

/// Standard base64 (RFC 4648, with padding).
std::string base64_encode(std::string_view data);
/// Decodes standard base64 (padding optional); throws invalid_argument on anything else.
std::string base64_decode(std::string_view text);
/// Whether s is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF),
/// i.e. whether it can travel as a JSON string.
bool valid_utf8(std::string_view s);

/// The body of POST /v1/sandboxes for a spec: only the fields that were set
/// (defaults are the manager's to pick), and never driver "remote".
nlohmann::json spec_request_json(const SandboxSpec& spec);

/// Parses an exec's NDJSON stream as it arrives, in pieces of any size.
class NdjsonExecParser {
 public:
  using Sink = std::function<void(std::string_view)>;
  NdjsonExecParser(Sink on_stdout, Sink on_stderr);

  /// Takes the next bytes of the stream; calls the sinks for each complete line.
  /// Throws protocol for a malformed line or data after the exit line.
  void feed(std::string_view data);
  /// The stream ended: parses a last line that lacked its newline.
  void finish();
  /// Whether the exit line has been seen.
  bool done() const { return done_; }
  /// How the command ended (valid once done()).
  const ExecResult& result() const { return result_; }
  /// The exit line's error: why the command did not start, or empty.
  const std::string& error() const { return error_; }

 private:
  void line(std::string_view text);
  Sink on_stdout_;
  Sink on_stderr_;
  std::string partial_;
  bool done_ = false;
  ExecResult result_;
  std::string error_;
};

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
  GcReport gc(bool dry_run) override;
  std::optional<FileEntry> stat(const std::string& id, const std::string& path) override;
  uint64_t put(const std::string& id, const std::string& target, EntrySource& source, uint64_t max_bytes) override;
  uint64_t get_files(const std::string& id, const std::string& path, EntrySink& sink, uint64_t max_bytes) override;

 private:
  /// POSTs body to path and relays the NDJSON answer to io; a signal on io.signal_fd drops the call.
  ExecResult stream_exec(const std::string& path, const nlohmann::json& body, ExecIO& io);
  /// A JSON request with a JSON answer; throws the manager's error.
  nlohmann::json call_json(const std::string& method, const std::string& path, const nlohmann::json* body);
  std::string sandbox_path(const std::string& id) const;
  /// A manager's record as this host shows it: driver "remote", the manager's driver in driver_data.
  SandboxRecord as_seen_here(SandboxRecord rec) const;

  std::string state_dir_;
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
