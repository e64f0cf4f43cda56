#include "core/config.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/fsutil.hpp"

using sbx::Config;
using sbx::ConfigInputs;
using sbx::Errc;
using sbx::Error;

namespace {

// A private directory for YAML and key files, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = "/tmp/sbx-test-config-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { sbx::remove_tree(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& name, const std::string& text) const {
    std::string p = path + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
};

ConfigInputs inputs(std::map<std::string, std::string> env = {}) {
  ConfigInputs in;
  in.env = std::move(env);
  in.is_root = true;
  in.home = "/home/tester";
  return in;
}

Config no_file(const ConfigInputs& in) { return sbx::resolve_config_text(in, "", ""); }
Config with_yaml(const ConfigInputs& in, const std::string& yaml) {
  return sbx::resolve_config_text(in, yaml, "/etc/sbx/test.yaml");
}

// Runs f, which must throw sbx::Error, and returns that error.
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("a non-sbx exception escaped: " << e.what());
  }
  FAIL("no exception was thrown");
  return Error(Errc::internal, "unreachable");
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("config: defaults of every variable", "[config]") {
  Config c = no_file(inputs());
  CHECK(c.use_remote == true);
  CHECK(c.remote_backend == "syd");
  CHECK(c.local_backend == "deno");
  CHECK(c.manager_url.empty());
  CHECK(c.api_key.empty());
  CHECK(c.state_dir == "/var/lib/sbx");
  CHECK(c.config_file.empty());
  CHECK(c.driver_override.empty());
  CHECK(c.default_limits.memory_mb == 512);
  CHECK(c.default_limits.pids == 256);
  CHECK(c.default_limits.cpus == 1.0);
  CHECK(c.default_limits.disk_mb == 1024);
  CHECK(c.default_network == "none");
  CHECK(c.default_idle_timeout_s == 600);
  CHECK(c.default_ttl_s == 0);
  CHECK(c.warnings.empty());
  for (const char* k : {"use_remote_sandbox", "remote_sandbox_backend", "local_sandbox_backend",
                        "sandbox_manager_url", "admin_api_key", "state_dir", "driver"})
    CHECK(c.origin.at(k) == "default");
}

TEST_CASE("config: default state dir for a non-root user is under $HOME", "[config]") {
  ConfigInputs in = inputs();
  in.is_root = false;
  CHECK(no_file(in).state_dir == "/home/tester/.local/state/sbx");
  in.home.clear();
  auto e = error_of([&] { no_file(in); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.hint(), "SBX_STATE_DIR"));
}

TEST_CASE("config: empty variables count as unset", "[config]") {
  Config c = no_file(inputs({{"USE_REMOTE_SANDBOX", ""}, {"LOCAL_SANDBOX_BACKEND", ""}, {"SANDBOX_MANAGER_URL", ""}}));
  CHECK(c.use_remote);
  CHECK(c.local_backend == "deno");
  CHECK(c.manager_url.empty());
}

TEST_CASE("config: USE_REMOTE_SANDBOX accepted values", "[config]") {
  auto [text, expected] = GENERATE(table<std::string, bool>({
      {"true", true}, {"TRUE", true}, {"True", true}, {"1", true}, {"yes", true}, {"YES", true},
      {"on", true}, {"On", true}, {"false", false}, {"FALSE", false}, {"0", false}, {"no", false},
      {"No", false}, {"off", false}, {"OFF", false}}));
  CAPTURE(text);
  Config c = no_file(inputs({{"USE_REMOTE_SANDBOX", text}}));
  CHECK(c.use_remote == expected);
  CHECK(c.origin.at("use_remote_sandbox") == "env USE_REMOTE_SANDBOX");
  CHECK(sbx::parse_bool(text, "X") == expected);
}

TEST_CASE("config: USE_REMOTE_SANDBOX invalid values", "[config]") {
  std::string bad = GENERATE(as<std::string>{}, "maybe", "2", "t", "truee", "enabled");
  CAPTURE(bad);
  auto e = error_of([&] { no_file(inputs({{"USE_REMOTE_SANDBOX", bad}})); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.message(), "USE_REMOTE_SANDBOX"));
  CHECK(contains(e.message(), "'" + bad + "'"));
  for (const char* ok : {"true", "false", "1", "0", "yes", "no", "on", "off"}) CHECK(contains(e.hint(), ok));
}

TEST_CASE("config: parse_bool rejects the empty string", "[config]") {
  auto e = error_of([] { sbx::parse_bool("", "SOME_FLAG"); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.message(), "SOME_FLAG"));
}

TEST_CASE("config: REMOTE_SANDBOX_BACKEND accepted values normalise to syd", "[config]") {
  std::string v = GENERATE(as<std::string>{}, "syd", "SYD", "auto", "Auto", "AUTO", "deno", "Deno", "DENO");
  CAPTURE(v);
  Config c = no_file(inputs({{"REMOTE_SANDBOX_BACKEND", v}}));
  CHECK(c.remote_backend == "syd");
  CHECK(c.origin.at("remote_sandbox_backend") == "env REMOTE_SANDBOX_BACKEND");
  CHECK(c.warnings.empty());
}

TEST_CASE("config: REMOTE_SANDBOX_BACKEND invalid value names the accepted ones", "[config]") {
  auto e = error_of([] { no_file(inputs({{"REMOTE_SANDBOX_BACKEND", "gvisor"}})); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.message(), "REMOTE_SANDBOX_BACKEND"));
  CHECK(contains(e.message(), "gvisor"));
  for (const char* ok : {"syd", "auto", "deno"}) CHECK(contains(e.message(), ok));
}

TEST_CASE("config: SANDBOX_BACKEND alone is a deprecated alias", "[config]") {
  Config c = no_file(inputs({{"SANDBOX_BACKEND", "auto"}}));
  CHECK(c.remote_backend == "syd");
  CHECK(c.origin.at("remote_sandbox_backend") == "env SANDBOX_BACKEND");
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0] == "SANDBOX_BACKEND is deprecated; use REMOTE_SANDBOX_BACKEND");

  auto e = error_of([] { no_file(inputs({{"SANDBOX_BACKEND", "firecracker"}})); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.message(), "SANDBOX_BACKEND"));
  CHECK(contains(e.message(), "firecracker"));
  CHECK(contains(e.message(), "syd"));
}

TEST_CASE("config: REMOTE_SANDBOX_BACKEND wins over SANDBOX_BACKEND", "[config]") {
  // The ignored alias is not even validated: it has no effect.
  Config c = no_file(inputs({{"REMOTE_SANDBOX_BACKEND", "deno"}, {"SANDBOX_BACKEND", "bogus"}}));
  CHECK(c.remote_backend == "syd");
  CHECK(c.origin.at("remote_sandbox_backend") == "env REMOTE_SANDBOX_BACKEND");
  REQUIRE(c.warnings.size() == 1);
  CHECK(contains(c.warnings[0], "SANDBOX_BACKEND was ignored"));
  CHECK(contains(c.warnings[0], "REMOTE_SANDBOX_BACKEND"));
}

TEST_CASE("config: SANDBOX_BACKEND env beats the file's remote_sandbox_backend", "[config]") {
  Config c = with_yaml(inputs({{"SANDBOX_BACKEND", "syd"}}), "remote_sandbox_backend: auto\n");
  CHECK(c.origin.at("remote_sandbox_backend") == "env SANDBOX_BACKEND");
}

TEST_CASE("config: LOCAL_SANDBOX_BACKEND accepted values", "[config]") {
  auto [v, stored] = GENERATE(table<std::string, std::string>({{"deno", "deno"}, {"DENO", "deno"},
                                                               {"subprocess", "subprocess"},
                                                               {"SubProcess", "subprocess"},
                                                               {"none", "none"}, {"None", "none"}}));
  CAPTURE(v);
  Config c = no_file(inputs({{"LOCAL_SANDBOX_BACKEND", v}}));
  CHECK(c.local_backend == stored);
  CHECK(c.origin.at("local_sandbox_backend") == "env LOCAL_SANDBOX_BACKEND");
}

TEST_CASE("config: LOCAL_SANDBOX_BACKEND invalid value names the accepted ones", "[config]") {
  auto e = error_of([] { no_file(inputs({{"LOCAL_SANDBOX_BACKEND", "docker"}})); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.message(), "LOCAL_SANDBOX_BACKEND"));
  CHECK(contains(e.message(), "docker"));
  for (const char* ok : {"deno", "subprocess", "none"}) CHECK(contains(e.message(), ok));
}

TEST_CASE("config: SANDBOX_MANAGER_URL", "[config]") {
  SECTION("accepted, trailing slashes stripped") {
    auto [v, stored] = GENERATE(table<std::string, std::string>({
        {"http://mgr:8000", "http://mgr:8000"},
        {"https://sbx-manager.internal:8000/", "https://sbx-manager.internal:8000"},
        {"https://mgr/api///", "https://mgr/api"},
        {"HTTPS://mgr", "HTTPS://mgr"}}));
    CAPTURE(v);
    Config c = no_file(inputs({{"SANDBOX_MANAGER_URL", v}}));
    CHECK(c.manager_url == stored);
    CHECK(c.origin.at("sandbox_manager_url") == "env SANDBOX_MANAGER_URL");
  }
  SECTION("rejected") {
    std::string bad = GENERATE(as<std::string>{}, "ftp://mgr", "mgr:8000", "http://", "https:///",
                               "http://mgr /x", "//mgr");
    CAPTURE(bad);
    auto e = error_of([&] { no_file(inputs({{"SANDBOX_MANAGER_URL", bad}})); });
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(contains(e.message(), "SANDBOX_MANAGER_URL"));
    CHECK(contains(e.message(), "http://"));
    CHECK(contains(e.message(), "https://"));
  }
}

TEST_CASE("config: ADMIN_API_KEY sources", "[config]") {
  TempDir dir;
  SECTION("environment") {
    Config c = no_file(inputs({{"ADMIN_API_KEY", "k-env"}}));
    CHECK(c.api_key == "k-env");
    CHECK(c.origin.at("admin_api_key") == "env ADMIN_API_KEY");
  }
  SECTION("inline in the file") {
    Config c = with_yaml(inputs(), "admin_api_key: \"k-inline\"\n");
    CHECK(c.api_key == "k-inline");
    CHECK(c.origin.at("admin_api_key") == "file /etc/sbx/test.yaml");
  }
  SECTION("key file, trailing whitespace stripped") {
    std::string key = dir.write("api-key", "k-from-file \t\n\n");
    Config c = with_yaml(inputs(), "admin_api_key_file: " + key + "\n");
    CHECK(c.api_key == "k-from-file");
  }
  SECTION("relative key file is next to the config file") {
    dir.write("api-key", "k-relative\n");
    std::string cfg = dir.write("config.yaml", "admin_api_key_file: api-key\n");
    ConfigInputs in = inputs();
    in.config_flag = cfg;
    CHECK(sbx::resolve_config(in).api_key == "k-relative");
  }
  SECTION("environment beats the file") {
    std::string key = dir.write("api-key", "k-from-file\n");
    Config c = with_yaml(inputs({{"ADMIN_API_KEY", "k-env"}}), "admin_api_key_file: " + key + "\n");
    CHECK(c.api_key == "k-env");
  }
  SECTION("missing key file") {
    auto e = error_of([&] { with_yaml(inputs(), "admin_api_key_file: " + dir.path + "/nope\n"); });
    CHECK(e.code() == Errc::not_found);
    CHECK(contains(e.message(), dir.path + "/nope"));
  }
  SECTION("empty key file") {
    std::string key = dir.write("api-key", "\n");
    auto e = error_of([&] { with_yaml(inputs(), "admin_api_key_file: " + key + "\n"); });
    CHECK(e.code() == Errc::invalid_argument);
  }
  SECTION("both inline key and key file") {
    std::string key = dir.write("api-key", "k\n");
    auto e = error_of([&] { with_yaml(inputs(), "admin_api_key: a\nadmin_api_key_file: " + key + "\n"); });
    CHECK(e.code() == Errc::invalid_argument);
  }
}

TEST_CASE("config: the API key never appears in errors or warnings", "[config]") {
  const std::string secret = "s3cr3t-Key-Value";
  TempDir dir;
  SECTION("key with a line break") {
    auto e = error_of([&] { no_file(inputs({{"ADMIN_API_KEY", secret + "\r\nX-Evil: 1"}})); });
    CHECK(e.code() == Errc::invalid_argument);
    CHECK_FALSE(contains(e.what(), secret));
    CHECK_FALSE(contains(e.hint(), secret));
  }
  SECTION("key file with an inner line break") {
    std::string key = dir.write("api-key", secret + "\nsecond-line\n");
    auto e = error_of([&] { with_yaml(inputs(), "admin_api_key_file: " + key + "\n"); });
    CHECK_FALSE(contains(e.what(), secret));
    CHECK_FALSE(contains(e.hint(), secret));
  }
  SECTION("other errors while a key is set") {
    auto e = error_of([&] {
      with_yaml(inputs({{"SANDBOX_BACKEND", "x"}, {"REMOTE_SANDBOX_BACKEND", "bad"}}),
                "admin_api_key: " + secret + "\n");
    });
    CHECK_FALSE(contains(e.what(), secret));
    CHECK_FALSE(contains(e.hint(), secret));
  }
  SECTION("warnings") {
    Config c = with_yaml(inputs({{"SANDBOX_BACKEND", "syd"}, {"REMOTE_SANDBOX_BACKEND", "syd"}}),
                         "admin_api_key: " + secret + "\n");
    REQUIRE_FALSE(c.warnings.empty());
    for (const auto& w : c.warnings) CHECK_FALSE(contains(w, secret));
  }
}

TEST_CASE("config: state_dir precedence flag > env > file > default", "[config]") {
  const std::string yaml = "state_dir: /from/file\n";
  ConfigInputs in = inputs({{"SBX_STATE_DIR", "/from/env"}});
  in.state_dir_flag = "/from/flag/";

  Config c = with_yaml(in, yaml);
  CHECK(c.state_dir == "/from/flag");
  CHECK(c.origin.at("state_dir") == "flag --state-dir");

  in.state_dir_flag.reset();
  c = with_yaml(in, yaml);
  CHECK(c.state_dir == "/from/env");
  CHECK(c.origin.at("state_dir") == "env SBX_STATE_DIR");

  in.env.clear();
  c = with_yaml(in, yaml);
  CHECK(c.state_dir == "/from/file");
  CHECK(c.origin.at("state_dir") == "file /etc/sbx/test.yaml");

  c = no_file(in);
  CHECK(c.state_dir == "/var/lib/sbx");
  CHECK(c.origin.at("state_dir") == "default");
}

TEST_CASE("config: state_dir must be absolute", "[config]") {
  ConfigInputs in = inputs();
  in.state_dir_flag = "relative/dir";
  auto e = error_of([&] { no_file(in); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.message(), "--state-dir"));
  CHECK(contains(e.message(), "relative/dir"));

  e = error_of([] { no_file(inputs({{"SBX_STATE_DIR", "state"}})); });
  CHECK(contains(e.message(), "SBX_STATE_DIR"));
  e = error_of([] { with_yaml(inputs(), "state_dir: ./x\n"); });
  CHECK(contains(e.message(), "state_dir"));
}

TEST_CASE("config: env beats file beats default for the guide's variables", "[config]") {
  const std::string yaml =
      "use_remote_sandbox: false\nlocal_sandbox_backend: none\nsandbox_manager_url: http://file:8000\n";
  Config c = with_yaml(inputs(), yaml);
  CHECK_FALSE(c.use_remote);
  CHECK(c.local_backend == "none");
  CHECK(c.manager_url == "http://file:8000");
  CHECK(c.origin.at("use_remote_sandbox") == "file /etc/sbx/test.yaml");

  c = with_yaml(inputs({{"USE_REMOTE_SANDBOX", "yes"}, {"LOCAL_SANDBOX_BACKEND", "subprocess"},
                        {"SANDBOX_MANAGER_URL", "https://env"}}),
                yaml);
  CHECK(c.use_remote);
  CHECK(c.local_backend == "subprocess");
  CHECK(c.manager_url == "https://env");
  CHECK(c.origin.at("local_sandbox_backend") == "env LOCAL_SANDBOX_BACKEND");
}

TEST_CASE("config: driver flag is copied", "[config]") {
  ConfigInputs in = inputs();
  in.driver_flag = "runsc";
  Config c = no_file(in);
  CHECK(c.driver_override == "runsc");
  CHECK(c.origin.at("driver") == "flag --driver");
}

TEST_CASE("config: the documented example file", "[config]") {
  TempDir dir;
  std::string key = dir.write("api-key", "k-doc\n");
  std::string cfg = dir.write("config.yaml",
                              "use_remote_sandbox: true\n"
                              "remote_sandbox_backend: syd\n"
                              "local_sandbox_backend: subprocess\n"
                              "sandbox_manager_url: https://sbx-manager.internal:8000\n"
                              "admin_api_key_file: " + key + "     # or admin_api_key: \"...\"\n"
                              "state_dir: /var/lib/sbx\n"
                              "uid_base: 1073741824\n"
                              "cp_max_size: 2G\n"
                              "defaults:\n"
                              "  memory: 256M\n"
                              "  pids: 128\n"
                              "  cpus: 0.5\n"
                              "  disk: 2G\n"
                              "  network: jail\n"
                              "  idle_timeout: 1h30m\n"
                              "  ttl: 2d\n");
  ConfigInputs in = inputs();
  in.config_flag = cfg;
  Config c = sbx::resolve_config(in);
  CHECK(c.config_file == cfg);
  CHECK(c.origin.at("config_file") == "flag --config");
  CHECK(c.use_remote);
  CHECK(c.local_backend == "subprocess");
  CHECK(c.manager_url == "https://sbx-manager.internal:8000");
  CHECK(c.api_key == "k-doc");
  CHECK(c.uid_base == 1073741824u);
  CHECK(c.cp_max_bytes == 2ull << 30);
  CHECK(c.default_limits.memory_mb == 256);
  CHECK(c.default_limits.pids == 128);
  CHECK(c.default_limits.cpus == 0.5);
  CHECK(c.default_limits.disk_mb == 2048);
  CHECK(c.default_network == "jail");
  CHECK(c.default_idle_timeout_s == 5400);
  CHECK(c.default_ttl_s == 2 * 86400);
  for (const char* k : {"use_remote_sandbox", "local_sandbox_backend", "admin_api_key", "defaults.memory",
                        "defaults.ttl", "uid_base"})
    CHECK(c.origin.at(k) == "file " + cfg);
}

TEST_CASE("config: sizes and durations round up so they never become unlimited", "[config]") {
  Config c = with_yaml(inputs(), "defaults:\n  memory: 100k\n  disk: 1.5M\n  idle_timeout: 500ms\n");
  CHECK(c.default_limits.memory_mb == 1);
  CHECK(c.default_limits.disk_mb == 2);
  CHECK(c.default_idle_timeout_s == 1);
}

TEST_CASE("config: invalid YAML values", "[config]") {
  auto [yaml, needle] = GENERATE(table<std::string, std::string>({
      {"defaults:\n  network: host\n", "jail"},
      {"defaults:\n  memory: lots\n", "defaults.memory"},
      {"defaults:\n  idle_timeout: 10 minutes\n", "defaults.idle_timeout"},
      {"defaults:\n  cpus: nan\n", "defaults.cpus"},
      {"defaults:\n  cpus: -1\n", "defaults.cpus"},
      {"defaults:\n  pids: -5\n", "defaults.pids"},
      {"uid_base: 1000\n", "uid_base"},
      {"uid_base: 99999999999\n", "uid_base"},
      {"use_remote_sandbox: maybe\n", "use_remote_sandbox"},
      {"remote_sandbox_backend: microvm\n", "syd"},
      {"state_dir: [a, b]\n", "state_dir"},
      {"state_dir:\n", "state_dir"},
      {"defaults: 3\n", "defaults"},
      {"- a\n- b\n", "/etc/sbx/test.yaml"},
      {"state_dir: /a\nstate_dir: /b\n", "twice"},
  }));
  CAPTURE(yaml);
  auto e = error_of([&] { with_yaml(inputs(), yaml); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.what(), needle));
}

TEST_CASE("config: unknown YAML keys", "[config]") {
  SECTION("top level") {
    auto e = error_of([] { with_yaml(inputs(), "state_dir: /x\nsandbox_backend: syd\n"); });
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(contains(e.message(), "sandbox_backend"));
    CHECK(contains(e.message(), "/etc/sbx/test.yaml"));
    for (const char* k : {"use_remote_sandbox", "admin_api_key_file", "state_dir", "defaults"})
      CHECK(contains(e.message(), k));
  }
  SECTION("under defaults") {
    auto e = error_of([] { with_yaml(inputs(), "defaults:\n  memory: 1G\n  memroy: 2G\n"); });
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(contains(e.message(), "memroy"));
    CHECK(contains(e.message(), "/etc/sbx/test.yaml"));
    for (const char* k : {"memory", "pids", "cpus", "disk", "network", "idle_timeout", "ttl"})
      CHECK(contains(e.message(), k));
  }
}

TEST_CASE("config: YAML syntax errors name the file, line and column", "[config]") {
  TempDir dir;
  std::string cfg = dir.write("bad.yaml", "state_dir: /x\nuse_remote_sandbox: [true\n");
  ConfigInputs in = inputs();
  in.config_flag = cfg;
  auto e = error_of([&] { sbx::resolve_config(in); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.message(), cfg));
  CHECK(contains(e.message(), "line "));
  CHECK(contains(e.message(), "column "));
}

TEST_CASE("config: which file is read", "[config]") {
  TempDir dir;
  std::string a = dir.write("a.yaml", "state_dir: /from/a\n");
  std::string b = dir.write("b.yaml", "state_dir: /from/b\n");

  SECTION("SBX_CONFIG") {
    Config c = sbx::resolve_config(inputs({{"SBX_CONFIG", b}}));
    CHECK(c.state_dir == "/from/b");
    CHECK(c.config_file == b);
    CHECK(c.origin.at("config_file") == "env SBX_CONFIG");
  }
  SECTION("--config beats SBX_CONFIG") {
    ConfigInputs in = inputs({{"SBX_CONFIG", b}});
    in.config_flag = a;
    CHECK(sbx::resolve_config(in).state_dir == "/from/a");
  }
  SECTION("an empty file sets nothing") {
    ConfigInputs in = inputs();
    in.config_flag = dir.write("empty.yaml", "# nothing here\n");
    Config c = sbx::resolve_config(in);
    CHECK(c.state_dir == "/var/lib/sbx");
    CHECK(c.config_file == *in.config_flag);
  }
  SECTION("missing --config file") {
    ConfigInputs in = inputs();
    in.config_flag = dir.path + "/missing.yaml";
    auto e = error_of([&] { sbx::resolve_config(in); });
    CHECK(e.code() == Errc::not_found);
    CHECK(contains(e.message(), dir.path + "/missing.yaml"));
    CHECK(contains(e.message(), "--config"));
    CHECK_FALSE(e.hint().empty());
  }
  SECTION("missing SBX_CONFIG file") {
    auto e = error_of([&] { sbx::resolve_config(inputs({{"SBX_CONFIG", dir.path + "/gone.yaml"}})); });
    CHECK(e.code() == Errc::not_found);
    CHECK(contains(e.message(), "SBX_CONFIG"));
    CHECK(contains(e.hint(), "SBX_CONFIG"));
  }
}

TEST_CASE("config: inputs_from_process", "[config]") {
  ::setenv("SBX_TEST_CONFIG_MARKER", "a=b", 1);
  ConfigInputs in = sbx::inputs_from_process();
  ::unsetenv("SBX_TEST_CONFIG_MARKER");
  CHECK(in.env.at("SBX_TEST_CONFIG_MARKER") == "a=b");
  CHECK(in.is_root == (::geteuid() == 0));
  const char* home = std::getenv("HOME");
  CHECK(in.home == (home ? home : ""));
  CHECK_FALSE(in.config_flag);
  CHECK_FALSE(in.state_dir_flag);
  CHECK_FALSE(in.driver_flag);
}

TEST_CASE("config: warm pool sizes from the file and SBX_POOL", "[config][pool]") {
  CHECK(no_file(inputs()).pool_sizes.empty());
  auto c = with_yaml(inputs(), "pool:\n  subprocess: 2\n  deno: 1\n");
  CHECK(c.pool_sizes == std::map<std::string, uint64_t>{{"deno", 1}, {"subprocess", 2}});
  CHECK(c.origin["pool"] == "file /etc/sbx/test.yaml");
  // The variable replaces the whole mapping, it does not merge into it.
  auto e = with_yaml(inputs({{"SBX_POOL", "runsc=3, ,subprocess=0"}}), "pool:\n  deno: 1\n");
  CHECK(e.pool_sizes == std::map<std::string, uint64_t>{{"runsc", 3}, {"subprocess", 0}});
  CHECK(e.origin["pool"] == "env SBX_POOL");
  CHECK(with_yaml(inputs(), "pool:\n").pool_sizes.empty());
  // A snapshot's pool: sandboxes started on its files.
  CHECK(no_file(inputs({{"SBX_POOL", "snapshot:web.v2=2,subprocess=1"}})).pool_sizes ==
        std::map<std::string, uint64_t>{{"snapshot:web.v2", 2}, {"subprocess", 1}});
  CHECK(with_yaml(inputs(), "pool:\n  snapshot:web: 1\n").pool_sizes == std::map<std::string, uint64_t>{{"snapshot:web", 1}});
}

TEST_CASE("config: bad warm pool settings are refused with the fix", "[config][pool]") {
  auto bad_env = error_of([] { no_file(inputs({{"SBX_POOL", "subprocess"}})); });
  CHECK(bad_env.code() == Errc::invalid_argument);
  CHECK(contains(bad_env.hint(), "subprocess=2"));
  CHECK(contains(error_of([] { no_file(inputs({{"SBX_POOL", "subprocess=two"}})); }).message(), "not a whole number"));
  CHECK(contains(error_of([] { no_file(inputs({{"SBX_POOL", "a/b=1"}})); }).message(), "neither a driver name"));
  CHECK(contains(error_of([] { no_file(inputs({{"SBX_POOL", "snapshot:=1"}})); }).message(), "nor snapshot:NAME"));
  CHECK(contains(error_of([] { no_file(inputs({{"SBX_POOL", "snapshot:../x=1"}})); }).message(), "nor snapshot:NAME"));
  CHECK(contains(error_of([] { no_file(inputs({{"SBX_POOL", "subprocess=65"}})); }).message(), "more than 64"));
  CHECK(contains(error_of([] { with_yaml(inputs(), "pool: 3\n"); }).message(), "mapping of driver: size"));
  CHECK(contains(error_of([] { with_yaml(inputs(), "pool:\n  deno: [1]\n"); }).message(), "not `driver: size`"));
  CHECK(contains(error_of([] { with_yaml(inputs(), "pool:\n  deno: -1\n"); }).message(), "not a whole number"));
}

TEST_CASE("config: the network jail's pool and DNS upstream", "[config][netjail]") {
  Config d = no_file(inputs());
  CHECK(d.net_pool == "10.213.0.0/16");
  CHECK(d.net_dns.empty());
  Config f = with_yaml(inputs(), "network:\n  pool: 10.77.0.0/20\n  dns: 192.0.2.53\n");
  CHECK(f.net_pool == "10.77.0.0/20");
  CHECK(f.net_dns == "192.0.2.53");
  Config e = with_yaml(inputs({{"SBX_NET_POOL", "172.31.0.0/24"}, {"SBX_NET_DNS", "198.51.100.53"}}),
                       "network:\n  pool: 10.77.0.0/20\n");
  CHECK(e.net_pool == "172.31.0.0/24");
  CHECK(e.net_dns == "198.51.100.53");
  CHECK(e.origin.at("network.pool") == "env SBX_NET_POOL");
  for (const char* bad : {"network:\n  pool: 10.77.0.1/20\n", "network:\n  pool: 10.0.0.0/31\n",
                          "network:\n  dns: resolver\n", "network:\n  gateway: 1.2.3.4\n"}) {
    INFO(bad);
    CHECK(error_of([&] { with_yaml(inputs(), bad); }).code() == Errc::invalid_argument);
  }
}

TEST_CASE("config: server.images and server.default_network", "[config]") {
  Config c = no_file(inputs());
  CHECK(c.server.default_network == "jail");  // the guide's sandboxes are network-jailed
  CHECK(c.server.images.empty());
  c = with_yaml(inputs(), "server:\n  default_network: none\n  images:\n    debian: /var/lib/sbx/images/debian\n    tiny: /srv/tiny\n");
  CHECK(c.server.default_network == "none");
  CHECK(c.server.images == std::map<std::string, std::string>{{"debian", "/var/lib/sbx/images/debian"}, {"tiny", "/srv/tiny"}});
  for (auto [yaml, needle] : std::vector<std::pair<std::string, std::string>>{
           {"server:\n  default_network: bridge\n", "bridge"},
           {"server:\n  images:\n    rel: images/rel\n", "absolute"},
           {"server:\n  images: [a, b]\n", "mapping"},
           {"server:\n  images:\n    x: [a]\n", "name: directory"},
           {"server:\n  images:\n    x: /a\n    x: /b\n", "twice"}}) {
    CAPTURE(yaml);
    auto e = error_of([&] { with_yaml(inputs(), yaml); });
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(contains(e.what(), needle));
  }
}
