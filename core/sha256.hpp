// SHA-256 (FIPS 180-4), for content addresses: an image's id is the digest
// of its normalized recipe. Small and dependency-free, so sbx links no
// crypto library for it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sbx {

/// An incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  /// Adds bytes to the message.
  void update(std::string_view data);
  /// The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex();

 private:
  void block(const unsigned char* p);
  uint32_t h_[8];
  unsigned char buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

/// The hex SHA-256 of data.
std::string sha256_hex(std::string_view data);

}  // namespace sbx
