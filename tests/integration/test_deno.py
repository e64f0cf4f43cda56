"""The deno driver: Python (Pyodide) and JavaScript/TypeScript in a Deno agent
with its files in SQLite. The conformance behaviours that the shell-based suite
cannot show on it (exec statuses, streams, stdin, timeouts, signals, cp round
trips, rm, gc), in Python and JS, and what only this driver promises: no
processes, no host files, no host sockets, no agent environment, atomic execs.

Runs whenever the deno driver is available (scripts/setup-deno.sh installs it),
whatever SBX_TEST_DRIVERS says; skipped (failed in CI) when it is not.
"""
from __future__ import annotations

import io
import json
import os
import secrets
import signal
import socket
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from conftest import ID_RE, driver_problem, pid_alive, sha256, skip_or_fail, wait_until
from test_conformance import _make_tree, _snapshot
from manager_fixtures import clients, managers, manager_root, scrubbed_env  # noqa: F401


# Every test here is a deno case: the lane of scripts/test.sh that runs deno runs
# them, and a run whose SBX_TEST_DRIVERS leaves deno out skips them.
pytestmark = pytest.mark.only_drivers("deno")


@pytest.fixture(autouse=True)
def on_deno(driver):
    """Parametrizes each test over the deno driver (conftest's pytest_generate_tests)."""
    return driver


@pytest.fixture(scope="module")
def deno(sbx):
    problem = driver_problem(sbx, "deno")
    if problem:
        skip_or_fail(problem)
    return sbx


@pytest.fixture(scope="module")
def box(deno):
    """One sandbox shared by the tests that only read or add their own files."""
    sid = deno.create(driver="deno")
    yield sid
    deno.remove(sid)


@pytest.fixture
def fresh(deno):
    sid = deno.create(driver="deno")
    yield sid
    deno.remove(sid)


def py(sbx, sid, code, *args, flags=(), **kw):
    return sbx.exec(sid, "python3", "-c", code, *args, flags=flags, **kw)


def js(sbx, sid, code, *args, flags=(), **kw):
    return sbx.exec(sid, "node", "-e", code, *args, flags=flags, **kw)


def agent_pid(sbx, sid) -> int:
    return sbx.record(sid)["agent_pid"]


def test_agent_sources_type_check(deno, tmp_path):
    home = os.environ.get("SBX_DENO_HOME", "/usr/local/lib/sbx/deno")
    bins = sorted(Path(home, "node_modules", "@deno").glob("linux-*/deno"))
    assert bins, f"no deno binary under {home}"
    src = Path(__file__).resolve().parents[2] / "agent-deno"
    r = subprocess.run([str(bins[0]), "check", "--quiet", "--no-config", "--no-remote", "--no-npm",
                        *sorted(str(p) for p in src.glob("*.ts"))],
                       env={"DENO_DIR": str(tmp_path), "NO_COLOR": "1", "PATH": os.environ.get("PATH", "")},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------
# exec: statuses, streams, stdin
# --------------------------------------------------------------------------


def test_python_exit_statuses(deno, box):
    assert py(deno, box, "print('hi')").ok().out == "hi\n"
    assert py(deno, box, "import sys; sys.exit(3)").rc == 3
    r = py(deno, box, "raise ValueError('boom')")
    assert r.rc == 1 and "ValueError: boom" in r.err, r
    r = py(deno, box, "import sys; sys.exit('bye')")
    assert r.rc == 1 and "bye" in r.err, r


def test_js_and_ts_exit_statuses(deno, box):
    assert js(deno, box, "console.log(6 * 7)").ok().out == "42\n"
    assert js(deno, box, "Deno.exit(4)").rc == 4
    assert js(deno, box, "process.exit(5)").rc == 5
    r = js(deno, box, "throw new Error('kaput')")
    assert r.rc == 1 and "kaput" in r.err, r
    r = deno.exec(box, "deno", "eval", "const n: number = 2; console.log(n ** 10)").ok()
    assert r.out == "1024\n"


def test_stdout_and_stderr_separate_and_complete(deno, box):
    r = py(deno, box, "import sys\nsys.stdout.write('x' * (1 << 20))\nprint('err-line', file=sys.stderr)").ok()
    assert len(r.stdout) == 1 << 20 and set(r.out) == {"x"}, len(r.stdout)
    assert r.err == "err-line\n"
    r = js(deno, box, "console.log('o'); console.error('e'); process.stdout.write('raw')").ok()
    assert r.out == "o\nraw" and r.err == "e\n", r


def test_scripts_from_files_and_stdin(deno, box, host_tmp):
    (host_tmp / "s.py").write_text("import sys\nprint('file', sys.argv[1:])\n")
    (host_tmp / "s.ts").write_text("const who: string = Deno.args[0];\nconsole.log(`ts ${who}`);\n")
    deno.run("cp", host_tmp / "s.py", f"{box}:/work/s.py").ok()
    deno.run("cp", host_tmp / "s.ts", f"{box}:/work/s.ts").ok()
    assert deno.exec(box, "python3", "s.py", "a", "b").ok().out == "file ['a', 'b']\n"
    assert deno.exec(box, "python3", "-", flags=["-i"], input="print('from stdin')").ok().out == "from stdin\n"
    assert deno.exec(box, "deno", "run", "s.ts", "you").ok().out == "ts you\n"
    assert deno.exec(box, "node", "-", flags=["-i"], input="console.log('js stdin')").ok().out == "js stdin\n"
    r = deno.exec(box, "python3", "/work/missing.py")
    assert r.rc == 2 and "missing.py" in r.err, r


def test_stdin_to_code(deno, box):
    r = py(deno, box, "print(input()[::-1]); import sys; print(len(sys.stdin.read()))", flags=["-i"],
           input="abc\n" + "z" * 100_000).ok()
    assert r.out == "cba\n100000\n", r
    r = js(deno, box, "const b = new Uint8Array(100); console.log(Deno.stdin.readSync(b))", flags=["-i"],
           input="hello").ok()
    assert r.out == "5\n"


def test_stdin_streams_interactively(deno, box):
    p = deno.popen("exec", "-i", box, "--", "python3", "-c",
                   "a = input(); print('got:' + a, flush=True); b = input(); print('got:' + b)",
                   stdin=subprocess.PIPE)
    try:
        p.stdin.write(b"first\n")
        p.stdin.flush()
        assert p.stdout.readline() == b"got:first\n", "stdin was not forwarded before EOF"
        p.stdin.write(b"second\n")
        p.stdin.close()
        assert p.stdout.readline() == b"got:second\n"
        assert p.wait(timeout=20) == 0
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        p.stdout.close()
        p.stderr.close()


def test_env_and_workdir(deno, box):
    r = py(deno, box, "import os; print(os.environ['FOO'], os.getcwd())", flags=["-e", "FOO=bar", "-w", "/tmp"]).ok()
    assert r.out == "bar /tmp\n"
    r = js(deno, box, "console.log(Deno.env.get('FOO'), Deno.cwd())", flags=["-e", "FOO=baz"]).ok()
    assert r.out == "baz /work\n"
    r = py(deno, box, "print(1)", flags=["-w", "/no/such/dir"])
    assert r.rc == 126 and "/no/such/dir" in r.err, r


def test_other_commands_fail_naming_the_drivers_that_run_them(deno, box):
    for cmd in (["perl", "-e", "print 1"], ["ruby"], ["/usr/bin/awk", "BEGIN { print 1 }"]):
        r = deno.exec(box, *cmd)
        assert r.rc == 127, r
        assert "command not found" in r.err and "python3" in r.err and "subprocess" in r.err, r


def test_python_globals_fresh_per_exec_unless_session(deno, box):
    py(deno, box, "x = 41").ok()
    r = py(deno, box, "print('x' in globals())").ok()
    assert r.out == "False\n"
    session = ["-e", "SBX_PYTHON_SESSION=s1"]
    py(deno, box, "x = 41", flags=session).ok()
    assert py(deno, box, "print(x + 1)", flags=session).ok().out == "42\n"


def test_each_exec_imports_the_current_version_of_a_module(deno, fresh, host_tmp):
    # The interpreter is reused between execs; a module imported by one must
    # not be served stale to the next after its file changed (as with a new python3).
    (host_tmp / "mod.py").write_text("X = 41\n")
    deno.run("cp", str(host_tmp / "mod.py"), f"{fresh}:/work/mod.py").ok()
    assert py(deno, fresh, "import mod; print(mod.X)").ok().out == "41\n"
    (host_tmp / "mod.py").write_text("X = 7\n")
    deno.run("cp", str(host_tmp / "mod.py"), f"{fresh}:/work/mod.py").ok()
    assert py(deno, fresh, "import mod; print(mod.X)").ok().out == "7\n"


def test_pythonpath_and_a_copied_in_wheel(deno, fresh, host_tmp):
    # Pyodide has no compiled wheels and no index here: a pure-Python wheel the
    # user copies in is imported from PYTHONPATH (zipimport), or unpacked into a
    # directory that PYTHONPATH names (docs/drivers.md).
    import zipfile
    wheel = host_tmp / "greet-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("greet/__init__.py", "def hello():\n    return 'hello from a wheel'\n")
        z.writestr("greet-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: greet\nVersion: 1.0\n")
        z.writestr("greet-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("greet-1.0.dist-info/RECORD", "")
    deno.run("cp", str(wheel), f"{fresh}:/work/{wheel.name}").ok()
    code = "import greet; print(greet.hello())"
    r = py(deno, fresh, code)
    assert r.rc == 1 and "ModuleNotFoundError" in r.err, r
    r = py(deno, fresh, code, flags=["-e", f"PYTHONPATH=/work/{wheel.name}"]).ok()
    assert r.out == "hello from a wheel\n"
    py(deno, fresh, f"import zipfile; zipfile.ZipFile('/work/{wheel.name}').extractall('/work/site')").ok()
    r = py(deno, fresh, "import sys, greet; print(greet.hello(), sys.path[1])",
           flags=["-e", "PYTHONPATH=/work/site"]).ok()
    assert r.out == "hello from a wheel /work/site\n"


# --------------------------------------------------------------------------
# files: one tree for Python, JS and cp; atomic per exec; persistent
# --------------------------------------------------------------------------


def test_files_shared_between_python_and_js(deno, box):
    py(deno, box, "import os\nos.makedirs('/work/d/e', exist_ok=True)\nopen('/work/d/e/f.txt', 'w').write('py')").ok()
    r = js(deno, box, "console.log(Deno.readTextFileSync('d/e/f.txt')); Deno.writeTextFileSync('/work/d/j.txt', 'js')")
    assert r.ok().out == "py\n"
    assert py(deno, box, "print(open('/work/d/j.txt').read())").ok().out == "js\n"
    py(deno, box, "import shutil; shutil.rmtree('/work/d')").ok()
    r = js(deno, box, "try { Deno.statSync('/work/d'); console.log('still') } catch { console.log('gone') }").ok()
    assert r.out == "gone\n"


def test_killed_exec_writes_nothing(deno, fresh):
    py(deno, fresh, "open('/work/kept', 'w').write('before')").ok()
    r = py(deno, fresh, "open('/work/kept', 'w').write('half'); open('/work/new', 'w').write('x')\nwhile True: pass",
           flags=["--timeout", "1s"], timeout=30)
    assert r.rc == 124 and "timed out" in r.err, r
    r = py(deno, fresh, "import os; print(open('/work/kept').read(), os.path.exists('/work/new'))").ok()
    assert r.out == "before False\n", "a killed exec's writes reached the store"


def test_timeouts_leave_the_sandbox_usable(deno, fresh):
    py(deno, fresh, "open('/work/keep', 'w').write('k')").ok()
    # Code that swallows the interrupt, and a JS loop, cost the agent its process: the supervisor starts another.
    for code in ("while True: pass", "while True:\n  try:\n    while True: pass\n  except BaseException: pass"):
        r = py(deno, fresh, code, flags=["--timeout", "1s"], timeout=30)
        assert r.rc == 124, r
        assert py(deno, fresh, "print(open('/work/keep').read())").ok().out == "k\n"
    r = js(deno, fresh, "while (true) {}", flags=["--timeout", "1s"], timeout=30)
    assert r.rc == 124, r
    assert js(deno, fresh, "console.log(Deno.readTextFileSync('/work/keep'))").ok().out == "k\n"


def test_files_persist_across_agent_restarts(deno, fresh):
    py(deno, fresh, "open('/work/p', 'w').write('persisted')").ok()
    before = deno.record(fresh)["agent_pid"]
    js(deno, fresh, "while (true) {}", flags=["--timeout", "1s"], timeout=30)  # forces a new agent process
    assert py(deno, fresh, "print(open('/work/p').read())").ok().out == "persisted\n"
    assert deno.record(fresh)["agent_pid"] == before, "the supervisor (the sandbox's pid) must stay"
    db = Path(deno.sandbox_dir(fresh)) / "deno" / "store.db"
    assert db.is_file(), "the store must live in the sandbox's state directory"


def test_cp_tree_round_trip(deno, box, host_tmp):
    t = _make_tree(host_tmp)
    deno.run("cp", t, f"{box}:/work/").ok()
    r = py(deno, box, "import os, hashlib\nos.chdir('/work/tree')\n"
                      "print(oct(os.stat('secret').st_mode & 0o777), os.readlink('link'), os.readlink('dangling'))\n"
                      "print(open('link').read().strip(), os.path.isdir('empty'))\n"
                      "print(hashlib.sha256(open('bin.dat', 'rb').read()).hexdigest())").ok()
    assert r.out.splitlines() == ["0o600 a/b/c.txt /nonexistent/target", "nested True",
                                  sha256((t / "bin.dat").read_bytes())], r
    out = host_tmp / "out"
    deno.run("cp", f"{box}:/work/tree", out).ok()
    assert _snapshot(out) == _snapshot(t)


def test_cp_tar_stream_in_and_out(deno, box, host_tmp):
    src = host_tmp / "pkg"
    src.mkdir()
    payload = os.urandom(100_000)
    (src / "data.bin").write_bytes(payload)
    os.chmod(src / "data.bin", 0o600)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(src, arcname="pkg")
    py(deno, box, "import os; os.makedirs('/work/in', exist_ok=True)").ok()
    deno.run("cp", "-", f"{box}:/work/in", input=buf.getvalue()).ok()
    r = py(deno, box, "import hashlib, os; print(hashlib.sha256(open('/work/in/pkg/data.bin', 'rb').read()).hexdigest(),"
                      " oct(os.stat('/work/in/pkg/data.bin').st_mode & 0o777))")
    assert r.ok().out.split() == [sha256(payload), "0o600"], r
    r = deno.run("cp", f"{box}:/work/in/pkg", "-").ok()
    with tarfile.open(fileobj=io.BytesIO(r.stdout), mode="r:") as tf:
        assert tf.extractfile("pkg/data.bin").read() == payload


def test_cp_cannot_escape_and_respects_max_size(deno, box, host_tmp):
    name = "sbxit-deno-escape-" + secrets.token_hex(4)
    src = host_tmp / "payload"
    src.write_text("payload\n")
    deno.run("cp", src, f"{box}:/work/../../../../tmp/{name}")
    assert not os.path.exists(f"/tmp/{name}"), "cp wrote to the HOST's /tmp"
    big = host_tmp / "big"
    big.write_bytes(os.urandom(2 << 20))
    r = deno.run("cp", "--max-size", "1M", big, f"{box}:/work/big")
    assert r.rc != 0 and "limit" in r.err, r
    assert py(deno, box, "import os; print(os.path.exists('/work/big'))").ok().out == "False\n"


# --------------------------------------------------------------------------
# what untrusted code cannot reach
# --------------------------------------------------------------------------


def test_python_cannot_spawn_processes(deno, box):
    r = py(deno, box, "import os; print(os.system('touch /tmp/sbxit-spawned'))").ok()
    assert "cannot start processes" in r.err and r.out.strip() != "0", r
    r = py(deno, box, "import subprocess; subprocess.run(['id'])")
    assert r.rc == 1 and "does not support processes" in r.err, r
    r = js(deno, box, "new Deno.Command('/usr/bin/id').outputSync()")
    assert r.rc == 1 and "cannot start processes" in r.err, r
    assert not os.path.exists("/tmp/sbxit-spawned")


def test_host_files_are_out_of_reach(deno, box):
    r = py(deno, box, "print(open('/etc/passwd').read())")
    assert r.rc == 1 and "root:x:0:0" not in r.out, r
    r = js(deno, box, "console.log(Deno.readTextFileSync('/etc/passwd'))")
    assert r.rc == 1 and "root:x:0:0" not in r.out, r
    # Past the file shim, Deno's own permission check still refuses (and says so in a line).
    r = js(deno, box, "const f = await import('node:fs'); console.log(f.readFileSync('/etc/passwd', 'utf8'))")
    assert r.rc == 1 and "root:x:0:0" not in r.out and "no host file system: /etc/passwd" in r.err, r


def test_no_sockets_to_the_host(deno, box):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    accepted = []

    def accept():
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                accepted.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        r = py(deno, box, f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)")
        assert r.rc == 1, r
        r = js(deno, box, f"await Deno.connect({{ hostname: '127.0.0.1', port: {port} }})")
        assert r.rc == 1 and "deno sandboxes have no network" in r.err, r
        r = js(deno, box, f"await fetch('http://127.0.0.1:{port}/')")
        assert r.rc == 1, r
    finally:
        t.join()
        srv.close()
    assert not accepted, "code in a deno sandbox reached a socket on the host's loopback"


LISTEN = "deno sandboxes have no listening sockets: nothing inside can serve a port"

# What Deno would refuse with "NotCapable: Requires X access ..., run again
# with the --allow-X flag" and a stack, and the one line said instead.
PERMISSION_CASES = [
    ("python3", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 8000)); s.listen()", LISTEN),
    ("python3", "import _socket; s = _socket.socket(); s.bind(('127.0.0.1', 8000)); s.listen()", LISTEN),
    ("python3", "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(('127.0.0.1', 8000))", LISTEN),
    ("python3", "import http.server as h; h.HTTPServer(('127.0.0.1', 8000), h.BaseHTTPRequestHandler)", LISTEN),
    ("python3", "import js; js.Deno.listen(js.JSON.parse('{\"port\": 8000}'))", LISTEN),
    ("python3", "import js; js.Deno.env.get('HOME')", "no process environment (HOME)"),
    ("python3", "import js; js.Deno.Command.new('/usr/bin/id').outputSync()", "cannot start processes (/usr/bin/id)"),
    ("python3", "import js; js.Deno.writeTextFileSync('/tmp/x', 'y')", "no host file system: /tmp/x cannot be written"),
    ("python3", "import js; js.Deno.hostname()", "no system information (hostname)"),
    ("node", "Deno.listen({ port: 8000 })", LISTEN),
    ("node", "Deno.serve({ port: 8000 }, () => new Response('x'))", LISTEN),
    ("node", "const n = await import('node:http'); n.createServer().listen(8000)", LISTEN),
    ("node", "setTimeout(() => Deno.listen({ port: 8000 }), 1)", LISTEN),
    ("node", "await Deno.connect({ hostname: '127.0.0.1', port: 8080 })", "no network: nothing inside can open a connection"),
    ("node", "await fetch('http://127.0.0.1:8080/')", "no network"),
    ("node", "new Deno.Command('/usr/bin/id').outputSync()", "cannot start processes (/usr/bin/id)"),
    ("node", "Deno.dlopen('/lib/x86_64-linux-gnu/libc.so.6', {})", "load no native libraries"),
    ("node", "Deno.hostname()", "no system information (hostname)"),
    ("node", "const f = await import('node:fs'); f.writeFileSync('/tmp/x', 'y')", "no host file system: /tmp/x"),
    ("node", "await import('https://deno.land/std/fmt/colors.ts')", "import no remote or host modules"),
]


@pytest.mark.parametrize("prog,code,says", PERMISSION_CASES, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(PERMISSION_CASES)])
def test_permission_errors_are_one_clear_line(deno, box, prog, code, says):
    r = deno.exec(box, prog, "-c" if prog == "python3" else "-e", code)
    assert r.rc == 1, r
    assert r.err.count("\n") == 1 and r.err.startswith("sbx: deno sandboxes ") and says in r.err, r
    assert "--driver subprocess" in r.err and "NotCapable" not in r.err and "--allow-" not in r.err, r


def test_refused_listen_keeps_the_interpreter_and_can_be_caught(deno, fresh):
    r = py(deno, fresh, "import socket\ntry:\n  socket.socket().listen()\nexcept PermissionError as e:\n  print(e)").ok()
    assert LISTEN in r.out, r
    r = js(deno, fresh, "try { Deno.listen({ port: 1 }) } catch (e) { console.log(e.name, e.message) }").ok()
    assert r.out.startswith("NotCapable " + LISTEN), r
    # Emscripten's own listen used to take the interpreter down with it: a
    # session's globals (kept by that interpreter) show it is still the same.
    session = ["-e", "SBX_PYTHON_SESSION=keep"]
    py(deno, fresh, "kept = 'yes'", flags=session).ok()
    r = py(deno, fresh, "import _socket; s = _socket.socket(); s.bind(('127.0.0.1', 1)); s.listen()", flags=session)
    assert r.rc == 1 and LISTEN in r.err, r
    assert py(deno, fresh, "print(kept)", flags=session).ok().out == "yes\n"


def test_agent_environment_is_out_of_reach(deno, box):
    r = py(deno, box, "import os, json; print(json.dumps(dict(os.environ)))", flags=["-e", "ONLY=this"]).ok()
    env = json.loads(r.out)
    assert env.get("ONLY") == "this" and "DENO_DIR" not in env and "SBX_STATE_DIR" not in env, env
    r = js(deno, box, "console.log(JSON.stringify(Deno.env.toObject()))").ok()
    assert "DENO_DIR" not in r.out, r
    r = js(deno, box, "const p = await import('node:process'); console.log(p.default.env.DENO_DIR)")
    assert "/sbx-deno" not in r.out, r


def test_agent_process_is_confined(deno, box):
    pid = agent_pid(deno, box)
    st = Path(f"/proc/{pid}/status").read_text()
    uid = int([line for line in st.splitlines() if line.startswith("Uid:")][0].split()[1])
    if os.geteuid() != 0:
        pytest.skip("the separate uid, cgroup and network namespace need root")
    assert uid != 0, "the deno agent runs as root"
    assert "CapEff:\t0000000000000000" in st and "NoNewPrivs:\t1" in st, st
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net"), "shares the host's network"
    assert deno.cgroup_dirs(box), "no cgroup for the deno sandbox"


# --------------------------------------------------------------------------
# signals, client death, concurrency, lifecycle
# --------------------------------------------------------------------------


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_forwarded(deno, box, sig, status):
    p = deno.popen("exec", box, "--", "python3", "-c", "import time\nprint('started', flush=True)\ntime.sleep(30)")
    try:
        assert p.stdout.readline() == b"started\n"
        p.send_signal(sig)
        assert p.wait(timeout=15) == status
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()


def test_killed_client_stops_its_exec(deno, box):
    p = deno.popen("exec", box, "--", "python3", "-c",
                   "import time\nprint('started', flush=True)\ntime.sleep(2)\nopen('/work/after-client', 'w').write('x')")
    try:
        assert p.stdout.readline() == b"started\n"
    finally:
        p.kill()
        p.communicate()
    time.sleep(3)
    assert py(deno, box, "import os; print(os.path.exists('/work/after-client'))").ok().out == "False\n"


def test_parallel_execs_and_a_loop_blocks_no_other_sandbox(deno, fresh):
    # Concurrent Python execs need an interpreter each: 1.2 GiB of memory cap allows three.
    box = deno.create("--memory", "1200M", driver="deno")
    spin = deno.popen("exec", "--timeout", "8s", fresh, "--", "node", "-e", "while (true) {}")
    try:
        # 20 s: the quick exec starts an interpreter of its own, which takes
        # seconds on a loaded 2-core host.
        slow = deno.popen("exec", box, "--", "python3", "-c", "import time\nprint('sleeping', flush=True)\n"
                                                             "time.sleep(20)\nprint('slow')")
        assert slow.stdout.readline() == b"sleeping\n"
        assert py(deno, box, "print('quick')").ok().out == "quick\n"
        assert slow.poll() is None, "the quick exec waited for the slow one of the same sandbox"
        assert slow.communicate(timeout=30)[0] == b"slow\n"
    finally:
        spin.kill()
        spin.communicate()
        deno.remove(box)


def test_exec_rm_one_shot(deno):
    before = set(deno.ls_ids())
    r = deno.run("exec", "--rm", "--driver", "deno", "--", "python3", "-c", "print('one-shot'); raise SystemExit(7)")
    assert r.rc == 7 and r.out == "one-shot\n", r
    assert set(deno.ls_ids()) <= before, "exec --rm left a sandbox behind"


def test_a_python_one_shot_runs_its_code_under_its_cpu_cap(deno):
    # Its interpreter loads before the exec, without the cap (a Python
    # one-shot's boot), and the cap must be in force by the time its code runs.
    before = set(deno.ls_ids())
    p = deno.popen("exec", "--rm", "--driver", "deno", "--cpus", "0.25", "--timeout", "60s", "--", "python3", "-c",
                   "print('running', flush=True)\nwhile True: pass")
    sid = None
    try:
        assert p.stdout.readline() == b"running\n"
        sid, = set(deno.ls_ids()) - before
        quota = period = None
        for d in deno.cgroup_dirs(sid):
            if os.path.exists(f"{d}/cpu.cfs_quota_us"):
                quota, period = (int(Path(d, k).read_text()) for k in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
            elif os.path.exists(f"{d}/cpu.max"):
                quota, period = map(int, Path(d, "cpu.max").read_text().split())
        assert quota is not None and quota / period == pytest.approx(0.25), (quota, period)
    finally:
        p.kill()
        p.communicate()
        if sid:  # a killed client's one-shot is gc's; removed here at once
            deno.remove(sid)


def test_rm_frees_everything(deno):
    sid = deno.create(driver="deno")
    pid = agent_pid(deno, sid)
    assert pid_alive(pid)
    deno.run("rm", sid).ok()
    assert wait_until(lambda: not pid_alive(pid), 5), "the agent outlived rm"
    assert not os.path.exists(deno.sandbox_dir(sid)) and not os.path.exists(f"/run/sbx-deno/{sid}")
    assert not deno.cgroup_dirs(sid)
    r = deno.exec(sid, "python3", "-c", "1")
    assert r.rc == 125 and "does not exist" in r.err, r


def test_gc_collects_idle_deno_sandboxes(deno):
    sid = deno.create("--idle-timeout", "1s", driver="deno")
    pid = agent_pid(deno, sid)
    time.sleep(1.5)
    r = deno.run("gc", "--json").ok()
    assert sid in {a["target"] for a in json.loads(r.stdout)["actions"] if a["done"]}, r
    assert sid not in deno.ls_ids() and wait_until(lambda: not pid_alive(pid), 5)


def agent_log(sbx, sid) -> str:
    return "".join(p.read_text() for p in Path(sbx.sandbox_dir(sid)).rglob("agent.log"))


LOADED = "a Python interpreter loaded"


def test_python_loads_on_the_first_python_exec(deno, fresh):
    """An idle sandbox holds no interpreter (~170 MiB) it may never use; after its first Python exec it keeps one."""
    assert js(deno, fresh, "console.log(1)").ok().out == "1\n"
    time.sleep(1.5)  # the old rule loaded one 150 ms after the sandbox went idle
    assert LOADED not in agent_log(deno, fresh)
    assert py(deno, fresh, "print(2)").ok().out == "2\n"
    assert py(deno, fresh, "print(3)").ok().out == "3\n"
    assert agent_log(deno, fresh).count(LOADED) == 1, agent_log(deno, fresh)


def test_a_pool_spare_loads_python_ahead(deno, clients):
    """A warm pool's spare is there for a fast first exec: it loads Python while it waits."""
    c = clients.new({"SBX_POOL": "deno=1"}, label="pool-deno")
    ids = c.run("pool", "fill", timeout=120).ok().out.split()
    c.created.extend(ids)
    assert len(ids) == 1 and ID_RE.match(ids[0]), ids
    assert wait_until(lambda: LOADED in agent_log(c, ids[0]), 60), agent_log(c, ids[0])


def test_default_backend_is_deno(deno):
    r = deno.run("exec", "--rm", "--", "python3", "-c", "print('default')", unset=["LOCAL_SANDBOX_BACKEND"])
    assert r.rc == 0 and r.out == "default\n", r
    assert all(ID_RE.match(i) for i in deno.ls_ids())


def test_memory_caps_leave_the_sandbox_usable(deno, fresh):
    py(deno, fresh, "open('/work/m', 'w').write('kept')").ok()
    r = py(deno, fresh, "x = []\nwhile True: x.append(bytearray(1 << 20))", timeout=60)
    assert r.rc == 1 and "MemoryError" in r.err, r
    # A JS heap past its limit takes the agent's process down (an exec that reaches it
    # while it dies fails too); the supervisor starts a new one, with the files.
    r = js(deno, fresh, "const a = []; while (true) a.push(new Array(1e6).fill(1.5))", timeout=60)
    assert r.rc != 0, r
    r = wait_until(lambda: (lambda r: r if r.rc == 0 else None)(py(deno, fresh, "print(open('/work/m').read())")), 15)
    assert r and r.out == "kept\n", r


def test_output_capped_with_a_marker(deno, box):
    # The cap is 1/16 of the memory cap (32 MiB for the default 512M), at most 64 MiB.
    r = py(deno, box, "import sys\nfor i in range(40): sys.stdout.write('x' * (1 << 20))\nprint('never')", timeout=120)
    assert r.rc == 137 and len(r.stdout) == 32 << 20, (r.rc, len(r.stdout), r.err[-300:])
    assert "output truncated at 33554432 bytes" in r.err, r.err[-300:]
    r = js(deno, box, "while (true) console.log('flood')", flags=["--timeout", "2s"], timeout=60)
    assert r.rc in (124, 137) and r.stdout.startswith(b"flood\n"), (r.rc, r.err[-300:])
    assert py(deno, box, "print('usable')").ok().out == "usable\n"
