// Unpacking an OCI image (a `docker save` / `podman save` archive, or an OCI
// layout directory) into one flattened root directory: its layers applied in
// order, whiteouts honoured, and nothing written outside the root.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace sbx::oci {

/// What the image's config says about how to run it, and where it came from.
struct ImageConfig {
  std::vector<std::string> env;         ///< "K=V", from config.Env
  std::vector<std::string> cmd;         ///< Entrypoint + Cmd
  std::string workdir;                  ///< config.WorkingDir
  std::string manifest_digest;          ///< "sha256:<hex>" of the manifest applied (the image's identity)
  std::vector<std::string> layers;      ///< layer digests, in the order applied
  std::map<std::string, std::string> labels;
};

/// Applies the image at `src` (a tar archive, possibly compressed, or an OCI
/// layout directory) into `rootfs`, an empty directory. Refuses, with an
/// Error of code invalid_argument naming the layer and the entry, any entry
/// that would land outside the root (`..`, absolute or escaping hard links,
/// a symlink used as a parent), device nodes, and malformed manifests.
/// When the archive holds several images, `ref` picks one (a repo tag or a
/// digest); empty means "the only one".
ImageConfig unpack(const std::string& src, const std::string& rootfs, const std::string& ref = "");

}  // namespace sbx::oci
