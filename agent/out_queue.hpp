// What the agent has to say to one host connection, written as its stream takes it.
// Frames are queued as bytes, except one data frame at a time whose payload a socket
// was spliced into a pipe (sandbox socket -> pipe -> stream): its bytes stay in the
// kernel's pages and are spliced on, so a forwarded port's bulk data is not copied by
// the agent. The header of that frame may be left half-sent; the queue then sends, in
// order, the header's rest, the pipe's bytes and what was queued after them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/fd.hpp"

namespace sbx::agent {

class OutQueue {
 public:
  /// Bytes waiting (in the queue and in the pipe).
  size_t pending() const { return lead_.size() + piped_ + out_.size() - off_; }
  /// Over the high-water mark, or a spliced payload not all out: producers wait for the stream.
  bool congested() const;
  /// Sends head then body: straight from the caller's buffers when nothing waits, else
  /// queued after what does. Sets broke when the stream failed.
  void send(int stream_fd, std::string_view head, std::string_view body, bool& broke);
  /// Writes what waits as far as the stream takes it now.
  void flush(int stream_fd, bool& broke);
  /// With nothing waiting: splices what the socket `src` has (up to a frame) into the pipe
  /// and sends it as one data frame on `channel`. Returns the bytes moved, 0 at the
  /// socket's EOF, -1 with errno set (EAGAIN: nothing now; EINVAL and the like: `src`
  /// cannot be spliced, read it instead). Needs !pending().
  ssize_t splice_frame(int stream_fd, int src, uint32_t channel, bool& broke);
  /// Whether splice_frame may be tried (a pipe could be made; the stream took splices so far).
  bool can_splice();

 private:
  bool drain_pipe(int stream_fd, bool& broke);
  void unsplice();

  std::string lead_;  // the rest of the spliced frame's header
  Fd pipe_r_, pipe_w_;
  size_t pipe_cap_ = 0;
  size_t piped_ = 0;  // that frame's payload, in the pipe
  bool no_splice_ = false;
  std::string out_;   // queued frames, after the pipe's bytes
  size_t off_ = 0;
};

}  // namespace sbx::agent
