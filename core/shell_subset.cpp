#include "core/shell_subset.hpp"

#include <cstddef>
#include <utility>

#include "core/error.hpp"

namespace sbx {
namespace {

// ---------------------------------------------------------------- refusals

// What the user can act on: the construct, why it cannot run here, and where it can.
Error refused(const std::string& what) {
  return Error(Errc::invalid_argument,
               what + " is not in the shell subset of the deno driver, which has no shell; " +
                   "full shell commands run on the subprocess, runsc and microvm drivers")
      .set_hint("on deno, keep to python3/python, node and deno commands with `cd`, `export`, `K=V`, "
                "quotes and $VAR, joined by `;`, `&&` or newlines (docs/drivers.md, deno)");
}

// Mistakes sh itself would reject; no driver runs them, so no driver hint.
Error not_sh(const std::string& what) {
  return Error(Errc::invalid_argument, "the command is not valid sh: " + what);
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_name(std::string_view s) {
  if (s.empty() || !is_name_start(s[0])) return false;
  for (char c : s)
    if (!is_name_char(c)) return false;
  return true;
}

// ---------------------------------------------------------------- lexing

enum class Tok { word, semi, and_then, newline, end };

struct Token {
  Tok kind = Tok::end;
  ShellWord word;  ///< for Tok::word
};

// Adds text to a word, merging it with the last part when that is literal
// text of the same quoting, so `A=b` stays one part (assignments are found by
// their first part) while `A\=b` does not.
void add_text(ShellWord& w, std::string_view text, bool quoted) {
  if (!w.empty() && !w.back().variable && w.back().quoted == quoted) {
    w.back().text += text;
    return;
  }
  w.push_back(ShellWordPart{std::string(text), false, quoted});
}

class Lexer {
 public:
  explicit Lexer(std::string_view s) : s_(s) {}
  Token next();

 private:
  void skip_blanks();
  void refuse_operator();
  ShellWord word();
  void unquoted_char(ShellWord& w);
  void single_quoted(ShellWord& w);
  void double_quoted(ShellWord& w);
  void dollar(ShellWord& w, bool quoted);
  void braced_variable(ShellWord& w, bool quoted);
  bool at(char c, size_t ahead = 0) const { return i_ + ahead < s_.size() && s_[i_ + ahead] == c; }

  std::string_view s_;
  size_t i_ = 0;
};

bool is_word_end(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '<' || c == '>' ||
         c == '(' || c == ')';
}

// Blanks, line continuations and a `#` comment up to the end of its line.
void Lexer::skip_blanks() {
  for (;;) {
    if (at(' ') || at('\t')) {
      ++i_;
    } else if (at('\\') && at('\n', 1)) {
      i_ += 2;
    } else if (at('#')) {
      while (i_ < s_.size() && s_[i_] != '\n') ++i_;
    } else {
      return;
    }
  }
}

Token Lexer::next() {
  skip_blanks();
  if (i_ >= s_.size()) return {Tok::end, {}};
  char c = s_[i_];
  if (c == '\n') {
    ++i_;
    return {Tok::newline, {}};
  }
  if (c == ';') {
    ++i_;
    return {Tok::semi, {}};
  }
  if (c == '&' && at('&', 1)) {
    i_ += 2;
    return {Tok::and_then, {}};
  }
  if (is_word_end(c)) refuse_operator();
  return {Tok::word, word()};
}

void Lexer::refuse_operator() {
  char c = s_[i_];
  if (c == '|') throw refused(at('|', 1) ? "`||` (run if the previous failed)" : "a pipe `|`");
  if (c == '&') throw refused("`&` (run in the background)");
  if (c == '<' || c == '>') throw refused(std::string("a redirection `") + c + "`");
  throw refused(std::string("a subshell or function `") + c + "`");
}

ShellWord Lexer::word() {
  ShellWord w;
  while (i_ < s_.size() && !is_word_end(s_[i_])) {
    char c = s_[i_];
    if (c == '\'') {
      single_quoted(w);
    } else if (c == '"') {
      double_quoted(w);
    } else if (c == '$') {
      dollar(w, false);
    } else {
      unquoted_char(w);
    }
  }
  return w;
}

void Lexer::unquoted_char(ShellWord& w) {
  char c = s_[i_];
  if (c == '\\') {
    if (at('\n', 1)) {  // a line continuation vanishes, even inside a word
      i_ += 2;
    } else if (i_ + 1 < s_.size()) {
      add_text(w, s_.substr(i_ + 1, 1), true);
      i_ += 2;
    } else {  // a backslash that ends the line stays, as in dash and bash
      add_text(w, "\\", false);
      ++i_;
    }
    return;
  }
  if (c == '`') throw refused("command substitution with backquotes");
  if (c == '*' || c == '?' || c == '[') throw refused(std::string("an unquoted `") + c + "` (a glob, or the `[` test)");
  if (c == '{' || c == '}') throw refused(std::string("an unquoted `") + c + "` (a brace group or brace expansion)");
  // sh expands `~` only at a word's start or after `=`/`:` of an assignment;
  // refusing it everywhere unquoted keeps that rule out of the subset.
  if (c == '~') throw refused("an unquoted `~` (home directory expansion)");
  add_text(w, s_.substr(i_, 1), false);
  ++i_;
}

void Lexer::single_quoted(ShellWord& w) {
  size_t close = s_.find('\'', i_ + 1);
  if (close == std::string_view::npos) throw not_sh("a single quote (') is never closed");
  add_text(w, s_.substr(i_ + 1, close - i_ - 1), true);
  i_ = close + 1;
}

void Lexer::double_quoted(ShellWord& w) {
  ++i_;
  add_text(w, "", true);  // `""` is still one (empty) argument
  for (;;) {
    if (i_ >= s_.size()) throw not_sh("a double quote (\") is never closed");
    char c = s_[i_];
    if (c == '"') {
      ++i_;
      return;
    }
    if (c == '$') {
      dollar(w, true);
    } else if (c == '`') {
      throw refused("command substitution with backquotes");
    } else if (c == '\\' && at('\n', 1)) {
      i_ += 2;
    } else if (c == '\\' && i_ + 1 < s_.size() && std::string_view("$`\"\\").find(s_[i_ + 1]) != std::string_view::npos) {
      add_text(w, s_.substr(i_ + 1, 1), true);
      i_ += 2;
    } else {  // inside double quotes any other backslash is itself
      add_text(w, s_.substr(i_, 1), true);
      ++i_;
    }
  }
}

void Lexer::dollar(ShellWord& w, bool quoted) {
  if (at('(', 1)) throw refused(at('(', 2) ? "arithmetic expansion `$((`" : "command substitution `$(`");
  if (at('{', 1)) return braced_variable(w, quoted);
  if (i_ + 1 < s_.size() && is_name_start(s_[i_ + 1])) {
    size_t end = i_ + 1;
    while (end < s_.size() && is_name_char(s_[end])) ++end;
    w.push_back(ShellWordPart{std::string(s_.substr(i_ + 1, end - i_ - 1)), true, quoted});
    i_ = end;
    return;
  }
  if (i_ + 1 < s_.size() && std::string_view("?$!#@*-0123456789").find(s_[i_ + 1]) != std::string_view::npos)
    throw refused(std::string("the special parameter `$") + s_[i_ + 1] + "`");
  if (!quoted && at('\'', 1)) throw refused("`$'...'` quoting");
  add_text(w, "$", quoted);  // a `$` before anything else is itself, as in sh
  ++i_;
}

void Lexer::braced_variable(ShellWord& w, bool quoted) {
  size_t close = s_.find('}', i_ + 2);
  if (close == std::string_view::npos) throw not_sh("a `${` is never closed with `}`");
  std::string_view name = s_.substr(i_ + 2, close - i_ - 2);
  if (!is_name(name))
    throw refused("the parameter expansion `${" + std::string(name) + "}` (only ${NAME} is in the subset)");
  w.push_back(ShellWordPart{std::string(name), true, quoted});
  i_ = close + 1;
}

// ---------------------------------------------------------------- parsing

// `NAME=...` whose name is unquoted literal text, as sh recognises assignments.
std::optional<ShellAssignment> as_assignment(const ShellWord& w) {
  if (w.empty() || w[0].variable || w[0].quoted) return std::nullopt;
  size_t eq = w[0].text.find('=');
  if (eq == std::string::npos || !is_name(std::string_view(w[0].text).substr(0, eq))) return std::nullopt;
  ShellWord value = w;
  value[0].text.erase(0, eq + 1);
  return ShellAssignment{w[0].text.substr(0, eq), std::move(value)};
}

// The word's text when it has no expansion in it.
std::optional<std::string> literal_text(const ShellWord& w) {
  std::string out;
  for (auto& p : w) {
    if (p.variable) return std::nullopt;
    out += p.text;
  }
  return out;
}

bool is_keyword(const ShellWord& w) {
  static const std::set<std::string> keywords = {"if",    "then", "else", "elif",  "fi",       "do", "done",
                                                 "case",  "esac", "while", "until", "for",     "in", "function",
                                                 "select", "!"};
  return w.size() == 1 && !w[0].quoted && !w[0].variable && keywords.count(w[0].text) > 0;
}

void check_assignable(const ShellAssignment& a) {
  // Field splitting follows IFS; the subset splits on blanks only, so it keeps IFS fixed.
  if (a.name == "IFS") throw refused("setting IFS");
}

void parse_cd(ShellStep& step, std::vector<ShellWord> args) {
  if (!step.assignments.empty()) throw refused("an assignment before `cd`");
  auto first = args.empty() ? std::nullopt : literal_text(args[0]);
  if (first && *first == "-" && !args[0][0].quoted) throw refused("`cd -`");
  if (first && first->size() > 1 && (*first)[0] == '-' && !args[0][0].quoted) throw refused("options of `cd`");
  if (args.size() > 1) throw not_sh("cd: too many arguments");
  step.kind = ShellStep::Kind::cd;
  step.words = std::move(args);
}

void parse_export(ShellStep& step, std::vector<ShellWord> args) {
  if (!step.assignments.empty()) throw refused("an assignment before `export`");
  if (args.empty()) throw refused("`export` without names (it lists the variables)");
  for (auto& arg : args) {
    if (auto a = as_assignment(arg)) {
      check_assignable(*a);
      step.assignments.push_back(std::move(*a));
      continue;
    }
    auto text = literal_text(arg);
    if (text && !text->empty() && (*text)[0] == '-') throw refused("options of `export`");
    if (!text || !is_name(*text)) throw not_sh("export: `" + text.value_or("$...") + "` is not a NAME or NAME=VALUE");
    step.assignments.push_back(ShellAssignment{*text, std::nullopt});
    check_assignable(step.assignments.back());
  }
  step.kind = ShellStep::Kind::export_vars;
}

void parse_program(ShellStep& step, std::vector<ShellWord> words, const std::set<std::string>& programs) {
  auto name = literal_text(words[0]);
  if (!name) throw refused("a program name that comes from a variable");
  size_t slash = name->rfind('/');
  std::string base = slash == std::string::npos ? *name : name->substr(slash + 1);
  if (programs.count(base) == 0) {
    std::string list;
    for (auto& p : programs) list += (list.empty() ? "" : ", ") + p;
    throw refused("the program `" + *name + "` (it runs " + list + ")");
  }
  // Debian images and the deno agent alike know Python 3 as python3; a bare
  // `python` means that on every driver (issue 10).
  if (base == "python") words[0] = ShellWord{{name->substr(0, slash + 1) + "python3", false, true}};
  step.kind = ShellStep::Kind::run;
  step.words = std::move(words);
}

ShellStep parse_step(std::vector<ShellWord> words, bool and_then, const std::set<std::string>& programs) {
  ShellStep step;
  step.and_then = and_then;
  size_t i = 0;
  for (; i < words.size(); ++i) {
    auto a = as_assignment(words[i]);
    if (!a) break;
    check_assignable(*a);
    step.assignments.push_back(std::move(*a));
  }
  words.erase(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(i));
  if (words.empty()) {
    step.kind = ShellStep::Kind::assign;
    return step;
  }
  if (is_keyword(words[0])) throw refused("the keyword `" + words[0][0].text + "`");
  auto name = literal_text(words[0]);
  if (name != "cd" && name != "export") {
    parse_program(step, std::move(words), programs);
    return step;
  }
  words.erase(words.begin());
  if (name == "cd") {
    parse_cd(step, std::move(words));
  } else {
    parse_export(step, std::move(words));
  }
  return step;
}

// ---------------------------------------------------------------- running

// The shell's state while a line runs.
struct ShellState {
  std::map<std::string, std::string> vars;  ///< every shell variable, the environment's included
  std::set<std::string> exported;           ///< names marked for the environment
  std::set<std::string> changed;            ///< names the line set or exported: what commands get on top
  std::string cwd;                          ///< "" = workdir
  std::string workdir;                      ///< the sandbox's

  void set(const std::string& name, std::string value) {
    vars[name] = std::move(value);
    changed.insert(name);
  }
};

std::string lookup(const std::map<std::string, std::string>& vars, const std::string& name) {
  auto it = vars.find(name);
  return it == vars.end() ? std::string() : it->second;  // unset expands to nothing, as in sh
}

// A word's fields: unquoted expansions split on blanks (an empty one gives no
// field at all), quoted text keeps its field even when empty. There is no
// pathname expansion: a `*` from a variable stays itself, as sh leaves a glob
// that matches nothing.
std::vector<std::string> expand_fields(const ShellWord& w, const std::map<std::string, std::string>& vars) {
  std::vector<std::string> fields;
  std::string cur;
  bool have = false;
  for (auto& p : w) {
    if (!p.variable || p.quoted) {
      cur += p.variable ? lookup(vars, p.text) : p.text;
      have = have || p.quoted || !p.text.empty();
      continue;
    }
    for (char c : lookup(vars, p.text)) {
      if (c == ' ' || c == '\t' || c == '\n') {
        if (have) fields.push_back(std::move(cur));
        cur.clear();
        have = false;
      } else {
        cur += c;
        have = true;
      }
    }
  }
  if (have) fields.push_back(std::move(cur));
  return fields;
}

// An assignment's value: expanded, never split.
std::string expand_joined(const ShellWord& w, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (auto& p : w) out += p.variable ? lookup(vars, p.text) : p.text;
  return out;
}

// Lexical, as `cd` without -P: `a/../b` is b whatever a is.
std::string normalize(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string seg = path.substr(i, j - i);
    if (seg == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!seg.empty() && seg != ".") {
      parts.push_back(std::move(seg));
    }
    i = j + 1;
  }
  std::string out;
  for (auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

void run_cd(const ShellStep& step, ShellState& st) {
  std::vector<std::string> dirs;
  for (auto& w : step.words)
    for (auto& f : expand_fields(w, st.vars)) dirs.push_back(std::move(f));
  if (dirs.size() > 1) throw Error(Errc::invalid_argument, "cd: too many arguments once $variables are expanded");
  if (dirs.empty()) {
    st.cwd.clear();
  } else if (!dirs[0].empty()) {  // `cd ""` stays where it is
    const std::string& here = st.cwd.empty() ? st.workdir : st.cwd;
    st.cwd = normalize(dirs[0][0] == '/' ? dirs[0] : here + "/" + dirs[0]);
  }
  st.set("PWD", st.cwd.empty() ? st.workdir : st.cwd);
}

int run_program(const ShellStep& step, const ShellState& st, const ShellRunFn& run) {
  ShellCommand cmd;
  // sh expands the words before the prefix assignments take effect: in
  // `X=1 node -e "$X"` the argument sees the old X.
  for (auto& w : step.words)
    for (auto& f : expand_fields(w, st.vars)) cmd.argv.push_back(std::move(f));
  for (auto& name : st.changed)
    if (st.exported.count(name) && st.vars.count(name)) cmd.env[name] = st.vars.at(name);
  auto vars = st.vars;  // later prefixes see earlier ones: `A=1 B=$A cmd` gives B=1
  for (auto& a : step.assignments) {
    vars[a.name] = expand_joined(*a.value, vars);
    cmd.env[a.name] = vars[a.name];
  }
  cmd.cwd = st.cwd;
  return run(cmd);
}

int run_step(const ShellStep& step, ShellState& st, const ShellRunFn& run) {
  switch (step.kind) {
    case ShellStep::Kind::run:
      return run_program(step, st, run);
    case ShellStep::Kind::cd:
      run_cd(step, st);
      return 0;
    case ShellStep::Kind::assign:
    case ShellStep::Kind::export_vars:
      for (auto& a : step.assignments) {
        if (a.value) st.set(a.name, expand_joined(*a.value, st.vars));
        if (step.kind == ShellStep::Kind::export_vars) {
          st.exported.insert(a.name);
          st.changed.insert(a.name);
        }
      }
      return 0;
  }
  return 0;
}

}  // namespace

const std::set<std::string>& deno_shell_programs() {
  static const std::set<std::string> programs = {"deno", "node", "python", "python3"};
  return programs;
}

std::vector<ShellStep> parse_shell_subset(std::string_view command, const std::set<std::string>& programs) {
  Lexer lex(command);
  std::vector<ShellStep> steps;
  std::vector<ShellWord> words;
  bool and_then = false;  // the step being read follows `&&`
  for (;;) {
    Token t = lex.next();
    if (t.kind == Tok::word) {
      words.push_back(std::move(t.word));
      continue;
    }
    if (!words.empty()) {
      steps.push_back(parse_step(std::move(words), and_then, programs));
      words.clear();
      and_then = false;
    } else if (t.kind == Tok::end && and_then) {
      throw not_sh("`&&` at the end, with no command after it");
    } else if (t.kind == Tok::semi || t.kind == Tok::and_then) {
      // After `&&` sh reads on across newlines (skipped here), but not across `;` or another `&&`.
      throw not_sh(std::string(t.kind == Tok::semi ? "`;`" : "`&&`") + " with no command before it");
    }
    if (t.kind == Tok::and_then) and_then = true;
    if (t.kind == Tok::end) break;
  }
  if (steps.empty()) throw Error(Errc::invalid_argument, "the command is empty");
  return steps;
}

int run_shell_subset(const std::vector<ShellStep>& steps, const ShellRunFn& run, const ShellStart& start) {
  ShellState st;
  st.vars = start.env;
  for (auto& [name, value] : start.env) st.exported.insert(name);
  st.workdir = start.workdir;
  st.vars["PWD"] = start.workdir;  // sh sets PWD itself at start, whatever it inherited
  int status = 0;
  for (auto& step : steps) {
    // With no `||` in the subset, a failed status skips every `&&` step up to the next `;`.
    if (step.and_then && status != 0) continue;
    status = run_step(step, st, run);
  }
  return status;
}

}  // namespace sbx
