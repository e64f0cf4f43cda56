// The JSON the remote client takes from a manager and the manager from its
// clients (core/wire.hpp, core/spec.hpp): records, specs, exec requests,
// error objects, base64 and UTF-8 checks. Whatever the text, the decoders
// give a value or throw; base64 round-trips.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/spec.hpp"
#include "core/wire.hpp"
#include "tests/fuzz/fuzz_util.hpp"

using nlohmann::json;

namespace {

template <typename T>
void decode(const json& j) {
  try {
    (void)j.get<T>();
  } catch (const json::exception&) {
  } catch (const sbx::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = sbx_fuzz::as_view(data, size);
  if (sbx::valid_utf8(text)) {
    std::string s(text);
    if (json::parse(json(s).dump()).get<std::string>() != s) std::abort();
  }
  try {
    std::string bytes = sbx::base64_decode(text);
    if (sbx::base64_decode(sbx::base64_encode(bytes)) != bytes) std::abort();
  } catch (const sbx::Error& e) {
    if (e.code() != sbx::Errc::invalid_argument) std::abort();
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;
  decode<sbx::SandboxRecord>(j);
  decode<sbx::SandboxSpec>(j);
  decode<sbx::ExecRequest>(j);
  decode<sbx::ExecResult>(j);
  decode<sbx::ProcessInfo>(j);
  if (j.is_object()) {
    (void)sbx::str_field(j, "id");
    sbx::Error e = sbx::error_from_json(j, sbx::Errc::internal, "fallback");
    (void)sbx::error_json(e).dump();
  }
  return 0;
}
