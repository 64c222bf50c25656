#!/usr/bin/python3
"""Issue 12's network figures, in one run: sandboxes' create and destroy
with network none, allow and full; a policy change; TCP connection setup,
bulk download and DNS from inside an `allow` sandbox against the same
probe in an unfiltered network namespace (the lab's host, where corrald
runs); the port proxy's latency and rate against a direct connection;
requests from inside a sandbox to a mock service and, through corrald's
relay, to another sandbox's server, against the same server reached
directly.  Everything happens in the lab internet of tests/integration/
netlab.py: nothing leaves this machine.

    scripts/bench-network.py [--build build] [--iterations 40]

Needs root, a build, and the debian image (`make images`)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "integration"), str(ROOT / "sdk" / "python")]

# What runs in the sandbox and in the peer namespace alike: prints JSON.
PROBE = r"""
import json, socket, statistics, sys, time
web, n, size, gw = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def ms(t0): return (time.perf_counter() - t0) * 1e3
conn = []
for _ in range(n):
    t0 = time.perf_counter(); s = socket.create_connection((web, 80), 3); conn.append(ms(t0)); s.close()
s = socket.create_connection((web, 80), 5)
s.sendall(f"GET /bytes/{size} HTTP/1.0\r\n\r\n".encode())
t0 = time.perf_counter(); got = 0
while True:
    b = s.recv(1 << 16)
    if not b: break
    got += len(b)
bulk_s = (time.perf_counter() - t0)
def query(name, i):
    q = (i & 0xffff).to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00\x00\x01\x00\x01"
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
    t0 = time.perf_counter(); u.sendto(q, (gw, 53)); u.recv(4096); u.close()
    return ms(t0)
m = min(n, 80)  # 2m queries stay within a sandbox's burst (200), not rate-limited
dns_ok = [query("deb.example", i) for i in range(m)]
dns_no = [query("other.example", i) for i in range(m)]
print(json.dumps({"connect_ms": statistics.median(conn), "mb_per_s": got / bulk_s / 1e6,
                  "bytes": got, "dns_allowed_ms": statistics.median(dns_ok),
                  "dns_refused_ms": statistics.median(dns_no)}))
"""


def p50(xs):
    return statistics.median(xs) * 1e3


# GET `path` n times, a new connection each time: prints p50 ms and req/s.
HTTP_PROBE = r"""
import http.client, json, socket, statistics, sys, time
kind, where, path, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
class U(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(where)
lat = []
t_all = time.perf_counter()
for _ in range(n):
    t0 = time.perf_counter()
    c = U("x") if kind == "unix" else http.client.HTTPConnection(where, timeout=5)
    c.request("GET", path); r = c.getresponse(); body = r.read(); c.close()
    assert r.status == 200 and body == b"hello\n", (r.status, body)
    lat.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"p50_ms": statistics.median(lat), "per_s": n / (time.perf_counter() - t_all)}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--bulk-mb", type=int, default=64)
    a = ap.parse_args()
    os.environ["CORRAL_BUILD"] = str(ROOT / a.build)
    import conftest
    import netlab
    n = a.iterations
    with netlab.NetLab() as lab:
        base = Path(f"/tmp/bench-network-{os.getpid()}")
        d = conftest.start_corrald(base, ["--dns-upstream", netlab.RESOLVER,
                                          "--network-range", "10.213.0.0/22"],
                                   netns=lab.host_netns)
        try:
            allow = {"mode": "allow", "allow": [netlab.WEB[0]]}
            mock = {"name": "shop", "routes": [{"path": "/index.html", "body": "hello\n"}]}
            modes = {"none": {}, "allow": {"network": allow}, "full": {"network": {"mode": "full"}},
                     "none + a mock service": {"services": [mock]}}
            cycle = {m: [] for m in modes}
            with d.client() as c:
                for _ in range(n):  # interleaved: the machine's drift hits them all alike
                    for m, extra in modes.items():
                        spec = {"memory_mb": 64} | extra
                        t0 = time.perf_counter()
                        c.create(**spec).destroy()
                        cycle[m].append(time.perf_counter() - t0)
                patch = []
                with c.create(memory_mb=64, network=allow) as sb:
                    for i in range(n):
                        t0 = time.perf_counter()
                        sb.set_network("allow", allow=[netlab.WEB[i % 2]])
                        patch.append(time.perf_counter() - t0)
                gw = None
                with c.create(image="debian", memory_mb=256,
                              network={"mode": "allow", "allow": [netlab.WEB[0], "deb.example"]}) as sb:
                    gw = sb.inspect()["container"]["network"]["gateway"]
                    r = sb.exec(["python3", "-c", PROBE, netlab.WEB[0], str(min(n * 5, 200)),
                                 str(a.bulk_mb << 20), gw], timeout=300)
                    if r.exit_code != 0:
                        raise SystemExit(f"the probe failed in the sandbox: {r.stderr.decode()}")
                    inside = json.loads(r.stdout)
            with d.client() as c, c.create(memory_mb=64, network={"mode": "full"}) as sb:
                sb.exec("mkdir -p /www && echo hello > /www/index.html && httpd -p 8080 -h /www")
                addr = sb.inspect()["container"]["network"]["address"]
                m = str(max(n * 5, 100))
                time.sleep(0.2)
                direct = json.loads(lab.run_in_host(
                    ["python3", "-c", HTTP_PROBE, "tcp", f"{addr}:8080", "/index.html", m],
                    stdout=subprocess.PIPE).communicate(timeout=300)[0])
                proxied = json.loads(subprocess.run(
                    ["python3", "-c", HTTP_PROBE, "unix", str(d.socket_path),
                     f"/v1/sandboxes/{sb.id}/ports/8080/index.html", m],
                    stdout=subprocess.PIPE, check=True).stdout)
                svcs = [mock, {"name": "db", "sandbox": sb.id, "port": 8080}]
                with c.create(image="debian", memory_mb=256, services=svcs) as app:
                    def inside_get(where):
                        r = app.exec(["python3", "-c", HTTP_PROBE, "tcp", where, "/index.html", m],
                                     timeout=300)
                        if r.exit_code != 0:
                            raise SystemExit(f"the probe failed in the sandbox: {r.stderr.decode()}")
                        return json.loads(r.stdout)
                    to_mock, to_db = inside_get("shop:80"), inside_get("db:8080")
            peer = json.loads(lab.run_in_host(
                ["python3", "-c", PROBE, netlab.WEB[0], str(min(n * 5, 200)), str(a.bulk_mb << 20),
                 netlab.RESOLVER], stdout=subprocess.PIPE).communicate(timeout=300)[0])
        finally:
            d.stop()
    print(f"corral network bench  {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}  "
          f"load {os.getloadavg()[0]:.2f}  {n} iterations")
    print(f"\n  {'create+destroy p50 ms':44} {'ms':>8} {'vs none':>8}")
    for m in modes:
        print(f"  {'network ' + m:44} {p50(cycle[m]):8.2f} "
              f"{p50(cycle[m]) / p50(cycle['none']):7.2f}x")
    print(f"  {'PATCH .../network p50 ms':44} {p50(patch):8.2f}")
    print(f"\n  {'inside allow / unfiltered netns (peer)':44} {'sandbox':>8} {'peer':>8} {'ratio':>7}")
    for k, label in (("connect_ms", "TCP connect p50 ms"), ("mb_per_s", "bulk download MB/s"),
                     ("dns_allowed_ms", "DNS allowed name p50 ms (peer: upstream)"),
                     ("dns_refused_ms", "DNS refused name p50 ms")):
        print(f"  {label:44} {inside[k]:8.2f} {peer[k]:8.2f} {inside[k] / peer[k]:6.2f}x")
    print(f"\n  {'port proxy (busybox httpd, new connection each)':44} {'p50 ms':>8} {'req/s':>8}")
    print(f"  {'direct, lab host netns -> sandbox address':44} {direct['p50_ms']:8.2f} "
          f"{direct['per_s']:8.0f}")
    print(f"  {'through corrald /v1/sandboxes/ID/ports/8080':44} {proxied['p50_ms']:8.2f} "
          f"{proxied['per_s']:8.0f}   +{proxied['p50_ms'] - direct['p50_ms']:.2f} ms, "
          f"{proxied['per_s'] / direct['per_s']:.2f}x the rate")
    print(f"\n  {'services, from inside a sandbox (new conn. each)':44} {'p50 ms':>8} {'req/s':>8}")
    print(f"  {'a mock, answered by corrald':44} {to_mock['p50_ms']:8.2f} {to_mock['per_s']:8.0f}"
          f"   {to_mock['per_s'] / direct['per_s']:.2f}x the direct rate")
    print(f"  {'a sandbox service: httpd, relayed by corrald':44} {to_db['p50_ms']:8.2f} "
          f"{to_db['per_s']:8.0f}   +{to_db['p50_ms'] - direct['p50_ms']:.2f} ms, "
          f"{to_db['per_s'] / direct['per_s']:.2f}x the direct rate")
    print(json.dumps({"cycle_p50_ms": {m: p50(v) for m, v in cycle.items()},
                      "patch_p50_ms": p50(patch), "inside": inside, "peer": peer,
                      "proxy_direct": direct, "proxy": proxied, "mock": to_mock,
                      "relay": to_db}))


if __name__ == "__main__":
    main()
