// sbx: run untrusted code in sandboxes. This file only wires the subcommands
// together and turns an error into one stderr line and an exit status.
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "cli/common.hpp"
#include "cli/dns_forwarder.hpp"

namespace {

using namespace sbx::cli;

using Register = void (*)(CLI::App&, Globals&, Outcome&);
// In the order `sbx --help` lists them.
constexpr std::pair<const char*, Register> kSubcommands[] = {
    {"create", register_create}, {"exec", register_exec},       {"cp", register_cp},
    {"ls", register_ls},         {"rm", register_rm},           {"start", register_start},
    {"pause", register_pause},   {"resume", register_resume},   {"snapshot", register_snapshot},
    {"fork", register_fork},     {"gc", register_gc},           {"doctor", register_doctor},
    {"serve", register_serve},   {"pool", register_pool},       {"image", register_image},
    {"ps", register_ps},         {"logs", register_logs},       {"attach", register_attach},
    {"kill", register_kill},     {"port-forward", register_port_forward},
};

// The subcommand a command line names: the first word that is one ("" if none).
std::string named_subcommand(int argc, char** argv) {
  for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i)
    for (auto& [name, reg] : kSubcommands)
      if (std::strcmp(argv[i], name) == 0) return name;
  return "";
}

// Parses and runs one command line. `only` set: just that subcommand is
// registered (building all twenty costs every call ~0.3 ms, most of a warm
// exec's floor); a line that then fails to parse is parsed again with all of
// them (nullopt), so help, suggestions and errors see the whole CLI.
int run(int argc, char** argv, const std::optional<std::string>& only) {
  CLI::App app{"sbx: run untrusted code in sandboxes", "sbx"};
  app.set_version_flag("--version", std::string("sbx ") + SBX_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  Globals globals;
  Outcome outcome;
  add_global_flags(app, globals);
  for (auto& [name, reg] : kSubcommands)
    if (!only || *only == name) reg(app, globals, outcome);
  std::vector<std::string> args;
  try {
    args = split_exec_command(app, std::vector<std::string>(argv + 1, argv + argc));
    // CLI11 takes the arguments reversed when given a vector.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (only) return run(argc, argv, std::nullopt);
    if (e.get_exit_code() == 0) return app.exit(e);
    // CLI11 says "argument not expected" for a mistyped subcommand or flag; say which, and what was meant.
    if (auto unknown = explain_unknown(app, args)) {
      print_error(*unknown);
      return 2;
    }
    std::fprintf(stderr, "sbx: error: %s\n", e.what());
    std::fprintf(stderr, "sbx: hint: see `sbx --help` or `sbx SUBCOMMAND --help`\n");
    return 2;
  } catch (const sbx::Error& e) {
    print_error(e);
    return sbx::exit_status(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sbx: error: internal: %s\n", e.what());
    return sbx::exit_status(sbx::Errc::internal);
  }
  std::fflush(stdout);
  return outcome.status;
}

}  // namespace

int main(int argc, char** argv) {
  // Internal, started by sbx itself (never in --help or the docs).
  if (argc == 2 && std::strcmp(argv[1], sbx::cli::kDnsForwarder) == 0) return sbx::cli::run_dns_forwarder();
  return run(argc, argv, named_subcommand(argc, argv));
}
