"""Behaviour every driver must share: exec, streams, cp, ls, rm.

Parametrized over SBX_TEST_DRIVERS (default: subprocess).
"""
from __future__ import annotations

import io
import os
import secrets
import select
import stat
import tarfile
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ID_RE, sha256, signal_once_started, wait_until

# --------------------------------------------------------------------------
# exec: statuses
# --------------------------------------------------------------------------


def test_exit_status_zero_and_nonzero(sbx, sandbox):
    assert sbx.sh(sandbox, "exit 0").rc == 0
    r = sbx.sh(sandbox, "exit 3")
    assert r.rc == 3, r


def test_missing_command_is_127(sbx, sandbox):
    r = sbx.exec(sandbox, "no-such-command-sbxit")
    assert r.rc == 127, r
    assert "command not found" in r.err, r


def test_non_executable_is_126(sbx, sandbox):
    sbx.sh(sandbox, "printf '#!/bin/sh\\necho hi\\n' > /work/noexec && chmod 0644 /work/noexec").ok()
    r = sbx.exec(sandbox, "/work/noexec")
    assert r.rc == 126, r


def test_command_search_follows_execvp(sbx, sandbox):
    """The agent searches PATH itself (agent/spawn.cpp), with execvp's rules."""
    sbx.sh(sandbox, "mkdir -p /work/a /work/b && printf 'echo from-a\\n' > /work/a/tool && chmod 0644 /work/a/tool && "
                    "printf 'echo from-b\\n' > /work/b/tool && chmod 0755 /work/b/tool && "
                    "printf 'echo plain-script\\n' > /work/b/plain && chmod 0755 /work/b/plain").ok()
    path = "PATH=/work/a:/work/b:/usr/bin:/bin"
    # A file found but not executable does not end the search...
    r = sbx.exec(sandbox, "tool", flags=("--env", path))
    assert r.rc == 0 and r.out == "from-b\n", r
    # ...and is what is reported when nothing else is found.
    r = sbx.exec(sandbox, "tool", flags=("--env", "PATH=/work/a:/nonexistent"))
    assert r.rc == 126 and "permission denied" in r.err, r
    # An executable with no #! line runs under /bin/sh, by path or by name.
    for cmd in ("/work/b/plain", "plain"):
        r = sbx.exec(sandbox, cmd, flags=("--env", path))
        assert r.rc == 0 and r.out == "plain-script\n", (cmd, r)
    r = sbx.exec(sandbox, "plain", flags=("--env", "PATH=/nonexistent:/usr/bin"))
    assert r.rc == 127 and "command not found" in r.err, r


@pytest.mark.parametrize("script,status", [("kill -TERM $$", 143), ("kill -KILL $$", 137), ("kill -INT $$", 130)])
def test_killed_by_signal_is_128_plus_n(sbx, sandbox, script, status):
    r = sbx.sh(sandbox, script)
    assert r.rc == status, r
    # A plain SIGKILL is not an OOM kill and must not be reported as one.
    assert "out of memory" not in r.err, r


# --------------------------------------------------------------------------
# exec: streams
# --------------------------------------------------------------------------


def test_stdout_and_stderr_complete_1mib(sbx, sandbox):
    inside = sbx.sh(sandbox, "head -c 1048576 /dev/urandom > /tmp/blob && sha256sum /tmp/blob").ok().out.split()[0]
    r = sbx.sh(sandbox, "cat /tmp/blob; echo done >&2").ok()
    assert len(r.stdout) == 1 << 20, f"stdout has {len(r.stdout)} bytes, want 1048576"
    assert sha256(r.stdout) == inside
    assert r.stderr == b"done\n"
    r = sbx.sh(sandbox, "cat /tmp/blob >&2; echo done").ok()
    assert r.stdout == b"done\n", "stderr data leaked into stdout"
    assert len(r.stderr) == 1 << 20, f"stderr has {len(r.stderr)} bytes, want 1048576"
    assert sha256(r.stderr) == inside


def test_stdout_stderr_are_separate_and_ordered(sbx, sandbox):
    r = sbx.sh(sandbox, "i=0; while [ $i -lt 2000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done").ok()
    assert r.out.splitlines() == [f"out{i}" for i in range(2000)]
    assert r.err.splitlines() == [f"err{i}" for i in range(2000)]


def test_stdin_forwarded_with_i(sbx, sandbox):
    data = os.urandom(2 << 20)
    r = sbx.exec(sandbox, "sha256sum", flags=["-i"], input=data).ok()
    assert r.out.split()[0] == sha256(data)


def test_stdin_echoed_back(sbx, sandbox):
    # `cat` echoes stdin while more stdin is still coming (both directions at once).
    data = os.urandom(4 << 20)
    r = sbx.exec(sandbox, "cat", flags=["-i"], input=data, timeout=30)
    assert r.rc == 0, r
    assert r.stdout == data


def test_stdin_and_output_flow_at_once_with_paced_reader(sbx, sandbox, host_tmp):
    # `sbx exec -i ID -- CMD < file | consumer`, where CMD writes a lot before it
    # reads its stdin and the consumer takes 64 KiB per millisecond or so. sbx
    # must keep reading the sandbox's output while stdin is pending; a client
    # that blocks writing stdin while the agent blocks writing output deadlocks.
    f = host_tmp / "stdin.bin"
    f.write_bytes(os.urandom(8 << 20))
    want = (64 << 20) + len("end\n")
    with open(f, "rb") as fh:
        p = sbx.popen("exec", "-i", sandbox, "--", "sh", "-c",
                      "head -c 67108864 /dev/zero; cat > /dev/null; echo end", stdin=fh)
    fd = p.stdout.fileno()
    total, last, stalled = 0, time.monotonic(), False
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                total += len(chunk)
                last = time.monotonic()
                time.sleep(0.001)
            elif time.monotonic() - last > 8:
                stalled = True
                break
    finally:
        if p.poll() is None:
            p.kill()
        _, err = p.communicate()
    assert not stalled, (f"output stalled for 8 s after {total} of {want} bytes while stdin was pending "
                         f"(stderr: {err.decode(errors='replace')[-300:]!r})")
    assert p.returncode == 0 and total == want, (p.returncode, total, err)


def test_slow_reader_does_not_stall_other_execs(sbx, sandbox):
    # One client that stops reading its output (a paused pager, a full pipe)
    # must not freeze the sandbox for every other exec.
    p = sbx.popen("exec", sandbox, "--", "sh", "-c", "head -c 67108864 /dev/zero")  # its stdout is never read
    try:
        time.sleep(1.0)
        r = sbx.exec(sandbox, "echo", "hi", timeout=40)
        assert r.rc == 0 and r.out == "hi\n", r
        assert r.elapsed < 5, f"an unrelated exec took {r.elapsed:.1f} s while another client was not reading"
    finally:
        p.kill()
        p.communicate()


def test_stdin_not_forwarded_without_i(sbx, sandbox):
    # Without -i the command's stdin is empty (like docker exec without -i).
    r = sbx.exec(sandbox, "wc", "-c", input=b"should not arrive").ok()
    assert r.out.strip() == "0", r


def test_output_streams_as_produced(sbx, sandbox):
    p = sbx.popen("exec", sandbox, "--", "sh", "-c",
                  "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.5; done")
    t0 = time.monotonic()
    try:
        ready, _, _ = select.select([p.stdout], [], [], 2.0)
        assert ready, "no output within 2 s, though the command prints its first line at once"
        first = p.stdout.readline()
        elapsed = time.monotonic() - t0
        assert first == b"line1\n"
        assert elapsed < 2.0, f"first line took {elapsed:.2f} s; the whole command takes 3 s"
        assert p.poll() is None, "the command finished already; output was not streamed"
        rest, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, err
    assert rest.decode().split() == [f"line{i}" for i in range(2, 7)]


def test_parallel_execs_in_one_sandbox(sbx, sandbox):
    t0 = time.monotonic()
    # 3 s each: serialized they take 12 s; the margin is for a loaded host's
    # exec start-up (a micro-VM's under TCG beside the other test lane).
    procs = [sbx.popen("exec", sandbox, "--", "sh", "-c", f"sleep 3; echo {n}") for n in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=30)
        results.append((p.returncode, out, err))
    elapsed = time.monotonic() - t0
    for n, (rc, out, err) in enumerate(results):
        assert rc == 0, err
        assert out == f"{n}\n".encode()
    assert elapsed < 9.0, f"4 concurrent 3 s execs took {elapsed:.2f} s: they were serialized"


# --------------------------------------------------------------------------
# exec: env, workdir, timeout, persistence, one-shot
# --------------------------------------------------------------------------


def test_env_and_workdir_flags(sbx, sandbox):
    r = sbx.sh(sandbox, 'printf "%s|%s|%s" "$FOO" "$SPACED" "$PWD"',
               flags=["-e", "FOO=bar", "-e", "SPACED=a b=c", "-w", "/tmp"]).ok()
    assert r.out == "bar|a b=c|/tmp"
    assert sbx.exec(sandbox, "pwd").ok().out == "/work\n", "default workdir must be /work"


def test_create_level_env_and_workdir(sbx, make_sandbox, driver):
    sid = make_sandbox("-e", "CREATED=yes", "-e", "OTHER=1", "-w", "/work/proj/sub", driver=driver)
    r = sbx.sh(sid, 'printf "%s|%s|%s" "$CREATED" "$OTHER" "$(pwd)"').ok()
    assert r.out == "yes|1|/work/proj/sub"
    # (-w after -e: see test_exec_env_flag_right_before_id for -e directly before the id)
    r = sbx.sh(sid, 'printf "%s|%s" "$CREATED" "$PWD"', flags=["-e", "CREATED=override", "-w", "/tmp"]).ok()
    assert r.out == "override|/tmp", "exec -e/-w must override the sandbox's defaults"


@pytest.mark.parametrize("form", [["-e", "A=1"], ["--env=A=1"], ["-e", "B=0", "-e", "A=1"]])
def test_exec_env_flag_right_before_id(sbx, sandbox, form):
    # `docker exec -e K=V ID cmd` style: the id right after an -e value.
    r = sbx.sh(sandbox, 'printf "%s" "$A"', flags=form)
    assert r.rc == 0, r
    assert r.out == "1"


def test_missing_workdir_fails_clearly(sbx, sandbox):
    r = sbx.exec(sandbox, "true", flags=["-w", "/no/such/dir"])
    assert r.rc == 125 or r.rc == 2 or r.rc == 126, r
    assert "/no/such/dir" in r.err, r


def test_timeout_kills_whole_tree(sbx, sandbox):
    t0 = time.monotonic()
    r = sbx.sh(sandbox, "(sleep 2; echo late > /work/late) & sleep 30", flags=["--timeout", "1s"], timeout=30)
    elapsed = time.monotonic() - t0
    assert r.rc == 124, r
    assert "timed out" in r.err, r
    assert elapsed < 10, f"--timeout 1s took {elapsed:.1f} s"
    time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))
    r = sbx.sh(sandbox, "test -e /work/late && echo PRESENT || echo absent").ok()
    assert r.out.strip() == "absent", "a background grandchild survived --timeout and wrote its file"


def test_timeout_kills_daemonized_descendant(sbx, sandbox, driver, request):
    if driver == "runsc":
        # Strict: the day gVisor gains PR_SET_CHILD_SUBREAPER this turns red and the note goes.
        request.applymarker(pytest.mark.xfail(strict=True, reason="gVisor 20221219 has no child subreapers: a setsid'd double-forked daemon is re-parented "
                     "to the agent and escapes the timeout's kill (it stays in the sandbox and dies at rm)"))
    # `setsid -f` forks, starts a new session and lets the parent exit: the
    # grandchild is reparented and leaves the command's session and process
    # group. It is still part of what the command started.
    t0 = time.monotonic()
    r = sbx.sh(sandbox, "setsid -f sh -c 'sleep 2; echo late > /work/late-daemon'; sleep 30",
               flags=["--timeout", "1s"], timeout=30)
    assert r.rc == 124, r
    time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))
    r = sbx.sh(sandbox, "test -e /work/late-daemon && echo PRESENT || echo absent").ok()
    assert r.out.strip() == "absent", "a setsid'd descendant survived --timeout and wrote its file"


def test_files_persist_between_execs(sbx, sandbox):
    sbx.sh(sandbox, "echo kept > /work/keep && mkdir -p /tmp/d && echo t > /tmp/d/f").ok()
    assert sbx.exec(sandbox, "cat", "/work/keep", "/tmp/d/f").ok().out == "kept\nt\n"


def test_exec_rm_one_shot(sbx, driver):
    before = set(sbx.ls_ids())
    r = sbx.run("exec", "--rm", "--driver", driver, "--", "sh", "-c", "echo one-shot; exit 7")
    assert r.rc == 7, r
    assert r.out == "one-shot\n"
    assert set(sbx.ls_ids()) <= before, "exec --rm left a sandbox behind"


def test_exec_rm_is_gone_once_it_returns(sbx, driver):
    # Its teardown goes on in a detached process after the call returns;
    # `sbx ls` (like rm and gc) waits for it, so nothing sees a sandbox half-removed.
    # Its directory is renamed to .removing-ID under the lock, then deleted: no
    # command sees that name, and deleting a micro-VM's files can outlast the `ls`.
    before = set(sbx.ls_ids())
    sandboxes = os.path.join(sbx.state_dir, "sandboxes")

    def listed() -> set[str]:
        return set(os.listdir(sandboxes)) if os.path.isdir(sandboxes) else set()
    dirs = listed()
    for _ in range(2 if driver == "microvm" else 8):
        r = sbx.run("exec", "--rm", "--driver", driver, "--", "true")
        assert r.rc == 0, r
        assert set(sbx.ls_ids()) <= before
        if driver != "remote":
            left = {d for d in listed() - dirs if not d.startswith(".removing-")}
            assert not left, f"a one-shot's directory outlived `sbx ls` saying it was gone: {left}"
    if driver != "remote":
        assert wait_until(lambda: listed() <= dirs, timeout=30), f"removals never finished: {listed() - dirs}"


def test_exec_rm_frees_everything(sbx, driver):
    before = set(sbx.ls_ids())
    p = sbx.popen("exec", "--rm", "--driver", driver, "--", "sh", "-c", "sleep 1.5; echo done")
    try:
        new = wait_until(lambda: set(sbx.ls_ids()) - before, timeout=5, interval=0.1)
        assert new, "the one-shot sandbox never appeared in `sbx ls` while it ran"
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, err
    assert out == b"done\n"
    (sid,) = new
    assert sid not in sbx.ls_ids()
    assert not os.path.exists(sbx.sandbox_dir(sid)), "state directory of the one-shot sandbox remains"
    if driver == "subprocess":
        left = [d for d in sbx.cgroup_dirs(sid) if os.path.isdir(d)]
        assert not left, f"cgroups of the one-shot sandbox remain: {left}"


def test_exec_on_missing_sandbox(sbx, driver):
    r = sbx.exec("sbx_aaaaaaaaaaab", "true")
    assert r.rc == 125, r
    assert r.err.startswith("sbx: error:") and "does not exist" in r.err, r


# --------------------------------------------------------------------------
# cp
# --------------------------------------------------------------------------


def cp(sbx, *args, **kw):
    """`sbx cp ...`, bounded at 30 s (these copies take well under a second)."""
    kw.setdefault("timeout", 30)
    return sbx.run("cp", *args, **kw)


def _make_tree(root: Path) -> Path:
    t = root / "tree"
    (t / "a" / "b").mkdir(parents=True)
    (t / "empty").mkdir()
    (t / "a" / "b" / "c.txt").write_text("nested\n")
    (t / "bin.dat").write_bytes(os.urandom(3 << 20))
    (t / "script.sh").write_text("#!/bin/sh\necho script\n")
    os.chmod(t / "script.sh", 0o755)
    (t / "secret").write_text("s3cr3t\n")
    os.chmod(t / "secret", 0o600)
    os.symlink("a/b/c.txt", t / "link")
    os.symlink("/nonexistent/target", t / "dangling")
    return t


def _snapshot(root: Path) -> dict:
    """path -> (kind, mode, content-hash-or-link-target) for a host tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", None, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", None, None)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), sha256(p.read_bytes()))
    return out


def test_cp_file_round_trip(sbx, sandbox, host_tmp):
    src = host_tmp / "f.bin"
    data = os.urandom(300_000)
    src.write_bytes(data)
    os.chmod(src, 0o640)
    cp(sbx, src, f"{sandbox}:/work/f.bin").ok()
    r = sbx.sh(sandbox, "sha256sum /work/f.bin; stat -c %a /work/f.bin").ok()
    digest, mode = r.out.split()[0], r.out.split()[-1]
    assert digest == sha256(data)
    assert mode == "640"
    back = host_tmp / "back.bin"
    cp(sbx, f"{sandbox}:/work/f.bin", back).ok()
    assert back.read_bytes() == data
    assert stat.S_IMODE(back.stat().st_mode) == 0o640


def test_cp_tree_round_trip(sbx, sandbox, host_tmp):
    tree = _make_tree(host_tmp)
    cp(sbx, tree, f"{sandbox}:/work/").ok()  # existing dir: lands in /work/tree
    r = sbx.sh(sandbox, "cd /work/tree && stat -c '%n %a' script.sh secret && readlink link && readlink dangling && "
                        "cat link && sha256sum bin.dat && test -d empty && echo empty-ok").ok()
    lines = r.out.splitlines()
    assert lines[0] == "script.sh 755" and lines[1] == "secret 600", r
    assert lines[2] == "a/b/c.txt" and lines[3] == "/nonexistent/target", r
    assert lines[4] == "nested", r
    assert lines[5].split()[0] == sha256((tree / "bin.dat").read_bytes())
    assert lines[6] == "empty-ok"
    out = host_tmp / "out"
    cp(sbx, f"{sandbox}:/work/tree", out).ok()  # new name: the tree itself becomes out/
    assert _snapshot(out) == _snapshot(tree)


def test_cp_docker_naming_rules_into_sandbox(sbx, sandbox, host_tmp):
    f = host_tmp / "f.txt"
    f.write_text("file\n")
    tree = host_tmp / "t"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "x").write_text("x\n")
    sbx.sh(sandbox, "mkdir -p /work/dir /work/dest /work/contents").ok()
    cp(sbx, f, f"{sandbox}:/work/dir").ok()           # into an existing dir
    cp(sbx, f, f"{sandbox}:/work/renamed.txt").ok()   # new name
    cp(sbx, tree, f"{sandbox}:/work/dest").ok()       # dir into existing dir -> dest/t
    cp(sbx, tree, f"{sandbox}:/work/newtree").ok()    # dir to new name -> newtree/sub
    cp(sbx, f"{tree}/.", f"{sandbox}:/work/contents").ok()  # contents form -> contents/sub
    r = sbx.sh(sandbox, "cd /work && cat dir/f.txt renamed.txt dest/t/sub/x newtree/sub/x contents/sub/x && "
                        "test ! -e contents/t && test -f renamed.txt && echo shape-ok").ok()
    assert r.out == "file\nfile\nx\nx\nx\nshape-ok\n", r
    r = cp(sbx, f, f"{sandbox}:/work/missing-dir/")
    assert r.rc != 0 and r.err.startswith("sbx: error:"), r


def test_cp_docker_naming_rules_out_of_sandbox(sbx, sandbox, host_tmp):
    sbx.sh(sandbox, "mkdir -p /work/t/sub && echo x > /work/t/sub/x && echo f > /work/f").ok()
    existing = host_tmp / "existing"
    existing.mkdir()
    cp(sbx, f"{sandbox}:/work/f", existing).ok()
    cp(sbx, f"{sandbox}:/work/t", existing).ok()
    assert (existing / "f").read_text() == "f\n"
    assert (existing / "t" / "sub" / "x").read_text() == "x\n"
    contents = host_tmp / "contents"
    contents.mkdir()
    cp(sbx, f"{sandbox}:/work/t/.", contents).ok()
    assert (contents / "sub" / "x").read_text() == "x\n" and not (contents / "t").exists()
    cp(sbx, f"{sandbox}:/work/f", host_tmp / "renamed").ok()
    assert (host_tmp / "renamed").read_text() == "f\n"


def test_cp_tar_stream_in_and_out(sbx, sandbox):
    buf = io.BytesIO()
    payload = os.urandom(100_000)
    with tarfile.open(fileobj=buf, mode="w") as tf:
        d = tarfile.TarInfo("pkg")
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        tf.addfile(d)
        fi = tarfile.TarInfo("pkg/data.bin")
        fi.size, fi.mode = len(payload), 0o600
        tf.addfile(fi, io.BytesIO(payload))
        hello = b"hello\n"
        fi = tarfile.TarInfo("pkg/hello.txt")
        fi.size, fi.mode = len(hello), 0o644
        tf.addfile(fi, io.BytesIO(hello))
        ln = tarfile.TarInfo("pkg/ln")
        ln.type, ln.linkname = tarfile.SYMTYPE, "hello.txt"
        tf.addfile(ln)
    sbx.sh(sandbox, "mkdir -p /work/in").ok()
    cp(sbx, "-", f"{sandbox}:/work/in", input=buf.getvalue()).ok()
    r = sbx.sh(sandbox, "cd /work/in/pkg && cat hello.txt && readlink ln && stat -c %a data.bin && "
                        "sha256sum data.bin").ok()
    lines = r.out.splitlines()
    assert lines[:3] == ["hello", "hello.txt", "600"], r
    assert lines[3].split()[0] == sha256(payload)

    r = cp(sbx, f"{sandbox}:/work/in/pkg", "-").ok()
    with tarfile.open(fileobj=io.BytesIO(r.stdout), mode="r:") as tf:
        members = {m.name.rstrip("/"): m for m in tf.getmembers()}
        assert {"pkg", "pkg/data.bin", "pkg/hello.txt", "pkg/ln"} <= set(members), sorted(members)
        assert tf.extractfile(members["pkg/data.bin"]).read() == payload
        assert members["pkg/ln"].issym() and members["pkg/ln"].linkname == "hello.txt"
        assert members["pkg/data.bin"].mode & 0o777 == 0o600


def test_cp_tar_stream_refuses_dotdot_entries(sbx, sandbox):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        fi = tarfile.TarInfo("../../../../tmp/evil-from-tar")
        fi.size = 5
        tf.addfile(fi, io.BytesIO(b"evil\n"))
    sbx.sh(sandbox, "mkdir -p /work/in").ok()
    r = cp(sbx, "-", f"{sandbox}:/work/in", input=buf.getvalue())
    assert r.rc != 0, r
    assert not sbx.sh(sandbox, "test -e /tmp/evil-from-tar").rc == 0


@pytest.fixture
def escape_links(sbx, sandbox):
    sbx.sh(sandbox, "ln -s / /work/rootlink && ln -s ../../../../../ /work/up && ln -s /etc/shadow /work/shadow").ok()
    return sandbox


def _users(passwd_text: str) -> set[str]:
    return {line.split(":")[0] for line in passwd_text.splitlines() if line and not line.startswith("#")}


def test_cp_out_through_symlinks_stays_in_sandbox(sbx, escape_links, host_tmp):
    sid = escape_links
    # The sandbox's own passwd: the host view's curated one (root, nobody) or its image's.
    own = _users(sbx.exec(sid, "cat", "/etc/passwd").ok().out)
    assert own != _users(open("/etc/passwd").read()), "the sandbox's passwd is the host's: nothing to tell apart"
    for src in (f"{sid}:/work/up/etc/passwd", f"{sid}:/work/rootlink/etc/passwd"):
        dest = host_tmp / ("x-" + secrets.token_hex(3))
        r = cp(sbx, src, dest)
        if r.rc == 0:
            users = _users(dest.read_text())
            assert users == own, f"{src} yielded a passwd with users {sorted(users)}: the host's?"
        else:
            # Refusing to follow the link is acceptable too; reading the host's file is not.
            assert r.err.startswith("sbx: error:"), r


def test_cp_out_of_symlink_copies_the_link(sbx, escape_links, host_tmp):
    dest = host_tmp / "z"
    cp(sbx, f"{escape_links}:/work/shadow", dest).ok()
    assert dest.is_symlink(), "copying out a symlink must copy the link, not its target"
    assert os.readlink(dest) == "/etc/shadow"


def test_cp_in_through_dotdot_lands_in_sandbox(sbx, escape_links, host_tmp):
    name = "sbxit-escape-" + secrets.token_hex(4)
    src = host_tmp / "payload"
    src.write_text("payload\n")
    try:
        r = cp(sbx, src, f"{escape_links}:/work/up/../../../../tmp/{name}")
        assert not os.path.exists(f"/tmp/{name}"), "cp wrote to the HOST's /tmp"
        if r.rc == 0:
            r2 = sbx.exec(escape_links, "cat", f"/tmp/{name}").ok()
            assert r2.out == "payload\n"
        else:
            assert r.err.startswith("sbx: error:"), r
        r = cp(sbx, src, f"{escape_links}:/work/rootlink/tmp/{name}-2")
        assert not os.path.exists(f"/tmp/{name}-2"), "cp wrote to the HOST's /tmp"
    finally:
        for p in (f"/tmp/{name}", f"/tmp/{name}-2"):
            if os.path.lexists(p):
                os.unlink(p)


def test_cp_max_size(sbx, sandbox, host_tmp):
    big = host_tmp / "big"
    big.write_bytes(os.urandom(2 << 20))
    r = cp(sbx, "--max-size", "1M", big, f"{sandbox}:/work/big")
    assert r.rc != 0, r
    assert r.err.startswith("sbx: error:") and "limit" in r.err, r
    r2 = sbx.sh(sandbox, "ls -A /work").ok()
    assert r2.out.split() == [], f"a refused upload left files behind: {r2.out!r}"

    sbx.sh(sandbox, "head -c 2097152 /dev/zero > /work/big-in").ok()
    out = host_tmp / "big-out"
    r = cp(sbx, "--max-size", "1M", f"{sandbox}:/work/big-in", out)
    assert r.rc != 0, r
    assert r.err.startswith("sbx: error:") and "limit" in r.err, r
    assert not out.exists() or out.stat().st_size <= 1 << 20


# --------------------------------------------------------------------------
# ls, rm
# --------------------------------------------------------------------------


def test_ls_json_fields(sbx, make_sandbox, driver):
    label = "team=" + secrets.token_hex(3)
    sid = make_sandbox("--memory", "256M", "--pids", "100", "--cpus", "0.5", "--disk", "64M", "-l", label,
                       driver=driver)
    rec = sbx.record(sid)
    assert rec is not None, f"{sid} missing from ls --json"
    assert rec["id"] == sid
    assert rec["state"] == "running"
    assert rec["spec"]["driver"] == driver
    lim = rec["spec"]["limits"]
    assert lim["memory_mb"] == 256 and lim["pids"] == 100 and lim["cpus"] == 0.5 and lim["disk_mb"] == 64, lim
    k, v = label.split("=")
    assert rec["spec"]["labels"] == {k: v}


def test_ls_quiet_and_filters(sbx, make_sandbox, driver):
    tag = secrets.token_hex(3)
    a = make_sandbox("-l", f"grp={tag}", "-l", "role=a", driver=driver)
    b = make_sandbox("-l", f"grp={tag}", "-l", "role=b", driver=driver)
    assert {a, b} <= set(sbx.ls_ids())
    for line in sbx.run("ls", "-q").ok().out.splitlines():
        assert ID_RE.match(line), f"ls -q printed {line!r}"
    assert set(sbx.ls_ids("--filter", f"label:grp={tag}")) == {a, b}
    assert sbx.ls_ids("--filter", f"label:grp={tag}", "--filter", "label:role=b") == [b]
    assert set(sbx.ls_ids("--filter", f"label:grp={tag}", "--filter", "state=running")) == {a, b}
    assert sbx.ls_ids("--filter", f"label:grp={tag}", "--filter", "state=dead") == []
    assert sbx.ls_ids("--filter", f"label:grp=other-{tag}") == []
    assert set(sbx.ls_ids("--filter", f"driver={driver}", "--filter", f"label:grp={tag}")) == {a, b}


def test_rm_removes_and_exec_then_fails(sbx, make_sandbox, driver):
    sid = make_sandbox(driver=driver)
    r = sbx.run("rm", sid).ok()
    assert sid in r.out
    assert sid not in sbx.ls_ids()
    r = sbx.exec(sid, "true")
    assert r.rc == 125, r
    assert r.err.startswith("sbx: error:") and "does not exist" in r.err, r


def test_id_prefix_accepted(sbx, make_sandbox, driver):
    sid = make_sandbox(driver=driver)
    r = sbx.exec(sid[:10], "echo", "by-prefix").ok()
    assert r.out == "by-prefix\n"
    r = sbx.run("rm", sid[:10]).ok()
    assert r.out.strip() in (sid, sid[:10]) and sid not in sbx.ls_ids()  # docker echoes what it was given
    assert sbx.exec("sbx_", "true").rc != 0  # too short to be a prefix


def test_rm_missing(sbx, driver):
    r = sbx.run("rm", "-f", "sbx_aaaaaaaaaaac")
    assert r.rc == 0, r
    r = sbx.run("rm", "sbx_aaaaaaaaaaac")
    assert r.rc != 0, r
    assert r.err.startswith("sbx: error:"), r
    assert "sbx: hint:" in r.err, r


# --------------------------------------------------------------------------
# exec: interactive stdin, signals, client death, removal during exec
# --------------------------------------------------------------------------


def _readline(p, timeout):
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    return p.stdout.readline() if ready else None


# Through a manager too: `exec -i` streams stdin over the exec WebSocket (docs/api.md).
def test_stdin_streams_interactively(sbx, sandbox):
    p = sbx.popen("exec", "-i", sandbox, "--", "sh", "-c", "read a; echo got:$a; read b; echo got:$b",
                  stdin=subprocess.PIPE)
    try:
        p.stdin.write(b"first\n")
        p.stdin.flush()
        assert _readline(p, 5) == b"got:first\n", "stdin was not forwarded before EOF"
        p.stdin.write(b"second\n")
        p.stdin.close()
        assert _readline(p, 5) == b"got:second\n"
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdin, p.stdout, p.stderr):
            f.close()
    assert p.returncode == 0


def test_stdin_ignored_by_command_does_not_hang(sbx, sandbox):
    r = sbx.exec(sandbox, "true", flags=["-i"], input=os.urandom(8 << 20), timeout=60)
    assert r.rc == 0, r


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_forwarded_to_command(sbx, sandbox, sig, status):
    p = sbx.popen("exec", sandbox, "--", "sh", "-c", "echo started; exec sleep 30")
    try:
        assert _readline(p, 10) == b"started\n"
        time.sleep(0.2)
        p.send_signal(sig)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()
    assert p.returncode == status


def _sleeps_left(sbx, sandbox) -> str:
    """The sleep processes still running in the sandbox (its own pid namespace), one per line."""
    # /proc and grep rather than pgrep, which a micro-VM's busybox guest lacks.
    r = sbx.sh(sandbox, "cat /proc/[0-9]*/comm 2>/dev/null | grep -x sleep; true")
    assert r.rc == 0, r
    return r.out.strip()


# A background job that ignores the signal (as a non-interactive sh makes any
# `sleep 31 &` ignore SIGINT) outlives the command the signal ends; the whole
# tree must go, as on --timeout, while the status stays the signal's.
@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                        (signal.SIGKILL, -9)], ids=["INT", "TERM", "HUP", "client-killed"])
def test_signal_to_exec_kills_the_whole_tree(sbx, sandbox, sig, status):
    p = sbx.popen("exec", sandbox, "--", "sh", "-c",
                  "(trap '' INT TERM HUP; exec sleep 31) & echo started; exec sleep 32")
    running = signal_once_started(p, sig, lambda: wait_until(lambda: len(_sleeps_left(sbx, sandbox).splitlines()) == 2, 10))
    assert running, "sleep 31 and sleep 32 never both ran"
    assert p.returncode == status
    # Through a manager the kill follows the dropped connection: a bounded wait, no timing claim.
    assert wait_until(lambda: _sleeps_left(sbx, sandbox) == "", 10), \
        f"left running after {signal.Signals(sig).name} to sbx exec: {_sleeps_left(sbx, sandbox)}"


def test_killed_client_kills_its_command(sbx, sandbox):
    p = sbx.popen("exec", sandbox, "--", "sh", "-c", "echo started; sleep 2; echo late > /work/after-client-death")
    try:
        assert _readline(p, 10) == b"started\n"
    finally:
        p.kill()
        p.communicate()
    time.sleep(3)
    r = sbx.sh(sandbox, "test -e /work/after-client-death && echo PRESENT || echo absent").ok()
    assert r.out.strip() == "absent", "the command outlived the sbx client that ran it"


def test_exec_rm_interrupted_still_cleans_up(sbx, driver):
    before = set(sbx.ls_ids())
    p = sbx.popen("exec", "--rm", "--driver", driver, "--", "sh", "-c", "echo started; exec sleep 30")
    try:
        assert _readline(p, 15) == b"started\n"
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()
    assert p.returncode == 143
    # Through a manager the one-shot goes with its dropped request (POST /v1/run),
    # just after the client has exited: a bounded wait.
    assert wait_until(lambda: set(sbx.ls_ids()) <= before, 10 if driver == "remote" else 0), \
        "an interrupted exec --rm left its sandbox behind"


def test_rm_during_exec(sbx, make_sandbox, driver):
    sid = make_sandbox(driver=driver)
    p = sbx.popen("exec", sid, "--", "sh", "-c", "echo started; exec sleep 30")
    try:
        assert _readline(p, 10) == b"started\n"
        r = sbx.run("rm", sid, timeout=30)
        assert r.rc == 0, r
        p.wait(timeout=10)
        _, err = p.communicate()
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode != 0
    assert sid not in sbx.ls_ids()
