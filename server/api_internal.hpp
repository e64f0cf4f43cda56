// What the API's route files (api.cpp, api_exec.cpp, api_files.cpp) share;
// not for anyone else.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api.hpp"

namespace sbx::server {

// The key that owns a sandbox is core's kOwnerLabel (ownership survives a restart: it is in the record).
/// The label holding the platform's `label` of a sandbox.
inline constexpr const char* kPlatformLabel = "sbx.label";

/// The methods the port proxy (/v1/sandboxes/{id}/ports/...) passes on.
inline constexpr const char* kPortProxyMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
/// Whether a request path is the port proxy's (its bodies are streamed, of any size).
/// For the latency metrics.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

inline bool is_port_proxy_path(const std::string& path) {
  auto at = path.find("/ports/");
  return path.rfind("/v1/sandboxes/", 0) == 0 && at != std::string::npos && path.find('/', 14) == at;
}

/// j as one line of text; bytes that are not UTF-8 (a caller's, quoted in an error) become U+FFFD, never an exception.
std::string json_line(const nlohmann::json& j);
/// A JSON answer.
HttpResponse json_response(int status, const nlohmann::json& j);
/// The request's JSON object body ({} when empty); 400 for anything else.
nlohmann::json parse_body(const HttpRequest& req);
/// Output as `name` (text) or `name_b64` (bytes that are not UTF-8).
void put_output(nlohmann::json& j, const char* name, const std::string& data);
/// The ?`name`= value, or nullptr.
const std::string* query(const HttpRequest& req, const char* name);

/// The exec part of a request body (also used inside /v1/run and as a WebSocket's first message).
struct ExecBody {
  ExecRequest req;
  std::string stdin_data;
  bool detach = false;
};
/// Parses and checks an exec body against the limits (`sandbox` allowed for /v1/run).
ExecBody parse_exec(const nlohmann::json& j, const Limits& lim, bool allow_sandbox_field);
/// A window's `key` ("rows", "cols") in the object j: 0 when absent; 400 unless a number from 0 to 65535.
uint16_t window_dimension(const nlohmann::json& j, const char* key);
/// A whole number of a query (?tail=N) or path; 400 naming `name` otherwise.
int parse_count(const std::string& text, const char* name);
/// A signal as the API takes it: "INT", "SIGINT" or 2; 400 otherwise.
int signal_number(const nlohmann::json& v);
/// 404 unless `pid` is one of the sandbox's background processes.
void require_process(Backend& backend, const std::string& id, int pid);
/// 409 unless the sandbox is running: a dead sandbox is an HTTP error, not a stream that ends in one.
void require_running(const SandboxRecord& rec);

}  // namespace sbx::server
