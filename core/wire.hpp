// The manager's wire format, one module for both halves: what `sbx serve`
// (server/) writes and what its client (remote/) reads. Spec JSON, the exec
// stream's NDJSON lines, the error object and error code <-> HTTP status all
// live here, so the two sides cannot drift apart.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/spec.hpp"

namespace sbx {

/// Standard base64 (RFC 4648, with padding).
std::string base64_encode(std::string_view data);
/// Decodes standard base64 (padding optional); throws invalid_argument on anything else.
std::string base64_decode(std::string_view text);
/// Whether s is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF),
/// i.e. whether it can travel as a JSON string.
bool valid_utf8(std::string_view s);

/// The string field `key` of a JSON object, or "" when absent or not a string.
std::string str_field(const nlohmann::json& j, const char* key);

/// The body of POST /v1/sandboxes for a spec: only the fields that were set
/// (defaults are the manager's to pick), and never driver "remote".
nlohmann::json spec_request_json(const SandboxSpec& spec);

/// The API's error object {"code", "message", "hint"?} (the `error` member of
/// an error answer, and of an exec stream's last line when it failed).
nlohmann::json error_json(const Error& e);
/// The error an error object describes; `fallback` when its code is unknown,
/// `fallback_message` when it has no message.
Error error_from_json(const nlohmann::json& err, Errc fallback, const std::string& fallback_message);
/// The error code an HTTP status stands for when the body names none (a proxy's answer).
Errc errc_for_http_status(long status);

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

}  // namespace sbx
