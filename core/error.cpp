#include "core/error.hpp"

#include <cerrno>
#include <cstring>

namespace sbx {

std::string_view code_name(Errc code) {
  switch (code) {
    case Errc::usage: return "usage";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::not_found: return "not_found";
    case Errc::already_exists: return "already_exists";
    case Errc::unavailable: return "unavailable";
    case Errc::permission_denied: return "permission_denied";
    case Errc::limit_exceeded: return "limit_exceeded";
    case Errc::timeout: return "timeout";
    case Errc::io: return "io";
    case Errc::protocol: return "protocol";
    case Errc::conflict: return "conflict";
    case Errc::unauthenticated: return "unauthenticated";
    case Errc::forbidden: return "forbidden";
    case Errc::too_large: return "too_large";
    case Errc::internal: return "internal";
  }
  return "internal";
}

std::optional<Errc> errc_named(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(Errc::internal); ++i)
    if (code_name(static_cast<Errc>(i)) == name) return static_cast<Errc>(i);
  return std::nullopt;
}

// 125 follows docker and podman: "the tool failed, not your command", so a
// script can tell an sbx failure from the sandboxed command's own status.
int exit_status(Errc code) {
  switch (code) {
    case Errc::usage:
    case Errc::invalid_argument: return 2;
    case Errc::timeout: return 124;
    default: return 125;
  }
}

int http_status(Errc code) {
  switch (code) {
    case Errc::usage:
    case Errc::invalid_argument: return 400;
    case Errc::not_found: return 404;
    case Errc::already_exists:
    case Errc::conflict: return 409;
    case Errc::unavailable: return 503;
    case Errc::permission_denied:
    case Errc::forbidden: return 403;
    case Errc::unauthenticated: return 401;
    case Errc::limit_exceeded: return 429;
    case Errc::too_large: return 413;
    case Errc::timeout: return 504;
    case Errc::io:
    case Errc::protocol: return 502;
    case Errc::internal: return 500;
  }
  return 500;
}

Error::Error(Errc code, std::string message, int sys_errno)
    : code_(code), errno_(sys_errno), message_(std::move(message)) {
  rebuild();
}

Error& Error::add_context(std::string what) {
  context_.push_back(std::move(what));
  rebuild();
  return *this;
}

Error& Error::set_hint(std::string hint) {
  hint_ = std::move(hint);
  return *this;
}

void Error::rebuild() {
  full_.clear();
  for (auto it = context_.rbegin(); it != context_.rend(); ++it) {
    full_ += *it;
    full_ += ": ";
  }
  full_ += message_;
  if (errno_ != 0) {
    full_ += ": ";
    full_ += std::strerror(errno_);
  }
}

Errc errc_from_errno(int err) {
  switch (err) {
    case ENOENT: case ESRCH: return Errc::not_found;
    case EEXIST: return Errc::already_exists;
    case EPERM: case EACCES: return Errc::permission_denied;
    case ENOSPC: case EDQUOT: case EFBIG: case EMFILE: case ENFILE: return Errc::limit_exceeded;
    case ETIMEDOUT: return Errc::timeout;
    case EINVAL: case ENAMETOOLONG: case ELOOP: case ENOTDIR: case EISDIR: case EXDEV:
      return Errc::invalid_argument;
    case ECONNREFUSED: case ECONNRESET: case EPIPE: return Errc::protocol;
    case ENOSYS: case EOPNOTSUPP: return Errc::unavailable;
    default: return Errc::io;
  }
}

Error sys_error(std::string message, int err) { return Error(errc_from_errno(err), std::move(message), err); }

}  // namespace sbx
