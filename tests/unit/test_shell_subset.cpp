#include "core/shell_subset.hpp"

#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/unit/helpers.hpp"

using sbx::Errc;
using sbx::ShellCommand;
using sbx::ShellStep;
using sbx_test::contains;
using sbx_test::error_of;

namespace {

using Argv = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

/// A fake driver: records each command and answers with scripted statuses (0 once they run out).
struct FakeRun {
  std::vector<ShellCommand> calls;
  std::vector<int> statuses;

  sbx::ShellRunFn fn() {
    return [this](const ShellCommand& c) {
      calls.push_back(c);
      return calls.size() <= statuses.size() ? statuses[calls.size() - 1] : 0;
    };
  }
};

/// Parses and runs `line` against `fake`; returns sh's status.
int run_line(const std::string& line, FakeRun& fake, const sbx::ShellStart& start = {}) {
  return sbx::run_shell_subset(sbx::parse_shell_subset(line), fake.fn(), start);
}

/// The one command `line` runs.
ShellCommand only_command(const std::string& line, const sbx::ShellStart& start = {}) {
  FakeRun fake;
  run_line(line, fake, start);
  REQUIRE(fake.calls.size() == 1);
  return fake.calls[0];
}

Argv argv_of(const std::string& line) { return only_command(line).argv; }

/// The error parsing `line` throws.
sbx::Error refusal(const std::string& line) {
  return error_of([&] { sbx::parse_shell_subset(line); });
}

const std::string kDrivers = "full shell commands run on the subprocess, runsc and microvm drivers";

}  // namespace

// ---------------------------------------------------------------- the platform's own examples

TEST_CASE("shell_subset: export then python runs python3 with the variable", "[shell_subset]") {
  auto c = only_command("export X=1; python /work/run.py");
  CHECK(c.argv == Argv{"python3", "/work/run.py"});
  CHECK(c.env == Env{{"X", "1"}});
  CHECK(c.cwd.empty());
}

TEST_CASE("shell_subset: cd then && runs in that directory", "[shell_subset]") {
  auto c = only_command("cd /work && python3 -c 'print(1)'");
  CHECK(c.argv == Argv{"python3", "-c", "print(1)"});
  CHECK(c.cwd == "/work");
  CHECK(c.env.empty());
}

TEST_CASE("shell_subset: a prefix assignment is in the command's environment", "[shell_subset]") {
  auto c = only_command("X=1 node -e 'console.log(process.env.X)'");
  CHECK(c.argv == Argv{"node", "-e", "console.log(process.env.X)"});
  CHECK(c.env == Env{{"X", "1"}});
}

// ---------------------------------------------------------------- words

TEST_CASE("shell_subset: quoting and escapes make words as sh does", "[shell_subset]") {
  auto [line, argv] = GENERATE(table<std::string, Argv>({
      {"node a b", {"node", "a", "b"}},
      {"  node   a\tb  ", {"node", "a", "b"}},
      {"node 'a b'", {"node", "a b"}},
      {"node \"a b\"", {"node", "a b"}},
      {"node a\\ b", {"node", "a b"}},
      {"node 'a'\"b\"c", {"node", "abc"}},
      {"node ''", {"node", ""}},
      {"node \"\"", {"node", ""}},
      {"node '$X \\ \"'", {"node", "$X \\ \""}},
      {"node \"a\\\"b\"", {"node", "a\"b"}},
      {"node \"a\\\\b\"", {"node", "a\\b"}},
      {"node \"a\\$b\"", {"node", "a$b"}},
      {"node \"a\\nb\"", {"node", "a\\nb"}},  // other backslashes stay inside double quotes
      {"node \\$X \\' \\\"", {"node", "$X", "'", "\""}},
      {"node \\*", {"node", "*"}},
      {"node '*.py' \"a?[b]\"", {"node", "*.py", "a?[b]"}},
      {"node $ a$ \"$\"", {"node", "$", "a$", "$"}},
      {"node a#b", {"node", "a#b"}},
      {"node a # a comment", {"node", "a"}},
      {"node a \\\n  b", {"node", "a", "b"}},
      {"node a\\\nb", {"node", "ab"}},
      {"node a\\", {"node", "a\\"}},
      {"node -e 'console.log(\"hi; there && | > $(x)\")'", {"node", "-e", "console.log(\"hi; there && | > $(x)\")"}},
      {"python3 -c \"print('a')\"", {"python3", "-c", "print('a')"}},
  }));
  CAPTURE(line);
  CHECK(argv_of(line) == argv);
}

TEST_CASE("shell_subset: a multi-line python program in single quotes stays one argument", "[shell_subset]") {
  CHECK(argv_of("python3 -c 'import sys\nfor a in sys.argv:\n    print(a)\n' x") ==
        Argv{"python3", "-c", "import sys\nfor a in sys.argv:\n    print(a)\n", "x"});
}

TEST_CASE("shell_subset: python is python3, also by path", "[shell_subset]") {
  CHECK(argv_of("python x.py") == Argv{"python3", "x.py"});
  CHECK(argv_of("/usr/bin/python -V") == Argv{"/usr/bin/python3", "-V"});
  CHECK(argv_of("/usr/bin/python3 -V") == Argv{"/usr/bin/python3", "-V"});
  CHECK(argv_of("'node' x") == Argv{"node", "x"});
  CHECK(argv_of("deno run main.ts") == Argv{"deno", "run", "main.ts"});
}

// ---------------------------------------------------------------- expansion

TEST_CASE("shell_subset: $VAR and ${VAR} expand from earlier assignments and the start env", "[shell_subset]") {
  auto [line, argv] = GENERATE(table<std::string, Argv>({
      {"X=1; node $X", {"node", "1"}},
      {"X=1; node ${X}", {"node", "1"}},
      {"X=1; node \"$X\" \"${X}\"", {"node", "1", "1"}},
      {"X=1; node a${X}b", {"node", "a1b"}},
      {"X=1; node $Xb", {"node"}},  // $Xb is the variable Xb, unset
      {"X=1; node '$X'", {"node", "$X"}},
      {"X=1; node \\$X", {"node", "$X"}},
      {"node $UNSET", {"node"}},  // an unquoted empty expansion is no argument at all
      {"node \"$UNSET\"", {"node", ""}},
      {"node a$UNSET", {"node", "a"}},
      {"X='a  b'; node $X", {"node", "a", "b"}},  // unquoted: split on blanks
      {"X='a  b'; node \"$X\"", {"node", "a  b"}},
      {"X=' a '; node x${X}y", {"node", "x", "a", "y"}},
      {"X='*'; node $X", {"node", "*"}},  // no pathname expansion: stays itself
      {"X=1 Y=$X; node $Y", {"node", "1"}},
      {"X=1; X=$X$X; node $X", {"node", "11"}},
      {"X=\"a b\"; Y=$X; node \"$Y\"", {"node", "a b"}},
      {"node $HOME", {"node", "/home/u"}},
      {"node $PWD", {"node", "/work"}},
      {"cd sub; node $PWD", {"node", "/work/sub"}},
  }));
  CAPTURE(line);
  sbx::ShellStart start;
  start.env = {{"HOME", "/home/u"}};
  CHECK(only_command(line, start).argv == argv);
}

TEST_CASE("shell_subset: a prefix assignment is not seen by its own command's arguments", "[shell_subset]") {
  // POSIX expands the words before the assignments: `X=1 echo $X` prints the old X.
  auto c = only_command("X=0; X=1 node $X");
  CHECK(c.argv == Argv{"node", "0"});
  CHECK(c.env == Env{{"X", "1"}});
  // Later prefixes see earlier ones, as in dash and bash.
  CHECK(only_command("A=1 B=$A node").env == Env{{"A", "1"}, {"B", "1"}});
}

// ---------------------------------------------------------------- variables and the environment

TEST_CASE("shell_subset: a bare assignment is a shell variable, not in the environment", "[shell_subset]") {
  auto c = only_command("X=1; node -e \"$X\"");
  CHECK(c.argv == Argv{"node", "-e", "1"});
  CHECK(c.env.empty());
}

TEST_CASE("shell_subset: export NAME exports an earlier assignment, and later ones too", "[shell_subset]") {
  CHECK(only_command("X=1; export X; node").env == Env{{"X", "1"}});
  CHECK(only_command("export X; X=2; node").env == Env{{"X", "2"}});
  CHECK(only_command("export X; node").env.empty());  // exported but never set: not in the environment
  CHECK(only_command("export A=1 B=\"x y\" C; node").env == Env{{"A", "1"}, {"B", "x y"}});
  CHECK(only_command("export A=1\nexport B=$A; node").env == Env{{"A", "1"}, {"B", "1"}});
}

TEST_CASE("shell_subset: a prefix assignment holds for that command only", "[shell_subset]") {
  FakeRun fake;
  run_line("X=1 node a; node b", fake);
  REQUIRE(fake.calls.size() == 2);
  CHECK(fake.calls[0].env == Env{{"X", "1"}});
  CHECK(fake.calls[1].env.empty());
}

TEST_CASE("shell_subset: a prefix assignment overrides an exported value for its command", "[shell_subset]") {
  FakeRun fake;
  run_line("export X=1; X=2 node a; node b", fake);
  REQUIRE(fake.calls.size() == 2);
  CHECK(fake.calls[0].env == Env{{"X", "2"}});
  CHECK(fake.calls[1].env == Env{{"X", "1"}});
}

TEST_CASE("shell_subset: a variable of the start env changed by the line reaches commands", "[shell_subset]") {
  sbx::ShellStart start;
  start.env = {{"PATH", "/bin"}, {"LANG", "C"}};
  auto c = only_command("PATH=$PATH:/opt/bin; node", start);
  // Only what the line changed: the rest of the start env is the sandbox's already.
  CHECK(c.env == Env{{"PATH", "/bin:/opt/bin"}});
}

// ---------------------------------------------------------------- cd

TEST_CASE("shell_subset: cd resolves relative to the current directory", "[shell_subset]") {
  auto [line, cwd] = GENERATE(table<std::string, std::string>({
      {"node", ""},
      {"cd /tmp; node", "/tmp"},
      {"cd sub; node", "/work/sub"},
      {"cd sub && cd deeper; node", "/work/sub/deeper"},
      {"cd /a; cd b; node", "/a/b"},
      {"cd /a/b/../c/./d/; node", "/a/c/d"},
      {"cd ..; node", "/"},
      {"cd /; cd ../..; node", "/"},
      {"cd /tmp; cd; node", ""},
      {"cd /tmp; cd \"\"; node", "/tmp"},
      {"D=/srv; cd $D/x; node", "/srv/x"},
      {"cd 'a b'; node", "/work/a b"},
      {"cd $UNSET; node", ""},
  }));
  CAPTURE(line);
  CHECK(only_command(line).cwd == cwd);
}

TEST_CASE("shell_subset: relative cd starts from the given workdir", "[shell_subset]") {
  sbx::ShellStart start;
  start.workdir = "/home/sandbox";
  CHECK(only_command("cd src && node", start).cwd == "/home/sandbox/src");
}

TEST_CASE("shell_subset: cd keeps PWD of the environment up to date", "[shell_subset]") {
  sbx::ShellStart start;
  start.env = {{"PWD", "/elsewhere"}};
  CHECK(only_command("cd /tmp; node", start).env == Env{{"PWD", "/tmp"}});
  CHECK(only_command("node", start).env.empty());
}

TEST_CASE("shell_subset: cd given several directories once expanded is an error", "[shell_subset]") {
  FakeRun fake;
  auto e = error_of([&] { run_line("D='a b'; cd $D; node", fake); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.what(), "cd: too many arguments"));
  CHECK(fake.calls.empty());
}

// ---------------------------------------------------------------- ; and &&

TEST_CASE("shell_subset: ; and && run and skip as sh does, with sh's status", "[shell_subset]") {
  // The fake answers `statuses` in turn; `ran` is each command's argument, in order.
  auto [line, statuses, status, ran] = GENERATE(table<std::string, std::vector<int>, int, Argv>({
      {"node a; node b; node c", {3, 0, 5}, 5, {"a", "b", "c"}},
      {"node a; node b", {3, 0}, 0, {"a", "b"}},
      {"\n\nnode a\n\n  node b  \n# done\n", {1, 7}, 7, {"a", "b"}},
      {"node a && node b && node c", {2}, 2, {"a"}},  // skipped: the status is the failure's
      {"node a && node b; node c", {2, 9}, 9, {"a", "c"}},
      {"node a; node b && node c", {0, 4}, 4, {"a", "b"}},
      {"node a && node b && node c", {0, 4}, 4, {"a", "b"}},
      {"node a && node b && node c", {}, 0, {"a", "b", "c"}},
      {"node a && node b\nnode c && node d", {0, 1, 0, 0}, 0, {"a", "b", "c", "d"}},
      {"node a &&\n\n  node b", {}, 0, {"a", "b"}},  // sh reads on after `&&`
  }));
  CAPTURE(line);
  FakeRun fake;
  fake.statuses = statuses;
  CHECK(run_line(line, fake) == status);
  Argv args;
  for (auto& c : fake.calls) args.push_back(c.argv.at(1));
  CHECK(args == ran);
}

TEST_CASE("shell_subset: a state change after a failed && does not happen", "[shell_subset]") {
  // sh decides as it runs: the export, the cd and the assignment are skipped with the list.
  FakeRun fake;
  fake.statuses = {1};
  CHECK(run_line("node a && export X=1 && cd /tmp; Y=2 && Z=3; node \"$Y$Z\"", fake) == 0);
  REQUIRE(fake.calls.size() == 2);
  CHECK(fake.calls[1].argv == Argv{"node", "23"});
  CHECK(fake.calls[1].env.empty());
  CHECK(fake.calls[1].cwd.empty());
}

TEST_CASE("shell_subset: assignments, export and cd alone succeed", "[shell_subset]") {
  FakeRun fake;
  fake.statuses = {6};
  CHECK(run_line("node a; X=1", fake) == 0);
  CHECK(run_line("X=1; export X; cd /tmp", fake) == 0);
  FakeRun fake2;
  fake2.statuses = {6};
  CHECK(run_line("node a && cd /tmp", fake2) == 6);  // skipped: the status is still node's
}

TEST_CASE("shell_subset: a throwing runner ends the line", "[shell_subset]") {
  int calls = 0;
  auto steps = sbx::parse_shell_subset("node a; node b");
  auto e = error_of([&] {
    sbx::run_shell_subset(steps, [&](const ShellCommand&) -> int {
      ++calls;
      throw sbx::Error(Errc::timeout, "timed out");
    });
  });
  CHECK(e.code() == Errc::timeout);
  CHECK(calls == 1);
}

// ---------------------------------------------------------------- parsing

TEST_CASE("shell_subset: parse gives one step per simple command, with its joint", "[shell_subset]") {
  auto steps = sbx::parse_shell_subset("X=1; export Y=2 && cd /w\nZ=3 node a");
  REQUIRE(steps.size() == 4);
  CHECK(steps[0].kind == ShellStep::Kind::assign);
  CHECK(steps[1].kind == ShellStep::Kind::export_vars);
  CHECK(steps[2].kind == ShellStep::Kind::cd);
  CHECK(steps[3].kind == ShellStep::Kind::run);
  CHECK_FALSE(steps[0].and_then);
  CHECK_FALSE(steps[1].and_then);
  CHECK(steps[2].and_then);
  CHECK_FALSE(steps[3].and_then);
  REQUIRE(steps[3].assignments.size() == 1);
  CHECK(steps[3].assignments[0].name == "Z");
}

TEST_CASE("shell_subset: the programs allowed are the caller's", "[shell_subset]") {
  CHECK_NOTHROW(sbx::parse_shell_subset("nodejs x", {"nodejs"}));
  auto e = error_of([] { sbx::parse_shell_subset("node x", {"python3"}); });
  CHECK(contains(e.what(), "`node`"));
  CHECK(contains(e.what(), "python3"));
}

TEST_CASE("shell_subset: an empty command is invalid", "[shell_subset]") {
  auto line = GENERATE(as<std::string>{}, "", "   ", "\n\n", "# only a comment", " \t\n # c\n");
  CAPTURE(line);
  auto e = refusal(line);
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.what(), "empty"));
}

TEST_CASE("shell_subset: lines sh itself rejects are refused as not sh", "[shell_subset]") {
  auto [line, words] = GENERATE(table<std::string, std::string>({
      {"node 'a", "single quote"},
      {"node \"a", "double quote"},
      {"node \"a'", "double quote"},
      {"node ${X", "`${`"},
      {"; node", "`;` with no command before it"},
      {"node;; node", "`;` with no command before it"},
      {"node a\n; node b", "`;` with no command before it"},
      {"&& node", "`&&` with no command before it"},
      {"node && && node", "`&&` with no command before it"},
      {"node && ; node", "`;` with no command before it"},
      {"node &&", "`&&` at the end"},
      {"node &&\n", "`&&` at the end"},
      {"cd a b", "cd: too many arguments"},
      {"export 1X=2", "is not a NAME"},
      {"export $X", "is not a NAME"},
  }));
  CAPTURE(line);
  auto e = refusal(line);
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.what(), "not valid sh"));
  CHECK(contains(e.what(), words));
}

TEST_CASE("shell_subset: each construct outside the subset is refused by name, pointing at other drivers",
          "[shell_subset]") {
  auto [line, named] = GENERATE(table<std::string, std::string>({
      {"node a | node b", "a pipe `|`"},
      {"node a || node b", "`||`"},
      {"node a & node b", "`&` (run in the background)"},
      {"node a &", "`&` (run in the background)"},
      {"node a > out", "a redirection `>`"},
      {"node a >> out", "a redirection `>`"},
      {"node a 2>&1", "a redirection `>`"},
      {"node a < in", "a redirection `<`"},
      {"node $(cat x)", "command substitution `$(`"},
      {"node \"$(cat x)\"", "command substitution `$(`"},
      {"node $((1+2))", "arithmetic expansion `$((`"},
      {"node `cat x`", "backquotes"},
      {"node \"`cat x`\"", "backquotes"},
      {"node *.py", "`*`"},
      {"node a?", "`?`"},
      {"node [ab]", "`[`"},
      {"[ -f x ]", "`[`"},
      {"(node a)", "a subshell or function `(`"},
      {"f() { node; }", "a subshell or function `(`"},
      {"{ node; }", "`{`"},
      {"node {a,b}", "`{`"},
      {"node ~/x.js", "`~`"},
      {"if node; then node; fi", "the keyword `if`"},
      {"for f in a; do node $f; done", "the keyword `for`"},
      {"while node; do node; done", "the keyword `while`"},
      {"until node; do node; done", "the keyword `until`"},
      {"case x in x) node;; esac", "`)`"},
      {"function f", "the keyword `function`"},
      {"! node", "the keyword `!`"},
      {"node $?", "the special parameter `$?`"},
      {"node $1", "the special parameter `$1`"},
      {"node \"$@\"", "the special parameter `$@`"},
      {"node ${X:-d}", "`${X:-d}`"},
      {"node ${#X}", "`${#X}`"},
      {"node $'a\\n'", "`$'...'` quoting"},
      {"IFS=: node", "setting IFS"},
      {"export IFS=:", "setting IFS"},
      {"export", "`export` without names"},
      {"export -p", "options of `export`"},
      {"cd -", "`cd -`"},
      {"cd -P /tmp", "options of `cd`"},
      {"X=1 cd /tmp", "an assignment before `cd`"},
      {"X=1 export Y", "an assignment before `export`"},
      {"P=node; $P x", "a program name that comes from a variable"},
      {"ls -l", "the program `ls`"},
      {"echo hi", "the program `echo`"},
      {"cd /work && bash run.sh", "the program `bash`"},
      {"node a; sh -c 'node b'", "the program `sh`"},
      {"X=1 env", "the program `env`"},
      {"/bin/cat x", "the program `/bin/cat`"},
      {"pip install x", "the program `pip`"},
  }));
  CAPTURE(line);
  auto e = refusal(line);
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(contains(e.what(), named));
  CHECK(contains(e.what(), "deno driver"));
  CHECK(contains(e.what(), kDrivers));
  CHECK_FALSE(e.hint().empty());
}

TEST_CASE("shell_subset: a refused program names the ones that run", "[shell_subset]") {
  auto e = refusal("ls");
  CHECK(contains(e.what(), "it runs deno, node, python, python3"));
}

TEST_CASE("shell_subset: nothing runs when a later part of the line is refused", "[shell_subset]") {
  // The refusal comes from parsing, before run_shell_subset is ever called.
  auto e = refusal("node a; node b | node c");
  CHECK(contains(e.what(), "a pipe"));
}

TEST_CASE("shell_subset: keywords are keywords only as the command name and unquoted", "[shell_subset]") {
  CHECK(argv_of("node if then fi done") == Argv{"node", "if", "then", "fi", "done"});
  auto e = refusal("'if' x");
  CHECK(contains(e.what(), "the program `if`"));
}
