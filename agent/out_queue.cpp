#include "agent/out_queue.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/protocol.hpp"

namespace sbx::agent {

namespace {

// Output to one host is queued and written as the stream takes it: a host that stops
// reading holds back only its own commands and connections, never the agent's loop.
constexpr size_t kHighWater = 1 << 20;

// Writes what the stream takes now of p; false when it failed (EAGAIN is not a failure).
bool write_some(int fd, const char* p, size_t n, size_t& done) {
  while (done < n) {
    ssize_t w = ::send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    // A plain write() suits streams that are not sockets (virtio-serial, pipes).
    if (w < 0 && errno == ENOTSOCK) w = ::write(fd, p + done, n - done);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    return w < 0 && errno == EAGAIN;
  }
  return true;
}

}  // namespace

bool OutQueue::congested() const { return piped_ || !lead_.empty() || out_.size() - off_ >= kHighWater; }

void OutQueue::send(int stream_fd, std::string_view head, std::string_view body, bool& broke) {
  if (pending()) {
    out_.append(head);
    out_.append(body);
    return flush(stream_fd, broke);
  }
  // Nothing waits: the frame goes straight from the caller's buffers in one call, and only
  // what the stream does not take now is copied into the queue.
  size_t done = proto::send_now(stream_fd, head, body, broke);
  if (broke) return;
  if (done < head.size()) out_.append(head.substr(done));
  out_.append(body.substr(done > head.size() ? done - head.size() : 0));
}

void OutQueue::flush(int stream_fd, bool& broke) {
  size_t done = 0;
  if (!lead_.empty()) {
    if (!write_some(stream_fd, lead_.data(), lead_.size(), done)) broke = true;
    lead_.erase(0, done);
    if (!lead_.empty()) return;
  }
  if (piped_ && !drain_pipe(stream_fd, broke)) return;
  done = 0;
  if (!write_some(stream_fd, out_.data() + off_, out_.size() - off_, done)) broke = true;
  off_ += done;
  if (off_ == out_.size()) {
    out_.clear();
    off_ = 0;
  } else if (off_ > kHighWater) {
    out_.erase(0, off_);
    off_ = 0;
  }
}

bool OutQueue::drain_pipe(int stream_fd, bool& broke) {
  while (piped_) {
    ssize_t n = ::splice(pipe_r_.get(), nullptr, stream_fd, nullptr, piped_, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      piped_ -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return false;  // poll says when there is room
    if (n < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
      unsplice();  // this stream takes no splices: its bytes go as a copy, in their place
      return true;
    }
    broke = true;
    return false;
  }
  return true;
}

void OutQueue::unsplice() {
  std::string bytes(piped_, '\0');
  size_t got = 0;
  while (got < piped_) {
    ssize_t n = ::read(pipe_r_.get(), bytes.data() + got, piped_ - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // cannot happen: the pipe holds piped_ bytes
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  out_.insert(off_, bytes);
  piped_ = 0;
  no_splice_ = true;
  pipe_r_.reset();
  pipe_w_.reset();
}

bool OutQueue::can_splice() {
  if (no_splice_ || pipe_w_) return !no_splice_;
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return !(no_splice_ = true);
  pipe_r_.reset(p[0]);
  pipe_w_.reset(p[1]);
  // A frame's worth a splice (a smaller pipe, when the kernel refuses, only means more splices).
  ::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(proto::kMaxPayload));
  int cap = ::fcntl(p[1], F_GETPIPE_SZ);
  pipe_cap_ = std::min<size_t>(cap > 0 ? static_cast<size_t>(cap) : 65536, proto::kMaxPayload);
  return true;
}

ssize_t OutQueue::splice_frame(int stream_fd, int src, uint32_t channel, bool& broke) {
  if (!can_splice() || pending()) {
    errno = EINVAL;
    return -1;
  }
  ssize_t n = ::splice(src, nullptr, pipe_w_.get(), nullptr, pipe_cap_, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
  if (n <= 0) return n;
  char head[proto::kHeaderSize];
  proto::put_header(head, proto::Type::data, channel, static_cast<size_t>(n));
  piped_ = static_cast<size_t>(n);
  size_t done = proto::send_now(stream_fd, std::string_view(head, sizeof head), {}, broke);
  lead_.assign(head + done, sizeof head - done);
  if (!broke) flush(stream_fd, broke);
  return n;
}

}  // namespace sbx::agent
