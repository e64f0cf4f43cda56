#include "core/driver.hpp"

namespace sbx {

const DriverInfo* find_driver(const DriverTable& table, std::string_view name) {
  for (auto& d : table)
    if (d.name == name) return &d;
  return nullptr;
}

std::string sandbox_process_title(const SandboxRecord& rec) { return "sbx-sandbox " + rec.id + " " + rec.spec.driver; }

std::string driver_names(const DriverTable& table) {
  std::string out;
  for (auto& d : table) out += (out.empty() ? "" : ", ") + d.name;
  return out;
}

}  // namespace sbx
