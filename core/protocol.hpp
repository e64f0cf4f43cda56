// The agent protocol: the one framed byte-stream protocol every driver speaks
// to the agent inside its sandbox (unix socket, virtio-serial or vsock).
//
// Frame: u32 payload length (big endian) | u8 type | u32 channel (big endian) | payload.
// A channel is one request (an exec, a file transfer, a listing); several run at
// once over one stream. Control payloads are JSON objects; data payloads
// (stdin, stdout, stderr, file data) are raw bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/fd.hpp"

namespace sbx::proto {

inline constexpr uint32_t kVersion = 2;
inline constexpr size_t kHeaderSize = 9;
/// Largest payload of one frame; bigger data is sent as several frames.
inline constexpr uint32_t kMaxPayload = 1u << 20;
/// Size of the data chunks senders use.
inline constexpr size_t kChunk = 64 * 1024;

enum class Type : uint8_t {
  // host -> agent
  exec = 0x01,        ///< json: ExecRequest {cmd, env, cwd, timeout_ms, stdin, tty, rows, cols, background}
  stdin_data = 0x02,  ///< raw bytes for the exec's stdin
  stdin_eof = 0x03,   ///< close the exec's stdin
  signal = 0x04,      ///< json: {signal}: deliver to the exec's process group
  file_read = 0x05,   ///< json: {path}; answered by ok {stat} then data* then end
  file_write = 0x06,  ///< json: {path, kind, mode, mtime, target}; then data* and end from the host; answered ok
  list = 0x07,        ///< json: {path, recursive}; answered by entries* then end
  ping = 0x08,        ///< json (optional): {sync}; answered by ok {version, running, uptime_ms, pid, quiet_ms?, synced?} (quiet_ms: since the last background process ended; synced: sync(2) ran first, as asked)
  resize = 0x09,      ///< json: {rows, cols}: the terminal of a tty exec or attach on this channel
  proc_list = 0x0A,   ///< answered by ok {procs: [ProcessInfo]}: the background processes
  proc_attach = 0x0B, ///< json: {pid, follow, input, tail_lines}: started {pid}, kept then live output, exit (or end when not following); with input, stdin/resize/signal frames follow on the channel; end from the host detaches
  proc_signal = 0x0C, ///< json: {pid, signal}: to the background process's whole tree; answered ok
  connect = 0x0D,     ///< json: {port, pass?}: a TCP connection to 127.0.0.1:port in the sandbox; with pass (the host shares the agent's kernel: subprocess), answered ok {passed: true} carrying the connected socket (SCM_RIGHTS) and the channel is done, or else ok, then data both ways, end = that side's EOF; error from the host aborts it; signal SIGSTOP/SIGCONT pauses/resumes reading its socket
  detach = 0x0E,      ///< answered ok, then the agent closes every host connection and its listening socket, and listens again at SIGUSR1 (runsc checkpoint cannot save host sockets); refused (conflict) while another host is connected
  // agent -> host
  started = 0x81,      ///< json: {pid}
  stdout_data = 0x82,  ///< raw
  stderr_data = 0x83,  ///< raw
  exit = 0x84,         ///< json: {exit_code, signal, timed_out, duration_ms, error?}
  // either way
  data = 0x85,     ///< raw file content
  end = 0x86,      ///< end of data / entries
  ok = 0x87,       ///< json result
  error = 0x88,    ///< json: {code, errno, message}
  entries = 0x89,  ///< json: {entries: [{path, type, mode, size, mtime, target}]}
};

/// Whether a byte is a known frame type.
bool known_type(uint8_t t);

struct Frame {
  Type type{};
  uint32_t channel = 0;
  std::string payload;

  /// The payload parsed as a JSON object; throws protocol on garbage.
  nlohmann::json json() const;
};

/// A frame's header, as read off the stream.
struct Header {
  Type type{};
  uint32_t channel = 0;
  uint32_t length = 0;  ///< of the payload that follows
};
/// Parses kHeaderSize bytes; throws protocol on an unknown type or an oversized length.
Header parse_header(const char* p);
/// Writes the kHeaderSize header bytes of a frame with a payload of `length` bytes to out
/// (a sender that has the payload in a buffer of its own sends both without building the frame).
/// Throws limit_exceeded for a length over kMaxPayload.
void put_header(char* out, Type type, uint32_t channel, size_t length);

/// Writes what the non-blocking stream fd takes now of head then body, in as few calls as
/// it takes them (sendmsg; writev when fd is not a socket, as virtio-serial is not), so a
/// frame goes out from its sender's buffers without being built. Returns the bytes written;
/// sets `broke` when the stream failed (EAGAIN is not a failure).
size_t send_now(int fd, std::string_view head, std::string_view body, bool& broke);

/// The bytes of one frame. Throws limit_exceeded for a payload over kMaxPayload.
std::string encode(Type type, uint32_t channel, std::string_view payload = {});
/// The bytes of one frame with a JSON payload.
std::string encode_json(Type type, uint32_t channel, const nlohmann::json& body);
/// The error frame for an sbx::Error-like triple.
std::string encode_error(uint32_t channel, std::string_view code, int err, std::string_view message);

/// Incremental decoder: feed bytes as they arrive, pop whole frames.
class Decoder {
 public:
  /// Appends received bytes.
  void feed(const char* data, size_t n) { buf_.append(data, n); }
  /// The next complete frame, or nullopt when more bytes are needed.
  /// Throws protocol on an unknown type or an oversized length.
  std::optional<Frame> pop();
  /// Bytes held that do not yet form a frame.
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
};

/// Blocking read of one frame from fd; nullopt on a clean EOF between frames.
/// With `passed`, a descriptor sent with the frame's first bytes (a Unix socket's
/// SCM_RIGHTS: connect's answer with {"passed": true}) lands there.
std::optional<Frame> read_frame(int fd, Fd* passed = nullptr);

}  // namespace sbx::proto
