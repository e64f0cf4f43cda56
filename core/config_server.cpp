// The `server:` section of the config file: sbx serve's settings, its extra API
// keys, the images its API may name, and the fleet (many managers, docs/fleet.md).
#include <cctype>

#include "core/config_internal.hpp"
#include "core/error.hpp"
#include "core/fsutil.hpp"
#include "core/spec.hpp"

namespace sbx {

std::string FleetConfig::url_of(int ordinal) const {
  std::string url = peer_url;
  if (auto at = url.find("{n}"); at != std::string::npos) url.replace(at, 3, std::to_string(ordinal));
  return url;
}

}  // namespace sbx

namespace sbx::config_detail {

const std::vector<std::string> kServerKeys = {"listen",  "tls_cert", "tls_key", "log_format",
                                              "api_keys", "max_sandboxes_per_key", "max_execs_per_key",
                                              "reap_interval", "drain_timeout", "default_network", "images", "fleet"};
const std::vector<std::string> kFleetKeys = {"size", "self", "peer_url"};

namespace {

const std::vector<std::string> kApiKeyKeys = {"name", "key", "key_file", "permissions"};

// The server section: scalars, then the api_keys entries (numbered by parse order).
void set_server_scalars(Config& c, const Resolver& r) {
  auto& sv = c.server;
  if (auto s = r.from_file("server.listen")) sv.listen = s->text;
  if (auto s = r.from_file("server.tls_cert")) sv.tls_cert = s->text;
  if (auto s = r.from_file("server.tls_key")) sv.tls_key = s->text;
  if (auto s = r.from_file("server.log_format")) sv.log_format = choose(*s, "log format", {"plain", "json"});
  if (auto s = r.from_file("server.max_sandboxes_per_key")) sv.max_sandboxes_per_key = static_cast<int>(parse_uint(*s));
  if (auto s = r.from_file("server.max_execs_per_key")) sv.max_execs_per_key = static_cast<int>(parse_uint(*s));
  if (auto s = r.from_file("server.reap_interval")) sv.reap_interval_s = std::max<uint64_t>(1, duration_s(*s));
  if (auto s = r.from_file("server.drain_timeout")) sv.drain_timeout_s = duration_s(*s);
  if (auto s = r.from_file("server.default_network"))
    sv.default_network = choose(*s, "network mode", {"none", "jail"});
  for (int i = 0;; ++i) {
    std::string p = "server.api_keys." + std::to_string(i) + ".";
    auto name = r.from_file(p + "name");
    auto key = r.from_file(p + "key");
    auto key_file = r.from_file(p + "key_file");
    auto perms = r.from_file(p + "permissions");
    if (!name && !key && !key_file && !perms) break;
    std::string where = "server.api_keys entry " + std::to_string(i + 1) + " in " + r.file_name();
    if (!name || name->text.empty()) throw Error(Errc::invalid_argument, where + " has no name");
    ApiKeyConfig k;
    k.name = name->text;
    if (key && key_file) throw Error(Errc::invalid_argument, where + " sets both key and key_file");
    if (key) k.key = key->text;
    else if (key_file) {
      std::string path = key_file->text;
      auto slash = r.file_name().rfind('/');
      if (!path.empty() && path[0] != '/' && slash != std::string::npos) path = r.file_name().substr(0, slash + 1) + path;
      auto text = read_file_if_exists(path);
      if (!text) throw Error(Errc::not_found, where + ": key file " + path + " does not exist");
      while (!text->empty() && std::isspace(static_cast<unsigned char>(text->back()))) text->pop_back();
      k.key = *text;
    }
    if (k.key.empty() || has_control_char(k.key))
      throw Error(Errc::invalid_argument, where + " (" + k.name + ") has an empty or unprintable key");
    if (perms) {
      std::string t = perms->text;
      size_t pos = 0;
      while (pos <= t.size()) {
        size_t comma = t.find(',', pos);
        if (comma == std::string::npos) comma = t.size();
        std::string one = t.substr(pos, comma - pos);
        while (!one.empty() && std::isspace(static_cast<unsigned char>(one.front()))) one.erase(0, 1);
        while (!one.empty() && std::isspace(static_cast<unsigned char>(one.back()))) one.pop_back();
        if (!one.empty()) {
          if (one != "sandboxes:read" && one != "sandboxes:write" && one != "sandboxes:run" && one != "sandboxes:admin")
            throw Error(Errc::invalid_argument, where + " (" + k.name + "): unknown permission '" + one + "'")
                .set_hint("permissions: sandboxes:read, sandboxes:write, sandboxes:run, sandboxes:admin");
          k.permissions.push_back(one);
        }
        pos = comma + 1;
      }
    }
    sv.api_keys.push_back(std::move(k));
  }
}

// server.images: the images the manager's API may name, each an absolute directory.
void set_images(Config& c, const Resolver& r, const std::vector<std::string>& file_keys) {
  const std::string prefix = "server.images.";
  for (auto& k : file_keys) {
    if (k.rfind(prefix, 0) != 0) continue;
    auto s = r.from_file(k);
    if (s->text.empty() || s->text.front() != '/')
      throw Error(Errc::invalid_argument, s->label + ": '" + s->text + "' is not an absolute directory")
          .set_hint("server.images maps a name to the image's root directory, e.g. debian: /var/lib/sbx/images/debian");
    c.server.images[k.substr(prefix.size())] = s->text;
    c.origin["server.images"] = s->origin;
  }
}

// A fleet's peer URL: http://HOST[:PORT] with {n} where the ordinal goes (the
// proxy speaks plain HTTP to its peers: they are inside one cluster network).
std::string fleet_peer_url(const Setting& s) {
  std::string url = s.text;
  while (!url.empty() && url.back() == '/') url.pop_back();
  auto n = url.find("{n}");
  bool shape = url.rfind("http://", 0) == 0 && n != std::string::npos && url.find("{n}", n + 1) == std::string::npos &&
               url.find('/', 7) == std::string::npos && url.find_first_of(" ?#@") == std::string::npos && !has_control_char(url);
  if (!shape)
    throw Error(Errc::invalid_argument, s.label + ": '" + s.text + "' is not an http://HOST[:PORT] template with one {n}")
        .set_hint("set it like http://sbx-{n}.sbx-headless:8000 ({n} is a manager's ordinal; no path, no https: "
                  "managers reach each other inside the cluster)");
  return url;
}

// The trailing number of a host name: a StatefulSet pod's ordinal (sbx-2 -> 2), or -1.
int trailing_number(const std::string& host) {
  std::string name = host.substr(0, host.find('.'));
  size_t b = name.find_last_not_of("0123456789") + 1;
  if (b == name.size() || name.size() - b > 4) return -1;
  return std::stoi(name.substr(b));
}

// server.fleet: off unless a size or peer URL is given; then all three must make sense together.
void set_fleet(Config& c, const ConfigInputs& in, const Resolver& r) {
  auto size = r.pick("SBX_FLEET_SIZE", "server.fleet.size");
  auto url = r.pick("SBX_FLEET_PEER_URL", "server.fleet.peer_url");
  auto self = r.pick("SBX_FLEET_SELF", "server.fleet.self");
  c.origin["server.fleet"] = "default";
  if (!size && !url && !self) return;
  if (!size || !url)
    throw Error(Errc::invalid_argument, std::string("a fleet needs both its size and its peer URL; ") +
                                            (size ? size->label : url ? url->label : self->label) + " is set alone")
        .set_hint("set SBX_FLEET_SIZE (the StatefulSet's replicas) and SBX_FLEET_PEER_URL "
                  "(e.g. http://sbx-{n}.sbx-headless:8000), or neither for a lone manager");
  auto& f = c.server.fleet;
  uint64_t n = parse_uint(*size);
  if (n < 1 || n > kMaxFleetSize)
    throw Error(Errc::invalid_argument, size->label + ": a fleet of " + size->text + " managers")
        .set_hint("sandbox ids name their owner in 10 bits: 1 to " + std::to_string(kMaxFleetSize) + " managers");
  f.size = static_cast<int>(n);
  f.peer_url = fleet_peer_url(*url);
  if (self) {
    uint64_t v = parse_uint(*self);
    f.self = v < kMaxFleetSize ? static_cast<int>(v) : -1;
    c.origin["server.fleet.self"] = self->origin;
  } else {
    f.self = trailing_number(in.hostname);
    c.origin["server.fleet.self"] = "hostname " + in.hostname;
    if (f.self < 0)
      throw Error(Errc::invalid_argument, "cannot tell this manager's fleet ordinal: the hostname '" + in.hostname +
                                              "' does not end in a number")
          .set_hint("run the managers as a StatefulSet (pods sbx-0, sbx-1, ...), or set SBX_FLEET_SELF");
  }
  if (f.self < 0 || f.self >= f.size)
    throw Error(Errc::invalid_argument, "this manager's fleet ordinal " + (self ? self->text : std::to_string(f.self)) +
                                            " is not below the fleet size " + std::to_string(f.size))
        .set_hint("SBX_FLEET_SIZE must match the StatefulSet's replicas (ordinals 0 to size-1)");
  c.origin["server.fleet"] = size->origin;
}

}  // namespace

void collect_api_keys(const YAML::Node& list, const std::string& at, const std::string& file, FileValues& out) {
  if (!list.IsSequence())
    throw Error(Errc::invalid_argument, "'server.api_keys' in " + at + " must be a list of {name, key_file, permissions}");
  int i = 0;
  for (const auto& item : list) {
    const std::string item_at = file + " line " + std::to_string(item.Mark().line + 1);
    if (!item.IsMap()) throw Error(Errc::invalid_argument, "an entry of server.api_keys in " + item_at + " is not a mapping");
    std::string p = "server.api_keys." + std::to_string(i++) + ".";
    for (const auto& f : item) {
      std::string fk = f.first.Scalar();
      bool ok = false;
      for (const auto& a : kApiKeyKeys) ok = ok || a == fk;
      if (!ok)
        throw Error(Errc::invalid_argument, "unknown key '" + fk + "' in a server.api_keys entry in " + item_at +
                                                " (accepted: " + join(kApiKeyKeys) + ")");
      std::string text;
      if (f.second.IsSequence()) {
        for (const auto& perm : f.second) text += (text.empty() ? "" : ",") + perm.Scalar();
      } else if (f.second.IsScalar()) {
        text = f.second.Scalar();
      } else {
        throw Error(Errc::invalid_argument, "server.api_keys entry field '" + fk + "' in " + item_at + " has no value");
      }
      out[p + fk] = FileValue{text, f.first.Mark().line + 1};
    }
  }
}

void set_server(Config& c, const ConfigInputs& in, const Resolver& r, const std::vector<std::string>& file_keys) {
  set_server_scalars(c, r);
  set_images(c, r, file_keys);
  set_fleet(c, in, r);
}

}  // namespace sbx::config_detail
