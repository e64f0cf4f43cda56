#include "core/protocol.hpp"

#include <unistd.h>

#include <cerrno>

#include "core/error.hpp"
#include "core/fsutil.hpp"

namespace sbx::proto {

bool known_type(uint8_t t) {
  return (t >= 0x01 && t <= 0x0D) || (t >= 0x81 && t <= 0x89);
}

nlohmann::json Frame::json() const {
  auto j = nlohmann::json::parse(payload, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw Error(Errc::protocol, "malformed JSON in agent frame of type " + std::to_string(static_cast<int>(type)));
  return j;
}

namespace {
void put_u32(std::string& s, uint32_t v) {
  s += static_cast<char>((v >> 24) & 0xff);
  s += static_cast<char>((v >> 16) & 0xff);
  s += static_cast<char>((v >> 8) & 0xff);
  s += static_cast<char>(v & 0xff);
}
uint32_t get_u32(const char* p) {
  auto b = [&](int i) { return static_cast<uint32_t>(static_cast<unsigned char>(p[i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}
}  // namespace

std::string encode(Type type, uint32_t channel, std::string_view payload) {
  if (payload.size() > kMaxPayload)
    throw Error(Errc::limit_exceeded, "agent frame of " + std::to_string(payload.size()) + " bytes is too large");
  std::string out;
  out.reserve(kHeaderSize + payload.size());
  put_u32(out, static_cast<uint32_t>(payload.size()));
  out += static_cast<char>(type);
  put_u32(out, channel);
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
  uint32_t len = get_u32(p);
  auto type = static_cast<uint8_t>(p[4]);
  if (len > kMaxPayload) throw Error(Errc::protocol, "agent frame length " + std::to_string(len) + " exceeds limit");
  if (!known_type(type)) throw Error(Errc::protocol, "unknown agent frame type " + std::to_string(type));
  if (buffered() < kHeaderSize + len) return std::nullopt;
  Frame f;
  f.type = static_cast<Type>(type);
  f.channel = get_u32(p + 5);
  f.payload.assign(p + kHeaderSize, len);
  pos_ += kHeaderSize + len;
  // Compact once the consumed prefix dominates, so a long stream does not grow the buffer.
  if (pos_ > 4096 && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return f;
}

std::optional<Frame> read_frame(int fd) {
  char hdr[kHeaderSize];
  if (!read_exact(fd, hdr, sizeof hdr)) return std::nullopt;
  uint32_t len = get_u32(hdr);
  auto type = static_cast<uint8_t>(hdr[4]);
  if (len > kMaxPayload) throw Error(Errc::protocol, "agent frame length " + std::to_string(len) + " exceeds limit");
  if (!known_type(type)) throw Error(Errc::protocol, "unknown agent frame type " + std::to_string(type));
  Frame f;
  f.type = static_cast<Type>(type);
  f.channel = get_u32(hdr + 5);
  f.payload.resize(len);
  if (len && !read_exact(fd, f.payload.data(), len)) throw Error(Errc::protocol, "agent stream ended inside a frame");
  return f;
}

}  // namespace sbx::proto
