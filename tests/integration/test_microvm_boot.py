"""The microvm backend's groundwork (issue 13): Debian's cloud kernel, the
initramfs Corral builds and a QEMU ``-M microvm`` guest boot, answer, save and
restore, under TCG here (KVM only where the CPU has vmx or svm).

The guest's /init is tests/microvm/boot_probe.c: a marker on the console with
its ``uname -r``, then an echo on the virtio-serial port "corral.agent".
scripts/microvm-boot.py drives QEMU (deadline and one retry per attempt) and
reports figures as JSON, which these tests check.

`make check` fetches the kernel first (`make microvm-kernel`); a run without
it fetches it here.  Skipped only when apt cannot fetch the kernel.
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
    reason="nothing here is sanitized (QEMU and a static probe): the plain build's run covers it")


@pytest.fixture(scope="module")
def guest(tmp_path_factory):
    """(kernel dir, its manifest, initramfs): the cached kernel, the probe
    built static and packed into an initramfs of this run's own."""
    r = subprocess.run([SCRIPTS / "microvm-kernel.sh", "--cache", CACHE],
                       capture_output=True, text=True, timeout=600)
    if r.returncode == 2:
        pytest.skip(f"apt cannot fetch the guest kernel: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr
    kdir = r.stdout.strip().splitlines()[-1]
    manifest = dict(line.split("=", 1) for line in
                    open(os.path.join(kdir, "manifest")).read().splitlines() if "=" in line)
    d = tmp_path_factory.mktemp("microvm")
    probe = d / "boot_probe"
    subprocess.run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
                    "-static", "-o", probe, REPO / "tests" / "microvm" / "boot_probe.c",
                    REPO / "lib" / "guest" / "boot.c"],
                   check=True)
    initrd = d / "initramfs.cpio"
    subprocess.run([SCRIPTS / "microvm-initramfs.sh", "--kernel-dir", kdir, "--init", probe,
                    "--out", initrd], check=True)
    return kdir, manifest, initrd


def run_modes(guest, tmp_path, mode):
    kdir, _, initrd = guest
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, SCRIPTS / "microvm-boot.py", "--kernel-dir", kdir,
                        "--initrd", initrd, "--mode", mode, "--json", out, "--rss-wait", "0.2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    fig = json.loads(out.read_text())
    assert fig["ok"], fig
    return fig


def test_boot_save_restore(guest, tmp_path):
    """One boot to the marker and an echo, saved to a migration file, then a
    fresh QEMU restored from it answers the echo (three lines, one after a
    pause for its RSS)."""
    _, manifest, _ = guest
    fig = run_modes(guest, tmp_path, "restore")
    assert fig["accel"] in ("tcg", "kvm")
    save = fig["results"]["save"][0]
    release = save["probe"].split("release=")[1].split()[0]
    assert release == manifest["version"]
    assert release != os.uname().release
    n = len(manifest["modules"].split())
    assert f"modules={n}/{n}" in save["probe"], "a module failed to load"
    assert save["echo_s"] >= save["marker_s"] > 0
    assert save["file_bytes"] > 1 << 20
    restore = fig["results"]["restore"][0]
    # The restore answers without booting: far under a boot's time.
    assert restore["echo_s"] < save["marker_s"]
    assert restore["rss_kb"]["VmRSS"] > 0


def test_restore_shared_ram(guest, tmp_path):
    """Guest RAM in a file saved with x-ignore-shared: the migration file holds
    device state only, and a restore mapping the RAM file copy-on-write
    answers the echo."""
    fig = run_modes(guest, tmp_path, "restore-shared")
    save = fig["results"]["save-shared"][0]
    assert save["file_bytes"] < 1 << 20 < save["ram_file_bytes"]
    assert fig["results"]["restore-shared"][0]["echo_s"] < save["marker_s"]
