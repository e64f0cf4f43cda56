// Numbers read from JSON that came from outside: a request, a manager's
// answer, an agent's frame. nlohmann's get<T>() casts whatever number it
// holds: a double past T's range is undefined behaviour (fuzzing found
// {"timeout_ms": 1e66}), 2^32+9 read as an int may become 9, and -1 read as
// an unsigned becomes 2^64-1. These read a number only when T can hold it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace sbx {

/// v as a T when v is a number T can hold (a fraction is dropped, as a cast
/// would), else nullopt: another type, or out of T's range.
template <class T>
std::optional<T> json_number(const nlohmann::json& v) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "json_number reads numbers, not bools");
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d)) return std::nullopt;
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(d);
    } else {
      // Both bounds are powers of two, so exact as doubles: [lo, hi) truncates into T.
      const double hi = std::ldexp(1.0, std::numeric_limits<T>::digits);
      const double lo = std::is_signed_v<T> ? -hi : 0.0;
      if (!(d >= lo && d < hi)) return std::nullopt;
      return static_cast<T>(d);
    }
  }
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if constexpr (std::is_integral_v<T>) {
      if (!std::in_range<T>(u)) return std::nullopt;
    }
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {
    auto i = v.get<int64_t>();
    if constexpr (std::is_integral_v<T>) {
      if (!std::in_range<T>(i)) return std::nullopt;
    }
    return static_cast<T>(i);
  }
  return std::nullopt;
}

/// "a number from MIN to MAX" for an integer T, "a number" otherwise: what an error says a field must be.
template <class T>
std::string number_range() {
  if constexpr (std::is_integral_v<T>)
    return "a number from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
           std::to_string(std::numeric_limits<T>::max());
  else
    return "a number";
}

/// The number field `key` of object j; `fallback` when it is absent or null.
/// Throws Error(code) naming the field when it is there but T cannot hold it.
template <class T>
T number_field(const nlohmann::json& j, const char* key, T fallback, Errc code = Errc::invalid_argument) {
  if (!j.is_object()) throw Error(code, std::string("a JSON object with field '") + key + "' was expected");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (auto n = json_number<T>(*it)) return *n;
  throw Error(code, std::string("field '") + key + "' must be " + number_range<T>());
}

}  // namespace sbx
