#include "core/port_relay.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/fd.hpp"
#include "core/protocol.hpp"
#include "core/unix_socket.hpp"

namespace sbx {

namespace {

constexpr size_t kHighWater = 1 << 20;
constexpr size_t kReadChunk = 256 << 10;

// Bytes waiting to go out on one descriptor.
struct Outbox {
  std::string buf;
  size_t off = 0;
  size_t size() const { return buf.size() - off; }
  // Writes what the socket takes now; false when the peer is gone.
  bool flush(int fd) {
    while (off < buf.size()) {
      ssize_t n = ::send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && errno == EAGAIN;
    }
    buf.clear();
    off = 0;
    return true;
  }
  // Sends head then body: with nothing queued, straight from the caller's buffers in one
  // call, queuing only what the socket does not take now (a bulk relay's chunks are then
  // not copied here). A broken peer is left for the next flush to report.
  void put(int fd, std::string_view head, std::string_view body) {
    bool broke = false;
    size_t done = size() ? 0 : proto::send_now(fd, head, body, broke);
    if (done < head.size()) buf.append(head.substr(done));
    buf.append(body.substr(done > head.size() ? done - head.size() : 0));
  }
};

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

class ChannelRelay {
 public:
  ChannelRelay(int agent_fd, uint32_t channel, int local_fd) : a_(agent_fd), ch_(channel), l_(local_fd) {}
  void run();

 private:
  bool read_local();   // false: the local side broke
  bool read_agent();   // false: the agent side ended the channel (error) or went away
  bool take(const char* p, size_t n);  // parses the agent's bytes; false as read_agent
  bool splice_body();  // part of our data frame's payload, agent -> pipe -> local; false as read_agent
  bool drain_pipe();   // what the pipe holds to the local side; false: the local side broke
  void open_pipe();
  void abort_agent() {
    to_agent_.buf += proto::encode_error(ch_, "unavailable", 0, "the host's side of the connection broke");
    to_agent_.flush(a_);
  }

  int a_;
  uint32_t ch_;
  int l_;
  // The agent's stream is parsed in place: a data frame's payload goes from the read buffer
  // to the local socket, with no frame built (the relay's bulk path copies nothing itself).
  char head_[proto::kHeaderSize];
  size_t head_got_ = 0;     // bytes of the current frame's header read
  proto::Header frame_{};   // the current frame, once its header is whole
  size_t body_left_ = 0;    // of its payload, not read yet
  Outbox to_agent_, to_local_;
  // A data frame's payload is spliced, agent socket -> pipe -> local socket: the kernel moves
  // its pages and no copy of the bytes is made on the host (the relay's bulk path). Bytes in
  // the pipe go out before to_local_'s, which only grows while the pipe is empty or behind it.
  Fd pipe_r_, pipe_w_;      // none: splice is not available (read and send instead)
  size_t pipe_cap_ = 0;
  size_t piped_ = 0;        // bytes in the pipe
  bool local_eof_ = false;  // the local EOF went to the agent as end
  bool agent_end_ = false;  // the agent's end arrived
  bool shut_local_ = false; // and was passed on as shutdown(SHUT_WR)
  std::string buf_ = std::string(kReadChunk, '\0');  // a quarter megabyte a read: fewer syscalls in bulk
};

bool ChannelRelay::read_local() {
  char* buf = buf_.data();
  while (!local_eof_ && to_agent_.size() < kHighWater) {
    ssize_t n = ::read(l_, buf, buf_.size());
    if (n > 0) {
      char head[proto::kHeaderSize];
      proto::put_header(head, proto::Type::data, ch_, static_cast<size_t>(n));
      to_agent_.put(a_, std::string_view(head, sizeof head), std::string_view(buf, static_cast<size_t>(n)));
    } else if (n == 0) {
      to_agent_.buf += proto::encode(proto::Type::end, ch_), local_eof_ = true;
    } else if (errno == EINTR) {
      continue;
    } else {
      return errno == EAGAIN;
    }
  }
  return true;
}

bool ChannelRelay::take(const char* p, size_t n) {
  while (n) {
    if (head_got_ < sizeof head_) {
      size_t k = std::min(n, sizeof head_ - head_got_);
      std::memcpy(head_ + head_got_, p, k);
      head_got_ += k, p += k, n -= k;
      if (head_got_ < sizeof head_) return true;
      frame_ = proto::parse_header(head_);
      body_left_ = frame_.length;
    } else {
      size_t k = std::min(n, body_left_);
      if (frame_.channel == ch_ && frame_.type == proto::Type::data) to_local_.put(l_, {}, std::string_view(p, k));
      body_left_ -= k, p += k, n -= k;
    }
    if (body_left_) continue;
    head_got_ = 0;  // the frame is whole
    if (frame_.channel != ch_ || frame_.type == proto::Type::data) continue;
    if (frame_.type != proto::Type::end) return false;  // error: the connection in the sandbox broke
    agent_end_ = true;
  }
  return true;
}

void ChannelRelay::open_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return;
  pipe_r_.reset(p[0]);
  pipe_w_.reset(p[1]);
  ::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(kHighWater));  // a smaller pipe only means more splices
  int cap = ::fcntl(p[1], F_GETPIPE_SZ);
  pipe_cap_ = cap > 0 ? static_cast<size_t>(cap) : 65536;
}

bool ChannelRelay::drain_pipe() {
  while (piped_) {
    ssize_t n = ::splice(pipe_r_.get(), nullptr, l_, nullptr, piped_, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      piped_ -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
  return true;
}

bool ChannelRelay::splice_body() {
  ssize_t n = ::splice(a_, nullptr, pipe_w_.get(), nullptr, std::min(body_left_, pipe_cap_), SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
  if (n > 0) {
    piped_ = static_cast<size_t>(n);
    body_left_ -= piped_;
    if (!body_left_) head_got_ = 0;  // the frame is whole
    drain_pipe();  // a broken local side shows at run()'s next drain
    return true;
  }
  if (n == 0) return false;  // the sandbox went away
  int e = errno;
  if (e == EINVAL) pipe_w_.reset(), pipe_r_.reset();  // this stream cannot be spliced: read it
  return e == EINTR || e == EAGAIN || e == EINVAL;
}

bool ChannelRelay::read_agent() {
  char* buf = buf_.data();
  // Bytes still in the pipe stop the reading: whatever came next would overtake them.
  while (!piped_ && to_local_.size() < kHighWater) {
    if (pipe_w_ && head_got_ == sizeof head_ && frame_.channel == ch_ && frame_.type == proto::Type::data &&
        !to_local_.size()) {
      size_t before = body_left_;
      if (!splice_body()) return false;
      if (body_left_ == before && pipe_w_) return true;  // nothing more to read now
      continue;
    }
    // Splicing, a header is read on its own: the payload after it can then be spliced.
    size_t want = pipe_w_ && head_got_ < sizeof head_ ? sizeof head_ - head_got_ : buf_.size();
    ssize_t n = ::read(a_, buf, want);
    if (n == 0) return false;  // the sandbox went away
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN;
    }
    if (!take(buf, static_cast<size_t>(n))) return false;
  }
  return true;
}

void ChannelRelay::run() {
  set_nonblocking(a_);
  set_nonblocking(l_);
  open_pipe();
  try {
    for (;;) {
      if (!drain_pipe() || (!piped_ && !to_local_.flush(l_))) return abort_agent();
      if (!to_agent_.flush(a_)) return;
      if (agent_end_ && !shut_local_ && !to_local_.size() && !piped_) {
        ::shutdown(l_, SHUT_WR);
        shut_local_ = true;
      }
      bool local_done = shut_local_ && local_eof_;
      if (local_done && !to_agent_.size()) return;
      short lev = 0, aev = 0;
      if (!local_eof_ && to_agent_.size() < kHighWater) lev |= POLLIN;
      if (to_local_.size() || piped_) lev |= POLLOUT;
      if (!piped_ && to_local_.size() < kHighWater) aev |= POLLIN;
      if (to_agent_.size()) aev |= POLLOUT;
      // A local side that is done in both directions is not polled: it would report POLLHUP forever.
      pollfd p[2] = {{local_done ? -1 : l_, lev, 0}, {a_, aev, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      bool lhup = p[0].revents & (POLLHUP | POLLERR), ahup = p[1].revents & (POLLHUP | POLLERR);
      if ((p[0].revents & POLLIN || lhup) && (lev & POLLIN) && !read_local()) return abort_agent();
      // Hung up while not read: the local peer closed outright; nothing sent to it could arrive.
      else if (lhup && !(lev & POLLIN)) return abort_agent();
      if ((p[1].revents & POLLIN || ahup) && (aev & POLLIN) && !read_agent()) return;
      else if (ahup && !(aev & POLLIN)) return;
    }
  } catch (const std::exception&) {
    // Garbage from the agent: the local side sees the connection close.
  }
}

}  // namespace

void relay_port_channel(int agent_fd, uint32_t channel, int local_fd) {
  block_sigpipe_in_this_thread();  // as for the relay's sends, which take MSG_NOSIGNAL
  ChannelRelay(agent_fd, channel, local_fd).run();
}

namespace {
// One direction of splice_streams: from's bytes through a pipe to `to`, spliced
// (the kernel moves the pages; the host copies nothing), its EOF passed on as
// shutdown(SHUT_WR). Both sockets are non-blocking; false when a side broke.
struct Direction {
  int from, to;
  Fd r, w;
  size_t cap = 0, held = 0;
  bool eof = false, done = false;

  Direction(int f, int t) : from(f), to(t) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) throw sys_error("pipe", errno);
    r.reset(p[0]);
    w.reset(p[1]);
    ::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(kHighWater));
    int c = ::fcntl(p[1], F_GETPIPE_SZ);
    cap = c > 0 ? static_cast<size_t>(c) : 65536;
  }
  bool wants_read() const { return !eof && held < cap; }
  bool fill() {
    while (wants_read()) {
      ssize_t n = ::splice(from, nullptr, w.get(), nullptr, cap - held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) held += static_cast<size_t>(n);
      else if (n == 0) eof = true;
      else if (errno != EINTR) return errno == EAGAIN;
    }
    return true;
  }
  bool drain() {
    while (held) {
      ssize_t n = ::splice(r.get(), nullptr, to, nullptr, held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) held -= static_cast<size_t>(n);
      else if (n == 0 || errno != EINTR) return n < 0 && errno == EAGAIN;
    }
    if (eof && !done) ::shutdown(to, SHUT_WR), done = true;
    return true;
  }
};
}  // namespace

void splice_streams(int a, int b) {
  block_sigpipe_in_this_thread();
  set_nonblocking(a);
  set_nonblocking(b);
  // d[i] reads fds[i] and writes fds[1 - i].
  int fds[2] = {a, b};
  Direction d[2] = {{a, b}, {b, a}};
  auto broke = [a, b] {
    ::shutdown(a, SHUT_RDWR);
    ::shutdown(b, SHUT_RDWR);
  };
  while (!d[0].done || !d[1].done) {
    pollfd p[2];
    for (int i = 0; i < 2; ++i) {
      short ev = static_cast<short>((d[i].wants_read() ? POLLIN : 0) | (d[1 - i].held ? POLLOUT : 0));
      // A socket finished both ways is left out: its hang-up would wake every poll.
      p[i] = {d[i].eof && d[1 - i].done ? -1 : fds[i], ev, 0};
    }
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return broke();
    }
    for (int i = 0; i < 2; ++i) {
      // An error, or a hang-up before this side took everything meant for it (its
      // peer reset, or it was shut down under us: sbx port-forward stopping).
      if ((p[i].revents & POLLERR) || ((p[i].revents & POLLHUP) && !d[1 - i].done)) return broke();
    }
    for (auto& dir : d)
      if (!dir.fill() || !dir.drain()) return broke();
  }
}

}  // namespace sbx
