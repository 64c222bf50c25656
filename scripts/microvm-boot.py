#!/usr/bin/env python3
"""Boot, save and restore a QEMU ``-M microvm`` guest and time it.

The groundwork of the microvm backend (issue 13), standard library only.  The
guest is the cached Debian cloud kernel (scripts/microvm-kernel.sh) and an
initramfs whose /init is tests/microvm/boot_probe.c: it prints a marker on
the console and echoes lines on the virtio-serial port "corral.agent".

Modes (each attempt has a deadline; one that misses it is killed, counted as
a hang and retried once):

  plain           the peer: QEMU's microvm defaults (legacy devices, option
                  ROMs, isa serial console), the bzImage, and a guest command
                  line with only console= and tsc_early_khz: exec -> marker
  boot            Corral's tuned boot: exec -> marker, and -> first echo reply
  save            boot, then QMP stop + migrate to a file: time and size
  restore         -incoming from that file, cont -> echo reply
  save-shared     boot with guest RAM in a memory-backend-file (share=on) in
                  /dev/shm, then save with x-ignore-shared: device state only
  restore-shared  guest RAM in a memory-backend-file saved with x-ignore-shared:
                  the restored guest maps that file copy-on-write (share=off), so
                  one saved template serves any number of restores
  all             each of the above in turn, N times
  density[-shared]  --density guests restored (from the file, or with the
                  shared RAM file) and left idle together: PSS each, the
                  host's MemAvailable drop each, idle CPU each (not in all)
  agent           the initramfs's /init is corral-agent: boot to HELLO and
                  to READY (CONFIG stacks the --layer EROFS images, or a
                  busybox layer built here, under a tmpfs overlay), then
                  `uname -r`, `echo` and --execs round trips of `true`
                  through EXEC, a file put and read back (cat, FILE_GET),
                  a file of the layer read (--disk-mb: the writable layer
                  is ext4 on a disk, and the file is found in it after the
                  power-off); the host reconnects (HELLO again, a new
                  CONFIG: the hostname changes), then BYE (not in all)
  agent-save      boot with corral-agent to HELLO and save it there: a
                  template whose agent waits for CONFIG (not in all)
  agent-restore   a fresh QEMU restores the template, the host connects
                  before it runs and sends CONFIG at once: READY, then
                  `hostname` and --execs `true`s (not in all)

  microvm-boot.py --kernel-dir DIR --initrd FILE [--mode all] [--iterations N]
                  [--console serial|hvc] [--mem MB] [--rss-wait S] [--json FILE]

Prints one line per attempt, then p50/min/max per figure, the load average
and the QEMU command lines used.  Exit 1 when a mode fails twice in a row.
"""

import argparse
import base64
import ctypes
import json
import os
import select
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

MARKER = b"corral-boot-probe ready "
PORT = "corral.agent"
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_us():
    """In QEMU's child before exec: SIGKILL when this script dies, so a
    killed run leaves no guest behind."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def accelerator():
    """kvm only where the CPU has hardware virtualisation: /dev/kvm opens on
    this nested host, yet a stock guest hangs there (measured.md)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return "tcg"
    hw = " vmx" in flags or " svm" in flags
    return "kvm" if hw and os.access("/dev/kvm", os.R_OK | os.W_OK) else "tcg"


def mem_available_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


class Hang(Exception):
    """A deadline passed: the guest hung or is too slow to count."""


class Failed(Exception):
    """QEMU or the guest failed outright."""


class Agent:
    """The host's end of the agent protocol (lib/agent/proto.h) over a
    connected socket: enough to configure a guest and run commands in it.
    Frames the guest sends are checked for their type and size; the output
    windows are granted back as output arrives."""

    HDR = struct.Struct("<IHHI")
    T = {n: i for i, n in enumerate(
        "HELLO CONFIG READY EXEC STDIN STDOUT STDERR EXIT SIGNAL FILE_GET FILE_PUT DATA "
        "RESULT CREDIT PING PONG ERROR BYE STARTED RESIZE".split(), 1)}
    NAME = {v: k for k, v in T.items()}

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.next_stream = 1

    def send(self, name, stream=0, payload=b""):
        if isinstance(payload, dict):
            payload = json.dumps(payload, separators=(",", ":")).encode()
        self.sock.sendall(self.HDR.pack(len(payload), self.T[name], 0, stream) + payload)

    def recv(self, deadline, what="a frame"):
        """The next frame: (type name, stream, payload)."""
        while True:
            if len(self.buf) >= 12:
                n, t, flags, stream = self.HDR.unpack_from(self.buf)
                if t not in self.NAME or flags or n > 1 << 20:
                    raise Failed(f"the guest sent a bad header: type {t} flags {flags} len {n}")
                if len(self.buf) >= 12 + n:
                    payload, self.buf = self.buf[12:12 + n], self.buf[12 + n:]
                    return self.NAME[t], stream, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise Hang(f"the agent sent no {what}")
            r, _, _ = select.select([self.sock], [], [], left)
            if r:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise Failed("the agent's port closed")
                self.buf += chunk

    def expect(self, name, deadline):
        t, stream, payload = self.recv(deadline, name)
        if t != name:
            raise Failed(f"{t} on stream {stream} ({payload[:200]!r}) where {name} was due")
        return json.loads(payload) if payload[:1] == b"{" else payload

    def configure(self, layers, hostname, deadline, disk=None):
        msg = {"hostname": hostname, "realtime_ns": time.time_ns(),
               "seed": base64.b64encode(os.urandom(32)).decode(), "layers": layers}
        if disk:
            msg["disk"] = disk
        self.send("CONFIG", 0, msg)
        return self.expect("READY", deadline)

    def _result(self, sid, deadline, got=None):
        """A transfer's frames to its RESULT (DATA into got, credited)."""
        while True:
            t, stream, payload = self.recv(deadline, "RESULT")
            if stream != sid:
                raise Failed(f"{t} on stream {stream} during the transfer on {sid}")
            if t == "DATA" and payload and got is not None:
                got.append(payload)
                self.send("CREDIT", sid, struct.pack("<I", len(payload)))
            elif t == "RESULT":
                res = json.loads(payload)
                if not res.get("ok"):
                    raise Failed(f"the transfer on {sid} failed: {res}")
                return
            elif t not in ("DATA", "CREDIT"):
                raise Failed(f"{t} in a transfer")

    def put(self, path, data, deadline, mode=0o644):
        """FILE_PUT: DATA within the guest's window (256 KiB here)."""
        sid = self.next_stream
        self.next_stream += 1
        if len(data) > 256 * 1024:
            raise ValueError("put: at most one window of bytes")
        self.send("FILE_PUT", sid, {"path": path, "mode": mode, "tar": False})
        for off in range(0, len(data), 65536):
            self.send("DATA", sid, data[off:off + 65536])
        self.send("DATA", sid)
        self._result(sid, deadline)

    def get(self, path, deadline):
        sid = self.next_stream
        self.next_stream += 1
        self.send("FILE_GET", sid, {"path": path, "tar": False})
        got = []
        self._result(sid, deadline, got)
        return b"".join(got)

    def run(self, argv, deadline, env=("PATH=/bin:/usr/bin",)):
        """One exec: (stdout, stderr, its EXIT as a dict)."""
        sid = self.next_stream
        self.next_stream += 1
        self.send("EXEC", sid, {"argv": list(argv), "env": list(env), "cwd": "/", "uid": 0,
                                "gid": 0, "stdin": False, "tty": False})
        out = {"STDOUT": b"", "STDERR": b""}
        while True:
            t, stream, payload = self.recv(deadline, f"answer to {argv[0]}")
            if stream != sid:
                raise Failed(f"{t} on stream {stream} during the exec on {sid}")
            if t in out:
                out[t] += payload
                self.send("CREDIT", sid, struct.pack("<I", len(payload)))
            elif t == "STARTED":
                pass  # its pid: the command runs
            elif t == "EXIT":
                return out["STDOUT"], out["STDERR"], json.loads(payload)
            elif t == "ERROR":
                raise Failed(f"the agent refused {argv}: {payload.decode(errors='replace')}")
            elif t != "CREDIT":
                raise Failed(f"{t} in an exec")


class Guest:
    """One QEMU process, its console, its QMP and agent sockets."""

    def __init__(self, argv, run_dir):
        self.argv = argv
        self.run_dir = run_dir
        self.lines = []  # (monotonic time, console line)
        self.cond = threading.Condition()
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_us)
        self.reader = threading.Thread(target=self._read_console, daemon=True)
        self.reader.start()
        self.qmp = None
        self.agent = None
        self._qmp_buf = b""
        self._agent_buf = b""

    def _read_console(self):
        for line in iter(self.proc.stdout.readline, b""):
            with self.cond:
                self.lines.append((time.monotonic(), line))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def console(self):
        with self.cond:
            return b"".join(l for _, l in self.lines).decode(errors="replace")

    def wait_console(self, needle, deadline):
        """The time the first console line holding needle arrived, and the line."""
        with self.cond:
            seen = 0
            while True:
                for t, line in self.lines[seen:]:
                    if needle in line:
                        return t, line.decode(errors="replace").strip()
                seen = len(self.lines)
                if self.proc.poll() is not None and not self.reader.is_alive():
                    raise Failed(f"qemu exited {self.proc.returncode} before {needle!r}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Hang(f"no {needle!r} on the console")
                self.cond.wait(min(left, 0.5))

    def _connect(self, name, deadline):
        path = os.path.join(self.run_dir, name)
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                return s
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
            if self.proc.poll() is not None:
                raise Failed(f"qemu exited {self.proc.returncode}: {self.console()[-2000:]}")
            if time.monotonic() > deadline:
                raise Hang(f"no {name}")
            time.sleep(0.002)

    # QMP
    def qmp_open(self, deadline):
        self.qmp = self._connect("qmp.sock", deadline)
        self._qmp_recv(deadline)  # greeting
        self.command("qmp_capabilities", deadline=deadline)

    def _qmp_recv(self, deadline):
        while b"\n" not in self._qmp_buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Hang("QMP did not answer")
            r, _, _ = select.select([self.qmp], [], [], left)
            if r:
                chunk = self.qmp.recv(65536)
                if not chunk:
                    raise Failed("QMP closed")
                self._qmp_buf += chunk
        line, self._qmp_buf = self._qmp_buf.split(b"\n", 1)
        return json.loads(line)

    def command(self, name, args=None, fds=(), deadline=None):
        deadline = deadline or time.monotonic() + 30
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        data = json.dumps(msg).encode() + b"\n"
        if fds:
            socket.send_fds(self.qmp, [data], list(fds))
        else:
            self.qmp.sendall(data)
        while True:
            reply = self._qmp_recv(deadline)
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise Failed(f"QMP {name}: {reply['error']}")
            # an event: keep reading

    def wait_migration(self, deadline):
        """Polls query-migrate until completed; returns its answer."""
        while True:
            st = self.command("query-migrate", deadline=deadline)
            status = st.get("status")
            if status == "completed":
                return st
            if status in ("failed", "cancelled"):
                raise Failed(f"migration {status}: {st}")
            if time.monotonic() > deadline:
                raise Hang(f"migration still {status}")
            time.sleep(0.002)

    def wait_incoming(self, deadline):
        """Until the incoming migration is done (status no longer inmigrate)."""
        while True:
            st = self.command("query-status", deadline=deadline)["status"]
            if st not in ("inmigrate",):
                return st
            if time.monotonic() > deadline:
                raise Hang("incoming migration not done")
            time.sleep(0.001)

    # the agent port
    def echo(self, text, deadline):
        """Sends a line on the agent port and waits for it back."""
        if self.agent is None:
            self.agent = self._connect("agent.sock", deadline)
        self.agent.sendall(text.encode() + b"\n")
        want = text.encode() + b"\n"
        while want not in self._agent_buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Hang(f"no echo of {text!r}")
            r, _, _ = select.select([self.agent], [], [], min(left, 0.5))
            if r:
                chunk = self.agent.recv(65536)
                if not chunk:
                    raise Failed("agent port closed")
                self._agent_buf += chunk
            elif self.proc.poll() is not None:
                raise Failed(f"qemu exited {self.proc.returncode}")
        self._agent_buf = self._agent_buf.split(want, 1)[1]
        return time.monotonic()

    def cpu_s(self):
        """User + system CPU time QEMU has used: on a shared, loaded machine
        a steadier yardstick than the wall clock."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def pss_kb(self):
        """Proportional set size: pages shared with other QEMUs (the RAM
        file, libraries) counted in shares."""
        with open(f"/proc/{self.proc.pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
        return 0

    def rss_kb(self):
        """VmRSS, RssAnon, RssFile, RssShmem of QEMU, in kB."""
        out = {}
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    out[k] = int(v.split()[0])
        return out

    def stop(self):
        """Powers the guest off through the probe, else quit over QMP, else
        SIGKILL: this process's own QEMU, by its pid."""
        if self.proc.poll() is None and self.agent is not None:
            try:
                self.agent.sendall(b"poweroff\n")
                self.proc.wait(timeout=3)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None and self.qmp is not None:
            try:
                self.command("quit", deadline=time.monotonic() + 2)
            except (OSError, Hang, Failed, ValueError):
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for s in (self.qmp, self.agent):
            if s is not None:
                s.close()
        self.reader.join(timeout=2)
        self.proc.stdout.close()


class Runner:
    def __init__(self, args):
        self.args = args
        self.accel = args.accel if args.accel != "auto" else accelerator()
        self.manifest = manifest = dict(
            line.rstrip("\n").split("=", 1)
            for line in open(os.path.join(args.kernel_dir, "manifest")) if "=" in line)
        self.version = manifest["version"]
        # The ELF through its PVH entry unless told otherwise: no emulated
        # decompression (microvm-kernel.sh).
        image = manifest["kernel"] if args.bzimage else manifest.get("vmlinux") or manifest["kernel"]
        self.kernel = args.kernel or os.path.join(args.kernel_dir, image)
        self.work = tempfile.mkdtemp(prefix="corral-microvm-", dir=args.work_dir)
        self.state = os.path.join(self.work, "state.mig")
        self.shm = os.path.join(args.shm_dir, f"corral-microvm-{os.getpid()}.ram")
        self.shared_state = os.path.join(self.work, "state-shared.mig")
        self.agent_state = os.path.join(self.work, "state-agent.mig")
        self.cmdlines = {}
        self.hangs = {}
        self.results = {}

    def cleanup(self):
        if not self.args.keep_dir:
            shutil.rmtree(self.work, ignore_errors=True)
        try:
            os.unlink(self.shm)
        except FileNotFoundError:
            pass

    def argv(self, run_dir, ram=None, incoming=False, layers=()):
        """The QEMU command line.  ram: None (anonymous RAM), "shared" (a
        MAP_SHARED file the saver writes) or "private" (the same file mapped
        copy-on-write by a restored guest)."""
        a = self.args
        serial = a.console == "serial"
        machine = "microvm,x-option-roms=off," + a.legacy
        machine += ",isa-serial=" + ("on" if serial else "off")
        if ram:
            machine += ",memory-backend=ram0"
        # tsc_early_khz: without it 10-60% of TCG boots hang calibrating the
        # TSC against the PIT (measured.md).  cryptomgr.notests: the crypto
        # self-tests are a third of the kernel's own boot under TCG, and a
        # throwaway guest's boundary is the hypervisor, not its crypto.
        cmdline = (f"console={'ttyS0' if serial else 'hvc0'} tsc_early_khz=2100000 quiet panic=-1"
                   " cryptomgr.notests")
        cmdline += f" corral.port={PORT} " + a.append
        argv = [a.qemu, "-M", machine, "-accel", self.accel if self.accel == "kvm"
                else f"tcg,tb-size={a.tb_size}" if a.tb_size else "tcg",
                "-cpu", "host" if self.accel == "kvm" else a.cpu,
                "-m", f"{a.mem}M", "-smp", "1",
                "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
                "-sandbox", "on",
                "-kernel", self.kernel, "-initrd", a.initrd, "-append", cmdline.strip(),
                "-chardev", "stdio,id=con,signal=off"]
        if ram:
            argv += ["-object", f"memory-backend-file,id=ram0,size={a.mem}M,mem-path={self.shm},"
                     f"share={'on' if ram == 'shared' else 'off'}"]
        argv += ["-device", "virtio-serial-device,max_ports=2"]
        argv += ["-serial", "chardev:con"] if serial else ["-device", "virtconsole,chardev=con"]
        argv += ["-chardev", f"socket,id=agent,path={run_dir}/agent.sock,server=on,wait=off",
                 "-device", f"virtserialport,chardev=agent,name={PORT}",
                 "-qmp", f"unix:{run_dir}/qmp.sock,server=on,wait=off"]
        for i, layer in enumerate(layers):
            argv += ["-drive", f"id=layer{i},file={layer},format=raw,if=none,readonly=on",
                     "-device", f"virtio-blk-device,drive=layer{i}"]
        if incoming:
            argv += ["-incoming", "defer"]
        return argv

    def argv_plain(self, run_dir):
        """The peer: what one would type from QEMU's documentation."""
        a = self.args
        kernel = a.kernel or os.path.join(a.kernel_dir, self.manifest["kernel"])
        return [a.qemu, "-M", "microvm", "-accel", self.accel, "-m", f"{a.mem}M",
                "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
                "-kernel", kernel, "-initrd", a.initrd,
                "-append", "console=ttyS0 tsc_early_khz=2100000 panic=-1",
                "-serial", "stdio",
                "-device", "virtio-serial-device",
                "-chardev", f"socket,id=agent,path={run_dir}/agent.sock,server=on,wait=off",
                "-device", f"virtserialport,chardev=agent,name={PORT}"]

    def plain(self):
        rd = self.run_dir("plain")
        argv = self.argv_plain(rd)
        self.cmdlines.setdefault("plain", argv)
        g = Guest(argv, rd)
        try:
            deadline = g.t0 + self.args.boot_deadline
            t_marker, line = g.wait_console(MARKER, deadline)
            cpu = g.cpu_s()
            t_echo = g.echo("ping", deadline)
            return {"marker_s": t_marker - g.t0, "echo_s": t_echo - g.t0, "cpu_s": cpu,
                    "probe": line[line.index(MARKER.decode()):]}
        finally:
            g.stop()

    def busybox_layer(self):
        """An EROFS layer holding busybox and the commands the agent mode
        runs, built once per run."""
        path = os.path.join(self.work, "busybox.erofs")
        if os.path.exists(path):
            return path
        tree = os.path.join(self.work, "busybox-tree")
        os.makedirs(os.path.join(tree, "bin"))
        for d in ("dev", "proc", "sys", "tmp", "etc"):
            os.mkdir(os.path.join(tree, d))
        shutil.copy(self.args.busybox, os.path.join(tree, "bin", "busybox"))
        for cmd in ("sh", "echo", "uname", "cat", "true", "hostname", "sleep", "ls", "date"):
            os.symlink("busybox", os.path.join(tree, "bin", cmd))
        subprocess.run(["mkfs.erofs", "--quiet", "-T0", "--all-root", path, tree], check=True,
                       stdout=subprocess.DEVNULL)
        return path

    def agent_save(self):
        """A template: boot with corral-agent as /init to HELLO (its agent
        now waits for CONFIG), then stop and migrate it to a file."""
        layers = self.args.layer or [self.busybox_layer()]
        rd = self.run_dir("agent-save")
        argv = self.argv(rd, layers=layers)
        self.cmdlines.setdefault("agent-save", argv)
        g = Guest(argv, rd)
        try:
            deadline = g.t0 + self.args.boot_deadline
            a = Agent(g._connect("agent.sock", deadline))
            a.expect("HELLO", deadline)
            t_hello = time.monotonic()
            g.qmp_open(deadline + 10)
            dl = time.monotonic() + self.args.save_deadline
            g.command("migrate-set-parameters", {"max-bandwidth": 1 << 40}, deadline=dl)
            fd = os.open(self.agent_state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                         0o600)
            try:
                t0 = time.monotonic()
                g.command("stop", deadline=dl)
                g.command("getfd", {"fdname": "mig"}, fds=[fd], deadline=dl)
            finally:
                os.close(fd)
            g.command("migrate", {"uri": "fd:mig"}, deadline=dl)
            g.wait_migration(dl)
            a.sock.close()
            return {"hello_s": t_hello - g.t0, "save_s": time.monotonic() - t0,
                    "file_bytes": os.path.getsize(self.agent_state)}
        finally:
            g.stop()

    def agent_restore(self):
        """A sandbox from the template: a fresh QEMU with the same devices
        restores it; the host connects before the guest runs (so the guest
        sees no change of host) and sends CONFIG at once: READY, then
        `hostname` and `true` through EXEC."""
        if not os.path.exists(self.agent_state):
            raise Failed(f"no saved template {self.agent_state}: run agent-save first")
        layers = self.args.layer or [self.busybox_layer()]
        rd = self.run_dir("agent-restore")
        argv = self.argv(rd, incoming=True, layers=layers)
        self.cmdlines.setdefault("agent-restore", argv)
        fd = os.open(self.agent_state, os.O_RDONLY | os.O_CLOEXEC)
        g = Guest(argv, rd)
        try:
            dl = g.t0 + self.args.restore_deadline
            g.qmp_open(dl)
            a = Agent(g._connect("agent.sock", dl))
            g.command("getfd", {"fdname": "mig"}, fds=[fd], deadline=dl)
            os.close(fd)
            fd = -1
            g.command("migrate-incoming", {"uri": "fd:mig"}, deadline=dl)
            if g.wait_incoming(dl) != "running":
                g.command("cont", deadline=dl)
            t_run = time.monotonic()
            devs = [f"/dev/vd{chr(ord('a') + i)}" for i in range(len(layers))]
            a.send("CONFIG", 0, {"hostname": "sb-restored", "realtime_ns": time.time_ns(),
                                 "seed": base64.b64encode(os.urandom(32)).decode(),
                                 "layers": devs})
            t, _, payload = a.recv(dl, "READY")
            saw_hello = t == "HELLO"
            if saw_hello:
                t, _, payload = a.recv(dl, "READY")
            if t != "READY":
                raise Failed(f"{t} ({payload[:200]!r}) where READY was due")
            t_ready = time.monotonic()
            out, _, _ = a.run(["hostname"], dl + 10)
            if out != b"sb-restored\n":
                raise Failed(f"hostname after a restore gave {out!r}")
            rts = []
            for _ in range(self.args.execs):
                t0 = time.monotonic()
                a.run(["true"], dl + 10)
                rts.append(time.monotonic() - t0)
            a.send("BYE")
            a.expect("BYE", time.monotonic() + 5)
            return {"running_s": t_run - g.t0, "ready_s": t_ready - g.t0,
                    "config_s": t_ready - t_run, "exec_rt_s": statistics.median(rts),
                    "hello_again": saw_hello}
        except (Hang, Failed) as e:
            raise type(e)(f"{e}; console: {g.console()[-1500:]!r}") from e
        finally:
            if fd >= 0:
                os.close(fd)
            g.stop()

    def disk(self):
        """A writable disk of --disk-mb, ext4, fresh for each guest."""
        path = os.path.join(self.work, "disk.ext4")
        with open(path, "wb") as f:
            f.truncate(self.args.disk_mb << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1",
                        path], check=True)
        return path

    def agent(self):
        """Boot with corral-agent as /init: HELLO, CONFIG, READY, commands, BYE."""
        layers = self.args.layer or [self.busybox_layer()]
        disk = self.disk() if self.args.disk_mb else None
        rd = self.run_dir("agent")
        # the disk after the layers: /dev/vd<next letter>
        argv = self.argv(rd, layers=layers + ([disk] if disk else []))
        if disk:
            argv = [x.replace(f"file={disk},format=raw,if=none,readonly=on",
                              f"file={disk},format=raw,if=none") for x in argv]
        self.cmdlines.setdefault("agent", argv)
        g = Guest(argv, rd)
        try:
            deadline = g.t0 + self.args.boot_deadline
            a = Agent(g._connect("agent.sock", deadline))
            hello = a.expect("HELLO", deadline)
            t_hello = time.monotonic()
            if hello.get("kernel") != self.version:
                raise Failed(f"HELLO from kernel {hello.get('kernel')}, not {self.version}")
            devs = [f"/dev/vd{chr(ord('a') + i)}" for i in range(len(layers))]
            disk_dev = f"/dev/vd{chr(ord('a') + len(layers))}" if disk else None
            ready = a.configure(devs, "sb-agent", deadline + 10, disk_dev)
            t_ready = time.monotonic()
            dl = time.monotonic() + 30
            out, _, ex = a.run(["uname", "-r"], dl)
            if out.decode().strip() != self.version or ex.get("code") != 0:
                raise Failed(f"uname -r gave {out!r}, {ex}")
            out, _, ex = a.run(["echo", "hello", "from", "the", "guest"], dl)
            if out != b"hello from the guest\n" or ex.get("code") != 0:
                raise Failed(f"echo gave {out!r}, {ex}")
            out, _, ex = a.run(["hostname"], dl)
            if out != b"sb-agent\n":
                raise Failed(f"hostname gave {out!r}")
            # files in the root the guest moved to (the writable overlay)
            blob = os.urandom(200_000)
            a.put("/tmp/blob", blob, dl)
            out, _, ex = a.run(["sh", "-c", "cat /tmp/blob"], dl)
            if out != blob or a.get("/tmp/blob", dl) != blob:
                raise Failed("FILE_PUT then cat or FILE_GET gave other bytes")
            if a.get("/bin/busybox", dl)[:4] != b"\x7fELF":
                raise Failed("FILE_GET of /bin/busybox is not the layer's ELF")

            rts = []
            for _ in range(self.args.execs):
                t0 = time.monotonic()
                _, _, ex = a.run(["true"], dl)
                rts.append(time.monotonic() - t0)
                if ex.get("code") != 0:
                    raise Failed(f"true gave {ex}")
            # A new host: HELLO again, a CONFIG that sets the identity only,
            # and the guest serves it.  The pause lets the guest see the
            # close: virtio-serial reports only whether the host is
            # connected, so a close and a connect that come together are
            # not seen (a host that takes over a running guest sends CONFIG
            # without waiting for HELLO: docs/architecture.md).
            a.sock.close()
            time.sleep(0.3)
            t0 = time.monotonic()
            a = Agent(g._connect("agent.sock", dl))
            a.expect("HELLO", dl)
            t_rehello = time.monotonic() - t0
            a.configure(devs, "sb-again", dl)
            out, _, ex = a.run(["hostname"], dl)
            if out != b"sb-again\n":
                raise Failed(f"hostname after a new CONFIG gave {out!r}")
            a.send("BYE")
            a.expect("BYE", time.monotonic() + 5)
            g.proc.wait(timeout=10)  # the agent powers the guest off
            if disk:
                # what the guest wrote is in the disk's upper dir
                r = subprocess.run(["debugfs", "-R", "cat /upper/tmp/blob", disk],
                                   capture_output=True)
                if r.stdout != blob:
                    raise Failed(f"the disk's /upper/tmp/blob is not the file put: "
                                 f"{len(r.stdout)} bytes, {r.stderr[-200:]!r}")
            return {"hello_s": t_hello - g.t0, "ready_s": t_ready - g.t0,
                    "config_s": t_ready - t_hello, "guest_ready_ms": ready["uptime_ms"],
                    "exec_rt_s": statistics.median(rts), "exec_rt_max_s": max(rts),
                    "rehello_s": t_rehello,
                    "hello": hello}
        except (Hang, Failed) as e:
            # the guest's console says what it was doing
            raise type(e)(f"{e}; console: {g.console()[-1500:]!r}") from e
        finally:
            g.stop()

    def run_dir(self, tag):
        d = tempfile.mkdtemp(prefix=tag + "-", dir=self.work)
        return d

    # one attempt of each mode
    def boot(self, ram=None, keep=False):
        rd = self.run_dir("boot")
        argv = self.argv(rd, ram=ram)
        self.cmdlines.setdefault("boot" if not ram else "boot-shared-ram", argv)
        g = Guest(argv, rd)
        try:
            deadline = g.t0 + self.args.boot_deadline
            t_marker, line = g.wait_console(MARKER, deadline)
            cpu = g.cpu_s()
            t_echo = g.echo("ping", deadline)
            fig = {"marker_s": t_marker - g.t0, "echo_s": t_echo - g.t0, "cpu_s": cpu,
                   "probe": line[line.index(MARKER.decode()):]}
            if keep:
                g.qmp_open(deadline + 10)
                return g, fig
            if self.args.rss_wait > 0:
                time.sleep(self.args.rss_wait)
                fig["rss_kb"] = g.rss_kb()
            return fig
        except BaseException:
            keep = False
            raise
        finally:
            if not keep:
                g.stop()

    def save(self, ram=None):
        g, fig = self.boot(ram=ram, keep=True)
        path = self.shared_state if ram else self.state
        try:
            dl = time.monotonic() + self.args.save_deadline
            # 32 MiB/s is QEMU's default cap: lift it, this is a local file.
            g.command("migrate-set-parameters", {"max-bandwidth": 1 << 40}, deadline=dl)
            if ram:
                g.command("migrate-set-capabilities", {"capabilities": [
                    {"capability": "x-ignore-shared", "state": True}]}, deadline=dl)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                t0 = time.monotonic()
                g.command("stop", deadline=dl)
                g.command("getfd", {"fdname": "mig"}, fds=[fd], deadline=dl)
            finally:
                os.close(fd)
            g.command("migrate", {"uri": "fd:mig"}, deadline=dl)
            g.wait_migration(dl)
            t1 = time.monotonic()
            fig.update({"save_s": t1 - t0, "file_bytes": os.path.getsize(path)})
            if ram:
                fig["ram_file_bytes"] = os.path.getsize(self.shm)
            return fig
        finally:
            # The saved guest is paused: kill rather than power it off.
            g.agent.close()
            g.agent = None
            g.stop()

    def restore(self, ram=None, keep=False):
        """One restore to an answering guest; with keep, the guest is left
        running and returned with the figures."""
        path = self.shared_state if ram else self.state
        if not os.path.exists(path):
            raise Failed(f"no saved state {path}: run save first")
        rd = self.run_dir("restore")
        argv = self.argv(rd, ram=ram and "private", incoming=True)
        self.cmdlines.setdefault("restore-shared" if ram else "restore", argv)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        g = Guest(argv, rd)
        try:
            dl = g.t0 + self.args.restore_deadline
            g.qmp_open(dl)
            t_qmp = time.monotonic()
            if ram:
                g.command("migrate-set-capabilities", {"capabilities": [
                    {"capability": "x-ignore-shared", "state": True}]}, deadline=dl)
            g.command("getfd", {"fdname": "mig"}, fds=[fd], deadline=dl)
            os.close(fd)
            fd = -1
            g.command("migrate-incoming", {"uri": "fd:mig"}, deadline=dl)
            status = g.wait_incoming(dl)
            t_in = time.monotonic()
            if status != "running":
                g.command("cont", deadline=dl)
            t_echo = g.echo("ping", dl)
            cpu = g.cpu_s()
            t_rt0 = time.monotonic()
            g.echo("pong", dl)
            fig = {"qmp_s": t_qmp - g.t0, "incoming_s": t_in - g.t0, "echo_s": t_echo - g.t0,
                   "cpu_s": cpu,
                   "roundtrip_ms": (time.monotonic() - t_rt0) * 1e3}
            if keep:
                return g, fig
            if self.args.rss_wait > 0:
                time.sleep(self.args.rss_wait)
                fig["rss_kb"] = g.rss_kb()
            # the probe must still work after a restore: one more line.
            g.echo("after-restore", dl + self.args.rss_wait)
            return fig
        except BaseException:
            keep = False
            raise
        finally:
            if fd >= 0:
                os.close(fd)
            if not keep:
                g.stop()

    def density(self, ram=None):
        """--density guests restored one after another and left idle: what
        each costs the host in memory (PSS, and MemAvailable's drop) and in
        CPU while idle."""
        n = self.args.density
        avail0 = mem_available_kb()
        guests = []
        try:
            for _ in range(n):
                g, _ = self.restore(ram, keep=True)
                guests.append(g)
            time.sleep(max(self.args.rss_wait, 1.0))
            cpu0, t0 = sum(g.cpu_s() for g in guests), time.monotonic()
            time.sleep(5.0)
            cpu1, t1 = sum(g.cpu_s() for g in guests), time.monotonic()
            pss = [g.pss_kb() for g in guests]
            avail1 = mem_available_kb()
            for g in guests:  # all still answer
                g.echo("still-here", time.monotonic() + self.args.restore_deadline)
            return {"guests": n, "pss_kb_each": statistics.median(pss),
                    "mem_available_drop_kb_each": (avail0 - avail1) / n,
                    "idle_cpu_pct_each": 100 * (cpu1 - cpu0) / (t1 - t0) / n}
        finally:
            for g in guests:
                g.stop()

    def attempt(self, mode, fn, *a):
        """fn with one retry after a hang or a failure; counts them."""
        for i in (0, 1):
            try:
                return fn(*a)
            except (Hang, Failed) as e:
                self.hangs.setdefault(mode, []).append(f"{type(e).__name__}: {e}")
                print(f"  {mode}: attempt {i + 1}: {type(e).__name__}: {e}", file=sys.stderr)
                if i:
                    raise

    def record(self, mode, fig):
        self.results.setdefault(mode, []).append(fig)
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in fig.items()}
        print(f"{mode}: {json.dumps(shown)}", flush=True)

    def run(self):
        modes = ["plain", "boot", "save", "restore", "save-shared", "restore-shared"] \
            if self.args.mode == "all" else [self.args.mode]
        for it in range(self.args.iterations):
            for m in modes:
                if m == "plain":
                    self.record(m, self.attempt(m, self.plain))
                elif m == "agent":
                    self.record(m, self.attempt(m, self.agent))
                elif m == "agent-save":
                    self.record(m, self.attempt(m, self.agent_save))
                elif m == "agent-restore":
                    if not os.path.exists(self.agent_state):
                        self.record("agent-save", self.attempt("agent-save", self.agent_save))
                    self.record(m, self.attempt(m, self.agent_restore))
                elif m == "boot":
                    self.record(m, self.attempt(m, self.boot))
                elif m == "save":
                    self.record(m, self.attempt(m, self.save))
                elif m == "restore":
                    if not os.path.exists(self.state):
                        self.record("save", self.attempt("save", self.save))
                    self.record(m, self.attempt(m, self.restore))
                elif m == "save-shared":
                    self.record(m, self.attempt(m, self.save, "shared"))
                elif m in ("density", "density-shared"):
                    ram = "shared" if m == "density-shared" else None
                    if not os.path.exists(self.shared_state if ram else self.state):
                        name = "save-shared" if ram else "save"
                        self.record(name, self.attempt(name, self.save, ram))
                    self.record(m, self.attempt(m, self.density, ram))
                elif m == "restore-shared":
                    if not os.path.exists(self.shared_state):
                        self.record("save-shared", self.attempt("save-shared", self.save, "shared"))
                    self.record(m, self.attempt(m, self.restore, "shared"))

    def summary(self):
        out = {"accel": self.accel, "kernel": self.version, "console": self.args.console,
               "mem_mb": self.args.mem, "loadavg": os.getloadavg(),
               "hangs": self.hangs, "cmdlines": self.cmdlines, "results": self.results}
        print(f"\naccel {self.accel}, guest kernel {self.version}, console {self.args.console}, "
              f"-m {self.args.mem}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for mode, figs in self.results.items():
            keys = [k for k, v in figs[0].items() if isinstance(v, (int, float))]
            for k in keys:
                vals = [f[k] for f in figs if k in f]
                unit = 1e3 if k.endswith("_s") else 1
                name = k[:-2] + " ms" if k.endswith("_s") else k
                print(f"  {mode:15} {name:14} p50 {statistics.median(vals) * unit:10.1f}  "
                      f"min {min(vals) * unit:10.1f}  max {max(vals) * unit:10.1f}  (n={len(vals)})")
            if "rss_kb" in figs[0]:
                for k in figs[0]["rss_kb"]:
                    vals = [f["rss_kb"][k] for f in figs]
                    print(f"  {mode:15} {k + ' kB':14} p50 {statistics.median(vals):10.0f}  "
                          f"min {min(vals):10.0f}  max {max(vals):10.0f}")
        print("  hangs/failures retried:",
              {m: len(v) for m, v in self.hangs.items()} if self.hangs else "none")
        print("\nQEMU command lines:")
        for m, argv in self.cmdlines.items():
            print(f"  {m}: {shlex.join(argv)}")
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernel-dir", required=True)
    p.add_argument("--initrd", required=True)
    p.add_argument("--kernel", help="boot this image instead of the manifest's")
    p.add_argument("--bzimage", action="store_true",
                   help="boot the compressed vmlinuz rather than the PVH vmlinux")
    p.add_argument("--mode", default="all",
                   choices=["agent", "agent-save", "agent-restore", "density", "density-shared", "plain", "boot", "save", "restore", "save-shared", "restore-shared", "all"])
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--density", type=int, default=8,
                   help="guests the density modes restore and keep idle at once")
    # serial: built into the kernel, so a guest that hangs or panics before
    # virtio_console loads still says why; hvc0 costs no less here
    # (docs/benchmarks.md).
    p.add_argument("--console", choices=["serial", "hvc"], default="serial")
    p.add_argument("--mem", type=int, default=96, help="guest RAM, MiB")
    # +arat (an always-running APIC timer): without it the guest's LAPIC
    # timer may stop in idle, and with no HPET or broadcast PIT on microvm the
    # kernel never leaves the periodic 250 Hz tick (nohz_mode 0): an idle
    # guest cost ~4% of a core instead of ~0.5% (docs/benchmarks.md).
    p.add_argument("--cpu", default="qemu64,+arat", help="guest CPU model under TCG")
    p.add_argument("--tb-size", type=int, default=0, help="TCG translation cache, MiB (0: QEMU's)")
    p.add_argument("--legacy", default="pit=off,pic=off,rtc=on",
                   help="microvm's legacy devices (isa-serial follows --console)")
    p.add_argument("--accel", choices=["auto", "kvm", "tcg"], default="auto")
    p.add_argument("--append", default="", help="more guest kernel command line")
    p.add_argument("--qemu", default="qemu-system-x86_64")
    p.add_argument("--boot-deadline", type=float, default=20.0)
    p.add_argument("--save-deadline", type=float, default=20.0)
    p.add_argument("--restore-deadline", type=float, default=10.0)
    p.add_argument("--rss-wait", type=float, default=0.0,
                   help="seconds a restored guest idles before its RSS is read")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--shm-dir", default="/dev/shm")
    p.add_argument("--keep-dir", action="store_true")
    p.add_argument("--json", help="write the figures here too")
    p.add_argument("--layer", action="append", default=[],
                   help="agent mode: an EROFS image to stack (top first); default: busybox")
    p.add_argument("--busybox", default="/bin/busybox", help="agent mode: a static busybox")
    p.add_argument("--execs", type=int, default=20, help="agent mode: `true` round trips")
    p.add_argument("--disk-mb", type=int, default=0,
                   help="agent mode: a writable ext4 disk of this size (else a tmpfs)")
    args = p.parse_args()
    r = Runner(args)
    rc = 0
    try:
        r.run()
    except (Hang, Failed) as e:
        print(f"microvm-boot: {type(e).__name__}: {e}", file=sys.stderr)
        rc = 1
    finally:
        out = r.summary()
        out["ok"] = rc == 0
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        r.cleanup()
    return rc


if __name__ == "__main__":
    sys.exit(main())
