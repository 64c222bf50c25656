"""corral-unpack, which turns the tar a microVM's agent sends of its
writable layer into the tree a checkpoint reads.  The tar comes from the
guest: whatever it holds, nothing is written outside the tree, and a tar
that tries is refused whole (exit status 2, an enum crl_stream_status, and
a line that names the entry).  corrald runs it in a user namespace on a
tmpfs mounted nowhere (lib/backend/microvm/view.c); here it runs as root
on a directory, so that its own checks are what is tested."""

import io
import os
import stat
import subprocess
import tarfile

import pytest

from conftest import BUILD

UNPACK = BUILD / "corral-unpack"
BAD_INPUT, NO_SPACE = 2, 5


def tar_of(*members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def entry(name, kind=tarfile.REGTYPE, data=b"", **attrs):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for k, v in attrs.items():
        setattr(info, k, v)
    return info, data if kind == tarfile.REGTYPE else None


def unpack(tree, data, max_entries=1000):
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return subprocess.run([str(UNPACK), "--max-entries", str(max_entries)], input=data,
                              capture_output=True, timeout=30, close_fds=False,
                              preexec_fn=lambda: os.dup2(fd, 3))
    finally:
        os.close(fd)


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "outside").mkdir()
    t = tmp_path / "tree"
    t.mkdir()
    return t


def test_a_layer_becomes_the_tree_a_checkpoint_reads(tree):
    data = tar_of(entry("etc", tarfile.DIRTYPE, mode=0o755),
                  entry("etc/apt", tarfile.DIRTYPE, mode=0o755),
                  entry("etc/apt/.wh..wh..opq"),
                  entry("etc/.wh.debian_version"),
                  entry("etc/owned", data=b"x", uid=1000, gid=1001, mode=0o4750),
                  entry("etc/link", tarfile.SYMTYPE, linkname="/etc/owned"))
    r = unpack(tree, data)
    assert r.returncode == 0, r.stderr
    wh = os.lstat(tree / "etc/debian_version")
    assert stat.S_ISCHR(wh.st_mode) and wh.st_rdev == 0  # overlayfs' whiteout
    assert os.getxattr(tree / "etc/apt", "user.overlay.opaque") == b"y"
    owned = os.lstat(tree / "etc/owned")
    assert (owned.st_uid, owned.st_gid, stat.S_IMODE(owned.st_mode)) == (1000, 1001, 0o4750)
    assert os.readlink(tree / "etc/link") == "/etc/owned"


@pytest.mark.parametrize("members,words", [
    ([entry("../outside/x", data=b"x")], ".."),
    ([entry("/outside/x", data=b"x")], "absolute|/outside"),
    ([entry("l", tarfile.SYMTYPE, linkname="../outside"), entry("l/x", data=b"x")], "l/x"),
    ([entry("h", tarfile.LNKTYPE, linkname="../outside/y")], "h"),
    ([entry("null", tarfile.CHRTYPE, devmajor=1, devminor=3)], "null"),
    ([entry("fifo", tarfile.FIFOTYPE)], "fifo"),
], ids=["dotdot", "absolute", "through-a-symlink", "hard-link-out", "device", "fifo"])
def test_a_hostile_layer_is_refused_and_writes_nothing_outside(tree, members, words):
    import re
    (tree.parent / "outside" / "y").write_text("keep")
    r = unpack(tree, tar_of(*members))
    assert r.returncode == BAD_INPUT, (r.returncode, r.stderr)
    assert re.search(words, r.stderr.decode()), r.stderr
    assert sorted(os.listdir(tree.parent / "outside")) == ["y"]
    assert (tree.parent / "outside" / "y").read_text() == "keep"


def test_garbage_and_too_many_entries_are_refused(tree):
    r = unpack(tree, os.urandom(4096))
    assert r.returncode == BAD_INPUT and b"tar" in r.stderr, r.stderr
    r = unpack(tree, tar_of(*[entry(f"f{i}", data=b"x") for i in range(20)]), max_entries=5)
    assert r.returncode == NO_SPACE, (r.returncode, r.stderr)
    r = subprocess.run([str(UNPACK)], capture_output=True)
    assert r.returncode != 0 and b"usage" in r.stderr
