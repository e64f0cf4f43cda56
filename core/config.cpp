#include "core/config.hpp"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "core/config_internal.hpp"
#include "core/error.hpp"
#include "core/netaddr.hpp"
#include "core/fsutil.hpp"
#include "core/spec.hpp"
#include "core/units.hpp"

extern char** environ;

namespace sbx {

// The helpers config_server.cpp shares (config_internal.hpp) are defined here too.
namespace config_detail {

constexpr const char* kSystemConfig = "/etc/sbx/config.yaml";
constexpr uint64_t kMiB = 1024 * 1024;
// Each sandbox takes a range of this many host ids starting at uid_base.
constexpr uint64_t kIdsPerRange = 65536;

const std::vector<std::string> kTopKeys = {
    "use_remote_sandbox", "remote_sandbox_backend", "local_sandbox_backend", "sandbox_manager_url",
    "admin_api_key",      "admin_api_key_file",     "state_dir",             "uid_base",
    "cp_max_size",        "defaults",               "server",                "pool",
    "network",            "images",                 "on_paused"};
const std::vector<std::string> kDefaultsKeys = {"memory", "pids", "cpus", "disk",
                                                "network", "idle_timeout", "ttl", "image"};
const std::vector<std::string> kImagesKeys = {"dir", "apt_cache"};
const std::vector<std::string> kNetworkKeys = {"pool", "dns"};

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

bool has_control_char(std::string_view s) {
  for (char c : s)
    if (std::iscntrl(static_cast<unsigned char>(c))) return true;
  return false;
}

Error yaml_error(const std::string& file, const YAML::Exception& e) {
  std::string where = file;
  if (!e.mark.is_null())
    where += " line " + std::to_string(e.mark.line + 1) + " column " + std::to_string(e.mark.column + 1);
  return Error(Errc::invalid_argument, "invalid YAML in " + where + ": " + e.msg)
      .set_hint("fix the YAML syntax of " + file);
}

// A mapping of free-form names to scalars (pool sizes, server.images) as `what.NAME` values.
void collect_mapping(const YAML::Node& node, const std::string& what, const std::string& shape, const std::string& at,
                     const std::string& file, FileValues& out, std::set<std::string>& seen) {
  if (node.IsNull()) return;
  if (!node.IsMap()) throw Error(Errc::invalid_argument, "'" + what + "' in " + at + " must be a mapping of " + shape);
  for (const auto& d : node) {
    if (!d.first.IsScalar() || !d.second.IsScalar())
      throw Error(Errc::invalid_argument, "an entry of '" + what + "' in " + file + " line " +
                                              std::to_string(d.first.Mark().line + 1) + " is not `" + shape + "`");
    if (!seen.insert(what + "." + d.first.Scalar()).second)
      throw Error(Errc::invalid_argument, "'" + d.first.Scalar() + "' appears twice under " + what + " in " + file);
    out[what + "." + d.first.Scalar()] = FileValue{d.second.Scalar(), d.first.Mark().line + 1};
  }
}

void collect(const YAML::Node& map, const std::string& prefix, const std::vector<std::string>& allowed,
             const std::string& file, FileValues& out, std::set<std::string>& seen) {
  for (const auto& kv : map) {
    const int line = kv.first.Mark().line + 1;
    const std::string at = file + " line " + std::to_string(line);
    if (!kv.first.IsScalar())
      throw Error(Errc::invalid_argument, "a key in " + at + " is not a plain name");
    const std::string key = prefix + kv.first.Scalar();
    bool known = false;
    for (const auto& a : allowed) known = known || prefix + a == key;
    if (!known)
      throw Error(Errc::invalid_argument, "unknown key '" + key + "' in " + at + " (accepted" +
                                              (prefix.empty() ? "" : " under " + prefix.substr(0, prefix.size() - 1)) + ": " +
                                              join(allowed) + ")")
          .set_hint("check the spelling against docs/cli.md; a mistyped key is never silently ignored");
    // yaml-cpp keeps both copies of a repeated key; which one wins would be an accident.
    if (!seen.insert(key).second)
      throw Error(Errc::invalid_argument, "key '" + key + "' appears twice in " + file + " (line " +
                                              std::to_string(line) + ")");
    if (key == "defaults" || key == "server" || key == "network" || key == "images" || key == "server.fleet") {
      if (kv.second.IsNull()) continue;
      if (!kv.second.IsMap())
        throw Error(Errc::invalid_argument, "'" + key + "' in " + at + " must be a mapping of keys");
      collect(kv.second, key + ".",
              key == "server"    ? kServerKeys
              : key == "server.fleet" ? kFleetKeys
              : key == "network" ? kNetworkKeys
              : key == "images"  ? kImagesKeys
                                 : kDefaultsKeys,
              file, out, seen);
      continue;
    }
    if (key == "pool") {
      // Keys are driver names, which only the driver table knows: checked when the pool is used.
      collect_mapping(kv.second, "pool", "driver: size", at, file, out, seen);
      continue;
    }
    if (key == "server.images") {
      // name: directory. Over the API an image is one of these names, never a host path.
      collect_mapping(kv.second, "server.images", "name: directory", at, file, out, seen);
      continue;
    }
    if (key == "server.api_keys") {
      collect_api_keys(kv.second, at, file, out);
      continue;
    }
    if (kv.second.IsNull()) throw Error(Errc::invalid_argument, "key '" + key + "' in " + at + " has no value");
    if (!kv.second.IsScalar())
      throw Error(Errc::invalid_argument, "key '" + key + "' in " + at + " must be a single value");
    out[key] = FileValue{kv.second.Scalar(), line};
  }
}

FileValues parse_yaml(const std::string& text, const std::string& file) {
  FileValues out;
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) return out;  // an empty or all-comment file sets nothing
    if (!root.IsMap())
      throw Error(Errc::invalid_argument, file + " must be a mapping of settings (key: value)");
    std::set<std::string> seen;
    collect(root, "", kTopKeys, file, out, seen);
  } catch (const YAML::Exception& e) {
    throw yaml_error(file, e);
  }
  return out;
}

Error bad_choice(const Setting& s, std::string_view what, const std::vector<std::string>& accepted) {
  return Error(Errc::invalid_argument, s.label + ": unknown " + std::string(what) + " '" + s.text +
                                           "' (accepted: " + join(accepted) + ")")
      .set_hint("set " + s.label + " to one of: " + join(accepted));
}

std::string choose(const Setting& s, std::string_view what, const std::vector<std::string>& accepted) {
  std::string v = lower(s.text);
  for (const auto& a : accepted)
    if (v == a) return v;
  throw bad_choice(s, what, accepted);
}

uint64_t parse_uint(const Setting& s) {
  uint64_t v = 0;
  const char* end = s.text.data() + s.text.size();
  auto [p, ec] = std::from_chars(s.text.data(), end, v);
  if (ec != std::errc() || p != end || s.text.empty())
    throw Error(Errc::invalid_argument, s.label + ": '" + s.text + "' is not a whole number");
  return v;
}

// Rounds up: a nonzero size below 1 MiB must not turn into 0, which means "no limit".
uint64_t size_mib(const Setting& s) {
  uint64_t bytes = with_context(s.label, [&] { return parse_size(s.text); });
  return bytes / kMiB + (bytes % kMiB != 0);
}

// Rounds up for the same reason: "500ms" must not become 0 = "never".
uint64_t duration_s(const Setting& s) {
  uint64_t ms = with_context(s.label, [&] { return parse_duration_ms(s.text); });
  return ms / 1000 + (ms % 1000 != 0);
}

std::string manager_url(const Setting& s) {
  std::string url = s.text;
  while (!url.empty() && url.back() == '/') url.pop_back();
  std::string l = lower(url);
  size_t scheme = l.rfind("https://", 0) == 0 ? 8 : l.rfind("http://", 0) == 0 ? 7 : 0;
  bool blank = url.find(' ') != std::string::npos || has_control_char(url);
  if (scheme == 0 || url.size() == scheme || blank)
    throw Error(Errc::invalid_argument, s.label + ": '" + s.text + "' is not an http:// or https:// URL")
        .set_hint("set it like https://sbx-manager.internal:8000");
  return url;
}

void set_api_key(Config& c, const Resolver& r) {
  if (const auto* v = r.env("ADMIN_API_KEY")) {
    c.api_key = *v;
    c.origin["admin_api_key"] = "env ADMIN_API_KEY";
  } else {
    auto inline_key = r.from_file("admin_api_key");
    auto key_file = r.from_file("admin_api_key_file");
    if (inline_key && key_file)
      throw Error(Errc::invalid_argument, "both admin_api_key and admin_api_key_file are set in " + r.file_name())
          .set_hint("keep only one of them (admin_api_key_file keeps the key out of the config file)");
    if (inline_key) {
      c.api_key = inline_key->text;
      c.origin["admin_api_key"] = inline_key->origin;
    } else if (key_file) {
      std::string path = key_file->text;
      if (path.empty()) throw Error(Errc::invalid_argument, key_file->label + ": empty file name");
      // A relative key file sits next to the config file, not wherever sbx was started from.
      auto slash = r.file_name().rfind('/');
      if (path[0] != '/' && slash != std::string::npos) path = r.file_name().substr(0, slash + 1) + path;
      auto text = with_context(key_file->label, [&] { return read_file_if_exists(path); });
      if (!text)
        throw Error(Errc::not_found, key_file->label + ": key file " + path + " does not exist")
            .set_hint("create it with the key on one line (mode 600), or set ADMIN_API_KEY");
      while (!text->empty() && std::isspace(static_cast<unsigned char>(text->back()))) text->pop_back();
      if (text->empty())
        throw Error(Errc::invalid_argument, key_file->label + ": key file " + path + " is empty");
      c.api_key = std::move(*text);
      c.origin["admin_api_key"] = key_file->origin;
    }
  }
  // The key goes into an X-API-Key header, where a newline would split the request.
  // The message must never quote the key itself.
  if (has_control_char(c.api_key))
    throw Error(Errc::invalid_argument, "the admin API key (from " + c.origin["admin_api_key"] +
                                            ") contains a control character or line break")
        .set_hint("the key must be a single line of printable characters");
}

std::string state_dir(const ConfigInputs& in, const Resolver& r, std::string& origin) {
  std::optional<Setting> s;
  if (in.state_dir_flag) s = Setting{*in.state_dir_flag, "flag --state-dir", "--state-dir"};
  else s = r.pick("SBX_STATE_DIR", "state_dir");
  std::string dir;
  if (s) {
    dir = s->text;
    origin = s->origin;
    if (dir.empty() || dir[0] != '/')
      throw Error(Errc::invalid_argument, s->label + ": state directory '" + dir + "' is not an absolute path")
          .set_hint("give a path starting with /, e.g. /var/lib/sbx");
  } else if (in.is_root) {
    dir = "/var/lib/sbx";
  } else {
    if (in.home.empty() || in.home[0] != '/')
      throw Error(Errc::invalid_argument, "cannot pick a state directory: $HOME is not an absolute path")
          .set_hint("set SBX_STATE_DIR or pass --state-dir");
    dir = in.home + "/.local/state/sbx";
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

void set_defaults(Config& c, const Resolver& r) {
  auto apply = [&](const std::string& key, auto&& set) {
    if (auto s = r.from_file(key)) {
      set(*s);
      c.origin[key] = s->origin;
    }
  };
  apply("defaults.memory", [&](const Setting& s) { c.default_limits.memory_mb = size_mib(s); });
  apply("defaults.disk", [&](const Setting& s) { c.default_limits.disk_mb = size_mib(s); });
  apply("defaults.pids", [&](const Setting& s) { c.default_limits.pids = parse_uint(s); });
  apply("defaults.cpus", [&](const Setting& s) {
    double v = 0;
    const char* end = s.text.data() + s.text.size();
    auto [p, ec] = std::from_chars(s.text.data(), end, v);
    // from_chars accepts "inf" and "nan", which are no CPU count.
    if (ec != std::errc() || p != end || !std::isfinite(v) || v < 0)
      throw Error(Errc::invalid_argument, s.label + ": '" + s.text + "' is not a CPU count")
          .set_hint("use a number of cores such as 0.5, 1 or 2 (0 = no limit)");
    c.default_limits.cpus = v;
  });
  apply("defaults.network",
        [&](const Setting& s) { c.default_network = choose(s, "network mode", {"none", "jail"}); });
  apply("defaults.idle_timeout", [&](const Setting& s) { c.default_idle_timeout_s = duration_s(s); });
  apply("defaults.ttl", [&](const Setting& s) { c.default_ttl_s = duration_s(s); });
  apply("defaults.image", [&](const Setting& s) {
    // A name (or "host"); a path here would bypass the store and the API's rule that images are names.
    if (s.text.empty() || s.text.find('/') != std::string::npos)
      throw Error(Errc::invalid_argument, s.label + ": '" + s.text + "' is not an image name")
          .set_hint("name an image of `sbx image ls`, or host for the host view");
    c.default_image = s.text;
  });
}

// Where images and the .debs they are built from live: shared by every state
// root of the host (test roots too), so one `sbx image build` serves them all.
void set_image_dirs(Config& c, const ConfigInputs& in, const Resolver& r) {
  auto absolute = [](const Setting& s) {
    if (s.text.empty() || s.text.front() != '/')
      throw Error(Errc::invalid_argument, s.label + ": '" + s.text + "' is not an absolute path")
          .set_hint("give a path starting with /");
    std::string d = s.text;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    return d;
  };
  bool home_ok = !in.home.empty() && in.home[0] == '/';
  c.origin["images.dir"] = c.origin["images.apt_cache"] = "default";
  if (auto s = r.pick("SBX_IMAGES_DIR", "images.dir")) {
    c.images_dir = absolute(*s);
    c.origin["images.dir"] = s->origin;
  } else {
    c.images_dir = in.is_root || !home_ok ? "/var/lib/sbx/images" : in.home + "/.local/share/sbx/images";
  }
  if (auto s = r.from_file("images.apt_cache")) {
    c.apt_cache_dir = absolute(*s);
    c.origin["images.apt_cache"] = s->origin;
  } else {
    c.apt_cache_dir = in.is_root || !home_ok ? "/var/cache/sbx/apt" : in.home + "/.cache/sbx/apt";
  }
}

// The warm pool's sizes: SBX_POOL replaces the file's whole `pool:` mapping.
void set_pool(Config& c, const Resolver& r, const std::vector<std::string>& file_keys) {
  constexpr uint64_t kMaxPoolSize = 64;
  // A key is a driver's name, or snapshot:NAME (sandboxes started on a snapshot's files).
  auto add = [&](const std::string& driver, const Setting& s) {
    bool name_ok = !driver.empty();
    if (driver.rfind(kSnapshotPoolPrefix, 0) == 0) {
      name_ok = valid_sandbox_name(std::string_view(driver).substr(kSnapshotPoolPrefix.size()));
    } else {
      for (char ch : driver) name_ok = name_ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_');
    }
    if (!name_ok)
      throw Error(Errc::invalid_argument, s.label + ": '" + driver + "' is neither a driver name nor snapshot:NAME")
          .set_hint("write KEY=SIZE pairs separated by commas, e.g. subprocess=2,deno=1,snapshot:web=1");
    uint64_t n = parse_uint(s);
    if (n > kMaxPoolSize)
      throw Error(Errc::invalid_argument, s.label + ": a pool of " + s.text + " is more than " +
                                              std::to_string(kMaxPoolSize) + " sandboxes")
          .set_hint("pooled sandboxes hold memory and uid ranges; keep the pool small");
    c.pool_sizes[driver] = n;
  };
  c.origin["pool"] = "default";
  if (const auto* v = r.env("SBX_POOL")) {
    c.origin["pool"] = "env SBX_POOL";
    std::string t = *v;
    for (size_t pos = 0; pos <= t.size();) {
      size_t comma = std::min(t.find(',', pos), t.size());
      std::string item;
      for (char ch : t.substr(pos, comma - pos))
        if (!std::isspace(static_cast<unsigned char>(ch))) item += ch;
      pos = comma + 1;
      if (item.empty()) continue;
      auto eq = item.find('=');
      if (eq == std::string::npos)
        throw Error(Errc::invalid_argument, "SBX_POOL: '" + item + "' is not DRIVER=SIZE")
            .set_hint("e.g. SBX_POOL=subprocess=2,deno=1");
      add(item.substr(0, eq), Setting{item.substr(eq + 1), "env SBX_POOL", "SBX_POOL (" + item.substr(0, eq) + ")"});
    }
    return;
  }
  for (auto& k : file_keys) {
    if (k.rfind("pool.", 0) != 0) continue;
    auto s = r.from_file(k);
    add(k.substr(5), *s);
    c.origin["pool"] = s->origin;
  }
}

// The network jail's address pool and DNS upstream (network.pool / SBX_NET_POOL, network.dns / SBX_NET_DNS).
void set_network(Config& c, const Resolver& r) {
  if (auto s = r.pick("SBX_NET_POOL", "network.pool")) {
    auto p = parse_cidr4(s->text);
    if (!p || p->prefix > 30 || p->prefix < 8)
      throw Error(Errc::invalid_argument, s->label + ": '" + s->text + "' is not an IPv4 network between /8 and /30")
          .set_hint("use a range no host route or address uses, e.g. 10.213.0.0/16 (check `ip route`)");
    c.net_pool = p->str();
    c.origin["network.pool"] = s->origin;
  }
  if (auto s = r.pick("SBX_NET_DNS", "network.dns")) {
    if (!parse_ipv4(s->text))
      throw Error(Errc::invalid_argument, s->label + ": '" + s->text + "' is not an IPv4 address")
          .set_hint("name the resolver jailed sandboxes' DNS is forwarded to, e.g. 192.0.2.53");
    c.net_dns = s->text;
    c.origin["network.dns"] = s->origin;
  }
}

Config resolve(const ConfigInputs& in, const std::string* yaml_text, const std::string& file_name) {
  FileValues file;
  if (yaml_text) file = parse_yaml(*yaml_text, file_name);
  std::vector<std::string> file_keys;
  for (auto& [k, v] : file) file_keys.push_back(k);
  Resolver r(in, std::move(file), file_name);

  Config c;
  c.config_file = yaml_text ? file_name : std::string();
  for (const char* k : {"use_remote_sandbox", "remote_sandbox_backend", "local_sandbox_backend",
                        "sandbox_manager_url", "admin_api_key", "state_dir", "driver", "config_file",
                        "uid_base", "cp_max_size", "on_paused", "defaults.memory", "defaults.pids", "defaults.cpus",
                        "defaults.disk", "defaults.network", "defaults.idle_timeout", "defaults.ttl", "defaults.image", "network.pool",
                        "network.dns"})
    c.origin[k] = "default";

  if (auto s = r.pick("USE_REMOTE_SANDBOX", "use_remote_sandbox")) {
    c.use_remote = parse_bool(s->text, s->label);
    c.origin["use_remote_sandbox"] = s->origin;
  }

  std::optional<Setting> remote;
  const auto* alias = r.env("SANDBOX_BACKEND");
  if (r.env("REMOTE_SANDBOX_BACKEND")) {
    remote = r.pick("REMOTE_SANDBOX_BACKEND", "remote_sandbox_backend");
    if (alias)
      c.warnings.push_back("SANDBOX_BACKEND was ignored because REMOTE_SANDBOX_BACKEND is set "
                           "(SANDBOX_BACKEND is deprecated; use REMOTE_SANDBOX_BACKEND)");
  } else if (alias) {
    remote = Setting{*alias, "env SANDBOX_BACKEND", "SANDBOX_BACKEND"};
    c.warnings.push_back("SANDBOX_BACKEND is deprecated; use REMOTE_SANDBOX_BACKEND");
  } else {
    remote = r.from_file("remote_sandbox_backend");
  }
  if (remote) {
    // auto and deno are legacy names that all mean the one remote manager.
    choose(*remote, "remote sandbox backend", {"syd", "auto", "deno"});
    c.remote_backend = "syd";
    c.origin["remote_sandbox_backend"] = remote->origin;
  }

  if (auto s = r.pick("LOCAL_SANDBOX_BACKEND", "local_sandbox_backend")) {
    c.local_backend = choose(*s, "local sandbox backend", {"deno", "subprocess", "none"});
    c.origin["local_sandbox_backend"] = s->origin;
  }

  if (auto s = r.pick("SANDBOX_MANAGER_URL", "sandbox_manager_url")) {
    c.manager_url = manager_url(*s);
    c.origin["sandbox_manager_url"] = s->origin;
  }

  set_api_key(c, r);
  c.state_dir = state_dir(in, r, c.origin["state_dir"]);

  if (in.driver_flag) {
    c.driver_override = *in.driver_flag;
    c.origin["driver"] = "flag --driver";
  }

  if (auto s = r.from_file("uid_base")) {
    uint64_t v = parse_uint(*s);
    // Below 65536 the ranges would overlap root and ordinary host accounts; at the top
    // at least one full range must fit under the invalid id 2^32-1.
    if (v < kIdsPerRange || v > (uint64_t{1} << 32) - 1 - kIdsPerRange)
      throw Error(Errc::invalid_argument, s->label + ": " + s->text + " is out of range")
          .set_hint("use a value between 65536 and 4294901759, e.g. 1073741824");
    c.uid_base = static_cast<uint32_t>(v);
    c.origin["uid_base"] = s->origin;
  }
  if (auto s = r.from_file("cp_max_size")) {
    c.cp_max_bytes = with_context(s->label, [&] { return parse_size(s->text); });
    c.origin["cp_max_size"] = s->origin;
  }
  if (auto s = r.from_file("on_paused")) {
    c.refuse_paused = choose(*s, "use of a paused sandbox", {"resume", "refuse"}) == "refuse";
    c.origin["on_paused"] = s->origin;
  }
  set_defaults(c, r);
  set_image_dirs(c, in, r);
  set_server(c, in, r, file_keys);
  set_pool(c, r, file_keys);
  set_network(c, r);
  return c;
}

}  // namespace config_detail

using namespace config_detail;

bool parse_bool(std::string_view value, std::string_view name) {
  std::string v = lower(value);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  throw Error(Errc::invalid_argument, std::string(name) + ": '" + std::string(value) + "' is not a boolean")
      .set_hint("use one of true/false, 1/0, yes/no, on/off (any case)");
}

Config resolve_config_text(const ConfigInputs& in, const std::string& yaml_text, const std::string& file_name) {
  return resolve(in, yaml_text.empty() ? nullptr : &yaml_text, file_name);
}

Config resolve_config(const ConfigInputs& in) {
  std::string path;
  std::string origin = "default";
  if (in.config_flag) {
    path = *in.config_flag;
    origin = "flag --config";
  } else if (auto it = in.env.find("SBX_CONFIG"); it != in.env.end() && !it->second.empty()) {
    path = it->second;
    origin = "env SBX_CONFIG";
  } else {
    path = kSystemConfig;
  }
  if (path.empty())
    throw Error(Errc::invalid_argument, "--config: empty file name").set_hint("give the path of a YAML file");
  auto text = with_context("reading config file", [&] { return read_file_if_exists(path); });
  if (!text) {
    // Only the implicit system file may be absent; a named one missing is a mistake.
    if (origin == "default") return resolve(in, nullptr, "");
    const std::string source = origin == "flag --config" ? "--config" : "SBX_CONFIG";
    throw Error(Errc::not_found, "config file " + path + " (from " + source + ") does not exist")
        .set_hint(origin == "flag --config"
                      ? "check the path given to --config, or drop --config to use " + std::string(kSystemConfig)
                      : "check SBX_CONFIG, or unset it to use " + std::string(kSystemConfig));
  }
  Config c = resolve(in, &*text, path);
  c.origin["config_file"] = origin;
  return c;
}

ConfigInputs inputs_from_process() {
  ConfigInputs in;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    in.env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  in.is_root = ::geteuid() == 0;
  if (const char* h = std::getenv("HOME")) in.home = h;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) in.hostname = host;
  return in;
}

}  // namespace sbx
