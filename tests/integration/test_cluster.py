"""Cluster mode: a real 3-member etcd and three corrald hosts, each in a
network namespace of its own on one bridge (netlab.ClusterNet), joined with
--cluster and --advertise and used as one: any host places a create, reaches
every sandbox (inspect, exec, streamed exec, files, destroy) and lists them
all; a host killed with -9 is lost within its lease and its sandboxes say so
(and are back once it restarts and adopts them);
a host that cannot be reached or answers garbage is passed over; drain; etcd
down and back; no sandbox reaches another host's API."""

import http.client
import http.server
import json
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from clusterlab import API_PORT, ETCD, LEASE_S, Cluster, Etcd
from conftest import docker_archive, start_corrald, wait_for
from netlab import ClusterNet, socket_in, sweep_stale

pytestmark = pytest.mark.skipif(not os.path.exists(ETCD),
                                reason="etcd is not installed (make deps installs etcd-server)")


@pytest.fixture(scope="module")
def net():
    sweep_stale()
    n = ClusterNet(3)
    yield n
    n.close()


@pytest.fixture(scope="module")
def etcd(net, tmp_path_factory):
    e = Etcd(net, tmp_path_factory.mktemp("etcd"))
    yield e
    e.close()


@pytest.fixture
def cluster(net, etcd, tmp_path):
    shared = tmp_path / "shared"  # what NFS or CephFS is to a real cluster
    shared.mkdir()
    c = Cluster(net, etcd, tmp_path, ["--shared-dir", str(shared)])
    yield c
    c.close()


def create(d, **spec):
    spec.setdefault("image", "busybox")
    r = d.request("POST", "/v1/sandboxes", spec)
    assert r.status == 201, r.body
    return json.loads(r.body)["id"], r.headers


def test_every_host_lists_every_member(cluster):
    hosts_addr = {d.host_id: d.addr for d in cluster.hosts}
    for d in cluster.hosts:
        hosts = cluster.hosts_of(d)
        assert set(hosts) == {h.host_id for h in cluster.hosts}
        assert [h for h in hosts.values() if h["self"]][0]["id"] == d.host_id
        for h in hosts.values():
            assert h["state"] == "ready" and h["heartbeat_age_s"] < LEASE_S
            assert h["free"]["sandboxes"] > 0 and h["addr"] == f"http://{hosts_addr[h['id']]}:8080"
    out = subprocess.run([str(cluster.hosts[0].build / "corral"), "hosts"], capture_output=True,
                         text=True, env={**os.environ, "CORRAL_URL": cluster.hosts[0].url})
    assert out.returncode == 0, out.stderr
    assert all(h.host_id in out.stdout for h in cluster.hosts) and "(this host)" in out.stdout


def test_any_host_reaches_every_sandbox(cluster):
    a, b, c = cluster.hosts
    ids = [create(a, labels={"run": "x", "n": str(i % 2)})[0] for i in range(6)]
    owners = {i.split("-")[1] for i in ids}
    assert len(owners) >= 2, f"six creates all went to {owners}: placement does not spread"
    for sid in ids:
        for d in (a, b, c):
            r = d.request("GET", f"/v1/sandboxes/{sid}")
            assert r.status == 200 and json.loads(r.body)["state"] == "ready", r.body
        via = c if not sid.startswith(f"sb-{c.host_id}-") else a
        r = via.request("POST", f"/v1/sandboxes/{sid}/exec",
                        {"cmd": ["sh", "-c", "echo out; echo err >&2; hostname; exit 7"]})
        out = json.loads(r.body)
        assert r.status == 200 and out["exit_code"] == 7, r.body
        assert out["stdout"] == f"out\n{sid}\n" and out["stderr"] == "err\n"
        data = os.urandom(200000)
        r = via.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/blob", data,
                        headers={"Content-Type": "application/octet-stream"})
        assert r.status in (200, 201, 204), r.body
        r = via.request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/blob")
        assert r.status == 200 and r.body == data
    # lists and selectors span the cluster, from any host
    for d in (a, b, c):
        r = d.request("GET", "/v1/sandboxes?label=run=x&label=n=1")
        got = {s["id"] for s in json.loads(r.body)["sandboxes"]}
        assert got == {sid for k, sid in enumerate(ids) if k % 2 == 1}
    # destroyed through a host that does not own it
    for sid in ids:
        via = a if not sid.startswith(f"sb-{a.host_id}-") else b
        assert via.request("DELETE", f"/v1/sandboxes/{sid}").status == 200
    assert all(d.live_sandboxes() == [] for d in (a, b, c))


def test_streamed_exec_crosses_hosts(cluster):
    a, b, _ = cluster.hosts
    sid, _ = create(b)
    while sid.startswith(f"sb-{a.host_id}-"):
        sid, _ = create(b)
    r = a.request("POST", f"/v1/sandboxes/{sid}/exec",
                  {"cmd": ["sh", "-c", "for i in 1 2 3; do echo line$i; sleep 0.2; done"],
                   "stream": True})
    assert r.status == 200 and r.headers["content-type"] == "application/x-ndjson", r.body
    lines = [json.loads(x) for x in r.body.decode().splitlines() if x]
    assert [x["stdout"] for x in lines if "stdout" in x] == ["line1\n", "line2\n", "line3\n"]
    assert lines[-1]["result"]["exit_code"] == 0, lines[-1]


def test_a_killed_host_is_lost_and_passed_over(cluster):
    a, b, c = cluster.hosts
    sid = None
    while not sid:
        s, _ = create(a, labels={"job": "k"})
        sid = s if s.startswith(f"sb-{c.host_id}-") else None
    c.kill()
    # Before its lease ends the others still think it ready: a create it
    # is offered fails there and moves on, within the same request.
    moved = []
    for _ in range(6):
        new, headers = create(a)
        assert not new.startswith(f"sb-{c.host_id}-")
        if f"{c.host_id}=502" in headers.get("x-corral-placement", ""):
            moved.append(new)
    wait_for(lambda: cluster.hosts_of(a)[c.host_id]["state"] == "lost", timeout=LEASE_S + 5,
             what="the killed host to be lost")
    assert cluster.hosts_of(b)[c.host_id]["state"] == "lost"
    for d in (a, b):
        r = d.request("GET", f"/v1/sandboxes/{sid}")
        body = json.loads(r.body)
        assert r.status == 200 and body["state"] == "lost" and c.host_id in body["reason"]
        r = d.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
        assert r.status == 409 and "lost" in json.loads(r.body)["error"]["message"]
        # listed too, from the records it kept in the shared dir
        r = d.request("GET", "/v1/sandboxes?label=job=k")
        listed = {s["id"]: s for s in json.loads(r.body)["sandboxes"]}
        assert listed[sid]["state"] == "lost" and listed[sid]["host"] == c.host_id, listed
        assert c.host_id in listed[sid]["reason"] and listed[sid]["labels"] == {"job": "k"}
        r = d.request("GET", "/v1/sandboxes?state=lost")
        assert sid in {s["id"] for s in json.loads(r.body)["sandboxes"]}
    # Every create now goes to the two left.
    for _ in range(4):
        new, headers = create(b)
        assert not new.startswith(f"sb-{c.host_id}-")
        assert c.host_id not in headers.get("x-corral-placement", "")
    # Started again, the host joins again, and adopts what still ran there:
    # the lost sandbox is back, through every host.
    c.start()
    wait_for(lambda: all(cluster.hosts_of(d)[c.host_id]["state"] == "ready" for d in (a, b)),
             timeout=LEASE_S + 5, what="the restarted host to rejoin")
    for d in (a, b):
        r = d.request("GET", f"/v1/sandboxes/{sid}")
        assert r.status == 200 and json.loads(r.body)["state"] == "ready", r.body
        r = d.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
        assert r.status == 200 and json.loads(r.body)["exit_code"] == 0, r.body
        r = d.request("GET", "/v1/sandboxes?label=job=k")
        assert {s["id"]: s["state"] for s in json.loads(r.body)["sandboxes"]}[sid] == "ready"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}").status == 200


def test_drain(cluster):
    a, b, c = cluster.hosts
    r = a.request("POST", f"/v1/hosts/{b.host_id}/drain")
    assert r.status == 200 and json.loads(r.body)["state"] == "draining", r.body
    wait_for(lambda: all(cluster.hosts_of(d)[b.host_id]["state"] == "draining" for d in (a, b, c)),
             what="every host to see the drain")
    for _ in range(8):
        sid, _ = create(c)
        assert not sid.startswith(f"sb-{b.host_id}-")
    assert a.request("DELETE", f"/v1/hosts/{b.host_id}/drain").status == 200
    wait_for(lambda: cluster.hosts_of(c)[b.host_id]["state"] == "ready", what="the undrain")
    assert a.request("POST", "/v1/hosts/nosuchhost/drain").status == 404


def test_a_host_that_answers_garbage_is_survived(cluster, etcd):
    a, b, _ = cluster.hosts

    class Garbage(http.server.BaseHTTPRequestHandler):
        # by the sandbox id's last digit: what the garbage is
        ANSWERS = {"0": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Bad\x01: \x02\r\n\r\nhello",
                   "1": b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nhi",
                   "2": b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 5000,
                   "3": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
                   "4": b"HTTP/1.1 99999 What\r\n\r\n",
                   "5": b"not http at all\r\n\r\n",
                   "6": b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"y" * 200000 + b"\r\n\r\n",
                   "7": b""}

        def do_GET(self):
            if self.path == "/v1/sandboxes":  # a list with what is not a sandbox in it
                body = json.dumps({"sandboxes": [1, "x", None, {"no": "id"}, {
                    "id": "sb-garbage-aaaaaaaaaaaa", "state": "ready"}]}).encode()
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
                                 + body)
                return
            self.wfile.write(self.ANSWERS.get(self.path.split("/")[3][-1:], self.ANSWERS["0"]))

        def do_POST(self):
            self.wfile.write(self.ANSWERS["0"])

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Garbage, bind_and_activate=False)
    srv.socket.close()
    srv.socket = socket_in(cluster.net.net_netns)  # where the hosts reach it
    srv.socket.bind((cluster.net.NET_ADDR, 9999))
    srv.socket.listen(16)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    record = {"addr": f"http://{cluster.net.NET_ADDR}:9999", "heartbeat": time.time(),
              "free": {"memory_mb": 10 ** 7, "cpus": 1000, "sandboxes": 10 ** 6}}
    try:
        etcd.put("/corral/hosts/garbage", json.dumps(record))
        wait_for(lambda: "garbage" in cluster.hosts_of(a), what="the garbage host in the view")
        for k in "0124567":  # a head or a body that is wrong: a 503 that names the host
            r = a.request("GET", f"/v1/sandboxes/sb-garbage-01234567890{k}")
            assert r.status == 503 and "garbage" in json.loads(r.body)["error"]["message"], (k, r)
        # a stream cut short: the client's is cut short too, never ended well
        with pytest.raises(http.client.IncompleteRead) as e:
            a.request("GET", "/v1/sandboxes/sb-garbage-012345678903/files?path=/x")
        assert e.value.partial == b"hello"
        # It has the most room, so placement offers it creates: each moves on.
        for _ in range(4):
            sid, _ = create(a)
            assert not sid.startswith("sb-garbage-")
        assert a.request("GET", "/healthz").status == 200
        r = b.request("GET", "/v1/sandboxes")
        listed = json.loads(r.body)["sandboxes"]
        assert r.status == 200 and all(isinstance(x, dict) and "id" in x for x in listed), listed
        assert "sb-garbage-aaaaaaaaaaaa" in [x["id"] for x in listed]
    finally:
        etcd.delete("/corral/hosts/garbage")
        srv.shutdown()


def test_etcd_down_and_back(cluster, etcd):
    a, b, _ = cluster.hosts
    sid, _ = create(a)
    owner = a if sid.startswith(f"sb-{a.host_id}-") else b if sid.startswith(
        f"sb-{b.host_id}-") else cluster.hosts[2]
    for i in range(3):
        etcd.stop(i)
    try:
        # Until the lease's time has passed the host still places creates,
        # from a view etcd no longer refreshes: its own placements fill it
        # (503 capacity_exceeded) before it says it is no member.
        made = []  # placed before the refusals: room taken, given back below

        def refused():
            r = a.request("POST", "/v1/sandboxes", {"image": "busybox"})
            if r.status == 201:
                made.append(json.loads(r.body)["id"])
            return r.status == 503 and "etcd" in r.body.decode()
        wait_for(refused, timeout=LEASE_S * 3 + 5, what="creates to be refused without etcd")
        t0 = time.monotonic()
        r = a.request("POST", "/v1/sandboxes", {"image": "busybox"})
        assert r.status == 503 and "etcd" in json.loads(r.body)["error"]["message"], r.body
        assert time.monotonic() - t0 < 1.0, "a create without etcd must fail fast"
        # the sandboxes that exist go on working on their own host
        r = owner.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["echo", "still"]})
        assert r.status == 200 and json.loads(r.body)["stdout"] == "still\n"
    finally:
        for i in range(3):
            etcd.start(i)
    wait_for(etcd.healthy, timeout=30, what="etcd back")
    def member(d):
        return json.loads(d.request("GET", "/v1/hosts").body)["cluster"]["member"]
    wait_for(lambda: all(member(d) and len(cluster.ready(d)) == 3 for d in cluster.hosts),
             timeout=20, what="the hosts to rejoin")
    for gone in made:  # dozens, at a create's speed: they would fill the hosts
        assert a.request("DELETE", f"/v1/sandboxes/{gone}").status == 200
    # What the hosts placed in the outage counts against their room until
    # each publishes anew, which the watch reads again once it is back.
    last = []

    def placed():
        last[:] = [a.request("POST", "/v1/sandboxes", {"image": "busybox"})]
        return last[0].status == 201
    try:
        wait_for(placed, timeout=10, what="a create to be placed again")
    except AssertionError as e:
        raise AssertionError(f"{e}; the last answer: {last[0].status} {last[0].body!r}") from None


def test_an_image_is_pulled_between_hosts(cluster):
    """A create placed on a host that lacks its image pulls it from a host
    that has it, checked by digest: a host that serves a tampered layer is
    refused and nothing of it is kept; creates that wait at once share one
    pull; the image is then the same one on both hosts."""
    a, b, c = cluster.hosts
    secret = os.urandom(8).hex().encode()
    archive = docker_archive({"bin/busybox": Path("/bin/busybox").read_bytes(), "hello": secret})
    r = a.request("POST", "/v1/images?name=pulled:1", archive,
                  headers={"Content-Type": "application/x-tar"})
    assert r.status == 201, r.body
    img = json.loads(r.body)
    assert [x["file_digest"][:7] for x in img["layers"]] == ["sha256:"], img
    assert b.request("GET", "/v1/images/pulled:1").status == 404
    for d in (a, c):  # b alone takes creates; a and c are asked for the image
        assert b.request("POST", f"/v1/hosts/{d.host_id}/drain").status == 200
    wait_for(lambda: [h["id"] for h in cluster.ready(b)] == [b.host_id], what="the drains")
    hexid = img["layers"][0]["digest"][7:]
    layer = Path(img["store"]) / "layers" / f"{hexid}.erofs"
    good = layer.read_bytes()
    try:
        layer.write_bytes(good[:4096] + bytes([good[4096] ^ 1]) + good[4097:])
        r = b.request("POST", "/v1/sandboxes", {"image": "pulled:1"})
        assert r.status == 503 and "digest mismatch" in json.loads(r.body)["error"]["message"], \
            r.body
        assert c.host_id in json.loads(r.body)["error"]["message"]  # asked, had none
        assert b.request("GET", "/v1/images/pulled:1").status == 404
        assert not list(b.state_dir.glob(f"images/layers/{hexid}*"))
        assert not list(b.state_dir.glob("images/tmp/*"))
    finally:
        layer.write_bytes(good)
    pulls = b.log(this_run=True).count("pulling it from another host")
    body = {"image": "pulled:1"}
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: b.request("POST", "/v1/sandboxes", body), range(3)))
    assert [x.status for x in answers] == [201] * 3, [x.body for x in answers]
    assert b.log(this_run=True).count("pulling it from another host") == pulls + 1
    for x in answers:
        sid = json.loads(x.body)["id"]
        assert sid.startswith(f"sb-{b.host_id}-")
        r = b.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["/bin/busybox", "cat", "/hello"]})
        assert r.status == 200 and json.loads(r.body)["stdout"] == secret.decode(), r.body
        assert b.request("DELETE", f"/v1/sandboxes/{sid}").status == 200
    mine = json.loads(b.request("GET", "/v1/images/pulled:1").body)
    assert mine["id"] == img["id"] and mine["layers"] == img["layers"]
    for d in (a, c):
        assert b.request("DELETE", f"/v1/hosts/{d.host_id}/drain").status == 200
    for d in (a, b):
        assert d.request("DELETE", "/v1/images/pulled:1").status == 200


def test_bad_cluster_flags(tmp_path):
    for args, says in [(["--cluster", "http://127.0.0.1:1"], "--advertise"),
                       (["--advertise", "http://127.0.0.1:1"], "--cluster"),
                       (["--cluster", "ftp://x", "--advertise", "http://127.0.0.1:9",
                         "--listen", "127.0.0.1:0"], "http://")]:
        with pytest.raises(RuntimeError) as e:
            start_corrald(tmp_path / str(len(args)), args)
        assert says in str(e.value)


def test_no_sandbox_reaches_another_host(cluster, etcd):
    a, b, c = cluster.hosts
    sid, _ = create(a, network={"mode": "full"})
    while not sid.startswith(f"sb-{a.host_id}-"):
        sid, _ = create(a, network={"mode": "full"})

    def fetch(addr, port, path):
        # nc, not busybox's wget: the static busybox's wget resolves even
        # an address, through glibc's NSS, which a static binary cannot load
        sh = f"printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {addr} {port}"
        r = a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", sh],
                                                              "timeout_s": 10})
        assert r.status == 200, r.body
        return json.loads(r.body)
    # The cluster's network is reached (etcd's address, on the same bridge) ...
    ok = fetch(cluster.net.NET_ADDR, 2379, "/health")
    assert ok["exit_code"] == 0 and '"health":"true"' in ok["stdout"], ok
    # ... but no other host's API, whatever the sandbox's policy.
    for other in (b, c):
        out = fetch(other.addr, API_PORT, "/healthz")
        assert "HTTP/1.1" not in out["stdout"], out


def test_a_keyed_create_is_made_once_whichever_host_is_asked(cluster):
    a, b, c = cluster.hosts
    for n in range(4):
        key = f"run-{n}-{os.getpid()}"
        answers = []
        for d in (a, b, c, b):
            r = d.request("POST", "/v1/sandboxes", {"image": "busybox", "labels": {"k": key}},
                          headers={"Idempotency-Key": key})
            assert r.status in (200, 201), r.body
            answers.append((r.status, json.loads(r.body)["id"]))
        assert [s for s, _ in answers] == [201, 200, 200, 200], answers
        assert len({i for _, i in answers}) == 1, answers
        r = a.request("GET", f"/v1/sandboxes?label=k={key}")
        assert [s["id"] for s in json.loads(r.body)["sandboxes"]] == [answers[0][1]]


def test_the_sdk_sees_the_cluster(cluster):
    import corral
    a, b, _ = cluster.hosts
    with corral.Client(a.url) as cl:
        hosts = cl.hosts()
        assert {h["id"] for h in hosts} == {d.host_id for d in cluster.hosts}
        assert [h["id"] for h in cl.hosts(state="lost")] == []
        assert cl.drain_host(b.host_id)["state"] == "draining"
        wait_for(lambda: [h["id"] for h in cl.hosts(state="draining")] == [b.host_id],
                 what="the drain in the SDK's list")
        assert cl.drain_host(b.host_id, drain=False)["state"] == "ready"
        made = [cl.create(image="busybox") for _ in range(4)]
        elsewhere = [sb for sb in made if not sb.id.startswith(f"sb-{a.host_id}-")]
        assert elsewhere, "four creates all stayed on the host asked"
        for sb in made:
            assert sb.exec("echo hi").stdout == b"hi\n"
            sb.destroy()
    with corral.Client(a.url) as cl:
        with pytest.raises(corral.NotFound):
            cl.drain_host("nosuchhost")


def test_a_restarted_host_takes_its_lease_back(cluster):
    a, b, _ = cluster.hosts
    lease = (b.state_dir / "cluster-lease").read_text()
    b.kill()
    t0 = time.monotonic()
    b.start()

    def member():
        return json.loads(b.request("GET", "/v1/hosts").body)["cluster"]["member"]
    wait_for(member, timeout=LEASE_S * 3, what="the restarted host to be a member")
    # its own lease, taken back before it ran out: never lost meanwhile
    assert time.monotonic() - t0 < LEASE_S, "it waited for its old lease to expire"
    assert (b.state_dir / "cluster-lease").read_text() == lease
    assert cluster.hosts_of(a)[b.host_id]["state"] == "ready"


def test_a_trajectory_resumes_on_another_host_with_nothing_run_twice(net, etcd, tmp_path):
    shared = tmp_path / "shared"  # what NFS or CephFS is to a real cluster
    shared.mkdir()
    cl = Cluster(net, etcd, tmp_path, ["--shared-dir", str(shared)])
    try:
        a, b, h = cl.hosts
        spec = {"image": "busybox", "trajectory": "t-survives"}
        step = {"cmd": ["sh", "-c", "echo $$ >> /root/ran; wc -l < /root/ran"]}
        r = h.request("POST", "/v1/sandboxes", spec, headers={"X-Corral-Placed": "1"})
        assert r.status == 201, r.body
        first = json.loads(r.body)["id"]
        assert first.startswith(f"sb-{h.host_id}-")
        recorded = []
        for n in range(3):
            out = json.loads(h.request("POST", f"/v1/sandboxes/{first}/exec", step).body)
            assert out["stdout"] == f"{n + 1}\n" and not out["replayed"], out
            recorded.append(out["stdout"])
        # While its host runs, no other host takes it: the log's lock fences it.
        r = a.request("POST", "/v1/sandboxes", spec)
        assert r.status == 409 and "t-survives" in r.body.decode(), r.body
        h.kill()
        # Its host dead, any host resumes it from the shared log: the three
        # steps are answered from it, and the fourth runs on their state.
        r = a.request("POST", "/v1/sandboxes", spec)
        assert r.status == 201, r.body
        second = json.loads(r.body)["id"]
        assert not second.startswith(f"sb-{h.host_id}-")
        via = b if second.startswith(f"sb-{a.host_id}-") else a
        for n in range(3):
            out = json.loads(via.request("POST", f"/v1/sandboxes/{second}/exec", step).body)
            assert out["replayed"] and out["stdout"] == recorded[n], out
        out = json.loads(via.request("POST", f"/v1/sandboxes/{second}/exec", step).body)
        assert out["stdout"] == "4\n" and not out["replayed"], out
        body = b.request("GET", "/v1/trajectories/t-survives/steps").body.decode()
        steps = [json.loads(line) for line in body.splitlines() if line]
        assert [s["n"] for s in steps] == [1, 2, 3, 4], steps
        h.start()
    finally:
        cl.close()
