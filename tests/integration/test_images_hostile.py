"""Images (issue 3): imports that must be refused.

Hostile archives built here in Python (paths out of the layer, links
through symlinks, digests that do not match, missing blobs, truncated or
empty archives), bad names and decompression bombs: each is refused with a
message naming the problem, and nothing is stored, left in tmp/ or written
outside the layer.
"""

import gzip
import os
import tarfile
import uuid

import pytest

from images_common import (assert_refused, compress, corrald_options, GZIP, Image, import_ok,
                           layer_tar, MIB, PLAIN, sha256, small_layer, store_dir, tinfo, unique)


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
    zeros = layer_tar([tinfo("zeros", bytes(64 * MIB))])
    if where == "layer":  # a 64 MiB layer gzipped to some 64 KiB
        data = Image([small_layer(), zeros]).oci_archive()
    else:  # the whole archive gzipped, its layer plain
        data = gzip.compress(Image([small_layer(), zeros], compression=PLAIN).oci_archive(), 6)
    assert len(data) < 1 * MIB
    assert_refused(d, data, "bomb:v1", 413, "payload_too_large",
                   ["16", "limit", "cap", "too large", "exceeds"])
    ok = Image([small_layer(tinfo("some", bytes(8 * MIB)))]).oci_archive()
    import_ok(d, ok, "under-the-cap:v1")
