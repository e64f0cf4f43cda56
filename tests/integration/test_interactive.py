"""`sbx exec -t` / `-it`: a real shell on a real terminal in the sandbox,
driven through a real pty on this side (ptyterm.py): prompt, `tty`, job
control, window sizes, Ctrl-C, Ctrl-D, exit status, and the host terminal put
back afterwards however sbx ends."""
from __future__ import annotations

import re
import signal
import termios

import pytest

from conftest import wait_until
from ptyterm import PtyRun

pytestmark = [
    pytest.mark.only_drivers("subprocess", "runsc", "microvm", "remote"),
]

PS1 = "sbxit$ "
PROMPT = re.escape(PS1)  # what expect() looks for: a regex


# bash without its rc files, which set a PS1 of their own.
SHELL_ARGV = {"sh": ["sh"], "bash": ["bash", "--norc", "--noprofile"]}


def _shell(sbx, sid, shell="sh", rows=24, cols=80, flags=()):
    return PtyRun(sbx.argv("exec", "-it", "-e", f"PS1={PS1}", *flags, sid, "--", *SHELL_ARGV[shell]),
                  sbx.env({"TERM": "xterm-256color"}), rows=rows, cols=cols)


def _shells(sbx, sid) -> list[str]:
    r = sbx.sh(sid, "command -v bash >/dev/null && echo bash; true")
    return ["sh"] + r.out.split()


def _sleep_state(sbx, sid) -> str:
    """The state letter (R, S, T, ...) of the one `sleep` in the sandbox, "" when none runs."""
    r = sbx.sh(sid, "for f in /proc/[0-9]*/stat; do read -r l < $f 2>/dev/null || continue; "
                    "case $l in *'(sleep)'*) set -- ${l##*)}; echo $1;; esac; done")
    return r.out.strip()


def _is_raw(attrs) -> bool:
    return not (attrs[3] & termios.ICANON) and not (attrs[3] & termios.ECHO)


def test_a_shell_on_a_terminal(sbx, sandbox):
    for shell in _shells(sbx, sandbox):
        with _shell(sbx, sandbox, shell, rows=33, cols=101) as t:
            t.expect(PROMPT)
            assert _is_raw(t.attrs()), "the host terminal is not in raw mode during the session"
            t.send("tty\r")
            t.expect(r"/dev/pts/\d+\r\n")
            t.send("stty size\r")
            t.expect(r"33 101\r\n")
            t.resize(40, 120)
            t.send("stty size\r")
            t.expect(r"40 120\r\n")
            t.send("echo $TERM\r")
            t.expect(r"xterm-256color\r\n")
            t.send("exit 3\r")
            assert t.wait() == 3, (shell, t.out[-500:])
            assert t.attrs() == t.before, f"{shell}: the host terminal was not put back"


# gVisor 20221219's terminals send no SIGINT/SIGTSTP for Ctrl-C/Ctrl-Z: the
# agent finds the keys in the input and has the shim raise them (agent/pty.hpp),
# so these run on runsc too. What the agent cannot make up for is VEOF.
NO_VEOF = ("gVisor 20221219's line discipline ignores Ctrl-D on an empty line (read() does not return 0), "
           "so dash, which reads in canonical mode, does not end; bash reads keys itself and does")


def test_job_control_ctrl_z_fg_and_ctrl_c(sbx, sandbox):
    for shell in _shells(sbx, sandbox):
        with _shell(sbx, sandbox, shell) as t:
            t.expect(PROMPT)
            t.send("sleep 100\r")
            # Typed keys go to whoever holds the terminal: wait until that is the job.
            assert wait_until(lambda: _sleep_state(sbx, sandbox) in ("S", "R"), 20), _sleep_state(sbx, sandbox)
            t.send(b"\x1a")  # Ctrl-Z reaches the shell's job, not sbx
            t.expect("Stopped")
            t.expect(PROMPT)
            assert _sleep_state(sbx, sandbox) == "T"
            t.send("fg\r")
            assert wait_until(lambda: _sleep_state(sbx, sandbox) in ("S", "R"), 20), _sleep_state(sbx, sandbox)
            t.send(b"\x03")  # Ctrl-C ends the job in the foreground
            t.expect(PROMPT)
            assert _sleep_state(sbx, sandbox) == ""
            t.send("echo after-$((40+2))\r")
            t.expect("after-42")
            t.expect(PROMPT)
            t.send("exit 0\r")
            assert t.wait() == 0, (shell, t.out[-500:])
            assert t.attrs() == t.before


@pytest.mark.xfail_drivers(runsc=NO_VEOF)
def test_ctrl_d_at_the_prompt_ends_the_shell(sbx, sandbox):
    for shell in _shells(sbx, sandbox):
        with _shell(sbx, sandbox, shell) as t:
            t.expect(PROMPT)
            t.send("echo before-$((40+2))\r")
            t.expect("before-42")
            # At the prompt, not before: a key typed while the shell runs a command
            # meets the terminal in the mode the command left it in.
            t.expect(PROMPT)
            t.send(b"\x04")
            assert t.wait() == 0, (shell, t.out[-500:])
            assert t.attrs() == t.before


def test_ctrl_c_of_a_running_command(sbx, sandbox):
    with PtyRun(sbx.argv("exec", "-it", sandbox, "--", "sh", "-c", "echo ready; sleep 100; echo not-reached"),
                sbx.env()) as t:
        t.expect("ready")
        # A ^C before sleep starts would reach only sh, which acts on it once sleep is done.
        assert wait_until(lambda: _sleep_state(sbx, sandbox) in ("S", "R"), 20)
        t.send(b"\x03")
        rc = t.wait()
        assert rc == 130 and b"not-reached" not in t.out, (rc, t.out)
        assert t.attrs() == t.before


def test_sigterm_to_sbx_ends_the_session_and_restores_the_terminal(sbx, sandbox):
    with _shell(sbx, sandbox) as t:
        t.expect(PROMPT)
        t.p.send_signal(signal.SIGTERM)
        rc = t.wait()
        assert rc == 128 + signal.SIGHUP, (rc, t.out[-500:])  # the shell hears its terminal hang up
        assert t.attrs() == t.before


def test_one_shot_shell_on_a_terminal(sbx, driver):
    before = set(sbx.ls_ids())
    with PtyRun(sbx.argv("exec", "--rm", "--driver", driver, "-it", "-e", f"PS1={PS1}", "--", "sh"), sbx.env()) as t:
        t.expect(PROMPT, timeout=120)
        t.send("tty; exit 4\r")
        t.expect(r"/dev/pts/\d+")
        assert t.wait() == 4
        assert t.attrs() == t.before
    assert set(sbx.ls_ids()) <= before


def test_tty_needs_a_terminal(sbx, sandbox):
    r = sbx.run("exec", "-t", sandbox, "--", "true", input=b"")
    assert r.rc == 2 and r.err.startswith("sbx: error: -t needs a terminal"), r


def test_interactive_without_a_terminal_still_streams(sbx, sandbox):
    r = sbx.run("exec", "-i", sandbox, "--", "sh", "-c", "read a; echo got:$a; tty || true", input=b"line\n")
    assert r.rc == 0 and r.out.startswith("got:line\n") and "not a tty" in r.out, r
