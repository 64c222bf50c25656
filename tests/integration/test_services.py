"""Services (issue 12): http-mocks and sandbox-to-sandbox services named in
a spec, reached by name from inside that sandbox only, every exchange
logged and recorded in the trajectory.  corrald runs in the lab's host
network namespace (netlab.py), as for test_network.py."""
import json
import time
import uuid

import pytest

import corral
from conftest import MICROVM_READY, SMALL, need_debian, sized, wait_for
from netlab import WEB
from test_cli import corral as run_cli
from test_network import lab_corrald  # noqa: F401 (a fixture)

# An HTTP call from inside the sandbox through the standard library (which
# resolves through /etc/resolv.conf): prints its status, headers, body and
# seconds taken as JSON.
PY_HTTP = ("import sys, json, time, urllib.request, urllib.error\n"
           "m, url = sys.argv[1], sys.argv[2]\n"
           "data = sys.argv[3].encode() if len(sys.argv) > 3 else None\n"
           "req = urllib.request.Request(url, data=data, method=m, headers={'X-Agent': 'a1'})\n"
           "t = time.monotonic()\n"
           "try:\n"
           "    r = urllib.request.urlopen(req, timeout=5)\n"
           "except urllib.error.HTTPError as e:\n"
           "    r = e\n"
           "except Exception as e:\n"
           "    print(json.dumps({'error': repr(e)})); sys.exit(0)\n"
           "print(json.dumps({'status': r.status, 'headers': dict(r.headers),\n"
           "                  'body': r.read().decode(), 's': time.monotonic() - t}))\n")


def http(sb, method, url, body=None):
    argv = ["python3", "-c", PY_HTTP, method, url] + ([body] if body is not None else [])
    r = sb.exec(argv, timeout=30)
    return json.loads(r.stdout)


SHOP = {"name": "shop", "kind": "http-mock", "routes": [
    {"method": "GET", "path": "/items/*", "body": {"id": 42, "name": "lamp"}},
    {"method": "POST", "path": "/orders", "status": 201,
     "headers": {"Location": "/orders/7"}, "body": "made"},
    {"path": "/slow", "body": "late", "delay_ms": 700},
]}


def debian(c, backend="container", **kw):
    return c.create(**sized(backend, image="debian", memory_mb=256), **kw)


@need_debian
def test_a_mock_answers_by_name_and_logs_every_exchange(lab_corrald, backend):
    with lab_corrald.client() as c, debian(c, backend, services=[SHOP]) as sb:
        r = http(sb, "GET", "http://shop/items/9?color=red")
        assert r["status"] == 200 and json.loads(r["body"]) == {"id": 42, "name": "lamp"}
        assert r["headers"]["Content-Type"] == "application/json"
        r = http(sb, "POST", "http://shop/orders", "qty=2")
        assert (r["status"], r["headers"]["Location"], r["body"]) == (201, "/orders/7", "made")
        r = http(sb, "DELETE", "http://shop/items/9")
        assert r["status"] == 404 and "shop" in r["body"]
        # its name is its address, from the sandbox's resolver
        out = sb.exec(["python3", "-c", "import socket; print(socket.gethostbyname('shop'))"])
        info = sb.services()
        assert out.stdout.decode().strip() == info["services"][0]["address"] == "198.18.0.1"
        ex = info["exchanges"]
        assert [(e["method"], e["path"], e["status"], e["route"]) for e in ex] == [
            ("GET", "/items/9", 200, 0), ("POST", "/orders", 201, 1),
            ("DELETE", "/items/9", 404, None)]
        assert ex[0]["query"] == {"color": "red"} and ex[0]["headers"]["X-Agent"] == "a1"
        assert ex[1]["body"] == "qty=2" and ex[1]["response"]["body"] == "made"
        assert info["exchanges_total"] == 3
        log = lab_corrald.log()
        assert f"service shop: POST /orders -> 201" in log
        # the CLI shows the same
        out = run_cli(lab_corrald, "services", sb.id)
        assert out.returncode == 0, out.stderr
        text = out.stdout.decode()
        assert "shop" in text and "198.18.0.1" in text and "POST /orders -> 201" in text
        assert json.loads(run_cli(lab_corrald, "services", "--json", sb.id).stdout) == \
            sb.services()
        # mode none: the service, and nothing else
        assert "error" in http(sb, "GET", f"http://{WEB[0]}/")
        assert "ERR" in sb.exec(["python3", "-c", "import socket\ntry:\n"
                                 "    socket.gethostbyname('deb.example')\n"
                                 "except OSError as e:\n    print('ERR', e)"]).stdout.decode()


@need_debian
def test_a_service_name_resolves_as_often_as_a_client_asks(lab_corrald):
    """A client may resolve a service's name for every request: the
    resolver's per-sandbox limit (100 a second) is for names it asks
    upstream, not for its services'."""
    many = ("import socket\n"
            "for i in range(400):\n"
            "    socket.getaddrinfo('shop', 80, proto=socket.IPPROTO_TCP)\n"
            "print('ok')\n")
    with lab_corrald.client() as c, debian(c, services=[SHOP]) as sb:
        assert sb.exec(["python3", "-c", many], timeout=60).stdout == b"ok\n"
        dns = sb.inspect()["container"]["network"]["dns"]
        assert dns["answered"] >= 400 and dns["limited"] == 0, dns


@need_debian
def test_a_route_delays_its_answer_and_other_ports_are_closed(lab_corrald):
    with lab_corrald.client() as c, debian(c, services=[SHOP]) as sb:
        r = http(sb, "GET", "http://shop/slow")
        assert r["body"] == "late" and r["s"] >= 0.65, r
        r = http(sb, "GET", "http://shop:8080/items/1")
        assert "error" in r, r  # a mock is on its port (80) only
        # the service's address from another sandbox reaches nothing
        with debian(c, network={"mode": "full"}) as other:
            assert "error" in http(other, "GET", "http://198.18.0.1/items/1")
        assert len(sb.services()["exchanges"]) == 1


@need_debian
def test_exchanges_are_part_of_the_trajectory_step_that_caused_them(lab_corrald):
    traj = "svc-" + uuid.uuid4().hex[:8]
    with lab_corrald.client() as c:
        with debian(c, services=[SHOP], trajectory=traj) as sb:
            sb.exec("true")
            assert http(sb, "GET", "http://shop/items/1")["status"] == 200
            sb.exec("echo after")
        steps = c.trajectory(traj).steps()
        assert [s["kind"] for s in steps] == ["exec", "exec", "exec"]
        assert "services" not in steps[0] and "services" not in steps[2]
        (e,) = steps[1]["services"]
        assert (e["service"], e["method"], e["path"], e["status"]) == (
            "shop", "GET", "/items/1", 200)
        assert json.loads(e["response"]["body"]) == {"id": 42, "name": "lamp"}
        assert steps[1]["request"]["body"]["cmd"][0] == "python3"


@need_debian
def test_a_sandbox_service_reaches_one_port_of_another_sandbox(lab_corrald):
    with lab_corrald.client() as c, c.create(**SMALL) as db:
        db.exec("httpd -p 5432 -h /etc && httpd -p 5433 -h /etc")
        svc = {"name": "db", "sandbox": db.id, "port": 5432}
        with debian(c, services=[svc]) as app:
            r = http(app, "GET", "http://db:5432/hostname")
            assert r.get("status") == 200, r
            assert "error" in http(app, "GET", "http://db:5433/hostname")  # no other port
            # nor the other sandbox's own address, nor back from it
            assert db.exec("nc -w 2 198.18.0.1 5432 </dev/null && echo CONNECTED",
                           timeout=15).stdout == b""
            ex = app.services()["exchanges"]
            assert [(e["kind"], e["sandbox"], e["port"]) for e in ex] == [
                ("connection", db.id, 5432)]
            assert "error" not in ex[0]
        # the service names a sandbox that is gone: refused at create
        db.destroy()
        with pytest.raises(corral.InvalidSpec) as e:
            debian(c, services=[svc])
        assert db.id in str(e.value) and "services[0]" in str(e.value)


def test_bad_services_are_refused_with_the_field_named(lab_corrald):
    bad = [
        ([{"name": "-shop", "routes": []}], "services[0].name"),
        ([{"name": "shop", "routes": []}, {"name": "SHOP", "routes": []}], "services[1].name"),
        ([{"name": "shop"}], "services[0].routes"),
        ([{"name": "shop", "routes": [{"path": "items"}]}], "services[0].routes[0].path"),
        ([{"name": "shop", "routes": [{"path": "/", "status": 700}]}],
         "services[0].routes[0].status"),
        ([{"name": "shop", "routes": [{"path": "/", "delay_ms": 10 ** 6}]}],
         "services[0].routes[0].delay_ms"),
        ([{"name": "shop", "routes": [{"path": "/", "headers": {"Bad Name": "x"}}]}],
         "services[0].routes[0].headers"),
        ([{"name": "shop", "routes": [{"path": "/", "headers": {"X": "a\r\nb"}}]}],
         "services[0].routes[0].headers.X"),
        ([{"name": "db", "sandbox": "sb-nope"}], "services[0].port"),
        ([{"name": "db", "sandbox": "sb-nope", "port": 1}], "sb-nope"),
        ([{"name": "db", "kind": "ftp", "routes": []}], "services[0].kind"),
        ({"name": "shop"}, "services must be an array"),
    ]
    with lab_corrald.client() as c:
        for services, words in bad:
            with pytest.raises(corral.InvalidSpec) as e:
                c.create(**SMALL, services=services)
            assert words in str(e.value), (services, str(e.value))
        with pytest.raises(corral.Unsupported) as e:
            c.create(backend="function", services=[SHOP])
        assert "services" in str(e.value)
        assert c.list() == []


@pytest.mark.skipif(not MICROVM_READY, reason="no microvm guest: `make microvm-guest` builds it")
def test_a_service_cannot_reach_into_a_microvm_yet(lab_corrald):
    # a guest's ports are not on its namespace's loopback, where a service connects
    with lab_corrald.client() as c, c.create(**SMALL, backend="microvm") as vm:
        with pytest.raises(corral.Unsupported) as e:
            c.create(**SMALL, services=[{"name": "db", "sandbox": vm.id, "port": 80}])
        assert vm.id in str(e.value) and "microvm" in str(e.value)


@need_debian
def test_services_beside_a_policy_and_when_it_changes(lab_corrald):
    with lab_corrald.client() as c, debian(c, services=[SHOP],
                                          network={"mode": "allow", "allow": [WEB[0]]}) as sb:
        assert http(sb, "GET", "http://shop/items/1")["status"] == 200
        assert http(sb, "GET", f"http://{WEB[0]}/").get("status") == 200
        assert "error" in http(sb, "GET", f"http://{WEB[1]}/")
        sb.set_network("none")
        assert "error" in http(sb, "GET", f"http://{WEB[0]}/")
        assert http(sb, "GET", "http://shop/items/2")["status"] == 200
        assert sb.inspect()["spec"]["services"][0]["name"] == "shop"


@need_debian
def test_a_sandbox_holds_no_more_service_connections_than_its_limit(netlab, corrald_factory):
    netlab.reset()
    d = corrald_factory(["--network-max-conns", "5", "--network-range", "10.213.0.0/24"],
                        netns=netlab.host_netns)
    count = ("import socket\nheld, n = [], 0\n"
             "for i in range(12):\n"
             "    try:\n"
             "        held.append(socket.create_connection(('shop', 80), timeout=1)); n += 1\n"
             "    except OSError:\n"
             "        pass\n"
             "print(n)\n")
    with d.client() as c, debian(c, services=[SHOP]) as sb:
        assert sb.exec(["python3", "-c", count], timeout=60).stdout == b"5\n"
        # they went with the process: the limit is of connections open at once
        assert http(sb, "GET", "http://shop/items/1")["status"] == 200
