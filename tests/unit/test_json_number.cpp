// Numbers from outside (a request, a manager's answer, an agent's frame) read
// through core/json_number.hpp: a value the target type cannot hold is an
// error naming the field, never a cast. Fuzzing found {"timeout_ms": 1e66},
// whose cast to uint64_t is undefined behaviour.
#include "core/json_number.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/spec.hpp"
#include "server/api_internal.hpp"
#include "tests/unit/helpers.hpp"

using nlohmann::json;
using sbx::Errc;
using sbx::json_number;
using sbx_test::error_of;

TEST_CASE("json_number: a number the type cannot hold is none, at every edge", "[json_number]") {
  CHECK(json_number<uint64_t>(json(1e66)) == std::nullopt);
  CHECK(json_number<int64_t>(json(-1e66)) == std::nullopt);
  CHECK(json_number<uint64_t>(json(-1)) == std::nullopt);
  CHECK(json_number<uint64_t>(json(-0.5)) == std::nullopt);
  CHECK(json_number<uint64_t>(json(std::ldexp(1.0, 64))) == std::nullopt);
  CHECK(json_number<int64_t>(json(std::ldexp(1.0, 63))) == std::nullopt);
  CHECK(json_number<int64_t>(json(-std::ldexp(1.0, 63))) == std::numeric_limits<int64_t>::min());
  CHECK(json_number<uint64_t>(json(std::numeric_limits<uint64_t>::max())) == std::numeric_limits<uint64_t>::max());
  CHECK(json_number<int64_t>(json(std::numeric_limits<uint64_t>::max())) == std::nullopt);
  CHECK(json_number<int>(json(int64_t{4294967305})) == std::nullopt);
  CHECK(json_number<uint16_t>(json(65536)) == std::nullopt);
  CHECK(json_number<uint16_t>(json(65535)) == 65535);
  CHECK(json_number<uint16_t>(json(24.9)) == 24);
  CHECK(json_number<double>(json(int64_t{-3})) == -3.0);
  CHECK(json_number<double>(json(1e300)) == 1e300);
  CHECK(json_number<int>(json("9")) == std::nullopt);
  CHECK(json_number<int>(json(true)) == std::nullopt);
  CHECK(json_number<int>(json()) == std::nullopt);
}

TEST_CASE("spec: a number field out of its type's range is a 400 naming the field", "[json_number][spec]") {
  // The fuzzer's input, shortened: this was a float-to-integer cast past the range.
  auto e = error_of([] { (void)json::parse(R"({"cmd": ["true"], "timeout_ms": 1e66})").get<sbx::ExecRequest>(); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(std::string(e.what()) == "field 'timeout_ms' must be a number from 0 to 18446744073709551615");
  // -1 used to wrap to 2^64-1 ms: a timeout that never fires.
  CHECK(error_of([] { (void)json{{"timeout_ms", -1}}.get<sbx::ExecRequest>(); }).code() == Errc::invalid_argument);
  CHECK(error_of([] { (void)json{{"rows", 70000}}.get<sbx::ExecRequest>(); }).code() == Errc::invalid_argument);
  CHECK(error_of([] { (void)json{{"memory_mb", -5}}.get<sbx::Limits>(); }).code() == Errc::invalid_argument);
  CHECK(error_of([] { (void)json{{"pids", "many"}}.get<sbx::Limits>(); }).code() == Errc::invalid_argument);
  // What a client may reasonably send still reads: a whole float, a fraction, an integer for a double.
  auto r = json{{"timeout_ms", 1500.7}, {"rows", 24.0}}.get<sbx::ExecRequest>();
  CHECK(r.timeout_ms == 1500);
  CHECK(r.rows == 24);
  auto l = json{{"cpus", 2}, {"memory_mb", 512}}.get<sbx::Limits>();
  CHECK(l.cpus == 2.0);
  CHECK(l.memory_mb == 512);
}

TEST_CASE("api: a signal or window size out of range is refused, not cast", "[json_number][api]") {
  CHECK(sbx::server::signal_number(json(9)) == 9);
  CHECK(sbx::server::signal_number(json("TERM")) == 15);
  // 2^32 + 9 cast to an int was 9: a KILL nobody asked for.
  CHECK(error_of([] { sbx::server::signal_number(json(int64_t{4294967305})); }).code() == Errc::invalid_argument);
  CHECK(error_of([] { sbx::server::signal_number(json(1e66)); }).code() == Errc::invalid_argument);
  CHECK(sbx::server::window_dimension(json{{"rows", 40}}, "rows") == 40);
  CHECK(error_of([] { sbx::server::window_dimension(json{{"rows", 1e66}}, "rows"); }).code() == Errc::invalid_argument);
  CHECK(error_of([] { sbx::server::window_dimension(json{{"rows", -1}}, "rows"); }).code() == Errc::invalid_argument);
}
