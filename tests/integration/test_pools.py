"""Warm pools: ready sandboxes made ahead for a template, claimed by the
creates that match it (docs/architecture.md, "Warm pools").  Each test runs
a corrald of its own, so that what it counts is its pools' alone."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import corral
from conftest import BUILD, wait_for, wait_gone

TEMPLATE = {"image": "busybox", "resources": {"memory_mb": 64, "cpus": 0.5}}
POOL_FLAG = "small:2:8:" + json.dumps(TEMPLATE)


def pool(c, name="small"):
    return next(p for p in c.pools() if p["name"] == name)


def ready(c, n, name="small", timeout=20):
    return wait_for(lambda: pool(c, name)["ready"] >= n and pool(c, name), timeout,
                    f"pool {name} to have {n} ready")


def pool_inits(d):
    """Host pids of the sandboxes' inits under this corrald's cgroup parent."""
    pids = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if (p / "comm").read_text().strip() != "corral-init":
                continue
            if f"/{d.cgroup_parent}/" in (p / "cgroup").read_text():
                pids.append(int(p.name))
        except OSError:
            continue
    return pids


def full_pool(corrald_factory):
    """A corrald whose pool "small" is full, and the host pids of its two
    ready sandboxes' inits."""
    d = corrald_factory(["--pool", POOL_FLAG])
    with d.client() as c:
        ready(c, 2)
    inits = pool_inits(d)
    assert len(inits) == 2
    return d, inits


def test_a_create_that_matches_a_pool_is_a_claim(corrald_factory):
    d = corrald_factory(["--pool", POOL_FLAG])
    with d.client() as c:
        ready(c, 2)
        assert c.list() == [], "a pool's sandboxes are nobody's: not listed"
        before = time.time()
        sb = c.create(image="busybox", memory_mb=64, cpus=0.5, labels={"who": "me"}, ttl_s=3,
                      env={"GREETING": "hi"})
        p = pool(c)
        assert p["claims"] == 1 and p["misses"] == 0
        info = c.get(sb.id).info
        assert info["labels"] == {"who": "me"}
        assert info["state"] == "ready"
        created = time.mktime(time.strptime(info["created_at"][:19], "%Y-%m-%dT%H:%M:%S"))
        assert created >= int(before) - time.timezone - 1, "its life starts at the claim"
        r = sb.exec("echo $GREETING; hostname; cat /etc/hostname")
        assert r.stdout.decode().split() == ["hi", sb.id, sb.id]
        assert [s.id for s in c.list()] == [sb.id]

        # Another spec is no claim; the pool fills again behind the claim.
        other = c.create(image="busybox", memory_mb=128)
        assert pool(c)["claims"] == 1
        other.destroy()
        ready(c, 2)

        # Its TTL runs from the claim.
        wait_for(lambda: c.get(sb.id).info["state"] == "destroyed", 10, "the TTL")
        assert c.get(sb.id).info["end_reason"] == "ttl"

        metrics = d.request("GET", "/metrics").body.decode()
        assert 'corral_pool_ready{pool="small"}' in metrics
        assert 'corral_pool_claims_total{pool="small"} 1' in metrics
        assert "corral_sandboxes_claimed_total 1" in metrics
        out = subprocess.run([str(BUILD / "corral"), "host"], capture_output=True, check=True,
                             env={**os.environ, "CORRAL_URL": d.url}).stdout.decode()
        assert "pool:       small: " in out and "1 claims" in out, out


def test_pools_through_the_api(corrald_factory):
    d = corrald_factory([])
    with d.client() as c:
        assert c.pools() == []
        p = c.set_pool("p1", 1, 4, TEMPLATE)
        assert (p["name"], p["min"], p["max"], p["template"]) == ("p1", 1, 4, TEMPLATE)
        ready(c, 1, "p1")
        for body, status, words in (
                ({"min": 1, "max": 0, "template": TEMPLATE}, 400, "max must be"),
                ({"min": 3, "max": 2, "template": TEMPLATE}, 400, "at least min"),
                ({"min": 1, "max": 2, "template": TEMPLATE, "size": 3}, 400, "unknown field"),
                ({"max": 2, "template": TEMPLATE}, 400, "min is required"),
                ({"min": 1, "max": 2, "template": {"image": "no-such-image"}}, 404,
                 "no-such-image"),
                ({"min": 1, "max": 2, "template": {"trajectory": "t-1"}}, 400, "trajectory"),
                ({"min": 1, "max": 2, "template": {"resources": {"memory_mb": 1}}}, 400,
                 "memory_mb")):
            resp = d.request("PUT", "/v1/pools/p2", body)
            assert resp.status == status and words in resp.error["message"], (body, resp)
        resp = d.request("PUT", "/v1/pools/bad%20name", {"min": 1, "max": 1})
        assert resp.status in (400, 404), resp
        assert [p["name"] for p in c.pools()] == ["p1"], "nothing made of a refused one"

        # A new template drains what the old one made.
        made = pool(c, "p1")["made"]
        c.set_pool("p1", 1, 4, {"image": "busybox", "resources": {"memory_mb": 96}})
        wait_for(lambda: pool(c, "p1")["made"] > made and pool(c, "p1")["ready"] == 1, 20)
        with c.create(image="busybox", memory_mb=96) as sb:
            assert pool(c, "p1")["claims"] == 1
            assert sb.info["spec"]["resources"]["memory_mb"] == 96

        c.remove_pool("p1")
        with pytest.raises(corral.NotFound):
            c.remove_pool("p1")
        assert d.request("GET", "/v1/pools/p1").status == 404
        wait_for(lambda: c.host()["used"]["sandboxes"] == 0, 10, "its sandboxes to go")


def test_a_pool_sandbox_that_dies_is_replaced_not_handed_out(corrald_factory):
    d, inits = full_pool(corrald_factory)
    with d.client() as c:
        for pid in inits:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: pool(c)["died"] == 2 and pool(c)["ready"] == 2, 20,
                 "the dead to be counted and replaced")
        assert not set(pool_inits(d)) & set(inits)
        with c.create(image="busybox", memory_mb=64, cpus=0.5) as sb:
            assert sb.exec("true").exit_code == 0
            assert pool(c)["claims"] == 1


def test_an_image_removed_under_a_pool(corrald_factory):
    """Removing the image of a pool's template is not held up by the pool:
    its ready sandboxes go, and the pool says why it cannot make more."""
    d = corrald_factory([])
    with d.client() as c:
        c.tag_image("busybox", "pooled:1")
        c.set_pool("p", 1, 2, {"image": "pooled:1", "resources": {"memory_mb": 64}})
        ready(c, 1, "p")
        c.remove_image("pooled:1")
        p = wait_for(lambda: pool(c, "p")["state"] == "failing" and pool(c, "p"), 10)
        assert p["ready"] == 0 and "pooled:1" in p["error"], p
        wait_for(lambda: c.host()["used"]["sandboxes"] == 0, 10, "its sandboxes to go")
        c.tag_image("busybox", "pooled:1")
        c.set_pool("p", 1, 2, {"image": "pooled:1", "resources": {"memory_mb": 64}})
        assert ready(c, 1, "p")["state"] == "ready"


def test_a_pool_never_takes_what_explicit_creates_need(corrald_factory):
    """A pool keeps a slot free for explicit creates, and gives up a ready
    sandbox when one is refused, so that its retry is admitted."""
    d = corrald_factory(["--max-sandboxes", "3", "--pool", POOL_FLAG])
    with d.client() as c:
        ready(c, 2)
        time.sleep(0.6)  # a few ticks: it stays below the count
        assert c.host()["used"]["sandboxes"] == 2
        a = c.create(image="busybox", memory_mb=32)  # not the template: no claim
        with pytest.raises(corral.CapacityError) as e:
            c.create(image="busybox", memory_mb=32)
        assert "3 of 3 sandboxes" in e.value.message
        assert pool(c)["shed"] == 1
        # Each refusal sheds one (a retry may come before the shed one is gone).
        b = wait_for(lambda: _try_create(c), 10, "the retry to be admitted")
        p = pool(c)
        assert p["shed"] >= 1 and p["ready"] <= 1
        assert c.host()["used"]["sandboxes"] == 2 + p["ready"]
        p = wait_for(lambda: pool(c)["state"] == "waiting" and pool(c), 5, "the pool to wait")
        assert "no room to spare" in p["waiting"], p
        a.destroy()
        b.destroy()
        ready(c, 2)


def _try_create(c):
    try:
        return c.create(image="busybox", memory_mb=32)
    except corral.CapacityError:
        return None


def test_a_pool_waits_while_memory_is_short(corrald_factory):
    """Pools fill only while the host has twice the reserve available:
    between one and two reserves, explicit creates go on and the pool says
    it waits."""
    with open("/proc/meminfo") as f:
        avail_mb = next(int(l.split()[1]) for l in f if l.startswith("MemAvailable:")) // 1024
    d = corrald_factory(["--reserve-mb", str(avail_mb * 2 // 3), "--pool", POOL_FLAG])
    with d.client() as c:
        p = wait_for(lambda: pool(c)["state"] == "waiting" and pool(c), 10)
        assert p["ready"] == 0 and "leaves twice the reserve" in p["waiting"], p
        with c.create(image="busybox", memory_mb=64, cpus=0.5) as sb:
            assert sb.exec("true").exit_code == 0
        assert pool(c)["claims"] == 0 and pool(c)["misses"] == 1


def test_kill_9_of_corrald_with_full_pools_leaves_nothing(corrald_factory):
    d, inits = full_pool(corrald_factory)
    d.proc.send_signal(signal.SIGKILL)
    d.proc.wait()
    d.start()  # reconcile
    with d.client() as c:
        ready(c, 2)
    assert wait_gone(inits) == [], "the old pool's sandboxes are gone"
    assert len(pool_inits(d)) == 2, "only the new pool's are there"
