"""`sbx serve`, the sandbox manager, end to end: real servers on 127.0.0.1,
driven with http.client, curl, and the real `sbx` client (remote driver and
the fallback chain of the operator guide).

docs/api.md is the contract.  Every manager runs with its own state root, a
strong random ADMIN_API_KEY and `--driver subprocess` (see manager_fixtures.py);
teardown removes every sandbox and checks nothing leaked.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import ID_RE, SBX_BIN, Sbx, cmdlines, driver_problem, pid_alive, signal_once_started, wait_until
from manager_fixtures import (HOST, NDJSON, Manager, Resp, assert_error, clients, fake503, free_port,  # noqa: F401
                              manager, manager_root, managers, module_managers, remote_env, scrubbed_env,
                              strong_key)

RECORD_KEYS = {"id", "spec", "state", "created_ms", "last_active_ms", "error", "from_pool",
               # the platform's sandbox object, beside ours
               "status", "created_at", "last_activity", "label", "persistent"}
SPEC_KEYS = {"name", "driver", "image", "limits", "network", "idle_timeout_s", "idle_action", "ttl_s", "persistent", "env", "labels",
             "workdir", "allow"}
HOST_PRIVATE = {"agent_pid", "agent_start", "uid", "uid_base", "slot", "driver_data", "pid"}
EXEC_KEYS = {"exit_code", "signal", "timed_out", "oom_killed", "duration_ms", "error"}


def all_keys(obj) -> set[str]:
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(k)
            out |= all_keys(v)
    elif isinstance(obj, list):
        for v in obj:
            out |= all_keys(v)
    return out


def wait_log(m: Manager, offset: int, pattern: str, timeout: float = 3) -> str:
    """The log since offset once it matches pattern (a request is logged just after its answer is sent)."""
    wait_until(lambda: re.search(pattern, m.log(offset), re.M), timeout)
    return m.log(offset)


def check_record(rec: dict):
    assert set(rec) == RECORD_KEYS, f"record fields: {sorted(rec)}"
    assert ID_RE.match(rec["id"]), rec
    assert set(rec["spec"]) == SPEC_KEYS, f"spec fields: {sorted(rec['spec'])}"
    assert set(rec["spec"]["limits"]) == {"cpus", "memory_mb", "pids", "disk_mb"}, rec
    assert rec["state"] in ("creating", "running", "dead", "failed"), rec
    leaked = all_keys(rec) & HOST_PRIVATE
    assert not leaked, f"host-private fields in a record sent to clients: {leaked}: {rec}"


def ndjson_lines(resp, deadline_s: float = 30):
    """Yields (seconds since the call, parsed object) for each NDJSON line until EOF."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        line = resp.readline()
        if not line:
            return
        yield time.monotonic(), json.loads(line)


def tar_bytes(files: dict[str, bytes], dirs=()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for d in dirs:
            ti = tarfile.TarInfo(d)
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o755
            tf.addfile(ti)
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def box(manager) -> str:
    """One sandbox on the shared manager for the read/exec/files tests."""
    return manager.create({"labels": {"purpose": "box"}})["id"]


@pytest.fixture
def fresh_box(manager):
    """A sandbox private to one test, deleted afterwards."""
    sid = manager.create()["id"]
    yield sid
    manager.delete(sid)


# ==========================================================================
# the API table, end to end
# ==========================================================================


def test_create_returns_201_and_a_public_record(manager):
    t0 = time.time() * 1000
    r = manager.request("POST", "/v1/sandboxes", {"labels": {"team": "red"}, "env": {"FOO": "bar"},
                                                  "idle_timeout_s": 300})
    assert r.status == 201, r
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    rec = r.json()
    check_record(rec)
    try:
        assert rec["state"] == "running", rec
        assert rec["spec"]["driver"] == "subprocess", "driver defaults to the manager's --driver"
        assert rec["spec"]["labels"].get("team") == "red" and rec["spec"]["env"] == {"FOO": "bar"}, rec
        assert rec["spec"]["idle_timeout_s"] == 300, rec
        assert t0 - 60_000 <= rec["created_ms"] <= time.time() * 1000 + 60_000, rec
        assert rec["error"] == "", rec
        # The record's env applies to execs.
        assert manager.sh(rec["id"], "echo $FOO")["stdout"] == "bar\n"
    finally:
        assert manager.delete(rec["id"]).status == 200


def test_list_and_filters(manager):
    red = manager.create({"labels": {"team": "red"}})["id"]
    blue = manager.create({"labels": {"team": "blue"}})["id"]
    try:
        everything = manager.list()
        for rec in everything:
            check_record(rec)
        ids = {r["id"] for r in everything}
        assert {red, blue} <= ids
        q = urllib.parse.quote
        assert set(manager.ids("?label=" + q("team=red"))) & {red, blue} == {red}
        assert set(manager.ids("?label=" + q("team=blue"))) & {red, blue} == {blue}
        assert {red, blue} <= set(manager.ids("?label=team")), "label=KEY matches any value"
        assert not set(manager.ids("?label=" + q("team=green"))) & {red, blue}
        assert {red, blue} <= set(manager.ids("?state=running"))
        assert not set(manager.ids("?state=dead")) & {red, blue}
        assert {red, blue} <= set(manager.ids("?driver=subprocess"))
        assert not set(manager.ids("?driver=runsc")) & {red, blue}
        both = manager.ids("?state=running&driver=subprocess&label=" + q("team=red"))
        assert red in both and blue not in both, both
    finally:
        manager.delete(red)
        manager.delete(blue)


def test_get_one_and_404(manager, box):
    r = manager.request("GET", f"/v1/sandboxes/{box}")
    assert r.status == 200, r
    rec = r.json()
    check_record(rec)
    assert rec["id"] == box and rec["spec"]["labels"]["purpose"] == "box"
    err = assert_error(manager.request("GET", "/v1/sandboxes/sbx_aaaaaaaaaaaa"), 404, "not_found")
    assert "sbx_aaaaaaaaaaaa" in err["message"], err
    assert_error(manager.request("GET", "/v1/sandboxes/not-an-id"), 404)


def test_exec_buffered(manager, box):
    r = manager.request("POST", f"/v1/sandboxes/{box}/exec", {"cmd": ["sh", "-c", "echo out; echo err >&2; exit 3"]})
    assert r.status == 200, r
    j = r.json()
    assert EXEC_KEYS <= set(j), j
    assert j["exit_code"] == 3 and j["stdout"] == "out\n" and j["stderr"] == "err\n", j
    assert j["signal"] == 0 and j["timed_out"] is False and j["oom_killed"] is False and j["error"] == "", j
    assert isinstance(j["duration_ms"], int) and j["duration_ms"] >= 0, j
    # env, cwd, stdin
    j = manager.exec(box, ["sh", "-c", "echo $X; pwd; cat"], env={"X": "ex"}, cwd="/tmp", stdin="from-stdin")
    assert j["exit_code"] == 0 and j["stdout"] == "ex\n/tmp\nfrom-stdin", j
    j = manager.exec(box, ["od", "-An", "-tx1"], stdin_b64=base64.b64encode(b"\x00\xff").decode())
    assert j["stdout"].split() == ["00", "ff"], j
    # killed by a signal
    j = manager.sh(box, "kill -TERM $$")
    assert j["signal"] == 15 and j["exit_code"] == 143, j
    # timeout_s
    t = time.monotonic()
    j = manager.exec(box, ["sleep", "10"], timeout_s=0.5)
    assert j["timed_out"] is True and time.monotonic() - t < 5, j
    # not found: 127 and an error
    j = manager.exec(box, ["no-such-command-sbxit"])
    assert j["exit_code"] == 127 and j["error"], j


def test_exec_non_utf8_output_is_base64(manager, box):
    j = manager.sh(box, r"printf 'a\377\376b'; printf '\300\300' >&2")
    assert "stdout" not in j and "stderr" not in j, j
    assert base64.b64decode(j["stdout_b64"]) == b"a\xff\xfeb", j
    assert base64.b64decode(j["stderr_b64"]) == b"\xc0\xc0", j
    # Valid UTF-8 (multi-byte) stays text.
    j = manager.sh(box, "printf 'h\\303\\251'")
    assert j.get("stdout") == "h\u00e9", j


def test_stat(manager, box):
    manager.sh(box, "mkdir -p /work/st && printf 12345 > /work/st/f && chmod 0640 /work/st/f && ln -sf f /work/st/l")
    r = manager.request("GET", f"/v1/sandboxes/{box}/stat?path=/work/st/f")
    assert r.status == 200, r
    j = r.json()
    assert set(j) >= {"path", "type", "mode", "size", "mtime", "target"}, j
    assert j["path"] == "/work/st/f" and j["type"] == "file" and j["size"] == 5, j
    assert j["mode"] & 0o7777 == 0o640, j
    assert abs(j["mtime"] - time.time()) < 3600 or abs(j["mtime"] / 1000 - time.time()) < 3600, j
    j = manager.request("GET", f"/v1/sandboxes/{box}/stat?path=/work/st").json()
    assert j["type"] == "dir", j
    j = manager.request("GET", f"/v1/sandboxes/{box}/stat?path=/work/st/l").json()
    assert j["type"] == "symlink" and j["target"] == "f", j
    assert_error(manager.request("GET", f"/v1/sandboxes/{box}/stat?path=/work/st/nope"), 404, "not_found")
    assert_error(manager.request("GET", "/v1/sandboxes/sbx_aaaaaaaaaaaa/stat?path=/work"), 404, "not_found")
    assert_error(manager.request("GET", f"/v1/sandboxes/{box}/stat?path=relative"), 400)


def test_files_put_raw_and_get_raw(manager, box):
    data = secrets.token_bytes(200_000) + b"\xff\x00end"
    r = manager.request("PUT", f"/v1/sandboxes/{box}/files?path=/work/up.bin", body=data)
    assert r.status == 204 and r.body == b"", r
    j = manager.exec(box, ["sha256sum", "/work/up.bin"])
    assert j["stdout"].split()[0] == hashlib.sha256(data).hexdigest(), j
    assert int(manager.exec(box, ["stat", "-c", "%a", "/work/up.bin"])["stdout"]) == 644
    r = manager.request("GET", f"/v1/sandboxes/{box}/files?path=/work/up.bin")
    assert r.status == 200 and r.body == data, (r.status, len(r.body))
    assert r.headers.get("Content-Type") == "application/octet-stream", r.headers
    # Through curl too.
    assert manager.curl("GET", f"/v1/sandboxes/{box}/files?path=/work/up.bin").body == data
    # Overwrite with a small text body.
    assert manager.request("PUT", f"/v1/sandboxes/{box}/files?path=/work/up.bin", body=b"small").status == 204
    assert manager.exec(box, ["cat", "/work/up.bin"])["stdout"] == "small"
    # The parent must exist; a missing path is 404.
    r = manager.request("PUT", f"/v1/sandboxes/{box}/files?path=/work/no/such/dir/x", body=b"x")
    assert 400 <= r.status < 500, r
    assert_error(r, r.status)
    assert_error(manager.request("GET", f"/v1/sandboxes/{box}/files?path=/work/missing"), 404, "not_found")


def test_files_get_tar(manager, box):
    manager.sh(box, "rm -rf /work/tree && mkdir -p /work/tree/sub && printf one > /work/tree/a.txt && "
                    "printf two > /work/tree/sub/b.txt && ln -s a.txt /work/tree/link")
    for query in ("/work/tree", "/work/tree&format=tar"):  # a directory is a tar either way
        r = manager.request("GET", f"/v1/sandboxes/{box}/files?path={query}")
        assert r.status == 200, r
        assert r.headers.get("Content-Type") == "application/x-tar", r.headers
        with tarfile.open(fileobj=io.BytesIO(r.body)) as tf:
            members = {m.name.rstrip("/"): m for m in tf.getmembers()}
            assert set(members) == {"tree", "tree/a.txt", "tree/sub", "tree/sub/b.txt", "tree/link"}, sorted(members)
            assert members["tree"].isdir() and members["tree/sub"].isdir()
            assert tf.extractfile(members["tree/a.txt"]).read() == b"one"
            assert tf.extractfile(members["tree/sub/b.txt"]).read() == b"two"
            assert members["tree/link"].issym() and members["tree/link"].linkname == "a.txt"
    # A regular file with format=tar: one entry named by its base name.
    r = manager.request("GET", f"/v1/sandboxes/{box}/files?path=/work/tree/a.txt&format=tar")
    assert r.status == 200, r
    with tarfile.open(fileobj=io.BytesIO(r.body)) as tf:
        names = tf.getnames()
        assert names == ["a.txt"], names
        assert tf.extractfile("a.txt").read() == b"one"


def test_files_put_tar_into_directory(manager, box):
    manager.sh(box, "rm -rf /work/dest && mkdir /work/dest && printf keep > /work/dest/old")
    body = tar_bytes({"x.txt": b"ex", "deep/y.bin": b"\x00\xffy"}, dirs=["deep"])
    r = manager.request("PUT", f"/v1/sandboxes/{box}/files?path=/work/dest", body=body,
                        headers={"Content-Type": "application/x-tar"})
    assert r.status == 204, r
    j = manager.sh(box, "cat /work/dest/x.txt; echo; od -An -tx1 /work/dest/deep/y.bin; cat /work/dest/old")
    assert j["stdout"].split() == ["ex", "00", "ff", "79", "keep"], j
    # A tar goes into an existing directory only.
    r = manager.request("PUT", f"/v1/sandboxes/{box}/files?path=/work/dest/x.txt", body=body,
                        headers={"Content-Type": "application/x-tar"})
    assert_error(r, 400)
    r = manager.request("PUT", f"/v1/sandboxes/{box}/files?path=/work/nodir", body=body,
                        headers={"Content-Type": "application/x-tar"})
    assert 400 <= r.status < 500, r


def test_run_is_one_shot(manager):
    token = secrets.token_hex(4)
    before = set(manager.ids())
    r = manager.request("POST", "/v1/run", {"sandbox": {"labels": {"oneshot": token}},
                                            "cmd": ["sh", "-c", "echo run-ok; cat; exit 4"], "stdin": "in"})
    assert r.status == 200, r
    j = r.json()
    assert j["exit_code"] == 4 and j["stdout"] == "run-ok\nin", j
    assert manager.ids("?label=" + urllib.parse.quote(f"oneshot={token}")) == [], "the one-shot sandbox is left"
    assert set(manager.ids()) == before
    # Streaming form.
    conn = manager.connect()
    try:
        conn.request("POST", "/v1/run", body=json.dumps({"cmd": ["echo", "streamed"]}),
                     headers=manager.headers(headers={"Accept": NDJSON}, json_body=True))
        resp = conn.getresponse()
        assert resp.status == 200
        lines = [o for _, o in ndjson_lines(resp)]
    finally:
        conn.close()
    assert lines[0] == {"stdout": "streamed\n"} and lines[-1]["exit"]["exit_code"] == 0, lines
    assert set(manager.ids()) == before
    # A bad spec is refused before anything is created.
    assert_error(manager.request("POST", "/v1/run", {"sandbox": {"bogus": 1}, "cmd": ["true"]}), 400)


def test_gc_dry_run_then_real(manager):
    sid = manager.create({"ttl_s": 1, "labels": {"gc": "me"}})["id"]
    keep = manager.create({"labels": {"gc": "keep"}})["id"]
    try:
        time.sleep(1.3)
        r = manager.request("POST", "/v1/gc", {"dry_run": True})
        assert r.status == 200, r
        dry = r.json()
        assert isinstance(dry.get("actions"), list) and dry.get("dry_run") is True, dry
        for a in dry["actions"]:
            assert set(a) >= {"kind", "target", "reason", "done", "error"}, a
            assert a["done"] is False, f"a dry run did something: {a}"
        mine = [a for a in dry["actions"] if a["kind"] == "sandbox" and a["target"] == sid]
        assert len(mine) == 1 and "ttl" in mine[0]["reason"].lower(), dry
        assert not [a for a in dry["actions"] if keep in a.get("target", "")], dry
        assert sid in manager.ids(), "a dry run removed the sandbox"
        r = manager.request("POST", "/v1/gc", {})
        assert r.status == 200, r
        real = r.json()
        mine = [a for a in real["actions"] if a["kind"] == "sandbox" and a["target"] == sid]
        assert len(mine) == 1 and mine[0]["done"] is True and mine[0]["error"] == "", real
        assert sid not in manager.ids() and keep in manager.ids()
        assert_error(manager.request("GET", f"/v1/sandboxes/{sid}"), 404)
        # An empty body is allowed; an unknown field is not.
        assert manager.request("POST", "/v1/gc").status == 200
        assert_error(manager.request("POST", "/v1/gc", {"dryrun": True}), 400)
        # The dry run announced exactly what the real run then did for this sandbox.
        announced = sorted((a["kind"], a["target"]) for a in dry["actions"] if sid in a["target"])
        done = sorted((a["kind"], a["target"]) for a in real["actions"] if sid in a["target"])
        assert announced == done, (f"gc dry_run reports actions a real gc does not take for {sid}: "
                                   f"dry run {announced} vs real run {done}")
    finally:
        manager.delete(sid)
        manager.delete(keep)


def test_delete_200_success_then_404(manager):
    sid = manager.create()["id"]
    r = manager.delete(sid)
    # One answer for both styles: the platform's SDK reads {"success": true}.
    assert r.status == 200 and r.json()["success"] is True, r
    assert_error(manager.delete(sid), 404, "not_found")
    assert_error(manager.request("GET", f"/v1/sandboxes/{sid}"), 404, "not_found")
    assert_error(manager.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]}), 404, "not_found")
    assert sid not in manager.ids()
    assert not os.path.exists(os.path.join(manager.state_dir, "sandboxes", sid))


def test_healthz(manager, box):
    r = manager.request("GET", "/healthz")
    assert r.status == 200, r
    j = r.json()
    version = subprocess.run([SBX_BIN, "--version"], stdout=subprocess.PIPE, text=True, timeout=30).stdout.split()[-1]
    assert j["version"] == version, j
    names = {d["name"]: d for d in j["drivers"]}
    assert "subprocess" in names and names["subprocess"]["ok"] is True, j["drivers"]
    assert j.get("default_driver") == "subprocess", j
    listed = manager.list()
    assert j["sandboxes"]["total"] == len(listed), (j["sandboxes"], len(listed))
    by_state = {}
    for rec in listed:
        by_state[rec["state"]] = by_state.get(rec["state"], 0) + 1
    assert j["sandboxes"]["by_state"] == by_state, j["sandboxes"]
    assert j["draining"] is False, j


_METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_SAMPLE_RE = re.compile(rf"^({_METRIC})(?:\{{(.*)\}})? (\S+)(?: (-?\d+))?$")
_LABEL_RE = re.compile(rf'\s*({_LABEL})="((?:[^"\\\n]|\\[\\"n])*)"\s*(,|$)')


def strict_parse_prometheus_text(text: str) -> dict:
    """A strict reader of the Prometheus text format 0.0.4; returns {family: {"type", "samples"}}.

    Raises AssertionError naming the line at the first violation (the fallback when promtool
    is unavailable, and a second opinion when it is)."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    families: dict[str, dict] = {}
    order: list[str] = []
    closed: set[str] = set()

    def family_of(name: str) -> str:
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and families.get(base, {}).get("type") in ("histogram", "summary"):
                return base
        return name

    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n}: {line!r}"
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                assert len(parts) >= 3 and re.fullmatch(_METRIC, parts[2]), where
                fam = families.setdefault(parts[2], {"type": None, "help": None, "samples": []})
                assert not fam["samples"], f"{parts[1]} after samples of {parts[2]}: {where}"
                key = parts[1].lower()
                assert fam[key] is None, f"second {parts[1]} for {parts[2]}: {where}"
                if parts[1] == "TYPE":
                    assert len(parts) == 4 and parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), where
                    fam["type"] = parts[3]
                else:
                    fam["help"] = parts[3] if len(parts) == 4 else ""
                if parts[2] not in order:
                    order.append(parts[2])
            continue
        assert line.strip(), f"empty line in the exposition: {where}"
        m = _SAMPLE_RE.match(line)
        assert m, f"not a sample: {where}"
        name, labels_text, value = m.group(1), m.group(2), m.group(3)
        labels = {}
        if labels_text:
            pos = 0
            while pos < len(labels_text):
                lm = _LABEL_RE.match(labels_text, pos)
                assert lm and lm.end() > pos, f"bad label set: {where}"
                assert lm.group(1) not in labels, f"repeated label: {where}"
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
                if lm.group(3) == "":
                    break
            assert pos == len(labels_text), f"bad label set: {where}"
        try:
            v = float(value)
        except ValueError:
            raise AssertionError(f"bad value: {where}")
        assert value in ("+Inf", "-Inf", "NaN") or re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", value), where
        fam_name = family_of(name)
        fam = families.setdefault(fam_name, {"type": None, "help": None, "samples": []})
        if fam_name not in order:
            order.append(fam_name)
        assert fam_name not in closed, f"samples of {fam_name} are not contiguous: {where}"
        for other in order:
            if other != fam_name and families[other]["samples"]:
                closed.add(other)
        if fam["type"] == "counter":
            assert name.endswith("_total") and v >= 0, f"counter sample: {where}"
        if fam["type"] == "histogram" and name.endswith("_bucket"):
            assert "le" in labels, f"bucket without le: {where}"
        fam["samples"].append((name, labels, v))
    for fam_name, fam in families.items():
        if fam["type"] != "histogram":
            continue
        series: dict[tuple, list] = {}
        counts = {}
        for name, labels, v in fam["samples"]:
            rest = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
            if name.endswith("_bucket"):
                series.setdefault(rest, []).append((float(labels["le"]), v))
            elif name.endswith("_count"):
                counts[rest] = v
        for rest, buckets in series.items():
            les = [le for le, _ in buckets]
            assert les == sorted(les) and les[-1] == float("inf"), f"{fam_name}{rest}: buckets {les}"
            vals = [v for _, v in buckets]
            assert vals == sorted(vals), f"{fam_name}{rest}: buckets not cumulative {vals}"
            assert counts.get(rest) == vals[-1], f"{fam_name}{rest}: _count != +Inf bucket"
    return families


def test_metrics_are_valid_prometheus_text(manager, box):
    manager.exec(box, ["true"])  # so the exec histogram has a sample
    r = manager.request("GET", "/metrics")
    assert r.status == 200, r
    ctype = r.headers.get("Content-Type", "")
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype, ctype
    text = manager.curl("GET", "/metrics").text
    # promtool is the reference; apt's `prometheus` package carries it.
    promtool = shutil.which("promtool")
    install_log = b""
    if promtool is None:
        try:
            p = subprocess.run(["apt-get", "install", "-y", "prometheus"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=300, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
            install_log = p.stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            install_log = str(e).encode()
        promtool = shutil.which("promtool")
    if promtool is not None:
        p = subprocess.run([promtool, "check", "metrics"], input=text.encode(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        assert p.returncode == 0, (f"promtool check metrics failed ({p.returncode}):\n{p.stdout.decode()}"
                                   f"{p.stderr.decode()}\n--- metrics ---\n{text}")
    else:
        print(f"NOTE: promtool unavailable (apt-get: {install_log[-300:]!r}); using the strict parser only")
    # Always also the strict reader of the format.
    families = strict_parse_prometheus_text(text)
    assert {"sbx_sandboxes", "sbx_http_requests_total", "sbx_exec_duration_seconds"} <= set(families), sorted(families)
    # The sandbox gauge agrees with the list.
    running = sum(1 for rec in manager.list() if rec["state"] == "running")
    m = re.search(r'^sbx_sandboxes\{driver="subprocess",state="running"\} (\d+)$', text, re.M)
    assert m and int(m.group(1)) == running, text
    assert re.search(r'^sbx_http_requests_total\{method="GET",code="200"\} \d+$', text, re.M), text


def test_strict_prometheus_parser_rejects_bad_text():
    # The fallback parser must not be a rubber stamp.
    good = "# TYPE a_total counter\na_total{x=\"1\"} 3\n"
    strict_parse_prometheus_text(good)
    for bad in ("a_total 1", "# TYPE a_total counter\na_total{x=1} 3\n", "# TYPE a counter\na 1\n",
                "a{x=\"1\",x=\"2\"} 1\n", "a one\n", "# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", "a 1\nb 1\na 2\n"):
        with pytest.raises(AssertionError):
            strict_parse_prometheus_text(bad)


# ==========================================================================
# auth
# ==========================================================================


def test_auth_missing_wrong_and_right_key(manager):
    wrong_keys = [strong_key(), manager.key[:-1] + ("0" if manager.key[-1] != "0" else "1"), manager.key[:-1],
                  manager.key + "0", manager.key.upper(), ""]
    offset = manager.log_size()
    for path in ("/v1/sandboxes", "/healthz", "/metrics", "/v1/nope"):
        err = assert_error(manager.request("GET", path, key=None), 401, "unauthenticated")
        for k in wrong_keys:
            err = assert_error(manager.request("GET", path, key=k), 401, "unauthenticated")
            assert not (k and k in json.dumps(err)), err
        assert manager.request("GET", path).status in (200, 404)
    assert manager.request("GET", "/v1/sandboxes").status == 200
    # A refused request does nothing.
    before = manager.ids()
    assert_error(manager.request("POST", "/v1/sandboxes", {}, key=wrong_keys[0]), 401)
    assert manager.ids() == before
    # The same through curl.
    assert_error(manager.curl("GET", "/v1/sandboxes", key=None), 401, "unauthenticated")
    assert_error(manager.curl("GET", "/v1/sandboxes", key=wrong_keys[0]), 401, "unauthenticated")
    assert manager.curl("GET", "/v1/sandboxes").status == 200
    log = wait_log(manager, offset, r"^GET /v1/sandboxes 200 .*\n(.*\n)*GET /v1/sandboxes 200 ")
    assert " 401 " in log, f"refused requests should be logged: {log[-2000:]}"
    for k in [manager.key] + [k for k in wrong_keys if len(k) >= 16]:
        assert k not in log, "an API key (right or wrong) appears in the server's log"


@pytest.fixture(scope="module")
def keyed(module_managers):
    """A manager with per-key permissions from a --config file."""
    keys = {name: strong_key() for name in ("reader", "writer", "runner", "runonly", "auditor")}
    # runonly and auditor see every owner's sandboxes (sandboxes:admin); the others only their own.
    perms = {"reader": ["sandboxes:read"], "writer": ["sandboxes:read", "sandboxes:write"],
             "runner": ["sandboxes:read", "sandboxes:write", "sandboxes:run"],
             "runonly": ["sandboxes:run", "sandboxes:admin"], "auditor": ["sandboxes:read", "sandboxes:admin"]}
    lines = ["server:", "  drain_timeout: 5s", "  api_keys:"]
    for name, key in keys.items():
        lines += [f"    - name: {name}", f"      key: {key}", f"      permissions: [{', '.join(perms[name])}]"]
    m = module_managers.new("keyed", "\n".join(lines) + "\n", extra_secrets=list(keys.values()))
    m.keys = keys
    m.box = m.create()["id"]
    return m


def test_read_only_key(keyed):
    k = keyed.keys["reader"]
    r = keyed.request("GET", "/v1/sandboxes", key=k)
    assert r.status == 200 and keyed.box not in [x["id"] for x in r.json()], "a key lists another key's sandbox"
    # Another key's sandbox does not exist for this key; one with sandboxes:admin sees it.
    assert_error(keyed.request("GET", f"/v1/sandboxes/{keyed.box}", key=k), 404, "not_found")
    assert_error(keyed.request("GET", f"/v1/sandboxes/{keyed.box}/stat?path=/work", key=k), 404, "not_found")
    a = keyed.keys["auditor"]
    assert keyed.request("GET", f"/v1/sandboxes/{keyed.box}", key=a).status == 200
    assert keyed.request("GET", f"/v1/sandboxes/{keyed.box}/stat?path=/work", key=a).status == 200
    assert keyed.box in [x["id"] for x in keyed.request("GET", "/v1/sandboxes", key=a).json()]
    assert keyed.request("GET", "/healthz", key=k).status == 200
    assert keyed.request("GET", "/metrics", key=k).status == 200
    before = keyed.ids()
    assert_error(keyed.request("POST", "/v1/sandboxes", {}, key=k), 403, "forbidden")
    assert keyed.ids() == before, "a forbidden create created a sandbox"
    err = assert_error(keyed.request("POST", f"/v1/sandboxes/{keyed.box}/exec", {"cmd": ["true"]}, key=k), 403)
    assert "sandboxes:run" in err["message"] + err.get("hint", ""), err
    assert_error(keyed.request("POST", "/v1/run", {"cmd": ["true"]}, key=k), 403)
    assert_error(keyed.request("DELETE", f"/v1/sandboxes/{keyed.box}", key=k), 403)
    assert_error(keyed.request("PUT", f"/v1/sandboxes/{keyed.box}/files?path=/work/x", body=b"x", key=k), 403)
    assert_error(keyed.request("POST", "/v1/gc", {"dry_run": True}, key=k), 403)
    assert keyed.ids() == before


def test_write_key_cannot_run(keyed):
    k = keyed.keys["writer"]
    rec = keyed.create(key=k)
    assert rec["spec"]["labels"].get("sbx.owner") in ("writer", None), rec
    err = assert_error(keyed.request("POST", f"/v1/sandboxes/{rec['id']}/exec", {"cmd": ["true"]}, key=k), 403,
                       "forbidden")
    assert "sandboxes:run" in err["message"] + err.get("hint", ""), err
    err = assert_error(keyed.request("POST", "/v1/run", {"cmd": ["true"]}, key=k), 403, "forbidden")
    assert "sandboxes:run" in err["message"] + err.get("hint", ""), err
    assert keyed.request("PUT", f"/v1/sandboxes/{rec['id']}/files?path=/work/w", body=b"w", key=k).status == 204
    assert keyed.request("DELETE", f"/v1/sandboxes/{rec['id']}", key=k).status == 200


def test_run_key_works(keyed):
    k = keyed.keys["runner"]
    own = keyed.create(key=k)["id"]
    j = keyed.exec(own, ["echo", "ran"], key=k)
    assert j["stdout"] == "ran\n" and j["exit_code"] == 0, j
    keyed.delete(own)
    r = keyed.request("POST", "/v1/run", {"cmd": ["echo", "once"]}, key=k)
    assert r.status == 200 and r.json()["stdout"] == "once\n", r
    # run alone allows exec (here with admin's view of the admin key's sandbox);
    # /v1/run creates a sandbox and so needs write too.
    k = keyed.keys["runonly"]
    assert keyed.exec(keyed.box, ["true"], key=k)["exit_code"] == 0
    assert_error(keyed.request("POST", "/v1/run", {"cmd": ["true"]}, key=k), 403)
    # The admin key has everything.
    assert keyed.request("POST", "/v1/run", {"cmd": ["true"]}).status == 200


def test_serve_refuses_to_start_without_a_key(manager_root):
    d = os.path.join(manager_root, f"nokey-{secrets.token_hex(2)}")
    os.makedirs(d)
    cfg = os.path.join(d, "config.yaml")
    Path(cfg).write_text("server:\n  drain_timeout: 1s\n")
    port = free_port()
    p = subprocess.run([SBX_BIN, "--config", cfg, "--state-dir", os.path.join(d, "state"), "serve", "--listen",
                        f"{HOST}:{port}", "--driver", "subprocess"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=scrubbed_env(), timeout=20)
    assert p.returncode != 0, p
    assert "ADMIN_API_KEY" in p.stderr.decode(), p.stderr


def test_insecure_dev_refuses_non_loopback(manager_root):
    d = os.path.join(manager_root, f"dev-{secrets.token_hex(2)}")
    os.makedirs(d)
    cfg = os.path.join(d, "config.yaml")
    Path(cfg).write_text("# empty\n")
    port = free_port()
    proc = subprocess.Popen([SBX_BIN, "--config", cfg, "--state-dir", os.path.join(d, "state"), "serve",
                             "--listen", f"0.0.0.0:{port}", "--driver", "subprocess", "--insecure-dev"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=scrubbed_env(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate(timeout=10)
        pytest.fail("`sbx serve --insecure-dev --listen 0.0.0.0:PORT` kept running instead of refusing")
    assert proc.returncode != 0, err
    assert "loopback" in err.decode() or "insecure-dev" in err.decode(), err


# ==========================================================================
# bad input
# ==========================================================================


def test_unknown_field_is_400_naming_it(manager):
    before = manager.ids()
    err = assert_error(manager.request("POST", "/v1/sandboxes", {"drvier": "subprocess"}), 400, "invalid_argument")
    assert "drvier" in err["message"], err
    assert "driver" in err["message"] + err.get("hint", ""), f"the accepted fields should be named: {err}"
    err = assert_error(manager.request("POST", "/v1/sandboxes", {"limits": {"memroy_mb": 5}}), 400)
    assert "memroy_mb" in err["message"], err
    assert manager.ids() == before


def test_unknown_exec_field_is_400(manager, box):
    err = assert_error(manager.request("POST", f"/v1/sandboxes/{box}/exec", {"cmd": ["true"], "bogus": 1}), 400)
    assert "bogus" in err["message"], err
    assert "cmd" in err["message"] + err.get("hint", ""), err


def test_malformed_json_is_400(manager, box):
    for path in ("/v1/sandboxes", f"/v1/sandboxes/{box}/exec", "/v1/run", "/v1/gc"):
        assert_error(manager.request("POST", path, body="{not json", headers={"Content-Type": "application/json"}),
                     400, "invalid_argument")
    assert_error(manager.request("POST", "/v1/sandboxes", body="[1, 2]"), 400)
    assert_error(manager.request("POST", f"/v1/sandboxes/{box}/exec", {"cmd": "echo hi"}), 400)
    assert_error(manager.request("POST", f"/v1/sandboxes/{box}/exec", {"cmd": []}), 400)
    assert_error(manager.request("POST", f"/v1/sandboxes/{box}/exec", {"env": {}}), 400)


def test_oversized_body_is_413_and_server_keeps_serving(manager, box):
    before = manager.ids()
    big = json.dumps({"labels": {"pad": "x" * (2 << 20)}})
    assert len(big) > 2 << 20
    assert_error(manager.request("POST", "/v1/sandboxes", body=big, headers={"Content-Type": "application/json"},
                                 timeout=60), 413)
    big_exec = json.dumps({"cmd": ["true"], "stdin": "y" * (65 << 20)})  # exec bodies carry stdin: 64 MiB cap
    assert_error(manager.request("POST", f"/v1/sandboxes/{box}/exec", body=big_exec, timeout=60), 413)
    # curl too.
    assert_error(manager.curl("POST", "/v1/sandboxes", data=big, headers={"Content-Type": "application/json"}), 413)
    assert manager.ids() == before
    assert manager.request("GET", "/healthz").status == 200
    assert manager.exec(box, ["echo", "alive"])["stdout"] == "alive\n"


def test_too_long_argv_is_400(manager, box):
    err = assert_error(manager.request("POST", f"/v1/sandboxes/{box}/exec", {"cmd": ["true"] + ["x"] * 1100}), 400)
    assert "too long" in err["message"] or "limit" in err["message"], err
    assert_error(manager.request("POST", f"/v1/sandboxes/{box}/exec", {"cmd": ["true", "z" * (300 << 10)]}), 400)
    # Just under the limits works.
    j = manager.exec(box, ["sh", "-c", 'echo $#', "sh"] + ["x"] * 1000)
    assert j["stdout"] == "1000\n", j


def test_unknown_route_is_404_json(manager):
    for method, path in (("GET", "/v1/nope"), ("GET", "/"), ("POST", "/v2/sandboxes"),
                         ("GET", "/v1/sandboxes/sbx_aaaaaaaaaaaa/nope")):
        r = manager.request(method, path, body="{}" if method == "POST" else None)
        assert_error(r, 404, "not_found")
        assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    r = manager.request("PATCH", "/v1/sandboxes")
    assert 400 <= r.status < 500, r
    assert_error(r, r.status)


def test_long_url_path_is_refused_with_json(manager):
    r = manager.request("GET", "/v1/sandboxes/" + "a" * 5000)
    assert r.status in (400, 414), r
    assert_error(r, r.status)
    assert manager.request("GET", "/healthz").status == 200


# ==========================================================================
# streaming exec, client disconnect, detach
# ==========================================================================


def test_ndjson_exec_streams_as_produced(manager, box):
    t0 = time.monotonic()
    conn, resp, _ = manager.open_stream(box, ["sh", "-c", "for i in 1 2 3 4; do echo line$i; sleep 0.5; done"])
    try:
        assert resp.status == 200
        assert resp.headers.get("Content-Type", "").startswith(NDJSON), resp.headers
        got = [(t - t0, o) for t, o in ndjson_lines(resp)]
    finally:
        conn.close()
    out = [(t, o) for t, o in got if "stdout" in o]
    text = "".join(o["stdout"] for _, o in out)
    assert text == "line1\nline2\nline3\nline4\n", got
    assert out[0][0] < 1.2, f"the first line arrived only {out[0][0]:.2f} s after the request: {got}"
    assert out[-1][0] >= 1.4, f"the last line arrived at {out[-1][0]:.2f} s, before the command printed it: {got}"
    last_t, last = got[-1]
    assert set(last) == {"exit"}, got
    assert EXEC_KEYS <= set(last["exit"]), last
    assert last["exit"]["exit_code"] == 0 and last["exit"]["error"] == "", last
    assert last_t >= out[-1][0]


def test_ndjson_exec_bytes_stderr_and_errors(manager, box):
    conn, resp, _ = manager.open_stream(box, ["sh", "-c", r"printf 'x\377'; echo e >&2; exit 5"])
    try:
        lines = [o for _, o in ndjson_lines(resp)]
    finally:
        conn.close()
    out = b"".join(base64.b64decode(o["stdout_b64"]) if "stdout_b64" in o else o.get("stdout", "").encode()
                   for o in lines if "stdout" in o or "stdout_b64" in o)
    assert out == b"x\xff", lines
    assert "".join(o.get("stderr", "") for o in lines) == "e\n", lines
    assert lines[-1]["exit"]["exit_code"] == 5, lines
    conn, resp, _ = manager.open_stream(box, ["no-such-command-sbxit"])
    try:
        lines = [o for _, o in ndjson_lines(resp)]
    finally:
        conn.close()
    assert lines[-1]["exit"]["exit_code"] == 127 and lines[-1]["exit"]["error"], lines


def sleepers(manager, sid) -> list[str]:
    """The `sleep 30` processes in the sandbox (not the shells whose command line mentions it)."""
    j = manager.exec(sid, ["ps", "-eo", "pid,args"])
    return [l for l in j["stdout"].splitlines() if l.split(None, 1)[-1] == "sleep 30"]


@pytest.mark.parametrize("script,first_line,attempts", [
    ("echo started; sleep 30", "started\n", 1),                             # the brief's case
    ("sleep 30", None, 1),                                                   # disconnect before any output
    ("sleep 30 & echo started; sleep 30", "started\n", 1),                  # a background child
    # A child in its own session is still part of the command's tree.  Whether
    # it escapes depends on timing, so this case tries a few times.
    ("sleep 30 & setsid sleep 30 & echo started; sleep 30", "started\n", 3),
], ids=["after-output", "before-output", "bg-child", "setsid-child"])
def test_client_disconnect_kills_the_command(manager, fresh_box, script, first_line, attempts):
    for attempt in range(1, attempts + 1):
        conn, resp, sock = manager.open_stream(fresh_box, ["sh", "-c", script])
        try:
            if first_line is not None:
                first = json.loads(resp.readline())
                assert first == {"stdout": first_line}, first
            assert wait_until(lambda: len(sleepers(manager, fresh_box)) == script.count("sleep 30"), 5, 0.1), \
                f"the command is not running: {sleepers(manager, fresh_box)}"
        finally:
            sock.shutdown(socket.SHUT_RDWR)
            resp.close()
            conn.close()
        gone = wait_until(lambda: not sleepers(manager, fresh_box), 5, 0.2)
        assert gone, (f"attempt {attempt}: `sleep 30` still runs 5 s after the client of {script!r} went away: "
                      f"{manager.exec(fresh_box, ['ps', '-eo', 'pid,ppid,pgid,sid,args'])['stdout']}")
        # pgrep also sees a killed sleep that is still a zombie (its command line
        # is gone, its name is not) until its new parent reaps it, a moment later.
        assert wait_until(lambda: manager.exec(fresh_box, ["pgrep", "-x", "sleep"])["exit_code"] == 1, 5, 0.2), \
            manager.exec(fresh_box, ["ps", "-eo", "pid,ppid,stat,args"])["stdout"]
    assert manager.request("GET", "/healthz").status == 200
    assert manager.exec(fresh_box, ["echo", "still"])["stdout"] == "still\n"


def test_detached_command_survives_disconnect(manager, fresh_box):
    conn, resp, sock = manager.open_stream(
        fresh_box, ["sh", "-c", "echo started; sleep 1; echo bye > /work/detach-marker"], detach=True)
    try:
        assert json.loads(resp.readline()) == {"stdout": "started\n"}
    finally:
        sock.shutdown(socket.SHUT_RDWR)
        resp.close()
        conn.close()
    time.sleep(2)
    j = manager.exec(fresh_box, ["cat", "/work/detach-marker"])
    assert j["exit_code"] == 0 and j["stdout"] == "bye\n", f"the detached command did not finish: {j}"
    assert manager.request("GET", "/healthz").status == 200


# ==========================================================================
# the real sbx client against the manager
# ==========================================================================


def test_client_create_exec_cp_ls_rm(manager, clients, tmp_path):
    c = clients.new(remote_env(manager))
    sid = c.create(driver=None)
    assert sid in manager.ids(), "the client did not create the sandbox on the manager"
    assert not os.path.exists(c.sandbox_dir(sid)), "the sandbox was created locally"
    try:
        # exit codes and both streams pass through
        r = c.sh(sid, "echo out; echo err >&2; exit 3")
        assert r.rc == 3 and r.out == "out\n" and "err\n" in r.err, r
        assert c.exec(sid, "no-such-command-sbxit").rc == 127
        assert c.sh(sid, "kill -KILL $$").rc == 137
        # streaming: the first line arrives while the command still runs, order kept
        t0 = time.monotonic()
        p = c.popen("exec", sid, "--", "sh", "-c", "echo first; sleep 1.5; echo second; echo third")
        try:
            first = p.stdout.readline()
            t_first = time.monotonic() - t0
            still_running = p.poll() is None
            rest, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        assert first == b"first\n" and rest == b"second\nthird\n", (first, rest, err)
        assert t_first < 1.3 and still_running, f"first line after {t_first:.2f} s; streaming is broken"
        assert p.returncode == 0, err
        # cp host -> sandbox, sandbox -> host (file and directory)
        data = secrets.token_bytes(100_000)
        (tmp_path / "in.bin").write_bytes(data)
        c.run("cp", str(tmp_path / "in.bin"), f"{sid}:/work/in.bin").ok()
        assert manager.exec(sid, ["sha256sum", "/work/in.bin"])["stdout"].split()[0] == hashlib.sha256(data).hexdigest()
        c.run("cp", f"{sid}:/work/in.bin", str(tmp_path / "back.bin")).ok()
        assert (tmp_path / "back.bin").read_bytes() == data
        (tmp_path / "d" / "sub").mkdir(parents=True)
        (tmp_path / "d" / "sub" / "f.txt").write_text("deep")
        c.run("cp", str(tmp_path / "d"), f"{sid}:/work/d").ok()
        assert manager.exec(sid, ["cat", "/work/d/sub/f.txt"])["stdout"] == "deep"
        manager.sh(sid, "mkdir -p /work/out/x && printf made > /work/out/x/y")
        c.run("cp", f"{sid}:/work/out", str(tmp_path / "out")).ok()
        assert (tmp_path / "out" / "x" / "y").read_text() == "made"
        # ls shows it
        assert sid in [rec["id"] for rec in c.ls()], "sbx ls does not show the manager's sandbox"
        assert sid in c.run("ls", "-q").ok().out.split()
        # rm
        r = c.run("rm", sid).ok()
        assert sid in r.out
        assert_error(manager.request("GET", f"/v1/sandboxes/{sid}"), 404)
        assert sid not in c.run("ls", "-q").ok().out.split()
    finally:
        manager.delete(sid)


def test_client_exec_rm_runs_on_the_manager(manager, clients):
    c = clients.new(remote_env(manager))
    before = set(manager.ids())
    offset = manager.log_size()
    r = c.run("exec", "--rm", "--", "sh", "-c", "echo ok; exit 7")
    assert r.rc == 7 and r.out == "ok\n", r
    # One request that creates, runs and removes: the sandbox cannot outlive it.
    log = wait_log(manager, offset, r"^POST /v1/run 200 ")
    assert re.search(r"^POST /v1/run 200 ", log, re.M), f"the one-shot did not run on the manager:\n{log}"
    assert set(manager.ids()) == before
    assert not Path(c.state_dir, "sandboxes").is_dir() or not any(Path(c.state_dir, "sandboxes").iterdir())


def test_killed_exec_rm_leaves_nothing_on_the_manager(manager, clients):
    # kill -9 of a one-shot client (a CI runner's deadline): the manager ties
    # the sandbox to the HTTP request, so it goes with the client.
    c = clients.new(remote_env(manager))
    before = set(manager.ids())
    p = c.popen("exec", "--rm", "--", "sh", "-c", "echo started; sleep 60")
    new = signal_once_started(p, signal.SIGKILL, lambda: set(manager.ids()) - before)
    assert len(new) == 1, new
    assert wait_until(lambda: set(manager.ids()) == before, 10), f"left on the manager: {set(manager.ids()) - before}"
    assert not [d for d in new if os.path.exists(os.path.join(manager.state_dir, "sandboxes", d))]
    assert no_local_sandboxes(c)


def test_serve_reaper_collects_a_killed_local_one_shot(managers):
    # A local `sbx exec --rm` on the manager's own state root, killed: the
    # reaper's gc (every 5 s by default) finds its client gone.
    m = managers.new("reaper")
    local = Sbx(m.state_dir, m.config, label="local-one-shot")
    p = local.popen("exec", "--rm", "--driver", "subprocess", "--", "sh", "-c", "echo started; sleep 60")
    (sid,) = signal_once_started(p, signal.SIGKILL, lambda: os.listdir(os.path.join(m.state_dir, "sandboxes")))
    assert wait_until(lambda: not os.path.exists(os.path.join(m.state_dir, "sandboxes", sid)), 10), \
        f"the reaper kept {sid}:\n{m.log()[-2000:]}"
    # The reaper logs once the removal is done, a moment after the directory went.
    assert wait_until(lambda: "reaper removed 1" in m.log(), 5), m.log()[-2000:]


def test_only_the_manager_looks_like_sbx_serve(managers):
    # `pgrep -f "sbx serve"` and the like must find the manager, not the
    # sandboxes it started (which kept its argv: `... serve --listen ...`).
    m = managers.new("titles")
    drivers = ["subprocess"] + (["deno"] if driver_problem(Sbx(m.state_dir, m.config), "deno") is None else [])
    ids = [m.create({"driver": d})["id"] for d in drivers]
    try:
        listen = f"--listen {HOST}:{m.port}"
        like_serve = {pid: cmd for pid, cmd in cmdlines().items() if listen in cmd}
        assert list(like_serve) == [m.proc.pid], f"processes that look like this sbx serve: {like_serve}"
        titled = " ".join(cmdlines().values())
        for sid, d in zip(ids, drivers):
            assert f"sbx-sandbox {sid} {d}" in titled, (sid, d)
    finally:
        for sid in ids:
            m.delete(sid)


def warnings_of(r) -> list[str]:
    return [l for l in r.err.splitlines() if "warning" in l.lower()]


def test_fallback_remote_off_runs_locally_without_warning(manager, clients):
    c = clients.new(remote_env(manager, USE_REMOTE_SANDBOX="false"))
    offset = manager.log_size()
    r = c.run("exec", "--rm", "--", "sh", "-c", "echo ok")
    assert r.rc == 0 and r.out == "ok\n", r
    assert not warnings_of(r) and r.err == "", r
    # A marker request: once it is logged, anything the client sent before it is logged too.
    marker = f"/healthz?marker={secrets.token_hex(4)}"
    assert manager.request("GET", marker).status == 200
    log = wait_log(manager, offset, re.escape("GET /healthz"))
    assert [l for l in log.splitlines() if l.strip()] == [l for l in log.splitlines() if l.startswith("GET /healthz ")]
    assert len(log.splitlines()) == 1, f"USE_REMOTE_SANDBOX=false still contacted the manager:\n{log}"


def test_fallback_url_unset_runs_locally(clients):
    c = clients.new({"USE_REMOTE_SANDBOX": "true", "LOCAL_SANDBOX_BACKEND": "subprocess", "ADMIN_API_KEY": strong_key()})
    r = c.run("exec", "--rm", "--", "sh", "-c", "echo ok")
    assert r.rc == 0 and r.out == "ok\n", r
    assert "error" not in r.err, r


def test_fallback_manager_down_warns_once_and_is_quick(clients):
    url = f"http://{HOST}:{free_port()}"
    c = clients.new({"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": url, "ADMIN_API_KEY": strong_key(),
                     "LOCAL_SANDBOX_BACKEND": "subprocess"})
    r = c.run("exec", "--rm", "--", "sh", "-c", "echo ok")
    assert r.rc == 0 and r.out == "ok\n", r
    w = warnings_of(r)
    assert len(w) == 1 and url in w[0], f"expected exactly one warning naming {url}: {r!r}"
    assert [l for l in r.err.splitlines() if l.strip()] == w, f"stderr has more than the warning: {r!r}"
    assert r.elapsed < 3, f"falling back took {r.elapsed:.2f} s"


def test_fallback_manager_answering_503(clients, fake503):
    c = clients.new({"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": fake503.url, "ADMIN_API_KEY": strong_key(),
                     "LOCAL_SANDBOX_BACKEND": "subprocess"})
    r = c.run("exec", "--rm", "--", "sh", "-c", "echo ok")
    assert r.rc == 0 and r.out == "ok\n", r
    assert any(req.startswith("GET /healthz") for req in fake503.requests), fake503.requests
    assert not [q for q in fake503.requests if "/v1/" in q], f"sbx used an unhealthy manager: {fake503.requests}"
    w = warnings_of(r)
    assert len(w) == 1 and fake503.url in w[0] and "503" in w[0], r
    assert r.elapsed < 3, r


def test_fallback_none_fails_closed_naming_the_url(clients):
    url = f"http://{HOST}:{free_port()}"
    c = clients.new({"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": url, "ADMIN_API_KEY": strong_key(),
                     "LOCAL_SANDBOX_BACKEND": "none"})
    r = c.run("exec", "--rm", "--", "sh", "-c", "echo ok")
    assert r.rc == 125, r
    assert r.out == "" and url in r.err, r
    assert not Path(c.state_dir, "sandboxes").is_dir() or not any(Path(c.state_dir, "sandboxes").iterdir())


def no_local_sandboxes(c) -> bool:
    sb = Path(c.state_dir, "sandboxes")
    return not sb.is_dir() or not any(sb.iterdir())


@pytest.mark.parametrize("local", ["subprocess", "none"])
def test_a_refused_key_is_an_error_never_a_fallback(manager, clients, local):
    # The manager is up and refuses the key: a configuration error to fix, not
    # an outage to route around by running the code on this host.
    c = clients.new(remote_env(manager, ADMIN_API_KEY=strong_key(), LOCAL_SANDBOX_BACKEND=local))
    unknown = "sbx_aaaaaaaaaaaa"
    calls = [("exec", "--rm", "--", "sh", "-c", "echo ran-here"), ("create",), ("ls",), ("gc",),
             ("exec", unknown, "--", "sh", "-c", "echo ran-here"), ("rm", unknown),
             ("cp", f"{unknown}:/etc/hostname", os.path.join(c.state_dir, "..", "copied"))]
    for args in calls:
        r = c.run(*args)
        assert r.rc == 125, r
        assert r.out == "", r
        assert manager.url in r.err and "refused the API key" in r.err, r
        assert "ADMIN_API_KEY" in r.err, f"the hint should name the setting to fix: {r!r}"
        assert "falling back" not in r.err and not warnings_of(r), r
    assert no_local_sandboxes(c), "a refused key ran something locally"
    r = c.run("doctor")
    assert r.rc == 1 and "refused the API key" in r.out and "not falling back" in r.out, r


def test_a_refused_key_on_a_remembered_sandbox_is_an_error(manager, clients):
    c = clients.new(remote_env(manager))
    sid = c.create(driver=None)
    try:
        # The id remembers its manager; the key has changed (rotated, mistyped) since.
        wrong = {"ADMIN_API_KEY": strong_key()}
        for args in (("exec", sid, "--", "sh", "-c", "echo ran-here"), ("ls",), ("rm", sid)):
            r = c.run(*args, env=wrong)
            assert r.rc == 125 and r.out == "" and "falling back" not in r.err, r
            assert manager.url in r.err, r
        assert no_local_sandboxes(c)
        assert sid in manager.ids()
    finally:
        manager.delete(sid)


def test_local_none_with_healthy_manager_uses_it(manager, clients):
    c = clients.new(remote_env(manager, LOCAL_SANDBOX_BACKEND="none"))
    offset = manager.log_size()
    r = c.run("exec", "--rm", "--", "sh", "-c", "echo ok")
    assert r.rc == 0 and r.out == "ok\n" and not warnings_of(r), r
    assert "POST /v1/run 200" in wait_log(manager, offset, "POST /v1/run 200")


def test_an_id_remembers_its_manager(manager, clients):
    c = clients.new(remote_env(manager))
    sid = c.create(driver=None)
    try:
        manager.sh(sid, "printf here > /work/where")
        offset = manager.log_size()
        # The chain now says local-only, or has no manager at all: the id still goes to its manager.
        for env in ({"USE_REMOTE_SANDBOX": "false"}, {"USE_REMOTE_SANDBOX": "false", "SANDBOX_MANAGER_URL": ""},
                    {"LOCAL_SANDBOX_BACKEND": "none", "USE_REMOTE_SANDBOX": "false"}):
            r = c.run("exec", sid, "--", "cat", "/work/where", env=env)
            assert r.rc == 0 and r.out == "here", (env, r)
        assert f"POST /v1/sandboxes/{sid}/exec 200" in wait_log(manager, offset, f"POST /v1/sandboxes/{sid}/exec 200")
        r = c.run("cp", f"{sid}:/work/where", os.path.join(c.state_dir, "..", f"where-{sid}"),
                  env={"USE_REMOTE_SANDBOX": "false"})
        assert r.rc == 0, r
        r = c.run("rm", sid, env={"USE_REMOTE_SANDBOX": "false"})
        assert r.rc == 0, r
        assert_error(manager.request("GET", f"/v1/sandboxes/{sid}"), 404)
    finally:
        manager.delete(sid)


# ==========================================================================
# restart, drain, reaper, caps (each with its own manager)
# ==========================================================================


def test_restart_keeps_sandboxes_and_reaps_dead_ones(managers):
    m = managers.new("restart", "server:\n  reap_interval: 1h\n  drain_timeout: 5s\n")
    a = m.create()["id"]
    b = m.create()["id"]
    assert m.request("PUT", f"/v1/sandboxes/{a}/files?path=/work/keep.txt", body=b"survives").status == 204
    m.kill()
    m.start(port=m.port)
    assert {a, b} <= set(m.ids()), m.list()
    assert m.exec(a, ["cat", "/work/keep.txt"])["stdout"] == "survives"
    assert m.exec(b, ["true"])["exit_code"] == 0
    # b's agent dies while no manager runs.
    pid = json.loads(Path(m.state_dir, "sandboxes", b, "record.json").read_text())["agent_pid"]
    m.kill()
    assert pid_alive(pid), f"agent {pid} of {b} died with the manager"
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not pid_alive(pid), 5), f"agent {pid} survived SIGKILL"
    offset = m.log_size()
    m.start(port=m.port)
    ids = m.ids()
    assert b not in ids, f"the dead sandbox {b} is still listed after the restart: {m.list()}"
    assert a in ids
    assert "reaped 1 dead" in m.log(offset), m.log(offset)
    assert not os.path.exists(os.path.join(m.state_dir, "sandboxes", b))
    assert m.exec(a, ["cat", "/work/keep.txt"])["stdout"] == "survives"
    assert_error(m.request("GET", f"/v1/sandboxes/{b}"), 404)


def test_sigterm_drains_in_flight_exec(managers):
    m = managers.new("drain", "server:\n  reap_interval: 1h\n  drain_timeout: 10s\n")
    sid = m.create()["id"]
    result = {}

    def run():
        try:
            result["r"] = m.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", "sleep 2; echo done"]},
                                    timeout=20)
        except Exception as e:  # reported below
            result["e"] = e
        result["t"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    t.start()
    time.sleep(0.3)
    m.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        r = m.request("GET", "/v1/sandboxes", timeout=3)
        assert r.status == 503, f"a new request during the drain got {r!r}"
        assert_error(r, 503)
    except (ConnectionRefusedError, ConnectionResetError, socket.timeout, OSError) as e:
        if isinstance(e, socket.timeout):
            pytest.fail("a new request during the drain hung instead of 503 / connection refused")
    t.join(15)
    assert not t.is_alive(), "the in-flight exec did not finish"
    assert "e" not in result, f"the in-flight exec failed during the drain: {result.get('e')!r}\n{m.log()[-2000:]}"
    r = result["r"]
    assert r.status == 200, r
    assert r.json()["exit_code"] == 0 and r.json()["stdout"] == "done\n", r
    try:
        rc = m.proc.wait(5)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server did not exit within 5 s after the drain:\n{m.log()[-2000:]}")
    assert rc == 0, f"exit status {rc}:\n{m.log()[-2000:]}"
    assert time.monotonic() - t0 < 10
    assert "draining" in m.log()


def slow_http(m: Manager, method: str, path: str, body: dict, accept: str, rcvbuf: int = 32768) -> socket.socket:
    """Sends one request on a raw socket with a small receive buffer (a slow client's view)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect((HOST, m.port))
    data = json.dumps(body).encode()
    s.sendall((f"{method} {path} HTTP/1.1\r\nHost: {HOST}:{m.port}\r\nX-API-Key: {m.key}\r\nAccept: {accept}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
              + data)
    return s


def read_slowly(s: socket.socket, deadline_s: float = 40, chunk: int = 32768, pause: float = 0.004) -> bytes:
    """Reads until EOF at a few MB/s, as a client on a slow link would."""
    got = bytearray()
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < deadline_s:
            c = s.recv(chunk)
            if not c:
                break
            got += c
            time.sleep(pause)
    except OSError:
        pass  # a reset: what arrived is judged below
    finally:
        s.close()
    return bytes(got)


@pytest.mark.parametrize("accept", ["application/json", NDJSON], ids=["buffered", "ndjson"])
def test_sigterm_drain_delivers_a_large_answer_to_a_slow_client(managers, accept):
    # The same drain as above, with 6 MB of output read by a slow client: the
    # request is in flight until its answer has been sent, not just computed.
    m = managers.new("drain-slow", "server:\n  reap_interval: 1h\n  drain_timeout: 20s\n")
    sid = m.create()["id"]
    size = 6_000_000  # well past the socket buffers, read at ~2 MB/s
    s = slow_http(m, "POST", f"/v1/sandboxes/{sid}/exec",
                  {"cmd": ["sh", "-c", f"sleep 1; head -c {size} /dev/zero | tr '\\0' a; echo done"]}, accept)
    time.sleep(0.3)
    m.proc.send_signal(signal.SIGTERM)
    raw = read_slowly(s, pause=0.015)
    try:
        rc = m.proc.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail("the server did not exit after the drain")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    if accept == NDJSON:
        complete = body.endswith(b"0\r\n\r\n") and b'"exit"' in body[-4096:]
    else:
        m_len = re.search(rb"(?im)^content-length: *(\d+)", head)
        complete = m_len is not None and len(body) == int(m_len.group(1))
    assert complete, (f"SIGTERM drain cut an in-flight {accept} exec answer: the client got {len(body)} body bytes "
                      f"of ~{size}; tail {body[-120:]!r}; server exit {rc}\n{m.log()[-1500:]}")
    if accept != NDJSON:
        j = json.loads(body)
        assert j["exit_code"] == 0 and len(j["stdout"]) == size + 5 and j["stdout"].endswith("done\n")
    assert rc == 0


def test_idle_reaper_removes_idle_keeps_persistent(managers):
    m = managers.new("reaper", "server:\n  drain_timeout: 5s\n")  # the default reap interval (5 s)
    offset = m.log_size()
    t0 = time.monotonic()
    idle = m.create({"idle_timeout_s": 1})["id"]
    keep = m.create({"idle_timeout_s": 1, "persistent": True})["id"]
    normal = m.create()["id"]
    gone = wait_until(lambda: idle not in m.ids(), 8.5, 0.25)
    assert gone, f"the idle sandbox is still listed {time.monotonic() - t0:.1f} s after creation: {m.list()}"
    ids = m.ids()
    assert keep in ids and normal in ids, ids
    log = m.log(offset)
    assert "/v1/gc" not in log
    assert "reaper removed" in log, log
    assert m.exec(keep, ["true"])["exit_code"] == 0


def test_per_key_exec_cap(managers):
    other = strong_key()
    m = managers.new("caps", "server:\n  max_execs_per_key: 1\n  drain_timeout: 5s\n  api_keys:\n"
                             f"    - name: other\n      key: {other}\n"
                             "      permissions: [sandboxes:read, sandboxes:run, sandboxes:admin]\n", extra_secrets=[other])
    sid = m.create()["id"]
    conn, resp, sock = m.open_stream(sid, ["sh", "-c", "echo started; sleep 20"])
    try:
        assert json.loads(resp.readline()) == {"stdout": "started\n"}
        conn2, resp2, _ = m.open_stream(sid, ["echo", "second"])
        try:
            assert_error(Resp(resp2.status, resp2.headers, resp2.read()), 429, "limit_exceeded")
        finally:
            conn2.close()
        assert_error(m.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]}), 429)
        assert_error(m.request("POST", "/v1/run", {"cmd": ["true"]}), 429)
        # The cap is per key.
        assert m.exec(sid, ["echo", "x"], key=other)["stdout"] == "x\n"
    finally:
        sock.shutdown(socket.SHUT_RDWR)
        resp.close()
        conn.close()
    # The slot comes back once the first command is gone.
    ok = wait_until(lambda: m.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]}).status == 200, 5, 0.2)
    assert ok, "the exec slot was not released after the client disconnected"


def test_per_key_sandbox_cap_holds_under_concurrency(managers):
    m = managers.new("sbxcap", "server:\n  max_sandboxes_per_key: 2\n  reap_interval: 1h\n  drain_timeout: 5s\n")
    # One at a time: the third is refused.
    a, b = m.create()["id"], m.create()["id"]
    assert_error(m.request("POST", "/v1/sandboxes", {}), 429, "limit_exceeded")
    assert sorted(m.ids()) == sorted([a, b])
    m.delete(a)
    m.delete(b)
    # Concurrent creates must not overshoot the cap either (a few rounds: it is a race).
    for round_no in range(3):
        statuses = []
        barrier = threading.Barrier(10)

        def go():
            barrier.wait(5)
            statuses.append(m.request("POST", "/v1/sandboxes", {}).status)

        threads = [threading.Thread(target=go, daemon=True) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        held = m.ids()
        assert sorted(statuses).count(201) <= 2 and len(held) <= 2, (
            f"round {round_no}: with server.max_sandboxes_per_key: 2, 10 concurrent creates with one key got "
            f"{sorted(statuses)} and the key now holds {len(held)} sandboxes")
        assert set(statuses) <= {201, 429}, statuses
        for sid in held:
            m.delete(sid)
