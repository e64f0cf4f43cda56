"""sbx run on a real pseudo-terminal, the way a user's shell runs it: the pty's
slave is sbx's controlling terminal, stdin, stdout and stderr, and the test
types on the master and reads what the screen would show."""
from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time


def _set_size(fd: int, rows: int, cols: int):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _take_terminal():
    # In the child, after setsid (start_new_session): the slave on fd 0 becomes its terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtyRun:
    def __init__(self, argv: list[str], env: dict, rows: int = 24, cols: int = 80):
        self.master, self.slave = os.openpty()
        _set_size(self.slave, rows, cols)
        self.before = termios.tcgetattr(self.slave)
        self.p = subprocess.Popen(argv, stdin=self.slave, stdout=self.slave, stderr=self.slave, env=env,
                                  start_new_session=True, preexec_fn=_take_terminal, close_fds=True)
        os.set_blocking(self.master, False)
        self.out = b""   # everything read so far
        self.seen = 0    # expect() searches from here

    def attrs(self):
        return termios.tcgetattr(self.slave)

    def send(self, data: bytes | str):
        if isinstance(data, str):
            data = data.encode()
        os.write(self.master, data)

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every holder of the slave is gone
            return False
        self.out += chunk
        return bool(chunk)

    def expect(self, pattern: bytes | str, timeout: float = 30) -> re.Match:
        """Waits for pattern (a regex) in the output after the last match."""
        if isinstance(pattern, str):
            pattern = pattern.encode()
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.out, self.seen)
            if m:
                self.seen = m.end()
                return m
            left = deadline - time.monotonic()
            if left <= 0 or (not self._read(min(left, 0.5)) and self.p.poll() is not None and not self._read(0.2)):
                if rx.search(self.out, self.seen):
                    continue
                raise AssertionError(f"never saw {pattern!r} (exit {self.p.poll()}); the screen since the last "
                                     f"match: {self.out[self.seen:][-3000:]!r}")

    def resize(self, rows: int, cols: int):
        """A new window size, as a terminal emulator sets it (the kernel also sends SIGWINCH)."""
        _set_size(self.slave, rows, cols)
        self.p.send_signal(signal.SIGWINCH)

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while self.p.poll() is None and time.monotonic() < deadline:
            self._read(0.1)
        rc = self.p.wait(timeout=max(0.1, deadline - time.monotonic()))
        while self._read(0.05):
            pass
        return rc

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
