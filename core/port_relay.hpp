// Moving a TCP connection's bytes on the host: between a local stream socket
// and one `connect` channel of the agent protocol (Backend::open_port), and
// between two local stream sockets (sbx port-forward's accepted connections).
#pragma once

#include <cstdint>

namespace sbx {

/// Relays `channel` of the agent stream `agent_fd` (a connect the agent has
/// answered ok) and the stream socket `local_fd` both ways until both
/// directions ended (each EOF passed on: end to the agent, shutdown(SHUT_WR)
/// locally) or either side failed (the other is then aborted). Holds at most
/// about a megabyte per direction: a slow reader on one side stops reading on
/// the other. Both descriptors are made non-blocking.
void relay_port_channel(int agent_fd, uint32_t channel, int local_fd);

/// Moves bytes both ways between two connected stream sockets (spliced: no copy
/// on the host) until both directions reached EOF (each passed on as
/// shutdown(SHUT_WR)) or one broke, or either socket was shut down both ways
/// (then both are). Both are made non-blocking.
void splice_streams(int a, int b);

}  // namespace sbx
