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
  pull        a create on a host that lacks its image (pulled from another
              host, checked by digest) against the next one there, and the
              pull's rate against an import of the same archive

Three corrald hosts and a 3-member etcd, each host in a network namespace of
its own on one bridge (tests/integration/clusterlab.py): nothing leaves this
machine.

    scripts/bench-cluster.py [--build build] [--creates 120] [--clients 6]
                             [--execs 200] [--pull-mb 64]

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


def pull_figures(h, mb):
    """Import a busybox image with `mb` MiB of random data on h[0] (timed:
    the peer), then create it on h[1], which pulls it, and again there."""
    from conftest import docker_archive
    archive = docker_archive({"bin/busybox": Path("/bin/busybox").read_bytes(),
                              "data": os.urandom(mb << 20)})
    t0 = time.perf_counter()
    r = h[0].request("POST", "/v1/images?name=bench/pulled:1", archive,
                     headers={"Content-Type": "application/x-tar"}, timeout=300)
    imported = time.perf_counter() - t0
    assert r.status == 201, r.body
    size = json.loads(r.body)["size"]
    times, ids = [], []
    for _ in range(2):
        t0 = time.perf_counter()
        r = h[1].request("POST", "/v1/sandboxes", {"image": "bench/pulled:1"},
                         headers={"X-Corral-Placed": "1"}, timeout=300)
        times.append(time.perf_counter() - t0)
        assert r.status == 201, r.body
        ids.append(json.loads(r.body)["id"])
    for sid in ids:
        h[1].request("DELETE", f"/v1/sandboxes/{sid}")
    for d in h[:2]:
        d.request("DELETE", "/v1/images/bench/pulled:1")
    return len(archive), size, imported, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--creates", type=int, default=120)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--execs", type=int, default=200)
    ap.add_argument("--pull-mb", type=int, default=64)
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
        tar, erofs, imported, (first, again) = pull_figures(h, a.pull_mb)
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
        pull = first - again
        print(f"image pulled between hosts ({tar / 2**20:.0f} MiB archive, "
              f"{erofs / 2**20:.0f} MiB of layers):")
        print(f"  import on host 1 (the peer)         {imported * 1e3:8.0f} ms  "
              f"({tar / 2**20 / imported:.0f} MiB/s)")
        print(f"  create on host 2, pulling it        {first * 1e3:8.0f} ms")
        print(f"  create on host 2 again              {again * 1e3:8.0f} ms")
        print(f"  the pull                            {pull * 1e3:8.0f} ms  "
              f"({erofs / 2**20 / pull:.0f} MiB/s, {imported / pull:.1f}x faster than importing)")
    finally:
        if cluster:
            cluster.close()
        if etcd:
            etcd.close()
        net.close()


if __name__ == "__main__":
    main()
