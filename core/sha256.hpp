// SHA-256 for content addresses (an image's id, an OCI blob's digest):
// libcrypto's, loaded on first use (core/lazy_libs.hpp), so sbx calls that
// never hash pay nothing for it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace sbx {

/// An incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  void update(std::string_view data) { update(data.data(), data.size()); }
  /// The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex();
  /// "sha256:" + hex(), the OCI form.
  std::string digest() { return "sha256:" + hex(); }

 private:
  void* ctx_ = nullptr;
};

/// The hex SHA-256 of data.
std::string sha256_hex(std::string_view data);
/// "sha256:<hex>" of data.
std::string sha256_of(std::string_view data);

}  // namespace sbx
