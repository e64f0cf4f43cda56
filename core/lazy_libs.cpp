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

const ArchiveApi& archive_api() {
  static ArchiveApi api;
  static std::once_flag once;
  static std::optional<Error> failure;
  std::call_once(once, [] {
    try {
      void* lib = open_library("libarchive.so.13", "libarchive13");
#define SBX_RESOLVE(name) resolve(lib, "libarchive.so.13", #name, api.name);
      SBX_ARCHIVE_FUNCTIONS(SBX_RESOLVE)
#undef SBX_RESOLVE
    } catch (const Error& e) {
      failure = e;
    }
  });
  if (failure) throw *failure;
  return api;
}

}  // namespace sbx
