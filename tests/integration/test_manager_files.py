"""Files through `sbx serve` stream: big uploads and downloads pass through the
manager (and the sbx client) without being held whole, cut-off uploads leave
no file that looks complete, and a sandbox dying midway is an error, not a hang.

The manager's memory bound is measured, not timed: VmHWM (peak RSS) of the
real `sbx serve` process, reset before each transfer through
/proc/PID/clear_refs, may grow by at most 64 MiB during a 1 GiB transfer.
"""
from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import signal
import socket
import time

import pytest

from conftest import wait_until
from manager_fixtures import (HOST, assert_error, clients, manager_root, managers, remote_env,  # noqa: F401
                              strong_key)

GiB = 1 << 30
MiB = 1 << 20
RSS_BOUND = 64 * MiB


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def reset_peak(pid: int) -> int:
    """Resets VmHWM to the current RSS (Linux >= 4.0); returns the baseline in bytes."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # then the baseline is the peak so far, a stricter test
    return max(status_kib(pid, "VmHWM"), status_kib(pid, "VmRSS")) * 1024


def peak_growth(pid: int, baseline: int) -> int:
    return status_kib(pid, "VmHWM") * 1024 - baseline


def random_file(path, size: int) -> str:
    """size bytes of random data at path; returns their sha256."""
    h = hashlib.sha256()
    block = 16 * MiB
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(block, left))
            f.write(chunk)
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(16 * MiB):
            h.update(chunk)
    return h.hexdigest()


def listing(m, sid: str, d: str) -> list[str]:
    r = m.exec(sid, ["ls", "-a", d])
    assert r["exit_code"] == 0, r
    return [n for n in r["stdout"].split() if n not in (".", "..")]


def temp_uploads(m, sid: str, d: str) -> list[str]:
    return [n for n in listing(m, sid, d) if n.startswith(".sbx-upload-")]


@contextlib.contextmanager
def copy_under_way(m, c, sid: str, src):
    """`sbx cp src sid:/work/big.bin` started, and its first bytes in the sandbox (a temp file shows)."""
    p = c.popen("cp", str(src), f"{sid}:/work/big.bin")
    try:
        seen = wait_until(lambda: p.poll() is not None or temp_uploads(m, sid, "/work"), 60, interval=0.1)
        assert seen and p.poll() is None, "the copy ended before it could be interfered with"
        yield p
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


@pytest.fixture
def files_manager(managers):
    """A manager of this module's own, so its memory is this test's alone."""
    return managers.new("files", "server:\n  reap_interval: 1h\n")


@pytest.fixture
def big_box(files_manager, clients):
    """A sandbox with room for 1 GiB (the writable layer may be memory-backed) and a client for it."""
    c = clients.new(remote_env(files_manager))
    sid = c.run("create", "--memory", "2G", "--disk", "2G", timeout=60).ok().out.strip().splitlines()[-1]
    files_manager.created.add(sid)
    files_manager.sh(sid, "mkdir -p /work")
    return files_manager, c, sid


def test_a_1gib_upload_and_download_stream_through_the_manager(big_box, tmp_path):
    m, c, sid = big_box
    pid = m.proc.pid
    src = tmp_path / "big.bin"
    digest = random_file(src, GiB)
    # Warm up the paths a copy takes (libarchive, threads), so the baseline is the manager at work, not cold.
    (tmp_path / "small").write_bytes(b"warm")
    c.run("cp", str(tmp_path / "small"), f"{sid}:/work/small").ok()
    c.run("cp", f"{sid}:/work/small", str(tmp_path / "small.back")).ok()

    base = reset_peak(pid)
    c.run("cp", str(src), f"{sid}:/work/big.bin", timeout=600).ok()
    up_growth = peak_growth(pid, base)
    inside = m.exec(sid, ["sha256sum", "/work/big.bin"], timeout=300)["stdout"].split()[0]
    assert inside == digest, "the 1 GiB upload did not arrive intact"
    assert up_growth <= RSS_BOUND, (f"the manager's peak RSS grew by {up_growth / MiB:.1f} MiB during a 1 GiB "
                                    f"upload (bound {RSS_BOUND // MiB} MiB): it holds the upload")

    src.unlink()  # room on the host for the copy back
    base = reset_peak(pid)
    back = tmp_path / "back.bin"
    c.run("cp", f"{sid}:/work/big.bin", str(back), timeout=600).ok()
    down_growth = peak_growth(pid, base)
    assert sha256_file(back) == digest, "the 1 GiB download did not arrive intact"
    assert down_growth <= RSS_BOUND, (f"the manager's peak RSS grew by {down_growth / MiB:.1f} MiB during a 1 GiB "
                                      f"download (bound {RSS_BOUND // MiB} MiB): it holds the download")
    print(f"manager peak RSS growth: upload {up_growth / MiB:.1f} MiB, download {down_growth / MiB:.1f} MiB")


def test_a_raw_put_past_64mib_is_not_refused(files_manager, clients):
    m = files_manager
    sid = m.create({})["id"]
    data = os.urandom(80 * MiB)
    r = m.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/raw.bin", body=data, timeout=120)
    assert r.status == 204, r
    assert m.exec(sid, ["sha256sum", "/tmp/raw.bin"])["stdout"].split()[0] == hashlib.sha256(data).hexdigest()
    # Downloads stream back just as whole.
    r = m.request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/raw.bin", timeout=120)
    assert r.status == 200 and r.body == data, f"HTTP {r.status}, {len(r.body)} bytes"


def test_the_json_files_write_stays_capped_and_points_at_the_raw_route(files_manager):
    m = files_manager
    sid = m.create({})["id"]
    body = json.dumps({"path": "/tmp/x", "content": "a" * (65 * MiB)})
    err = assert_error(m.request("POST", f"/v1/sandboxes/{sid}/files", body=body,
                                 headers={"Content-Type": "application/json"}, timeout=60), 413)
    assert "PUT" in err.get("hint", "") and "raw" in err["hint"], err


def raw_put_cut_off(m, sid: str, path: str, total: int, sent: int):
    """A raw PUT announcing `total` bytes that sends `sent` of them and hangs up."""
    s = socket.create_connection((HOST, m.port), timeout=30)
    try:
        s.sendall(f"PUT /v1/sandboxes/{sid}/files?path={path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {m.key}\r\n"
                  f"Content-Length: {total}\r\n\r\n".encode())
        chunk = os.urandom(MiB)
        left = sent
        while left:
            s.sendall(chunk[:min(left, MiB)])
            left -= min(left, MiB)
        time.sleep(0.5)  # let the manager hand it on
    finally:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()


def test_an_upload_cut_off_leaves_no_file_and_the_sandbox_answers(files_manager, clients, tmp_path):
    m = files_manager
    sid = m.create({})["id"]
    m.sh(sid, "mkdir -p /work && printf old > /work/kept")
    # Raw PUT, client gone midway: no file, not even a temp one; an existing file keeps its content.
    raw_put_cut_off(m, sid, "/work/cut.bin", 64 * MiB, 8 * MiB)
    raw_put_cut_off(m, sid, "/work/kept", 64 * MiB, 8 * MiB)
    assert wait_until(lambda: not temp_uploads(m, sid, "/work"), 20), listing(m, sid, "/work")
    assert "cut.bin" not in listing(m, sid, "/work")
    assert m.exec(sid, ["cat", "/work/kept"])["stdout"] == "old", "a cut-off upload replaced a whole file"

    # `sbx cp` killed midway (its tar cut short): likewise.
    c = clients.new(remote_env(m))
    src = tmp_path / "big.bin"
    random_file(src, 512 * MiB)
    with copy_under_way(m, c, sid, src) as p:
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    assert wait_until(lambda: not temp_uploads(m, sid, "/work"), 20), listing(m, sid, "/work")
    assert "big.bin" not in listing(m, sid, "/work"), "a killed copy left a file that looks complete"
    assert m.exec(sid, ["echo", "alive"])["stdout"] == "alive\n"
    # And the sandbox takes the next upload.
    r = m.request("PUT", f"/v1/sandboxes/{sid}/files?path=/work/after", body=b"after")
    assert r.status == 204, r
    assert m.exec(sid, ["cat", "/work/after"])["stdout"] == "after"


def test_a_sandbox_dying_midway_is_an_error_not_a_hang(files_manager, clients, tmp_path):
    m = files_manager
    c = clients.new(remote_env(m))
    sid = c.run("create", "--memory", "2G", "--disk", "2G", timeout=60).ok().out.strip().splitlines()[-1]
    m.created.add(sid)
    m.sh(sid, "mkdir -p /work")
    src = tmp_path / "big.bin"
    random_file(src, 768 * MiB)
    with copy_under_way(m, c, sid, src) as p:
        # The sandbox goes away under the upload: its agent with it.
        assert m.delete(sid).status == 200
        out, err = p.communicate(timeout=60)
    assert p.returncode != 0, "a copy into a sandbox that died midway reported success"
    text = err.decode(errors="replace")
    assert "sbx:" in text and sid in text and "went away" in text, f"no clear error: {text!r}"
    print(f"a copy into a sandbox removed midway: {text.strip()}")
    # The manager is fine.
    assert m.request("GET", "/healthz").status == 200
