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

const ArchiveApi& archive_api() {
  return load_once<ArchiveApi>([](ArchiveApi& api) {
    void* lib = open_library("libarchive.so.13", "libarchive13");
#define SBX_RESOLVE(name) resolve(lib, "libarchive.so.13", #name, api.name);
    SBX_ARCHIVE_FUNCTIONS(SBX_RESOLVE)
#undef SBX_RESOLVE
  });
}

const CurlApi& curl_api() {
  return load_once<CurlApi>([](CurlApi& api) {
    void* lib = open_library("libcurl.so.4", "libcurl4");
#define SBX_RESOLVE(name) resolve(lib, "libcurl.so.4", #name, api.name);
    SBX_CURL_FUNCTIONS(SBX_RESOLVE)
#undef SBX_RESOLVE
    if (api.curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error(Errc::unavailable, "curl_global_init failed");
  });
}

const MhdApi& mhd_api() {
  return load_once<MhdApi>([](MhdApi& api) {
    void* lib = open_library("libmicrohttpd.so.12", "libmicrohttpd12");
#define SBX_RESOLVE(name) resolve(lib, "libmicrohttpd.so.12", #name, api.name);
    SBX_MHD_FUNCTIONS(SBX_RESOLVE)
#undef SBX_RESOLVE
  });
}

const NftApi& nft_api() {
  return load_once<NftApi>([](NftApi& api) {
    void* lib = open_library("libnftables.so.1", "libnftables1");
#define SBX_RESOLVE(name) resolve(lib, "libnftables.so.1", #name, api.name);
    SBX_NFT_FUNCTIONS(SBX_RESOLVE)
#undef SBX_RESOLVE
  });
}

const MnlApi& mnl_api() {
  return load_once<MnlApi>([](MnlApi& api) {
    void* lib = open_library("libmnl.so.0", "libmnl0");
#define SBX_RESOLVE(name) resolve(lib, "libmnl.so.0", #name, api.name);
    SBX_MNL_FUNCTIONS(SBX_RESOLVE)
#undef SBX_RESOLVE
  });
}

const SqliteApi& sqlite_api() {
  return load_once<SqliteApi>([](SqliteApi& api) {
    void* lib = open_library("libsqlite3.so.0", "libsqlite3-0");
#define SBX_RESOLVE(name) resolve(lib, "libsqlite3.so.0", #name, api.name);
    SBX_SQLITE_FUNCTIONS(SBX_RESOLVE)
#undef SBX_RESOLVE
  });
}

const CryptoApi& crypto_api() {
  return load_once<CryptoApi>([](CryptoApi& api) {
    void* lib = open_library("libcrypto.so.3", "libssl3");
#define SBX_RESOLVE(name) resolve(lib, "libcrypto.so.3", #name, api.name);
    SBX_RESOLVE(EVP_MD_CTX_new) SBX_RESOLVE(EVP_MD_CTX_free) SBX_RESOLVE(EVP_sha256) SBX_RESOLVE(EVP_DigestInit_ex)
    SBX_RESOLVE(EVP_DigestUpdate) SBX_RESOLVE(EVP_DigestFinal_ex)
#undef SBX_RESOLVE
  });
}

}  // namespace sbx
