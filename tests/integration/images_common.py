"""What the image tests (test_images_*.py) share: the images they import,
the daemon they import them into, and how they look into its store.

  an image umoci builds   a multi-layer OCI layout (a whiteout, a directory
                          replaced wholesale, an opaque directory, hard links,
                          symlinks, a setuid file, ownership, an xattr, an
                          mtime) that skopeo turns into an oci-archive and a
                          docker-archive: `built`, and EXPECTED_TREE with
                          check_tree() to hold a sandbox's tree against it
  archives made here      Image (oci and docker archives of layers written in
                          Python), small_layer(), runnable_layer(), tinfo()
  talking to corrald      post_image(), import_ok(), get_image(), gc(), cli()...
                          and the store's files: store_files(), layer_files(),
                          tmp_entries(); assert_refused() for an import that
                          must be refused leaving nothing behind

Fixtures: `built` (made once a run: files only), `imaged` (a corrald of each
test module's own, so its store holds only what the module's tests put
there), `iclient` (a client on it) and `tree_image` (the umoci image
imported into it as tree:v1).  conftest.py loads this module as a plugin,
so the fixtures reach every test module and the assertions here are
rewritten by pytest like a test module's.
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import BUILD, HOST_ARCH, start_corrald

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


def layer_tar(entries):
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


def write_file(path, text, mode=0o644, owner=None):
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
    write_file(root / "etc/passwd", PASSWD)
    write_file(root / "etc/group", GROUP)
    helper_c = work / "xattr-get.c"
    helper_c.write_text(XATTR_GET_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc and subprocess.run([cc, "-static", "-Os", "-o", str(root / "bin/xattr-get"),
                              str(helper_c)], stderr=subprocess.DEVNULL).returncode == 0:
        b.xattr_helper = True
    write_file(root / "data/keep.txt", "keep\n")
    write_file(root / "data/gone.txt", "gone\n")
    write_file(root / "data/modify.txt", "layer1\n")
    write_file(root / "opq/old1", "old1\n")
    write_file(root / "opq/oldsub/old2", "old2\n")
    write_file(root / "replaced/a", "a\n")
    write_file(root / "replaced/sub/b", "b\n")
    _repack(b, bundle)

    # layer 2: umoci's diff of the changes below
    root = _unpack(b, bundle)
    (root / "data/gone.txt").unlink()
    shutil.rmtree(root / "replaced")
    write_file(root / "replaced/new", "new\n")
    write_file(root / "hl/a", "hard\n")
    os.link(root / "hl/a", root / "hl/b")
    (root / "sl").mkdir()
    (root / "sl/rel").symlink_to("../data/keep.txt")
    (root / "sl/abs").symlink_to("/data/keep.txt")
    (root / "sl/dangling").symlink_to("/nonexistent")
    write_file(root / "bin/suid", "#!/bin/sh\nid -u\n", 0o755)
    (root / "bin/suid").chmod(0o4755)  # chmod after write: write_text may drop the bit
    (root / "home/app").mkdir()
    os.chown(root / "home/app", 1000, 1000)
    (root / "home/app").chmod(0o750)
    write_file(root / "home/app/owned", "mine\n", 0o640, (1000, 1000))
    write_file(root / "data/xattr.txt", "xattr\n")
    os.setxattr(root / "data/xattr.txt", XATTR[0], XATTR[1])
    (root / "empty").mkdir()
    write_file(root / "data/old.txt", "old\n")
    os.utime(root / "data/old.txt", (MTIME, MTIME))
    write_file(root / "data/private", "private\n", 0o600)
    _repack(b, bundle)

    # The branch: layers 1 and 2 shared, a layer of its own on top.
    run("umoci", "tag", "--image", f"{b.layout}:{TAG}", "branch")
    root = _unpack(b, bundle, "branch")
    write_file(root / "data/branch.txt", "branch\n")
    _repack(b, bundle, "branch")

    # layer 3: umoci never writes opaque markers (it whites out each old
    # entry), so this one is made here and added verbatim.
    layer3 = work / "layer3.tar"
    layer3.write_bytes(layer_tar([
        tinfo("opq/", kind=tarfile.DIRTYPE, mode=0o755),
        tinfo("opq/.wh..wh..opq", mode=0o600),
        tinfo("opq/new1", b"new1\n"),
        tinfo("opq/newsub/", kind=tarfile.DIRTYPE, mode=0o755),
        tinfo("opq/newsub/n2", b"n2\n"),
    ]))
    run("umoci", "raw", "add-layer", "--image", f"{b.layout}:{TAG}", layer3)

    # layer 4: a file of layer 1 modified
    root = _unpack(b, bundle)
    write_file(root / "data/modify.txt", "layer4\n")
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


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    if not (shutil.which("umoci") and shutil.which("skopeo")):
        pytest.skip("needs umoci and skopeo (apt-get install umoci skopeo)")
    return build_umoci_image(tmp_path_factory.mktemp("umoci"))


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
        return tar_of(files, dirs=["blobs", "blobs/sha256"])

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
        return tar_of(files)


def tar_of(files, dirs=()):
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
    return layer_tar([tinfo("etc/", kind=tarfile.DIRTYPE, mode=0o755),
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
    return layer_tar(entries + list(extra))


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


@pytest.fixture(scope="module")
def imaged(tmp_path_factory):
    """A corrald of the test module's own, so its store holds only what the
    module's tests put there."""
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
