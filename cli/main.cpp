// sbx: run untrusted code in sandboxes. This file only wires the subcommands
// together and turns an error into one stderr line and an exit status.
#include <algorithm>
#include <cstdio>

#include "cli/common.hpp"

int main(int argc, char** argv) {
  using namespace sbx::cli;
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
  register_gc(app, globals, outcome);
  register_doctor(app, globals, outcome);
  register_serve(app, globals, outcome);
  register_pool(app, globals, outcome);
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    args = split_exec_command(app, args);
    // CLI11 takes the arguments reversed when given a vector.
    std::reverse(args.begin(), args.end());
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
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
