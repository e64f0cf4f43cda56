// TLS for the interactive sessions with an https:// manager. The WebSocket
// code (core/websocket) speaks over a plain socket; this makes one: a
// socketpair whose other end a thread relays through a TLS connection that
// libcurl opened (CURLOPT_CONNECT_ONLY), so certificate checks are the other
// remote calls' exactly (system CAs, SBX_CA_FILE, the host name).
#pragma once

#include <string>

#include "core/fd.hpp"

namespace sbx::remote_ws {

/// A connected socket whose bytes go to host:port over TLS. Throws
/// Error(unavailable) naming `shown` when the manager cannot be reached or its
/// certificate is refused (with the SBX_CA_FILE hint).
Fd tls_tunnel(const std::string& host, const std::string& port, const std::string& shown);

}  // namespace sbx::remote_ws
