// /v1/sandboxes/{id}/ports/{port}/{path...}: an HTTP reverse proxy to
// 127.0.0.1:port inside the sandbox, reached through Backend::open_port (the
// agent's stream: no network needed). Each request is one HTTP/1.1 exchange
// with `Connection: close` on a connection of its own; the answer is streamed
// back as it arrives.
#include "core/error.hpp"
#include "core/unix_socket.hpp"
#include "server/api.hpp"
#include "server/api_internal.hpp"
#include "server/http_relay.hpp"

namespace sbx::server {

namespace {

// How long the server in the sandbox may take to start its answer.
constexpr int kHeadTimeoutMs = 120'000;

relay::Fail bad_gateway(uint16_t port, const std::string& id) {
  return [port, id](Errc code, const std::string& what) {
    if (code == Errc::timeout)
      return Error(code, "the server on port " + std::to_string(port) + " in sandbox " + id + " " + what);
    return Error(Errc::protocol, "the server on port " + std::to_string(port) + " in sandbox " + id + " " + what)
        .set_hint("check the server inside the sandbox (sbx exec " + id + " -- ...)");
  };
}

}  // namespace

HttpResponse Api::port_proxy(const HttpRequest& req, const SandboxRecord& rec, const std::string& sub) {
  // sub: "ports/{port}" or "ports/{port}/{path...}"
  std::string rest = sub.substr(6);
  auto slash = rest.find('/');
  std::string num = rest.substr(0, slash);
  bool digits = !num.empty() && num.size() <= 5 && num.find_first_not_of("0123456789") == std::string::npos;
  unsigned long port = digits ? std::stoul(num) : 0;
  if (port < 1 || port > 65535)
    throw Error(Errc::invalid_argument, "bad port '" + num.substr(0, 20) + "'").set_hint("/v1/sandboxes/{id}/ports/{1-65535}/{path}");
  std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  std::string prefix = "/v1/sandboxes/" + rec.id + "/ports/" + num;
  Fd sock;
  try {
    sock = backend_.open_port(rec.id, static_cast<uint16_t>(port));
  } catch (const Error& e) {
    if (e.code() == Errc::unavailable && std::string_view(e.what()).find("nothing listens") != std::string_view::npos)
      return error_response(e, 502);
    throw;
  }
  bool chunked = relay::has_header(req, "transfer-encoding", "chunked");
  // Host as the client sent it; where the answer is seen from, for servers that build
  // links (X-Forwarded-Prefix as Traefik and Spring use it).
  std::string extra = relay::has_header(req, "host") ? "" : "Host: 127.0.0.1\r\n";
  extra += "X-Forwarded-Prefix: " + prefix + "\r\n";
  // A WebSocket to the server (a dev server's live reload, a notebook's
  // kernel): the upgrade goes to it first, and the client gets the 101 only
  // once the server gave one; then bytes pass both ways untouched.
  bool ws = !req.websocket_key.empty();
  if (ws) extra += "Upgrade: websocket\r\n";
  // A preview link's token is the manager's credential, not the app's query.
  std::string target = relay::request_target(path, req, req.token ? "token" : "");
  send_all(sock.get(), relay::request_head(req, target, {"x-api-key"}, extra, ws ? "Upgrade" : "close"));
  try {
    relay::send_body(sock.get(), req, chunked);
  } catch (const Error&) {
    // A server that answers without reading the whole body (an early 413, a redirect) still gets its answer through.
  }
  auto fail = bad_gateway(static_cast<uint16_t>(port), rec.id);
  std::string buf;
  std::string head = relay::read_head(sock.get(), buf, kHeadTimeoutMs, -1, ws, fail);
  if (ws && relay::is_switching(head)) return relay::switched_to(std::move(sock), head, std::move(buf));
  return relay::response_from(std::move(sock), head, std::move(buf), req.method, {}, fail);
}

}  // namespace sbx::server
