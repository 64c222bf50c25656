"""Integration tests drive a real corrald through the Python SDK.

Fixtures:
  corrald          one daemon for the whole run (unix socket + TCP with a token)
  corrald_factory  start(extra_args=[...]) -> a separate daemon of the test's own,
                   stopped (and checked) when the test ends
  client           a corral.Client on the shared daemon
  sandbox          a small fresh sandbox on the shared daemon, destroyed after
  backend          "container", "microvm", then "vm": the contract tests run on each
                   (sized(backend, ...): a spec fit for it)
  any_sandbox      a small fresh sandbox of each backend in turn
  built, imaged, iclient, tree_image   the image tests', from images_common.py
  netlab           a lab internet of network namespaces, one per test module
                   (netlab.py); Corrald(..., netns=netlab.host_netns) runs a
                   daemon in the lab's host netns, whose egress leads there

A Corrald has .url (unix), .tcp_url and .token, .pid, .state_dir, .build,
.cgroup_parent, .log(), .client(tcp=False), .async_client(), .request() for
raw HTTP, .send() (a raw request whose socket the test keeps), .sandboxes(**labels), .stop(sig), .kill() (a crash), .start()
(again, on the same state, socket and cgroup parent) and .leftovers().  At
the end it stops with SIGTERM; it must exit 0 and leave no cgroup, mount,
process or sandbox of its own behind, or the run fails.  Each daemon has a
cgroup parent of its own: corrald's start-up reconcile kills whatever sits
under its parent.  CORRAL_BUILD names the build directory (default: build/
of this tree); build/images (what `make images` builds) is served when it
exists, to the sanitizer build's daemons too.

A Corrald started with ``netns`` (the path of a netns file) runs in that
network namespace.  Its unix socket, which the SDK uses, works from here; its
--listen 127.0.0.1 port is in that netns: request(tcp=True) makes its socket
there, and client(tcp=True) refuses.
"""

import ctypes
import glob
import http.client
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python"))

import corral  # noqa: E402

# Imported here before pytest loads it as a plugin (below): rewrite its asserts.
pytest.register_assert_rewrite("netlab")
from netlab import enter_netns, socket_in  # noqa: E402

BUILD = Path(os.environ.get("CORRAL_BUILD", REPO / "build")).resolve()
# The store `make images` builds (the debian image), whichever build is tested.
IMAGES = REPO / "build" / "images"
DEBIAN = (IMAGES / "tags" / "debian:latest").is_file()
need_debian = pytest.mark.skipif(not DEBIAN, reason="no debian image: `make images` builds it")
# The microvm backend's guest (`make microvm-guest`: the kernel apt fetched,
# an initramfs around corral-agent), whichever build is tested: its agent
# is the plain build's (a guest gets no sanitizer runtime).
MICROVM = REPO / "build" / "microvm"
MICROVM_READY = (MICROVM / "vmlinuz").is_file() and (MICROVM / "initrd.cpio").is_file()
MICROVM_ARGS = ["--microvm-kernel", str(MICROVM / "vmlinuz"),
                "--microvm-initrd", str(MICROVM / "initrd.cpio")]
# The vm backend's image (`make images` builds it once the guest kernel is
# there): a full Debian system.
VM_READY = MICROVM_READY and (IMAGES / "tags" / "debian-vm:latest").is_file()
# The sanitizer build's run (make SAN=1): its corrald is instrumented, its
# guests are the plain build's.
SANITIZED = BUILD.name == "build-san"
# The backends the contract tests run on: a test that takes the `backend`
# fixture runs once on each (microvm and vm under TCG here: guests are
# restored from a template, not booted).  The sanitizer run leaves vm out
# of them: corrald's code for a VM is the microVM's, which it runs them on,
# and test_vm.py's tests run there too; a Debian system under emulation
# costs minutes of the run's time budget.
BACKENDS = ("container", "microvm") if SANITIZED else ("container", "microvm", "vm")
# Saved templates every daemon of the tests shares (the sanitizer build's
# too: the guest is the same), so that only the first daemon to need a
# template boots it: a full system's is half a minute under TCG.  It lives
# with the machine's other caches (kernels, debootstrap's output), so a
# fresh clone boots none it booted before: an entry's key covers the
# guest's kernel and initramfs (the agent in it), QEMU and the image, so
# a change to any of them is a miss, never a stale guest.
TEMPLATE_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / \
    "corral" / "templates"
# Every full system the contract tests make is of one image and shape: its
# template is a boot of systemd (half a minute under TCG here), once per
# image, memory and disk size; and of a whole CPU (a Debian system under
# emulation at a quarter of one crawls).
VM_SHAPE = {"image": "debian-vm", "memory_mb": 512, "cpus": 1}
# OCI's name for this machine's architecture: the configs of the images made
# here say it, since corrald refuses an image for another platform.
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
TOKEN = "integration-" + uuid.uuid4().hex
_serial = itertools.count()
# The image tests' helpers and fixtures, loaded as a plugin so that their
# fixtures reach every module and pytest rewrites their assertions.
pytest_plugins = ("images_common", "netlab")


class RawResponse:
    """An answer as it came: ``status``, ``headers`` (lower-case names), ``body``."""

    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    @property
    def error(self):
        """The ``{"code", "message"}`` of an error answer."""
        return self.json()["error"]

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


class _NetnsConnection(http.client.HTTPConnection):
    """TCP to 127.0.0.1:port of another network namespace."""

    def __init__(self, netns, port, timeout):
        super().__init__("127.0.0.1", port, timeout=timeout)
        self.netns = netns

    def connect(self):
        self.sock = socket_in(self.netns)
        self.sock.settimeout(self.timeout)
        self.sock.connect((self.host, self.port))


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _end_with_the_tests():
    """In corrald's child, before exec: SIGTERM when the test run dies, so a
    run that is killed still shuts its daemons down cleanly and leaves no
    sandbox, cgroup or mount on a host it shares."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _live_records(log):
    """The ids records.log still says are live (records.h): a record
    outliving its sandbox would be reported lost by the next start."""
    live = set()
    for line in log.read_text().splitlines() if log.exists() else ():
        if line.startswith("+"):
            live.add(json.loads(line[1:])["id"])
        elif line.startswith("-"):
            live.discard(line[1:])
    return sorted(live)


class Corrald:
    """One corrald process started by the tests."""

    def __init__(self, base_dir, extra_args=(), state_dir=None, netns=None, microvm_args=True):
        self.build = BUILD
        self.netns = netns
        self.base_dir = Path(base_dir)  # the log and the token
        self.base_dir.mkdir(parents=True, exist_ok=True)
        # State and socket live apart, in a short path (sun_path holds 108
        # bytes) that sandbox users can traverse, which pytest's 0700
        # /tmp/pytest-of-root is not.
        self.run_dir = Path(tempfile.mkdtemp(prefix="corral-it-", dir="/tmp"))
        self.run_dir.chmod(0o711)
        self.state_dir = Path(state_dir) if state_dir else self.run_dir / "state"
        self.socket_path = self.run_dir / "corrald.sock"
        self.token = TOKEN
        self.token_file = self.base_dir / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.token_file.chmod(0o600)
        self.cgroup_parent = f"corral-it-{os.getpid()}-{next(_serial)}"
        self.extra_args = list(extra_args)
        self.microvm_args = microvm_args  # False: corrald finds the guest in <state>/microvm
        self.pass_fds = ()  # descriptors the next start() hands corrald
        self.log_path = self.base_dir / "corrald.log"
        self.url = f"unix://{self.socket_path}"
        self.proc = None
        self.start()

    @property
    def pid(self):
        return self.proc.pid

    def args(self):
        args = [str(BUILD / "corrald"), "--state", str(self.state_dir),
                "--socket", str(self.socket_path), "--cgroup-parent", self.cgroup_parent,
                "--listen", "127.0.0.1:0", "--token-file", str(self.token_file)]
        if IMAGES.is_dir():
            args += ["--images-from", str(IMAGES)]
        if MICROVM_READY and self.microvm_args:
            args += MICROVM_ARGS
        if "--template-cache" not in self.extra_args:
            args += ["--template-cache", str(TEMPLATE_CACHE)]
        return args + self.extra_args

    def _preexec(self):
        """In corrald's child, before exec: into its netns, if it has one (a
        setns that fails fails the Popen), then _end_with_the_tests()."""
        if self.netns:
            enter_netns(self.netns)
        _end_with_the_tests()

    def start(self, timeout=20):
        """Start the process (again, after stop() or kill(): same state, socket
        and cgroup parent) and wait until it answers /healthz."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, pass_fds=self.pass_fds,
                                         preexec_fn=self._preexec)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"corrald exited with {self.proc.returncode}:\n{self.log()}")
            port = self._tcp_port()
            if port and self.socket_path.exists():
                try:
                    if self.request("GET", "/healthz", timeout=2).status == 200:
                        break
                except OSError:
                    pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"corrald did not become ready in {timeout}s:\n{self.log()}")
            time.sleep(0.01)
        self.tcp_url = f"http://127.0.0.1:{port}"
        self.tcp_port = port
        return self

    def _tcp_port(self):
        for line in self.log(this_run=True).splitlines():
            m = re.search(r"corrald ready: .*tcp [0-9.]+:(\d+)", line)
            if m:
                return int(m.group(1))
        return None

    def log(self, this_run=False):
        """The daemon's log (stdout and stderr), all runs or just the last one."""
        data = self.log_path.read_bytes() if self.log_path.exists() else b""
        return data[self._log_offset if this_run else 0:].decode("utf-8", "replace")

    def client(self, tcp=False, **kw):
        """A corral.Client on this daemon (over TCP with the token if ``tcp``)."""
        if tcp:
            assert not self.netns, f"the TCP listener is in {self.netns}: use request(tcp=True)"
            return corral.Client(self.tcp_url, token=kw.pop("token", self.token), **kw)
        return corral.Client(self.url, **kw)

    def async_client(self, **kw):
        return corral.AsyncClient(self.url, **kw)

    def request(self, method, target, body=None, headers=None, tcp=False, timeout=30):
        """One raw HTTP request on a fresh connection: a RawResponse.  ``body``
        may be bytes or a JSON-able object.  Over TCP, pass the Authorization
        header yourself."""
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
        if not tcp:
            conn = _UnixConnection(str(self.socket_path), timeout)
        elif self.netns:
            conn = _NetnsConnection(self.netns, self.tcp_port, timeout)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.tcp_port, timeout=timeout)
        try:
            try:
                conn.request(method, target, body=body, headers=headers or {})
            except (BrokenPipeError, ConnectionResetError):
                pass  # answered before it read the whole body (413): read the answer
            resp = conn.getresponse()
            return RawResponse(resp.status, {k.lower(): v for k, v in resp.getheaders()},
                               resp.read())
        finally:
            conn.close()

    def send(self, method, target, body, content_type="application/json", length=None):
        """Send a request on a fresh unix socket and return the socket,
        unread, for a test that plays a client which stops reading or hangs
        up.  ``body`` may be bytes or a JSON-able object; ``length`` (the
        Content-Length) defaults to the body's, and may promise more."""
        if not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(self.socket_path))
        s.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
                  f"Content-Length: {len(body) if length is None else length}\r\n\r\n".encode()
                  + body)
        return s

    def sandboxes(self, **labels):
        """GET /v1/sandboxes[?label=...] as a list of dicts."""
        with self.client() as c:
            return [s.info for s in c.list(labels)]

    def live_sandboxes(self):
        return [s for s in self.sandboxes() if s["state"] not in ("destroyed", "failed", "lost")]

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Signal the daemon, wait for it and return its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"corrald ignored {sig!r} for {timeout}s:\n{self.log()}")
        return self.proc.returncode

    def kill(self):
        """SIGKILL: a crash, leaving its sandboxes for the next start to reconcile."""
        return self.stop(signal.SIGKILL)

    def leftovers(self):
        """What of this daemon's is still on the host (for after it exited)."""
        found = [p for p in glob.glob(f"/sys/fs/cgroup/{self.cgroup_parent}") +
                 glob.glob(f"/sys/fs/cgroup/*/{self.cgroup_parent}")]
        state = str(self.state_dir)
        with open("/proc/self/mountinfo") as f:
            found += [f"mount {line.split()[4]}" for line in f if state in line.split()[4]]
        for pid_dir in glob.glob("/proc/[0-9]*"):
            try:
                seen = (Path(pid_dir, "cmdline").read_bytes() +
                        Path(pid_dir, "environ").read_bytes())
            except OSError:
                continue
            if state.encode() in seen and int(pid_dir[6:]) != os.getpid():
                found.append(f"process {pid_dir[6:]}: {seen[:200]!r}")
        if (self.state_dir / "sandboxes").is_dir():
            found += [f"state {p}" for p in (self.state_dir / "sandboxes").iterdir()]
        found += [f"record {line}" for line in _live_records(self.records_log())]
        return found

    def records_log(self):
        """Where it keeps its records: its state, or with --shared-dir the
        shared dir's hosts/<host-id> (records.h)."""
        a = self.extra_args
        if "--shared-dir" in a and "--host-id" in a:
            return (Path(a[a.index("--shared-dir") + 1]) / "hosts" / a[a.index("--host-id") + 1] /
                    "records.log")
        return self.state_dir / "records.log"

    def shutdown_and_check(self):
        """Stop with SIGTERM; fail unless it exits 0 leaving nothing behind."""
        rc = self.stop()
        assert rc == 0, f"corrald exited with {rc}:\n{self.log()[-4000:]}"
        left = self.leftovers()
        assert not left, f"corrald left behind: {left}"

    def teardown(self):
        """At the end of a test: a running daemon is shut down and checked; one
        the test killed must have been restarted to clean up (else this
        cleans up and fails).  Then its state goes."""
        try:
            if self.proc.poll() is None:
                self.shutdown_and_check()
                return
            left = self.leftovers()
            if left:
                self.start()
                self.shutdown_and_check()
            assert not left, f"a killed corrald left behind (restart it to reconcile): {left}"
        finally:
            if self.proc.poll() is not None and not any(
                    thing.startswith("mount") for thing in self.leftovers()):
                shutil.rmtree(self.run_dir, ignore_errors=True)


def start_corrald(base_dir, extra_args=(), state_dir=None, netns=None, microvm_args=True):
    """Start a corrald of its own in ``base_dir`` (in the network namespace
    ``netns``, a path, if given) and wait until it is ready."""
    return Corrald(base_dir, extra_args, state_dir, netns, microvm_args)


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="corrald needs root (namespaces, cgroups)")
    elif not (BUILD / "corrald").exists():
        skip = pytest.mark.skip(reason=f"no {BUILD}/corrald: run make (or set CORRAL_BUILD)")
    else:
        return
    for item in items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def corrald(tmp_path_factory):
    d = start_corrald(tmp_path_factory.mktemp("corrald"))
    yield d
    live = d.live_sandboxes() if d.proc.poll() is None else []
    d.teardown()
    assert not live, f"tests left sandboxes behind: {[s['id'] for s in live]}"


@pytest.fixture
def corrald_factory(tmp_path):
    """start(extra_args=(), state_dir=None, netns=None, microvm_args=True) -> a Corrald
    of the test's own (microvm_args False: without --microvm-kernel/--microvm-initrd)."""
    started = []

    def start(extra_args=(), state_dir=None, netns=None, microvm_args=True):
        d = start_corrald(tmp_path / f"corrald{len(started)}", extra_args, state_dir, netns,
                          microvm_args)
        started.append(d)
        return d

    yield start
    for d in started:
        d.teardown()


@pytest.fixture(scope="session")
def client(corrald):
    with corrald.client() as c:
        yield c


# Small, so that many fit the host's admission budget at once.
SMALL = {"memory_mb": 128, "cpus": 0.25}


@pytest.fixture
def sandbox(client):
    with client.create(**SMALL) as sb:
        yield sb


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Each backend the shared contract holds for, in turn."""
    if request.param in ("microvm", "vm") and not MICROVM_READY:
        pytest.skip(f"no microvm guest in {MICROVM}: `make microvm-guest` builds it (it needs "
                    "the kernel apt fetches)")
    if request.param == "vm" and not VM_READY:
        pytest.skip(f"no debian-vm image in {IMAGES}: `make images` builds it once the guest "
                    "kernel is there")
    return request.param


def sized(backend, **spec):
    """The keywords of a create on `backend`: SMALL's resources unless the
    test names its own; a full system's image and memory always (VM_SHAPE),
    and its disk unless the test names one."""
    spec = {**SMALL, **spec, "backend": backend}
    if backend == "vm":
        spec.update(VM_SHAPE)
    return spec


@pytest.fixture
def any_sandbox(client, backend):
    """A small fresh sandbox of each backend in turn."""
    with client.create(**sized(backend)) as sb:
        yield sb


# ---- waiting, and processes seen from the host ----

def wait_for(cond, timeout=5, what="the condition"):
    """Poll ``cond`` until it returns something true, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.02)


def alive(pid):
    """Is the process there and not a zombie?"""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids, timeout=10):
    """Wait until none of ``pids`` is alive; return those still alive then."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def descendants(pid):
    """Every process below ``pid`` (children, theirs, ...), by host pid."""
    kids = {}
    for p in Path("/proc").glob("[0-9]*"):
        try:
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
            kids.setdefault(int(fields[1]), []).append(int(p.name))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def docker_archive(layer_files, config=None, repo_tag=None):
    """A docker-archive (docker save) of one layer holding ``layer_files``
    ({name: bytes}, or a str: a directory's files to add), as bytes."""
    import hashlib
    import io
    import json
    import tarfile

    def tar(entries):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            for name, data in entries:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o755, 1700000000
                t.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    layer = tar(sorted(layer_files.items()))
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    cfg = json.dumps({"architecture": HOST_ARCH, "os": "linux", "config": config or {},
                      "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
    manifest = json.dumps([{"Config": cfg_name, "RepoTags": [repo_tag] if repo_tag else [],
                            "Layers": ["layer0/layer.tar"]}]).encode()
    return tar([("layer0/layer.tar", layer), (cfg_name, cfg), ("manifest.json", manifest)])


def import_to_store(store, archive, name):
    """Import archive bytes into the image store directory ``store``, offline."""
    r = subprocess.run([str(BUILD / "corral-import"), "--store", str(store), "--name", name],
                       input=archive, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
