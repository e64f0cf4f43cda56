// `sbx cp` semantics over any Backend: docker cp's naming rules, `-` for tar
// streams, and a size cap.
#pragma once

#include <cstdint>
#include <string>

#include "core/backend.hpp"

namespace sbx {

/// One side of a cp: a host path, "-" (a tar stream), or a sandbox path.
struct CpEndpoint {
  std::string sandbox;  ///< sandbox id (or prefix); empty for the host
  std::string path;     ///< the path on that side; "-" for a stream on the host side
};

/// Parses "ID:/path", "-", or a host path (one starting with / or . is always a host path).
CpEndpoint parse_cp_endpoint(const std::string& arg);

/// Copies between the host (or stdin/stdout tar streams) and a sandbox of
/// `backend`; exactly one side must be a sandbox. Returns the bytes of file content moved.
uint64_t copy_files(Backend& backend, const CpEndpoint& src, const CpEndpoint& dest, uint64_t max_bytes,
                    int stdin_fd = 0, int stdout_fd = 1);

}  // namespace sbx
