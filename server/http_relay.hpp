// One HTTP/1.1 exchange passed on over a socket, streamed both ways: what the
// port proxy (api_ports.cpp, to a server inside a sandbox) and the fleet proxy
// (fleet_proxy.cpp, to the manager owning a sandbox) share. The port proxy
// uses a connection per exchange (`Connection: close`); the fleet keeps its
// connections alive (response_from's `reuse`). The answer's body is handed
// back as a ResponseStream that reads the socket as the client takes it.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "server/api.hpp"

namespace sbx::server::relay {

using Headers = std::vector<std::pair<std::string, std::string>>;
/// How an exchange names its failures ("the server on port 8080 in sandbox X ...", "manager 2 ...").
using Fail = std::function<Error(Errc code, const std::string& what)>;
/// Takes back a connection whose answer was read to its exact end (keep-alive), for another exchange.
using Reuse = std::function<void(Fd)>;

std::string lower(std::string s);
/// Whether a (lowercase) header describes one hop (RFC 9110 7.6.1) or is the
/// manager's own business (X-API-Key, Expect), `listed` being what Connection names.
bool hop_by_hop(const std::string& name, const std::set<std::string>& listed);
/// The tokens of every Connection header, lowercase.
std::set<std::string> connection_tokens(const Headers& headers);
/// Whether the request has header `name` (lowercase) whose value holds `value_part`.
bool has_header(const HttpRequest& req, const std::string& name, const std::string& value_part = "");
/// The request line's target for `path`, the whole of req.path or its tail, and the query less
/// `drop_arg`: as the client sent them (req.raw_target), so "a%2Fb" stays one segment; else the
/// decoded forms encoded again.
std::string request_target(const std::string& path, const HttpRequest& req, std::string_view drop_arg = {});
/// The request's head: its method, `target`, its headers less the hop-by-hop ones and those
/// named in `drop` (lowercase), then `extra` ("Name: value\r\n" lines), then `connection`.
std::string request_head(const HttpRequest& req, const std::string& target, const std::set<std::string>& drop,
                         const std::string& extra, const std::string& connection = "close");
/// The request's body: streamed from body_fd as it arrives, or what was buffered.
void send_body(int sock, const HttpRequest& req, bool chunked);

/// Reads an answer's status line and headers; 1xx interim answers are skipped,
/// except 101 when `upgrade`. The rest stays in `buf`. `timeout_ms` < 0 waits for
/// ever; `hangup_fd` (>= 0) is a client whose hanging up ends the wait (io error).
std::string read_head(int sock, std::string& buf, int timeout_ms, int hangup_fd, bool upgrade, const Fail& fail);

/// The answer `head` as an HttpResponse whose body streams from `sock` (after `rest`):
/// status, Content-Type, the headers less hop-by-hop ones and `drop` (lowercase). With
/// `reuse`, the socket is handed to it once the body was read to its end, unless the
/// answer said `Connection: close` or ends at the connection's end.
HttpResponse response_from(Fd sock, const std::string& head, std::string rest, const std::string& method,
                           const std::set<std::string>& drop, const Fail& fail, Reuse reuse = nullptr);

/// Whether an answer head is a `101 Switching Protocols`.
bool is_switching(const std::string& head);
/// The client's 101 for an upstream that switched on `sock` (`rest`: what it sent
/// past its head): libmicrohttpd answers with the same Sec-WebSocket-Accept, which
/// both compute from the client's key, then splice_both_ways relays the bytes.
HttpResponse switched_to(Fd sock, const std::string& head, std::string rest);

/// Bytes both ways between a client's upgraded socket and the upstream `server`
/// (first `to_client` and `to_server`, what each side sent past the heads) until
/// both directions ended, each EOF passed on as a half-close; `client` stays open.
void splice_both_ways(int client, Fd server, const std::string& to_client, const std::string& to_server);

}  // namespace sbx::server::relay
