"""A sandbox's lifetime: its ttl extended or shortened while it runs
(POST .../timeout, Sandbox.set_timeout, corral timeout), and what a ttl
does: destroy, or with on_ttl "pause", pause it until the next call (or an
explicit resume) wakes it, with its ttl running again from then."""

import asyncio
import calendar
import time

import pytest

import corral
from conftest import SMALL, wait_for
from test_cli import corral as run


def epoch(rfc3339):
    """Seconds since the epoch of corrald's times (2026-12-03T09:20:44.976Z)."""
    return calendar.timegm(time.strptime(rfc3339[:19], "%Y-%m-%dT%H:%M:%S")) + \
        float("0" + rfc3339[19:-1])


def state(sb):
    return sb.inspect()["state"]


def test_a_ttl_is_extended_and_shortened_while_it_runs(client):
    sb = client.create(ttl_s=2, **SMALL)
    try:
        before = epoch(sb.info["expires_at"])
        info = sb.set_timeout(60)
        assert 55 < epoch(info["expires_at"]) - time.time() < 65 and epoch(info["expires_at"]) > before
        time.sleep(2.5)  # past the spec's ttl: it runs on
        assert state(sb) == "ready" and sb.exec("true").exit_code == 0
        info = sb.set_timeout(0)
        assert info["expires_at"] is None  # no ttl at all now
        sb.set_timeout(1)
        wait_for(lambda: state(sb) == "destroyed", 10, "the shortened ttl's end")
        assert sb.inspect()["end_reason"] == "ttl"
        with pytest.raises(corral.Conflict):
            sb.set_timeout(60)
    finally:
        sb.destroy()


def test_a_ttl_that_pauses_and_the_next_call_that_wakes_it(client):
    with client.create(ttl_s=1, on_ttl="pause", **SMALL) as sb:
        assert sb.info["spec"]["on_ttl"] == "pause"
        sb.exec("echo kept > /tmp/state")
        wait_for(lambda: state(sb) == "paused", 10, "the ttl's pause")
        assert sb.inspect()["expires_at"] is None
        # The next call resumes it, with what it had, and its ttl runs again.
        r = sb.exec("cat /tmp/state")
        assert r.stdout == b"kept\n"
        info = sb.inspect()
        assert info["state"] == "ready" and 0 < epoch(info["expires_at"]) - time.time() <= 1.5
        wait_for(lambda: state(sb) == "paused", 10, "the ttl's second pause")
        # An explicit resume wakes it too, and set_timeout gives it longer.
        sb.resume()
        sb.set_timeout(60)
        time.sleep(1.5)
        assert state(sb) == "ready"


def test_an_idle_ttl_that_pauses(client):
    with client.create(idle_ttl_s=1, on_ttl="pause", **SMALL) as sb:
        wait_for(lambda: state(sb) == "paused", 10, "the idle ttl's pause")
        assert sb.exec("echo awake").stdout == b"awake\n"
        assert state(sb) == "ready"


def test_bad_lifetimes_are_refused_naming_what_is_wrong(corrald, client):
    with pytest.raises(corral.InvalidSpec, match="on_ttl must be destroy or pause, not 'explode'"):
        client.create(on_ttl="explode", **SMALL)
    with client.create(**SMALL) as sb:
        for body, msg in (({}, "timeout_s is required"),
                          ({"timeout_s": -1}, "timeout_s must be"),
                          ({"timeout_s": 10**9}, "timeout_s must be"),
                          ({"timeout_s": 5, "ttl": 1}, "unknown field 'ttl'")):
            r = corrald.request("POST", f"/v1/sandboxes/{sb.id}/timeout", body)
            assert r.status == 400 and msg in r.json()["error"]["message"], (body, r.json())
    r = corrald.request("POST", "/v1/sandboxes/sb-nope/timeout", {"timeout_s": 5})
    assert r.status == 404


def test_the_cli_and_the_asyncio_client_set_a_timeout(corrald, client):
    r = run(corrald, "create", "--on-ttl", "pause", "--ttl", "300", "--memory-mb", "128")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().strip()
    try:
        r = run(corrald, "timeout", sid, "120")
        assert r.returncode == 0 and r.stdout.decode().strip() == sid, r.stderr
        info = client.get(sid).info
        assert info["spec"]["on_ttl"] == "pause" and 110 < epoch(info["expires_at"]) - time.time()
        r = run(corrald, "timeout", sid, "soon")
        assert r.returncode == 2 and b"SECONDS" in r.stderr
        r = run(corrald, "create", "--on-ttl", "sleep")
        assert r.returncode == 2 and b"--on-ttl" in r.stderr and b"destroy or pause" in r.stderr

        async def main():
            async with corrald.async_client() as c:
                sb = await c.get(sid)
                return await sb.set_timeout(7)

        info = asyncio.run(main())
        assert 0 < epoch(info["expires_at"]) - time.time() <= 8
    finally:
        client.get(sid).destroy()
