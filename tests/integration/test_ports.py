"""The port proxy (issue 12): a request to /v1/sandboxes/{id}/ports/{port}/...
reaches the server on that port of the sandbox (on its loopback: corrald
connects inside its network namespace), and its answer comes back.  No
network is needed, so these run on the shared daemon."""
import hashlib
import http.client
import json
import os
import socket
import subprocess
import threading
import time

import pytest

from conftest import SMALL, need_debian, wait_for

# A server that answers with what it was sent, as JSON.
ECHO_SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode()
        out = json.dumps({"method": self.command, "path": self.path, "body": body,
                          "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Echo", "yes")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def serving(d, sb, port, path="/"):
    wait_for(lambda: d.request("GET", f"/v1/sandboxes/{sb.id}/ports/{port}{path}").status != 503,
             timeout=10, what=f"the server on port {port}")


@pytest.fixture(scope="module")
def busybox_web(client, corrald):
    with client.create(**SMALL) as sb:
        sb.exec("mkdir -p /www && echo hello > /www/index.html && "
                "head -c 20000000 /dev/urandom > /www/big && httpd -p 8080 -h /www")
        serving(corrald, sb, 8080, "/index.html")
        yield sb


def test_a_get_reaches_a_server_on_the_sandboxs_loopback(corrald, busybox_web):
    sb = busybox_web
    r = corrald.request("GET", f"/v1/sandboxes/{sb.id}/ports/8080/index.html")
    assert (r.status, r.body) == (200, b"hello\n")
    assert r.headers["content-type"].startswith("text/html")
    r = corrald.request("GET", f"/v1/sandboxes/{sb.id}/ports/8080/nope")
    assert r.status == 404, "the server's own status comes back"


def test_a_long_download_streams_whole(corrald, busybox_web):
    sb = busybox_web
    want = sb.exec("sha256sum /www/big").stdout.split()[0].decode()
    r = corrald.request("GET", f"/v1/sandboxes/{sb.id}/ports/8080/big", timeout=60)
    assert r.status == 200 and len(r.body) == 20000000
    assert hashlib.sha256(r.body).hexdigest() == want


def test_a_slow_reader_holds_the_server_back_and_loses_nothing(corrald, busybox_web):
    sb = busybox_web
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(corrald.socket_path))
    s.sendall(f"GET /v1/sandboxes/{sb.id}/ports/8080/big HTTP/1.1\r\nHost: x\r\n"
              "Connection: close\r\n\r\n".encode())
    got = b""
    s.settimeout(30)
    while len(got) < 200000:
        got += s.recv(65536)
        time.sleep(0.01)
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got += b
    s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding: chunked" in head.lower()
    data, rest = b"", body
    while True:  # de-chunk
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        data, rest = data + rest[:n], rest[n + 2:]
    assert len(data) == 20000000


@need_debian
def test_methods_bodies_headers_and_queries_pass(corrald, client):
    with client.create(image="debian", memory_mb=256) as sb:
        sb.exec(["sh", "-c", f"python3 -c '{ECHO_SERVER}' 9000 >/dev/null 2>&1 &"])
        serving(corrald, sb, 9000)
        base = f"/v1/sandboxes/{sb.id}/ports/9000"
        r = corrald.request("POST", f"{base}/a/b?x=1&y=two%20words", body=b'{"k": 1}',
                            headers={"Content-Type": "application/json", "X-Mine": "m"})
        assert r.status == 201 and r.headers["x-echo"] == "yes"
        seen = json.loads(r.body)
        assert seen["method"] == "POST" and seen["body"] == '{"k": 1}'
        assert seen["path"] in ("/a/b?x=1&y=two%20words", "/a/b?y=two%20words&x=1"), seen
        assert seen["headers"]["x-mine"] == "m"
        assert seen["headers"]["host"] == "localhost:9000"
        for method in ("PUT", "PATCH", "DELETE", "GET"):
            r = corrald.request(method, f"{base}/")
            assert r.status == 200 and json.loads(r.body)["method"] == method
        # over TCP: corrald's token is needed, and it is not passed on
        conn = http.client.HTTPConnection("127.0.0.1", corrald.tcp_port, timeout=10)
        conn.request("GET", f"{base}/t")
        assert conn.getresponse().status == 401
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", corrald.tcp_port, timeout=10)
        conn.request("GET", f"{base}/t", headers={"Authorization": f"Bearer {corrald.token}"})
        resp = conn.getresponse()
        seen = json.loads(resp.read())
        assert resp.status == 200 and "authorization" not in seen["headers"]
        conn.close()
        assert sb.url(9000, "/x").endswith(f"{base}/x")


def test_errors_name_what_is_wrong(corrald, client, sandbox):
    r = corrald.request("GET", f"/v1/sandboxes/{sandbox.id}/ports/9999/")
    assert r.status == 503 and "port 9999" in r.json()["error"]["message"]
    for bad in ("0", "65536", "http"):
        r = corrald.request("GET", f"/v1/sandboxes/{sandbox.id}/ports/{bad}/")
        assert r.status == 400 and bad in r.json()["error"]["message"], bad
    r = corrald.request("GET", "/v1/sandboxes/sb-nosuch-000000000000/ports/80/")
    assert r.status == 404
    with client.create(backend="function", runtime="shell") as fn:
        r = corrald.request("GET", f"/v1/sandboxes/{fn.id}/ports/80/")
        assert r.status == 501
    # a server that answers garbage
    sandbox.exec("(while true; do printf 'garbage\\r\\n\\r\\n' | nc -l -p 7000 >/dev/null; done) "
                 ">/dev/null 2>&1 &")
    wait_for(lambda: "not an HTTP/1 answer" in corrald.request(
        "GET", f"/v1/sandboxes/{sandbox.id}/ports/7000/").body.decode(), timeout=10,
        what="a garbage answer refused")
    with pytest.raises(ValueError):
        sandbox.url(0)


# An echo server on port argv[1]; with "ws", a WebSocket server's handshake
# first (and a greeting with it): enough to prove the proxy hands the
# upgraded connection through untouched.
ECHO_TCP = r"""
import base64, hashlib, socket, sys, threading
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1]))); srv.listen()
def handshake(c):
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    hdrs = dict(l.split(": ", 1) for l in head.decode().split("\r\n")[1:] if ": " in l)
    key = hdrs.get("Sec-WebSocket-Key", "") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
    accept = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
               "hello-first").encode())
def serve(c):
    if sys.argv[2:] == ["ws"]:
        handshake(c)
    while True:
        b = c.recv(65536)
        if not b: break
        c.sendall(b)
    c.close()
while True:
    c, _ = srv.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def start_echo(sb, port, *args):
    sb.exec(["sh", "-c", f"python3 -c '{ECHO_TCP}' {port} {' '.join(args)} >/dev/null 2>&1 &"])
    wait_for(lambda: sb.exec(["python3", "-c", "import socket; socket.create_connection("
                              f"('127.0.0.1', {port}))"]).exit_code == 0, timeout=10,
             what=f"the echo server on {port}")


def upgrade(corrald, target, protocol, extra=""):
    """A raw connection to corrald asking to switch `target` to `protocol`:
    the socket and the answer's head."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(corrald.socket_path))
    s.settimeout(10)
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
              f"Upgrade: {protocol}\r\n{extra}\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        assert b, head
        head += b
    return s, head.decode()


def recv_exactly(s, n):
    got = b""
    while len(got) < n:
        b = s.recv(n - len(got))
        assert b, got
        got += b
    return got


@need_debian
def test_a_websocket_passes_through(corrald, client):
    with client.create(image="debian", memory_mb=256) as sb:
        start_echo(sb, 9001, "ws")
        s, head = upgrade(corrald, f"/v1/sandboxes/{sb.id}/ports/9001/chat", "websocket",
                          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                          "Sec-WebSocket-Version: 13\r\n")
        assert head.startswith("HTTP/1.1 101"), head
        assert "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head  # the server's answer to the key
        assert recv_exactly(s, 11) == b"hello-first", "what the server sent with its 101"
        frame = bytes([0x81, 0x85, 1, 2, 3, 4]) + bytes(b ^ k for b, k in zip(b"hello", b"\1\2\3\4\1"))
        for _ in range(3):
            s.sendall(frame)
            assert recv_exactly(s, len(frame)) == frame
        big = os.urandom(3 << 20)
        threading.Thread(target=s.sendall, args=(big,), daemon=True).start()
        assert recv_exactly(s, len(big)) == big
        s.close()


@need_debian
def test_a_raw_tcp_stream_passes_through(corrald, client):
    with client.create(image="debian", memory_mb=256) as sb:
        start_echo(sb, 9002)
        s, head = upgrade(corrald, f"/v1/sandboxes/{sb.id}/ports/9002", "corral-tcp")
        assert head.startswith("HTTP/1.1 101") and "corral-tcp" in head.lower(), head
        s.sendall(b"ping\n")
        assert recv_exactly(s, 5) == b"ping\n"
        s.shutdown(socket.SHUT_WR)
        assert s.recv(10) == b"", "the server's end comes back as the end of the stream"
        s.close()
        s, head = upgrade(corrald, f"/v1/sandboxes/{sb.id}/ports/9003", "corral-tcp")
        assert head.startswith("HTTP/1.1 503"), head


@need_debian
def test_corral_forward(corrald, client):
    from test_cli import corral as cli, spawn
    with client.create(image="debian", memory_mb=256) as sb:
        start_echo(sb, 9004)
        p = spawn(corrald, "forward", sb.id, "0:9004", stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
        try:
            line = p.stdout.readline().decode()
            assert line.startswith("forwarding 127.0.0.1:") and "9004" in line, line
            port = int(line.split()[1].split(":")[1])
            conns = [socket.create_connection(("127.0.0.1", port), 10) for _ in range(3)]
            for i, c in enumerate(conns):  # each its own stream, at once
                c.sendall(f"hello {i}\n".encode())
            for i, c in enumerate(conns):
                assert recv_exactly(c, 8) == f"hello {i}\n".encode()
                c.close()
        finally:
            p.terminate()
            p.wait(10)
        r = cli(corrald, "forward", sb.id, "0:9005")
        assert r.returncode != 0 and b"port 9005" in r.stderr, r.stderr
        r = cli(corrald, "forward", sb.id, "nope")
        assert r.returncode == 2 and b"LOCAL:REMOTE" in r.stderr


@need_debian
def test_tunnels_end_with_their_sandbox_and_with_corrald(corrald_factory):
    d = corrald_factory()
    with d.client() as c:
        sb = c.create(image="debian", memory_mb=256)
        start_echo(sb, 9006)
        s, head = upgrade(d, f"/v1/sandboxes/{sb.id}/ports/9006", "corral-tcp")
        assert head.startswith("HTTP/1.1 101")
        s.sendall(b"x")
        assert recv_exactly(s, 1) == b"x"
        sb.destroy()
        assert s.recv(10) == b"", "the sandbox's end ends the stream"
        s.close()
        sb = c.create(image="debian", memory_mb=256)
        start_echo(sb, 9007)
        s, head = upgrade(d, f"/v1/sandboxes/{sb.id}/ports/9007", "corral-tcp")
        assert head.startswith("HTTP/1.1 101")
    d.shutdown_and_check()  # with a tunnel open: a clean exit, nothing left
    assert s.recv(10) == b""
    s.close()
