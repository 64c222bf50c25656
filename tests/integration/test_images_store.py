"""Images (issue 3): corrald's content-addressed image store.

An image imported again, or in another form, is stored once, and so are the
base layers images share; two imports of one image at once; rm refused
while a sandbox uses the image; tag; gc; restarts and crashes mid-import; a
read-only store imported into offline; the SDK's and the CLI's image
commands; and a stored layer is a block image a VM can attach.

One corrald of this module's own holds the store (<state>/images) the tests
look into.
"""

import io
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

import corral
from conftest import SMALL, descendants, wait_gone
from images_common import (check_tree, cli, CORRAL, gc, get_image, hexes, Image, image_names,
                           import_ok, layer_files, layer_tar, MIB, need_umoci, post_image,
                           remove_image, runnable_layer, sh, small_layer, store_dir, store_files,
                           TAG, tinfo, tmp_entries, unique)


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


def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.parametrize("victim", ["corrald", "importer"])
def test_a_crash_mid_import_leaves_no_image_and_a_retry_works(corrald_factory, victim):
    d = corrald_factory()
    import_ok(d, Image([runnable_layer(tinfo("first.txt", b"first\n"))]).oci_archive(), "first:v1")
    big = Image([runnable_layer(), layer_tar([tinfo("big.bin", os.urandom(12 * MIB))])])
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
        helpers = descendants(d.pid)
        if victim == "corrald":
            d.kill()
            left = wait_gone(helpers)
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
