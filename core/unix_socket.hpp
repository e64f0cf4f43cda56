// The unix stream sockets the host and the agent meet on.
#pragma once

#include <string>
#include <string_view>

#include "core/fd.hpp"

namespace sbx {

/// Connects to the socket at path; `peer` names it in the error ("the sandbox's agent").
Fd connect_unix(const std::string& path, const std::string& peer);
/// Replaces any stale socket at path with a listening one that only its
/// owner (root) may connect to (mode 0600).
Fd listen_unix(const std::string& path);
/// Writes all of data to a connected socket without SIGPIPE: a peer that died
/// is an EPIPE error for the caller to explain, not the end of the process.
void send_all(int sock, std::string_view data);

}  // namespace sbx
