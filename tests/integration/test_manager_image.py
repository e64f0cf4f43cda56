"""The gVisor manager image (deploy/image/, scripts/build-manager-image.sh) in
real podman with real runsc inside: health, the API end to end, `sbx doctor
--remote`, the start-up refusal when a needed run flag is missing, state on a
volume across a restart, and SIGTERM draining.

The image is built through the script when absent (SBX_MANAGER_IMAGE names
it; default localhost/sbx-manager:latest). Containers listen on 127.0.0.1 only
and are removed, with their volumes, at the end.
"""
from __future__ import annotations

import http.client
import json
import os
import platform
import secrets
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import ID_RE, SBX_BIN, cgroup_roots, skip_or_fail, wait_until
from manager_fixtures import HOST, Client, Resp, cgroup_scope, free_port

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("SBX_MANAGER_IMAGE", "localhost/sbx-manager:latest")
RUN_FLAGS = [line for line in (REPO / "deploy/image/run-flags.txt").read_text().splitlines()
             if line and not line.startswith("#")]


def podman(*args, timeout=120, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r


def host_flags() -> list[str]:
    """This host's podman needs (docs/deploy.md): runc (crun refuses the hybrid
    cgroup layout) and ulimits within the hard limits (podman's defaults exceed them)."""
    import resource
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)  # runc is refused above 32768 here
    return ["--runtime", "runc", "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


class Container:
    """One manager container on a loopback port, with its own volume and key."""

    def __init__(self, label: str, flags=None, key_file: str | None = None):
        self.name = f"sbxit-mgr-{label}-{secrets.token_hex(3)}"
        self.volume = self.name + "-state"
        self.key = secrets.token_hex(32)
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.flags = RUN_FLAGS if flags is None else flags
        # The key as a mounted secret file (ADMIN_API_KEY_FILE) instead of the environment.
        self.key_file = key_file
        if key_file:
            Path(key_file).write_text(self.key + "\n")
            os.chmod(key_file, 0o644)

    def start(self, config: str):
        podman("run", "-d", "--name", self.name, *host_flags(), *self.flags, "-v", f"{self.volume}:/var/lib/sbx",
               "-v", f"{config}:/etc/sbx/config.yaml:ro",
               *(["-v", f"{self.key_file}:/run/secrets/sbx-admin-key:ro",
                  "-e", "ADMIN_API_KEY_FILE=/run/secrets/sbx-admin-key"] if self.key_file
                 else ["-e", f"ADMIN_API_KEY={self.key}"]),
               "-p", f"{HOST}:{self.port}:8000", IMAGE)
        return self

    def state(self) -> dict:
        return json.loads(podman("inspect", "--format", "{{json .State}}", self.name).stdout)

    def logs(self) -> str:
        r = podman("logs", self.name, check=False)
        return r.stdout + r.stderr

    def wait_healthy(self, timeout=60):
        def up():
            if not self.state().get("Running"):
                raise AssertionError(f"the manager container exited:\n{self.logs()[-3000:]}")
            try:
                return self.request("GET", "/healthz", timeout=2).status == 200
            except OSError:
                return False
        assert wait_until(up, timeout, 0.2), f"no healthy /healthz within {timeout} s:\n{self.logs()[-3000:]}"
        return self

    def request(self, method, path, body=None, timeout=30) -> Resp:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        try:
            headers = {"X-API-Key": self.key}
            if body is not None:
                body = json.dumps(body)
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            return Resp(r.status, r.headers, r.read())
        finally:
            conn.close()

    def create(self) -> str:
        r = self.request("POST", "/v1/sandboxes", {}, timeout=120)
        assert r.status == 201, f"create failed: {r!r}\n{self.logs()[-2000:]}"
        return r.json()["id"]

    def remove(self):
        # Sandboxes first, through the API, so their host cgroups go too (a v1
        # host's cgroup tree is shared with the container).
        try:
            for rec in self.request("GET", "/v1/sandboxes", timeout=10).json():
                self.request("DELETE", f"/v1/sandboxes/{rec['id']}", timeout=60)
        except (OSError, AssertionError, TypeError):
            pass
        scope = self.cgroup_scope()
        podman("rm", "-f", "-t", "30", self.name, check=False)
        podman("volume", "rm", "-f", self.volume, check=False)
        # The manager's scope in the host's cgroup tree: empty now, or sandboxes leaked.
        leaked = []
        for root in cgroup_roots() if scope else []:
            d = f"{root}/sbx/{scope}"
            if os.path.isdir(d):
                leaked += [f"{d}/{n}" for n in os.listdir(d) if ID_RE.match(n)]
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        return leaked

    def cgroup_scope(self) -> str | None:
        """The scope of the state root the entrypoint chose (/var/lib/sbx/<manager-id>)."""
        r = podman("volume", "inspect", "--format", "{{.Mountpoint}}", self.volume, check=False)
        try:
            mid = Path(r.stdout.strip(), "manager-id").read_text().strip()
        except OSError:
            return None
        return cgroup_scope(f"/var/lib/sbx/{mid}")


@pytest.fixture(scope="module")
def manager_config(session_root):
    """As conftest's manager for the remote driver: no idle reaper (the tests
    decide when sandboxes go)."""
    path = os.path.join(session_root, "image-manager.yaml")
    Path(path).write_text("server:\n  reap_interval: 1h\n  drain_timeout: 20s\n")
    os.chmod(path, 0o644)
    return path


@pytest.fixture(scope="module")
def image():
    for tool in ("podman", "runc"):
        if not shutil.which(tool):
            skip_or_fail(f"{tool} is not installed (apt-get install {tool})")
    if os.geteuid() != 0:
        skip_or_fail("the manager image tests need root (podman with loop devices and cgroups)")
    if podman("image", "exists", IMAGE, check=False).returncode != 0:
        r = subprocess.run([str(REPO / "scripts/build-manager-image.sh"), "--tag", IMAGE,
                            "--build-dir", str(Path(SBX_BIN).parent)], capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, f"building the image failed:\n{r.stderr[-3000:]}"
    return IMAGE


@pytest.fixture
def containers(image, manager_config):
    made: list[Container] = []

    def make(label, flags=None, key_file=None):
        c = Container(label, flags, key_file)
        made.append(c)
        return c.start(manager_config)
    yield make
    leaked = [d for c in made for d in c.remove()]
    assert not leaked, f"sandbox cgroups left on the host: {leaked}"


@pytest.fixture(scope="module")
def running(image, manager_config):
    c = Container("main").start(manager_config).wait_healthy()
    yield c
    leaked = c.remove()
    assert not leaked, f"sandbox cgroups left on the host: {leaked}"


@pytest.fixture
def client(session_root, running):
    d = os.path.join(session_root, f"img-client-{secrets.token_hex(3)}")
    c = Client(d, os.path.join(session_root, "empty-config.yaml"),
               {"USE_REMOTE_SANDBOX": "true", "SANDBOX_MANAGER_URL": running.url, "ADMIN_API_KEY": running.key,
                "LOCAL_SANDBOX_BACKEND": "subprocess"}, label="image-client")
    yield c
    assert not c.local_cleanup()


def test_healthz_and_the_image_health_check(running):
    j = running.request("GET", "/healthz").json()
    assert j["status"] == "ok" and j["default_driver"] == "runsc", j
    hc = json.loads(podman("image", "inspect", "--format", "{{json .HealthCheck}}", IMAGE).stdout)
    assert hc and "manager-healthcheck" in " ".join(hc["Test"]), hc
    r = podman("healthcheck", "run", running.name, check=False)
    assert r.returncode == 0, f"the image's HEALTHCHECK failed: {r.stdout} {r.stderr}"


def test_key_from_a_mounted_secret_file(containers, tmp_path):
    c = containers("keyfile", key_file=str(tmp_path / "key")).wait_healthy()
    assert c.request("GET", "/healthz").json()["key"]["name"] == "admin"
    r = podman("healthcheck", "run", c.name, check=False)
    assert r.returncode == 0, f"the HEALTHCHECK with ADMIN_API_KEY_FILE failed: {r.stdout} {r.stderr}"


def test_api_creates_get_the_network_jail(running):
    # The platform's create names no network: it gets server.default_network, `jail`.
    sid = running.create()
    try:
        r = running.request("POST", f"/v1/sandboxes/{sid}/commands", {"command": "ip -o -4 addr show eth0", "timeout": 30})
        assert r.status == 200 and r.json()["exit_code"] == 0 and " inet " in r.json()["stdout"], r
    finally:
        running.request("DELETE", f"/v1/sandboxes/{sid}", timeout=60)


def test_create_exec_cp_rm_through_the_api(client, running, tmp_path):
    sid = client.run("create", timeout=120).ok().out.strip()
    try:
        # The default sandbox image is in the manager image: python3 is there.
        assert client.exec(sid, "python3", "-c", "print(6*7)").ok().out == "42\n"
        # And this is gVisor, not the container's kernel.
        assert client.exec(sid, "uname", "-r").ok().out.strip() != platform.release()
        src = tmp_path / "in.txt"
        src.write_text("through the container\n")
        client.run("cp", str(src), f"{sid}:/work/in.txt").ok()
        client.sh(sid, "tr a-z A-Z < /work/in.txt > /work/out.txt").ok()
        client.run("cp", f"{sid}:/work/out.txt", str(tmp_path / "out.txt")).ok()
        assert (tmp_path / "out.txt").read_text() == "THROUGH THE CONTAINER\n"
    finally:
        client.run("rm", sid).ok()
    assert sid not in [r["id"] for r in running.request("GET", "/v1/sandboxes").json()]


def test_doctor_remote_is_clean(client):
    r = client.run("doctor", "--remote", timeout=60)
    assert r.rc == 0, r
    assert "the manager is usable" in r.out + r.err, r


@pytest.mark.parametrize("dropped,named", [
    ("--cap-add=SYS_ADMIN", "--cap-add SYS_ADMIN"),
    ("--cap-add=MKNOD", "--cap-add MKNOD"),
    ("--device=/dev/loop-control", "--device /dev/loop-control"),
    ("--device-cgroup-rule=b 7:* rwm", "--device-cgroup-rule 'b 7:* rwm'"),
    ("--volume=/sys/fs/cgroup:/sys/fs/cgroup:rw", "-v /sys/fs/cgroup:/sys/fs/cgroup:rw"),
    ("--cap-add=NET_ADMIN", "--cap-add NET_ADMIN"),
    ("--cap-add=NET_RAW", "--cap-add NET_RAW"),
    ("--security-opt=unmask=/proc/sys", "--security-opt unmask=/proc/sys"),
])
def test_refuses_to_start_naming_the_missing_flag(containers, dropped, named):
    c = containers("refuse", [f for f in RUN_FLAGS if f != dropped])
    assert wait_until(lambda: not c.state().get("Running"), 60, 0.2), \
        f"the manager started without {dropped}:\n{c.logs()[-2000:]}"
    st, log = c.state(), c.logs()
    assert st["ExitCode"] != 0, (st, log)
    assert "sbx: error: the runsc driver cannot run here" in log and named in log, log


def test_restart_keeps_state_and_the_manager_answers(containers):
    c = containers("restart").wait_healthy()
    sid = c.create()
    r = c.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", "echo kept > /work/f"]}, timeout=60)
    assert r.status == 200 and r.json()["exit_code"] == 0, r
    state_dir = podman("exec", c.name, "sh", "-c", "echo /var/lib/sbx/$(cat /var/lib/sbx/manager-id)").stdout.strip()
    podman("restart", "-t", "30", c.name, timeout=90)
    c.wait_healthy()
    assert podman("exec", c.name, "sh", "-c", "echo /var/lib/sbx/$(cat /var/lib/sbx/manager-id)").stdout.strip() \
        == state_dir, "the state root moved on restart"
    # The sandbox's gVisor processes died with the old container: the new
    # manager finds its record on the volume and reaps it at start.
    log = c.logs()
    assert "reaped 1 dead sandboxes at start" in log, log[-3000:]
    assert sid not in [x["id"] for x in c.request("GET", "/v1/sandboxes").json()]
    assert c.request("GET", f"/v1/sandboxes/{sid}").status == 404
    # And it serves new work.
    sid2 = c.create()
    r = c.request("POST", f"/v1/sandboxes/{sid2}/exec", {"cmd": ["python3", "-c", "print(1)"]}, timeout=60)
    assert r.status == 200 and r.json()["stdout"] == "1\n", r


def test_sigterm_drains_in_flight_work(containers):
    c = containers("drain").wait_healthy()
    sid = c.create()
    result = {}

    def run():
        try:
            result["r"] = c.request("POST", f"/v1/sandboxes/{sid}/exec",
                                    {"cmd": ["sh", "-c", "sleep 3; echo done"]}, timeout=60)
        except Exception as e:  # reported below
            result["e"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(1)
    t0 = time.monotonic()
    # podman stop: SIGTERM (the image's STOPSIGNAL), SIGKILL after 30 s.
    podman("stop", "-t", "30", c.name, timeout=60)
    stopped_in = time.monotonic() - t0
    t.join(30)
    assert "e" not in result, f"the in-flight exec failed during the drain: {result.get('e')!r}\n{c.logs()[-2000:]}"
    r = result["r"]
    assert r.status == 200 and r.json()["stdout"] == "done\n", r
    st = c.state()
    assert st["ExitCode"] == 0, (stopped_in, st, c.logs()[-2000:])
    assert "SIGTERM: draining" in c.logs()
    # Started again, it reaps the sandbox the stop left (and its host cgroups) before serving.
    podman("start", c.name)
    c.wait_healthy()
    assert "reaped 1 dead sandboxes at start" in c.logs()
