// Making images: a Debian root filesystem built with mmdebstrap from a
// recipe (suite, variant, packages), or an OCI image unpacked by
// core/oci.hpp. Both land in the store (core/images.hpp) through
// Store::add, so a half-made image is never seen.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/images.hpp"

namespace sbx::images {

/// What a built image is made of. Its id is the sha256 of the normalized
/// recipe (recipe_json), so the same recipe always names the same image.
struct Recipe {
  std::string suite = "bookworm";     ///< a Debian suite
  std::string variant = "minbase";    ///< mmdebstrap --variant
  std::vector<std::string> packages;  ///< Debian package names (Python ones too: python3-numpy)
  std::string mirror;                 ///< archive URL; empty = mmdebstrap's (deb.debian.org). Not part of the id.
};

/// The recipe of the image named `default`: python3 (with `python`), the common shell tools.
Recipe default_recipe();
/// Reads a recipe file (YAML: suite, variant, packages, mirror); unknown keys are errors.
Recipe load_recipe(const std::string& path);
/// The recipe in its normal form: packages sorted and unique, python-is-python3
/// added where python3 is (so `python` works), checked. Throws invalid_argument.
Recipe normalized(Recipe r);
/// The normalized recipe as the JSON its id is the digest of (recipe format version included).
nlohmann::json recipe_json(const Recipe& r);
/// "sha256:<hex>" of recipe_json.
std::string recipe_id(const Recipe& r);

/// How a build talks to its caller.
struct BuildOptions {
  std::string apt_cache;                          ///< downloaded .debs kept here between builds
  bool verbose = false;                           ///< mmdebstrap's own output on our stderr (a terminal)
  std::function<void(const std::string&)> note;  ///< one-line progress notes; may be empty
};

/// An image made (or found) and whether it was already there.
struct Made {
  Image image;
  bool cached = false;
};

/// Builds the recipe into the store (or finds it: same recipe, same id) and
/// names it `name`. Needs root and mmdebstrap; an unknown package is named.
Made build(Store& store, const std::string& name, const Recipe& recipe, const BuildOptions& opts);
/// Unpacks the OCI image at `src` (archive or layout directory; `ref` picks
/// one of several) into the store under its manifest digest, named `name` if given.
Made import_oci(Store& store, const std::string& src, const std::string& name, const std::string& ref);

}  // namespace sbx::images
