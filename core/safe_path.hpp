// Path resolution that cannot leave a root directory: `..`, absolute symlinks
// and symlinks planted by sandboxed code all resolve inside the root, as if the
// root were "/" (openat2 with RESOLVE_IN_ROOT, Linux >= 5.6; where openat2 is
// missing, as under gVisor, an equivalent walk one component at a time).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>

#include "core/fd.hpp"

namespace sbx {

/// Opens `path` below root_fd with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS).
/// Throws the errno-derived sbx::Error (not_found, ...) with the path in the message;
/// invalid_argument for a path holding a NUL byte.
Fd open_in_root(int root_fd, std::string_view path, int flags, mode_t mode = 0);

/// Splits a path into its parent and final component and opens the parent
/// inside the root. The final component is returned unresolved so the caller
/// can act on it without following it (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW).
/// `path` must name something below the root (not "/" itself).
std::pair<Fd, std::string> open_parent_in_root(int root_fd, std::string_view path);

/// Normalises "a//b/./c/" to "/a/b/c" lexically (keeps ".."; the kernel clamps those).
std::string clean_path(std::string_view path);

/// Whether the running kernel supports openat2 with RESOLVE_IN_ROOT.
bool openat2_supported();

}  // namespace sbx
