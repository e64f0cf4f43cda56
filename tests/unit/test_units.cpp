#include "core/units.hpp"

#include <cstdint>
#include <string>

#include <catch2/catch.hpp>

#include "tests/unit/helpers.hpp"

using sbx::Errc;
using sbx_test::error_of;

namespace {
constexpr uint64_t K = 1024;
constexpr uint64_t M = K * K;
constexpr uint64_t G = M * K;
constexpr uint64_t T = G * K;
}  // namespace

TEST_CASE("units: parse_size accepts plain numbers and binary units", "[units]") {
  auto [text, bytes] = GENERATE(table<std::string, uint64_t>({
      {"0", 0},
      {"512", 512},
      {"1k", K},
      {"1K", K},
      {"256k", 256 * K},
      {"1KB", K},
      {"1kib", K},
      {"256M", 256 * M},
      {"256m", 256 * M},
      {"256MB", 256 * M},
      {"256MiB", 256 * M},
      {"1.5G", G + G / 2},
      {"2GiB", 2 * G},
      {"2g", 2 * G},
      {"1T", T},
      {"0.5k", 512},
      {"1b", 1},
      {"16T", 16 * T},
  }));
  CAPTURE(text);
  CHECK(sbx::parse_size(text) == bytes);
}

TEST_CASE("units: parse_size rejects malformed sizes with invalid_argument", "[units]") {
  auto text = GENERATE(as<std::string>{}, "", "abc", "M", "k12", "12x", "12 M", " 12", "-5", "-5M", "5MM", "5KiBB",
                       ".", "1e3", "12P", "1.5GX");
  CAPTURE(text);
  auto e = error_of([&] { sbx::parse_size(text); });
  CHECK(e.code() == Errc::invalid_argument);
}

TEST_CASE("units: parse_size names the bad text and gives a hint for a bad unit", "[units]") {
  auto e = error_of([] { sbx::parse_size("12furlongs"); });
  CHECK(sbx_test::contains(e.what(), "12furlongs"));
  CHECK_FALSE(e.hint().empty());
}

TEST_CASE("units: parse_size refuses a number with several decimal points", "[units][bug]") {
  // "1.2.3G" is not a number; std::stod stops at the second '.', so the
  // parser must check that it consumed everything it took as the number.
  for (const char* text : {"1.2.3G", "1..5M", "1.2.3"}) {
    CAPTURE(text);
    auto e = error_of([&] { sbx::parse_size(text); });
    CHECK(e.code() == Errc::invalid_argument);
  }
}

TEST_CASE("units: parse_size is exact or refuses, never wraps, for huge sizes", "[units][bug]") {
  // 10000000T = 10995116277760000000 bytes fits in uint64_t (< 1.8e19) but not in
  // the long long that std::llround returns: the result must be exact or an error.
  uint64_t expected = 10000000ull * T;
  try {
    uint64_t got = sbx::parse_size("10000000T");
    CHECK(got == expected);
  } catch (const sbx::Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
  }
  // Clearly beyond 2^64: refused.
  auto e = error_of([] { sbx::parse_size("100000000T"); });
  CHECK(e.code() == Errc::invalid_argument);
}

TEST_CASE("units: parse_duration_ms accepts units and compound forms", "[units]") {
  auto [text, ms] = GENERATE(table<std::string, uint64_t>({
      {"0", 0},
      {"30", 30'000},
      {"30s", 30'000},
      {"500ms", 500},
      {"10m", 600'000},
      {"1h", 3'600'000},
      {"1h30m", 5'400'000},
      {"2d", 172'800'000},
      {"1d2h3m4s", 93'784'000},
      {"1.5s", 1'500},
      {"0.5h", 1'800'000},
      {"1H30M", 5'400'000},
      {"1m500ms", 60'500},
  }));
  CAPTURE(text);
  CHECK(sbx::parse_duration_ms(text) == ms);
}

TEST_CASE("units: parse_duration_ms rejects malformed durations with invalid_argument", "[units]") {
  auto text = GENERATE(as<std::string>{}, "", "abc", "h", "10x", "10 s", "-1s", "1hm", "1w", "s10", "1h-5m",
                       "10sec", ".");
  CAPTURE(text);
  auto e = error_of([&] { sbx::parse_duration_ms(text); });
  CHECK(e.code() == Errc::invalid_argument);
}

TEST_CASE("units: parse_duration_ms refuses a number with several decimal points", "[units][bug]") {
  auto e = error_of([] { sbx::parse_duration_ms("1.2.3s"); });
  CHECK(e.code() == Errc::invalid_argument);
}

TEST_CASE("units: parse_duration_ms refuses durations that do not fit, never wraps", "[units][bug]") {
  // 3e11 days is about 2.6e19 ms, more than uint64_t holds.
  auto e = error_of([] { sbx::parse_duration_ms("300000000000d"); });
  CHECK(e.code() == Errc::invalid_argument);
}

TEST_CASE("units: a number of hundreds of digits is too large, not a std::out_of_range", "[units][fuzz]") {
  // Found by tests/fuzz/fuzz_units: std::stod threw out_of_range past DBL_MAX,
  // which escaped every caller that expects sbx::Error.
  std::string huge(400, '1');
  CHECK(error_of([&] { sbx::parse_size(huge); }).code() == Errc::invalid_argument);
  CHECK(error_of([&] { sbx::parse_size(huge + "G"); }).code() == Errc::invalid_argument);
  CHECK(error_of([&] { sbx::parse_duration_ms(huge + "ms"); }).code() == Errc::invalid_argument);
  CHECK(error_of([&] { sbx::parse_duration_ms("1m" + huge); }).code() == Errc::invalid_argument);
}

TEST_CASE("units: format_size", "[units]") {
  auto [bytes, text] = GENERATE(table<uint64_t, std::string>({
      {0, "0"},
      {1, "1"},
      {1023, "1023"},
      {K, "1K"},
      {K + K / 2, "1.5K"},
      {256 * M, "256M"},
      {268435456, "256M"},
      {G, "1G"},
      {2 * G + G / 2, "2.5G"},
      {T, "1T"},
      {3 * T, "3T"},
      {1024 * T, "1024T"},
  }));
  CAPTURE(bytes);
  CHECK(sbx::format_size(bytes) == text);
}

TEST_CASE("units: format_size output parses back to the same size for whole units", "[units]") {
  for (uint64_t v : {uint64_t{0}, uint64_t{7}, K, 3 * K, 256 * M, 5 * G, 2 * T, 1536 * K}) {
    CAPTURE(v);
    CHECK(sbx::parse_size(sbx::format_size(v)) == v);
  }
}

TEST_CASE("units: format_duration_ms", "[units]") {
  auto [ms, text] = GENERATE(table<uint64_t, std::string>({
      {0, "-"},
      {1, "1ms"},
      {500, "500ms"},
      {999, "999ms"},
      {1000, "1s"},
      {1500, "1.5s"},
      {1250, "1.25s"},
      {1001, "1.001s"},
      {59'000, "59s"},
      {60'000, "1m"},
      {60'500, "1m0.5s"},
      {90'000, "1m30s"},
      {90'500, "1m30.5s"},
      {3'600'500, "1h"},
      {3'600'000, "1h"},
      {5'400'000, "1h30m"},
      {3'661'000, "1h1m"},
      {86'400'000, "1d"},
      {90'000'000, "1d1h"},
      {172'800'000, "2d"},
  }));
  CAPTURE(ms);
  CHECK(sbx::format_duration_ms(ms) == text);
}

TEST_CASE("units: format_duration_ms output parses back for exact values", "[units]") {
  for (uint64_t v : {uint64_t{250}, uint64_t{1000}, uint64_t{1500}, uint64_t{45'000}, uint64_t{90'000},
                     uint64_t{90'250}, uint64_t{5'400'000},
                     uint64_t{86'400'000}, uint64_t{90'000'000}}) {
    CAPTURE(v);
    CHECK(sbx::parse_duration_ms(sbx::format_duration_ms(v)) == v);
  }
}
