#include "core/protocol.hpp"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/unix_socket.hpp"

namespace sbx::proto {

bool known_type(uint8_t t) {
  return (t >= 0x01 && t <= 0x0E) || (t >= 0x81 && t <= 0x89);
}

nlohmann::json Frame::json() const {
  auto j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw Error(Errc::protocol, "malformed JSON in agent frame of type " + std::to_string(static_cast<int>(type)));
  return j;
}

namespace {
void put_u32(char* s, uint32_t v) {
  s[0] = static_cast<char>((v >> 24) & 0xff);
  s[1] = static_cast<char>((v >> 16) & 0xff);
  s[2] = static_cast<char>((v >> 8) & 0xff);
  s[3] = static_cast<char>(v & 0xff);
}
uint32_t get_u32(const char* p) {
  auto b = [&](int i) { return static_cast<uint32_t>(static_cast<unsigned char>(p[i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}
}  // namespace

Header parse_header(const char* p) {
  Header h;
  h.length = get_u32(p);
  auto type = static_cast<uint8_t>(p[4]);
  if (h.length > kMaxPayload) throw Error(Errc::protocol, "agent frame length " + std::to_string(h.length) + " exceeds limit");
  if (!known_type(type)) throw Error(Errc::protocol, "unknown agent frame type " + std::to_string(type));
  h.type = static_cast<Type>(type);
  h.channel = get_u32(p + 5);
  return h;
}

void put_header(char* out, Type type, uint32_t channel, size_t length) {
  if (length > kMaxPayload)
    throw Error(Errc::limit_exceeded, "agent frame of " + std::to_string(length) + " bytes is too large");
  put_u32(out, static_cast<uint32_t>(length));
  out[4] = static_cast<char>(type);
  put_u32(out + 5, channel);
}

size_t send_now(int fd, std::string_view head, std::string_view body, bool& broke) {
  size_t done = 0, total = head.size() + body.size();
  while (done < total) {
    iovec iov[2];
    int cnt = 0;
    if (done < head.size()) iov[cnt++] = {const_cast<char*>(head.data() + done), head.size() - done};
    size_t in_body = done < head.size() ? 0 : done - head.size();
    if (in_body < body.size()) iov[cnt++] = {const_cast<char*>(body.data() + in_body), body.size() - in_body};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(cnt);
    ssize_t n = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == ENOTSOCK) n = ::writev(fd, iov, cnt);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    broke = !(n < 0 && errno == EAGAIN);
    break;
  }
  return done;
}

std::string encode(Type type, uint32_t channel, std::string_view payload) {
  char head[kHeaderSize];
  put_header(head, type, channel, payload.size());
  std::string out;
  out.reserve(kHeaderSize + payload.size());
  out.append(head, kHeaderSize);
  out.append(payload);
  return out;
}

std::string encode_json(Type type, uint32_t channel, const nlohmann::json& body) {
  return encode(type, channel, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::string encode_error(uint32_t channel, std::string_view code, int err, std::string_view message) {
  return encode_json(Type::error, channel, {{"code", code}, {"errno", err}, {"message", message}});
}

std::optional<Frame> Decoder::pop() {
  if (buffered() < kHeaderSize) return std::nullopt;
  const char* p = buf_.data() + pos_;
  Header h = parse_header(p);
  if (buffered() < kHeaderSize + h.length) return std::nullopt;
  Frame f;
  f.type = h.type;
  f.channel = h.channel;
  f.payload.assign(p + kHeaderSize, h.length);
  pos_ += kHeaderSize + h.length;
  // Compact once the consumed prefix dominates, so a long stream does not grow the buffer.
  if (pos_ > 4096 && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return f;
}

std::optional<Frame> read_frame(int fd, Fd* passed) {
  char hdr[kHeaderSize];
  if (!(passed ? read_exact_passing(fd, hdr, sizeof hdr, *passed) : read_exact(fd, hdr, sizeof hdr))) return std::nullopt;
  Header h = parse_header(hdr);
  Frame f;
  f.type = h.type;
  f.channel = h.channel;
  f.payload.resize(h.length);
  if (h.length && !read_exact(fd, f.payload.data(), h.length)) throw Error(Errc::protocol, "agent stream ended inside a frame");
  return f;
}

}  // namespace sbx::proto
