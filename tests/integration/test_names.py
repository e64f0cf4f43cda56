"""Sandbox names: `sbx create --name web`, then `web` wherever an id goes
(exec, cp, rm), shown by ls. A name is unique per owner (the sbx.owner label;
none on this host unless set), never has an id's shape, and two concurrent
creates of one name give one sandbox and one clear error. Through a manager
the name travels in the create body and is remembered beside the id.
"""
from __future__ import annotations

import json
import threading

import pytest

from conftest import ID_RE, driver_problem, skip_or_fail
from manager_fixtures import clients, manager, manager_root, module_managers, remote_env  # noqa: F401


@pytest.fixture(autouse=True)
def _subprocess_driver(sbx):
    problem = driver_problem(sbx, "subprocess")
    if problem:
        skip_or_fail(problem)


def test_a_name_stands_for_the_id_in_exec_cp_ls_and_rm(sbx, make_sandbox, tmp_path):
    sid = make_sandbox("--name", "web-1")
    assert sbx.exec("web-1", "echo", "hi").ok().out == "hi\n"
    src = tmp_path / "in.txt"
    src.write_text("through the name\n")
    sbx.run("cp", str(src), "web-1:/work/f.txt").ok()
    sbx.run("cp", "web-1:/work/f.txt", str(tmp_path / "out.txt")).ok()
    assert (tmp_path / "out.txt").read_text() == "through the name\n"

    (rec,) = [r for r in sbx.ls() if r["id"] == sid]
    assert rec["spec"]["name"] == "web-1", rec
    table = sbx.run("ls").ok().out.splitlines()
    assert table[0].split()[:2] == ["ID", "NAME"], table
    assert any(line.split()[:2] == [sid, "web-1"] for line in table[1:]), table

    assert sbx.run("rm", "web-1").ok().out == sid + "\n"
    r = sbx.exec("web-1", "true")
    assert r.rc == 125 and "does not exist" in r.err, r


def test_a_taken_name_is_refused_naming_its_holder(sbx, make_sandbox):
    sid = make_sandbox("--name", "dup")
    r = sbx.run("create", "--driver", "subprocess", "--name", "dup")
    assert r.rc == 125 and r.out == "", r
    assert "a sandbox named 'dup' already exists" in r.err and sid in r.err, r
    # Another owner's sandbox may have the same name; this host's own (no owner label) is another owner.
    other = make_sandbox("--name", "dup", "-l", "sbx.owner=alice")
    assert other != sid
    assert sbx.exec("dup", "true").ok().rc == 0  # resolves among this host's own: the first
    # A name freed by rm can be taken again.
    sbx.remove(sid).ok()
    make_sandbox("--name", "dup")


@pytest.mark.parametrize("bad", ["Web", "-web", ".web", "a" * 64, "sbx_abcdefghijkl", "a/b", "a b"])
def test_bad_names_are_refused(sbx, bad):
    r = sbx.run("create", "--driver", "subprocess", "--name", bad)
    assert r.rc == 2 and r.out == "", r
    assert "invalid sandbox name" in r.err and "hint:" in r.err, r


def test_a_name_comes_before_an_id_prefix(sbx, make_sandbox):
    first = make_sandbox()
    prefix = first[:7]  # "sbx_" + 3: a valid name, and a prefix of the first id
    second = make_sandbox("--name", prefix)
    assert sbx.exec(second, "true").ok().rc == 0
    r = sbx.run("rm", prefix)
    assert r.rc == 0 and r.out == second + "\n", r
    assert sbx.run("rm", prefix).out == first + "\n"  # now the prefix again


def concurrent_creates(runner, n: int, *flags) -> list:
    results = [None] * n

    def one(i):
        results[i] = runner.run("create", "--driver", "subprocess", *flags, timeout=120)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if r.rc == 0 and ID_RE.match(r.out.strip()):
            runner.created.append(r.out.strip())
    return results


def test_concurrent_creates_of_one_name_give_one_sandbox(sbx):
    results = concurrent_creates(sbx, 4, "--name", "racy")
    ok = [r for r in results if r.rc == 0]
    try:
        assert len(ok) == 1, results
        for r in results:
            if r.rc != 0:
                assert r.rc == 125 and "a sandbox named 'racy' already exists" in r.err, r
        assert [x["id"] for x in sbx.ls() if x["spec"]["name"] == "racy"] == [ok[0].out.strip()]
    finally:
        for r in ok:
            sbx.remove(r.out.strip())


def test_a_pool_claim_keeps_the_name_and_two_claims_cannot_share_it(clients):
    c = clients.new({"SBX_POOL": "subprocess=3"}, label="pool-names")
    pooled = c.run("pool", "fill", timeout=120).ok().out.split()
    c.created.extend(pooled)
    results = concurrent_creates(c, 3, "--name", "claimed")
    ok = [r.out.strip() for r in results if r.rc == 0]
    assert len(ok) == 1, results
    (rec,) = [x for x in c.ls() if x["id"] == ok[0]]
    assert rec["from_pool"] is True and rec["spec"]["name"] == "claimed", rec
    assert c.exec("claimed", "true").ok().rc == 0
    for r in results:
        if r.rc != 0:
            assert "a sandbox named 'claimed' already exists" in r.err, r


def test_a_name_through_a_manager(manager, clients):
    c = clients.new(remote_env(manager))
    sid = c.run("create", "--name", "remote-web").ok().out.strip()
    assert ID_RE.match(sid)
    try:
        assert c.exec("remote-web", "echo", "there").ok().out == "there\n"
        rec = manager.request("GET", f"/v1/sandboxes/{sid}").json()
        assert rec["spec"]["name"] == "remote-web", rec
        rows = json.loads(c.run("ls", "--json").ok().out)
        assert [r["spec"]["name"] for r in rows if r["id"] == sid] == ["remote-web"], rows
        # The manager keeps names unique among its key's sandboxes.
        r = c.run("create", "--name", "remote-web")
        assert r.rc == 125 and "already exists" in r.err and sid in r.err, r
    finally:
        assert c.run("rm", "remote-web").ok().out == sid + "\n"
    r = c.exec("remote-web", "true")
    assert r.rc != 0, r
