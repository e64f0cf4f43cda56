"""Shared machinery for the `sbx serve` (sandbox manager) tests.

`Manager` runs one real `sbx serve` on 127.0.0.1 with its own state root, a
strong random ADMIN_API_KEY, `--driver subprocess` and its own config file;
stderr/stdout go to a log file the tests read.  Teardown deletes every sandbox
through the API, stops the server (SIGTERM, then SIGKILL after a timeout),
removes whatever is left with a local `sbx rm --all` on the manager's state
root, and checks that nothing (state dirs, cgroups, mounts) leaked.

`Client` is the conftest `Sbx` runner with a private state root and a fixed
environment (for instance USE_REMOTE_SANDBOX=true, SANDBOX_MANAGER_URL=..., ADMIN_API_KEY=...).

Every network call goes to 127.0.0.1 and every wait is bounded.
"""
from __future__ import annotations

import http.client
import http.server
import json
import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import (SBX_BIN, _SCRUBBED_ENV, Sbx, cgroup_roots, mountinfo_lines_mentioning, pid_alive,
                      wait_until)

HOST = "127.0.0.1"
NDJSON = "application/x-ndjson"
_DEFAULT = object()


def free_port() -> int:
    """A port that was free a moment ago (bind to 0, read it, close)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((HOST, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def strong_key() -> str:
    return secrets.token_hex(32)


def scrubbed_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    if extra:
        env.update(extra)
    return env


def cgroup_scope(state_root: str) -> str:
    """Mirrors backends/common/cgroup.cpp scope_for(): FNV-1a of the state root."""
    h = 1469598103934665603
    for c in state_root.encode():
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "root-" + f"{h:016x}"[:10]


class Resp:
    def __init__(self, status: int, headers, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            raise AssertionError(f"not JSON (HTTP {self.status}): {self.body[:500]!r}")

    def __repr__(self):
        return f"<HTTP {self.status} {self.headers.get('Content-Type')!r} {self.body[:600]!r}>"


def assert_error(r: Resp, status: int, code: str | None = None) -> dict:
    """r is an error answer with `status` and a {"error": {"code", "message"}} body; returns the error."""
    assert r.status == status, f"expected HTTP {status}, got {r!r}"
    j = r.json()
    assert isinstance(j, dict) and isinstance(j.get("error"), dict), f"error body must be {{'error': {{...}}}}: {r!r}"
    err = j["error"]
    assert isinstance(err.get("code"), str) and err["code"], f"error.code missing: {r!r}"
    assert isinstance(err.get("message"), str) and err["message"], f"error.message missing: {r!r}"
    if code is not None:
        assert err["code"] == code, f"expected error code {code!r}: {r!r}"
    return err


class Manager:
    """One real `sbx serve` process on 127.0.0.1."""

    def __init__(self, root: str, name: str, config_text: str = "", driver: str = "subprocess",
                 key: str | None = None, extra_secrets=()):
        self.name = name
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir, exist_ok=False)
        self.state_dir = os.path.join(self.dir, "state")
        self.config = os.path.join(self.dir, "config.yaml")
        Path(self.config).write_text(config_text or "# no settings: the defaults\n")
        self.log_path = os.path.join(self.dir, "serve.log")
        self.driver = driver
        self.key = key if key is not None else strong_key()
        # Every secret this manager knows (checked against logs and error bodies).
        self.secrets = [self.key, *extra_secrets]
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.created: set[str] = set()
        self.exits: list[int] = []

    # -- process ------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def argv(self, port: int) -> list[str]:
        return [SBX_BIN, "--config", self.config, "--state-dir", self.state_dir, "serve",
                "--listen", f"{HOST}:{port}", "--driver", self.driver]

    def start(self, port: int | None = None, timeout: float = 20) -> "Manager":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.port = port or free_port()
        self._log_offset_at_start = self.log_size()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(self.port), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=scrubbed_env({"ADMIN_API_KEY": self.key}), start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                self.exits.append(self.proc.returncode)
                pytest.fail(f"sbx serve ({self.name}) exited with {self.proc.returncode} before it was healthy:\n"
                            f"{self.log()[-4000:]}", pytrace=False)
            try:
                if self.request("GET", "/healthz", timeout=2).status == 200:
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"sbx serve ({self.name}) not healthy within {timeout} s:\n{self.log()[-4000:]}",
                            pytrace=False)
            time.sleep(0.05)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit status (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        rc = self.proc.returncode
        self.exits.append(rc)
        self.proc = None
        return rc

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.exits.append(self.proc.returncode)
        self.proc = None

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log(self, since: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    # -- HTTP with http.client ----------------------------------------------
    def connect(self, timeout: float = 30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(HOST, self.port, timeout=timeout)

    def headers(self, key=_DEFAULT, headers: dict | None = None, json_body: bool = False) -> dict:
        h = {}
        if key is _DEFAULT:
            key = self.key
        if key is not None:
            h["X-API-Key"] = key
        if json_body:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        return h

    def request(self, method: str, path: str, body=None, key=_DEFAULT, headers: dict | None = None,
                timeout: float = 30) -> Resp:
        is_json = body is not None and not isinstance(body, (bytes, str))
        if is_json:
            body = json.dumps(body)
        conn = self.connect(timeout)
        try:
            conn.request(method, path, body=body, headers=self.headers(key, headers, is_json))
            resp = conn.getresponse()
            r = Resp(resp.status, resp.headers, resp.read())
        finally:
            conn.close()
        self._check_no_secret(r, f"{method} {path}")
        if method == "POST" and path == "/v1/sandboxes" and r.status == 201:
            self.created.add(r.json()["id"])
        return r

    def _check_no_secret(self, r: Resp, what: str):
        for s in self.secrets:
            assert s.encode() not in r.body, f"an API key appears in the answer to {what}: {r!r}"

    # -- API conveniences ---------------------------------------------------
    def create(self, spec: dict | None = None, key=_DEFAULT) -> dict:
        r = self.request("POST", "/v1/sandboxes", spec or {}, key=key)
        assert r.status == 201, f"create failed: {r!r}"
        return r.json()

    def list(self, query: str = "", key=_DEFAULT) -> list[dict]:
        r = self.request("GET", "/v1/sandboxes" + query, key=key)
        assert r.status == 200, r
        j = r.json()
        assert isinstance(j, list), f"the list must be a bare JSON array: {r!r}"
        return j

    def ids(self, query: str = "") -> list[str]:
        return [s["id"] for s in self.list(query)]

    def exec(self, sid: str, cmd, key=_DEFAULT, timeout: float = 60, **fields) -> dict:
        r = self.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": list(cmd), **fields}, key=key, timeout=timeout)
        assert r.status == 200, f"exec {cmd} failed: {r!r}"
        return r.json()

    def sh(self, sid: str, script: str, **kw) -> dict:
        return self.exec(sid, ["sh", "-c", script], **kw)

    def delete(self, sid: str) -> Resp:
        return self.request("DELETE", f"/v1/sandboxes/{sid}")

    def open_stream(self, sid: str, cmd, key=_DEFAULT, timeout: float = 30, **fields):
        """Starts an NDJSON exec; returns (conn, resp, sock) once the headers are in."""
        conn = self.connect(timeout)
        conn.request("POST", f"/v1/sandboxes/{sid}/exec", body=json.dumps({"cmd": list(cmd), **fields}),
                     headers=self.headers(key, {"Accept": NDJSON}, True))
        sock = conn.sock
        resp = conn.getresponse()
        return conn, resp, sock

    # -- curl -----------------------------------------------------------------
    def curl(self, method: str, path: str, key=_DEFAULT, data: bytes | str | None = None,
             headers: dict | None = None, timeout: float = 30) -> Resp:
        """One request through the curl binary; returns status and body (headers are not parsed)."""
        argv = ["curl", "-sS", "--max-time", str(timeout), "-X", method, "-o", "-", "-w", "\n%{http_code}"]
        for k, v in self.headers(key, headers).items():
            argv += ["-H", f"{k}: {v}"]
        if data is not None:
            argv += ["--data-binary", "@-"]
        argv.append(self.url + path)
        p = subprocess.run(argv, input=data.encode() if isinstance(data, str) else data, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout + 5)
        assert p.returncode == 0, f"curl failed ({p.returncode}): {p.stderr.decode(errors='replace')}"
        body, _, code = p.stdout.rpartition(b"\n")
        r = Resp(int(code), {}, body)
        self._check_no_secret(r, f"curl {method} {path}")
        return r

    # -- teardown ---------------------------------------------------------------
    def cleanup(self) -> list[str]:
        """Removes every sandbox and stops the server; returns the problems found."""
        problems = []
        if self.running():
            try:
                for sid in self.ids():
                    r = self.delete(sid)
                    if r.status not in (200, 404):
                        problems.append(f"[{self.name}] DELETE {sid} at teardown: {r!r}")
            except (OSError, AssertionError) as e:
                problems.append(f"[{self.name}] could not list/delete sandboxes at teardown: {e}")
        self.stop()
        # Whatever is left (a server that was killed, a failed delete) goes with the local driver.
        if os.path.isdir(os.path.join(self.state_dir, "sandboxes")):
            p = subprocess.run([SBX_BIN, "--state-dir", self.state_dir, "--config", self.config, "rm", "--all"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                               env=scrubbed_env({"USE_REMOTE_SANDBOX": "false",
                                                 "LOCAL_SANDBOX_BACKEND": "subprocess"}))
            if p.returncode != 0:
                problems.append(f"[{self.name}] local `sbx rm --all` failed: {p.stderr.decode(errors='replace')}")
        sb = Path(self.state_dir, "sandboxes")
        if sb.is_dir() and any(sb.iterdir()):
            problems.append(f"[{self.name}] sandbox directories left: {sorted(p.name for p in sb.iterdir())}")
        scope = cgroup_scope(self.state_dir)
        for root in cgroup_roots():
            d = Path(root, "sbx", scope)
            if d.is_dir():
                left = sorted(p.name for p in d.iterdir() if p.is_dir())
                if left:
                    problems.append(f"[{self.name}] cgroups left under {d}: {left}")
        mounts = mountinfo_lines_mentioning(self.state_dir)
        if mounts:
            problems.append(f"[{self.name}] mounts still reference {self.state_dir}: {mounts[:5]}")
        log = self.log()
        for s in self.secrets:
            if s in log:
                problems.append(f"[{self.name}] an API key appears in the server's log")
        return problems


class ManagerPool:
    """Creates managers under one root and tears all of them down."""

    def __init__(self, root: str):
        self.root = root
        self.managers: list[Manager] = []

    def new(self, name: str = "m", config_text: str = "", start: bool = True, **kw) -> Manager:
        m = Manager(self.root, f"{name}-{len(self.managers)}-{secrets.token_hex(2)}", config_text, **kw)
        self.managers.append(m)
        if start:
            m.start()
        return m

    def cleanup(self) -> list[str]:
        problems = []
        for m in reversed(self.managers):
            problems += m.cleanup()
        return problems


class Client(Sbx):
    """The real sbx client with its own state root and a fixed environment."""

    def __init__(self, state_dir: str, config_file: str, base_env: dict, label: str = "client"):
        super().__init__(state_dir, config_file, label=label)
        self.base_env = dict(base_env)

    def env(self, extra: dict | None = None, unset=()) -> dict:
        env = super().env()
        env.update(self.base_env)
        if extra:
            env.update(extra)
        for k in unset:
            env.pop(k, None)
        return env

    def local_cleanup(self) -> list[str]:
        """Removes the client's local sandboxes (fallback runs); returns leaks."""
        problems = []
        r = self.run("rm", "--all", env={"USE_REMOTE_SANDBOX": "false", "LOCAL_SANDBOX_BACKEND": "subprocess"},
                     timeout=120)
        if r.rc != 0:
            problems.append(f"[{self.label}] `sbx rm --all` failed: {r!r}")
        sb = Path(self.state_dir, "sandboxes")
        if sb.is_dir() and any(sb.iterdir()):
            problems.append(f"[{self.label}] sandbox directories left: {sorted(p.name for p in sb.iterdir())}")
        return problems


class ClientPool:
    def __init__(self, root: str, config_file: str):
        self.root = root
        self.config_file = config_file
        self.clients: list[Client] = []

    def new(self, base_env: dict, label: str = "client") -> Client:
        d = os.path.join(self.root, f"c{len(self.clients)}-{secrets.token_hex(2)}")
        c = Client(d, self.config_file, base_env, label=label)
        self.clients.append(c)
        return c

    def cleanup(self) -> list[str]:
        problems = []
        for c in self.clients:
            problems += c.local_cleanup()
        return problems


def remote_env(m: Manager, **extra) -> dict:
    env = {"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": m.url, "ADMIN_API_KEY": m.key,
           "LOCAL_SANDBOX_BACKEND": "subprocess"}
    env.update(extra)
    return env


class Fake503Server:
    """A tiny HTTP server on 127.0.0.1 that answers 503 to everything."""

    def __init__(self):
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                outer.requests.append(f"{self.command} {self.path}")
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                body = b'{"error": {"code": "unavailable", "message": "fake manager: overloaded"}}\n'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


# --------------------------------------------------------------------------
# fixtures (imported by test_manager.py)
# --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def manager_root(session_root):
    d = os.path.join(session_root, "mgr")
    os.makedirs(d, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def module_managers(manager_root):
    pool = ManagerPool(manager_root)
    yield pool
    problems = pool.cleanup()
    assert not problems, "manager teardown found problems:\n" + "\n".join(problems)


@pytest.fixture
def managers(manager_root):
    """Factory for managers private to one test; all stopped and cleaned afterwards."""
    pool = ManagerPool(manager_root)
    yield pool
    problems = pool.cleanup()
    assert not problems, "manager teardown found problems:\n" + "\n".join(problems)


@pytest.fixture(scope="module")
def manager(module_managers) -> Manager:
    """The shared manager of the API tests: reaper effectively off, so gc results are deterministic."""
    return module_managers.new("main", "server:\n  reap_interval: 1h\n  drain_timeout: 5s\n")


@pytest.fixture
def clients(session_root):
    pool = ClientPool(os.path.join(session_root, "cli"), os.path.join(session_root, "empty-config.yaml"))
    os.makedirs(pool.root, exist_ok=True)
    yield pool
    problems = pool.cleanup()
    assert not problems, "client teardown found problems:\n" + "\n".join(problems)


@pytest.fixture
def fake503():
    srv = Fake503Server()
    yield srv
    srv.close()


__all__ = ["HOST", "NDJSON", "Client", "Fake503Server", "Manager", "ManagerPool", "Resp", "assert_error",
           "cgroup_scope", "free_port", "pid_alive", "remote_env", "scrubbed_env", "strong_key", "wait_until",
           "manager_root", "module_managers", "managers", "manager", "clients", "fake503"]
