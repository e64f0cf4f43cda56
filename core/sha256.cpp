#include "core/sha256.hpp"

#include "core/error.hpp"
#include "core/lazy_libs.hpp"

namespace sbx {

Sha256::Sha256() {
  const CryptoApi& c = crypto_api();
  ctx_ = c.EVP_MD_CTX_new();
  if (!ctx_ || c.EVP_DigestInit_ex(ctx_, c.EVP_sha256(), nullptr) != 1)
    throw Error(Errc::internal, "libcrypto cannot start a SHA-256 digest");
}

Sha256::~Sha256() {
  if (ctx_) crypto_api().EVP_MD_CTX_free(ctx_);
}

void Sha256::update(const void* data, size_t n) {
  if (n && crypto_api().EVP_DigestUpdate(ctx_, data, n) != 1) throw Error(Errc::internal, "SHA-256 update failed");
}

std::string Sha256::hex() {
  unsigned char out[32];
  unsigned int n = 0;
  if (crypto_api().EVP_DigestFinal_ex(ctx_, out, &n) != 1 || n != sizeof out)
    throw Error(Errc::internal, "SHA-256 final failed");
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned char b : out) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

std::string sha256_of(std::string_view data) { return "sha256:" + sha256_hex(data); }

}  // namespace sbx
