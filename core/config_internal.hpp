// What core/config.cpp and core/config_server.cpp (the `server:` section) share;
// not for anyone else.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/config.hpp"

namespace sbx::config_detail {

// A scalar from the YAML file, with the line it was on for messages.
struct FileValue {
  std::string text;
  int line = 0;
};
using FileValues = std::map<std::string, FileValue>;  // "state_dir", "defaults.memory", ...

// One chosen value: the text, where it came from, and how to name it in an error.
struct Setting {
  std::string text;
  std::string origin;
  std::string label;
};

class Resolver {
 public:
  Resolver(const ConfigInputs& in, FileValues file, std::string file_name)
      : in_(in), file_(std::move(file)), file_name_(std::move(file_name)) {}

  // Empty variables count as unset: compose files and wrappers write `VAR=` to mean "not set".
  const std::string* env(const std::string& name) const {
    auto it = in_.env.find(name);
    return it == in_.env.end() || it->second.empty() ? nullptr : &it->second;
  }

  std::optional<Setting> from_file(const std::string& key) const {
    auto it = file_.find(key);
    if (it == file_.end()) return std::nullopt;
    return Setting{it->second.text, "file " + file_name_,
                   key + " in " + file_name_ + " line " + std::to_string(it->second.line)};
  }

  std::optional<Setting> pick(const std::string& env_name, const std::string& key) const {
    if (const auto* v = env(env_name)) return Setting{*v, "env " + env_name, env_name};
    return from_file(key);
  }

  const std::string& file_name() const { return file_name_; }

 private:
  const ConfigInputs& in_;
  FileValues file_;
  std::string file_name_;
};

std::string join(const std::vector<std::string>& items);
bool has_control_char(std::string_view s);
/// s.text lowered, when it is one of `accepted`; else an error naming them.
std::string choose(const Setting& s, std::string_view what, const std::vector<std::string>& accepted);
uint64_t parse_uint(const Setting& s);
/// A duration in whole seconds, rounded up.
uint64_t duration_s(const Setting& s);

/// The keys accepted under `server:` and `server.fleet:`.
extern const std::vector<std::string> kServerKeys;
extern const std::vector<std::string> kFleetKeys;
/// server.api_keys (a YAML list) as server.api_keys.N.FIELD values.
void collect_api_keys(const YAML::Node& list, const std::string& at, const std::string& file, FileValues& out);
/// The `server:` section (scalars, api_keys, images, fleet) into c.server.
void set_server(Config& c, const ConfigInputs& in, const Resolver& r, const std::vector<std::string>& file_keys);

}  // namespace sbx::config_detail
