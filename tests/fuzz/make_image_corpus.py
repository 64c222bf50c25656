#!/usr/bin/python3
"""Write the seed corpus of fuzz_image (tests/fuzz/corpus/image/).

Small archives, made here with the standard library (and zstd(1) if
present): valid oci-archives and docker-archives of one or two tiny layers
(text files, a whiteout, an opaque directory, a hard link, a symlink), the
same compressed whole, and hostile ones: each damaged in one way, with valid
manifests so the damage is what is refused.  The OCI ones name their image
in full in org.opencontainers.image.ref.name, since the fuzzer imports
without a name.  The output is deterministic,
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


def config_of(layers, diff_ids=None):
    return json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers",
                   "diff_ids": diff_ids or [digest(t) for t in layers]}},
        sort_keys=True, separators=(",", ":")).encode()


def oci_archive(layers, how="gzip", diff_ids=None, corrupt=None, drop=(), ref="fuzz/image:v1"):
    corrupt = corrupt or {}
    comp = {"gzip": gz, "zstd": zstd, "plain": lambda d: d}[how]
    blobs = [comp(t) for t in layers]
    config = config_of(layers, diff_ids)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": MEDIA[how], "digest": digest(b), "size": len(b)}
                   for b in blobs]}, separators=(",", ":")).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": digest(manifest), "size": len(manifest),
        "annotations": {"org.opencontainers.image.ref.name": ref}}]},
        separators=(",", ":")).encode()
    files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
    for b in [config, manifest] + blobs:
        d = digest(b)
        if d not in drop:
            files.append(("blobs/sha256/" + d[7:], corrupt.get(d, b)))
    return files_tar(files)


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
