"""The deno driver's side of interactive sandboxes (issue 12): its agent's
answers to protocol v2 (no background processes, no ports), and the terminal
it emulates for `sbx exec -t` (no kernel, so no line discipline: the agent
echoes and edits the line itself, with history): the Python console and the JS REPL.

Each is shown twice: speaking the agent protocol to the sandbox's socket
directly (agent_proto.py), and through `sbx exec -t` on a real PTY (Python's
pty module) once the CLI has -t. Runs whenever the deno driver is available.
"""
from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import subprocess
import termios
import time

import pytest

from agent_proto import AgentConn, Session
from test_deno import box, deno, on_deno  # noqa: F401  (fixtures)

pytestmark = pytest.mark.only_drivers("deno")

LISTEN = "deno sandboxes have no listening sockets"


@pytest.fixture
def agent(deno, box):  # noqa: F811
    conn = AgentConn(os.path.join(deno.sandbox_dir(box), "deno", "agent.sock"))
    yield conn
    conn.close()


def tty_exec(agent, ch, *cmd):
    return Session(agent, ch, {"cmd": list(cmd), "tty": True, "rows": 30, "cols": 100, "stdin": True})


UP, DOWN, RIGHT, LEFT, HOME, END, DELETE = b"\x1b[A", b"\x1b[B", b"\x1b[C", b"\x1b[D", b"\x1b[H", b"\x1b[F", b"\x1b[3~"


def screen_line(shown: bytes) -> str:
    """The last line `shown` leaves on a terminal's screen: a character overwrites
    the one at the cursor, "\\b" and CSI n D move left, CSI K clears to the end."""
    line, cur = [], 0
    for m in re.finditer(r"\x1b\[(\d*)([DK])|\r\n|.", shown.decode(), re.S):
        if m[0] == "\r\n":
            line, cur = [], 0
        elif m[2] == "K":
            del line[cur:]
        elif m[2] == "D" or m[0] == "\b":
            cur = max(0, cur - int(m[1] or 1))
        else:
            line[cur:cur + 1] = [m[0]]
            cur += 1
    return "".join(line)


def enter(s, keys: bytes):
    """Types keys and Enter in the Python console: the line on the screen when
    Enter came, and what was printed up to the next prompt."""
    s.type(keys + b"\r")
    typed, _, printed = s.until(b">>> ").partition(b"\r\n")
    return screen_line(typed), printed


# --------------------------------------------------------------------------
# protocol v2
# --------------------------------------------------------------------------


def test_agent_speaks_protocol_v2(agent):
    kind, body = agent.request("ping", 1, {})
    assert kind == "ok" and body["version"] == 2, body
    assert agent.request("proc_list", 2, {}) == ("ok", {"procs": []})
    for ch, frame in ((3, "proc_attach"), (4, "proc_signal")):
        kind, body = agent.request(frame, ch, {"pid": 7, "signal": 15, "follow": True})
        assert kind == "error" and body["code"] == "not_found" and "no background process 7" in body["message"], body
    kind, body = agent.request("connect", 5, {"port": 8000})
    assert kind == "error" and body["code"] == "unavailable" and LISTEN in body["message"], body
    assert "--driver subprocess" in body["message"], body
    kind, body = agent.request("exec", 6, {"cmd": ["python3", "-c", "print(1)"], "background": True})
    assert kind == "error" and body["code"] == "unavailable", body
    assert "no background processes" in body["message"] and "--driver subprocess" in body["message"], body
    # The connection is still good after all of them.
    assert agent.request("ping", 7, {})[0] == "ok"


# --------------------------------------------------------------------------
# the Python console, at the protocol level
# --------------------------------------------------------------------------


def test_python_console_prompts_blocks_and_tracebacks(agent):
    s = tty_exec(agent, 10, "python3")
    banner = s.until(b">>> ")
    assert b"Pyodide" in banner and b"\r\n>>> " in banner, banner
    s.type(b"6 * 7\r")
    assert s.until(b">>> ") == b"6 * 7\r\n42\r\n>>> "
    s.type(b"def double(x):\r")
    assert s.until(b"... ").endswith(b"def double(x):\r\n... ")
    s.type(b"\treturn x * 2\r")  # Tab indents (four spaces)
    s.until(b"... ")
    s.type(b"\r")
    s.until(b">>> ")
    s.type(b"double(21)\r")
    assert s.until(b">>> ").endswith(b"42\r\n>>> ")
    s.type(b"1 / 0\r")
    out = s.until(b">>> ")
    assert b"Traceback (most recent call last):\r\n" in out and b"ZeroDivisionError: division by zero\r\n>>> " in out, out
    s.type(b"for i in range(2):\r    print('line', i)\r\r")
    assert s.until(b"line 1\r\n>>> ").count(b"line ") == 2
    s.type(b"exit()\r")
    assert s.wait()["exit_code"] == 0


def test_python_console_line_editing_and_control_keys(agent):
    s = tty_exec(agent, 11, "python3")
    s.until(b">>> ")
    # Backspace erases on the screen and in the line; keys the line editor
    # does not know (F5, Shift-Tab, Alt-x) type nothing.
    s.type(b"'abx\x7fc\x1b[15~\x1b[Z\x1bx'\r")
    out = s.until(b">>> ")
    assert out.startswith(b"'abx\b\x1b[Kc'\r\n") and b"'abc'\r\n>>> " in out, out
    # Ctrl-C at the prompt drops the line: KeyboardInterrupt, and the console goes on.
    s.type(b"12345\x03")
    assert s.until(b">>> ") == b"12345^C\r\nKeyboardInterrupt\r\n>>> "
    # Ctrl-C stops running code.
    s.type(b"import time\rwhile True: time.sleep(0.01)\r\r")
    s.until(b"... ")
    time.sleep(0.5)
    s.type(b"\x03")
    out = s.until(b">>> ")
    assert b"KeyboardInterrupt" in out, out
    # A terminal, and input() reads a typed line.
    s.type(b"import sys; print(sys.stdin.isatty(), sys.stdout.isatty())\r")
    assert b"True True\r\n>>> " in s.until(b">>> ")
    s.type(b"name = input('name? ')\r")
    s.until(b"name? ")
    s.type(b"bob\r")
    s.until(b">>> ")
    s.type(b"name.upper()\r")
    assert b"'BOB'\r\n>>> " in s.until(b">>> ")
    # stdin_eof is not the user's Ctrl-D on a terminal: the console stays.
    agent.send("stdin_eof", 11)
    s.type(b"'still here'\r")
    assert b"'still here'\r\n>>> " in s.until(b">>> ")
    s.type(b"\x04")  # Ctrl-D on an empty line
    assert s.wait()["exit_code"] == 0


def test_python_console_history(agent):
    s = tty_exec(agent, 16, "python3")
    s.until(b">>> ")
    enter(s, b"x = 6*7")
    assert enter(s, b"print(x)") == ("print(x)", b"42\r\n>>> ")
    # Up brings back the last line, drawn after the prompt.
    s.type(UP + b"\r")
    assert s.until(b">>> ") == b"print(x)\r\n42\r\n>>> "
    # A repeated line is one entry: two Ups (SS3 this time) reach `x = 6*7`, which is then edited.
    assert enter(s, b"\x1bOA\x1bOA\x7f8") == ("x = 6*8", b">>> ")
    # Ctrl-P twice: past the newest, `x = 6*8`, to `print(x)`.
    assert enter(s, b"\x10\x10") == ("print(x)", b"48\r\n>>> ")
    # The line being typed is kept while older ones are shown; Down (and Ctrl-N)
    # comes back to it, and no further.
    assert enter(s, b"'draft'" + UP + UP + DOWN + b"\x0e" + DOWN) == ("'draft'", b"'draft'\r\n>>> ")
    # A line dropped by Ctrl-C is not kept.
    s.type(b"'dropped'\x03")
    s.until(b">>> ")
    assert enter(s, UP) == ("'draft'", b"'draft'\r\n>>> ")
    s.type(b"\x04")
    assert s.wait()["exit_code"] == 0


def test_python_console_cursor_movement_and_editing(agent):
    s = tty_exec(agent, 17, "python3")
    s.until(b">>> ")
    # Typing in the middle of the line: the rest is printed again and the cursor put back.
    s.type(b"prnt(5)" + LEFT * 5 + b"i\r")
    assert s.until(b">>> ") == b"prnt(5)\b\b\b\b\bint(5)\x1b[5Dnt(5)\r\n5\r\n>>> "
    # Home and End as the different terminals send them, and Ctrl-A/Ctrl-E.
    for home, end in ((HOME, END), (b"\x1bOH", b"\x1bOF"), (b"\x1b[1~", b"\x1b[4~"), (b"\x01", b"\x05")):
        assert enter(s, b"rint(6" + home + b"p" + end + b")") == ("print(6)", b"6\r\n>>> "), (home, end)
    # Right, Delete under the cursor, Backspace before it.
    assert enter(s, b"print(17)" + HOME + RIGHT * 6 + DELETE) == ("print(7)", b"7\r\n>>> ")
    assert enter(s, b"print(123)" + LEFT + b"\x7f") == ("print(12)", b"12\r\n>>> ")
    # Ctrl-K kills to the end of the line, Ctrl-U to its start.
    assert enter(s, b"print(7)junk" + LEFT * 4 + b"\x0b") == ("print(7)", b"7\r\n>>> ")
    assert enter(s, b"junkprint(8)\x01" + RIGHT * 4 + b"\x15") == ("print(8)", b"8\r\n>>> ")
    # A multi-byte character is one column.
    assert enter(s, "'hé'".encode() + LEFT + b"\x7f" + "ü".encode()) == ("'hü'", "'hü'\r\n>>> ".encode())
    # Ctrl-C with the cursor inside the line: ^C after all of it.
    s.type(b"12345" + LEFT * 3 + b"\x03")
    assert s.until(b">>> ") == b"12345\b\b\b345^C\r\nKeyboardInterrupt\r\n>>> "
    s.type(b"\x04")
    assert s.wait()["exit_code"] == 0
    # Ctrl-D inside a line hands over all of it (input() reads on to the newline, as on a Unix tty).
    s = tty_exec(agent, 18, "python3", "-c", "print(repr(input('? ')))")
    s.until(b"? ")
    s.type(b"abc" + LEFT * 2 + b"\x04")
    s.until(b"abc\b\bbc")
    s.type(b"de\r")
    assert s.wait()["exit_code"] == 0 and s.output.endswith(b"'abcde'\r\n"), s.output


def test_python_console_exit_status_and_dash_i(agent):
    s = tty_exec(agent, 12, "python3")
    s.until(b">>> ")
    s.type(b"raise SystemExit(3)\r")
    assert s.wait()["exit_code"] == 3
    # -i: the script, then the console in its globals.
    s = tty_exec(agent, 13, "python3", "-i", "-c", "x = 'from the script'")
    s.until(b">>> ")
    s.type(b"x\r")
    assert b"'from the script'" in s.until(b">>> ")
    s.type(b"exit(5)\r")
    assert s.wait()["exit_code"] == 5
    # A script on a terminal: input() with echo, Ctrl-D an EOFError it may catch.
    s = tty_exec(agent, 14, "python3", "-c",
                 "try:\n  input('? ')\nexcept EOFError:\n  print('eof')\nprint(input('again? '))")
    s.until(b"? ")
    s.type(b"\x04")
    s.until(b"again? ")
    s.type(b"yes\r")
    assert s.wait()["exit_code"] == 0 and s.output.endswith(b"eof\r\nagain? yes\r\nyes\r\n"), s.output


def test_dropped_connection_ends_the_console(deno, box, agent):  # noqa: F811
    s = tty_exec(agent, 15, "python3")
    s.until(b">>> ")
    agent.close()
    # The interpreter is back for the next exec (the console did not swallow the kill).
    r = deno.exec(box, "python3", "-c", "print('next')").ok()
    assert r.out == "next\n"
    log = open(os.path.join(deno.sandbox_dir(box), "deno", "agent.log")).read()
    assert "did not stop" not in log, log


# --------------------------------------------------------------------------
# the JS REPL, and what else -t runs
# --------------------------------------------------------------------------


def test_js_repl(agent):
    s = tty_exec(agent, 20, "node")
    assert b"REPL" in s.until(b"> ")
    s.type(b"let x = 20\r")
    assert s.until(b"> ").endswith(b"undefined\r\n> ")
    s.type(b"x + 22\r")  # let carries over to the next line
    assert s.until(b"> ").endswith(b"42\r\n> ")
    s.type(b"function twice(a) {\r")
    assert s.until(b"... ").endswith(b"... ")
    s.type(b"  return a * 2\r}\r")
    s.until(b"undefined\r\n> ")
    s.type(b"twice(x)\r")
    assert s.until(b"> ").endswith(b"40\r\n> ")
    s.type(b"throw new Error('boom')\r")
    assert b"Uncaught Error: boom\r\n> " in s.until(b"> ")
    s.type(b"Deno.listen({ port: 8000 })\r")
    out = s.until(b"> ")
    assert LISTEN.encode() in out and b"NotCapable" not in out, out
    s.type(b"12\x03")
    s.until(b"> ")
    s.type(b"console.log('hi')\r")
    assert s.until(b"> ").endswith(b"hi\r\nundefined\r\n> ")
    s.type(b"\x04")
    assert s.wait()["exit_code"] == 0
    s = tty_exec(agent, 21, "deno", "repl")
    s.until(b"> ")
    s.type(b"Deno.exit(4)\r")
    assert s.wait()["exit_code"] == 4


def test_ctrl_c_ends_a_repl_stuck_in_a_loop(agent):
    s = tty_exec(agent, 22, "deno")
    s.until(b"> ")
    s.type(b"while (true) {}\r")
    time.sleep(0.3)
    s.type(b"\x03")
    assert s.wait(timeout=30)["exit_code"] == 130


def test_other_commands_on_a_terminal_name_what_works(agent):
    s = tty_exec(agent, 30, "bash")
    ex = s.wait()
    assert ex["exit_code"] == 127 and "python3 (the Python console)" in ex["error"], ex
    ex = Session(agent, 31, {"cmd": ["deno", "repl"]}).wait()
    assert ex["exit_code"] == 2 and "needs a terminal" in ex["error"], ex


# --------------------------------------------------------------------------
# through `sbx exec -t` on a real PTY (once the CLI has -t)
# --------------------------------------------------------------------------


class Pty:
    """sbx on a real terminal: its stdin, stdout and stderr are a PTY's slave."""

    def __init__(self, argv, env):
        master, slave = pty.openpty()
        # Its own session with the PTY as controlling terminal, as a shell would start it.
        self.p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
                                  preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.fd, self.seen = master, b""

    def until(self, pattern: bytes, timeout=30) -> bytes:
        deadline = time.monotonic() + timeout
        start = len(self.seen)
        while not re.search(pattern, self.seen[start:]):
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r}; saw {self.seen[start:]!r}"
            if select.select([self.fd], [], [], left)[0]:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                self.seen += chunk
        return self.seen[start:]

    def type(self, keys: bytes):
        os.write(self.fd, keys)

    def wait(self, timeout=30) -> int:
        try:
            self.until(b"\0never\0", timeout)
        except AssertionError:
            pass
        rc = self.p.wait(timeout=timeout)
        os.close(self.fd)
        return rc


def test_python_console_through_sbx_exec_t(deno, box):  # noqa: F811
    t = Pty(deno.argv("exec", "-it", box, "--", "python3"), deno.env())
    t.until(rb">>> ")
    t.type(b"def sq(n):\r\treturn n * n\r\r")
    t.until(rb">>> ")
    t.type(b"sq(12)\r")
    assert b"144\r\n>>> " in t.until(rb"144\r\n>>> ")
    t.type(b"[][1]\r")
    assert b"IndexError" in t.until(rb"IndexError.*\r\n>>> ")
    t.type(b"abc\x03")
    t.until(rb"KeyboardInterrupt\r\n>>> ")
    t.type(b"\x04")
    assert t.wait() == 0


def test_js_repl_through_sbx_exec_t(deno, box):  # noqa: F811
    t = Pty(deno.argv("exec", "-it", box, "--", "node"), deno.env())
    t.until(rb"> ")
    t.type(b"const k = 'v' + 1\rk\r")
    t.until(rb"""["']v1["']\r\n> """)  # the REPL shows values as Deno.inspect does: "v1"
    t.type(b".exit\r")
    assert t.wait() == 0


def test_history_and_editing_through_sbx_exec_t(deno, box):  # noqa: F811
    t = Pty(deno.argv("exec", "-it", box, "--", "python3"), deno.env())
    t.until(rb">>> ")
    t.type(b"print(1)\r")
    t.until(rb"1\r\n>>> ")
    t.type(UP + b"\r")
    assert t.until(rb">>> ") == b"print(1)\r\n1\r\n>>> "
    t.type(b"prnt(5)" + LEFT * 5 + b"i\r")
    assert screen_line(t.until(rb"\r\n5\r\n>>> ").partition(b"\r\n")[0]) == "print(5)"
    t.type(b"\x04")
    assert t.wait() == 0
    # The JS REPL has the same line editor.
    t = Pty(deno.argv("exec", "-it", box, "--", "node"), deno.env())
    t.until(rb"> ")
    t.type(b"let n = 40\rn += 1\r")
    t.until(rb"41\r\n> ")
    t.type(UP + b"\r")
    t.until(rb"n \+= 1\r\n42\r\n> ")
    t.type(UP + UP + DOWN + b"\r")  # the repeated `n += 1` is one entry: Up, Up reach `let n = 40`
    t.until(rb"43\r\n> ")
    t.type(b"cnsole.log(n)" + LEFT * 12 + b"o\r")
    t.until(rb"\r\n43\r\nundefined\r\n> ")
    t.type(b".exit\r")
    assert t.wait() == 0


def test_detach_on_deno_says_why_not(deno, box):  # noqa: F811
    r = deno.run("exec", "-d", box, "--", "python3", "-c", "print(1)")
    assert r.rc != 0 and "no background processes" in r.err and "--driver subprocess" in r.err, r

