#include "core/lazy_libs.hpp"

#include <dlfcn.h>

#include <mutex>
#include <optional>

#include "core/error.hpp"

namespace sbx {

namespace {
void* open_library(const char* soname, const char* package) {
  void* h = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = ::dlerror();
    throw Error(Errc::unavailable, std::string("cannot load ") + soname + ": " + (why ? why : "unknown error"))
        .set_hint(std::string("install it: apt-get install ") + package);
  }
  return h;
}

template <class T>
void resolve(void* lib, const char* soname, const char* name, T& out) {
  out = reinterpret_cast<T>(::dlsym(lib, name));
  if (!out) throw Error(Errc::unavailable, std::string(soname) + " lacks " + name + " (too old?)");
}
}  // namespace

// Loads a library into an API table exactly once; a failure is remembered and rethrown.
template <class Api, class Fill>
const Api& load_once(Fill&& fill) {
  static Api api;
  static std::once_flag once;
  static std::optional<Error> failure;
  std::call_once(once, [&] {
    try {
      fill(api);
    } catch (const Error& e) {
      failure = e;
    }
  });
  if (failure) throw *failure;
  return api;
}

// One loader per library: open it, resolve every function of its list.
#define SBX_RESOLVE(name) resolve(lib, soname, #name, api.name);
#define SBX_DEFINE_API(Api, fn, LIST, so, package) \
  const Api& fn() {                                \
    return load_once<Api>([](Api& api) {           \
      const char* soname = so;                     \
      void* lib = open_library(soname, package);   \
      LIST(SBX_RESOLVE)                            \
    });                                            \
  }

SBX_DEFINE_API(ArchiveApi, archive_api, SBX_ARCHIVE_FUNCTIONS, "libarchive.so.13", "libarchive13")

const CurlApi& curl_api() {
  return load_once<CurlApi>([](CurlApi& api) {
    const char* soname = "libcurl.so.4";
    void* lib = open_library(soname, "libcurl4");
    SBX_CURL_FUNCTIONS(SBX_RESOLVE)
    if (api.curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error(Errc::unavailable, "curl_global_init failed");
  });
}

SBX_DEFINE_API(MhdApi, mhd_api, SBX_MHD_FUNCTIONS, "libmicrohttpd.so.12", "libmicrohttpd12")

SBX_DEFINE_API(NftApi, nft_api, SBX_NFT_FUNCTIONS, "libnftables.so.1", "libnftables1")

SBX_DEFINE_API(MnlApi, mnl_api, SBX_MNL_FUNCTIONS, "libmnl.so.0", "libmnl0")

SBX_DEFINE_API(SqliteApi, sqlite_api, SBX_SQLITE_FUNCTIONS, "libsqlite3.so.0", "libsqlite3-0")

const CryptoApi& crypto_api() {
  return load_once<CryptoApi>([](CryptoApi& api) {
    const char* soname = "libcrypto.so.3";
    void* lib = open_library(soname, "libssl3");
    SBX_RESOLVE(EVP_MD_CTX_new) SBX_RESOLVE(EVP_MD_CTX_free) SBX_RESOLVE(EVP_sha256) SBX_RESOLVE(EVP_DigestInit_ex)
    SBX_RESOLVE(EVP_DigestUpdate) SBX_RESOLVE(EVP_DigestFinal_ex)
  });
}
#undef SBX_DEFINE_API
#undef SBX_RESOLVE

}  // namespace sbx
