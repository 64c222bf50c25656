#!/usr/bin/env python3
"""The vm backend's speed and density, in one run, on the debian-vm image
(`make images`) and the guest kernel and initramfs (`make microvm-guest`),
against its peer:

  plain     the peer: qemu-system-x86_64 -M q35 with QEMU's defaults (its
            firmware, option ROMs, devices on PCI), no corrald: the same
            kernel, initramfs and image (its EROFS layer as a virtio disk,
            an ext4 disk for its writes), driven over the agent's port by
            this script (scripts/microvm-boot.py's Agent): HELLO, the CONFIG
            that builds the root and hands it to systemd, and the agent's
            HELLO again once the system is up (what a template's boot is)
  template  corrald's build of the same: boot, systemd up, saved
  restored  a create restored from the template, to READY (the answer)
  overlay   qemu-img create of a clone's qcow2 over the template's disk,
            as corrald makes it (corrald's own figure, from inspect, too)
  exec      the round trip of `true` in a restored VM, through the API
  density   K idle restored VMs: each QEMU's PSS and RSS, and MemAvailable's
            drop per VM

Prints a table, the ratio of the peer's boot to a restore, the accelerator
and the command line of the peer; --json writes the figures.  Needs root
(corrald), and nothing else running QEMU meanwhile."""

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sdk" / "python"))


def load(name, file):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


boot = load("microvm_boot", "microvm-boot.py")  # Agent, Guest
mvm = load("bench_microvm", "bench-microvm.py")  # Daemon, pss_kb, rss_kb, pct, accel


def image_layers(images, name):
    """The EROFS files of an image of the store (top layer first)."""
    rec = (images / "tags" / f"{name}:latest").read_text().strip()
    img = json.loads((images / "images" / f"{rec.split(':')[-1]}.json").read_text())
    return [images / "layers" / f"{l['digest'].split(':')[-1]}.erofs"
            for l in reversed(img["layers"])]


def plain_boot(a, layers, work, deadline_s):
    """The peer, once: seconds from exec to the root's READY and to the
    system's agent's HELLO."""
    disk = work / "disk.ext4"
    disk.unlink(missing_ok=True)
    with open(disk, "wb") as f:
        f.truncate(1024 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(disk)], check=True)
    rd = tempfile.mkdtemp(prefix="plain-", dir=work)
    acc = mvm.accel()
    argv = [a.qemu, "-M", "q35", "-accel", acc, "-m", f"{a.memory_mb}M",
            "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
            "-kernel", str(a.kernel), "-initrd", str(a.initrd),
            "-append", "console=hvc0 panic=-1 corral.port=corral.agent net.ifnames=0"
            + (" tsc_early_khz=2100000" if acc == "tcg" else ""),
            "-chardev", "stdio,id=con,signal=off",
            "-device", "virtio-serial-pci", "-device", "virtconsole,chardev=con",
            "-chardev", f"socket,id=agent,path={rd}/agent.sock,server=on,wait=off",
            "-device", "virtserialport,chardev=agent,name=corral.agent"]
    for l in layers:
        argv += ["-drive", f"file={l},format=raw,if=virtio,readonly=on"]
    argv += ["-drive", f"file={disk},format=raw,if=virtio"]
    g = boot.Guest(argv, rd)
    try:
        deadline = g.t0 + deadline_s
        ag = boot.Agent(g._connect("agent.sock", deadline))
        ag.expect("HELLO", deadline)
        devs = [f"/dev/vd{chr(ord('a') + i)}" for i in range(len(layers))]
        ag.send("CONFIG", 0, {
            "hostname": "plain", "realtime_ns": time.time_ns(),
            "seed": __import__("base64").b64encode(os.urandom(32)).decode(), "layers": devs,
            "disk": f"/dev/vd{chr(ord('a') + len(layers))}", "init": "/sbin/init",
            "machine_id": uuid.uuid4().hex})
        ag.expect("READY", deadline)
        t_root = time.monotonic() - g.t0
        ag.expect("HELLO", deadline)  # the system's agent, systemd up
        return t_root, time.monotonic() - g.t0, argv
    finally:
        g.proc.kill()
        g.proc.wait()
        shutil.rmtree(rd, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", type=Path, default=REPO / "build")
    p.add_argument("--images", type=Path, default=REPO / "build" / "images")
    p.add_argument("--qemu", default="/usr/bin/qemu-system-x86_64")
    p.add_argument("--image", default="debian-vm")
    p.add_argument("--memory-mb", type=int, default=512)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--plain", type=int, default=2, help="peer boots (each tens of seconds)")
    p.add_argument("--density", type=int, default=6, help="idle VMs for the density figure")
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    a.kernel = a.build / "microvm" / "vmlinuz"
    a.initrd = a.build / "microvm" / "initrd.cpio"
    for f in (a.kernel, a.initrd, a.images / "tags" / f"{a.image}:latest"):
        if not f.exists():
            sys.exit(f"bench-vm: no {f}: `make microvm-guest` and `make images` build it")
    work = Path(tempfile.mkdtemp(prefix="corral-bench-vm-"))
    fig = {"accel": mvm.accel(), "image": a.image, "memory_mb": a.memory_mb}
    layers = image_layers(a.images, a.image)

    # the peer
    plain_root, plain_hello = [], []
    for _ in range(a.plain):
        r, h, argv = plain_boot(a, layers, work, 900)
        plain_root.append(r)
        plain_hello.append(h)
    fig["plain_argv"] = argv

    # the overlay, as corrald makes it
    base = work / "base.disk"
    with open(base, "wb") as f:
        f.truncate(1024 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(base)], check=True)
    ov = []
    for i in range(a.iterations):
        t = time.monotonic()
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-u", "-F", "raw", "-b",
                        str(base), str(work / f"c{i}.qcow2"), str(1024 << 20)], check=True)
        ov.append(time.monotonic() - t)

    d = mvm.Daemon(argparse.Namespace(build=a.build, kernel=a.kernel, initrd=a.initrd,
                                      images=a.images), "vm")
    try:
        c = d.client
        spec = dict(backend="vm", image=a.image, memory_mb=a.memory_mb, cpus=1)
        t = time.monotonic()
        c.create(**spec).destroy()  # builds the template
        first = time.monotonic() - t
        tmpl = c.host()["backend_info"]["vm"]["templates"][0]
        lat, disk_ms = [], []
        for _ in range(a.iterations):
            t = time.monotonic()
            sb = c.create(**spec)
            lat.append(time.monotonic() - t)
            info = sb.inspect()["vm"]
            assert info["start"] == "restored", info
            disk_ms.append(info["disk_ms"])
            sb.destroy()
        with c.create(**spec) as sb:
            rts = []
            for _ in range(a.iterations * 5):
                t = time.monotonic()
                assert sb.exec("true").exit_code == 0
                rts.append(time.monotonic() - t)
        before = mvm.mem_available_kb()
        vms = [c.create(**spec) for _ in range(a.density)]
        time.sleep(5)  # idle: what they hold once settled
        pss = [mvm.pss_kb(v.inspect()["vm"]["qemu_pid"]) for v in vms]
        rss = [mvm.rss_kb(v.inspect()["vm"]["qemu_pid"]) for v in vms]
        drop = (before - mvm.mem_available_kb()) / a.density
        for v in vms:
            v.destroy()
    finally:
        d.stop()
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    fig.update({
        "plain_root_s": plain_root, "plain_system_s": plain_hello,
        "template_first_create_s": first, "template": tmpl,
        "restore_s": {"median": med(lat), "p90": mvm.pct(lat, 90), "all": lat},
        "overlay_ms": {"median": med(ov) * 1e3, "p90": mvm.pct(ov, 90) * 1e3},
        "overlay_in_corrald_ms": {"median": med(disk_ms), "p90": mvm.pct(disk_ms, 90)},
        "exec_ms": {"median": med(rts) * 1e3, "p90": mvm.pct(rts, 90) * 1e3},
        "idle_pss_mb": med(pss) / 1024, "idle_rss_mb": med(rss) / 1024,
        "mem_available_drop_mb": drop / 1024,
        "ratio_plain_vs_restore": med(plain_hello) / med(lat),
    })
    print(f"vm backend, {fig['accel']}, image {a.image}, {a.memory_mb} MiB, 1 vCPU")
    print(f"  plain QEMU boot to the system's agent   median {med(plain_hello):8.2f} s  "
          f"(root READY at {med(plain_root):.2f} s; {a.plain} boots)")
    print(f"  corrald's first create (template build)        {first:8.2f} s")
    print(f"  restored create to READY               median {med(lat) * 1e3:8.1f} ms  "
          f"p90 {mvm.pct(lat, 90) * 1e3:.1f} ms")
    print(f"  overlay (qemu-img create -u)           median {med(ov) * 1e3:8.1f} ms  "
          f"(in corrald: {med(disk_ms):.1f} ms)")
    print(f"  exec `true` round trip                 median {med(rts) * 1e3:8.2f} ms  "
          f"p90 {mvm.pct(rts, 90) * 1e3:.2f} ms")
    print(f"  idle VM ({a.density})  PSS {med(pss) / 1024:.1f} MiB  RSS {med(rss) / 1024:.1f} MiB  "
          f"MemAvailable drop {drop / 1024:.1f} MiB each")
    print(f"  ratio: plain boot / restore = {fig['ratio_plain_vs_restore']:.1f}x")
    print("  peer: " + " ".join(argv))
    if a.json:
        a.json.write_text(json.dumps(fig, indent=1))


if __name__ == "__main__":
    main()
