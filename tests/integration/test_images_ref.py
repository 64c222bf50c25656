"""Images (issue 10): archives of several images, and the ref that picks one.

A umoci layout with two tags, a docker-archive of two images (as `docker
save A B` writes one), and OCI indexes with platforms and nested indexes:
each image imports by its ref through the API, the CLI and the SDK; without
a ref, or with one that names no image, the refusal lists what is there.
"""

import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid

import pytest

from conftest import HOST_ARCH, SMALL
from images_common import (_repack, _unpack, assert_refused, Built, cli, CORRAL, get_image, Image,
                           import_ok, INDEX_MEDIA, MANIFEST_MEDIA, need_umoci, PASSWD, post_image,
                           REF_NAME, run, sh, sha256, small_layer, tar_of, tmp_entries, unique,
                           write_file)


# ---- several images in one archive: picking one by its ref (issue 10) ----

MARKERS = {"v1": "the first image\n", "v2": "the second image\n"}
TWO_REPO = "corral-test/two"


class TwoTags(Built):
    """An OCI layout umoci made with two tags, v1 and v2, each a runnable
    image with its own /marker and no platform in index.json (as umoci
    writes it); and a docker-archive of both, as `docker save A B` writes
    one."""

    def __init__(self, work):
        super().__init__(work)
        self.layout = work / "two"
        self.docker_archive = work / "two.docker.tar"


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
    return tar_of(list(files.items()))


def build_two_tags(work):
    t = TwoTags(work)
    run("umoci", "init", "--layout", t.layout)
    run("umoci", "new", "--image", f"{t.layout}:v1")
    for tag in ("v1", "v2"):
        if tag == "v2":
            run("umoci", "tag", "--image", f"{t.layout}:v1", "v2")
        bundle = work / f"two-bundle-{tag}"
        root = _unpack(t, bundle, tag)
        if tag == "v1":
            for d in ("bin", "etc", "proc", "sys", "dev", "tmp", "root"):
                (root / d).mkdir(exist_ok=True)
            shutil.copy2("/bin/busybox", root / "bin/busybox")
            for a in ("sh", "cat"):
                (root / "bin" / a).symlink_to("busybox")
            write_file(root / "etc/passwd", PASSWD)
        write_file(root / "marker", MARKERS[tag])
        _repack(t, bundle, tag)
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
    return tar_of(files, dirs=["blobs", "blobs/sha256"])


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
