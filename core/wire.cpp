#include "core/wire.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

namespace sbx {

using nlohmann::json;

// ---------------------------------------------------------------- encodings

namespace {
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::string_view data) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    uint32_t v = uint32_t{static_cast<unsigned char>(data[i])} << 16 |
                 uint32_t{static_cast<unsigned char>(data[i + 1])} << 8 | static_cast<unsigned char>(data[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) out += kB64[(v >> shift) & 63];
  }
  size_t rest = data.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{static_cast<unsigned char>(data[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<unsigned char>(data[i + 1])} << 8;
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += rest == 2 ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  size_t pad = 0;
  while (pad < 2 && !text.empty() && text.back() == '=') {
    text.remove_suffix(1);
    ++pad;
  }
  if (text.size() % 4 == 1 || (pad > 0 && (text.size() + pad) % 4 != 0))
    throw Error(Errc::invalid_argument, "malformed base64: wrong length");
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    int v = b64_value(c);
    if (v < 0) throw Error(Errc::invalid_argument, "malformed base64: unexpected character");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
      acc &= (1u << bits) - 1;
    }
  }
  return out;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    uint32_t min;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1Fu, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0Fu, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07u, min = 0x10000;
    else return false;
    if (s.size() - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// ---------------------------------------------------------------- request/stream forms

json spec_request_json(const SandboxSpec& spec) {
  json j = json::object();
  if (!spec.name.empty()) j["name"] = spec.name;
  if (!spec.driver.empty() && spec.driver != "remote") j["driver"] = spec.driver;
  if (!spec.image.empty()) j["image"] = spec.image;
  json limits = json::object();
  if (spec.limits.cpus > 0) limits["cpus"] = spec.limits.cpus;
  if (spec.limits.memory_mb) limits["memory_mb"] = spec.limits.memory_mb;
  if (spec.limits.pids) limits["pids"] = spec.limits.pids;
  if (spec.limits.disk_mb) limits["disk_mb"] = spec.limits.disk_mb;
  if (!limits.empty()) j["limits"] = limits;
  if (!spec.network.empty()) j["network"] = spec.network;
  if (spec.idle_timeout_s != kUseDefault) j["idle_timeout_s"] = spec.idle_timeout_s;
  if (spec.ttl_s != kUseDefault) j["ttl_s"] = spec.ttl_s;
  if (spec.persistent) j["persistent"] = true;
  if (!spec.idle_action.empty()) j["idle_action"] = spec.idle_action;
  if (!spec.env.empty()) j["env"] = spec.env;
  if (!spec.labels.empty()) j["labels"] = spec.labels;
  if (!spec.workdir.empty()) j["workdir"] = spec.workdir;
  if (!spec.allow.empty()) j["allow"] = spec.allow;
  if (!spec.from_snapshot.empty()) j["from_snapshot"] = spec.from_snapshot;
  return j;
}

namespace {
// One output line can be a whole buffer of the command's output, but never unbounded.
constexpr size_t kMaxLine = 64u << 20;
}  // namespace

std::string str_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}


json error_json(const Error& e) {
  json err{{"code", code_name(e.code())}, {"message", e.what()}};
  if (!e.hint().empty()) err["hint"] = e.hint();
  return err;
}

Error error_from_json(const json& err, Errc fallback, const std::string& fallback_message) {
  std::string message = str_field(err, "message");
  Error e(errc_named(str_field(err, "code")).value_or(fallback), message.empty() ? fallback_message : message);
  if (std::string hint = str_field(err, "hint"); !hint.empty()) e.set_hint(hint);
  return e;
}

Errc errc_for_http_status(long status) {
  switch (status) {
    case 400: return Errc::invalid_argument;
    case 401: return Errc::unauthenticated;
    case 403: return Errc::forbidden;
    case 404: return Errc::not_found;
    case 405: return Errc::invalid_argument;
    case 409: return Errc::conflict;
    case 413: return Errc::too_large;
    case 429: return Errc::limit_exceeded;
    case 503: return Errc::unavailable;
    case 504: return Errc::timeout;
    default: return status >= 500 ? Errc::internal : Errc::protocol;
  }
}

NdjsonExecParser::NdjsonExecParser(Sink on_stdout, Sink on_stderr)
    : on_stdout_(std::move(on_stdout)), on_stderr_(std::move(on_stderr)) {}

void NdjsonExecParser::feed(std::string_view data) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      if (partial_.size() + data.size() > kMaxLine)
        throw Error(Errc::protocol, "the manager sent an exec stream line longer than " + format_size(kMaxLine));
      partial_.append(data);
      return;
    }
    if (partial_.empty()) {
      line(data.substr(0, nl));
    } else {
      partial_.append(data.substr(0, nl));
      std::string whole = std::move(partial_);
      partial_.clear();
      line(whole);
    }
    data.remove_prefix(nl + 1);
  }
}

void NdjsonExecParser::finish() {
  if (partial_.empty()) return;
  std::string whole = std::move(partial_);
  partial_.clear();
  line(whole);
}

void NdjsonExecParser::line(std::string_view text) {
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) return;
  if (done_) throw Error(Errc::protocol, "the manager sent output after the exec's exit line");
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) throw Error(Errc::protocol, "the manager sent an exec stream line that is not a JSON object");
  auto emit = [&](const char* key, const char* b64_key, const Sink& sink) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string()) {
      if (sink) sink(it->get_ref<const std::string&>());
    }
    auto b = j.find(b64_key);
    if (b != j.end() && b->is_string()) {
      std::string bytes;
      try {
        bytes = base64_decode(b->get_ref<const std::string&>());
      } catch (const Error&) {
        throw Error(Errc::protocol, std::string("the manager sent malformed base64 in ") + b64_key);
      }
      if (sink) sink(bytes);
    }
  };
  emit("stdout", "stdout_b64", on_stdout_);
  emit("stderr", "stderr_b64", on_stderr_);
  // The manager ends a stream it cannot finish with the API's error shape.
  if (auto er = j.find("error"); er != j.end() && er->is_object())
    throw error_from_json(*er, Errc::internal, "the manager failed the exec");
  auto ex = j.find("exit");
  if (ex != j.end()) {
    if (!ex->is_object()) throw Error(Errc::protocol, "the manager's exit line is not an object");
    try {
      result_ = ex->get<ExecResult>();
    } catch (const Error& e) {
      throw Error(Errc::protocol, "the manager's exit line is malformed: " + e.message());
    }
    error_ = str_field(*ex, "error");
    done_ = true;
  }
}

}  // namespace sbx
