// Pieces of the manager's wire format shared inside the remote driver's
// implementation (core/remote_backend.cpp, core/remote_wire.cpp).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace sbx {

/// The string field `key` of a JSON object, or "" when absent or not a string.
std::string str_field(const nlohmann::json& j, const char* key);

}  // namespace sbx
