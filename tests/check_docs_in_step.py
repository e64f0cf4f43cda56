#!/usr/bin/env python3
"""Keep man pages and shell completions in step with the real flags.

Reads docs/cli.md (the source of truth): for each `## sbx SUB` section, every
line starting with "- `--flag" or "- `-x, --flag" names flags of SUB; a line
"- plus all `OTHER` flags" adds OTHER's flags; the "Global flags" line adds
flags every subcommand takes. Each flag must appear in man/sbx-SUB.1 and in
completions/sbx.bash, completions/_sbx and completions/sbx.fish. Each SUB must
also be named in man/sbx.1 and in the three completion files.

With --help-cmd PATH_TO_SBX, also runs `PATH_TO_SBX --help` and checks that
every subcommand it lists has its `## sbx SUB` section in docs/cli.md (so a new
subcommand such as serve cannot be left out), then runs `PATH_TO_SBX SUB --help`
for each subcommand and checks every long flag it prints (but --help) the same way.

Prints one line per failure, then "N passed, N failed"; exits 1 on any failure.
Python 3 standard library only.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

COMPLETIONS = ("completions/sbx.bash", "completions/_sbx", "completions/sbx.fish")
FLAG = r"--?[A-Za-z0-9][\w-]*"


def parse_cli_md(text):
    """Returns ({sub: [flags]}, [global flags])."""
    own, inherits, order = {}, {}, []
    global_flags = []
    sub = None
    for line in text.splitlines():
        m = re.match(r"##\s+sbx\s+([a-z][\w-]*)", line)
        if m:
            sub = m.group(1)
            if sub not in own:
                own[sub], inherits[sub] = [], []
                order.append(sub)
            continue
        if line.startswith("## "):
            sub = None
            continue
        if line.startswith("Global flags"):
            for span in re.findall(r"`([^`]*)`", line):
                global_flags += [f for f in re.findall(FLAG, span.replace("/", " ")) if f != "--version"]
            continue
        if sub is None:
            continue
        m = re.match(r"-\s+`(-[^`]*)`", line)
        if m:
            # "--flag ARG" or "-x, --flag ARG": the flag names before any argument
            for part in m.group(1).split(","):
                words = part.split()
                if words and re.fullmatch(FLAG, words[0]):
                    own[sub].append(words[0])
            continue
        m = re.match(r"-\s+plus all\s+`([\w-]+)`\s+flags", line)
        if m:
            inherits[sub].append(m.group(1))

    def flags_of(s, seen=()):
        out = list(own.get(s, []))
        for other in inherits.get(s, []):
            if other not in seen:
                out += flags_of(other, seen + (s,))
        return out

    return {s: list(dict.fromkeys(flags_of(s) + global_flags)) for s in order}, global_flags


def roff_to_text(text):
    text = re.sub(r"^\.\\\".*$", "", text, flags=re.M)       # comments
    text = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", text)      # font changes
    text = text.replace("\\-", "-").replace("\\(en", "-")
    return re.sub(r"\\[&%:]", "", text)


def present(flag, text, fish=False):
    if fish:
        if flag.startswith("--"):
            pat = r"(?:-l|--long(?:-option)?)(?:\s+|=)['\"]?" + re.escape(flag[2:]) + r"(?![\w-])"
        else:
            pat = r"(?:-s|--short(?:-option)?)(?:\s+|=)['\"]?" + re.escape(flag[1:]) + r"(?![\w-])"
    else:
        pat = r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])"
    return re.search(pat, text) is not None


def help_subcommands(sbx):
    """(subcommands listed by `sbx --help`, None) or (None, why it failed)."""
    try:
        r = subprocess.run([sbx, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if r.returncode != 0:
        return None, f"exit status {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}"
    subs, listing = [], False
    for line in (r.stdout + r.stderr).splitlines():
        if re.match(r"\s*(sub)?commands:\s*$", line, flags=re.I):
            listing = True
            continue
        if listing:
            m = re.match(r"\s+([a-z][\w-]*)(\s|$)", line)
            if m:
                subs.append(m.group(1))
            elif line.strip():
                listing = False
    return subs, None


def help_flags(sbx, sub):
    """(long flags printed by `sbx SUB --help`, None) or (None, why it failed)."""
    try:
        r = subprocess.run([sbx, sub, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if r.returncode != 0:
        return None, f"exit status {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}"
    flags = re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", r.stdout + r.stderr)
    return [f for f in dict.fromkeys(flags) if f != "--help"], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--help-cmd", metavar="PATH_TO_SBX", help="also check the flags `SBX SUB --help` prints")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="source tree (default: the one holding this script)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print passing checks too")
    args = ap.parse_args()

    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        if ok:
            passed += 1
            if args.verbose:
                print(f"ok: {what}")
        else:
            failed += 1
            print(f"FAIL: {what}")

    cli_md = args.root / "docs/cli.md"
    try:
        subs, _ = parse_cli_md(cli_md.read_text(encoding="utf-8"))
    except OSError as e:
        print(f"FAIL: cannot read {cli_md}: {e}")
        print("0 passed, 1 failed")
        return 1
    check(bool(subs), f"{cli_md} names subcommands and their flags")

    completions = {}
    for rel in COMPLETIONS:
        try:
            completions[rel] = (args.root / rel).read_text(encoding="utf-8")
        except OSError:
            check(False, f"{rel} exists")

    try:
        main_man = roff_to_text((args.root / "man/sbx.1").read_text(encoding="utf-8"))
    except OSError:
        check(False, "man/sbx.1 exists")
        main_man = None
    for sub in subs:
        word = r"(?<![\w-])" + re.escape(sub) + r"(?![\w-])"
        if main_man is not None:
            check(re.search(r"sbx-" + re.escape(sub) + r"\s*\(1\)", main_man) is not None,
                  f"subcommand {sub} listed in man/sbx.1 as sbx-{sub}(1)")
        for rel, text in completions.items():
            check(re.search(word, text) is not None, f"subcommand {sub} in {rel}")

    if args.help_cmd:
        hsubs, why = help_subcommands(args.help_cmd)
        if hsubs is None:
            check(False, f"`{args.help_cmd} --help` runs ({why})")
        else:
            check(bool(hsubs), f"`{args.help_cmd} --help` lists subcommands")
            for sub in hsubs:
                check(sub in subs, f"subcommand {sub} (from --help) has a `## sbx {sub}` section in {cli_md}")

    def check_flags(sub, flags, man_rel, man, source):
        for flag in flags:
            if man is not None:
                check(present(flag, man), f"{sub} {flag} ({source}) in {man_rel}")
            for rel, text in completions.items():
                check(present(flag, text, fish=rel.endswith(".fish")), f"{sub} {flag} ({source}) in {rel}")

    for sub, flags in subs.items():
        man_rel = f"man/sbx-{sub}.1"
        try:
            man = roff_to_text((args.root / man_rel).read_text(encoding="utf-8"))
        except OSError:
            check(False, f"{man_rel} exists")
            man = None
        check_flags(sub, flags, man_rel, man, "docs/cli.md")
        if args.help_cmd:
            hflags, why = help_flags(args.help_cmd, sub)
            if hflags is None:
                check(False, f"`{args.help_cmd} {sub} --help` runs ({why})")
            else:
                check_flags(sub, hflags, man_rel, man, "--help")

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
