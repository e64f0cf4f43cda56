// The image store: read-only root filesystems that sandboxes use as their
// overlay's lower layer, content-addressed and shared by every sandbox, state
// root and driver on the host.
//
//   <store>/<hex>/rootfs/        the root tree (never written once stored)
//   <store>/<hex>/image.json     id "sha256:<hex>", names, created, source, packages, size
//   <store>/<hex>/users/<sbx-id> one marker per sandbox using it (holds the sandbox's state directory)
//   <store>/names/<name>         the id a name points at
//   <store>/tmp/                 builds in progress (renamed into place when complete)
//
// A sandbox's spec carries the resolved rootfs path, not the name: drivers
// take a directory. The users markers are what makes `rm` refuse an image in
// use even by a sandbox of another state root; a marker whose sandbox
// directory is gone is stale and ignored (and swept by gc).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend.hpp"
#include "core/driver.hpp"

namespace sbx {
struct Config;
}

namespace sbx::images {

/// The name of the image sandboxes get when they ask for none (config defaults.image).
inline constexpr const char* kDefaultName = "default";
/// `--image host`: the host's own /usr, read-only (the view without an image).
inline constexpr const char* kHostView = "host";

/// One stored image.
struct Image {
  std::string id;                  ///< "sha256:<hex>"
  std::string dir;                 ///< <store>/<hex>
  std::string rootfs;              ///< <dir>/rootfs: what SandboxSpec.image holds
  std::vector<std::string> names;  ///< the names pointing at it, sorted
  nlohmann::json meta;             ///< image.json as stored
};

/// A sandbox recorded as using an image.
struct User {
  std::string sandbox_id;
  std::string sandbox_dir;  ///< its state directory (in whichever state root it lives)
};

/// Checks an image name: 1-64 of a-z 0-9 _ . -, starting with a letter or
/// digit, and not "host" (which means the host view). Throws invalid_argument.
void check_image_name(const std::string& name);

class Store {
 public:
  /// The store at `dir` (created on first write).
  explicit Store(std::string dir);
  /// Where it lives.
  const std::string& dir() const { return dir_; }

  /// The image `ref` names: a name, an id ("sha256:HEX" or HEX) or an
  /// unambiguous prefix of at least 6 hex digits.
  std::optional<Image> find(const std::string& ref) const;
  /// Same, or not_found saying how to build one and where to look.
  Image get(const std::string& ref) const;
  /// Every stored image, oldest first.
  std::vector<Image> list() const;
  /// The sandboxes using an image whose state directories still exist.
  std::vector<User> users(const Image& img) const;

  /// Stores the image `id` unless it is there already (then returns it, with
  /// `*hit` set): fill(rootfs) populates a fresh directory in the store's tmp/
  /// and returns image.json's "source" and "packages"; the whole is renamed into
  /// place only once complete, so a failed or killed fill leaves nothing.
  /// Two fills of one id never run at once (the second waits and hits).
  Image add(const std::string& id, const std::function<nlohmann::json(const std::string& rootfs)>& fill,
            bool* hit = nullptr);
  /// Points `name` at the image `id` (moving it off any other image).
  void tag(const std::string& name, const std::string& id);
  /// Removes `ref`: a name is dropped, and its image deleted when no name is
  /// left; an id deletes the image and all its names. Refused (conflict)
  /// while a sandbox uses the image it would delete. Returns what went
  /// ("name default", "image sha256:...").
  std::vector<std::string> remove(const std::string& ref);
  /// Collects images without names or users, abandoned builds and stale
  /// users markers; with `apt_cache`, also cached .debs no stored image was built from.
  std::vector<GcAction> gc(bool dry_run, const std::string& apt_cache = "");

 private:
  std::optional<Image> load(const std::string& hex) const;
  std::vector<std::string> names_of(const std::string& id) const;
  void write_names(const std::string& hex);
  void delete_image(const Image& img);
  std::string dir_;
};

/// The store this configuration names (SBX_IMAGES_DIR > images.dir > default).
Store store_for(const Config& cfg);

/// What a spec's `image` becomes before the driver sees it: empty (the host
/// view) or an absolute rootfs directory. `ref` empty takes the configured
/// default on drivers whose DriverInfo says `images` (the built-in default
/// not being built means the host view; a configured one missing is an
/// error); "host" is the host view; a path stays (normalize_spec checks it); anything else is an
/// image in the store, or not_found with the command that builds it.
std::string resolve(const std::string& ref, const std::string& driver, const Config& cfg, const DriverTable& drivers);

/// Records that sandbox `sandbox_id` (state directory `sandbox_dir`) uses
/// the image whose rootfs is `rootfs`; nothing for a directory that is not a
/// store entry. Throws not_found when the image was removed meanwhile.
void add_user(const std::string& rootfs, const std::string& sandbox_id, const std::string& sandbox_dir);
/// Drops that record (idempotent).
void drop_user(const std::string& rootfs, const std::string& sandbox_id);

}  // namespace sbx::images
