// The unix stream sockets the host and the agent meet on.
#pragma once

#include <sys/types.h>

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
/// Blocks SIGPIPE in the calling thread: a write or splice() to a socket or pipe
/// whose reader is gone is then EPIPE for the caller, not the end of the process
/// (splice takes no MSG_NOSIGNAL).
void block_sigpipe_in_this_thread();
/// One sendmsg of data (or its head) on a Unix stream socket, passing descriptor
/// `pass` with its first byte (SCM_RIGHTS); never raises SIGPIPE, and blocks only
/// when told to. The bytes sent, or -1 and errno (ENOTSOCK where no descriptor can travel).
ssize_t send_passing(int sock, std::string_view data, int pass, bool block = false);
/// Reads exactly n bytes (false at EOF before the first); a descriptor that
/// arrives with them goes to `passed` (close-on-exec), any further one is closed.
bool read_exact_passing(int sock, char* buf, size_t n, Fd& passed);

}  // namespace sbx
