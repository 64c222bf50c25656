#!/usr/bin/env python3
"""The microvm backend's speed and density, in one run, on one kernel and
initramfs (build/microvm: `make microvm-guest`), against its peer:

  plain      qemu-system-x86_64 -M microvm as QEMU's documentation has it,
             booting the same kernel and initramfs to the agent's console
             line "port corral.agent open" (the peer: no corrald at all)
  cold       corrald --microvm-cold: a create that boots the guest, to the
             agent's READY (the create's answer)
  restored   corrald with templates: a create restored from its shape's
             template, to READY; the template's own build is reported too
  network    a restored create with a network device (policy allow, no
             rules: a template of its own, a bridged tap), to READY
  exec       the round trip of `true` in a restored guest, through the API
  checkpoint a snapshot of a layer of FILES files (4 KiB each and one of
             1 MiB) written in the guest, taken through its agent, then one
             after a file changed, and a fork from it (a restore through
             the agent), against the same on a container in the same daemon
  density    K idle restored guests: each QEMU's PSS and RSS, MemAvailable's
             drop per guest, and how many fit in what is available

Prints a table, the ratios (restored vs cold, cold vs plain), the
accelerator, and the command lines; --json writes the figures.  Needs root
(corrald), and nothing else running QEMU meanwhile."""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sdk" / "python"))
import corral  # noqa: E402

MARKER = b"port corral.agent open"


def accel():
    flags = Path("/proc/cpuinfo").read_text()
    hw = " vmx" in flags or " svm" in flags
    return "kvm" if hw and os.access("/dev/kvm", os.W_OK) else "tcg"


def mem_available_kb():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def plain_argv(a, kernel, initrd):
    """The peer: what one types from QEMU's microvm documentation, plus the
    agent's port (its /init waits for it) and tsc_early_khz under TCG (many
    TCG boots hang without it: measured.md)."""
    acc = accel()
    return [a.qemu, "-M", "microvm", "-accel", acc, "-m", f"{a.memory_mb}M",
            "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
            "-kernel", str(kernel), "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1" + (" tsc_early_khz=2100000" if acc == "tcg" else ""),
            "-serial", "stdio", "-device", "virtio-serial-device",
            "-device", "virtserialport,name=corral.agent"]


def plain_boot(argv, deadline_s):
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, preexec_fn=os.setsid)
    buf = b""
    try:
        os.set_blocking(p.stdout.fileno(), False)
        while time.monotonic() - t0 < deadline_s:
            try:
                chunk = p.stdout.read()
            except BlockingIOError:
                chunk = None
            if chunk:
                buf += chunk
                if MARKER in buf:
                    return time.monotonic() - t0
            elif p.poll() is not None:
                break
            time.sleep(0.002)
        raise RuntimeError(f"plain boot: no marker in {deadline_s}s: {buf[-400:]!r}")
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


class Daemon:
    def __init__(self, a, tag, extra=()):
        self.base = Path(tempfile.mkdtemp(prefix=f"corral-bench-{tag}-"))
        self.base.chmod(0o755)
        self.sock = self.base / "corrald.sock"
        self.log = open(self.base / "corrald.log", "wb")
        self.cgroup = f"corral-bench-{uuid.uuid4().hex[:8]}"
        # In a network namespace of its own: the links a network makes (and
        # the ip_forward they set) stay out of this machine's.
        argv = ["unshare", "--net", "--", str(a.build / "corrald"), "--state", str(self.base / "state"),
                "--socket", str(self.sock), "--cgroup-parent", self.cgroup,
                "--microvm-kernel", str(a.kernel), "--microvm-initrd", str(a.initrd),
                "--images-from", str(a.images), "--max-sandboxes", "4096", *extra]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self.sock.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"corrald did not start: {(self.base / 'corrald.log').read_text()}")
            time.sleep(0.05)
        self.client = corral.Client(url=f"unix://{self.sock}")

    def stop(self):
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)


def creates(d, a, n, **spec):
    """n creates one after another: each create's latency, and the starts."""
    lat, kinds = [], []
    for _ in range(n):
        t0 = time.monotonic()
        sb = d.client.create(backend="microvm", image=a.image, memory_mb=a.memory_mb, cpus=1,
                             **spec)
        lat.append(time.monotonic() - t0)
        kinds.append(sb.inspect()["microvm"]["start"])
        sb.destroy()
    return lat, kinds


def checkpoints(d, a, backend):
    """A layer of a.files small files and one of 1 MiB: the first snapshot,
    one after a file changed, and a fork from the first (median of 3)."""
    first, again, fork = [], [], []
    for _ in range(3):
        with d.client.create(backend=backend, image=a.image, memory_mb=a.memory_mb, cpus=1) as sb:
            r = sb.exec(f"mkdir -p /srv/t && cd /srv/t && i=0; while [ $i -lt {a.files} ]; do "
                        "head -c 4096 /dev/urandom > f$i; i=$((i+1)); done; "
                        "head -c 1048576 /dev/urandom > big", timeout=300)
            assert r.exit_code == 0, r.stderr
            t = time.monotonic()
            ck = sb.snapshot()["checkpoint"]
            first.append(time.monotonic() - t)
            sb.exec("echo changed > /srv/t/f0")
            t = time.monotonic()
            sb.snapshot()
            again.append(time.monotonic() - t)
            t = time.monotonic()
            f = sb.fork(checkpoint=ck)
            fork.append(time.monotonic() - t)
            assert f.exec("ls /srv/t | wc -l").stdout.strip() == str(a.files + 1).encode()
            f.destroy()
    return first, again, fork


def pss_kb(pid):
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", type=Path, default=REPO / "build")
    p.add_argument("--qemu", default="/usr/bin/qemu-system-x86_64")
    p.add_argument("--image", default="busybox")
    p.add_argument("--memory-mb", type=int, default=256)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--density", type=int, default=10, help="idle guests for the density figure")
    p.add_argument("--files", type=int, default=200, help="small files in the checkpointed layer")
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    a.kernel = REPO / "build" / "microvm" / "vmlinuz"
    a.initrd = REPO / "build" / "microvm" / "initrd.cpio"
    a.images = REPO / "build" / "images"
    if not a.kernel.exists() or not a.initrd.exists():
        sys.exit(f"no guest in {a.kernel.parent}: run `make microvm-guest`")
    fig = {"accel": accel(), "memory_mb": a.memory_mb, "image": a.image,
           "iterations": a.iterations, "host_cpus": os.cpu_count()}

    argv = plain_argv(a, a.kernel, a.initrd)
    plain = [plain_boot(argv, 120) for _ in range(a.iterations)]
    fig["plain_boot_s"] = plain

    d = Daemon(a, "warm")
    try:
        t0 = time.monotonic()
        sb = d.client.create(backend="microvm", image=a.image, memory_mb=a.memory_mb, cpus=1)
        fig["first_create_s"] = time.monotonic() - t0  # builds the template, then restores
        tmpl = sb.inspect()["microvm"]
        rts = []
        for _ in range(max(20, a.iterations * 5)):
            t = time.monotonic()
            sb.exec("true")
            rts.append(time.monotonic() - t)
        fig["exec_rt_s"] = rts
        sb.destroy()
        lat, kinds = creates(d, a, a.iterations)
        fig["restored_s"], fig["restored_kinds"] = lat, kinds
        creates(d, a, 1, network={"mode": "allow"})  # its template
        lat, kinds = creates(d, a, a.iterations, network={"mode": "allow"})
        fig["restored_net_s"], fig["restored_net_kinds"] = lat, kinds
        for backend in ("microvm", "container"):
            f1, f2, fk = checkpoints(d, a, backend)
            fig[f"{backend}_snapshot_s"], fig[f"{backend}_snapshot_again_s"] = f1, f2
            fig[f"{backend}_fork_s"] = fk
        # density: K idle guests, left to settle
        before = mem_available_kb()
        boxes = [d.client.create(backend="microvm", image=a.image, memory_mb=a.memory_mb, cpus=1)
                 for _ in range(a.density)]
        time.sleep(3)
        pids = [b.inspect()["microvm"]["qemu_pid"] for b in boxes]
        fig["density_pss_kb"] = [pss_kb(q) for q in pids]
        fig["density_rss_kb"] = [rss_kb(q) for q in pids]
        fig["density_memavail_drop_kb"] = (before - mem_available_kb()) / a.density
        fig["mem_available_kb"] = mem_available_kb()
        for b in boxes:
            b.destroy()
        fig["kernel"] = tmpl.get("kernel")
    finally:
        d.stop()

    d = Daemon(a, "cold", ["--microvm-cold"])
    try:
        lat, kinds = creates(d, a, a.iterations)
        fig["cold_s"], fig["cold_kinds"] = lat, kinds
    finally:
        d.stop()

    med = {k: statistics.median(fig[k]) for k in (
        "plain_boot_s", "cold_s", "restored_s", "restored_net_s", "exec_rt_s",
        "microvm_snapshot_s", "microvm_snapshot_again_s", "microvm_fork_s",
        "container_snapshot_s", "container_snapshot_again_s", "container_fork_s")}
    per_vm_kb = statistics.median(fig["density_pss_kb"])
    print(f"microvm backend, {fig['accel']}, {a.memory_mb} MiB guests, image {a.image}, "
          f"kernel {fig['kernel']}, {a.iterations} iterations, {os.cpu_count()} CPUs")
    print(f"  {'what':38} {'p50':>10} {'p90':>10}")
    rows = [("plain QEMU boot to the agent's port (peer)", "plain_boot_s"),
            ("corral create, cold boot to READY", "cold_s"),
            ("corral create, restored to READY", "restored_s"),
            ("  the same with a network device", "restored_net_s"),
            ("exec `true` round trip (restored guest)", "exec_rt_s")]
    for label, k in rows:
        print(f"  {label:38} {med[k] * 1e3:9.1f}ms {pct(fig[k], 90) * 1e3:9.1f}ms")
    print(f"  checkpoint of {a.files} x 4 KiB + 1 MiB written in the sandbox (median of 3):")
    for what, k in (("first snapshot", "snapshot_s"), ("after one file changed", "snapshot_again_s"),
                    ("fork from the first (restore)", "fork_s")):
        mv, ct = med[f"microvm_{k}"], med[f"container_{k}"]
        print(f"    {what:34} microvm {mv * 1e3:8.1f}ms  container {ct * 1e3:8.1f}ms  "
              f"({mv / ct:.1f}x)")
    print(f"  first create of the shape (template built + restored): "
          f"{fig['first_create_s'] * 1e3:.0f} ms")
    print(f"  starts: cold {sorted(set(fig['cold_kinds']))}, warm {sorted(set(fig['restored_kinds']))}")
    print(f"  restored vs cold: {med['cold_s'] / med['restored_s']:.1f}x faster; "
          f"cold vs plain boot: {med['cold_s'] / med['plain_boot_s']:.2f}x the time")
    print(f"  idle guest: PSS {per_vm_kb / 1024:.1f} MiB (RSS "
          f"{statistics.median(fig['density_rss_kb']) / 1024:.1f} MiB), MemAvailable drop "
          f"{fig['density_memavail_drop_kb'] / 1024:.1f} MiB per guest; "
          f"{int(fig['mem_available_kb'] / max(per_vm_kb, 1))} more would fit in what is "
          f"available ({fig['mem_available_kb'] / 1024 / 1024:.1f} GiB)")
    print("  peer: " + " ".join(argv))
    fig["medians"] = med
    if a.json:
        a.json.write_text(json.dumps(fig, indent=1))


if __name__ == "__main__":
    main()
