// A sandbox id remembers where it lives: sandboxes created on a manager are
// recorded on this host, so later calls (`sbx exec ID`, `sbx rm ID`) reach
// the same manager even when the fallback chain would now pick another backend.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sbx {

/// Records that sandbox `id` lives at the manager `url` (and is called `name`,
/// when given: the latest sandbox created with a name keeps it here);
/// throws invalid_argument for a malformed id.
void remember_remote(const std::string& state_dir, const std::string& id, const std::string& url,
                     const std::string& name = "");
/// The id of the remembered remote sandbox called `name`, or nullopt.
std::optional<std::string> remote_named(const std::string& state_dir, const std::string& name);
/// The manager URL of sandbox `id`, or nullopt when it is not a remembered remote sandbox.
std::optional<std::string> remote_location(const std::string& state_dir, const std::string& id);
/// Drops the record of `id` (nothing happens when there is none).
void forget_remote(const std::string& state_dir, const std::string& id);
/// Every remembered (id, url), sorted by id.
std::vector<std::pair<std::string, std::string>> remote_sandboxes(const std::string& state_dir);

}  // namespace sbx
