"""Ports: `sbx port-forward ID [LOCAL:]REMOTE` and the manager's HTTP proxy
/v1/sandboxes/{id}/ports/{port}/..., against servers running inside real
sandboxes.

Every sandbox here has --network none: the bytes travel over the agent's
stream (the agent connects to 127.0.0.1:PORT in the sandbox's own loopback),
so no network configuration is involved. The servers are plain Python started
by a foreground `sbx exec` that the test keeps running and kills at the end.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import re
import select
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import wait_until
from manager_fixtures import HOST, assert_error, free_port, managers, manager_root, strong_key  # noqa: F401

pytestmark = pytest.mark.skip_drivers(
    deno="deno sandboxes have no listening sockets (the deno agent refuses connect)")

# A tiny server: the first line of each connection says what to do.
#   ECHO          echo everything until EOF, then close (half-close both ways)
#   SHA           read until EOF, answer "N HEX" (sha256 of what came)
#   GEN N SEED    send random.Random(SEED).randbytes(N), then close
RAW_SERVER = r"""
import hashlib, random, socket, sys, threading
def handle(c):
    f = c.makefile('rb')
    cmd = f.readline().split()
    if cmd[0] == b'ECHO':
        while True:
            b = f.read1(65536)
            if not b: break
            c.sendall(b)
    elif cmd[0] == b'SHA':
        h, n = hashlib.sha256(), 0
        while True:
            b = f.read1(65536)
            if not b: break
            h.update(b); n += len(b)
        c.sendall(('%d %s\n' % (n, h.hexdigest())).encode())
    elif cmd[0] == b'GEN':
        c.sendall(random.Random(int(cmd[2])).randbytes(int(cmd[1])))
    c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(128)
print('listening', flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
"""

HTTP_SERVER = r"""
import hashlib, json, random, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def reply(self, code, body, ctype='application/json'):
        self.send_response(code)
        self.send_header('Content-Type', ctype)
        self.send_header('Content-Length', str(len(body)))
        self.send_header('X-Upstream', 'yes')
        self.end_headers()
        if self.command != 'HEAD': self.wfile.write(body)
    def do_GET(self):
        if self.path.startswith('/big/'):
            n, seed = map(int, self.path.split('/')[2:4])
            return self.reply(200, random.Random(seed).randbytes(n), 'application/octet-stream')
        if self.path == '/chunked':
            self.send_response(200); self.send_header('Transfer-Encoding', 'chunked'); self.end_headers()
            for part in (b'hello ', b'chunked ', b'world'):
                self.wfile.write(b'%x\r\n%s\r\n' % (len(part), part))
            self.wfile.write(b'0\r\n\r\n'); return
        if self.path.startswith('/missing'): return self.reply(404, b'{"nope": true}')
        self.reply(200, json.dumps({'method': self.command, 'path': self.path, 'headers': dict(self.headers)}).encode())
    do_HEAD = do_DELETE = do_GET
    def do_POST(self):
        n = int(self.headers.get('Content-Length') or 0); h = hashlib.sha256(); left = n
        while left:
            b = self.rfile.read(min(left, 65536)); h.update(b); left -= len(b)
        self.reply(201, json.dumps({'method': self.command, 'path': self.path, 'n': n, 'sha256': h.hexdigest()}).encode())
    do_PUT = do_POST
    def log_message(self, *a): pass
s = ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H)
print('listening', flush=True)
s.serve_forever()
"""

# Micro-VMs run on emulated CPUs (QEMU TCG): the big transfer is smaller there.
BIG = {"microvm": 8 << 20}
BIG_DEFAULT = 50 << 20


def start_server(sbx, sid: str, port: int, script: str = RAW_SERVER) -> subprocess.Popen:
    """A server in the sandbox, kept by a foreground exec; returns once it listens."""
    p = sbx.popen("exec", sid, "--", "python3", "-u", "-c", script, str(port), stdin=subprocess.DEVNULL)
    ready, _, _ = select.select([p.stdout], [], [], 60)
    line = p.stdout.readline() if ready else b""
    if line != b"listening\n":
        p.kill()
        _, err = p.communicate(timeout=10)
        pytest.fail(f"the server in {sid} did not start: {line!r} {err.decode(errors='replace')}", pytrace=False)
    return p


def stop(p: subprocess.Popen):
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
    return p.communicate()


class Forward:
    """A running `sbx port-forward`; .port is the local port it printed."""

    def __init__(self, sbx, sid: str, spec: str):
        self.p = sbx.popen("port-forward", sid, spec, stdin=subprocess.DEVNULL)
        ready, _, _ = select.select([self.p.stdout], [], [], 30)
        self.line = self.p.stdout.readline().decode() if ready else ""
        m = re.fullmatch(r"Forwarding 127\.0\.0\.1:(\d+) -> (\S+):(\d+)\n", self.line)
        if not m:
            self.p.kill()
            out, err = self.p.communicate(timeout=10)
            pytest.fail(f"port-forward did not start: {self.line!r} {err.decode(errors='replace')}", pytrace=False)
        self.port, self.target, self.remote = int(m[1]), m[2], int(m[3])

    def connect(self) -> socket.socket:
        return socket.create_connection((HOST, self.port), timeout=60)

    def stop(self):
        return stop(self.p)


def exchange(fwd: Forward, first_line: bytes, payload: bytes = b"") -> bytes:
    """One connection: send the line and payload, half-close, read everything back."""
    with fwd.connect() as s:
        sender = threading.Thread(target=lambda: (s.sendall(first_line + payload), s.shutdown(socket.SHUT_WR)))
        sender.start()
        chunks = []
        while True:
            b = s.recv(1 << 16)
            if not b:
                break
            chunks.append(b)
        sender.join(60)
        return b"".join(chunks)


@pytest.fixture
def offline_box(make_sandbox, driver):
    return make_sandbox("--network", "none", driver=driver)


def test_port_forward_echo_many_and_big_both_ways(sbx, offline_box, driver):
    port = 7000 + random.randrange(1000)
    server = start_server(sbx, offline_box, port)
    fwd = Forward(sbx, offline_box, f"0:{port}")
    try:
        assert fwd.target == offline_box and fwd.remote == port and fwd.port > 0
        # Echo with half-close: what we send comes back, then EOF once we ended.
        assert exchange(fwd, b"ECHO\n", b"hello\n" * 1000) == b"hello\n" * 1000
        # Many connections at once, each with its own data.
        results: dict[int, bool] = {}

        def one(i: int):
            data = random.Random(i).randbytes(256 << 10)
            got = exchange(fwd, b"ECHO\n", data)
            results[i] = got == data or len(got)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert results == {i: True for i in range(24)}
        # A large transfer each way, checked by sha256.
        n = BIG.get(driver, BIG_DEFAULT)
        up = os.urandom(n)
        assert exchange(fwd, b"SHA\n", up).decode() == f"{n} {hashlib.sha256(up).hexdigest()}\n"
        down = exchange(fwd, f"GEN {n} 42\n".encode())
        assert len(down) == n
        assert hashlib.sha256(down).hexdigest() == hashlib.sha256(random.Random(42).randbytes(n)).hexdigest()
        assert fwd.p.poll() is None, "port-forward must keep running between connections"
    finally:
        out, err = fwd.stop()
        stop(server)
    # Ctrl-C is the normal way out: exit 0.
    assert fwd.p.returncode == 0, err.decode(errors="replace")


def test_port_forward_nothing_listening_then_a_server(sbx, offline_box, driver):
    port = 8000 + random.randrange(1000)
    fwd = Forward(sbx, offline_box, f"0:{port}")
    try:
        with fwd.connect() as s:
            # The connection is closed at once: nothing listens inside.
            assert s.recv(1) == b""
        assert fwd.p.poll() is None, "one refused connection must not stop the forwarding"
        # Once a server listens, the same forwarding reaches it.
        server = start_server(sbx, offline_box, port)
        try:
            assert exchange(fwd, b"ECHO\n", b"now\n") == b"now\n"
        finally:
            stop(server)
    finally:
        _, err = fwd.stop()
    assert f"nothing listens on 127.0.0.1:{port} in sandbox {offline_box}" in err.decode(), err


@pytest.mark.only_drivers("subprocess")
def test_port_forward_usage_errors(sbx, offline_box, driver):
    # The local port is taken: a clear error, at once.
    holder = socket.socket()
    holder.bind((HOST, 0))
    holder.listen(1)
    try:
        taken = holder.getsockname()[1]
        r = sbx.run("port-forward", offline_box, f"{taken}:80", timeout=30)
        assert r.rc != 0 and f"127.0.0.1:{taken} is already in use" in r.stderr.decode(), r
    finally:
        holder.close()
    for bad in ("0", "x:80", "80:", "70000", "1:2:3"):
        r = sbx.run("port-forward", offline_box, bad, timeout=30)
        assert r.rc == 2 and "bad port" in r.stderr.decode(), (bad, r)
    r = sbx.run("port-forward", "sbx_aaaaaaaaaaaa", "80", timeout=30)
    assert r.rc != 0 and "sbx_aaaaaaaaaaaa" in r.stderr.decode(), r
    # LOCAL omitted is the same number as REMOTE.
    same = free_port()
    fwd = Forward(sbx, offline_box, str(same))
    try:
        assert fwd.port == same and fwd.remote == same
    finally:
        fwd.stop()


@pytest.mark.only_drivers("subprocess")
def test_port_forward_ends_when_the_sandbox_is_gone(sbx, make_sandbox, driver):
    sid = make_sandbox("--network", "none", driver=driver)
    fwd = Forward(sbx, sid, "0:9")
    try:
        sbx.remove(sid).ok()
        with fwd.connect() as s:
            s.recv(1)
        fwd.p.wait(30)
    finally:
        _, err = fwd.stop()
    assert fwd.p.returncode != 0 and f"sandbox {sid} is gone" in err.decode(), err


# --------------------------------------------------------------------------
# the manager's HTTP proxy
# --------------------------------------------------------------------------

@pytest.fixture
def proxy_setup(managers):
    other = strong_key()
    config = ("server:\n  drain_timeout: 5s\n  api_keys:\n"
              f"    - name: other\n      key: {other}\n      permissions: [sandboxes:read, sandboxes:write, sandboxes:run]\n")
    m = managers.new("ports", config, extra_secrets=[other])
    m.other = other
    sid = m.create({"network": "none"})["id"]
    port = 7000 + random.randrange(1000)
    conn, resp, _ = m.open_stream(sid, ["python3", "-u", "-c", HTTP_SERVER, str(port)], timeout=120)
    base = f"/v1/sandboxes/{sid}/ports/{port}"
    assert wait_until(lambda: m.request("GET", base + "/").status == 200, 60), "the server in the sandbox never answered"
    yield m, sid, port, base
    conn.close()


def test_manager_proxy_methods_headers_and_streams(proxy_setup):
    m, sid, port, base = proxy_setup
    r = m.request("GET", base + "/some/path?a=1&b=x%20y&a=2", headers={"X-Custom": "kept", "Connection": "close"})
    assert r.status == 200 and r.headers["X-Upstream"] == "yes"
    j = r.json()
    assert j["method"] == "GET" and j["path"] == "/some/path?a=1&b=x%20y&a=2"
    # The target reaches the server as the client wrote it: an encoded slash
    # stays one segment, an encoded reserved character stays encoded.
    for target in ("/files/a%2Fb%2Fc.txt?k=v%26w&x=%2F", "/%7Euser/q%3Fr"):
        got = m.request("GET", base + target).json()["path"]
        assert got == target, f"sent {target}, the server got {got}"
    seen = {k.lower(): v for k, v in j["headers"].items()}
    assert seen["x-custom"] == "kept" and seen["x-forwarded-prefix"] == base
    assert "x-api-key" not in seen, "the caller's key must not reach the sandbox"
    # The server's own status and body pass through.
    r = m.request("GET", base + "/missing")
    assert r.status == 404 and r.json() == {"nope": True}
    assert m.request("DELETE", base + "/thing").json()["method"] == "DELETE"
    r = m.request("HEAD", base + "/")
    assert r.status == 200 and r.body == b""
    # A chunked answer is passed on whole.
    assert m.request("GET", base + "/chunked").body == b"hello chunked world"
    # Bodies both ways, big, checked by sha256.
    body = os.urandom(20 << 20)
    r = m.request("POST", base + "/upload", body=body, timeout=120)
    assert r.status == 201 and r.json()["n"] == len(body) and r.json()["sha256"] == hashlib.sha256(body).hexdigest()
    r = m.request("GET", base + f"/big/{20 << 20}/7", timeout=120)
    assert r.status == 200 and r.headers["Content-Length"] == str(20 << 20)
    assert hashlib.sha256(r.body).hexdigest() == hashlib.sha256(random.Random(7).randbytes(20 << 20)).hexdigest()


def test_manager_proxy_auth_ownership_and_nothing_listening(proxy_setup):
    m, sid, port, base = proxy_setup
    assert_error(m.request("GET", base + "/", key=None), 401, "unauthenticated")
    # Another key's sandbox does not exist for it.
    assert_error(m.request("GET", base + "/", key=m.other), 404, "not_found")
    assert_error(m.request("POST", base + "/x", body=b"x", key=m.other), 404, "not_found")
    # Nothing listening: 502 with a clear error.
    err = assert_error(m.request("GET", f"/v1/sandboxes/{sid}/ports/{port + 1}/"), 502)
    assert f"nothing listens on 127.0.0.1:{port + 1} in sandbox {sid}" in err["message"]
    assert_error(m.request("GET", f"/v1/sandboxes/{sid}/ports/0/"), 400)
    assert_error(m.request("GET", f"/v1/sandboxes/{sid}/ports/99999/"), 400)


def test_manager_proxy_preview_link_with_a_port_token(proxy_setup):
    """A "port" token is a preview link: that sandbox's port, through the proxy,
    without the key; nothing else."""
    m, sid, port, base = proxy_setup
    r = m.request("POST", f"/v1/sandboxes/{sid}/tokens", {"scope": "port", "port": port, "ttl_s": 60})
    assert r.status == 201 and r.json()["scope"] == "port", r
    tok = r.json()["token"]
    r = m.request("GET", f"{base}/via/token?token={tok}", key=None)
    assert r.status == 200 and r.json()["path"] == "/via/token", "the token must not reach the sandbox's server"
    assert m.request("GET", f"{base}/q?a=1&token={tok}", key=None).json()["path"] == "/q?a=1"
    # Another port, another route, an altered token: 401.
    assert_error(m.request("GET", f"/v1/sandboxes/{sid}/ports/{port + 1}/?token={tok}", key=None), 401)
    assert_error(m.request("GET", f"/v1/sandboxes/{sid}?token={tok}", key=None), 401)
    assert_error(m.request("GET", f"{base}/?token={tok[:-1]}{'1' if tok[-1] == '0' else '0'}", key=None), 401)
    # A "ws" token is not a preview link.
    ws_tok = m.request("POST", f"/v1/sandboxes/{sid}/tokens", {"scope": "ws"}).json()["token"]
    assert_error(m.request("GET", f"{base}/?token={ws_tok}", key=None), 401)


# A WebSocket echo server (RFC 6455, stdlib only: the sandbox has no websockets
# package): answers the upgrade, then echoes each message; "bye" closes.
WS_SERVER = r"""
import base64, hashlib, socket, struct, sys, threading
def frame(op, data):
    n = len(data)
    head = bytes([0x80 | op]) + (bytes([n]) if n < 126 else bytes([126]) + struct.pack(">H", n) if n < 65536
                                  else bytes([127]) + struct.pack(">Q", n))
    return head + data
def recv_exact(c, n):
    b = b""
    while len(b) < n:
        got = c.recv(n - len(b))
        if not got:
            raise EOFError
        b += got
    return b
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
    accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC11B85").digest())
    path = head.split(b" ")[1]
    # Of the subprotocols offered, the last: a choice only the server makes.
    offered = [l.split(b":", 1)[1] for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-protocol:")]
    chosen = b"Sec-WebSocket-Protocol: " + offered[0].split(b",")[-1].strip() + b"\r\n" if offered else b""
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              + chosen + b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    c.sendall(frame(1, b"hello from " + path))
    try:
        while True:
            b0, b1 = recv_exact(c, 2)
            n = b1 & 0x7F
            if n == 126: n = struct.unpack(">H", recv_exact(c, 2))[0]
            elif n == 127: n = struct.unpack(">Q", recv_exact(c, 8))[0]
            mask = recv_exact(c, 4)
            data = bytes(x ^ mask[i % 4] for i, x in enumerate(recv_exact(c, n)))
            op = b0 & 0x0F
            if op == 8 or data == b"bye":
                c.sendall(frame(8, struct.pack(">H", 1000)))
                break
            c.sendall(frame(op, data))
    except EOFError:
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def test_manager_proxy_passes_a_websocket_through(proxy_setup):
    """A server's WebSocket (a dev server's live reload, a notebook kernel)
    through /ports/N/...: the upgrade reaches it, its messages pass both ways
    untouched; a server that does not upgrade gives its own answer."""
    websockets = pytest.importorskip("websockets", reason="python3-websockets is not installed (scripts/setup.sh)")
    import asyncio
    m, sid, http_port, _ = proxy_setup
    port = http_port + 1
    conn, resp, _ = m.open_stream(sid, ["python3", "-u", "-c", WS_SERVER, str(port)], timeout=120)
    try:
        url = f"ws://{HOST}:{m.port}/v1/sandboxes/{sid}/ports/{port}/live?x=1"

        async def session():
            async with websockets.connect(url, extra_headers={"X-API-Key": m.key}, compression=None,
                                          subprotocols=["chat.v1", "kernel.v2"], open_timeout=20,
                                          max_size=None) as ws:
                # The server's choice of subprotocol reaches the client.
                assert ws.subprotocol == "kernel.v2", ws.response_headers
                first = await asyncio.wait_for(ws.recv(), 20)
                await ws.send("ping")
                text = await asyncio.wait_for(ws.recv(), 20)
                big = os.urandom(300_000)
                await ws.send(big)
                echoed = await asyncio.wait_for(ws.recv(), 20)
                await ws.send("bye")
                await asyncio.wait_for(ws.wait_closed(), 20)
                return first, text, echoed == big, ws.close_code

        last = None
        for _ in range(60):  # the server listens a moment after its exec began (502 until then)
            try:
                first, text, same, code = asyncio.run(session())
                break
            except (OSError, websockets.exceptions.InvalidStatusCode) as e:
                last = e
                time.sleep(1)
        else:
            pytest.fail(f"no WebSocket through the proxy: {last!r}")
        assert first == "hello from /live?x=1" and text == "ping" and same and code == 1000
        async def refused(target, headers):
            async with websockets.connect(target, extra_headers=headers, open_timeout=10):
                pass

        # Without the key: 401 before anything reaches the sandbox.
        with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
            asyncio.run(refused(url, {}))
        assert e.value.status_code == 401
        # A plain HTTP server answers the upgrade with its own 200: the client gets that.
        with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
            asyncio.run(refused(f"ws://{HOST}:{m.port}/v1/sandboxes/{sid}/ports/{http_port}/", {"X-API-Key": m.key}))
        assert e.value.status_code == 200
    finally:
        conn.close()
