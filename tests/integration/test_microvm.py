"""The microvm backend beyond the shared contract (test_sdk.py runs that on
it): a kernel of its own, how it started and on what accelerator, what of
the host it cannot see, bad input refused at create, a guest that dies or
floods its channel, pause, and a crashed corrald's guests.

Under TCG here (this machine has no vmx/svm): each sandbox is restored from
a template of its shape, booted once per daemon."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

import corral
from conftest import (BACKENDS, BUILD, MICROVM, MICROVM_READY, SMALL, VM_READY, need_debian,
                      sized, wait_for)
from test_network import lab_corrald  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(
    not MICROVM_READY,
    reason=f"no microvm guest in {MICROVM}: `make microvm-guest` builds it (it needs the "
    "kernel apt fetches)")


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_its_own_kernel_accelerator_and_start(client):
    with client.create(backend="microvm", **SMALL) as sb:
        kernel = sb.exec("uname -r").stdout.decode().strip()
        assert kernel and kernel != os.uname().release
        info = sb.inspect()
        vm = info["microvm"]
        assert vm["kernel"] == kernel  # what the agent said in its HELLO
        assert vm["start"] == "restored" and vm["attempts"] == 1
        hw = any(f in Path("/proc/cpuinfo").read_text() for f in (" vmx", " svm"))
        assert vm["accel"] == ("kvm" if hw and os.access("/dev/kvm", os.W_OK) else "tcg")
        if vm["accel"] == "tcg":
            assert "tcg" in vm["warning"]
        assert sb.exec("hostname").stdout.decode().strip() == sb.id
        # its /etc as every backend's (lib/core/etc.c), whatever the image holds
        assert sb.exec("cat /etc/hostname").stdout == f"{sb.id}\n".encode()
        hosts = sb.exec("cat /etc/hosts").stdout.decode()
        assert "localhost" in hosts and sb.id in hosts
        # QEMU runs as the slot's uid, not root, in the sandbox's cgroup
        status = Path(f"/proc/{vm['qemu_pid']}/status").read_text()
        uid = int(next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1])
        assert uid == vm["uid"] and uid != 0
        assert "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status


def test_no_network_device_and_nothing_of_the_host(client, tmp_path):
    marker = f"host-secret-{uuid.uuid4().hex}"
    (tmp_path / marker).write_text("x")
    with client.create(backend="microvm", **SMALL) as sb:
        assert sb.exec("ls /sys/class/net").stdout.split() == [b"lo"]
        found = sb.exec(["find", "/", "-xdev", "-name", marker]).stdout
        assert found == b""  # the pattern is in find's own command line, not in what it found
        procs = sb.exec("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").stdout
        assert b"corrald" not in procs and b"pytest" not in procs
        assert sb.exec("cat /proc/1/cmdline").stdout.startswith(b"/init")


def test_a_network_device_when_the_policy_gives_one(lab_corrald):
    """With a network the guest has eth0, with the address and route of the
    sandbox's link (test_network.py runs the policy tests on it); without,
    none, and none to give it later.  Each kind has its own template.  (In
    the lab's network namespace, as every test of a link: netlab.py.)"""
    corrald = lab_corrald
    with corrald.client() as c:
        with c.create(backend="microvm", network={"mode": "allow"}, **SMALL) as sb:
            net = sb.inspect()["microvm"]["network"]
            assert sorted(sb.exec("ls /sys/class/net").stdout.split()) == [b"eth0", b"lo"]
            addr = sb.exec("ip -o -4 addr show eth0").stdout.decode()
            assert f"inet {net['address']}/30" in addr, addr
            assert f"default via {net['gateway']}" in sb.exec("ip route").stdout.decode()
            with sb.fork() as f:  # a fork gets its own link, not its source's
                assert f.inspect()["microvm"]["network"]["address"] != net["address"]
        with c.create(backend="microvm", **SMALL) as sb:
            with pytest.raises(corral.Conflict, match="no device"):
                sb.set_network("allow")
        shapes = {(t["memory_mb"], t["nic"]) for t in
                  corrald.request("GET", "/v1/host").json()["backend_info"]["microvm"]["templates"]}
        assert {(SMALL["memory_mb"], True), (SMALL["memory_mb"], False)} <= shapes


def test_bad_input_is_refused_at_create(client):
    with pytest.raises(corral.InvalidSpec, match="at least 96"):
        client.create(backend="microvm", memory_mb=64, cpus=0.25)


def test_a_missing_kernel_is_a_clear_error(corrald_factory):
    d = corrald_factory(["--microvm-kernel", "/nonexistent/vmlinuz"])
    with d.client() as c:
        with pytest.raises(corral.Unsupported, match="/nonexistent/vmlinuz"):
            c.create(backend="microvm", **SMALL)
        with c.create(**SMALL) as sb:  # the other backends are unaffected
            assert sb.exec("echo ok").stdout == b"ok\n"


@pytest.fixture
def state_dir():
    """A state directory of the test's own, gone after the daemon using it."""
    d = Path(tempfile.mkdtemp(prefix="corral-setup-", dir="/tmp"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_corral_setup_puts_the_guest_where_corrald_looks(state_dir, corrald_factory):
    # the kernel apt fetched for `make microvm-guest` is in the cache: no download.
    # A guest's agent is the plain build's (the sanitizer build's is dynamic).
    plain = MICROVM.parent
    agent = [] if BUILD == plain else ["--agent", str(plain / "corral-agent")]
    r = subprocess.run([str(BUILD / "corral"), "setup", "microvm", "--state", str(state_dir),
                        *agent], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    guest = state_dir / "microvm"
    # the same files `make microvm-guest` made (the initramfs is reproducible)
    for name in ("vmlinuz", "initrd.cpio", "kernel.manifest"):
        assert (guest / name).read_bytes() == (MICROVM / name).read_bytes(), name
    assert not [p.name for p in guest.iterdir() if p.name.endswith(".tmp")]
    version = dict(line.split("=", 1) for line in
                   (guest / "kernel.manifest").read_text().splitlines())["version"]
    d = corrald_factory(state_dir=state_dir, microvm_args=False)  # no --microvm-kernel
    with d.client() as c:
        assert c.host()["backend_info"]["microvm"]["kernel"] == str(guest / "vmlinuz")
        with c.create(backend="microvm", **SMALL) as sb:
            assert sb.exec("uname -r").stdout.decode().strip() == version
    r = subprocess.run([str(BUILD / "corral"), "setup", "microvm", "--state", str(state_dir),
                        "--agent", str(state_dir / "no-agent")], capture_output=True)
    assert r.returncode == 1 and b"no-agent" in r.stderr


@pytest.mark.skipif(" vmx" in Path("/proc/cpuinfo").read_text() or
                    " svm" in Path("/proc/cpuinfo").read_text(),
                    reason="this CPU has hardware virtualisation: kvm is no error here")
def test_kvm_asked_without_hardware_virtualisation():
    base = Path(tempfile.mkdtemp(prefix="corral-kvm-"))
    try:
        base.chmod(0o755)  # corrald wants a state dir its sandboxes can reach
        r = subprocess.run([str(BUILD / "corrald"), "--state", str(base / "s"),
                            "--socket", str(base / "sock"), "--cgroup-parent",
                            f"corral-test-kvm-{uuid.uuid4().hex[:8]}", "--microvm-accel", "kvm"],
                           capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert r.returncode != 0, r.stderr
    assert "--microvm-accel kvm" in r.stderr and "vmx" in r.stderr, r.stderr


def test_a_guest_that_panics_fails_alone(client):
    with client.create(backend="microvm", **SMALL) as bystander, \
            client.create(backend="microvm", **SMALL) as sb:
        qemu = sb.inspect()["microvm"]["qemu_pid"]
        try:
            sb.exec("echo c > /proc/sysrq-trigger", timeout=20)
        except corral.Error:
            pass  # the exec may end with its sandbox
        info = wait_for(lambda: sb.inspect()["state"] == "failed" and sb.info, timeout=30,
                        what="the panicked guest's sandbox to fail")
        assert info["end_reason"] in ("guest_exited", "guest_panicked", "vm_exited")
        assert "guest" in info["message"] or "QEMU" in info["message"]
        wait_for(lambda: not alive(qemu), what="its QEMU to be gone")
        assert bystander.exec("echo fine").stdout == b"fine\n"
        with pytest.raises(corral.Conflict):
            sb.exec("true")


def hwm_kb(pid):
    """The process's peak RSS since its last reset (clear_refs 5)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def test_a_flood_of_output_is_bounded(corrald, any_sandbox_microvm):
    # corrald takes the guest's output only as the exec's pipe does: 20 MB
    # through it move its peak RSS by far less than that
    sb = any_sandbox_microvm
    Path(f"/proc/{corrald.pid}/clear_refs").write_text("5")
    before = hwm_kb(corrald.pid)
    r = sb.exec("head -c 20000000 /dev/zero", max_output_bytes=1000, timeout=120)
    assert r.exit_code == 0 and r.stdout_truncated and len(r.stdout) == 1000
    assert hwm_kb(corrald.pid) - before < 6 * 1024
    assert sb.exec("echo after").stdout == b"after\n"


@pytest.fixture(params=[b for b in BACKENDS if b != "container"])
def any_sandbox_microvm(client, request):
    """A guest of each backend on the microvm backend's code."""
    if request.param == "vm" and not VM_READY:
        pytest.skip("no debian-vm image: `make images` builds it")
    with client.create(**sized(request.param)) as sb:
        yield sb


def test_pause_stops_the_guest(corrald, any_sandbox_microvm):
    sb = any_sandbox_microvm
    # the count replaces /tmp/n whole (a reader never sees it empty)
    sb.exec("sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; "
            "sleep 0.02; done' >/dev/null 2>&1 </dev/null &")
    time.sleep(0.5)
    r = corrald.request("POST", f"/v1/sandboxes/{sb.id}/pause")
    assert r.status == 200, r.body
    a = sb.inspect()["usage"]["cpu_s"]  # inspect does not resume it
    time.sleep(1.0)
    assert sb.inspect()["state"] == "paused"
    assert sb.inspect()["usage"]["cpu_s"] == a  # QEMU, vCPUs and all, is frozen
    n1 = int(sb.files.read("/tmp/n"))  # a call resumes it
    assert sb.inspect()["state"] == "ready"
    time.sleep(0.5)
    assert int(sb.files.read("/tmp/n")) > n1


def test_a_crashed_corrald_takes_its_guests_along(corrald_factory):
    d = corrald_factory()
    with d.client() as c:
        sb = c.create(backend="microvm", **SMALL)
        qemu = sb.inspect()["microvm"]["qemu_pid"]
        assert alive(qemu)
    d.kill()
    wait_for(lambda: not alive(qemu), timeout=10, what="QEMU to die with its corrald")
    d.start()
    with d.client() as c:
        with c.create(backend="microvm", **SMALL) as again:
            assert again.exec("echo back").stdout == b"back\n"


def test_the_cli_creates_inspects_and_runs_in_one(corrald):
    from test_cli import corral as cli  # the CLI as a user runs it
    r = cli(corrald, "create", "--backend", "microvm", "--memory-mb", "128")
    assert r.returncode == 0, r.stderr
    sb_id = r.stdout.decode().strip()
    try:
        shown = cli(corrald, "inspect", sb_id).stdout.decode()
        assert "backend:   microvm" in shown and "restored in" in shown, shown
        r = cli(corrald, "exec", sb_id, "--", "uname", "-r")
        assert r.returncode == 0 and r.stdout.decode().strip() != os.uname().release
    finally:
        cli(corrald, "rm", sb_id)


def test_trajectory_steps_without_checkpoints(corrald):
    """A microvm's steps are recorded (checkpoint "none": the state after a
    step that changes it is not known); a resume fast-forwards through
    them.  (With checkpoints: test_trajectory.py, on each backend.)"""
    from test_trajectory import create, destroy, exec_, tid
    d, traj = corrald, tid()
    sid = create(d, traj, checkpoint="none", backend="microvm")
    assert exec_(d, sid, "echo a > /tmp/a")["step"] == 1
    assert exec_(d, sid, "cat /tmp/a")["stdout"] == "a\n"
    steps = d.request("GET", f"/v1/trajectories/{traj}").json()["steps"]
    assert [s["known"] for s in steps] == [False, False]
    destroy(d, sid)
    sid = create(d, traj, checkpoint="none", backend="microvm")
    assert exec_(d, sid, "echo a > /tmp/a")["replayed"] is True
    destroy(d, sid)


def test_a_layered_image_stacks_as_in_a_container(iclient, tree_image, built):
    """umoci's image (tests/integration/images_common.py): several layers with
    whiteouts, an opaque directory, hard links, a setuid file, xattrs; its
    EROFS layers behind the guest's disks, stacked by the agent's overlay,
    give the tree the OCI rules say, as in a container."""
    from images_common import TAG, check_tree
    with iclient.create(backend="microvm", image=f"tree:{TAG}", **SMALL) as sb:
        assert sb.inspect()["microvm"]["start"] == "restored"
        check_tree(sb, built)


HOSTILE = MICROVM / "hostile.cpio"
# tests/microvm/hostile_agent.c: what its guest does instead of READY (the
# CONFIG's disk_mb % 6 picks it), and what the host's error must say.
MISDEEDS = [(0, "over the 1 MiB limit"), (1, "type 99|unknown"), (2, "stream 7"),
            (3, "HELLO"), (4, "PONG"), (5, ".")]


@pytest.mark.skipif(not HOSTILE.is_file(), reason=f"no {HOSTILE}: `make microvm-guest` builds it")
def test_a_guest_that_breaks_the_protocol_is_killed_and_named(corrald_factory):
    import re
    from concurrent.futures import ThreadPoolExecutor
    d = corrald_factory(["--microvm-initrd", str(HOSTILE)])

    def misbehave(how):
        # each its own template (disk_mb picks the misdeed), all at once; a
        # whole CPU each, for the cold boot that follows a failed restore
        # (at SMALL's quarter of one, six of them under TCG outran the
        # client's 60 s in CI)
        with d.client() as c:
            try:
                c.create(backend="microvm", disk_mb=600 + how, **{**SMALL, "cpus": 1})
            except corral.InternalError as e:
                return str(e)
        return "created"
    with d.client() as c, c.create(**SMALL) as bystander:
        with ThreadPoolExecutor(len(MISDEEDS)) as pool:
            msgs = list(pool.map(misbehave, [how for how, _ in MISDEEDS]))
            assert bystander.exec("echo fine").stdout == b"fine\n"
        for (how, words), msg in zip(MISDEEDS, msgs):
            assert "did not start" in msg and re.search(words, msg), (how, msg)
        assert bystander.exec("echo fine").stdout == b"fine\n"
        assert not [s for s in d.live_sandboxes() if s["backend"] == "microvm"]
    assert d.proc.poll() is None
    log = d.log()
    assert "agent_protocol" in log and "agent_flood" in log


def test_the_host_tells_an_operator_about_microvms(corrald_factory):
    d = corrald_factory(["--template-cache", ""])  # none: its template is booted
    with d.client() as c:
        with c.create(backend="microvm", **SMALL):
            pass
        with c.create(backend="microvm", **SMALL) as sb:
            assert sb.inspect()["microvm"]["start"] == "restored"
    vm = d.request("GET", "/v1/host").json()["backend_info"]["microvm"]
    assert vm["accel"] in ("kvm", "tcg") and vm["template_builds"] == 1
    assert vm["restores"] == 2 and vm["cold_boots"] == 0 and vm["start_failures"] == 0
    [t] = vm["templates"]
    assert (t["memory_mb"], t["state"], t["restores"]) == (SMALL["memory_mb"], "ready", 2)
    assert 0 < t["state_bytes"] < 1 << 20 and t["ram_bytes"] > 0  # the RAM is shared, not saved
    metrics = d.request("GET", "/metrics").body.decode()
    assert "corral_microvm_restores_total 2" in metrics
    from test_cli import corral as cli
    shown = cli(d, "host").stdout.decode()
    assert "2 restored, 0 booted cold, 1 templates built" in shown, shown


def test_a_restarted_corrald_restores_from_its_template_cache(corrald_factory, tmp_path):
    cache = tmp_path / "templates"
    d = corrald_factory(["--template-cache", str(cache)])

    def counts():
        vm = d.request("GET", "/v1/host").json()["backend_info"]["microvm"]
        return vm["template_builds"], vm["template_loads"]

    with d.client() as c, c.create(backend="microvm", **SMALL) as sb:
        assert sb.exec("echo built").stdout == b"built\n"
    assert counts() == (1, 0)
    [meta] = cache.glob("*.json")
    entry = json.loads(meta.read_text())
    assert entry["hello"]["kernel"] and entry["ram_bytes"] == SMALL["memory_mb"] << 20
    d.stop()
    d.start()
    with d.client() as c, c.create(backend="microvm", **SMALL) as sb:
        assert sb.inspect()["microvm"]["start"] == "restored"
        assert sb.exec("echo loaded").stdout == b"loaded\n"
    assert counts() == (0, 1)
    # an entry whose files do not check is ignored: the template is built again
    d.stop()
    ram = cache / f"{meta.stem}-{entry['boot']}.ram"
    with open(ram, "r+b") as f:
        f.truncate(4096)
    d.start()
    with d.client() as c, c.create(backend="microvm", **SMALL) as sb:
        assert sb.exec("echo rebuilt").stdout == b"rebuilt\n"
    assert counts() == (1, 0)
    assert "is missing or of another size" in d.log()
    assert json.loads(meta.read_text())["boot"] != entry["boot"]  # saved anew
    assert not ram.exists()  # the old boot's files went with it


# ---- checkpoints: the guest's writable layer, taken through its agent ----

LAYER_SCRIPT = r"""
set -e
mkdir -p /srv/d && echo deep > /srv/d/f
echo mine > /root/owned && chown 1000:1001 /root/owned && chmod 4750 /root/owned
ln -s /srv/d/f /root/link && ln /srv/d/f /srv/hard
rm -rf /etc/apt && mkdir /etc/apt && echo only > /etc/apt/new
rm /etc/debian_version
echo not-a-whiteout > /etc/.wh.passwd
mkfifo /srv/fifo
"""

CHECK_SCRIPT = r"""
cat /srv/d/f /srv/hard; stat -c '%u:%g %a' /root/owned; readlink /root/link
ls -A /etc/apt; cat /etc/apt/new; test -e /etc/debian_version || echo no-version
test -s /etc/passwd && echo passwd-kept; test -e /etc/.wh.passwd || echo no-wh-name
test -e /srv/fifo || echo no-fifo
cat /etc/hostname
"""


@need_debian
def test_a_checkpoint_carries_the_guests_changes_and_nothing_of_its_own(client):
    with client.create(backend="microvm", image="debian", **SMALL) as sb:
        r = sb.exec(["sh", "-c", LAYER_SCRIPT])
        assert r.exit_code == 0, r.stderr
        snap = sb.snapshot()
        stats = snap["stats"]
        assert stats["removed"] == 1 and stats["changed"] >= 8, stats
        assert sb.snapshot()["checkpoint"] == snap["checkpoint"]  # nothing changed since
        sb.exec("echo later > /srv/d/f")
        with sb.fork(checkpoint=snap["checkpoint"]) as f:
            assert f.inspect()["backend"] == "microvm"
            out = f.exec(["sh", "-c", CHECK_SCRIPT]).stdout.decode().split("\n")
            assert out[:11] == ["deep", "deep", "1000:1001 4750", "/srv/d/f", "new", "only",
                                "no-version", "passwd-kept", "no-wh-name", "no-fifo",
                                f.id], out  # its own hostname: /etc's files are no change
        with sb.fork() as now:
            assert now.exec("cat /srv/d/f").stdout == b"later\n"


def test_a_paused_microvm_is_checkpointed_once_resumed(client):
    with client.create(backend="microvm", **SMALL) as sb:
        sb.exec("echo x > /root/x")
        before = sb.snapshot()["checkpoint"]
        sb.pause()
        assert sb.snapshot()["checkpoint"] == before  # a call resumes it first
        assert sb.inspect()["state"] == "ready"
