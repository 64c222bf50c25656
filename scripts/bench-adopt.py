#!/usr/bin/python3
"""What a corrald restart costs when it adopts its sandboxes, in one run:

  empty     a corrald killed with -9 and started again with nothing to adopt
            (the peer: what any start costs on this machine)
  adopt     the same with N container sandboxes left running: the start
            checks each record, spares its cgroup, rebuilds the sandbox and
            has a spawner take its PID 1 over
  create    making the same N sandboxes anew (what losing them would cost
            the user, besides their state)
  sessions  the same N again, each with a session open (cd'ed somewhere):
            the start takes each shell's pipes back from its PID 1 and
            brings the session to a command's boundary

Then every sandbox is checked: the same id, ready, and an exec answers;
and every session: the same shell, in the directory it was.

    scripts/bench-adopt.py [--build build] [--sandboxes 200] [--clients 4]

Needs root and a build."""
import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "integration"), str(ROOT / "sdk" / "python")]


def restart_s(d):
    d.kill()
    t0 = time.perf_counter()
    d.start(timeout=120)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--sandboxes", type=int, default=200)
    ap.add_argument("--clients", type=int, default=4)
    a = ap.parse_args()
    os.environ["CORRAL_BUILD"] = str(Path(a.build).resolve())
    import conftest

    base = Path(tempfile.mkdtemp(prefix="bench-adopt-"))
    d = conftest.start_corrald(base, ["--host-id", "adopt"])
    try:
        empty = min(restart_s(d) for _ in range(3))

        def one(_):
            r = d.request("POST", "/v1/sandboxes", {"image": "busybox",
                                                      "resources": {"memory_mb": 64,
                                                                    "cpus": 0.1}})
            assert r.status == 201, r.body
            return json.loads(r.body)["id"]

        t0 = time.perf_counter()
        with ThreadPoolExecutor(a.clients) as pool:
            ids = list(pool.map(one, range(a.sandboxes)))
        create = time.perf_counter() - t0
        adopt = restart_s(d)
        log = d.log(this_run=True)
        assert f"{a.sandboxes} adopted, 0 lost" in log, log[-2000:]
        live = {s["id"]: s["state"] for s in d.live_sandboxes()}
        assert live == {i: "ready" for i in ids}, live
        with ThreadPoolExecutor(a.clients) as pool:
            codes = set(pool.map(lambda i: d.request("POST", f"/v1/sandboxes/{i}/exec",
                                                     {"cmd": ["true"]}).status, ids))
        assert codes == {200}, codes

        def open_session(i):
            r = d.request("POST", f"/v1/sandboxes/{i}/sessions", {})
            assert r.status == 201, r.body
            sid = json.loads(r.body)["session_id"]
            r = d.request("POST", f"/v1/sandboxes/{i}/sessions/{sid}/run",
                          {"cmd": "mkdir -p /srv/here && cd /srv/here"})
            assert r.status == 200, r.body
            return i, sid

        with ThreadPoolExecutor(a.clients) as pool:
            sessions = list(pool.map(open_session, ids))
        with_sessions = restart_s(d)
        with ThreadPoolExecutor(a.clients) as pool:
            outs = set(pool.map(lambda s: json.loads(d.request(
                "POST", f"/v1/sandboxes/{s[0]}/sessions/{s[1]}/run", {"cmd": "pwd"}).body
                ).get("stdout"), sessions))
        assert outs == {"/srv/here\n"}, outs
        n = a.sandboxes
        print(f"corrald restart (kill -9, then start until it serves), {n} sandboxes:")
        print(f"  nothing to adopt (the peer)     {empty * 1e3:8.0f} ms")
        print(f"  adopting {n:4d} sandboxes        {adopt * 1e3:8.0f} ms  "
              f"(+{(adopt - empty) * 1e3 / n:.2f} ms each; all {n} ready, same ids, exec ok)")
        print(f"  creating {n:4d} anew ({a.clients} clients) {create * 1e3:8.0f} ms  "
              f"({create / max(adopt - empty, 1e-3):.1f}x the adoption's own cost)")
        print(f"  adopting them, a session each  {with_sessions * 1e3:8.0f} ms  "
              f"(+{(with_sessions - adopt) * 1e3 / n:.2f} ms a session; each in the "
              f"same shell and directory)")
    finally:
        d.teardown()


if __name__ == "__main__":
    main()
