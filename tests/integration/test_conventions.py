"""The API's conventions (docs/api.md, Conventions): every list pages
with a cursor and filters by state and label the same way, every time is
RFC 3339 in UTC, every DELETE answers what it removed, and the SDK names
its parameters as the API does."""

import os
import re

import pytest

import corral
from conftest import SMALL, need_debian

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def pages(corrald, target, items, limit):
    """Every item of a list, page by page; and the pages' sizes."""
    got, sizes, cursor = [], [], None
    while True:
        sep = "&" if "?" in target else "?"
        q = f"{target}{sep}limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        r = corrald.request("GET", q)
        assert r.status == 200, r.json()
        body = r.json()
        got += body[items]
        sizes.append(len(body[items]))
        cursor = body["next_cursor"]
        if cursor is None:
            return got, sizes


def test_a_list_pages_by_cursor_filters_and_keeps_its_order(client, corrald):
    sbs = [client.create(labels={"conv": "pages"}, **SMALL) for _ in range(5)]
    try:
        got, sizes = pages(corrald, "/v1/sandboxes?label=conv=pages", "sandboxes", 2)
        assert sizes == [2, 2, 1]
        assert [s["id"] for s in got] == [s.id for s in sbs]  # oldest first, each once
        # a page goes on after its cursor's item even when that item is gone
        first = corrald.request("GET", "/v1/sandboxes?label=conv=pages&limit=2").json()
        sbs[1].destroy()
        rest = corrald.request(
            "GET", f"/v1/sandboxes?label=conv=pages&state=ready&cursor={first['next_cursor']}")
        assert [s["id"] for s in rest.json()["sandboxes"]] == [s.id for s in sbs[2:]]
        sbs[2].pause()
        paused = client.list(labels={"conv": "pages"}, state="paused")
        assert [s.id for s in paused] == [sbs[2].id]
    finally:
        for sb in sbs:
            sb.destroy()


def test_list_parameters_are_checked_by_one_rule(corrald):
    for target, msg in (
            ("/v1/sandboxes?limit=0", "limit must be a whole number from 1 to 10000"),
            ("/v1/sandboxes?limit=x", "limit must be"),
            ("/v1/sandboxes?state=sleeping", "state must be one of creating, ready, paused"),
            ("/v1/volumes?state=ready", "state: volumes have no state to filter by"),
            ("/v1/images?label=a=b", "label: images have no labels to filter by"),
            ("/v1/sandboxes?label=novalue", "must have the form key=value"),
    ):
        r = corrald.request("GET", target)
        assert r.status == 400 and msg in r.json()["error"]["message"], (target, r.json())
    for items in ("volumes", "images", "trajectories", "functions", "pools"):
        body = corrald.request("GET", f"/v1/{items}?limit=1").json()
        assert items in body and "next_cursor" in body and len(body[items]) <= 1, body


@need_debian
def test_a_sandboxs_own_lists_page_too(client, corrald):
    with client.create(image="debian", **SMALL) as sb:
        for _ in range(3):
            sb.process.start(["sleep", "60"])
        sb.process.start(["true"]).wait(timeout_s=10)
        base = f"/v1/sandboxes/{sb.id}"
        got, sizes = pages(corrald, f"{base}/processes?state=running", "processes", 2)
        assert sizes == [2, 1] and all(p["state"] == "running" for p in got)
        assert [p["pid"] for p in got] == sorted(p["pid"] for p in got)
        sb.create_code_context()
        ctxs = corrald.request("GET", f"{base}/code/contexts?limit=5").json()
        assert len(ctxs["contexts"]) == 1 and ctxs["next_cursor"] is None


def test_times_are_rfc3339_everywhere(client):
    t = f"conv-times-{os.getpid()}"
    with client.create(trajectory=t, **SMALL) as sb:
        sb.exec(["true"])
        info = sb.inspect()
        assert RFC3339.match(info["created_at"]) and RFC3339.match(info["ready_at"])
    with client.create(**SMALL) as sb:
        p = sb.process.start(["true"])
        p.wait(timeout_s=10)
        assert RFC3339.match(p.refresh()["started_at"]) and RFC3339.match(p.info["ended_at"])
    traj = client.trajectory(t)
    assert RFC3339.match(traj.info()["created_at"])
    step = traj.steps()[0]
    assert RFC3339.match(step["started_at"]) and RFC3339.match(step["recorded_at"])
    listed = {x["id"]: x for x in client.trajectories()}
    assert RFC3339.match(listed[t]["created_at"])
    removed = traj.remove()
    assert removed["id"] == t and RFC3339.match(removed["created_at"])


@need_debian
def test_every_delete_answers_what_it_removed(client, corrald):
    v = client.create_volume("conv-del", size_mb=16)
    assert client.remove_volume("conv-del")["created_at"] == v["created_at"]
    client.tag_image("busybox", "conv-del:1")  # the daemon's own store: tags can go
    r = corrald.request("DELETE", "/v1/images/conv-del:1")
    assert r.status == 200 and "conv-del:1" in r.json()["names"]
    client.set_pool("conv-del", 0, 1, memory_mb=64)
    assert corrald.request("DELETE", "/v1/pools/conv-del").json()["name"] == "conv-del"
    with client.create(image="debian", **SMALL) as sb:
        ctx = sb.create_code_context()
        r = corrald.request("DELETE", f"/v1/sandboxes/{sb.id}/code/contexts/{ctx['id']}")
        assert r.status == 200 and r.json()["id"] == ctx["id"] and r.json()["language"] == "python"
        p = sb.process.start(["sleep", "60"])
        assert p.forget()["pid"] == p.pid
    r = corrald.request("DELETE", f"/v1/sandboxes/{sb.id}")
    assert r.status == 200 and r.json()["id"] == sb.id


def test_the_sdk_names_a_time_limit_as_the_api_does(sandbox):
    assert sandbox.exec(["sleep", "5"], timeout_s=0.5).reason == "timeout"
    assert sandbox.exec(["sleep", "5"], timeout=0.5).reason == "timeout"  # the older name
    with pytest.raises(TypeError, match="not both"):
        sandbox.exec(["true"], timeout_s=1, timeout=2)
    with pytest.raises(corral.Timeout):
        sandbox.process.start(["sleep", "30"]).wait(timeout_s=1)
