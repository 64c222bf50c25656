"""Images (issue 3): importing OCI and Docker images, and what a sandbox sees.

The image umoci builds (images_common.py) is imported as an oci-archive, a
docker-archive and an OCI layout (through the API, the CLI and the SDK),
and its tree is checked from inside a sandbox against what OCI says it must
be.  Then the image's config, layers compressed each way, many layers, what
a layer may not do (overlay metadata, device nodes), and the debian image
`make images` builds.

The HTTP API is the contract under test (POST/GET /v1/images...).  One
corrald of this module's own holds the store (<state>/images) the tests
look into.
"""

import shutil
import tarfile
import uuid

import pytest

import corral
from conftest import SMALL, need_debian
from images_common import (check_tree, cli, compress, DEFAULT_OUTPUT, get_image, GZIP, Image,
                           IMAGE_CONFIG, image_names, import_ok, layer_files, layer_tar, MTIME,
                           need_umoci, PLAIN, post_image, runnable_layer, sh, small_layer,
                           store_dir, store_files, TAG, tinfo, tmp_entries, unique, XATTR, ZSTD)


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
              layer_tar([tinfo("gz.txt", b"gzip layer\n")]),
              layer_tar([tinfo("zst.txt", b"zstd layer\n")])]
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
    layers += [layer_tar([tinfo("l/", kind=tarfile.DIRTYPE, mode=0o755),
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
    upper = layer_tar([
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


# ---- the debian image `make images` builds ----

@need_debian
def test_the_debian_image_runs_python(imaged, iclient):
    """build-debian's image (debootstrap minbase + python3, in the store
    build/images that the test daemons read with --images-from) is an
    ordinary image: it runs python3."""
    r = get_image(imaged, "debian")
    assert r.status == 200, r
    img = r.json()
    assert img["origin"] == "images-from" and len(img["layers"]) == 1, img
    with iclient.create(image="debian", **SMALL) as sb:
        r = sb.exec(["python3", "-c", "import json, sys; print(sys.version_info[0])"])
        assert (r.exit_code, r.stdout) == (0, b"3\n"), r
        assert sb.exec("echo $LANG").stdout == b"C.UTF-8\n", "the image's Env"
