#!/usr/bin/python3
"""Issue 17's cluster figures, in one run on this machine:

  placement   decisions per second on one core over a simulated view of
              1,000 hosts (the unit test's figure, tests/unit/test_place.c)
  creates     sandboxes made per second by N clients through the cluster
              (three hosts, every create placed by the host it reached),
              against one host alone on the same machine: what placement and
              forwarding cost, since the three hosts share its CPUs here
  exec        the round trip of `exec true` through a host that does not own
              the sandbox (forwarded) against the owner itself

Three corrald hosts and a 3-member etcd, each host in a network namespace of
its own on one bridge (tests/integration/clusterlab.py): nothing leaves this
machine.

    scripts/bench-cluster.py [--build build] [--creates 120] [--clients 6]
                             [--execs 200]

Needs root and a build."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "integration"), str(ROOT / "sdk" / "python")]


def ms(xs, q=0.5):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e3


def creates_per_s(hosts, n, clients):
    """n creates, `clients` at a time, each sent to hosts[i % len] in turn;
    then every sandbox is destroyed (not timed)."""
    def one(i):
        d = hosts[i % len(hosts)]
        r = d.request("POST", "/v1/sandboxes", {"image": "busybox",
                                                  "resources": {"memory_mb": 64, "cpus": 0.1}})
        assert r.status == 201, r.body
        return json.loads(r.body)["id"]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        ids = list(pool.map(one, range(n)))
    rate = n / (time.perf_counter() - t0)
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda s: hosts[0].request("DELETE", f"/v1/sandboxes/{s}"), ids))
    return rate, ids


def exec_rtts(via, sid, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = via.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
        out.append(time.perf_counter() - t0)
        assert r.status == 200, r.body
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--creates", type=int, default=120)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--execs", type=int, default=200)
    a = ap.parse_args()
    os.environ["CORRAL_BUILD"] = str(Path(a.build).resolve())
    import conftest  # noqa: F401 (reads CORRAL_BUILD)
    from clusterlab import Cluster, Etcd
    from netlab import ClusterNet, sweep_stale

    place = subprocess.run([str(Path(a.build) / "tests" / "test_place")], capture_output=True,
                           text=True)
    placement = [line for line in place.stdout.splitlines() if "decisions/s" in line]
    print(placement[0].lstrip("# ") if placement else f"placement: {place.stdout[-300:]}")

    sweep_stale()
    base = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    net = ClusterNet(3)
    etcd = cluster = None
    try:
        etcd = Etcd(net, base)
        # One host alone first (the same daemon, without the cluster): the peer.
        alone = conftest.start_corrald(base / "alone", ["--host-id", "alone"], netns=net.hosts[0])
        rate1, _ = creates_per_s([alone], a.creates, a.clients)
        alone.teardown()
        cluster = Cluster(net, etcd, base)
        h = cluster.hosts
        rate3_one, _ = creates_per_s(h[:1], a.creates, a.clients)
        rate3_all, ids = creates_per_s(h, a.creates, a.clients)
        spread = {i.split("-")[1]: 0 for i in ids}
        for i in ids:
            spread[i.split("-")[1]] += 1
        r = h[1].request("POST", "/v1/sandboxes", {"image": "busybox"},
                         headers={"X-Corral-Placed": "1"})  # made where it is asked
        sid = json.loads(r.body)["id"]
        exec_rtts(h[1], sid, 20)  # warm both paths
        exec_rtts(h[0], sid, 20)
        direct = exec_rtts(h[1], sid, a.execs)
        routed = exec_rtts(h[0], sid, a.execs)
        h[1].request("DELETE", f"/v1/sandboxes/{sid}")
        print(f"creates, {a.clients} clients, {a.creates} each run (busybox container):")
        print(f"  one host alone                      {rate1:8.1f} /s")
        print(f"  cluster of 3, all sent to one host  {rate3_one:8.1f} /s  "
              f"({rate3_one / rate1:.2f}x of one host)")
        print(f"  cluster of 3, sent to all three     {rate3_all:8.1f} /s  "
              f"({rate3_all / rate1:.2f}x of one host); placed {dict(sorted(spread.items()))}")
        print(f"exec true round trip, {a.execs} each:")
        print(f"  at the owner        p50 {ms(direct):6.2f} ms  p90 {ms(direct, .9):6.2f} ms")
        print(f"  through another     p50 {ms(routed):6.2f} ms  p90 {ms(routed, .9):6.2f} ms  "
              f"(+{ms(routed) - ms(direct):.2f} ms, {statistics.median(routed) / statistics.median(direct):.2f}x)")
    finally:
        if cluster:
            cluster.close()
        if etcd:
            etcd.close()
        net.close()


if __name__ == "__main__":
    main()
