// The one error type of sbx. Library code throws sbx::Error (and only that);
// the CLI turns it into one stderr line and an exit status, the server into a
// JSON error body and an HTTP status. Nothing below cli/ exits the process.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sbx {

/// What went wrong, coarse enough to map onto exit statuses and HTTP statuses.
enum class Errc {
  usage,              ///< the caller's words are wrong (bad flag, bad value)
  invalid_argument,   ///< a value is malformed or out of range
  not_found,          ///< a sandbox, file or binary does not exist
  already_exists,     ///< creating something that is there
  unavailable,        ///< a driver or backend cannot run on this host / is off
  permission_denied,  ///< the host refused (EPERM/EACCES)
  limit_exceeded,     ///< a size, count or resource cap was hit
  timeout,            ///< a deadline passed
  io,                 ///< an I/O failure (disk full, broken pipe, ...)
  protocol,           ///< the agent or a peer spoke nonsense or vanished
  conflict,           ///< the sandbox is in the wrong state for this
  unauthenticated,    ///< missing or wrong API key
  forbidden,          ///< key lacks the permission
  too_large,          ///< a payload past its size cap (413: retrying the same one never helps, unlike limit_exceeded's 429)
  internal,           ///< a bug in sbx
};

/// The stable snake_case name of a code, as used in JSON errors.
std::string_view code_name(Errc code);
/// The code named `name` (the inverse of code_name), or nullopt.
std::optional<Errc> errc_named(std::string_view name);
/// The exit status the CLI uses for an error of this code.
int exit_status(Errc code);
/// The HTTP status the manager answers for an error of this code.
int http_status(Errc code);

class Error : public std::exception {
 public:
  Error(Errc code, std::string message, int sys_errno = 0);

  /// The code of the innermost failure.
  Errc code() const noexcept { return code_; }
  /// errno of the failing system call, or 0.
  int sys_errno() const noexcept { return errno_; }
  /// The innermost message, without context.
  const std::string& message() const noexcept { return message_; }
  /// What the caller was doing, innermost first.
  const std::vector<std::string>& context() const noexcept { return context_; }
  /// A suggestion for the user, or empty.
  const std::string& hint() const noexcept { return hint_; }

  /// Adds what the caller was doing when this happened.
  Error& add_context(std::string what);
  /// Sets a remedy the user can act on.
  Error& set_hint(std::string hint);

  /// "outer: inner: message: strerror", the full chain on one line.
  const char* what() const noexcept override { return full_.c_str(); }

 private:
  void rebuild();
  Errc code_;
  int errno_;
  std::string message_;
  std::vector<std::string> context_;
  std::string hint_;
  std::string full_;
};

/// An error for a failed system call; the code is derived from errno.
Error sys_error(std::string message, int err);
/// Maps an errno value to the closest code.
Errc errc_from_errno(int err);

/// Runs f; an sbx::Error escaping it gains `what` as context.
template <class F>
decltype(auto) with_context(std::string_view what, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (Error& e) {
    e.add_context(std::string(what));
    throw;
  }
}

}  // namespace sbx
