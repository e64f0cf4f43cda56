"""A small client of the agent protocol (core/protocol.hpp), for tests that
speak to an agent's socket directly: frames are u32 BE payload length | u8
type | u32 BE channel | payload (JSON for control frames, raw bytes for data).
"""
from __future__ import annotations

import json
import socket
import struct
import time

TYPES = dict(exec=0x01, stdin_data=0x02, stdin_eof=0x03, signal=0x04, ping=0x08, resize=0x09, proc_list=0x0A,
             proc_attach=0x0B, proc_signal=0x0C, connect=0x0D, started=0x81, stdout_data=0x82, stderr_data=0x83,
             exit=0x84, data=0x85, end=0x86, ok=0x87, error=0x88)
NAMES = {v: k for k, v in TYPES.items()}


class AgentConn:
    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.buf = b""
        self.pending: list[tuple[str, int, bytes]] = []  # frames read for another channel

    def close(self):
        self.sock.close()

    def send(self, kind: str, channel: int, payload: bytes | dict = b""):
        if isinstance(payload, dict):
            payload = json.dumps(payload).encode()
        self.sock.sendall(struct.pack(">IBI", len(payload), TYPES[kind], channel) + payload)

    def _read_frame(self, timeout: float) -> tuple[str, int, bytes]:
        self.sock.settimeout(max(timeout, 0.01))
        while True:
            if len(self.buf) >= 9:
                n, t, ch = struct.unpack(">IBI", self.buf[:9])
                if len(self.buf) >= 9 + n:
                    payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
                    return NAMES.get(t, str(t)), ch, payload
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the agent closed the connection")
            self.buf += data

    def recv(self, channel: int, timeout: float = 30) -> tuple[str, bytes]:
        for i, (kind, ch, payload) in enumerate(self.pending):
            if ch == channel:
                del self.pending[i]
                return kind, payload
        deadline = time.monotonic() + timeout
        while True:
            kind, ch, payload = self._read_frame(deadline - time.monotonic())
            if ch == channel:
                return kind, payload
            self.pending.append((kind, ch, payload))

    def request(self, kind: str, channel: int, body: dict) -> tuple[str, dict]:
        self.send(kind, channel, body)
        answer, payload = self.recv(channel)
        return answer, json.loads(payload)


class Session:
    """One exec on a channel: send keystrokes, read its output up to a marker."""

    def __init__(self, conn: AgentConn, channel: int, request: dict):
        self.conn, self.ch = conn, channel
        self.output = b""  # everything shown so far
        self.exit: dict | None = None
        conn.send("exec", channel, request)

    def type(self, keys: bytes):
        self.conn.send("stdin_data", self.ch, keys)

    def until(self, marker: bytes, timeout: float = 30) -> bytes:
        """Output from here until `marker` has been shown (or the exec ended); returns that output."""
        start = len(self.output)
        deadline = time.monotonic() + timeout
        while marker not in self.output[start:]:
            if self.exit is not None:
                break
            try:
                kind, payload = self.conn.recv(self.ch, deadline - time.monotonic())
            except (TimeoutError, socket.timeout):
                raise AssertionError(f"no {marker!r} within {timeout} s; output so far: {self.output[start:]!r}")
            if kind in ("stdout_data", "stderr_data"):
                self.output += payload
            elif kind in ("exit", "error"):
                self.exit = json.loads(payload)
        return self.output[start:]

    def wait(self, timeout: float = 30) -> dict:
        """The exit frame's body."""
        self.until(b"\0never\0", timeout)
        return self.exit
