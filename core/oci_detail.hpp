// The parts of core/oci.cpp that tests reach directly: the SHA-256 used to
// verify blobs, and applying one layer's tar stream to a root directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/sha256.hpp"

namespace sbx::oci::detail {

// The blobs' digests: core/sha256.hpp (libcrypto's SHA-256).
using sbx::Sha256;
using sbx::sha256_of;

/// A path's components, with leading '/' and "." dropped (absolute names
/// are taken relative to the root, as tar does); nullopt when one is "..".
std::optional<std::vector<std::string>> components(std::string_view name);

/// Pulls up to `cap` bytes of a blob into `buf`; returns 0 at its end.
using ReadFn = std::function<size_t(char* buf, size_t cap)>;

/// What a layer must match, as far as the image says (empty/negative: unchecked).
struct LayerCheck {
  std::string name;     ///< how errors name the layer (its digest, or its path in the archive)
  std::string digest;   ///< "sha256:<hex>" of the blob as stored (compressed or not)
  int64_t size = -1;    ///< the blob's size as stored
  std::string diff_id;  ///< "sha256:<hex>" of the uncompressed tar (config.rootfs.diff_ids)
};

/// Where an image's files come from: a directory, or a tar archive read in passes.
class Source {
 public:
  virtual ~Source() = default;
  /// Whether the member exists as a regular file (after links, in archives).
  virtual bool has(const std::string& name) = 0;
  /// Passes a reader of the member's bytes to fn; not_found when it is missing.
  virtual void stream(const std::string& name, const std::function<void(const ReadFn&)>& fn) = 0;
};

/// Opens `path`, a directory or a (possibly compressed) tar archive.
std::unique_ptr<Source> open_source(const std::string& path);

/// What to tell a user whose file is not an image.
extern const char* const kImageHint;

/// Applies one layer (a tar, plain or gzip/zstd/xz-compressed, read through
/// `read`) onto the directory `root_fd`: whiteouts delete what lower layers
/// wrote, no entry lands outside the root, devices are refused. The blob is
/// read to its end and checked against `check`; a mismatch is invalid_argument.
void apply_layer(int root_fd, const ReadFn& read, const LayerCheck& check);

}  // namespace sbx::oci::detail
