// One resolved configuration: flags > environment > YAML file > defaults.
// The environment variables and defaults of the operator guide
// (USE_REMOTE_SANDBOX, REMOTE_SANDBOX_BACKEND, SANDBOX_BACKEND,
// LOCAL_SANDBOX_BACKEND, SANDBOX_MANAGER_URL, ADMIN_API_KEY) are a contract.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/spec.hpp"

namespace sbx {

/// An extra API key of the manager, from the config file's server.api_keys.
struct ApiKeyConfig {
  std::string name;                      ///< shown in logs instead of the key
  std::string key;                       ///< never printed or logged
  std::vector<std::string> permissions;  ///< sandboxes:read | sandboxes:write | sandboxes:run
};

/// Many managers, each owning the sandboxes it created (docs/fleet.md): this
/// manager's ordinal and how to reach a peer by its ordinal. Off (size 0) by
/// default: a lone manager behaves as if there were no fleet.
struct FleetConfig {
  int size = 0;          ///< server.fleet.size / SBX_FLEET_SIZE: how many managers (ordinals 0..size-1)
  int self = -1;         ///< server.fleet.self / SBX_FLEET_SELF; default: the hostname's trailing number (sbx-2: 2)
  std::string peer_url;  ///< server.fleet.peer_url / SBX_FLEET_PEER_URL: "http://sbx-{n}.sbx-headless:8000"
  bool enabled() const { return size > 0; }
  /// peer_url with {n} replaced by `ordinal`.
  std::string url_of(int ordinal) const;
};

/// Settings of `sbx serve` (config file section `server:`; flags override).
struct ServerConfig {
  std::string listen;                    ///< HOST:PORT; empty = 0.0.0.0:8000 (8400 for microvm)
  std::string tls_cert, tls_key;         ///< PEM files; both or neither
  std::string log_format = "plain";      ///< plain | json
  std::vector<ApiKeyConfig> api_keys;
  int max_sandboxes_per_key = 64;
  int max_execs_per_key = 32;
  uint64_t reap_interval_s = 5;          ///< how often the idle reaper runs
  uint64_t drain_timeout_s = 30;         ///< SIGTERM: how long in-flight work may finish
  /// The network of sandboxes created through the API that do not say: the
  /// guide's "network-jailed, NAT out" (drivers without a jail get none).
  std::string default_network = "jail";
  std::map<std::string, std::string> images;  ///< server.images: name -> root directory (the API names images, never host paths)
  FleetConfig fleet;
};

/// A pool key's start for sandboxes started on a snapshot's files
/// ("snapshot:NAME", served to `create --from NAME`); any other key is a driver.
inline constexpr std::string_view kSnapshotPoolPrefix = "snapshot:";

struct Config {
  bool use_remote = true;                 ///< USE_REMOTE_SANDBOX, default true
  std::string remote_backend = "syd";     ///< REMOTE_SANDBOX_BACKEND after normalisation: always "syd"
  std::string local_backend = "deno";     ///< LOCAL_SANDBOX_BACKEND: deno | subprocess | none
  std::string manager_url;                ///< SANDBOX_MANAGER_URL, empty when unset
  std::string api_key;                    ///< ADMIN_API_KEY; never printed or logged
  std::string state_dir;                  ///< --state-dir > SBX_STATE_DIR > file > /var/lib/sbx (root) or ~/.local/state/sbx
  std::string config_file;                ///< the YAML file that was read, or empty
  std::string driver_override;            ///< --driver for this call, or empty

  // Defaults for new sandboxes (overridden per call by flags).
  Limits default_limits{1.0, 512, 256, 1024};
  uint64_t default_idle_timeout_s = 600;  ///< ephemeral sandboxes idle this long are collected
  uint64_t default_ttl_s = 0;             ///< 0 = no TTL
  std::string default_network = "none";
  /// defaults.image: the image of sandboxes that name none ("host" = the host view).
  /// The built-in "default" not being built means the host view; doctor says so.
  std::string default_image = "default";
  std::string images_dir;                 ///< SBX_IMAGES_DIR > images.dir > /var/lib/sbx/images (root) or ~/.local/share/sbx/images
  std::string apt_cache_dir;              ///< images.apt_cache > /var/cache/sbx/apt (root) or ~/.cache/sbx/apt: .debs kept between builds
  std::string net_pool = "10.213.0.0/16"; ///< network.pool / SBX_NET_POOL: where jails' /30 links come from
  std::string net_dns;                    ///< network.dns / SBX_NET_DNS: jails' DNS upstream; empty = the host's first

  uint32_t uid_base = 1u << 30;           ///< first host uid of sandbox id ranges (65536 ids each)
  uint64_t cp_max_bytes = 1ull << 30;     ///< cap on one `sbx cp` transfer
  /// on_paused: refuse: an exec, cp, process call or port-forward on a paused
  /// sandbox fails (conflict, 409) instead of resuming it first.
  bool refuse_paused = false;

  ServerConfig server;                    ///< sbx serve's settings

  /// Warm pool: how many started, unclaimed sandboxes to keep per key
  /// (config `pool: {subprocess: 2}`, env SBX_POOL="subprocess=2,deno=1"); absent = 0.
  /// A key is a driver's name, or kSnapshotPoolPrefix + a snapshot's name.
  std::map<std::string, uint64_t> pool_sizes;

  /// Where each setting came from ("default", "env USE_REMOTE_SANDBOX", "file /etc/sbx/config.yaml",
  /// "flag --driver"), keyed by the setting's name; doctor prints it.
  std::map<std::string, std::string> origin;
  /// Non-fatal notes for the user (deprecated alias used, ...), printed once on stderr.
  std::vector<std::string> warnings;
};

/// Everything resolution reads, so tests can pass it in without touching the process.
struct ConfigInputs {
  std::map<std::string, std::string> env;     ///< the environment
  std::optional<std::string> config_flag;     ///< --config
  std::optional<std::string> state_dir_flag;  ///< --state-dir
  std::optional<std::string> driver_flag;     ///< --driver
  bool is_root = true;                        ///< picks the default state root
  std::string home;                           ///< $HOME, for the non-root default state root
  std::string hostname;                       ///< gethostname(): a StatefulSet pod's (sbx-2) gives the fleet ordinal
};

/// Resolves from inputs, reading the YAML file named by --config, $SBX_CONFIG,
/// or /etc/sbx/config.yaml (the last only if it exists). Throws invalid_argument
/// naming the bad value and the accepted ones.
Config resolve_config(const ConfigInputs& in);
/// Same, with the YAML text given (empty = no file); `file_name` is used in messages.
Config resolve_config_text(const ConfigInputs& in, const std::string& yaml_text, const std::string& file_name);
/// The inputs of this process (environ, geteuid, $HOME), plus the flags.
ConfigInputs inputs_from_process();

/// Parses a boolean the way the guide's variables accept it: true/false, 1/0, yes/no, on/off.
bool parse_bool(std::string_view value, std::string_view name);

}  // namespace sbx
