"""The operator's side of `sbx serve`: doctor --remote, TLS, JSON logs."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
import ssl

import pytest

from conftest import SBX_BIN, skip_or_fail, wait_until
from manager_fixtures import (HOST, clients, free_port, manager, manager_root, module_managers,  # noqa: F401
                              remote_env, scrubbed_env, strong_key)


def checks_by_name(report: dict) -> dict:
    return {c["name"]: c for c in report["checks"]}


def test_doctor_remote_reports_a_usable_manager(manager, clients):
    c = clients.new(remote_env(manager))
    r = c.run("doctor", "--remote", "--json").ok()
    rep = json.loads(r.out)
    assert rep["ok"] is True and rep["url"] == manager.url, rep
    checks = checks_by_name(rep)
    for name in ("reachable", "TLS", "auth", "permissions", "manager version", "health", "sandboxes",
                 "round trip", "clock skew"):
        assert name in checks, f"doctor --remote lacks the '{name}' check: {sorted(checks)}"
    assert checks["auth"]["ok"] and "sandboxes:run" in checks["permissions"]["detail"], checks
    assert manager.key not in r.out + r.err
    # The human form says the same, one line per check.
    text = c.run("doctor", "--remote").ok().out
    assert "reachable" in text and "the manager is usable" in text, text


def test_doctor_remote_names_a_refused_key(manager, clients):
    wrong = strong_key()
    c = clients.new(remote_env(manager, ADMIN_API_KEY=wrong))
    r = c.run("doctor", "--remote", "--json")
    assert r.rc == 1, r
    checks = checks_by_name(json.loads(r.out))
    assert checks["auth"]["ok"] is False and "ADMIN_API_KEY" in checks["auth"]["remedy"], checks
    assert wrong not in r.out + r.err and manager.key not in r.out + r.err


def test_doctor_remote_unreachable_is_quick_and_explained(clients):
    url = f"http://{HOST}:{free_port()}"
    c = clients.new({"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": url, "ADMIN_API_KEY": strong_key()})
    t0 = time.monotonic()
    r = c.run("doctor", "--remote", "--json")
    assert r.rc == 1 and time.monotonic() - t0 < 5, r
    checks = checks_by_name(json.loads(r.out))
    assert checks["reachable"]["ok"] is False and checks["reachable"]["remedy"], checks


class ManualServer:
    """An `sbx serve` started with extra flags (TLS, JSON logs) the shared fixture does not pass."""

    def __init__(self, root: str, *flags: str):
        self.dir = root
        os.makedirs(root, exist_ok=True)
        self.state = os.path.join(root, "state")
        self.key = strong_key()
        self.port = free_port()
        self.log_path = os.path.join(root, "serve.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [SBX_BIN, "--state-dir", self.state, "serve", "--listen", f"{HOST}:{self.port}", "--driver", "subprocess",
             *flags],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, env=scrubbed_env({"ADMIN_API_KEY": self.key}),
            start_new_session=True)

    def text(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        subprocess.run([SBX_BIN, "--state-dir", self.state, "rm", "--all"], env=scrubbed_env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        self.log.close()


@pytest.fixture
def tls_pair(tmp_path):
    if not shutil.which("openssl"):
        skip_or_fail("openssl is not installed (apt-get install openssl)")
    key, cert = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "2", "-subj", "/CN=localhost", "-addext", f"subjectAltName=IP:{HOST},DNS:localhost"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return str(cert), str(key)


def test_tls_manager_with_a_trusted_ca_and_without(manager_root, clients, tls_pair):
    cert, key = tls_pair
    srv = ManualServer(os.path.join(manager_root, "tls"), "--tls-cert", cert, "--tls-key", key)
    try:
        url = f"https://{HOST}:{srv.port}"
        ctx = ssl.create_default_context(cafile=cert)

        def healthy():
            try:
                req = urllib.request.Request(url + "/healthz", headers={"X-API-Key": srv.key})
                return urllib.request.urlopen(req, context=ctx, timeout=2).status == 200
            except OSError:
                return False

        assert wait_until(healthy, 20), srv.text()
        env = {"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": url, "ADMIN_API_KEY": srv.key,
               "LOCAL_SANDBOX_BACKEND": "none"}
        trusted = clients.new({**env, "SBX_CA_FILE": cert})
        r = trusted.run("exec", "--rm", "--", "sh", "-c", "echo over tls").ok()
        assert r.out == "over tls\n"
        # Without the CA the certificate is refused, and the error says what to do.
        untrusted = clients.new(env)
        r = untrusted.run("doctor", "--remote")
        assert r.rc == 1 and "SBX_CA_FILE" in r.out, r
    finally:
        srv.stop()


def test_interactive_sessions_through_a_tls_manager(manager_root, clients, tls_pair):
    """exec -i, a background process's attach and port-forward are WebSockets:
    over https they run in TLS checked like every other call."""
    cert, key = tls_pair
    srv = ManualServer(os.path.join(manager_root, "tls-ws"), "--tls-cert", cert, "--tls-key", key)
    try:
        url = f"https://{HOST}:{srv.port}"
        env = {"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": url, "ADMIN_API_KEY": srv.key,
               "LOCAL_SANDBOX_BACKEND": "none", "SBX_CA_FILE": cert}
        c = clients.new(env)
        assert wait_until(lambda: c.run("doctor", "--remote").rc == 0, 20), srv.text()
        # Input streams in, and more than a TLS record's worth of output comes back.
        r = c.run("exec", "--rm", "-i", "--", "sh", "-c", "read l; echo got:$l; head -c 300000 /dev/zero | wc -c",
                  input="over-tls\n").ok()
        assert r.out == "got:over-tls\n300000\n", r
        sid = c.create()
        pid = c.run("exec", "-d", "-i", sid, "--", "sh", "-c", "read l; echo bg:$l").ok().out.strip()
        r = c.run("attach", sid, pid, input="x\n")
        assert r.rc == 0 and "bg:x" in r.out, r
        c.remove(sid)
    finally:
        srv.stop()


def test_json_logs_name_the_key_never_the_secret(manager_root):
    srv = ManualServer(os.path.join(manager_root, "jsonlog"), "--log-format", "json")
    try:
        def healthy():
            try:
                req = urllib.request.Request(f"http://{HOST}:{srv.port}/healthz", headers={"X-API-Key": srv.key})
                return urllib.request.urlopen(req, timeout=2).status == 200
            except OSError:
                return False

        assert wait_until(healthy, 20), srv.text()
        wait_until(lambda: "/healthz" in srv.text(), 3)
        lines = [json.loads(line) for line in srv.text().splitlines() if line.startswith("{")]
        hits = [entry for entry in lines if entry.get("path") == "/healthz"]
        assert hits, srv.text()
        entry = hits[-1]
        assert entry["method"] == "GET" and entry["status"] == 200 and entry["key"] == "admin", entry
        assert isinstance(entry["duration_ms"], (int, float))
        assert srv.key not in srv.text()
    finally:
        srv.stop()
