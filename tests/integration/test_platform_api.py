"""The platform's /v1/sandboxes contract, served by a real `sbx serve` on
loopback over real sandboxes, called the way the platform's SDK calls it:
label/persistent creates, a bare array from the list, {"success": true} from
DELETE, shell-string /commands, JSON /files with utf-8 and base64.

Also the rules around it: one owner per sandbox (another key gets 404 on every
route, also after a restart), 429 with Retry-After, X-Request-Id everywhere,
405 with Allow, images only by the names the operator listed, and the API
defects of issue 10 (exec slots freed on every path, a buffered exec killed
when its client hangs up)."""
from __future__ import annotations

import base64
import datetime
import json
import os
import re
import shutil
import socket
import time

import pytest

from conftest import pid_alive, skip_or_fail, wait_until
from manager_fixtures import HOST, NDJSON, assert_error, strong_key
from manager_fixtures import managers, manager_root, module_managers  # noqa: F401 (fixtures)

BASE_CONFIG = "server:\n  reap_interval: 1h\n  drain_timeout: 5s\n"


class Platform:
    """The calls of the platform's SDK (its `sandboxes` resource), as plain HTTP."""

    def __init__(self, manager, key=None):
        self.m = manager
        self.key = key if key is not None else manager.key

    def call(self, method, path, body=None, **kw):
        return self.m.request(method, path, body, key=self.key, **kw)

    def create(self, label=None, persistent=False):
        r = self.call("POST", "/v1/sandboxes", {"label": label, "persistent": persistent})
        assert r.status in (200, 201), r
        return r.json()

    def list(self):
        r = self.call("GET", "/v1/sandboxes")
        assert r.status == 200, r
        return r.json()

    def get(self, sid):
        return self.call("GET", f"/v1/sandboxes/{sid}")

    def delete(self, sid):
        return self.call("DELETE", f"/v1/sandboxes/{sid}")

    def run(self, sid, command, timeout=None):
        body = {"command": command}
        if timeout is not None:
            body["timeout"] = timeout
        return self.call("POST", f"/v1/sandboxes/{sid}/commands", body, timeout=120)

    def write(self, sid, path, content, encoding="utf-8"):
        return self.call("POST", f"/v1/sandboxes/{sid}/files", {"path": path, "content": content, "encoding": encoding})

    def read(self, sid, path, encoding="utf-8"):
        return self.call("GET", f"/v1/sandboxes/{sid}/files?path={path}&encoding={encoding}")


def iso_utc(text: str) -> datetime.datetime:
    assert isinstance(text, str) and text.endswith("Z"), text
    t = datetime.datetime.fromisoformat(text[:-1] + "+00:00")
    assert t.tzinfo is not None
    return t


@pytest.fixture(scope="module")
def platform_managers(module_managers):
    made = {}

    def get(driver):
        if driver not in made:
            made[driver] = module_managers.new(f"platform-{driver}", BASE_CONFIG, driver=driver)
        return made[driver]
    return get


@pytest.fixture
def pm(platform_managers, driver):
    return platform_managers(driver)


# --------------------------------------------------------------------------- the contract table

@pytest.mark.only_drivers("subprocess", "runsc")
def test_platform_contract_end_to_end(pm, driver):
    api = Platform(pm)
    t0 = datetime.datetime.now(datetime.timezone.utc)
    box = api.create(label="job-1")
    sid = box["id"]
    try:
        for field in ("id", "status", "created_at", "last_activity", "label"):
            assert field in box, f"the sandbox object lacks {field}: {box}"
        assert box["label"] == "job-1" and isinstance(box["status"], str), box
        assert abs((iso_utc(box["created_at"]) - t0).total_seconds()) < 120, box
        iso_utc(box["last_activity"])
        # The guide's sandboxes are network-jailed by default when made through the manager.
        assert box["spec"]["network"] == "jail", box

        # Files: text, and bytes into directories that do not exist yet.
        r = api.write(sid, "/work/run.py", "import os, sys\nprint('x is', os.environ['X'])\nprint(sys.version_info[0])\n")
        assert r.status == 200 and r.json()["path"] == "/work/run.py", r
        data = bytes(range(256)) * 4
        r = api.write(sid, "/work/deep/er/data.bin", base64.b64encode(data).decode(), encoding="base64")
        assert r.status == 200 and r.json()["path"] == "/work/deep/er/data.bin", r
        r = api.read(sid, "/work/deep/er/data.bin", encoding="base64")
        assert r.status == 200 and base64.b64decode(r.json()["content"]) == data, r
        r = api.read(sid, "/work/run.py")
        assert r.status == 200 and r.json()["content"].startswith("import os"), r
        err = assert_error(api.read(sid, "/work/deep/er/data.bin", encoding="utf-8"), 400)
        assert "encoding=base64" in err["message"] + err.get("hint", ""), err
        assert_error(api.read(sid, "/work/nope.txt"), 404, "not_found")

        # Commands: a shell string in /work, `python` is Python 3.
        j = api.run(sid, "export X=1; python /work/run.py").json()
        assert j == {**j, "stdout": "x is 1\n3\n", "stderr": "", "exit_code": 0, "timed_out": False}, j
        j = api.run(sid, "echo abc | tr a-c x-z && cd /tmp && pwd; echo oops >&2; exit 3").json()
        assert j["stdout"] == "xyz\n/tmp\n" and j["stderr"] == "oops\n" and j["exit_code"] == 3, j
        assert api.run(sid, "pwd").json()["stdout"] == "/work\n"
        j = api.run(sid, "echo started; sleep 30", timeout=1).json()
        assert j["timed_out"] is True and j["exit_code"] == 124 and j["stdout"] == "started\n", j
        assert api.run(sid, "cat /work/deep/er/data.bin | wc -c").json()["stdout"].strip() == str(len(data))

        listed = api.list()
        assert isinstance(listed, list) and [b for b in listed if b["id"] == sid][0]["label"] == "job-1", listed
        r = api.get(sid)
        assert r.status == 200 and r.json()["id"] == sid and r.json()["status"] == "running", r
    finally:
        r = api.delete(sid)
    assert r.status == 200 and r.json()["success"] is True, r
    assert_error(api.get(sid), 404, "not_found")
    assert sid not in [b["id"] for b in api.list()]


def test_commands_and_files_bad_input(pm_sub):
    api = Platform(pm_sub)
    sid = api.create()["id"]
    try:
        for body in ({}, {"command": ""}, {"command": ["ls"]}, {"command": "true", "timeout": "soon"},
                     {"command": "true", "timeout": -1}, {"command": "true", "shell": "bash"}):
            assert_error(api.call("POST", f"/v1/sandboxes/{sid}/commands", body), 400)
        for body in ({"path": "/work/a"}, {"content": "x"}, {"path": "/work/a", "content": "x", "encoding": "rot13"},
                     {"path": "/work/a", "content": "@@@", "encoding": "base64"}):
            assert_error(api.call("POST", f"/v1/sandboxes/{sid}/files", body), 400)
        # A relative path is the workdir's.
        r = api.write(sid, "rel/dir/f.txt", "hi")
        assert r.status == 200 and r.json()["path"] == "/work/rel/dir/f.txt", r
        assert api.read(sid, "/work/rel/dir/f.txt").json()["content"] == "hi"
        # Output that is not text still comes as a string, with the exact bytes beside it.
        j = api.run(sid, "printf 'a\\377b'").json()
        assert isinstance(j["stdout"], str) and base64.b64decode(j["stdout_b64"]) == b"a\xffb", j
    finally:
        api.delete(sid)


@pytest.fixture
def pm_sub(platform_managers, sbx):
    from conftest import driver_problem
    problem = driver_problem(sbx, "subprocess")
    if problem:
        skip_or_fail(problem)
    return platform_managers("subprocess")


def test_too_many_commands_is_429_with_retry_after(managers):
    m = managers.new("retry", BASE_CONFIG + "  max_execs_per_key: 1\n")
    sid = m.create({"network": "none"})["id"]
    conn, resp, _ = m.open_stream(sid, ["sh", "-c", "echo started; sleep 20"])
    try:
        assert json.loads(resp.readline()) == {"stdout": "started\n"}
        r = m.request("POST", f"/v1/sandboxes/{sid}/commands", {"command": "true"})
        assert_error(r, 429, "limit_exceeded")
        assert r.headers.get("Retry-After", "").isdigit(), r.headers
    finally:
        conn.close()
    # The slot comes back when the stream's client goes: the retry succeeds.
    wait_until(lambda: m.request("POST", f"/v1/sandboxes/{sid}/commands", {"command": "true"}).status == 200, 15)


def test_every_answer_has_a_request_id(pm_sub):
    m = pm_sub
    seen = set()
    for r in (m.request("GET", "/healthz"), m.request("GET", "/v1/sandboxes/sbx_aaaaaaaaaaaa"),
              m.request("GET", "/v1/sandboxes", key="wrong" * 8), m.request("PATCH", "/v1/sandboxes")):
        rid = r.headers.get("X-Request-Id")
        assert rid and rid not in seen, (r, r.headers)
        seen.add(rid)
        if r.status >= 400:
            assert r.json()["error"]["request_id"] == rid, r
            assert wait_until(lambda: rid in m.log(), 5), f"request id {rid} not in the log"


def test_wrong_method_is_405_with_allow(pm_sub):
    m = pm_sub
    for method, path, allow in (("DELETE", "/v1/sandboxes", "GET, POST"), ("PUT", "/healthz", "GET"),
                                ("GET", "/v1/run", "POST"), ("PATCH", "/v1/sandboxes/sbx_aaaaaaaaaaaa", "GET, DELETE"),
                                ("GET", "/v1/sandboxes/sbx_aaaaaaaaaaaa/commands", "POST")):
        r = m.request(method, path)
        assert_error(r, 405)
        assert r.headers.get("Allow") == allow, (method, path, r.headers)


def test_bogus_state_filter_is_400(pm_sub):
    err = assert_error(pm_sub.request("GET", "/v1/sandboxes?state=bogus"), 400, "invalid_argument")
    assert "bogus" in err["message"] and "running" in err.get("hint", ""), err


# --------------------------------------------------------------------------- one owner per sandbox

def two_key_manager(managers, name="owners"):
    keys = {"alice": strong_key(), "bob": strong_key()}
    lines = [BASE_CONFIG.rstrip("\n"), "  api_keys:"]
    for n, k in keys.items():
        lines += [f"    - name: {n}", f"      key: {k}",
                  "      permissions: [sandboxes:read, sandboxes:write, sandboxes:run]"]
    m = managers.new(name, "\n".join(lines) + "\n", extra_secrets=list(keys.values()))
    return m, keys


def assert_invisible(m, sid, key):
    """Every route answers 404 for another key's sandbox."""
    routes = [("GET", f"/v1/sandboxes/{sid}", None), ("DELETE", f"/v1/sandboxes/{sid}", None),
              ("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]}),
              ("POST", f"/v1/sandboxes/{sid}/commands", {"command": "true"}),
              ("GET", f"/v1/sandboxes/{sid}/files?path=/work/secret.txt", None),
              ("GET", f"/v1/sandboxes/{sid}/files?path=/work/secret.txt&encoding=utf-8", None),
              ("POST", f"/v1/sandboxes/{sid}/files", {"path": "/work/x", "content": "x"}),
              ("PUT", f"/v1/sandboxes/{sid}/files?path=/work/x", b"x"),
              ("GET", f"/v1/sandboxes/{sid}/stat?path=/work", None)]
    for method, path, body in routes:
        err = assert_error(m.request(method, path, body, key=key), 404, "not_found")
        assert "does not exist" in err["message"], (method, path, err)
    # The stream route too.
    conn, resp, _ = m.open_stream(sid, ["true"], key=key)
    try:
        assert resp.status == 404, resp.status
    finally:
        conn.close()
    assert sid not in [b["id"] for b in m.list(key=key)]


def test_a_sandbox_belongs_to_the_key_that_made_it(managers):
    m, keys = two_key_manager(managers)
    alice, bob = Platform(m, keys["alice"]), Platform(m, keys["bob"])
    sid = alice.create(label="alice's")["id"]
    assert alice.write(sid, "/work/secret.txt", "for alice").status == 200
    bobs = bob.create()["id"]
    assert_invisible(m, sid, keys["bob"])
    assert_invisible(m, bobs, keys["alice"])
    # Nothing bob tried changed alice's sandbox.
    assert alice.read(sid, "/work/secret.txt").json()["content"] == "for alice"
    assert [b["id"] for b in alice.list()] == [sid] and [b["id"] for b in bob.list()] == [bobs]
    # The admin key sees both.
    assert {sid, bobs} <= set(m.ids())
    # Ownership is in the registry: it survives a restart.
    m.stop()
    m.start()
    assert_invisible(m, sid, keys["bob"])
    assert alice.run(sid, "cat /work/secret.txt").json()["stdout"] == "for alice"
    assert alice.delete(sid).status == 200 and bob.delete(bobs).status == 200


def test_admin_permission_sees_every_owner(managers):
    auditor = strong_key()
    m = managers.new("auditor", BASE_CONFIG + "  api_keys:\n    - name: auditor\n"
                     f"      key: {auditor}\n      permissions: [sandboxes:read, sandboxes:admin]\n",
                     extra_secrets=[auditor])
    sid = m.create({"network": "none"})["id"]
    assert m.request("GET", f"/v1/sandboxes/{sid}", key=auditor).status == 200
    assert sid in [b["id"] for b in m.list(key=auditor)]
    # Seeing is not running: run still needs sandboxes:run.
    assert_error(m.request("POST", f"/v1/sandboxes/{sid}/commands", {"command": "true"}, key=auditor), 403)


# --------------------------------------------------------------------------- defects

def test_execs_on_a_removed_sandbox_give_back_their_slots(pm_sub):
    """Issue 10 defect 1: 32 such 404s used to leave the key at 429 until a restart."""
    m = pm_sub
    gone = m.create({"network": "none"})["id"]
    assert m.delete(gone).status == 200
    for i in range(40):
        route = ("exec", {"cmd": ["true"]}) if i % 2 else ("commands", {"command": "true"})
        assert_error(m.request("POST", f"/v1/sandboxes/{gone}/{route[0]}", route[1]), 404, "not_found")
    live = m.create({"network": "none"})["id"]
    try:
        assert m.exec(live, ["true"])["exit_code"] == 0
        assert m.request("POST", f"/v1/sandboxes/{live}/commands", {"command": "true"}).status == 200
    finally:
        m.delete(live)


def host_pids_running(marker: str) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(d))
            except OSError:
                pass
    return pids


@pytest.mark.parametrize("route", ["exec", "commands"])
def test_buffered_command_dies_when_its_client_hangs_up(pm_sub, route):
    """Issue 10 defect 4: a buffered exec outlived its client; a streamed one did not."""
    m = pm_sub
    sid = m.create({"network": "none"})["id"]
    marker = f"{900 + (route == 'commands')}.{os.getpid() % 1000}"
    body = {"cmd": ["sh", "-c", f"sleep {marker} & sleep {marker}"]} if route == "exec" else \
        {"command": f"sleep {marker} & sleep {marker}"}
    payload = json.dumps(body).encode()
    s = socket.create_connection((HOST, m.port), timeout=10)
    try:
        s.sendall(f"POST /v1/sandboxes/{sid}/{route} HTTP/1.1\r\nHost: x\r\nX-API-Key: {m.key}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        assert wait_until(lambda: len(host_pids_running(marker)) >= 2, 15), "the command never started"
    finally:
        s.close()
    assert wait_until(lambda: not host_pids_running(marker), 15), \
        f"the command (and its child) outlived the client: {host_pids_running(marker)}"
    assert m.exec(sid, ["true"])["exit_code"] == 0, "the sandbox should stay usable"
    m.delete(sid)


def test_image_over_the_api_is_a_name_never_a_host_path(managers, tmp_path):
    """Issue 10 defect 10: {"image": "/"} made the host's root the sandbox's base."""
    busybox = "/bin/busybox"
    if not os.path.exists(busybox):
        skip_or_fail("busybox-static is not installed (apt-get install busybox-static)")
    root = tmp_path / "rootfs"
    for d in ("bin", "tmp", "etc"):
        (root / d).mkdir(parents=True)
    os.chmod(root / "tmp", 0o1777)
    shutil.copy(busybox, root / "bin" / "busybox")
    for applet in ("sh", "cat"):
        os.symlink("busybox", root / "bin" / applet)
    (root / "etc" / "marker").write_text("the named image\n")
    os.symlink("/", tmp_path / "link-to-root")
    m = managers.new("images", BASE_CONFIG + f"  images:\n    tiny: {root}\n")
    for image in ("/", "..", "../..", str(tmp_path / "link-to-root"), "rootfs", str(root), "/root", "tiny/..", "./tiny"):
        err = assert_error(m.request("POST", "/v1/sandboxes", {"image": image, "network": "none"}), 400,
                           "invalid_argument")
        assert "tiny" in err.get("hint", ""), err
        assert_error(m.request("POST", "/v1/run", {"cmd": ["true"], "sandbox": {"image": image}}), 400)
    assert not m.ids(), "a refused image left a sandbox"
    sid = m.create({"image": "tiny", "network": "none"})["id"]
    assert m.exec(sid, ["/bin/cat", "/etc/marker"])["stdout"] == "the named image\n"
    m.delete(sid)


# --------------------------------------------------------------------------- deno: the shell subset

@pytest.mark.only_drivers("deno")
def test_commands_on_deno_run_the_documented_subset(pm, driver):
    api = Platform(pm)
    box = api.create()
    sid = box["id"]
    try:
        assert box["spec"]["network"] == "none", "deno has no jail: its sandboxes keep no network"
        assert api.write(sid, "/work/run.py", "import os\nprint('x is', os.environ['X'])\n").status == 200
        j = api.run(sid, "export X=1; python /work/run.py").json()
        assert j["stdout"] == "x is 1\n" and j["exit_code"] == 0, j
        j = api.run(sid, "cd /work && X=2 node -e 'console.log(process.env.X)'").json()
        assert j["stdout"] == "2\n", j
        j = api.run(sid, "python3 -c 'import sys; sys.exit(4)' && python3 -c 'print(5)'").json()
        assert j["exit_code"] == 4 and j["stdout"] == "", j
        err = assert_error(api.run(sid, "ls | wc -l"), 400, "invalid_argument")
        assert "subprocess" in err["message"] + err.get("hint", ""), err
    finally:
        api.delete(sid)


def test_names_in_paths_are_the_owners(managers):
    """Issue 10 defect 9: a name (unique per owner) stands for the id on every route."""
    m, keys = two_key_manager(managers, "names")
    alice, bob = Platform(m, keys["alice"]), Platform(m, keys["bob"])
    r = alice.call("POST", "/v1/sandboxes", {"name": "web", "network": "none"})
    assert r.status == 201 and r.json()["spec"]["name"] == "web", r
    sid = r.json()["id"]
    assert alice.get("web").json()["id"] == sid
    assert alice.run("web", "echo by name").json()["stdout"] == "by name\n"
    assert alice.write("web", "/work/n.txt", "n").status == 200
    # Unique per owner: alice cannot take it twice; bob's "web" is his own, and alice's stays hidden from him.
    err = assert_error(alice.call("POST", "/v1/sandboxes", {"name": "web", "network": "none"}), 409, "already_exists")
    assert sid in err.get("hint", "") + err["message"], err
    assert_error(bob.get("web"), 404, "not_found")
    r = bob.call("POST", "/v1/sandboxes", {"name": "web", "network": "none"})
    assert r.status == 201 and r.json()["id"] != sid, r
    assert bob.run("web", "cat /work/n.txt").json()["exit_code"] != 0, "bob's web is not alice's"
    # The admin key sees both: a name it cannot tell apart is an error, not a guess.
    assert m.request("GET", "/v1/sandboxes/web").status == 400
    assert alice.delete("web").status == 200 and bob.delete("web").status == 200
    assert_error(alice.get("web"), 404)
