// The shell a deno sandbox does not have. The platform's `commands` route hands
// sbx a string meant for `/bin/sh -c`; the deno agent runs only argv commands of
// python3/python, node and deno. So a small subset of POSIX sh is parsed here and
// run as those argv commands: words with quotes, escapes and `$VAR` expansion,
// `K=V` assignments, `export`, `cd`, and commands joined by `;`, `&&` and
// newlines. Everything else (pipes, redirections, substitutions, globs,
// control flow, other programs) is refused before anything runs, naming the
// construct and the drivers that run full shell commands; a half-run line
// whose end could not run is worse than a clear refusal.
//
// Parsing and running are two steps because sh decides state as it goes:
// in `false && export X=1; node -e ...` the export never happens, so `$VAR`
// expansion, the environment and the directory are worked out step by step
// while running, not when parsing. Both are pure: the caller's function runs
// each command (tests pass a fake). docs/drivers.md (deno) describes the subset.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace sbx {

/// A piece of a word as written, before expansion.
struct ShellWordPart {
  std::string text;       ///< literal text, or the variable's name
  bool variable = false;  ///< `$text` or `${text}`
  bool quoted = false;    ///< inside quotes or escaped: never a keyword, never split into fields
};
/// A word as written: its parts, joined after expansion.
using ShellWord = std::vector<ShellWordPart>;

/// `NAME=value`, or a bare `NAME` given to export.
struct ShellAssignment {
  std::string name;                ///< the variable
  std::optional<ShellWord> value;  ///< none: `export NAME` without a value
};

/// One simple command of the line, as parsed.
struct ShellStep {
  /// What the step does.
  enum class Kind {
    run,     ///< runs a program, with `K=V` prefixes for it alone
    assign,  ///< `K=V ...` alone: shell variables, exported only if already exported
    export_vars,  ///< `export K=V K2 ...`
    cd,      ///< `cd [DIR]`
  };
  Kind kind = Kind::run;                    ///< what the step does
  std::vector<ShellAssignment> assignments;  ///< run: its prefixes; assign, export_vars: what they set
  std::vector<ShellWord> words;             ///< run: the argv (python already python3); cd: its directory, if any
  bool and_then = false;                    ///< runs only if the previous status is 0 (`&&`); else always (`;`)
};

/// One command as the driver runs it.
struct ShellCommand {
  std::vector<std::string> argv;           ///< argv[0] is one of the allowed programs
  std::map<std::string, std::string> env;  ///< variables the line exported, plus this command's `K=V` prefixes
  std::string cwd;                         ///< "" = the sandbox's workdir; after a `cd`, an absolute path
};

/// Runs one command and returns its exit status. An exception it throws (a
/// timeout, say) ends the line and propagates out of run_shell_subset.
using ShellRunFn = std::function<int(const ShellCommand&)>;

/// Where a command line starts.
struct ShellStart {
  std::map<std::string, std::string> env;  ///< the sandbox's environment: exported, and seen by `$VAR`
  std::string workdir = "/work";           ///< where `cd` alone goes and relative `cd`s start
};

/// The programs a deno sandbox runs: python, python3, node, deno.
const std::set<std::string>& deno_shell_programs();

/// Parses `command` as the subset. Throws Error(Errc::invalid_argument) for an
/// empty line, a line that is not valid sh (an unterminated quote, `;` or `&&`
/// with nothing before it), or one that uses a construct or program outside the
/// subset: the message names the first such and the drivers that run full shell
/// commands. A program is allowed when its name (after the last `/`) is in
/// `programs`; `python` becomes `python3`.
std::vector<ShellStep> parse_shell_subset(std::string_view command,
                                          const std::set<std::string>& programs = deno_shell_programs());

/// Runs the steps through `run` as sh would and returns sh's status: that of
/// the last step that ran (`a && b` with a failing: a's; `a; b`: b's); 0 for
/// assignments, export and cd. Throws Error(Errc::invalid_argument) for `cd`
/// given several directories once expanded.
int run_shell_subset(const std::vector<ShellStep>& steps, const ShellRunFn& run, const ShellStart& start = {});

}  // namespace sbx
