// sbx: run untrusted code in sandboxes. This file only wires the subcommands
// together and turns an error into one stderr line and an exit status.
#include <cstdio>
#include <cstring>

#include "cli/common.hpp"
#include "cli/dns_forwarder.hpp"

int main(int argc, char** argv) {
  using namespace sbx::cli;
  // Internal, started by sbx itself (never in --help or the docs).
  if (argc == 2 && std::strcmp(argv[1], kDnsForwarder) == 0) return run_dns_forwarder();
  CLI::App app{"sbx: run untrusted code in sandboxes", "sbx"};
  app.set_version_flag("--version", std::string("sbx ") + SBX_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  Globals globals;
  Outcome outcome;
  add_global_flags(app, globals);
  register_create(app, globals, outcome);
  register_exec(app, globals, outcome);
  register_cp(app, globals, outcome);
  register_ls(app, globals, outcome);
  register_rm(app, globals, outcome);
  register_start(app, globals, outcome);
  register_pause(app, globals, outcome);
  register_resume(app, globals, outcome);
  register_snapshot(app, globals, outcome);
  register_fork(app, globals, outcome);
  register_gc(app, globals, outcome);
  register_doctor(app, globals, outcome);
  register_serve(app, globals, outcome);
  register_pool(app, globals, outcome);
  register_image(app, globals, outcome);
  register_ps(app, globals, outcome);
  register_logs(app, globals, outcome);
  register_attach(app, globals, outcome);
  register_kill(app, globals, outcome);
  register_port_forward(app, globals, outcome);
  std::vector<std::string> args;
  try {
    args = split_exec_command(app, std::vector<std::string>(argv + 1, argv + argc));
    // CLI11 takes the arguments reversed when given a vector.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
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
