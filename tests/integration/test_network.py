"""Sandbox egress (issue 12): network.mode full and allow with rules by
address, for the container backend.  corrald runs in the lab's host
network namespace (netlab.py), so a sandbox's traffic leads into the lab's
internet and nowhere else on this machine."""
import re
import subprocess

import pytest

import corral
from conftest import SMALL, wait_for
from netlab import ECHO, RESOLVER, WEB



def fetch(sb, addr, port=80, path="/"):
    """GET http://addr:port/path from inside the sandbox: the body, or None
    if nothing answered.  (With nc: the static busybox's wget resolves even
    an address through glibc's NSS, which the busybox image lacks.)"""
    r = sb.exec(f"printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {addr} {port}", timeout=15)
    head, sep, body = r.stdout.partition(b"\r\n\r\n")
    return body.decode() if r.exit_code == 0 and sep and head.startswith(b"HTTP/") else None


@pytest.fixture
def lab_corrald(netlab, corrald_factory):
    netlab.reset()
    return corrald_factory(["--dns-upstream", RESOLVER, "--network-range", "10.213.0.0/24"],
                           netns=netlab.host_netns)


def make(c, network):
    return c.create(**SMALL, network=network)


def test_full_reaches_the_lab_internet_through_nat(lab_corrald, netlab):
    with lab_corrald.client() as c, make(c, {"mode": "full"}) as sb:
        assert fetch(sb, WEB[0]) == f"hello from {WEB[0]}\n"
        assert fetch(sb, WEB[2]) == f"hello from {WEB[2]}\n"
        # NAT: the server saw the host's uplink address, not the sandbox's
        clients = {e["client"].rsplit(":", 1)[0] for e in netlab.http_log()}
        assert clients == {"192.0.2.2"}, clients
        # the sandbox's resolv.conf names --dns-upstream, which answers by NAT too
        assert sb.exec("cat /etc/resolv.conf").stdout.decode().count(f"nameserver {RESOLVER}")
        r = sb.exec("nslookup deb.example", timeout=15)
        assert WEB[0].encode() in r.stdout, r.stdout + r.stderr
        info = sb.inspect()
        assert info["spec"]["network"] == {"mode": "full"}


def test_none_stays_offline(lab_corrald):
    with lab_corrald.client() as c, c.create(**SMALL) as sb:
        assert fetch(sb, WEB[0]) is None
        out = sb.exec("ip -o addr 2>/dev/null || ifconfig -a").stdout.decode()
        assert "eth0" not in out


def test_allow_only_what_is_listed(lab_corrald):
    net = {"mode": "allow", "allow": [f"{WEB[0]}", "203.0.113.0/24:80"],
           "deny": [f"{WEB[3]}"]}
    with lab_corrald.client() as c, make(c, net) as sb:
        assert fetch(sb, WEB[0]) == f"hello from {WEB[0]}\n"   # an address
        assert fetch(sb, WEB[2]) == f"hello from {WEB[2]}\n"   # in a CIDR, its port
        assert fetch(sb, WEB[1]) is None                       # not listed
        assert fetch(sb, WEB[3]) is None                       # listed, but denied
        # the CIDR rule is for port 80 only: the echo port of an allowed
        # address in it is not reachable, of WEB[0] (every port) it is
        r = sb.exec(f"echo hi | nc -w 2 {ECHO} 7", timeout=15)
        assert r.stdout == b"hi\n", r.stderr
        r = sb.exec("echo hi | nc -w 2 203.0.113.20 7", timeout=15)
        assert r.stdout != b"hi\n"


def test_deny_beats_allow_and_full_minus_deny(lab_corrald):
    with lab_corrald.client() as c:
        with make(c, {"mode": "allow", "allow": ["198.51.100.0/24"],
                      "deny": [f"{WEB[1]}:80"]}) as sb:
            assert fetch(sb, WEB[0]) is not None
            assert fetch(sb, WEB[1]) is None
        with make(c, {"mode": "full", "deny": ["203.0.113.0/24"]}) as sb:
            assert fetch(sb, WEB[0]) is not None
            assert fetch(sb, WEB[2]) is None


def test_sandboxes_and_the_host_are_unreachable(lab_corrald, netlab):
    with lab_corrald.client() as c, make(c, {"mode": "full"}) as a, \
            make(c, {"mode": "full"}) as b:
        b.exec("httpd -p 8080 -h /etc")
        b_addr = b.exec("ip -o -4 addr show eth0").stdout.decode().split()[3].split("/")[0]
        assert fetch(a, b_addr, 8080) is None, "a sandbox reached another"
        assert fetch(b, "127.0.0.1", 8080) is not None, "(the server runs)"
        # the host: its uplink address, its side of the sandbox's link, its TCP listener
        gw = a.exec("ip route").stdout.decode().split("via ")[1].split()[0]
        for addr, port in (("192.0.2.2", lab_corrald.tcp_port), (gw, lab_corrald.tcp_port),
                           ("169.254.169.254", 80)):
            r = a.exec(f"nc -w 2 {addr} {port} </dev/null && echo CONNECTED", timeout=15)
            assert b"CONNECTED" not in r.stdout, (addr, port)


def test_ipv6_is_off(lab_corrald):
    with lab_corrald.client() as c, make(c, {"mode": "full"}) as sb:
        assert fetch(sb, "2001:db8:1::10") is None
        assert sb.exec("cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6").stdout == b"1\n"


def test_a_slot_reused_starts_from_its_own_policy(lab_corrald):
    """A destroyed sandbox's link is kept for its slot's next sandbox: the
    next one gets its own rules, not the last one's."""
    with lab_corrald.client() as c:
        with make(c, {"mode": "full"}) as sb:
            assert fetch(sb, WEB[1]) is not None
        with make(c, {"mode": "allow", "allow": [WEB[0]]}) as sb:
            assert fetch(sb, WEB[1]) is None
            assert fetch(sb, WEB[0]) is not None
        with c.create(**SMALL) as sb:
            assert fetch(sb, WEB[0]) is None


def test_bad_rules_are_refused_by_name(lab_corrald):
    with lab_corrald.client() as c:
        for rule, words in (("10.0.0.1/8", "host bits"), ("deb.example:0", "port"),
                            ("a.*.example", "wildcard")):
            with pytest.raises(corral.Error) as e:
                make(c, {"mode": "allow", "allow": [rule]})
            assert e.value.status == 400 and rule in str(e.value), (rule, str(e.value))
        with pytest.raises(corral.Error) as e:
            make(c, {"mode": "allow", "allow": ["deb.example"]})
        assert e.value.status == 501 and "resolver" in str(e.value)
        with pytest.raises(corral.Error) as e:
            c.create(backend="function", runtime="shell", network={"mode": "full"})
        assert e.value.status == 501 and "function" in str(e.value)
        assert lab_corrald.live_sandboxes() == []


def _in_host(netlab, *argv):
    return netlab.run_in_host(list(argv), stdout=subprocess.PIPE).communicate(timeout=10)[0].decode()


def _links(netlab):
    return re.findall(r"^\d+: (cr[0-9a-f]{6}s\d+)", _in_host(netlab, "ip", "-o", "link"), re.M)


def test_a_killed_corrald_leaves_no_link_or_table(lab_corrald, netlab):
    with lab_corrald.client() as c:
        sb = make(c, {"mode": "full"})
        assert fetch(sb, WEB[0]) is not None
    lab_corrald.kill()
    assert "corral_" in _in_host(netlab, "nft", "list", "tables")  # for the restart to remove
    lab_corrald.start()
    assert lab_corrald.live_sandboxes() == []
    with lab_corrald.client() as c, make(c, {"mode": "full"}) as sb:
        assert fetch(sb, WEB[0]) is not None
    lab_corrald.shutdown_and_check()
    assert "corral_" not in _in_host(netlab, "nft", "list", "tables")
    # a link goes with its namespace, which the kernel tears down a moment later
    wait_for(lambda: not _links(netlab), what="the sandbox links to go")
