"""The vm backend beyond the shared contract (test_sdk.py and the other
contract tests run that on it too): a whole Debian system, systemd its PID 1,
restored from a template of its image and shape; what only a full system
gives (services, users, kernel modules, a package manager); its disk, a
qcow2 overlay of the template's; bad input, a template that cannot boot, and
a crashed corrald.

Under TCG here (no vmx/svm): the template is a boot of systemd, once per
daemon, image and shape (conftest.VM_SHAPE); every sandbox restores it."""

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

import corral
from conftest import MICROVM, SANITIZED, TEMPLATE_CACHE, VM_READY, VM_SHAPE, sized, wait_for
from images_common import post_image
from netlab import WEB
from test_microvm import alive
from test_network import lab_corrald  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(
    not VM_READY,
    reason=f"no vm guest: `make microvm-guest` ({MICROVM}) and `make images` (debian-vm) "
    "build it (they need the kernel and packages apt fetches)")

VM = sized("vm")


def sh(sb, cmd, timeout=60):
    r = sb.exec(["sh", "-c", cmd], timeout=timeout)
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout.decode()


@pytest.fixture
def vm(client):
    with client.create(**VM) as sb:
        yield sb


def test_a_whole_system_restored_from_its_template(client, vm):
    info = vm.inspect()["vm"]
    assert info["machine"] == "q35" and info["start"] == "restored" and info["attempts"] == 1
    assert info["template"].startswith("vm-") and info["accel"] in ("kvm", "tcg")
    # systemd is PID 1, the system is up, the agent one of its services
    assert sh(vm, "cat /proc/1/comm") == "systemd\n"
    assert sh(vm, "systemctl is-system-running") == "running\n"
    assert sh(vm, "systemctl is-active corral-agent") == "active\n"
    assert sh(vm, "uname -r").strip() == info["kernel"]
    # its own identity, not the template's: name, machine-id
    assert sh(vm, "hostname") == f"{vm.id}\n" and sh(vm, "cat /etc/hostname") == f"{vm.id}\n"
    ids = {sh(vm, "cat /etc/machine-id").strip()}
    with client.create(**VM) as other:
        assert other.inspect()["vm"]["template"] == info["template"]  # one boot, two clones
        ids.add(sh(other, "cat /etc/machine-id").strip())
        # what one clone writes, the other does not see
        sh(vm, "echo mine > /root/only-here")
        assert other.exec("cat /root/only-here").exit_code != 0
    assert len(ids) == 2 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    # QEMU runs as the slot's uid, not root, with no new privileges
    status = Path(f"/proc/{info['qemu_pid']}/status").read_text()
    uid = int(next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1])
    assert uid == info["uid"] and uid != 0 and "NoNewPrivs:\t1" in status


def test_a_service_started_with_systemctl_is_reached_from_inside(vm):
    sh(vm, "printf '[Service]\\nExecStart=/usr/bin/python3 -m http.server 8080 "
           "--bind 127.0.0.1 --directory /srv\\n' > /etc/systemd/system/web.service && "
           "echo served > /srv/index.txt && systemctl daemon-reload && systemctl start web")
    assert sh(vm, "systemctl is-active web") == "active\n"
    get = ("import urllib.request, time\n"
           "for i in range(100):\n"
           "    try:\n"
           "        print(urllib.request.urlopen('http://127.0.0.1:8080/index.txt').read()"
           ".decode(), end=''); break\n"
           "    except OSError: time.sleep(0.2)\n")
    assert vm.exec(["python3", "-c", get], timeout=60).stdout == b"served\n"
    sh(vm, "systemctl stop web")
    assert vm.exec("systemctl is-active web").stdout == b"inactive\n"


def test_a_user_added_with_useradd_is_used_with_su(vm):
    sh(vm, "useradd -m -s /bin/bash alice")
    assert sh(vm, "su alice -c 'id -un; echo $HOME; touch ~/mine; stat -c %U ~/mine'") == \
        "alice\n/home/alice\nalice\n"
    assert vm.exec(["su", "alice", "-c", "touch /root/x"]).exit_code != 0  # not root's


def test_a_kernel_module_of_the_images_kernel_loads(vm):
    sh(vm, "modprobe dummy && ip link add d0 type dummy")
    assert "d0" in sh(vm, "ip -br link show d0")
    assert "dummy" in sh(vm, "lsmod")


def overlay(sb):
    """A VM's disk, as qemu-img reads it: its overlay's path and its info."""
    disk = Path(sb.inspect()["vm"]["disk"])
    return disk, json.loads(subprocess.run(["qemu-img", "info", "-U", "--output=json", str(disk)],
                                           capture_output=True, check=True).stdout)


def test_its_disk_is_an_overlay_of_the_templates_gone_at_destroy(corrald, client):
    with client.create(**VM) as sb:
        disk, info = overlay(sb)
        base = Path(info["backing-filename"])
        assert info["format"] == "qcow2" and info["backing-filename-format"] == "raw"
        # the template's disk: built by this daemon, or loaded from the template cache
        assert base.name == sb.inspect()["vm"]["template"] + ".disk" and \
            base.parent == disk.parent or base.parent == TEMPLATE_CACHE.resolve()
        base_mtime, small = base.stat().st_mtime_ns, disk.stat().st_size
        sh(sb, "dd if=/dev/urandom of=/root/blob bs=1M count=16 2>/dev/null && sync")
        wait_for(lambda: disk.stat().st_size >= small + (16 << 20), timeout=30,
                 what="the overlay to take the guest's writes")
        assert base.stat().st_mtime_ns == base_mtime  # the template's disk is never written
        assert sb.inspect()["usage"]["disk_bytes"] >= 16 << 20
    assert not disk.exists()
    assert base.exists()  # the next clone's backing


def test_a_damaged_template_disk_is_a_clear_error_then_built_again(corrald, client):
    with client.create(**VM) as sb:
        name = sb.inspect()["vm"]["template"]
        base = Path(overlay(sb)[1]["backing-filename"])  # built here or from the cache
    with open(base, "r+b") as f:  # the ext4 superblock's magic
        f.seek(1080)
        f.write(b"\0\0")
    with pytest.raises(corral.InternalError, match=f"template {name}'s disk .* is damaged"):
        client.create(**VM)
    run = Path(corrald.state_dir) / "run" / "vm"
    assert not base.exists() and not list(run.glob("*.qcow2"))
    with client.create(**VM) as sb:  # a template of its kind is booted again
        assert sb.inspect()["vm"]["template"] == name
        assert sb.exec("systemctl is-system-running").stdout == b"running\n"
        assert Path(overlay(sb)[1]["backing-filename"]).exists()
    info = corrald.request("GET", "/v1/host").json()["backend_info"]["vm"]
    assert [t for t in info["templates"] if t["name"] == name][0]["from_cache"] is False


def test_bad_input_is_refused_at_create(client):
    with pytest.raises(corral.InvalidSpec, match="at least 256"):
        client.create(**{**VM, "memory_mb": 128})
    with pytest.raises(corral.InvalidSpec, match="build-vm"):
        client.create(backend="vm", image="busybox", memory_mb=512)


def no_init_image(d):
    """An image of kind vm with nothing to boot: no /sbin/init."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        for name in ("etc", "sbin"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            t.addfile(info)
        data = b"no init here\n"
        info = tarfile.TarInfo("etc/motd")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    layer = layer.getvalue()
    diff = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Labels": {"org.corral.kind": "vm"}, "Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers", "diff_ids": [diff]}}).encode()
    name = f"noinit-{uuid.uuid4().hex[:8]}"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as t:
        for fname, data in (("layer.tar", layer), ("config.json", config),
                            ("manifest.json", json.dumps([{
                                "Config": "config.json", "RepoTags": [f"{name}:latest"],
                                "Layers": ["layer.tar"]}]).encode())):
            info = tarfile.TarInfo(fname)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    r = post_image(d, archive.getvalue(), name=name)
    assert r.status in (200, 201), r
    assert r.json()["kind"] == "vm"
    return name


def test_a_template_that_cannot_boot_is_reported_and_leaves_nothing(corrald, client):
    name = no_init_image(corrald)
    t0 = time.monotonic()
    with pytest.raises(corral.errors.Error, match="no init at /sbin/init"):
        client.create(backend="vm", image=name, memory_mb=VM_SHAPE["memory_mb"])
    assert time.monotonic() - t0 < 120
    # the operator sees it too, and nothing of it is left on disk
    templates = corrald.request("GET", "/v1/host").json()["backend_info"]["vm"]["templates"]
    mine = [t for t in templates if t.get("image") == f"{name}:latest"]
    assert mine and mine[0]["state"] == "failed" and "no init" in mine[0]["error"]
    run = Path(corrald.state_dir) / "run" / "vm"
    assert not list(run.glob(f"{mine[0]['name']}*")), list(run.iterdir())
    assert not list(run.glob("*.qcow2")) or all(
        p.name.split(".")[0] in {s.id for s in client.list()} for p in run.glob("*.qcow2"))


def test_another_corrald_restores_from_the_template_cache(client, corrald_factory):
    """A template saved by one corrald (the shared one: its cache is every
    test daemon's) is restored by the next without a boot."""
    with client.create(**VM) as sb:
        name = sb.inspect()["vm"]["template"]
    d = corrald_factory()
    with d.client() as c, c.create(**VM) as sb:
        assert sb.inspect()["vm"]["template"] == name
        assert sb.exec("systemctl is-system-running").stdout == b"running\n"
    info = d.request("GET", "/v1/host").json()["backend_info"]["vm"]
    assert (info["template_loads"], info["template_builds"]) == (1, 0)
    [t] = [t for t in info["templates"] if t["name"] == name]
    assert t["from_cache"] and t["state"] == "ready" and t["restores"] == 1
    assert "corral_vm_template_loads_total 1" in d.request("GET", "/metrics").body.decode()


def test_a_crashed_corrald_leaves_no_qemu_or_overlay(corrald_factory):
    d = corrald_factory()
    with d.client() as c:
        sb = c.create(**VM)
        info = sb.inspect()["vm"]
        qemu, disk = info["qemu_pid"], Path(info["disk"])
        assert alive(qemu) and disk.exists()
    d.kill()
    wait_for(lambda: not alive(qemu), timeout=10, what="QEMU to die with its corrald")
    d.start()
    run = Path(d.state_dir) / "run" / "vm"
    assert not disk.exists()
    assert not [p for p in run.iterdir() if p.suffix in (".qcow2", ".disk", ".state")]


# ---- a package manager, with a mirror in the lab's internet ----

MIRROR = "198.51.100.80"  # on the lab's internet side, beside its web servers


def hello_deb(tmp):
    """A one-file Debian package, and a flat repository of it."""
    root = tmp / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        "Package: corral-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: Corral <t@t>\n"
        "Description: a package from the lab's mirror\n")
    exe = root / "usr/bin/corral-hello"
    exe.write_text("#!/bin/sh\necho hello from the lab mirror\n")
    exe.chmod(0o755)
    repo = tmp / "repo"
    repo.mkdir()
    deb = repo / "corral-hello_1.0_all.deb"
    subprocess.run(["dpkg-deb", "-Zgzip", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    data = deb.read_bytes()
    (repo / "Packages").write_text(
        (root / "DEBIAN/control").read_text() + f"Filename: ./{deb.name}\nSize: {len(data)}\n"
        f"SHA256: {hashlib.sha256(data).hexdigest()}\n\n")
    return repo


@pytest.mark.skipif(SANITIZED, reason="apt in a guest under emulation takes minutes and tests "
                    "the guest, not corrald: the plain build's run has it")
def test_a_package_installs_from_a_mirror_the_policy_allows(lab_corrald, netlab, tmp_path):
    repo = hello_deb(tmp_path)
    subprocess.run(["ip", "-n", netlab.inet, "addr", "add", f"{MIRROR}/32", "dev", "lo"],
                   check=True)
    server = netlab.run_in_inet(["python3", "-m", "http.server", "80", "--bind", MIRROR,
                                 "--directory", str(repo)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        netlab.set_zone({"deb.example": [MIRROR], "web.example": [WEB[0]]})
        with lab_corrald.client() as c, \
                c.create(**VM, network={"mode": "allow", "allow": ["deb.example:80"]}) as sb:
            assert sorted(sh(sb, "ls /sys/class/net").split()) == ["eth0", "lo"]
            sh(sb, "rm -rf /etc/apt/sources.list.d/* && echo 'deb [trusted=yes] "
                   "http://deb.example/ ./' > /etc/apt/sources.list")
            sh(sb, "apt-get update -q && apt-get install -y -q corral-hello", timeout=300)
            assert sh(sb, "corral-hello") == "hello from the lab mirror\n"
            # what the policy does not allow stays out of reach
            r = sb.exec(["python3", "-c", "import urllib.request as u; "
                         "u.urlopen('http://web.example/', timeout=5)"], timeout=60)
            assert r.exit_code != 0
    finally:
        server.kill()
        server.wait()
        subprocess.run(["ip", "-n", netlab.inet, "addr", "del", f"{MIRROR}/32", "dev", "lo"])
