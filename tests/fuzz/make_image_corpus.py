#!/usr/bin/python3
"""Write the seed corpus of fuzz_image (tests/fuzz/corpus/image/).

Small archives, made here with the standard library (and zstd(1) if
present): valid oci-archives and docker-archives of one or two tiny layers
(text files, a whiteout, an opaque directory, a hard link, a symlink), the
same compressed whole, and hostile ones: each damaged in one way, with valid
manifests so the damage is what is refused.  The OCI ones name their image
in full in org.opencontainers.image.ref.name, since the fuzzer imports
without a name.  Archives of several images (two tags, platforms, a nested
index, containerd's names, a docker save of two) have one named v2, which
the fuzzer picks when an import without a ref is refused.  The output is
deterministic,
so rerunning it changes nothing unless this script changed.

    tests/fuzz/make_image_corpus.py [OUT_DIR]
"""

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

MTIME = 1000000000




def entry(name, data=b"", kind=tarfile.REGTYPE, mode=0o644, link="", major=0, minor=0):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.mtime = kind, mode, link, MTIME
    info.devmajor, info.devminor = major, minor
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def tar(entries):
    """A tar without the zero padding to a 10 KiB record: the two zero blocks
    that end an archive are enough, and the seeds stay small."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for info, data in entries:
            t.addfile(info, io.BytesIO(data) if data else None)
        end = t.offset
    return buf.getvalue()[:end] + bytes(1024)


def files_tar(files):
    """An outer archive of (name, bytes)."""
    return tar([entry(n, d) for n, d in files])


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def gz(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


def zstd(data):
    return subprocess.run(["zstd", "-q", "-19", "-c"], input=data, stdout=subprocess.PIPE,
                          check=True).stdout


MEDIA = {"gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
         "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
         "plain": "application/vnd.oci.image.layer.v1.tar"}


def config_of(layers, diff_ids=None, arch="amd64"):
    return json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers",
                   "diff_ids": diff_ids or [digest(t) for t in layers]}},
        sort_keys=True, separators=(",", ":")).encode()


def image(layers, how="gzip", diff_ids=None, arch="amd64"):
    """(manifest, [blobs]) of an image: its manifest, config and layers."""
    comp = {"gzip": gz, "zstd": zstd, "plain": lambda d: d}[how]
    blobs = [comp(t) for t in layers]
    config = config_of(layers, diff_ids, arch)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": MEDIA[how], "digest": digest(b), "size": len(b)}
                   for b in blobs]}, separators=(",", ":")).encode()
    return manifest, [config, manifest] + blobs


def descriptor(blob, media="manifest", annotations=None, arch=None):
    d = {"mediaType": f"application/vnd.oci.image.{media}.v1+json", "digest": digest(blob),
         "size": len(blob)}
    if annotations:
        d["annotations"] = annotations
    if arch:
        d["platform"] = {"os": "linux", "architecture": arch}
    return d


def oci_layout_tar(descriptors, blobs, corrupt=None, drop=()):
    corrupt = corrupt or {}
    index = json.dumps({"schemaVersion": 2, "manifests": descriptors},
                       separators=(",", ":")).encode()
    files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
    seen = set()
    for b in blobs:
        d = digest(b)
        if d not in drop and d not in seen:
            seen.add(d)
            files.append(("blobs/sha256/" + d[7:], corrupt.get(d, b)))
    return files_tar(files)


def oci_archive(layers, how="gzip", diff_ids=None, corrupt=None, drop=(), ref="fuzz/image:v1"):
    manifest, blobs = image(layers, how, diff_ids)
    return oci_layout_tar([descriptor(manifest, annotations={REF: ref})], blobs, corrupt, drop)


REF = "org.opencontainers.image.ref.name"


def several_images():
    """Archives of several images, one of them v2."""
    one = image([tar([entry("one", b"1\n")])])
    two = image([tar([entry("two", b"2\n")])])
    arm = image([tar([entry("arm", b"arm\n")])], arch="arm64")
    nested = json.dumps({"schemaVersion": 2,
                         "mediaType": "application/vnd.oci.image.index.v1+json",
                         "manifests": [descriptor(arm[0], arch="arm64"),
                                       descriptor(two[0], arch="amd64")]},
                        separators=(",", ":")).encode()
    out = {
        "oci_two_tags": oci_layout_tar(  # as umoci writes it: tags, no platform
            [descriptor(one[0], annotations={REF: "v1"}),
             descriptor(two[0], annotations={REF: "v2"})], one[1] + two[1]),
        "oci_platforms": oci_layout_tar(
            [descriptor(arm[0], annotations={REF: "fuzz/image:arm"}, arch="arm64"),
             descriptor(two[0], annotations={REF: "fuzz/image:v2"}, arch="amd64")],
            arm[1] + two[1]),
        "oci_nested_index": oci_layout_tar(
            [descriptor(nested, "index", {REF: "v2"}), descriptor(one[0], annotations={REF: "v1"})],
            [nested] + arm[1] + two[1] + one[1]),
        "oci_containerd_names": oci_layout_tar(
            [descriptor(one[0], annotations={"io.containerd.image.name": "docker.io/fuzz/one:v1",
                                             REF: "v1"}),
             descriptor(two[0], annotations={"io.containerd.image.name": "docker.io/fuzz/two:v2",
                                             REF: "v2"})], one[1] + two[1]),
        "oci_config_arm64": oci_layout_tar([descriptor(arm[0], annotations={REF: "fuzz/arm:v1"})],
                                           arm[1]),
    }
    layers = [[tar([entry("one", b"1\n")])], [tar([entry("two", b"2\n")])]]
    files, manifest = [], []
    for tags, ls in zip((["fuzz/one:v1"], ["docker.io/fuzz/two:v2", "v2"]), layers):
        config = config_of(ls)
        names = [hashlib.sha256(t).hexdigest() + "/layer.tar" for t in ls]
        manifest.append({"Config": digest(config)[7:] + ".json", "RepoTags": tags,
                         "Layers": names})
        files += [(digest(config)[7:] + ".json", config), *zip(names, ls)]
    files.append(("manifest.json", json.dumps(manifest, separators=(",", ":")).encode()))
    out["docker_two_images"] = files_tar(files)
    return out


def docker_archive(layers, diff_ids=None, repo_tag="fuzz/image:v1"):
    config = config_of(layers, diff_ids)
    names = [hashlib.sha256(t).hexdigest() + "/layer.tar" for t in layers]
    manifest = json.dumps([{"Config": digest(config)[7:] + ".json", "RepoTags": [repo_tag],
                            "Layers": names}], separators=(",", ":")).encode()
    return files_tar([(digest(config)[7:] + ".json", config), *zip(names, layers),
                      ("manifest.json", manifest)])


D, SYM, LNK = tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE
BASE = tar([entry("etc/", kind=D, mode=0o755), entry("etc/hello", b"hello\n"),
            entry("opq/", kind=D, mode=0o755), entry("opq/old", b"old\n"),
            entry("gone", b"gone\n")])
TOP = tar([entry(".wh.gone"), entry("opq/", kind=D, mode=0o755), entry("opq/.wh..wh..opq"),
           entry("opq/new", b"new\n"), entry("a", b"linked\n"), entry("b", kind=LNK, link="a"),
           entry("s", kind=SYM, link="../etc/hello"), entry("suid", b"x", mode=0o4755),
           entry("fifo", kind=tarfile.FIFOTYPE)])


def seeds():
    one = [tar([entry("hello.txt", b"hello\n"), entry("dir/", kind=D, mode=0o755),
                entry("dir/note", b"note\n")])]
    two = [BASE, TOP]
    out = {
        "oci_one_layer": oci_archive(one),
        "oci_tag_only": oci_archive(one, ref="v1"),  # as skopeo writes it: needs a name
        "oci_plain_layer": oci_archive(one, how="plain"),
        "oci_two_layers": oci_archive(two),
        "oci_gzip_whole": gz(oci_archive(one, how="plain")),
        "docker_one_layer": docker_archive(one),
        "docker_two_layers": docker_archive(two),
        "docker_gzip_whole": gz(docker_archive(one)),
    }
    if shutil.which("zstd"):
        out["oci_zstd_layer"] = oci_archive(one, how="zstd")
    hostile = {
        "dotdot": [entry("../../etc/evil", b"x")],
        "absolute": [entry("/etc/evil", b"x")],
        "through_symlink": [entry("l", kind=SYM, link="/etc"), entry("l/passwd", b"x")],
        "hardlink_out": [entry("h", kind=LNK, link="../outside")],
    }
    for name, entries in hostile.items():
        out[f"oci_hostile_{name}"] = oci_archive([BASE, tar(entries)])
    # kept, inert (layers are mounted nodev)
    out["oci_device"] = oci_archive([BASE, tar([entry("mem", kind=tarfile.CHRTYPE, mode=0o666,
                                                      major=1, minor=1)])])
    out["docker_hostile_dotdot"] = docker_archive([tar(hostile["dotdot"])])
    layer = one[0]
    out["oci_layer_digest_mismatch"] = oci_archive(
        one, corrupt={digest(gz(layer)): gz(BASE)})
    out["oci_diff_id_mismatch"] = oci_archive(one, diff_ids=[digest(BASE)])
    out["docker_diff_id_mismatch"] = docker_archive(one, diff_ids=[digest(BASE)])
    out["oci_missing_blob"] = oci_archive(one, drop={digest(gz(layer))})
    full = oci_archive(two)
    out["oci_truncated"] = full[:len(full) * 2 // 3]
    # 8 MiB of zeros: over the fuzzer's 4 MiB layer cap, some 8 KiB gzipped
    out["oci_bomb"] = oci_archive([tar([entry("zeros", bytes(8 << 20))])])
    out.update(several_images())
    return out


def main():
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else
                   Path(__file__).resolve().parent / "corpus" / "image")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in sorted(seeds().items()):
        (out_dir / name).write_bytes(data)
        print(f"{len(data):7d} {out_dir / name}")


if __name__ == "__main__":
    main()
