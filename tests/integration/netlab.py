"""A lab internet for the network tests: network namespaces that stand in for
the world, so that a corrald under test has egress that leads there and
nowhere else.  No packet of the lab's leaves the namespaces it made.

  host netns  crlab-<pid>-<n>-host: where a test runs corrald (Corrald(...,
              netns=lab.host_netns)).  lo, and the uplink up0: 192.0.2.2/24
              and 2001:db8::2/64, default routes via the internet's end.
  inet netns  crlab-<pid>-<n>-inet: the internet.  up0 192.0.2.1/24 and
              2001:db8::1/64; on lo the servers' addresses (WEB, WEB6).
  servers     one process in the inet netns (this file, run with --serve):
              HTTP on port 80 of WEB and WEB6: GET / answers
                "hello from <addr>\\n", GET /bytes/N N bytes, streamed
                (?rate=B/s to make it slow); each request is logged
              echo on ECHO port 7, UDP and TCP
              DNS on RESOLVER port 53, UDP and TCP: A and AAAA from the zone
                set_zone() wrote, read again at each query (so a test can
                rebind a name), NXDOMAIN for a name not in it; each query is
                logged.  What it cannot parse gets no answer.

NetLab is a context manager; the `netlab` fixture (one lab per test module,
conftest.py loads this module as a plugin) yields one.  Its methods:
set_zone(), http_log(), dns_log(), reset(), socket() (one made in a lab
netns), http_get(), dns_query(), run_in_host() and run_in_inet() (a process
in a lab netns), preexec() (for a Popen of the test's own).  close() stops
every process in the lab's namespaces and deletes them; the fixture first
deletes the labs of killed runs (sweep_stale()).

The real host keeps no route, address or link of the lab's: a test must never
aim a socket of the test process's own netns at a lab address, since on a
host with a default route that packet would leave the machine.
"""

import ctypes
import http.server
import json
import os
import re
import select
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

UPLINK_INET, UPLINK_HOST = "192.0.2.1", "192.0.2.2"
UPLINK6_INET, UPLINK6_HOST = "2001:db8::1", "2001:db8::2"
RESOLVER = UPLINK_INET
WEB = ("198.51.100.10", "198.51.100.11", "203.0.113.20", "203.0.113.21")
WEB6 = "2001:db8:1::10"
ECHO = WEB[0]
DEFAULT_ZONE = {"deb.example": [WEB[0]], "a.registry.example": [WEB[1]],
                "b.registry.example": [WEB[2]], "other.example": [WEB[3]],
                "v6.example": [WEB6]}
QTYPES = {"A": 1, "AAAA": 28}

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
_labs = iter(range(1 << 30))


def enter_netns(path):
    """Move the calling thread into the netns at ``path``; raise if it did not
    get there (a socket made after a failed setns would be the real host's)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns({path}, CLONE_NEWNET): {os.strerror(e)}")
    finally:
        os.close(fd)
    here, there = os.stat("/proc/thread-self/ns/net"), os.stat(path)
    if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
        raise OSError(f"setns({path}) left this thread in another netns")


def netns_preexec(path, deathsig=signal.SIGKILL):
    """A Popen preexec_fn: the child joins the netns at ``path``, then gets
    ``deathsig`` when the test process dies."""
    def preexec():
        enter_netns(path)
        _libc.prctl(PR_SET_PDEATHSIG, deathsig)
    return preexec


def socket_in(path, family=socket.AF_INET, type=socket.SOCK_STREAM):
    """A socket made in the netns at ``path``: a thread of its own joins it,
    makes the socket and ends; the socket stays in that netns for good."""
    out = {}

    def make():
        try:
            enter_netns(path)
            out["sock"] = socket.socket(family, type)
        except BaseException as e:  # raised again on the caller's thread
            out["error"] = e
    t = threading.Thread(target=make, name="netns-socket")
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["sock"]


def sweep_stale():
    """Delete the labs of test runs that died without closing them (killed:
    their servers died with them, their namespaces stayed); a lab's name
    carries the pid of the run that made it."""
    for name in os.listdir("/run/netns") if os.path.isdir("/run/netns") else ():
        m = re.fullmatch(r"crlab-(\d+)-\d+-(host|inet|net|h\d+)", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _ns_id(path):
    st = os.stat(path)
    return st.st_dev, st.st_ino


def delete_namespaces(names):
    """Kill every process still in the named netns (a corrald that was not
    stopped, a child of one of ours) and delete them; returns what was
    killed, one line each."""
    killed, ids = [], {}
    for ns in names:
        try:
            ids[_ns_id(f"/run/netns/{ns}")] = ns
        except OSError:
            pass
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            ns = ids.get(_ns_id(pid_dir / "ns" / "net"))
            if ns:
                cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ")[:200]
                os.kill(int(pid_dir.name), signal.SIGKILL)
                killed.append(f"pid {pid_dir.name} in {ns}: {cmd!r}")
        except (OSError, ValueError):
            continue
    for ns in reversed(names):
        # The namespace (and the veth pairs with it) goes once nothing
        # holds it; its name goes now.
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return killed


class ClusterNet:
    """A network for a cluster's hosts: the netns ``net`` holds a bridge,
    172.30.0.1/24 (where the tests' etcd listens), and each host's netns
    (``hosts[i]``, a path) a veth on it with 172.30.0.1{i+1}/24.  Nothing
    else: no route leaves it."""

    NET_ADDR = "172.30.0.1"

    def __init__(self, n_hosts):
        k = next(_labs)
        self.net = f"crlab-{os.getpid()}-{k}-net"
        self.names = [f"crlab-{os.getpid()}-{k}-h{i}" for i in range(n_hosts)]
        self.net_netns = f"/run/netns/{self.net}"
        self.hosts = [f"/run/netns/{n}" for n in self.names]
        self.addrs = [f"172.30.0.{11 + i}" for i in range(n_hosts)]
        self._made = []
        try:
            for ns in [self.net] + self.names:
                _ip("netns", "add", ns)
                self._made.append(ns)
            _ip("-n", self.net, "-batch", "-", input=f"""\
link set lo up
link add br0 type bridge
addr add {self.NET_ADDR}/24 dev br0
link set br0 up
""")
            for i, ns in enumerate(self.names):
                _ip("-n", ns, "-batch", "-", input=f"""\
link set lo up
link add eth0 type veth peer name v{i} netns {self.net}
addr add {self.addrs[i]}/24 dev eth0
link set eth0 up
""")
                _ip("-n", self.net, "-batch", "-",
                    input=f"link set v{i} master br0\nlink set v{i} up\n")
        except BaseException:
            self.close()
            raise

    def close(self):
        killed = delete_namespaces(self._made)
        self._made.clear()
        return killed


class NetLab:
    """Two network namespaces, the servers in one, see the module's doc."""

    def __init__(self):
        n = next(_labs)
        self.host = f"crlab-{os.getpid()}-{n}-host"
        self.inet = f"crlab-{os.getpid()}-{n}-inet"
        self.host_netns = f"/run/netns/{self.host}"
        self.inet_netns = f"/run/netns/{self.inet}"
        self.dir = None
        self.stragglers = []  # what close() found still running in the lab
        self._made = []
        self._procs = []
        self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # ---- life ----

    def start(self, timeout=10):
        """Make the namespaces and start the servers; on any failure undo
        whatever was made and raise."""
        try:
            self._setup(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _setup(self, timeout):
        self.dir = Path(tempfile.mkdtemp(prefix="crlab-", dir="/tmp"))
        for ns in (self.host, self.inet):
            _ip("netns", "add", ns)
            self._made.append(ns)
        _ip("-n", self.host, "-batch", "-", input=f"""\
link set lo up
link add up0 type veth peer name up0 netns {self.inet}
addr add {UPLINK_HOST}/24 dev up0
addr add {UPLINK6_HOST}/64 dev up0 nodad
link set up0 up
route add default via {UPLINK_INET}
route add default via {UPLINK6_INET}
""")
        _ip("-n", self.inet, "-batch", "-", input="link set lo up\n" + "".join(
            f"addr add {a}/32 dev lo\n" for a in WEB) + f"""\
addr add {WEB6}/128 dev lo nodad
addr add {UPLINK_INET}/24 dev up0
addr add {UPLINK6_INET}/64 dev up0 nodad
link set up0 up
""")
        # For a corrald that resolves through /etc/resolv.conf-like files.
        self.resolv_conf = self.dir / "resolv.conf"
        self.resolv_conf.write_text(f"nameserver {RESOLVER}\n")
        self.set_zone(DEFAULT_ZONE)
        with open(self.dir / "servers.err", "wb") as err:
            self._server = self.run_in_inet(
                [sys.executable, str(Path(__file__).resolve()), "--serve", str(self.dir)],
                stdout=subprocess.PIPE, stderr=err)
        ready, _, _ = select.select([self._server.stdout], [], [], timeout)
        line = self._server.stdout.readline() if ready else b""
        if line != b"ready\n":
            err = (self.dir / "servers.err").read_text(errors="replace")
            raise RuntimeError(f"the lab's servers did not start ({line!r}):\n{err}")

    def close(self):
        """Stop every process in the lab's namespaces and delete them.  Safe
        after a start() that failed half-way, and to call twice."""
        for p in reversed(self._procs):
            _stop(p)
        self._procs.clear()
        self._server = None
        self.stragglers += delete_namespaces(self._made)
        self._made.clear()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- what the servers do and saw ----

    def set_zone(self, zone, ttl=60):
        """The DNS server's names from now on: {name: [address, ...]}, A for
        IPv4 addresses and AAAA for IPv6 ones, answered with ``ttl``."""
        tmp = self.dir / "zone.json.tmp"
        tmp.write_text(json.dumps({"ttl": ttl, "names": {
            k.lower().rstrip("."): list(v) for k, v in zone.items()}}))
        os.replace(tmp, self.dir / "zone.json")

    def http_log(self):
        """The HTTP requests so far: dicts of server, client, method, path, host."""
        return _read_log(self.dir / "http.log")

    def dns_log(self):
        """The DNS queries so far: dicts of client, proto, name, type, rcode."""
        return _read_log(self.dir / "dns.log")

    def reset(self):
        """The default zone back and the logs empty, for a test of its own."""
        self.set_zone(DEFAULT_ZONE)
        for name in ("http.log", "dns.log"):
            with open(self.dir / name, "r+b") as f:
                f.truncate()

    # ---- reaching into the lab ----

    def netns_path(self, ns):
        return {"host": self.host_netns, "inet": self.inet_netns}[ns]

    def socket(self, family=socket.AF_INET, type=socket.SOCK_STREAM, ns="host"):
        """A socket in the lab's ``ns`` ("host" or "inet")."""
        return socket_in(self.netns_path(ns), family, type)

    def http_get(self, addr, path="/", ns="host", timeout=5):
        """GET http://addr:80/path from the lab's ``ns``: (status, body)."""
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with self.socket(family, socket.SOCK_STREAM, ns) as s:
            s.settimeout(timeout)
            s.connect((addr, 80))
            host = f"[{addr}]" if ":" in addr else addr
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(1 << 16):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), body

    def dns_query(self, name, qtype="A", ns="host", tcp=False, server=RESOLVER, timeout=5):
        """Ask ``server`` from the lab's ``ns``: (rcode, [addresses], ttls)."""
        q = dns_query_bytes(name, QTYPES[qtype])
        with self.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM,
                         ns) as s:
            s.settimeout(timeout)
            s.connect((server, 53))
            if tcp:
                s.sendall(struct.pack("!H", len(q)) + q)
                n = struct.unpack("!H", _recv_exactly(s, 2))[0]
                answer = _recv_exactly(s, n)
            else:
                s.send(q)
                answer = s.recv(65535)
        return dns_parse_answer(answer)

    def preexec(self, ns="host"):
        """A Popen preexec_fn that puts the child in the lab's ``ns``."""
        return netns_preexec(self.netns_path(ns))

    def run_in_host(self, argv, **popen_kw):
        """Popen(argv) in the lab's host netns; stopped by close() at the latest."""
        return self._run("host", argv, popen_kw)

    def run_in_inet(self, argv, **popen_kw):
        """Popen(argv) in the lab's internet netns (a server of the test's own)."""
        return self._run("inet", argv, popen_kw)

    def _run(self, ns, argv, popen_kw):
        popen_kw.setdefault("stdin", subprocess.DEVNULL)
        p = subprocess.Popen(argv, preexec_fn=self.preexec(ns), **popen_kw)
        self._procs.append(p)
        return p


def _ip(*args, input=None):
    r = subprocess.run(["ip", *args], input=input, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed:\n{input or ''}{r.stdout}{r.stderr}")


def _stop(p):
    if p.poll() is None:
        p.kill()
    p.wait()
    for f in (p.stdin, p.stdout, p.stderr):
        if f:
            f.close()


def _read_log(path):
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []


def _recv_exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


# ---- DNS, just enough ----

def dns_query_bytes(name, qtype, qid=0x1234):
    labels = b"".join(bytes([len(x)]) + x for x in name.encode().split(b".") if x)
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + b"\0" + \
        struct.pack("!HH", qtype, 1)


def dns_parse_answer(msg):
    """(rcode, [addresses], [ttls]) of an answer to a question with no
    compression in it, as dns_query_bytes() asks."""
    _, flags, qd, an = struct.unpack("!HHHH", msg[:8])
    i = 12
    for _ in range(qd):
        while msg[i]:
            i += 1 + msg[i]
        i += 5
    addrs, ttls = [], []
    for _ in range(an):
        if msg[i] & 0xC0 == 0xC0:
            i += 2
        else:
            while msg[i]:
                i += 1 + msg[i]
            i += 1
        rtype, _, ttl, n = struct.unpack("!HHIH", msg[i:i + 10])
        i += 10
        if rtype in (1, 28):
            fam = socket.AF_INET if rtype == 1 else socket.AF_INET6
            addrs.append(socket.inet_ntop(fam, msg[i:i + n]))
            ttls.append(ttl)
        i += n
    return flags & 0xF, addrs, ttls


def dns_answer(query, zone_path):
    """The answer to ``query`` from the zone file, or None for what is not
    one question that parses (garbage gets no answer)."""
    if len(query) < 12:
        return None, None
    qid, flags, qd = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or qd != 1:
        return None, None
    labels, i = [], 12
    while True:
        if i >= len(query):
            return None, None
        n = query[i]
        i += 1
        if n == 0:
            break
        if n > 63 or i + n > len(query):  # a pointer or a label cut short
            return None, None
        labels.append(query[i:i + n])
        i += n
    if i + 4 > len(query):
        return None, None
    qtype, qclass = struct.unpack("!HH", query[i:i + 4])
    question = query[12:i + 4]
    name = b".".join(labels).decode("latin-1").lower()
    zone = json.loads(Path(zone_path).read_text())
    answers = []
    if (flags >> 11) & 0xF != 0:
        rcode = 4  # NOTIMP: only standard queries
    elif name not in zone["names"]:
        rcode = 3  # NXDOMAIN
    else:
        rcode = 0
        for a in zone["names"][name] if qclass == 1 else ():
            fam, rtype = (socket.AF_INET6, 28) if ":" in a else (socket.AF_INET, 1)
            if rtype == qtype:
                rdata = socket.inet_pton(fam, a)
                answers.append(b"\xc0\x0c" + struct.pack("!HHIH", rtype, 1, zone["ttl"],
                                                         len(rdata)) + rdata)
    rflags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode  # QR, opcode, RD; AA, RA
    head = struct.pack("!HHHHHH", qid, rflags, 1, len(answers), 0, 0)
    entry = {"name": name, "type": {1: "A", 28: "AAAA"}.get(qtype, qtype), "rcode": rcode}
    return head + question + b"".join(answers), entry


# ---- the servers, in the internet netns (python3 netlab.py --serve DIR) ----

class _Log:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def write(self, entry):
        os.write(self.fd, (json.dumps(entry) + "\n").encode())  # one write: no torn lines


class _Web(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        me = self.server.server_address[0]
        self.server.log.write({"server": me, "client": self.client_address[0],
                               "method": "GET", "path": self.path,
                               "host": self.headers.get("Host")})
        path, _, query = self.path.partition("?")
        m = re.fullmatch(r"/bytes/(\d+)", path)
        if path == "/":
            self._send(200, f"hello from {me}\n".encode())
        elif m:
            rate = re.fullmatch(r"rate=(\d+)", query)
            self._stream(int(m.group(1)), int(rate.group(1)) if rate else 0)
        else:
            self._send(404, b"not found\n")

    def _send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, n, rate):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        chunk = b"x" * (min(rate, 1 << 16) if rate else 1 << 16)
        try:
            while n > 0:
                self.wfile.write(chunk[:n])
                n -= len(chunk)
                if rate:
                    time.sleep(len(chunk) / rate)
        except OSError:
            self.close_connection = True  # the client went away

    def log_message(self, *args):
        pass


class _WebServer(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _WebServer6(_WebServer):
    address_family = socket.AF_INET6


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(d):
    d = Path(d)
    http_log, dns_log = _Log(d / "http.log"), _Log(d / "dns.log")
    zone = d / "zone.json"
    servers = []
    for a in WEB + (WEB6,):
        s = (_WebServer6 if ":" in a else _WebServer)((a, 80), _Web)
        s.log = http_log
        servers.append(s)

    class TCPEcho(socketserver.BaseRequestHandler):
        def handle(self):
            while data := self.request.recv(1 << 16):
                self.request.sendall(data)

    class UDPEcho(socketserver.BaseRequestHandler):
        def handle(self):
            data, sock = self.request
            sock.sendto(data, self.client_address)

    class DNSUDP(socketserver.BaseRequestHandler):
        def handle(self):
            data, sock = self.request
            answer, entry = dns_answer(data, zone)
            if answer:
                dns_log.write(dict(entry, client=self.client_address[0], proto="udp"))
                sock.sendto(answer, self.client_address)

    class DNSTCP(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.settimeout(10)
            while True:
                head = self.request.recv(2, socket.MSG_WAITALL)
                if len(head) < 2:
                    return
                query = self.request.recv(struct.unpack("!H", head)[0], socket.MSG_WAITALL)
                answer, entry = dns_answer(query, zone)
                if not answer:
                    return
                dns_log.write(dict(entry, client=self.client_address[0], proto="tcp"))
                self.request.sendall(struct.pack("!H", len(answer)) + answer)

    servers += [_TCPServer((ECHO, 7), TCPEcho), socketserver.UDPServer((ECHO, 7), UDPEcho),
                _TCPServer((RESOLVER, 53), DNSTCP),
                socketserver.ThreadingUDPServer((RESOLVER, 53), DNSUDP)]
    for s in servers:
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    _serve(sys.argv[2])
else:
    import pytest

    @pytest.fixture(scope="module")
    def netlab():
        """A NetLab of the test module's own; fails the module's last test if
        a process was left running in it."""
        if os.geteuid() != 0:
            pytest.skip("the lab's network namespaces need root")
        sweep_stale()
        lab = NetLab().start()
        try:
            yield lab
        finally:
            lab.close()
        assert not lab.stragglers, f"left running in the lab: {lab.stragglers}"
