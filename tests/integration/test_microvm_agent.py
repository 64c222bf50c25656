"""corral-agent as a microVM's PID 1 (issue 13), under TCG here: the guest
boots from Corral's initramfs with build/corral-agent as /init, says HELLO
on the virtio-serial port, takes a CONFIG that stacks an EROFS layer (busybox)
under a tmpfs overlay and moves its root there, answers READY, and runs
``uname -r``, ``echo`` and ``hostname`` through EXEC, puts a file and reads
it back (``cat``, FILE_GET) and reads one of the layer; BYE powers it off.
scripts/microvm-boot.py (mode agent) drives QEMU and the protocol and
reports figures as JSON, which this test checks.  The agent's protocol
itself is tested without a VM by tests/unit/test_agent.c.

Skipped only when apt cannot fetch the kernel.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import BUILD, REPO

SCRIPTS = REPO / "scripts"
CACHE = os.environ.get("CORRAL_MICROVM_CACHE",
                       os.path.expanduser("~/.cache/corral/microvm"))

pytestmark = pytest.mark.skipif(
    BUILD.name == "build-san",
    reason="the guest's agent is the plain build's (static; ASan has no static runtime)")


@pytest.fixture(scope="module")
def agent_initrd(tmp_path_factory):
    """(kernel dir, its manifest, initramfs with corral-agent as /init)."""
    r = subprocess.run([SCRIPTS / "microvm-kernel.sh", "--cache", CACHE],
                       capture_output=True, text=True, timeout=600)
    if r.returncode == 2:
        pytest.skip(f"apt cannot fetch the guest kernel: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr
    kdir = r.stdout.strip().splitlines()[-1]
    manifest = dict(line.split("=", 1) for line in
                    open(os.path.join(kdir, "manifest")).read().splitlines() if "=" in line)
    agent = BUILD / "corral-agent"
    assert agent.exists(), "build corral-agent first (make)"
    initrd = tmp_path_factory.mktemp("microvm-agent") / "initramfs.cpio"
    subprocess.run([SCRIPTS / "microvm-initramfs.sh", "--kernel-dir", kdir, "--init", agent,
                    "--out", initrd], check=True)
    return kdir, manifest, initrd


@pytest.mark.parametrize("disk_mb", [0, 32], ids=["tmpfs-upper", "ext4-disk"])
def test_agent_boot_exec(agent_initrd, tmp_path, disk_mb):
    """Boot to READY, three commands with the right output, a file in and
    out, a few `true` round trips, BYE: the guest powers itself off.  With
    a disk, the writable layer is ext4 on it, and the file put is found in
    the disk's upper dir after the power-off."""
    kdir, manifest, initrd = agent_initrd
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, SCRIPTS / "microvm-boot.py", "--kernel-dir", kdir,
                        "--initrd", initrd, "--mode", "agent", "--execs", "5",
                        "--disk-mb", str(disk_mb),
                        "--json", out],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    fig = json.loads(out.read_text())
    assert fig["ok"], fig
    a = fig["results"]["agent"][0]
    assert a["hello"]["kernel"] == manifest["version"] != os.uname().release
    assert a["hello"]["proto"] == 2
    assert 0 < a["hello_s"] < a["ready_s"]
    assert a["guest_ready_ms"] > 0
    assert 0 < a["exec_rt_s"] < 5


def test_agent_template_restore(agent_initrd, tmp_path):
    """A template saved while its agent waits for CONFIG; a fresh QEMU
    restores it, the host connects before it runs and sends CONFIG at once:
    READY far sooner than a boot, the new hostname, execs."""
    kdir, _, initrd = agent_initrd
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, SCRIPTS / "microvm-boot.py", "--kernel-dir", kdir,
                        "--initrd", initrd, "--mode", "agent-restore", "--execs", "3",
                        "--json", out],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    fig = json.loads(out.read_text())
    assert fig["ok"], fig
    save = fig["results"]["agent-save"][0]
    restore = fig["results"]["agent-restore"][0]
    assert save["file_bytes"] > 1 << 20
    assert 0 < restore["ready_s"] < save["hello_s"]
    assert 0 < restore["exec_rt_s"] < 5
