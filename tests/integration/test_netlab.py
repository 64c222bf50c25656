"""The lab internet (netlab.py) itself, before any corrald networking: its
servers answer from the lab's host netns, its DNS follows set_zone() and
ignores garbage, it adds nothing to the real host's netns, and a corrald
started with netns= runs in the lab's host netns."""

import json
import os
import socket
import struct
import subprocess
import sys
import time

from conftest import SMALL
from netlab import (ECHO, RESOLVER, UPLINK6_HOST, UPLINK_HOST, UPLINK_INET, WEB, WEB6, NetLab,
                    dns_query_bytes)


def ns_inode(path):
    return os.stat(path).st_ino


def test_http_from_the_lab_host(netlab):
    netlab.reset()
    for a in WEB + (WEB6,):
        assert netlab.http_get(a) == (200, f"hello from {a}\n".encode())
    assert [(e["server"], e["client"], e["path"]) for e in netlab.http_log()] == [
        (a, UPLINK6_HOST if ":" in a else UPLINK_HOST, "/") for a in WEB + (WEB6,)]
    assert netlab.http_get(WEB[0], "/nothing")[0] == 404


def test_a_process_in_the_lab_host(netlab):
    """run_in_host: a process of its own in the lab's host netns, as corrald
    will be (and no proxy from the environment in its way)."""
    script = ("import os, urllib.request as u\n"
              "print(os.readlink('/proc/self/ns/net'))\n"
              "o = u.build_opener(u.ProxyHandler({}))\n"
              "print(o.open('http://203.0.113.20/', timeout=5).read().decode(), end='')\n")
    p = netlab.run_in_host([sys.executable, "-c", script], stdout=subprocess.PIPE)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0
    assert out.decode() == f"net:[{ns_inode(netlab.host_netns)}]\nhello from 203.0.113.20\n"


def test_a_long_download_is_streamed(netlab):
    status, body = netlab.http_get(WEB[1], "/bytes/5000000", timeout=30)
    assert status == 200 and body == b"x" * 5000000
    t = time.monotonic()
    status, body = netlab.http_get(WEB[1], "/bytes/100000?rate=200000")
    assert status == 200 and len(body) == 100000
    assert time.monotonic() - t > 0.3, "?rate= did not slow the download"


def test_dns_answers_from_the_zone(netlab):
    netlab.reset()
    assert netlab.dns_query("deb.example") == (0, [WEB[0]], [60])
    assert netlab.dns_query("A.Registry.Example.", tcp=True) == (0, [WEB[1]], [60])
    assert netlab.dns_query("v6.example", "AAAA") == (0, [WEB6], [60])
    assert netlab.dns_query("v6.example", "A") == (0, [], [])  # the name is there: NODATA
    assert netlab.dns_query("nope.example")[0] == 3  # NXDOMAIN
    assert netlab.dns_query("nope.example", tcp=True)[0] == 3
    assert [(e["name"], e["type"], e["rcode"], e["proto"], e["client"])
            for e in netlab.dns_log()] == [
        ("deb.example", "A", 0, "udp", UPLINK_HOST),
        ("a.registry.example", "A", 0, "tcp", UPLINK_HOST),
        ("v6.example", "AAAA", 0, "udp", UPLINK_HOST),
        ("v6.example", "A", 0, "udp", UPLINK_HOST),
        ("nope.example", "A", 3, "udp", UPLINK_HOST),
        ("nope.example", "A", 3, "tcp", UPLINK_HOST)]


def test_a_zone_change_takes_effect_at_once(netlab):
    """What a DNS rebinding test needs: the next answer is the new zone's."""
    netlab.reset()
    assert netlab.dns_query("deb.example")[1] == [WEB[0]]
    netlab.set_zone({"deb.example": [WEB[2], WEB[3]], "new.example": ["10.0.0.1"]}, ttl=1)
    assert netlab.dns_query("deb.example") == (0, [WEB[2], WEB[3]], [1, 1])
    assert netlab.dns_query("new.example")[1] == ["10.0.0.1"]
    assert netlab.dns_query("a.registry.example")[0] == 3
    netlab.reset()
    assert netlab.dns_query("deb.example")[1] == [WEB[0]]


GARBAGE = [
    b"",
    b"\x00",
    b"x" * 11,  # shorter than a header
    struct.pack("!HHHHHH", 7, 0x8100, 1, 0, 0, 0) + b"\x01a\x00\x00\x01\x00\x01",  # an answer
    struct.pack("!HHHHHH", 7, 0x0100, 2, 0, 0, 0) + b"\x01a\x00\x00\x01\x00\x01",  # 2 questions
    struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",  # a pointer
    struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x3fabc",  # a label cut short
    struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x01a\x00\x00",  # no class
    bytes(range(256)) * 4,
]


def test_dns_ignores_garbage(netlab):
    with netlab.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((RESOLVER, 53))
        for g in GARBAGE:
            s.send(g)
        s.send(dns_query_bytes("deb.example", 1, qid=0x4242))
        s.settimeout(5)
        assert s.recv(65535)[:2] == b"\x42\x42"
        s.settimeout(0.3)
        try:
            extra = s.recv(65535)
        except socket.timeout:
            extra = None
        assert extra is None, f"garbage got an answer: {extra!r}"
    for g in GARBAGE[1:]:
        with netlab.socket() as s:
            s.settimeout(5)
            s.connect((RESOLVER, 53))
            s.sendall(struct.pack("!H", len(g)) + g)
            assert s.recv(100) == b"", f"an answer over TCP to {g!r}"
    assert netlab.dns_query("deb.example", tcp=True)[1] == [WEB[0]]


def test_echo(netlab):
    with netlab.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        s.connect((ECHO, 7))
        s.send(b"ping over udp")
        assert s.recv(100) == b"ping over udp"
    with netlab.socket() as s:
        s.settimeout(5)
        s.connect((ECHO, 7))
        s.sendall(b"x" * 100000)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(1 << 16):
            got += chunk
        assert got == b"x" * 100000


def ip_json(*args):
    r = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True)
    return json.loads(r.stdout or "[]")


def root_view():
    """The test process's own netns as routing sees it (not counters)."""
    return (sorted((link["ifindex"], link["ifname"]) for link in ip_json("link")),
            sorted((a["ifname"], i["local"], i["prefixlen"])
                   for a in ip_json("addr") for i in a.get("addr_info", [])),
            sorted((r.get("dst"), r.get("gateway"), r.get("dev"))
                   for fam in ("-4", "-6") for r in ip_json(fam, "route")))


def test_the_real_host_keeps_nothing_of_the_lab():
    """Shown without a packet: this machine's own netns may route
    198.51.100.10 out of the machine, so nothing is sent from it.  The lab
    adds no link, address or route here; its internet is a dead end (no
    route out, no forwarding); its host netns has only lo and the uplink."""
    before = root_view()
    with NetLab() as lab:
        assert root_view() == before
        assert sorted(link["ifname"] for link in ip_json("-n", lab.host, "link")) == ["lo", "up0"]
        assert ip_json("-n", lab.host, "route", "get", WEB[0])[0]["gateway"] == UPLINK_INET
        assert not [r for fam in ("-4", "-6") for r in ip_json("-n", lab.inet, fam, "route")
                    if r["dst"] == "default"]
        p = lab.run_in_inet(["cat", "/proc/sys/net/ipv4/ip_forward",
                             "/proc/sys/net/ipv6/conf/all/forwarding"], stdout=subprocess.PIPE)
        assert p.communicate(timeout=10)[0] == b"0\n0\n"
        names = (lab.host, lab.inet)
    assert root_view() == before
    assert not set(names) & set(os.listdir("/run/netns"))


def test_a_corrald_in_the_lab_host(netlab, corrald_factory):
    d = corrald_factory(netns=netlab.host_netns)
    assert os.readlink(f"/proc/{d.pid}/ns/net") == f"net:[{ns_inode(netlab.host_netns)}]"
    with d.client() as c:
        assert c.health()["status"] == "ok"
        with c.create(**SMALL) as sb:
            assert sb.exec("echo hi").stdout == b"hi\n"
    # Its TCP listener is in the lab's host netns, where request() reaches it.
    r = d.request("GET", "/v1/sandboxes", tcp=True,
                  headers={"Authorization": f"Bearer {d.token}"})
    assert r.status == 200
