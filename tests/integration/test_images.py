"""Images (issue 3): OCI and Docker images in corrald's content-addressed store.

Real images are built with tools no one here wrote: umoci makes a multi-layer
OCI layout (a whiteout, a directory replaced wholesale, an opaque directory,
hard links, symlinks, a setuid file, ownership, an xattr, an mtime) and skopeo
turns it into an oci-archive and a docker-archive.  Each form is imported and
the tree is checked from inside a sandbox against what OCI says it must be.
Then the store itself (shared layers, idempotent imports, rm while in use,
tag, gc, restarts and crashes mid-import), archives of several images (a
umoci layout with two tags, a docker-archive of two images, platforms and
nested indexes) from which a ref picks one, and hostile archives built here
in Python, each refused with a message naming the problem and nothing
stored.

The HTTP API is the contract under test (POST/GET/DELETE /v1/images...); the
SDK and the CLI each get a test of their own.  One corrald of this module's
own holds the store (<state>/images) the tests look into.
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import threading
import time
import uuid
from pathlib import Path

import pytest

import corral
from conftest import BUILD, IMAGES, HOST_ARCH, SMALL, start_corrald

CORRAL = BUILD / "corral"
TAG = "v1"
MTIME = 1000000000  # 2001-09-09: /data/old.txt keeps it
XATTR = ("user.corral", b"from-umoci")
MIB = 1 << 20

need_umoci = pytest.mark.skipif(not (shutil.which("umoci") and shutil.which("skopeo")),
                                reason="needs umoci and skopeo (apt-get install umoci skopeo)")


def run(*argv, **kw):
    r = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       **kw)
    assert r.returncode == 0, f"{argv} exited {r.returncode}:\n{r.stderr.decode()}"
    return r.stdout


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# ---- the image umoci builds ----

# A static helper for the one check busybox cannot do: print an xattr, or
# exit with the errno getxattr(2) got.
XATTR_GET_C = r"""
#include <errno.h>
#include <stdio.h>
#include <sys/xattr.h>
int main(int argc, char **argv)
{
    char buf[256];
    if (argc != 3)
        return 100;
    ssize_t n = lgetxattr(argv[1], argv[2], buf, sizeof(buf));
    if (n < 0)
        return errno;
    fwrite(buf, 1, (size_t)n, stdout);
    return 0;
}
"""

PASSWD = ("root:x:0:0:root:/root:/bin/sh\n"
          "app:x:1000:1000:app:/home/app:/bin/sh\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
GROUP = "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n"

# What the image's tree must be, seen from inside a sandbox, under the
# directories the layers touch: path -> (type, mode, uid:gid, content or
# symlink target or None).  Anything not listed must not exist.
EXPECTED_TREE = {
    "/data": ("directory", "755", "0:0", None),
    "/data/keep.txt": ("regular file", "644", "0:0", "keep\n"),
    "/data/modify.txt": ("regular file", "644", "0:0", "layer4\n"),  # layer 4 wins
    "/data/old.txt": ("regular file", "644", "0:0", "old\n"),
    "/data/private": ("regular file", "600", "0:0", "private\n"),
    "/data/xattr.txt": ("regular file", "644", "0:0", "xattr\n"),
    # /data/gone.txt: deleted in layer 2 (a .wh.gone.txt whiteout)
    "/empty": ("directory", "755", "0:0", None),
    "/hl": ("directory", "755", "0:0", None),
    "/hl/a": ("regular file", "644", "0:0", "hard\n"),
    "/hl/b": ("regular file", "644", "0:0", "hard\n"),
    "/home/app": ("directory", "750", "1000:1000", None),
    "/home/app/owned": ("regular file", "640", "1000:1000", "mine\n"),
    # /opq: layer 3 marks it opaque (.wh..wh..opq): old1 and oldsub/ are gone
    "/opq": ("directory", "755", "0:0", None),
    "/opq/new1": ("regular file", "644", "0:0", "new1\n"),
    "/opq/newsub": ("directory", "755", "0:0", None),
    "/opq/newsub/n2": ("regular file", "644", "0:0", "n2\n"),
    # /replaced: removed and made again in layer 2 (umoci writes a whiteout
    # per old entry)
    "/replaced": ("directory", "755", "0:0", None),
    "/replaced/new": ("regular file", "644", "0:0", "new\n"),
    "/sl": ("directory", "755", "0:0", None),
    "/sl/abs": ("symbolic link", "777", "0:0", "/data/keep.txt"),
    "/sl/dangling": ("symbolic link", "777", "0:0", "/nonexistent"),
    "/sl/rel": ("symbolic link", "777", "0:0", "../data/keep.txt"),
}
TREE_ROOTS = ("/data", "/empty", "/hl", "/home/app", "/opq", "/replaced", "/sl")
IMAGE_CONFIG = {
    "env": ["PATH=/bin:/usr/bin:/sbin:/usr/sbin", "GREETING=hello from the image"],
    "cwd": "/data",
    "user": "1000:1000",
    "entrypoint": ["/bin/sh", "-c"],
    "cmd": ['echo "$GREETING|$(pwd)|$(id -u):$(id -g)"'],
}
DEFAULT_OUTPUT = b"hello from the image|/data|1000:1000\n"


def _layer_tar(entries):
    """An uncompressed tar of (TarInfo, data) pairs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in entries:
            t.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


def tinfo(name, data=b"", kind=tarfile.REGTYPE, mode=0o644, link="", uid=0, gid=0,
          mtime=MTIME, major=0, minor=0, pax=None):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    info.uid, info.gid, info.mtime = uid, gid, mtime
    info.devmajor, info.devminor = major, minor
    info.size = len(data) if kind in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
    if pax:
        info.pax_headers = pax
    return (info, data)


class Built:
    """What the module fixture made: paths and the facts the layout records."""

    def __init__(self, work):
        self.work = work
        self.layout = work / "layout"
        self.oci_archive = work / "image.oci.tar"
        self.docker_archive = work / "image.docker.tar"
        self.branch_archive = work / "branch.oci.tar"
        self.single_layout = work / "single"  # the layout with only TAG in it
        self.xattr_helper = False

    def manifest(self, tag=TAG):
        index = json.loads((self.layout / "index.json").read_text())
        for m in index["manifests"]:
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
                return json.loads(self.blob(m["digest"]))
        raise KeyError(tag)

    def blob(self, digest):
        return (self.layout / "blobs" / "sha256" / digest.split(":")[1]).read_bytes()

    def config_digest(self, tag=TAG):
        return self.manifest(tag)["config"]["digest"]

    def diff_ids(self, tag=TAG):
        return json.loads(self.blob(self.config_digest(tag)))["rootfs"]["diff_ids"]

    def layer_members(self, tag=TAG):
        """Each layer's tar members, bottom first."""
        out = []
        for layer in self.manifest(tag)["layers"]:
            with tarfile.open(fileobj=io.BytesIO(self.blob(layer["digest"]))) as t:
                out.append({m.name.lstrip("./").rstrip("/") or ".": m for m in t.getmembers()})
        return out


def _unpack(b, bundle, tag=TAG):
    run("umoci", "unpack", "--image", f"{b.layout}:{tag}", bundle)
    return bundle / "rootfs"


def _repack(b, bundle, tag=TAG):
    run("umoci", "repack", "--image", f"{b.layout}:{tag}", bundle)
    shutil.rmtree(bundle)


def _write(path, text, mode=0o644, owner=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    if owner:
        os.chown(path, *owner)


def build_umoci_image(work):
    b = Built(work)
    run("umoci", "init", "--layout", b.layout)
    run("umoci", "new", "--image", f"{b.layout}:{TAG}")

    # layer 1: a busybox base with the directories the later layers change
    bundle = work / "bundle"
    root = _unpack(b, bundle)
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "home", "var/tmp", "run", "proc",
              "sys", "dev", "tmp", "root"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "var/tmp").chmod(0o1777)
    (root / "root").chmod(0o700)
    shutil.copy2("/bin/busybox", root / "bin/busybox")
    applets = subprocess.run(["/bin/busybox", "--list-full"], stdout=subprocess.PIPE,
                             check=True).stdout.decode().split()
    for a in applets:
        if a != "bin/busybox" and ".." not in a and not (root / a).exists():
            (root / a).symlink_to("/bin/busybox")
    _write(root / "etc/passwd", PASSWD)
    _write(root / "etc/group", GROUP)
    helper_c = work / "xattr-get.c"
    helper_c.write_text(XATTR_GET_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc and subprocess.run([cc, "-static", "-Os", "-o", str(root / "bin/xattr-get"),
                              str(helper_c)], stderr=subprocess.DEVNULL).returncode == 0:
        b.xattr_helper = True
    _write(root / "data/keep.txt", "keep\n")
    _write(root / "data/gone.txt", "gone\n")
    _write(root / "data/modify.txt", "layer1\n")
    _write(root / "opq/old1", "old1\n")
    _write(root / "opq/oldsub/old2", "old2\n")
    _write(root / "replaced/a", "a\n")
    _write(root / "replaced/sub/b", "b\n")
    _repack(b, bundle)

    # layer 2: umoci's diff of the changes below
    root = _unpack(b, bundle)
    (root / "data/gone.txt").unlink()
    shutil.rmtree(root / "replaced")
    _write(root / "replaced/new", "new\n")
    _write(root / "hl/a", "hard\n")
    os.link(root / "hl/a", root / "hl/b")
    (root / "sl").mkdir()
    (root / "sl/rel").symlink_to("../data/keep.txt")
    (root / "sl/abs").symlink_to("/data/keep.txt")
    (root / "sl/dangling").symlink_to("/nonexistent")
    _write(root / "bin/suid", "#!/bin/sh\nid -u\n", 0o755)
    (root / "bin/suid").chmod(0o4755)  # chmod after write: write_text may drop the bit
    (root / "home/app").mkdir()
    os.chown(root / "home/app", 1000, 1000)
    (root / "home/app").chmod(0o750)
    _write(root / "home/app/owned", "mine\n", 0o640, (1000, 1000))
    _write(root / "data/xattr.txt", "xattr\n")
    os.setxattr(root / "data/xattr.txt", XATTR[0], XATTR[1])
    (root / "empty").mkdir()
    _write(root / "data/old.txt", "old\n")
    os.utime(root / "data/old.txt", (MTIME, MTIME))
    _write(root / "data/private", "private\n", 0o600)
    _repack(b, bundle)

    # The branch: layers 1 and 2 shared, a layer of its own on top.
    run("umoci", "tag", "--image", f"{b.layout}:{TAG}", "branch")
    root = _unpack(b, bundle, "branch")
    _write(root / "data/branch.txt", "branch\n")
    _repack(b, bundle, "branch")

    # layer 3: umoci never writes opaque markers (it whites out each old
    # entry), so this one is made here and added verbatim.
    layer3 = work / "layer3.tar"
    layer3.write_bytes(_layer_tar([
        tinfo("opq/", kind=tarfile.DIRTYPE, mode=0o755),
        tinfo("opq/.wh..wh..opq", mode=0o600),
        tinfo("opq/new1", b"new1\n"),
        tinfo("opq/newsub/", kind=tarfile.DIRTYPE, mode=0o755),
        tinfo("opq/newsub/n2", b"n2\n"),
    ]))
    run("umoci", "raw", "add-layer", "--image", f"{b.layout}:{TAG}", layer3)

    # layer 4: a file of layer 1 modified
    root = _unpack(b, bundle)
    _write(root / "data/modify.txt", "layer4\n")
    _repack(b, bundle)

    c = IMAGE_CONFIG
    args = ["umoci", "config", "--image", f"{b.layout}:{TAG}", "--clear=config.env",
            "--clear=config.entrypoint", "--clear=config.cmd",
            "--config.workingdir", c["cwd"], "--config.user", c["user"]]
    for e in c["env"]:
        args += ["--config.env", e]
    for e in c["entrypoint"]:
        args += ["--config.entrypoint", e]
    for e in c["cmd"]:
        args += ["--config.cmd", e]
    run(*args)
    run("umoci", "gc", "--layout", b.layout)

    run("skopeo", "copy", "-q", f"oci:{b.layout}:{TAG}", f"oci-archive:{b.oci_archive}:{TAG}")
    run("skopeo", "copy", "-q", f"oci:{b.layout}:{TAG}",
        f"docker-archive:{b.docker_archive}:corral-test/tree:{TAG}")
    run("skopeo", "copy", "-q", f"oci:{b.layout}:branch", f"oci-archive:{b.branch_archive}:branch")
    run("skopeo", "copy", "-q", f"oci:{b.layout}:{TAG}", f"oci:{b.single_layout}:{TAG}")
    return b


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not (shutil.which("umoci") and shutil.which("skopeo")):
        pytest.skip("needs umoci and skopeo (apt-get install umoci skopeo)")
    return build_umoci_image(tmp_path_factory.mktemp("umoci"))


# ---- archives made here, hostile ones included ----

GZIP, ZSTD, PLAIN = "gzip", "zstd", "plain"
MANIFEST_MEDIA = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
LAYER_MEDIA = {GZIP: "application/vnd.oci.image.layer.v1.tar+gzip",
               ZSTD: "application/vnd.oci.image.layer.v1.tar+zstd",
               PLAIN: "application/vnd.oci.image.layer.v1.tar"}


def compress(data, how):
    if how == GZIP:
        return gzip.compress(data, mtime=0)
    if how == ZSTD:
        return subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE,
                              check=True).stdout
    return data


class Image:
    """An image made of layer tars: its blobs, ready to be written as an
    oci-archive or a docker-archive, and knobs to damage either."""

    def __init__(self, layers, compression=GZIP, config=None, diff_ids=None, arch=HOST_ARCH):
        self.layers = []  # (media type, blob, digest)
        for tar in layers:
            how = compression if isinstance(compression, str) else compression.pop(0)
            blob = compress(tar, how)
            self.layers.append((LAYER_MEDIA[how], blob, "sha256:" + sha256(blob)))
        self.tars = list(layers)
        self.diff_ids = diff_ids or ["sha256:" + sha256(t) for t in layers]
        cfg = {"architecture": arch, "os": "linux",
               "config": config or {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]},
               "rootfs": {"type": "layers", "diff_ids": self.diff_ids},
               "history": [{"created_by": "corral test"} for _ in layers]}
        self.config = json.dumps(cfg, sort_keys=True).encode()
        self.config_digest = "sha256:" + sha256(self.config)

    def manifest(self):
        return json.dumps({
            "schemaVersion": 2, "mediaType": MANIFEST_MEDIA,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": self.config_digest, "size": len(self.config)},
            "layers": [{"mediaType": m, "digest": d, "size": len(b)} for m, b, d in self.layers],
        }).encode()

    def blobs(self):
        """(digest, bytes) of its config and layers."""
        return [(self.config_digest, self.config)] + [(d, b) for _, b, d in self.layers]

    def oci_archive(self, tag=TAG, corrupt=None, drop=None, bad_manifest=False):
        """``corrupt``: {digest: bytes} stored under that digest instead;
        ``drop``: digests left out; ``bad_manifest``: the manifest stored
        with a byte more than its digest covers."""
        corrupt, drop = corrupt or {}, set(drop or ())
        manifest = self.manifest()
        mdigest = "sha256:" + sha256(manifest)
        index = {"schemaVersion": 2, "manifests": [{
            "mediaType": MANIFEST_MEDIA, "digest": mdigest, "size": len(manifest),
            "annotations": {REF_NAME: tag}}]}
        blobs = [(mdigest, manifest + b" " if bad_manifest else manifest)] + self.blobs()
        files = [("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
                 ("index.json", json.dumps(index).encode())]
        files += [(f"blobs/sha256/{d.split(':')[1]}", corrupt.get(d, b))
                  for d, b in blobs if d not in drop]
        return _archive(files, dirs=["blobs", "blobs/sha256"])

    def docker_archive(self, repo_tag=f"corral-test/built:{TAG}", drop=None):
        """As `docker save` writes it: uncompressed layers named by path, the
        config named by its digest.  ``drop``: layer indexes left out."""
        drop = set(drop or ())
        cfg_name = self.config_digest.split(":")[1] + ".json"
        names = [f"{sha256(t)}/layer.tar" for t in self.tars]
        manifest = [{"Config": cfg_name, "RepoTags": [repo_tag], "Layers": names}]
        files = [(cfg_name, self.config)]
        files += [(n, t) for i, (n, t) in enumerate(zip(names, self.tars)) if i not in drop]
        files.append(("manifest.json", json.dumps(manifest).encode()))
        return _archive(files)


def _archive(files, dirs=()):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            t.addfile(info)
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def small_layer(*extra, marker="base"):
    """A layer with a couple of text files (no busybox: these images are only
    imported, never run) plus ``extra`` entries."""
    return _layer_tar([tinfo("etc/", kind=tarfile.DIRTYPE, mode=0o755),
                       tinfo("etc/marker", marker.encode() + b"\n"),
                       tinfo("hello.txt", b"hello\n"), *extra])


def runnable_layer(*extra):
    """A layer with busybox (as sh, cat, ls, stat, head) and ``extra``."""
    bb = Path("/bin/busybox").read_bytes()
    entries = [tinfo("bin/", kind=tarfile.DIRTYPE, mode=0o755),
               tinfo("bin/busybox", bb, mode=0o755),
               *[tinfo(f"bin/{a}", kind=tarfile.SYMTYPE, mode=0o777, link="busybox")
                 for a in ("sh", "cat", "ls", "stat", "head", "id", "echo", "readlink")],
               *[tinfo(f"{d}/", kind=tarfile.DIRTYPE, mode=0o755)
                 for d in ("etc", "proc", "sys", "dev", "tmp", "root", "run")],
               tinfo("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")]
    return _layer_tar(entries + list(extra))


# ---- talking to corrald and looking into its store ----

def post_image(d, data, name=None, timeout=120, ref=None):
    query = "&".join(f"{k}={v}" for k, v in (("name", name), ("ref", ref)) if v)
    target = "/v1/images" + (f"?{query}" if query else "")
    return d.request("POST", target, body=bytes(data),
                     headers={"Content-Type": "application/x-tar"}, timeout=timeout)


def import_ok(d, data, name, ref=None):
    r = post_image(d, data, name, ref=ref)
    assert r.status == 201, f"import of {name} refused: {r}"
    return r.json()


def get_image(d, name):
    return d.request("GET", f"/v1/images/{name}")


def image_names(d):
    r = d.request("GET", "/v1/images")
    assert r.status == 200, r
    names = set()
    for img in r.json()["images"]:
        names.add(img["name"])
        names.update(img.get("names") or ())
    return names


def remove_image(d, name):
    return d.request("DELETE", f"/v1/images/{name}")


def gc(d):
    r = d.request("POST", "/v1/images/gc")
    assert r.status == 200, r
    return r.json()


def store_dir(d):
    return d.state_dir / "images"


def store_files(d):
    """Every file of the store but tmp/, by path relative to it."""
    root = store_dir(d)
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] != "tmp"}


def layer_files(d):
    return {p.name for p in (store_dir(d) / "layers").glob("*")}


def tmp_entries(d, settle=2.0):
    """What is left in tmp/, once a brief cleanup has had its time."""
    tmp = store_dir(d) / "tmp"
    deadline = time.monotonic() + settle
    while True:
        left = sorted(p.name for p in tmp.iterdir()) if tmp.is_dir() else []
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def hexes(digests):
    return {x.split(":")[1] for x in digests}


def sh(sb, cmd, user="0:0"):
    r = sb.exec(cmd, user=user)
    assert r.exit_code == 0, f"{cmd!r} in the sandbox: {r}"
    return r.stdout.decode()


def cli(d, *args, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["CORRAL_URL"] = d.url
    return subprocess.run([str(CORRAL), *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, timeout=timeout)


def corrald_options():
    r = subprocess.run([str(BUILD / "corrald"), "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    return r.stdout.decode()


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def imaged(tmp_path_factory):
    """A corrald of this module's own, so its store holds only what the
    tests put there."""
    d = start_corrald(tmp_path_factory.mktemp("imaged"))
    yield d
    d.teardown()


@pytest.fixture(scope="module")
def iclient(imaged):
    with imaged.client() as c:
        yield c


@pytest.fixture(scope="module")
def tree_image(imaged, built):
    """The umoci image imported from its oci-archive, as `tree:v1`."""
    return import_ok(imaged, built.oci_archive.read_bytes(), f"tree:{TAG}")


# ---- what umoci and skopeo made (so a failure below is Corral's) ----

@need_umoci
def test_the_umoci_layout_has_what_the_tree_tests_rely_on(built):
    l1, l2, l3, l4 = built.layer_members()
    assert "data/gone.txt" in l1 and "data/.wh.gone.txt" in l2, "umoci wrote no whiteout"
    assert {"replaced/.wh.a", "replaced/.wh.sub", "replaced/new"} <= set(l2)
    assert l2["hl/b"].islnk() and l2["hl/b"].linkname == "hl/a", "umoci wrote no hard link"
    assert l2["bin/suid"].mode == 0o4755
    assert (l2["home/app/owned"].uid, l2["home/app/owned"].gid) == (1000, 1000)
    assert l2["data/old.txt"].mtime == MTIME
    assert l2["data/xattr.txt"].pax_headers.get("SCHILY.xattr." + XATTR[0]) == XATTR[1].decode()
    assert "opq/.wh..wh..opq" in l3 and list(l4) == ["data/modify.txt"]
    assert built.diff_ids("branch")[:2] == built.diff_ids()[:2]
    assert len(set(built.diff_ids("branch")) | set(built.diff_ids())) == 5


# ---- import, and the tree inside a sandbox ----

@need_umoci
def test_import_answers_with_the_image(imaged, built, tree_image):
    img = tree_image
    assert img["id"] == built.config_digest(), "the id is the config's digest"
    assert img["name"] == f"tree:{TAG}" and f"tree:{TAG}" in img["names"], img
    assert [layer["digest"] for layer in img["layers"]] == built.diff_ids(), \
        "layers are listed bottom first by diff_id"
    assert all(layer["size"] > 0 for layer in img["layers"]), img["layers"]
    assert img["size"] == sum(layer["size"] for layer in img["layers"]), img
    for key in ("cwd", "user", "entrypoint", "cmd"):
        assert img[key] == IMAGE_CONFIG[key], f"{key}: {img[key]!r}"
    assert img["env"][:2] == IMAGE_CONFIG["env"], "the image's Env, in order"
    assert all(e.split("=")[0] == "HOME" for e in img["env"][2:]), \
        f"only defaults (HOME) may be added: {img['env']}"
    assert img["sandboxes"] == 0 and img["created"] and img["origin"], img

    for name in (f"tree:{TAG}", img["id"], img["id"][:7 + 12]):
        r = get_image(imaged, name)
        assert r.status == 200 and r.json()["id"] == img["id"], f"GET {name}: {r}"
    assert f"tree:{TAG}" in image_names(imaged)
    r = get_image(imaged, "tree:nosuchtag")
    assert r.status == 404 and r.error["code"] == "not_found", r

    store = store_dir(imaged)
    for layer in img["layers"]:
        erofs = store / "layers" / (layer["digest"].split(":")[1] + ".erofs")
        assert erofs.is_file(), f"no {erofs}"
        assert erofs.stat().st_size == layer["size"]
        with open(erofs, "rb") as f:  # EROFS superblock magic at 1024
            f.seek(1024)
            assert f.read(4) == (0xE0F5E1E2).to_bytes(4, "little"), f"{erofs} is not EROFS"
    assert (store / "images" / (img["id"].split(":")[1] + ".json")).is_file()
    assert (store / "tags" / f"tree:{TAG}").exists()
    assert tmp_entries(imaged) == []


def check_tree(sb, built):
    """Assert the sandbox's tree is what the umoci layout says, by OCI rules."""
    found = sh(sb, "find " + " ".join(TREE_ROOTS))
    fmt = "%n|%F|%a|%u:%g|%h|%d:%i|%Y"
    out = sh(sb, f"stat -c '{fmt}' {' '.join(found.split())} /bin/suid")
    seen = {}
    for line in out.splitlines():
        name, kind, mode, owner, nlink, ino, mtime = line.split("|")
        seen[name] = {"kind": kind, "mode": mode, "owner": owner, "nlink": nlink, "ino": ino,
                      "mtime": int(mtime)}
    suid = seen.pop("/bin/suid")
    got = {n: (s["kind"], s["mode"], s["owner"]) for n, s in seen.items()}
    want = {n: v[:3] for n, v in EXPECTED_TREE.items()}
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    assert not missing and not extra, \
        f"tree differs: missing {missing}, should not exist {extra} (whiteouts/opaque dirs)"
    wrong = {n: f"{got[n]} != {want[n]}" for n in want if got[n] != want[n]}
    assert not wrong, f"type/mode/owner wrong: {wrong}"

    assert (suid["mode"], suid["owner"]) == ("4755", "0:0"), f"setuid file: {suid}"
    a, b = seen["/hl/a"], seen["/hl/b"]
    assert a["ino"] == b["ino"] and a["nlink"] == b["nlink"] == "2", \
        f"hard links /hl/a {a} and /hl/b {b} must share an inode with 2 links"
    assert seen["/data/old.txt"]["mtime"] == MTIME, seen["/data/old.txt"]
    assert sh(sb, "ls -A /empty") == ""
    assert sh(sb, "find / -xdev -name '.wh.*'") == "", "whiteout files leaked into the tree"

    files = [n for n, v in EXPECTED_TREE.items() if v[0] == "regular file"]
    contents = sh(sb, f"for f in {' '.join(files)}; do cat $f; printf '\\0'; done").split("\0")
    assert dict(zip(files, contents)) == {n: EXPECTED_TREE[n][3] for n in files}
    links = [n for n, v in EXPECTED_TREE.items() if v[0] == "symbolic link"]
    targets = sh(sb, f"for l in {' '.join(links)}; do readlink $l; done").splitlines()
    assert dict(zip(links, targets)) == {n: EXPECTED_TREE[n][3] for n in links}
    assert sh(sb, "cat /sl/rel /sl/abs; test ! -e /sl/dangling && echo dangling") == \
        "keep\nkeep\ndangling\n"
    # (A write through one link is not checked: overlayfs without index=on
    # breaks the link on copy-up, as Docker's overlay2 does.)
    if built.xattr_helper:
        r = sb.exec(["/bin/xattr-get", "/data/xattr.txt", XATTR[0]], user="0:0")
        assert r.exit_code == 0, f"getxattr {XATTR[0]}: {os.strerror(r.exit_code or 0)} {r}"
        assert r.stdout == XATTR[1]


def _import_layout_cli(d, built, name):
    r = cli(d, "image", "import", built.single_layout, "--name", name)
    assert r.returncode == 0, f"corral image import DIR: {r.returncode} {r.stderr.decode()}"
    return get_image(d, name).json()


def _import_layout_sdk(d, built, name):
    if not hasattr(corral.Client, "import_image"):
        pytest.skip("the SDK has no Client.import_image yet")
    with d.client() as c:
        return c.import_image(str(built.single_layout), name=name)


@need_umoci
@pytest.mark.parametrize("form", ["oci-archive", "docker-archive", "layout-cli", "layout-sdk"])
def test_the_tree_inside_a_sandbox_is_what_oci_says(imaged, iclient, built, form):
    name = f"tree-{form}:{TAG}"
    if form == "oci-archive":
        img = import_ok(imaged, built.oci_archive.read_bytes(), name)
    elif form == "docker-archive":
        img = import_ok(imaged, built.docker_archive.read_bytes(), name)
    elif form == "layout-cli":
        img = _import_layout_cli(imaged, built, name)
    else:
        img = _import_layout_sdk(imaged, built, name)
    assert img["id"] == built.config_digest(), f"{form}: {img}"
    with iclient.create(image=name, **SMALL) as sb:
        check_tree(sb, built)
        if not built.xattr_helper:
            pytest.skip("xattr not checked: no static C compiler for the getxattr helper")


@need_umoci
def test_the_image_config_is_honoured(imaged, iclient, tree_image):
    name = f"tree:{TAG}"
    with iclient.create(image=name, **SMALL) as sb:
        r = sb.exec('echo "$GREETING"; pwd; id -u; id -g; echo $PATH')
        assert r.exit_code == 0, r
        assert r.stdout.decode().splitlines() == [
            "hello from the image", "/data", "1000", "1000", "/bin:/usr/bin:/sbin:/usr/sbin"], \
            "Env, WorkingDir and User of the image are the defaults of an exec"
        assert sb.exec("echo $HOME").stdout == b"/home/app\n", \
            "with no HOME in its Env, HOME is the user's home in the image's /etc/passwd " \
            "(as Docker does)"
        assert sb.exec(["id", "-u"], user="0:0").stdout == b"0\n", "an exec's user wins"
        assert sb.exec(["pwd"], cwd="/opq").stdout == b"/opq\n", "an exec's cwd wins"
        r = sb.exec("touch /data/x")
        assert r.exit_code != 0, "uid 1000 may not write root's 0755 /data"
    with iclient.create(image=name, env={"GREETING": "from the spec"}, cwd="/hl", **SMALL) as sb:
        assert sb.exec('echo "$GREETING"; pwd; echo $PATH').stdout == \
            b"from the spec\n/hl\n/bin:/usr/bin:/sbin:/usr/sbin\n", \
            "the spec's env and cwd win over the image's; the image's PATH stays"


@need_umoci
def test_run_with_no_command_runs_the_image_default(imaged, tree_image):
    r = cli(imaged, "run", "--image", f"tree:{TAG}", "--memory-mb", "128")
    assert (r.returncode, r.stdout) == (0, DEFAULT_OUTPUT), \
        f"Entrypoint+Cmd as user 1000 in /data: {r.returncode} {r.stdout!r} {r.stderr.decode()}"
    r = cli(imaged, "run", "--image", f"tree:{TAG}", "--memory-mb", "128", "--", "id", "-u")
    assert (r.returncode, r.stdout) == (0, b"1000\n"), r.stderr.decode()
    assert imaged.live_sandboxes() == []


@pytest.mark.parametrize("whole", [PLAIN, GZIP, ZSTD])
def test_layer_compressions_and_a_compressed_archive(imaged, iclient, whole):
    if not shutil.which("zstd"):
        pytest.skip("no zstd to make zstd layers")
    layers = [runnable_layer(),
              _layer_tar([tinfo("gz.txt", b"gzip layer\n")]),
              _layer_tar([tinfo("zst.txt", b"zstd layer\n")])]
    img = Image(layers, compression=[PLAIN, GZIP, ZSTD], config={"Cmd": ["/bin/sh"]})
    name = unique(f"comp-{whole}") + ":v1"
    out = import_ok(imaged, compress(img.oci_archive(), whole), name)
    assert out["id"] == img.config_digest
    assert [x["digest"] for x in out["layers"]] == img.diff_ids
    with iclient.create(image=name, **SMALL) as sb:
        assert sh(sb, "cat /gz.txt /zst.txt") == "gzip layer\nzstd layer\n"
    before = layer_files(imaged)
    again = Image(layers, compression=[ZSTD, PLAIN, GZIP], config={"Cmd": ["/bin/sh"]})
    assert import_ok(imaged, again.oci_archive(), unique("recomp") + ":v1")["id"] == out["id"]
    assert layer_files(imaged) == before, "layers are stored by diff_id, however compressed"


def test_many_layers(imaged, iclient):
    n = 40
    layers = [runnable_layer(tinfo("stack", b"0\n"))]
    layers += [_layer_tar([tinfo("l/", kind=tarfile.DIRTYPE, mode=0o755),
                           tinfo(f"l/f{i}", b"x"), tinfo("stack", f"{i}\n".encode())])
               for i in range(1, n)]
    name = unique("many") + ":v1"
    out = import_ok(imaged, Image(layers).oci_archive(), name)
    assert len(out["layers"]) == n
    with iclient.create(image=name, **SMALL) as sb:
        assert sh(sb, "cat /stack; ls /l | wc -l") == f"{n - 1}\n{n - 1}\n"


def test_overlay_metadata_in_a_layer_is_not_obeyed(imaged, iclient):
    """Only .wh. names are whiteouts and only .wh..wh..opq makes a directory
    opaque: an overlay xattr or a 0/0 character device that a layer carries
    is data (or refused), never overlay metadata."""
    lower = runnable_layer(tinfo("d/", kind=tarfile.DIRTYPE, mode=0o755),
                           tinfo("d/lower", b"lower\n"),
                           tinfo("w/", kind=tarfile.DIRTYPE, mode=0o755),
                           tinfo("w/file", b"file\n"))
    upper = _layer_tar([
        tinfo("d/", kind=tarfile.DIRTYPE, mode=0o755,
              pax={"SCHILY.xattr.user.overlay.opaque": "y",
                   "SCHILY.xattr.trusted.overlay.opaque": "y"}),
        tinfo("d/upper", b"upper\n"),
        tinfo("w/file", kind=tarfile.CHRTYPE, mode=0o600, major=0, minor=0)])
    name = unique("ovl") + ":v1"
    r = post_image(imaged, Image([lower, upper]).oci_archive(), name)
    if r.status == 400:
        assert "d" in r.error["message"] or "w/file" in r.error["message"], r
        return
    assert r.status == 201, r
    with iclient.create(image=name, **SMALL) as sb:
        assert sh(sb, "ls /d") == "lower\nupper\n", \
            "an overlay.opaque xattr from a layer was obeyed"
        assert sh(sb, "stat -c %F /w/file 2>&1 || true") == "character special file\n", \
            "a 0/0 character device in a layer is a device node by OCI, not a whiteout"


def test_a_docker_archive_is_tagged_with_its_repo_tag(imaged):
    repo_tag = unique("corral-test/own") + ":v2"
    img = Image([small_layer(marker=uuid.uuid4().hex)])
    r = post_image(imaged, img.docker_archive(repo_tag=repo_tag))
    assert r.status == 201, r
    assert repo_tag in r.json()["names"], r.json()
    assert get_image(imaged, repo_tag).status == 200


def test_device_nodes_are_stored_inert_or_refused(imaged, iclient):
    layer = runnable_layer(tinfo("devs/", kind=tarfile.DIRTYPE, mode=0o755),
                           tinfo("devs/mem", kind=tarfile.CHRTYPE, mode=0o666, major=1, minor=1),
                           tinfo("devs/sda", kind=tarfile.BLKTYPE, mode=0o666, major=8, minor=0),
                           tinfo("devs/fifo", kind=tarfile.FIFOTYPE, mode=0o644))
    name = unique("devices") + ":v1"
    before = store_files(imaged)
    r = post_image(imaged, Image([layer]).oci_archive(), name)
    if r.status == 400:
        assert "devs/" in r.error["message"], f"the refusal should name the node: {r}"
        assert store_files(imaged) == before and tmp_entries(imaged) == []
        return
    assert r.status == 201, r
    with iclient.create(image=name, **SMALL) as sb:
        kinds = sh(sb, "stat -c '%n %F' /devs/mem /devs/sda /devs/fifo")
        assert "/devs/fifo fifo" in kinds, kinds
        for node in ("/devs/mem", "/devs/sda"):
            r = sb.exec(["head", "-c", "1", node], user="0:0")
            assert r.exit_code != 0 and r.stdout == b"", \
                f"{node} from an image must not open (nodev): {r}"


# ---- the store ----

@need_umoci
def test_the_same_archive_twice_stores_nothing_new(imaged, built, tree_image):
    before = store_files(imaged)
    name = unique("again") + ":v1"
    img = import_ok(imaged, built.oci_archive.read_bytes(), name)
    assert img["id"] == tree_image["id"]
    new = store_files(imaged) - before
    assert all(p.startswith("tags/") for p in new), f"a second import stored {sorted(new)}"
    assert store_files(imaged) >= before


@need_umoci
def test_docker_and_oci_archives_of_one_image_are_one_image(imaged, built, tree_image):
    before = layer_files(imaged)
    img = import_ok(imaged, built.docker_archive.read_bytes(), unique("docker") + ":v1")
    assert img["id"] == tree_image["id"] == built.config_digest()
    assert [x["digest"] for x in img["layers"]] == [x["digest"] for x in tree_image["layers"]]
    assert layer_files(imaged) == before


@need_umoci
def test_shared_base_layers_are_stored_once(imaged, built, tree_image):
    before = layer_files(imaged)
    name = unique("branch") + ":v1"
    img = import_ok(imaged, built.branch_archive.read_bytes(), name)
    assert [x["digest"] for x in img["layers"]] == built.diff_ids("branch")
    own = hexes(built.diff_ids("branch")) - hexes(built.diff_ids())
    assert layer_files(imaged) - before == {h + ".erofs" for h in own}, \
        "only the branch's own top layer is new: the two base layers are shared"
    remove_image(imaged, name)


def test_two_concurrent_imports_of_one_image(imaged):
    data = Image([small_layer(tinfo("big", os.urandom(2 * MIB)), marker=uuid.uuid4().hex),
                  small_layer(marker=uuid.uuid4().hex)]).oci_archive()
    before = layer_files(imaged)
    names = [unique("conc") + ":v1" for _ in range(2)]
    results = {}
    def one(n):
        results[n] = post_image(imaged, data, n)

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and all(r.status == 201 for r in results.values()), \
        {n: (r.status, r.body[-300:]) for n, r in results.items()}
    assert len({r.json()["id"] for r in results.values()}) == 1
    assert len(layer_files(imaged) - before) == 2, "two layers, stored once"
    assert tmp_entries(imaged) == []


@need_umoci
def test_rm_is_refused_while_a_sandbox_uses_the_image(imaged, iclient, built):
    name = unique("inuse") + ":v1"
    import_ok(imaged, built.oci_archive.read_bytes(), name)
    with iclient.create(image=name, **SMALL) as sb:
        assert get_image(imaged, name).json()["sandboxes"] == 1
        r = remove_image(imaged, name)
        assert r.status == 409 and r.error["code"] == "conflict", r
        assert name.split(":")[0] in r.error["message"] and "sandbox" in r.error["message"], r
        # another import makes corrald forget what it had looked up: still refused
        import_ok(imaged, built.docker_archive.read_bytes(), unique("other") + ":v1")
        assert get_image(imaged, name).json()["sandboxes"] == 1
        assert remove_image(imaged, name).status == 409, "an import in between changes nothing"
        assert sh(sb, "cat /data/keep.txt") == "keep\n", "the sandbox is unharmed"
    assert get_image(imaged, name).json()["sandboxes"] == 0
    r = remove_image(imaged, name)
    assert r.status in (200, 204), r
    r = get_image(imaged, name)
    assert r.status == 404 and r.error["code"] == "not_found", r
    r = remove_image(imaged, name)
    assert r.status == 404, f"removing it again: {r}"


@need_umoci
def test_tag(imaged, iclient, tree_image):
    alias = unique("alias") + ":latest"
    r = imaged.request("POST", "/v1/images/tag", {"source": f"tree:{TAG}", "target": alias})
    assert r.status in (200, 201), r
    assert r.json()["id"] == tree_image["id"] and alias in r.json()["names"], r.json()
    assert get_image(imaged, alias).json()["id"] == tree_image["id"]
    assert get_image(imaged, alias.split(":")[0]).status == 200, "NAME means NAME:latest"
    assert alias in get_image(imaged, f"tree:{TAG}").json()["names"]
    with iclient.create(image=alias, **SMALL) as sb:
        assert sh(sb, "cat /data/modify.txt") == "layer4\n"
    assert remove_image(imaged, alias).status in (200, 204)
    assert get_image(imaged, f"tree:{TAG}").status == 200, "removing a tag keeps the others"
    r = imaged.request("POST", "/v1/images/tag", {"source": "nosuch:v9", "target": alias})
    assert r.status == 404, r
    r = imaged.request("POST", "/v1/images/tag", {"source": f"tree:{TAG}", "target": "Bad Name!"})
    assert r.status == 400 and r.error["code"] == "invalid_argument", r


@need_umoci
def test_gc_removes_only_unreferenced_layers(imaged, iclient, built, tree_image):
    name = unique("gcbranch") + ":v1"
    import_ok(imaged, built.branch_archive.read_bytes(), name)
    own = hexes(built.diff_ids("branch")) - hexes(built.diff_ids())
    assert remove_image(imaged, name).status in (200, 204)
    # everything left that an image of this store names must survive
    listed = imaged.request("GET", "/v1/images").json()["images"]
    referenced = {x["digest"].split(":")[1] + ".erofs" for img in listed for x in img["layers"]}
    before = layer_files(imaged)
    sizes = {p.name: p.stat().st_size for p in (store_dir(imaged) / "layers").iterdir()}
    out = gc(imaged)
    after = layer_files(imaged)
    assert {h + ".erofs" for h in own} <= before - after, "the branch's own layer went"
    assert before & referenced <= after, \
        f"gc removed referenced layers {before & referenced - after}"
    assert out["layers_removed"] == len(before - after), out
    assert out["bytes_freed"] >= sum(sizes[p] for p in before - after), \
        f"{out}: the removed layers alone were {sum(sizes[p] for p in before - after)} bytes"
    assert after <= referenced, f"unreferenced layers left: {after - referenced}"
    with iclient.create(image=f"tree:{TAG}", **SMALL) as sb:
        check_tree(sb, built)
    assert gc(imaged) == {"layers_removed": 0, "bytes_freed": 0}
    assert tmp_entries(imaged) == []


def test_store_survives_a_restart(corrald_factory):
    d = corrald_factory()
    img = Image([runnable_layer(tinfo("kept.txt", b"kept\n"))])
    import_ok(d, img.oci_archive(), "kept:v1")
    files = store_files(d)
    assert d.stop() == 0
    d.start()
    assert "kept:v1" in image_names(d)
    assert store_files(d) == files
    with d.client() as c, c.create(image="kept:v1", **SMALL) as sb:
        assert sh(sb, "cat /kept.txt") == "kept\n"


def _descendants(pid):
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


def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pids, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if _alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


@pytest.mark.parametrize("victim", ["corrald", "importer"])
def test_a_crash_mid_import_leaves_no_image_and_a_retry_works(corrald_factory, victim):
    d = corrald_factory()
    import_ok(d, Image([runnable_layer(tinfo("first.txt", b"first\n"))]).oci_archive(), "first:v1")
    big = Image([runnable_layer(), _layer_tar([tinfo("big.bin", os.urandom(12 * MIB))])])
    data = big.docker_archive()  # uncompressed: the upload itself is big
    before = store_files(d)
    s = d.send("POST", "/v1/images?name=crashed:v1", data[:len(data) // 2],
               content_type="application/x-tar", length=len(data))
    try:
        tmp = store_dir(d) / "tmp"
        deadline = time.monotonic() + 10
        while not (tmp.is_dir() and any(tmp.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert tmp.is_dir() and any(tmp.iterdir()), "no import in progress under tmp/"
        helpers = _descendants(d.pid)
        if victim == "corrald":
            d.kill()
            left = _wait_gone(helpers)
            assert not left, f"helpers outlived corrald: {[_cmdline(p) for p in left]}"
            d.start()
        else:
            importers = [p for p in helpers if "import" in _cmdline(p)]
            if not importers:
                pytest.skip(f"no importer process under corrald ({[_cmdline(p) for p in helpers]})")
            for p in importers:
                os.kill(p, signal.SIGKILL)
            s.settimeout(20)
            try:
                s.sendall(data[len(data) // 2:])
            except OSError:
                pass  # answered (and closed) before the rest went
            answer = s.recv(4096)
            assert answer.startswith(b"HTTP/1.1 5") or answer.startswith(b"HTTP/1.1 4"), answer
            assert d.request("GET", "/healthz").status == 200
    finally:
        s.close()
    assert "crashed:v1" not in image_names(d), "a half-imported image is visible"
    assert get_image(d, "crashed:v1").status == 404
    assert "first:v1" in image_names(d), "the image imported before the crash survives"
    out = import_ok(d, data, "crashed:v1")
    assert out["id"] == big.config_digest
    with d.client() as c, c.create(image="crashed:v1", **SMALL) as sb:
        assert sh(sb, "stat -c %s /big.bin") == f"{12 * MIB}\n"
        assert sh(sb, "cat /first.txt 2>/dev/null || echo absent") == "absent\n"
    gc(d)
    assert tmp_entries(d) == [], "gc removes stale import dirs"
    assert store_files(d) - before, "the retry stored the image"


def test_offline_import_into_a_read_only_store(corrald_factory, tmp_path):
    store = tmp_path / "store"
    archive = tmp_path / "off.tar"
    archive.write_bytes(Image([runnable_layer(tinfo("off.txt", b"offline\n"))]).oci_archive())
    r = subprocess.run([str(CORRAL), "image", "import", str(archive), "--name", "off:v1",
                        "--store", str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120, env={k: v for k, v in os.environ.items()
                                         if not k.startswith("CORRAL_")})
    assert r.returncode == 0, f"corral image import --store: {r.stderr.decode()}"
    assert len(list((store / "layers").glob("*.erofs"))) == 1
    d = corrald_factory(extra_args=["--images-from", str(store)])
    r = get_image(d, "off:v1")
    assert r.status == 200 and r.json()["origin"] != "store", r
    with d.client() as c, c.create(image="off:v1", **SMALL) as sb:
        assert sh(sb, "cat /off.txt") == "offline\n"
    r = remove_image(d, "off:v1")
    assert r.status == 409, f"an image of a read-only store cannot be removed: {r}"
    assert gc(d)["layers_removed"] == 0
    assert len(list((store / "layers").glob("*.erofs"))) == 1, "gc leaves read-only stores be"


# ---- the SDK and the CLI ----

@need_umoci
def test_sdk_image_methods(imaged, built, tree_image):
    if not all(hasattr(corral.Client, m) for m in ("image", "import_image", "remove_image",
                                                   "tag_image", "gc_images")):
        pytest.skip("the SDK has no image methods yet (image, import_image, remove_image, "
                    "tag_image, gc_images)")
    with imaged.client() as c:
        a = unique("sdk") + ":v1"
        img = c.import_image(str(built.oci_archive), name=a)
        assert img["id"] == tree_image["id"]
        with open(built.docker_archive, "rb") as f:
            assert c.import_image(f, name=unique("sdkf") + ":v1")["id"] == tree_image["id"]
        assert c.image(a)["id"] == tree_image["id"]
        assert a in {n for i in c.images() for n in i.get("names", [i["name"]])}
        b = unique("sdktag") + ":v1"
        assert c.tag_image(a, b)["id"] == tree_image["id"]
        with c.create(image=b, **SMALL):
            with pytest.raises(corral.Conflict):
                c.remove_image(b)
        c.remove_image(b)
        with pytest.raises(corral.NotFound):
            c.image(b)
        bad = Image([small_layer(tinfo("../evil", b"x"))]).oci_archive()
        with pytest.raises(corral.InvalidSpec) as e:
            c.import_image(io.BytesIO(bad), name=unique("sdkbad") + ":v1")
        assert "../evil" in e.value.message
        assert set(c.gc_images()) == {"layers_removed", "bytes_freed"}


@need_umoci
def test_cli_image_commands(imaged, built, tree_image):
    name = unique("cli") + ":v1"
    r = cli(imaged, "image", "import", built.docker_archive, "--name", name)
    assert r.returncode == 0, r.stderr.decode()
    r = cli(imaged, "image", "ls")
    assert r.returncode == 0 and name.encode() in r.stdout, r
    r = cli(imaged, "image", "inspect", name)
    assert r.returncode == 0 and tree_image["id"].encode() in r.stdout, r
    other = unique("clitag") + ":v2"
    assert cli(imaged, "image", "tag", name, other).returncode == 0
    assert get_image(imaged, other).json()["id"] == tree_image["id"]
    with imaged.client() as c, c.create(image=other, **SMALL):
        r = cli(imaged, "image", "rm", other)
        assert r.returncode == 1 and other.split(":")[0].encode() in r.stderr, r
    for n in (name, other):
        r = cli(imaged, "image", "rm", n)
        assert r.returncode == 0, r.stderr.decode()
    r = cli(imaged, "image", "inspect", name)
    assert r.returncode == 1 and b"not found" in r.stderr, r
    r = cli(imaged, "image", "gc")
    assert r.returncode == 0, r.stderr.decode()
    bad = built.work / "bad.tar"
    bad.write_bytes(Image([small_layer(tinfo("/abs/evil", b"x"))]).oci_archive())
    r = cli(imaged, "image", "import", bad, "--name", unique("clibad") + ":v1")
    assert r.returncode == 1 and b"/abs/evil" in r.stderr, r


# ---- several images in one archive: picking one by its ref (issue 10) ----

MARKERS = {"v1": "the first image\n", "v2": "the second image\n"}
TWO_REPO = "corral-test/two"


class TwoTags:
    """An OCI layout umoci made with two tags, v1 and v2, each a runnable
    image with its own /marker and no platform in index.json (as umoci
    writes it); and a docker-archive of both, as `docker save A B` writes
    one."""

    def __init__(self, work):
        self.layout = work / "two"
        self.docker_archive = work / "two.docker.tar"

    def config_digest(self, tag):
        index = json.loads((self.layout / "index.json").read_text())
        for m in index["manifests"]:
            if m.get("annotations", {}).get(REF_NAME) == tag:
                blob = self.layout / "blobs" / "sha256" / m["digest"].split(":")[1]
                return json.loads(blob.read_bytes())["config"]["digest"]
        raise KeyError(tag)


def merge_docker_archives(paths):
    """One docker-archive of the images of several: their files, one
    manifest.json listing every image.  skopeo writes one image per
    docker-archive (it refuses to add to one), so this is how an archive of
    `docker save A B` is made here."""
    files, manifest = {}, []
    for p in paths:
        with tarfile.open(p) as t:
            for m in t.getmembers():
                if not m.isfile():
                    continue
                data = t.extractfile(m).read()
                if m.name == "manifest.json":
                    manifest += json.loads(data)
                elif m.name != "repositories":
                    files[m.name] = data
    assert len(manifest) == len(paths), manifest
    files["manifest.json"] = json.dumps(manifest).encode()
    return _archive(list(files.items()))


def build_two_tags(work):
    t = TwoTags(work)
    run("umoci", "init", "--layout", t.layout)
    run("umoci", "new", "--image", f"{t.layout}:v1")
    for tag in ("v1", "v2"):
        if tag == "v2":
            run("umoci", "tag", "--image", f"{t.layout}:v1", "v2")
        bundle = work / f"two-bundle-{tag}"
        run("umoci", "unpack", "--image", f"{t.layout}:{tag}", bundle)
        root = bundle / "rootfs"
        if tag == "v1":
            for d in ("bin", "etc", "proc", "sys", "dev", "tmp", "root"):
                (root / d).mkdir(exist_ok=True)
            shutil.copy2("/bin/busybox", root / "bin/busybox")
            for a in ("sh", "cat"):
                (root / "bin" / a).symlink_to("busybox")
            _write(root / "etc/passwd", PASSWD)
        _write(root / "marker", MARKERS[tag])
        run("umoci", "repack", "--image", f"{t.layout}:{tag}", bundle)
        shutil.rmtree(bundle)
    run("umoci", "gc", "--layout", t.layout)
    parts = []
    for tag in ("v1", "v2"):
        parts.append(work / f"two-{tag}.docker.tar")
        run("skopeo", "copy", "-q", f"oci:{t.layout}:{tag}",
            f"docker-archive:{parts[-1]}:{TWO_REPO}:{tag}")
    t.docker_archive.write_bytes(merge_docker_archives(parts))
    return t


@pytest.fixture(scope="module")
def two_tags(tmp_path_factory):
    if not (shutil.which("umoci") and shutil.which("skopeo")):
        pytest.skip("needs umoci and skopeo (apt-get install umoci skopeo)")
    return build_two_tags(tmp_path_factory.mktemp("two-tags"))


def layout_tar(layout):
    """An OCI layout directory as the tar `corral image import DIR` streams."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for p in sorted(layout.iterdir()):
            t.add(p, arcname=p.name)
    return buf.getvalue()


@need_umoci
def test_the_two_tag_layout_is_what_the_ref_tests_rely_on(two_tags):
    index = json.loads((two_tags.layout / "index.json").read_text())
    refs = [m.get("annotations", {}).get(REF_NAME) for m in index["manifests"]]
    assert sorted(refs) == ["v1", "v2"], index
    assert not any("platform" in m for m in index["manifests"]), \
        "umoci wrote a platform: the no-platform case is not tested"
    assert two_tags.config_digest("v1") != two_tags.config_digest("v2")


def _import_by_ref(d, two_tags, via, tag, name):
    if via == "api":
        return import_ok(d, layout_tar(two_tags.layout), name, ref=tag)
    if via == "sdk":
        with d.client() as c:
            return c.import_image(str(two_tags.layout), name=name, ref=tag)
    if via == "cli-path-ref":
        args = [f"{two_tags.layout}:{tag}"]
    else:
        args = ["--ref", tag, two_tags.layout]
    r = cli(d, "image", "import", *args, "--name", name)
    assert r.returncode == 0, f"corral image import {args}: {r.stderr.decode()}"
    assert r.stdout.decode().strip() == name
    return get_image(d, name).json()


@need_umoci
@pytest.mark.parametrize("via", ["api", "cli-path-ref", "cli-ref-flag", "sdk"])
def test_each_image_of_a_two_tag_layout_imports_by_its_ref(imaged, iclient, two_tags, via):
    for tag in ("v1", "v2"):
        name = unique(f"two-{via}") + f":{tag}"
        img = _import_by_ref(imaged, two_tags, via, tag, name)
        assert img["id"] == two_tags.config_digest(tag), f"{via} {tag}: {img}"
        with iclient.create(image=name, **SMALL) as sb:
            assert sh(sb, "cat /marker") == MARKERS[tag], f"{via}: the image of {tag} runs"
    assert tmp_entries(imaged) == []


@need_umoci
def test_without_a_ref_the_refusal_lists_the_refs_and_says_how_to_pick(imaged, two_tags):
    msg = assert_refused(imaged, layout_tar(two_tags.layout), unique("noref") + ":v1", 400,
                         "invalid_argument", ["v1"])
    assert "v1" in msg and "v2" in msg, f"both refs are listed: {msg}"
    assert "corral image import PATH:REF" in msg and "?ref=REF" in msg, \
        f"the message says how to pick one, by CLI and API: {msg}"
    assert "none is for" not in msg, msg
    r = cli(imaged, "image", "import", two_tags.layout, "--name", unique("clinoref") + ":v1")
    err = r.stderr.decode()
    assert r.returncode == 1 and "v1" in err and "v2" in err and "PATH:REF" in err, err


@need_umoci
def test_a_ref_that_names_no_image_is_refused(imaged, two_tags):
    data, name = layout_tar(two_tags.layout), unique("badref") + ":v1"
    msg = assert_refused(imaged, data, name, 400, "invalid_argument", ["v9"], ref="v9")
    assert "v1" in msg and "v2" in msg, f"what is there is listed: {msg}"
    for args in ([f"{two_tags.layout}:v9"], ["--ref", "v9", two_tags.layout]):
        r = cli(imaged, "image", "import", *args, "--name", name)
        assert r.returncode == 1 and b"v9" in r.stderr and b"v2" in r.stderr, (args, r)
    assert get_image(imaged, name).status == 404
    # not a ref at all: refused before any byte is read
    msg = assert_refused(imaged, data, name, 400, "invalid_argument", ["ref"], ref="v%201")
    assert "' '" in msg, msg
    r = cli(imaged, "image", "import", "--ref", "v 1", two_tags.layout, "--name", name)
    assert r.returncode == 2 and b"--ref" in r.stderr, r
    # --ref never splits the path: a path that is not there is named as given
    r = cli(imaged, "image", "import", "--ref", "v1", f"{two_tags.layout}:v1")
    assert r.returncode == 1 and b"No such file" in r.stderr, r


@need_umoci
def test_offline_import_of_a_two_tag_layout_by_ref(two_tags, tmp_path):
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}

    def offline(*args):
        return subprocess.run([str(CORRAL), "image", "import", "--store", str(store), *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              timeout=120)

    r = offline(two_tags.layout, "--name", "two:v1")
    assert r.returncode == 1, r
    assert b"the layout holds 2 images (v1, v2)" in r.stderr and b"PATH:REF" in r.stderr, r
    assert not list((store / "tags").iterdir()) and not list((store / "tmp").iterdir())
    r = offline(f"{two_tags.layout}:v2", "--name", "two:v2")
    assert r.returncode == 0, r.stderr.decode()
    assert (store / "tags" / "two:v2").read_text().strip() == two_tags.config_digest("v2")
    r = offline(f"{two_tags.layout}:v1")
    assert r.returncode == 1 and b"--name" in r.stderr, \
        f"a bare tag is no name: the message says to give one: {r}"


@need_umoci
def test_a_docker_archive_of_two_images(imaged, iclient, two_tags):
    data = two_tags.docker_archive.read_bytes()
    msg = assert_refused(imaged, data, unique("dnoref") + ":v1", 400, "invalid_argument",
                         [f"{TWO_REPO}:v1"])
    assert f"{TWO_REPO}:v2" in msg and "PATH:REF" in msg, \
        f"not the first image silently: both RepoTags are listed: {msg}"
    # by a RepoTag in Docker's short form, named by the RepoTag as written
    r = post_image(imaged, data, ref=f"{TWO_REPO}:v2")
    assert r.status == 201, r
    full = f"docker.io/{TWO_REPO}:v2"  # as skopeo writes RepoTags
    assert r.json()["id"] == two_tags.config_digest("v2") and full in r.json()["names"], r.json()
    with iclient.create(image=full, **SMALL) as sb:
        assert sh(sb, "cat /marker") == MARKERS["v2"]
    # by the RepoTag as written, and by the image id, under a name given
    for ref in (f"docker.io/{TWO_REPO}:v1", two_tags.config_digest("v1")):
        img = import_ok(imaged, data, unique("dtwo") + ":v1", ref=ref)
        assert img["id"] == two_tags.config_digest("v1"), (ref, img)
    msg = assert_refused(imaged, data, unique("dnone") + ":v1", 400, "invalid_argument",
                         [f"{TWO_REPO}:v3"], ref=f"{TWO_REPO}:v3")
    assert f"{TWO_REPO}:v1" in msg, msg
    name = unique("clid") + ":v1"
    r = cli(imaged, "image", "import", f"{two_tags.docker_archive}:{TWO_REPO}:v1", "--name", name)
    assert r.returncode == 0, f"FILE:REF splits at the first ':': {r.stderr.decode()}"
    assert get_image(imaged, name).json()["id"] == two_tags.config_digest("v1")


def manifest_entry(img, ref=None, platform=None):
    """An index entry for ``img``, and the blobs it needs."""
    manifest = img.manifest()
    desc = {"mediaType": MANIFEST_MEDIA, "digest": "sha256:" + sha256(manifest),
            "size": len(manifest)}
    if ref:
        desc["annotations"] = {REF_NAME: ref}
    if platform:
        os_, arch = platform.split("/")
        desc["platform"] = {"os": os_, "architecture": arch}
    return desc, [(desc["digest"], manifest)] + img.blobs()


def index_entry(children, ref=None):
    """An index entry for a nested index (a multi-platform image's) of
    ``children``, as manifest_entry() gives them."""
    index = json.dumps({"schemaVersion": 2, "mediaType": INDEX_MEDIA,
                        "manifests": [d for d, _ in children]}).encode()
    desc = {"mediaType": INDEX_MEDIA, "digest": "sha256:" + sha256(index), "size": len(index)}
    if ref:
        desc["annotations"] = {REF_NAME: ref}
    return desc, [(desc["digest"], index)] + [b for _, blobs in children for b in blobs]


def oci_index_archive(*entries):
    """An oci-archive whose index.json lists ``entries``."""
    blobs = dict(b for _, bs in entries for b in bs)
    files = [("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
             ("index.json", json.dumps({"schemaVersion": 2,
                                        "manifests": [d for d, _ in entries]}).encode())]
    files += [(f"blobs/sha256/{d.split(':')[1]}", b) for d, b in blobs.items()]
    return _archive(files, dirs=["blobs", "blobs/sha256"])


def test_platforms_and_nested_indexes(imaged):
    other = "amd64" if HOST_ARCH == "arm64" else "arm64"
    plain = Image([small_layer(marker=uuid.uuid4().hex)])
    amd = Image([small_layer(marker=uuid.uuid4().hex)])  # for this host, named so for short
    arm = Image([small_layer(marker=uuid.uuid4().hex)], arch=other)
    # one entry names no platform, one another platform: the first is the
    # only one for this host
    data = oci_index_archive(manifest_entry(plain, "plain"),
                             manifest_entry(arm, "arm", f"linux/{other}"))
    assert import_ok(imaged, data, unique("plat") + ":v1")["id"] == plain.config_digest
    assert_refused(imaged, data, unique("plat") + ":v1", 400, "invalid_argument",
                   [f"linux/{other}"], ref="arm")
    # a ref that names a nested index: its manifest for this host
    data = oci_index_archive(index_entry([manifest_entry(arm, platform=f"linux/{other}"),
                                          manifest_entry(amd, platform=f"linux/{HOST_ARCH}")],
                                         "multi"),
                             manifest_entry(plain, "other"))
    assert import_ok(imaged, data, unique("nest") + ":v1", ref="multi")["id"] == amd.config_digest
    assert import_ok(imaged, data, unique("nest") + ":v1", ref="other")["id"] == plain.config_digest
    msg = assert_refused(imaged, data, unique("nest") + ":v1", 400, "invalid_argument", ["multi"])
    assert "other" in msg and "?ref=" in msg, msg
    # an index that names no platform: a config for another platform is refused
    assert_refused(imaged, arm.oci_archive(), unique("armcfg") + ":v1", 400, "invalid_argument",
                   [f"linux/{other}"])
    # a name of Docker's short form picks containerd's full one
    full = unique("docker.io/library/short") + ":v1"
    desc, blobs = manifest_entry(amd)
    desc["annotations"] = {"io.containerd.image.name": full, REF_NAME: "v1"}
    data = oci_index_archive((desc, blobs), manifest_entry(plain, "other"))
    r = post_image(imaged, data, ref=full.removeprefix("docker.io/library/"))
    assert r.status == 201 and full in r.json()["names"], r


# ---- hostile archives ----

D, SYM, LNK = tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE
# name -> (the hostile entries, words of which the message must hold one)
HOSTILE_ENTRIES = {
    "dotdot": ([tinfo("../../etc/corral-evil", b"x")], ["../../etc/corral-evil"]),
    "dotdot-inside": ([tinfo("a/", kind=D, mode=0o755), tinfo("a/../../corral-evil", b"x")],
                      ["a/../../corral-evil"]),
    "absolute": ([tinfo("/etc/corral-evil", b"x")], ["/etc/corral-evil"]),
    "through-symlink-abs": ([tinfo("l", kind=SYM, link="/etc"), tinfo("l/passwd", b"x")],
                            ["l/passwd"]),
    "through-symlink-rel": ([tinfo("d/", kind=D, mode=0o755),
                             tinfo("d/l", kind=SYM, link="../../.."),
                             tinfo("d/l/corral-evil", b"x")], ["d/l/corral-evil"]),
    "hardlink-dotdot": ([tinfo("evil-link", kind=LNK, link="../outside")],
                        ["evil-link", "../outside"]),
    "hardlink-absolute": ([tinfo("evil-link", kind=LNK, link="/etc/passwd")],
                          ["evil-link", "/etc/passwd"]),
    "hardlink-through-symlink": ([tinfo("l", kind=SYM, link="/etc"),
                                  tinfo("evil-link", kind=LNK, link="l/passwd")],
                                 ["evil-link", "l/passwd"]),
}


def _hostile_archive(case, form):
    """The archive for a hostile case, and the words its refusal must name."""
    if case in HOSTILE_ENTRIES:
        entries, words = HOSTILE_ENTRIES[case]
        img = Image([small_layer(marker=uuid.uuid4().hex),
                     small_layer(*entries, marker=uuid.uuid4().hex)])
        return (img.oci_archive() if form == "oci" else img.docker_archive()), words
    base = small_layer(marker=uuid.uuid4().hex)
    payload = small_layer(tinfo("random.bin", os.urandom(256 << 10)))
    img = Image([base, payload])
    layer_digest = img.layers[1][2]
    if case == "layer-digest-mismatch":
        other = compress(small_layer(marker="other"), GZIP)
        return img.oci_archive(corrupt={layer_digest: other}), ["digest", layer_digest[7:19]]
    if case == "config-digest-mismatch":
        return (img.oci_archive(corrupt={img.config_digest: img.config + b" "}),
                ["digest", img.config_digest[7:19]])
    if case == "manifest-digest-mismatch":
        return img.oci_archive(bad_manifest=True), ["digest", "manifest"]
    if case == "diff-id-mismatch":
        wrong = Image([base, payload],
                      diff_ids=["sha256:" + sha256(base), "sha256:" + sha256(b"no")])
        data = wrong.oci_archive() if form == "oci" else wrong.docker_archive()
        return data, ["diff_id", "digest"]
    if case == "missing-blob":
        if form == "oci":
            return img.oci_archive(drop=[layer_digest]), [layer_digest[7:19], "missing"]
        return img.docker_archive(drop=[1]), [sha256(payload)[:12], "missing"]
    if case == "truncated":
        data = img.oci_archive() if form == "oci" else img.docker_archive()
        return data[:len(data) * 3 // 4], ["truncated", "unexpected end", "eof"]
    if case == "not-a-tar":
        return b"this is not an archive\n" * 100, ["archive", "tar"]
    if case == "empty":
        return b"", ["empty", "archive", "tar"]
    raise KeyError(case)


HOSTILE = ([(c, f) for c in HOSTILE_ENTRIES for f in ("oci", "docker")] +
           [(c, "oci") for c in ("layer-digest-mismatch", "config-digest-mismatch",
                                 "manifest-digest-mismatch")] +
           [(c, f) for c in ("diff-id-mismatch", "missing-blob", "truncated")
            for f in ("oci", "docker")] +
           [("not-a-tar", "-"), ("empty", "-")])


def assert_refused(d, data, name, status, code, words, ref=None):
    before_files, before_names = store_files(d), image_names(d)
    r = post_image(d, data, name, ref=ref)
    assert r.status == status and r.error["code"] == code, f"want {status} {code}: {r}"
    msg = r.error["message"]
    assert any(w.lower() in msg.lower() for w in words), \
        f"the message {msg!r} should name the problem (one of {words})"
    assert get_image(d, name).status == 404
    assert image_names(d) == before_names
    assert store_files(d) == before_files, \
        f"a refused import stored {sorted(store_files(d) ^ before_files)}"
    assert tmp_entries(d) == [], "a refused import left its tmp/ dir"
    return msg


@pytest.mark.parametrize("case, form", HOSTILE, ids=[f"{c}-{f}" for c, f in HOSTILE])
def test_hostile_archives_are_refused_and_nothing_is_stored(imaged, case, form):
    data, words = _hostile_archive(case, form)
    assert_refused(imaged, data, unique("hostile") + ":v1", 400, "invalid_argument", words)


def test_a_bad_name_is_refused(imaged):
    data = Image([small_layer(marker=uuid.uuid4().hex)]).oci_archive()
    for name in ("sp ace", "-lead", "x" * 300, "a//b", "../x", "n@me:v1", "sha256:abc"):
        assert_refused(imaged, data, name.replace(" ", "%20"), 400, "invalid_argument",
                       ["name"])


def test_nothing_outside_the_layer_was_written(imaged):
    """After every hostile import above, none of their targets exist on the host."""
    for p in ("/etc/corral-evil", "/corral-evil", "/tmp/corral-evil"):
        assert not os.path.exists(p), f"a hostile entry escaped to {p}"
    store = store_dir(imaged)
    assert not list(store.parent.rglob("corral-evil")), "a hostile entry escaped into the state"


IMAGE_CAP_FLAG = "--image-max-layer-mb"


@pytest.mark.parametrize("where", ["layer", "archive"])
def test_a_decompression_bomb_is_refused(corrald_factory, where):
    if IMAGE_CAP_FLAG not in corrald_options():
        pytest.skip(f"corrald has no {IMAGE_CAP_FLAG} to set a small expanded-size cap")
    d = corrald_factory(extra_args=[IMAGE_CAP_FLAG, "16"])
    zeros = _layer_tar([tinfo("zeros", bytes(64 * MIB))])
    if where == "layer":  # a 64 MiB layer gzipped to some 64 KiB
        data = Image([small_layer(), zeros]).oci_archive()
    else:  # the whole archive gzipped, its layer plain
        data = gzip.compress(Image([small_layer(), zeros], compression=PLAIN).oci_archive(), 6)
    assert len(data) < 1 * MIB
    assert_refused(d, data, "bomb:v1", 413, "payload_too_large",
                   ["16", "limit", "cap", "too large", "exceeds"])
    ok = Image([small_layer(tinfo("some", bytes(8 * MIB)))]).oci_archive()
    import_ok(d, ok, "under-the-cap:v1")


# ---- the same layers feed the VM backends ----

@need_umoci
def test_a_stored_layer_is_a_block_image_a_vm_can_attach(imaged, tree_image, tmp_path):
    """A layer file is a whole EROFS filesystem: what a VM attaches as a
    read-only block device, with no second conversion.  fsck.erofs accepts
    every layer, and one mounts from a read-only loop device (a block
    device, as virtio-blk gives a guest) with the layer's files in it."""
    layers = [store_dir(imaged) / "layers" / (d.split(":")[1] + ".erofs")
              for d in (layer["digest"] for layer in tree_image["layers"])]
    for path in layers:
        r = subprocess.run(["fsck.erofs", str(path)], capture_output=True)
        assert r.returncode == 0, f"fsck.erofs {path.name}: {r.stdout + r.stderr}"
    if not shutil.which("losetup"):
        pytest.skip("no losetup: the loop-device mount is not checked")
    r = subprocess.run(["losetup", "--find", "--show", "--read-only", str(layers[0])],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"no loop device here ({r.stderr.strip()}): the block mount is not checked")
    dev, mnt = r.stdout.strip(), tmp_path / "mnt"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "erofs", "-o", "ro", dev, str(mnt)], check=True)
        try:
            assert (mnt / "bin" / "busybox").is_file(), sorted(p.name for p in mnt.iterdir())
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)


# ---- the debian image `make images` builds ----

def test_the_debian_image_runs_python(imaged, iclient):
    """build-debian's image (debootstrap minbase + python3, in the store
    build/images that the test daemons read with --images-from) is an
    ordinary image: it runs python3."""
    if not (IMAGES / "tags" / "debian:latest").is_file():
        pytest.skip("no debian image: `make images` builds it into build/images")
    r = get_image(imaged, "debian")
    assert r.status == 200, r
    img = r.json()
    assert img["origin"] == "images-from" and len(img["layers"]) == 1, img
    with iclient.create(image="debian", **SMALL) as sb:
        r = sb.exec(["python3", "-c", "import json, sys; print(sys.version_info[0])"])
        assert (r.exit_code, r.stdout) == (0, b"3\n"), r
        assert sb.exec("echo $LANG").stdout == b"C.UTF-8\n", "the image's Env"
