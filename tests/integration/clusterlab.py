"""A cluster for the tests and the benchmark: a real 3-member etcd and corrald
hosts, each host in a network namespace of its own on one bridge
(netlab.ClusterNet), joined with --cluster and --advertise.

  Etcd(net, dir)              three members on the bridge's address (and on
                              loopback in its netns, for the test), by PID:
                              stop(i), start(i), put(), delete(), healthy()
  Cluster(net, etcd, dir)     one corrald per host netns; hosts_of(d), ready(d),
                              close() (each host shut down and checked)
"""

import base64
import itertools
import json
import shutil
import signal
import subprocess

from conftest import _NetnsConnection, start_corrald, wait_for
from netlab import netns_preexec

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
LEASE_S = 3
API_PORT = 8080
_ids = itertools.count()


class Etcd:
    """Three etcd members in the cluster's network (each on its own ports of
    its address, and on loopback there for the test), started and stopped
    by PID."""

    def __init__(self, net, base):
        self.net, self.base = net, base
        self.procs = [None] * 3
        self.urls = ",".join(f"http://{net.NET_ADDR}:{2379 + 2 * i}" for i in range(3))
        for i in range(3):
            self.start(i)
        wait_for(self.healthy, timeout=30, what="etcd's members to agree")

    def start(self, i):
        a = self.net.NET_ADDR
        cluster = ",".join(f"e{j}=http://{a}:{2380 + 2 * j}" for j in range(3))
        cp, pp = 2379 + 2 * i, 2380 + 2 * i
        with open(self.base / f"etcd{i}.log", "ab") as log:
            self.procs[i] = subprocess.Popen(
                [ETCD, "--name", f"e{i}", "--data-dir", str(self.base / f"etcd{i}"),
                 "--listen-client-urls", f"http://{a}:{cp},http://127.0.0.1:{cp}",
                 "--advertise-client-urls", f"http://{a}:{cp}",
                 "--listen-peer-urls", f"http://{a}:{pp}",
                 "--initial-advertise-peer-urls", f"http://{a}:{pp}",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new"],
                stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=netns_preexec(self.net.net_netns))

    def stop(self, i):
        p = self.procs[i]
        if p and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    def healthy(self):
        try:
            return json.loads(self.call("/health", None, "GET")).get("health") == "true"
        except (OSError, ValueError):
            return False

    def call(self, path, body, method="POST"):
        conn = _NetnsConnection(self.net.net_netns, 2379, 5)
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None)
            return conn.getresponse().read()
        finally:
            conn.close()

    def put(self, key, value):
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)})

    def delete(self, key):
        self.call("/v3/kv/deleterange", {"key": base64.b64encode(key.encode()).decode()})

    def close(self):
        for i in range(3):
            self.stop(i)


class Cluster:
    """Three corrald hosts, host i in net.hosts[i] at net.addrs[i]."""

    def __init__(self, net, etcd, base, extra_args=()):
        self.net, self.etcd, self.hosts = net, etcd, []
        n = next(_ids)
        try:
            for i, (ns, addr) in enumerate(zip(net.hosts, net.addrs)):
                hid = f"t{n}{'abc'[i]}"
                d = start_corrald(base / hid, [
                    "--host-id", hid, "--listen", f"{addr}:{API_PORT}", "--allow-remote",
                    "--cluster", etcd.urls, "--advertise", f"http://{addr}:{API_PORT}",
                    "--cluster-lease-s", str(LEASE_S), *extra_args], netns=ns)
                d.host_id, d.addr = hid, addr
                self.hosts.append(d)
            wait_for(lambda: all(len(self.ready(h)) == len(self.hosts) for h in self.hosts),
                     timeout=20, what="every host to see every other")
        except BaseException:
            self.close()
            raise

    def hosts_of(self, d):
        r = d.request("GET", "/v1/hosts")
        assert r.status == 200, r.body
        return {h["id"]: h for h in json.loads(r.body)["hosts"]}

    def ready(self, d):
        return [h for h in self.hosts_of(d).values() if h["state"] == "ready"]

    def close(self):
        """Each host shut down and checked for leftovers (conftest's
        teardown: one a test killed must have been started again)."""
        errors = []
        for d in self.hosts:
            try:
                d.teardown()
            except AssertionError as e:
                errors.append(e)
        if errors:
            raise errors[0]
