/* lib/image: names, digests, and the OCI layer applier against real tars
 * (written with libarchive in memory): whiteouts and opaque directories in
 * overlayfs form, hard links, symlinks, modes; and every hostile entry the
 * applier must refuse, with nothing written outside the layer.  Then the
 * reader's choice of one image of several (layouts of images with no
 * layers, written here): by ref, by platform, through a nested index, in a
 * docker manifest.json, and the messages that list what is there.  Then
 * an image's kind: from its config's label into the store and back out.
 * Last, a pull from one store into another (crl_store_pull()), through a
 * fetch that can lie: every lie refused, and nothing of it kept. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../../lib/util/sha256.h"
#include "../../lib/image/layer.h"
#include "../../lib/image/oci.h"
#include "../../lib/image/store.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

static void test_names(void)
{
    char out[CRL_IMAGE_NAME_MAX + 1];
    struct crl_err err = CRL_ERR_INIT;
    ok(crl_store_name_canon("busybox", out, &err) == 0 && strcmp(out, "busybox:latest") == 0,
       "a bare name gets :latest");
    ok(crl_store_name_canon("reg:5000/team/app", out, &err) == 0 &&
           strcmp(out, "reg:5000/team/app:latest") == 0,
       "a registry port is not a tag");
    ok(crl_store_name_canon("team/app:v1.2", out, &err) == 0 && strcmp(out, "team/app:v1.2") == 0,
       "a tag is kept");
    static const char *const bad[] = {"",   "../x",       "/abs",  "a//b",    "a b",
                                      "a:", "sha256:abc", "a/./b", ".hidden", "a$b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        crl_err_clear(&err);
        ok(crl_store_name_canon(bad[i], out, &err) < 0 && err.code == CRL_E_INVALID,
           "name '%s' is refused (%s)", bad[i], err.msg);
    }
}

static void test_digest(void)
{
    char d[CRL_DIGEST_LEN + 1];
    crl_sha256_buf("abc", 3, d);
    is_str(d, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
           "sha256 of abc");
    struct crl_sha256 h;
    crl_sha256_init(&h);
    crl_sha256_update(&h, "a", 1);
    crl_sha256_update(&h, "bc", 2);
    char d2[CRL_DIGEST_LEN + 1];
    crl_sha256_final(&h, d2);
    is_str(d2, d, "streamed in pieces, the same digest");
    ok(crl_digest_valid(d), "a digest is valid");
    ok(!crl_digest_valid("sha256:ABC"), "upper case or short is not");
    ok(!crl_digest_valid("md5:ba7816bf8f01cfea414140de5dae2223"), "another algorithm is not");
}

static void test_clean_path(void)
{
    char out[256];
    ok(crl_layer_clean_path("./a//b/./c/", out, sizeof(out)) == 0 && strcmp(out, "a/b/c") == 0,
       "./ and empty components go");
    ok(crl_layer_clean_path("./", out, sizeof(out)) == 0 && out[0] == 0, "./ is the root");
    ok(crl_layer_clean_path("a/../b", out, sizeof(out)) < 0, ".. is refused");
    ok(crl_layer_clean_path("/etc/passwd", out, sizeof(out)) < 0, "absolute is refused");
    ok(crl_layer_clean_path("a/..", out, sizeof(out)) < 0, "a trailing .. is refused");
    ok(crl_layer_clean_path("a/..b", out, sizeof(out)) == 0, "..b is a name");
}

/* ---- tars ---- */

struct ent {
    const char *name;
    mode_t type;
    int perm;
    const char *data;   /* file content */
    const char *target; /* symlink target or hard link name */
};

static size_t make_tar(const struct ent *e, size_t n, char *buf, size_t cap)
{
    struct archive *w = archive_write_new();
    archive_write_set_format_pax_restricted(w);
    size_t used = 0;
    archive_write_open_memory(w, buf, cap, &used);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, e[i].name);
        archive_entry_set_perm(ae, e[i].perm ? e[i].perm : 0644);
        archive_entry_set_mtime(ae, 1700000000, 0);
        if (e[i].type == AE_IFLNK && e[i].data == NULL && e[i].target &&
            e[i].perm == -1) { /* a hard link */
            archive_entry_set_filetype(ae, AE_IFREG);
            archive_entry_set_perm(ae, 0644);
            archive_entry_set_hardlink(ae, e[i].target);
        } else {
            archive_entry_set_filetype(ae, e[i].type);
            if (e[i].type == AE_IFLNK)
                archive_entry_set_symlink(ae, e[i].target);
            if (e[i].data)
                archive_entry_set_size(ae, (la_int64_t)strlen(e[i].data));
        }
        archive_write_header(w, ae);
        if (e[i].data)
            archive_write_data(w, e[i].data, strlen(e[i].data));
        archive_entry_free(ae);
    }
    archive_write_close(w);
    archive_write_free(w);
    return used;
}

static char tmpl[PATH_MAX];

static int apply(const struct ent *e, size_t n, struct crl_err *err)
{
    static char buf[1 << 20];
    size_t len = make_tar(e, n, buf, sizeof(buf));
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    archive_read_open_memory(a, buf, len);
    char layer[PATH_MAX];
    snprintf(layer, sizeof(layer), "%s/layer", tmpl);
    crl_rm_rf_at(AT_FDCWD, layer);
    mkdir(layer, 0755);
    int root = open(layer, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct crl_layer_stats st = {0};
    int r = crl_layer_apply(a, root, "layer 0", 1000, &st, err);
    close(root);
    archive_read_free(a);
    return r;
}

static const char *at(const char *rel)
{
    static char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/layer/%s", tmpl, rel);
    return p;
}

static void test_apply_semantics(void)
{
    const struct ent e[] = {
        {"./d/", AE_IFDIR, 0755, NULL, NULL},
        {"./d/.wh..wh..opq", AE_IFREG, 0644, "", NULL},
        {"./d/new", AE_IFREG, 0644, "new\n", NULL},
        {"./.wh.gone", AE_IFREG, 0644, "", NULL},
        {"./h1", AE_IFREG, 0644, "h\n", NULL},
        {"./h2", AE_IFLNK, -1, NULL, "h1"},
        {"./abs", AE_IFLNK, 0777, NULL, "/etc/passwd"},
        {"./suid", AE_IFREG, 04755, "#!\n", NULL},
        {"./deep/er/file", AE_IFREG, 0600, "x", NULL},
    };
    struct crl_err err = CRL_ERR_INIT;
    is_int(apply(e, sizeof(e) / sizeof(e[0]), &err), 0, "a layer applies (%s)", err.msg);
    struct stat st, st2;
    ok(lstat(at("gone"), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0),
       "a whiteout is a 0/0 character device");
    ok(lstat(at(".wh.gone"), &st) < 0, "the .wh. file itself is not kept");
    char v[8] = "";
    ok(getxattr(at("d"), "trusted.overlay.opaque", v, sizeof(v)) == 1 && v[0] == 'y',
       "an opaque directory has trusted.overlay.opaque");
    ok(getxattr(at("d"), "user.overlay.opaque", v, sizeof(v)) == 1 && v[0] == 'y',
       "and user.overlay.opaque, for overlays in a user namespace");
    ok(lstat(at("d/.wh..wh..opq"), &st) < 0, "the marker itself is not kept");
    ok(stat(at("h1"), &st) == 0 && stat(at("h2"), &st2) == 0 && st.st_ino == st2.st_ino &&
           st.st_nlink == 2,
       "a hard link shares its inode");
    char t[64] = "";
    ok(readlink(at("abs"), t, sizeof(t) - 1) > 0 && strcmp(t, "/etc/passwd") == 0,
       "an absolute symlink is kept as it is (it resolves inside the sandbox)");
    ok(lstat(at("suid"), &st) == 0 && (st.st_mode & 07777) == 04755, "setuid survives");
    ok(lstat(at("deep/er/file"), &st) == 0 && (st.st_mode & 0777) == 0600,
       "missing parents are made");
    ok(lstat(at("h1"), &st) == 0 && st.st_mtime == 1700000000, "mtime is kept");
}

static void test_apply_hostile(void)
{
    static const struct {
        struct ent e[2];
        size_t n;
        const char *why;
        const char *msg;
    } cases[] = {
        {{{"../escape", AE_IFREG, 0644, "x", NULL}}, 1, "a .. entry", "'..'"},
        {{{"/abs", AE_IFREG, 0644, "x", NULL}}, 1, "an absolute entry", "absolute"},
        {{{"l", AE_IFLNK, 0777, NULL, "/tmp"},
          {"l/corral-escape-probe", AE_IFREG, 0644, "x", NULL}},
         2,
         "an entry through an absolute symlink",
         "symlink"},
        {{{"l", AE_IFLNK, 0777, NULL, "../../../.."}, {"l/x", AE_IFREG, 0644, "x", NULL}},
         2,
         "an entry through a relative symlink",
         "symlink"},
        {{{"h", AE_IFLNK, -1, NULL, "../../etc/passwd"}}, 1, "a hard link out", "outside"},
        {{{"h", AE_IFLNK, -1, NULL, "/etc/passwd"}},
         1,
         "a hard link to an absolute path",
         "outside"},
        {{{"l", AE_IFLNK, 0777, NULL, "/etc"}, {"h", AE_IFLNK, -1, NULL, "l/passwd"}},
         2,
         "a hard link through a symlink",
         "symlink"},
        {{{"h", AE_IFLNK, -1, NULL, "missing"}},
         1,
         "a hard link to nothing in the layer",
         "not in this layer"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct crl_err err = CRL_ERR_INIT;
        int r = apply(cases[i].e, cases[i].n, &err);
        ok(r < 0 && err.code == CRL_E_INVALID && strstr(err.msg, cases[i].msg), "%s is refused: %s",
           cases[i].why, err.msg);
    }
    struct stat st;
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/escape", tmpl);
    ok(lstat(p, &st) < 0 && lstat("/tmp/corral-escape-probe", &st) < 0,
       "nothing was written outside the layer");
}

/* ---- the reader: which image of several (oci.c) ---- */

static const struct crl_import_limits big = {1ull << 30, 1ull << 30, 1u << 20};

static void put_file(const char *dir, const char *name, const char *data)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs(data, f);
        fclose(f);
    }
}

/* A blob of the layout, named by its digest. */
static void put_blob(const char *layout, const char *data, char digest[CRL_DIGEST_LEN + 1])
{
    char name[128];
    crl_sha256_buf(data, strlen(data), digest);
    snprintf(name, sizeof(name), "blobs/sha256/%s", crl_digest_hex(digest));
    put_file(layout, name, data);
}

/* An image of no layers with the config `cfg`: its config's and its
 * manifest's digests. */
static void put_config(const char *layout, const char *cfg, char config[CRL_DIGEST_LEN + 1],
                       char manifest[CRL_DIGEST_LEN + 1])
{
    char man[512];
    put_blob(layout, cfg, config);
    snprintf(man, sizeof(man),
             "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
             "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
             "\"digest\":\"%s\",\"size\":%zu},\"layers\":[]}",
             config, strlen(cfg));
    put_blob(layout, man, manifest);
}

/* An image of no layers for linux/`arch`. */
static void put_image(const char *layout, const char *arch, const char *marker,
                      char config[CRL_DIGEST_LEN + 1], char manifest[CRL_DIGEST_LEN + 1])
{
    char cfg[256];
    snprintf(cfg, sizeof(cfg),
             "{\"architecture\":\"%s\",\"os\":\"linux\",\"config\":{\"Env\":[\"M=%s\"]},"
             "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
             arch, marker);
    put_config(layout, cfg, config, manifest);
}

/* An index.json entry: a manifest (or an index, `mt`) with these
 * annotations (a JSON object's inside, or "") and platform arch ("": none). */
static const char *entry(char *buf, size_t cap, const char *mt, const char *digest,
                         const char *annotations, const char *arch)
{
    char plat[96] = "";
    if (arch[0])
        snprintf(plat, sizeof(plat), ",\"platform\":{\"os\":\"linux\",\"architecture\":\"%s\"}",
                 arch);
    snprintf(buf, cap,
             "{\"mediaType\":\"application/vnd.oci.image.%s.v1+json\",\"digest\":\"%s\","
             "\"annotations\":{%s}%s}",
             mt, digest, annotations, plat);
    return buf;
}

static char layout[PATH_MAX];

static void new_layout(void)
{
    char p[PATH_MAX];
    snprintf(layout, sizeof(layout), "%s/layout", tmpl);
    crl_rm_rf_at(AT_FDCWD, layout);
    mkdir(layout, 0755);
    snprintf(p, sizeof(p), "%s/blobs", layout);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/blobs/sha256", layout);
    mkdir(p, 0755);
    put_file(layout, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}");
}

static void put_index(const char *e1, const char *e2)
{
    char idx[4096];
    snprintf(idx, sizeof(idx), "{\"schemaVersion\":2,\"manifests\":[%s%s%s]}", e1, e2 ? "," : "",
             e2 ? e2 : "");
    put_file(layout, "index.json", idx);
}

/* crl_oci_read() of the layout; *id its config digest, or "" on failure. */
static int read_ref(const char *ref, struct crl_oci_image *img, struct crl_err *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/scratch", tmpl);
    mkdir(p, 0700);
    int scratch = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    crl_err_clear(err);
    int r = crl_oci_read(-1, layout, ref, scratch, &big, img, err);
    close(scratch);
    return r;
}

/* An architecture that is not this host's. */
static const char *other_arch(void)
{
    return strcmp(crl_store_arch(), "arm64") == 0 ? "amd64" : "arm64";
}

static void test_read_by_ref(void)
{
    char c1[CRL_DIGEST_LEN + 1], m1[CRL_DIGEST_LEN + 1], c2[CRL_DIGEST_LEN + 1],
        m2[CRL_DIGEST_LEN + 1], e1[512], e2[512];
    struct crl_oci_image img;
    struct crl_err err = CRL_ERR_INIT;
    new_layout();
    put_image(layout, crl_store_arch(), "one", c1, m1);
    put_image(layout, crl_store_arch(), "two", c2, m2);
    /* as umoci writes two tags: a ref.name each, no platform */
    put_index(
        entry(e1, sizeof(e1), "manifest", m1, "\"org.opencontainers.image.ref.name\":\"v1\"", ""),
        entry(e2, sizeof(e2), "manifest", m2, "\"org.opencontainers.image.ref.name\":\"v2\"", ""));
    ok(read_ref(NULL, &img, &err) < 0 && err.code == CRL_E_INVALID &&
           strstr(err.msg, "the layout holds 2 images (v1, v2)") &&
           strstr(err.msg, "`corral image import PATH:REF`") && strstr(err.msg, "?ref=REF"),
       "two images and no ref: both listed, and how to pick one (%s)", err.msg);
    is_int(read_ref("v2", &img, &err), 0, "ref v2 reads (%s)", err.msg);
    is_str(img.id, c2, "the image v2 names");
    is_str(img.label, "v2", "known as v2");
    is_str(img.name, "", "a bare tag is no name for it");
    crl_oci_image_free(&img);
    ok(read_ref(m1, &img, &err) == 0 && strcmp(img.id, c1) == 0, "a manifest digest picks too");
    crl_oci_image_free(&img);
    ok(read_ref("v9", &img, &err) < 0 && strstr(err.msg, "no image named v9") &&
           strstr(err.msg, "v1, v2"),
       "an unknown ref is named, and what there is listed (%s)", err.msg);

    /* two tags of one manifest are one image */
    put_index(
        entry(e1, sizeof(e1), "manifest", m1, "\"org.opencontainers.image.ref.name\":\"v1\"", ""),
        entry(e2, sizeof(e2), "manifest", m1, "\"org.opencontainers.image.ref.name\":\"latest\"",
              ""));
    ok(read_ref(NULL, &img, &err) == 0 && strcmp(img.id, c1) == 0,
       "two tags of one manifest: no ref needed (%s)", err.msg);
    crl_oci_image_free(&img);

    /* containerd's names: full, with ref.name a tag only */
    put_index(entry(e1, sizeof(e1), "manifest", m1,
                    "\"io.containerd.image.name\":\"docker.io/library/a:latest\","
                    "\"org.opencontainers.image.ref.name\":\"latest\"",
                    ""),
              entry(e2, sizeof(e2), "manifest", m2,
                    "\"io.containerd.image.name\":\"docker.io/library/b:latest\","
                    "\"org.opencontainers.image.ref.name\":\"latest\"",
                    ""));
    ok(read_ref(NULL, &img, &err) < 0 &&
           strstr(err.msg, "(docker.io/library/a:latest, docker.io/library/b:latest)"),
       "containerd's full names are listed (%s)", err.msg);
    ok(read_ref("b", &img, &err) == 0 && strcmp(img.id, c2) == 0 &&
           strcmp(img.name, "docker.io/library/b:latest") == 0,
       "'b' picks docker.io/library/b:latest, which names it (%s)", err.msg);
    crl_oci_image_free(&img);
    ok(read_ref("latest", &img, &err) < 0 && strstr(err.msg, "2 images named latest") &&
           strstr(err.msg, m1) && strstr(err.msg, m2),
       "a ref two images share: refused, listing their digests (%s)", err.msg);
}

static void test_read_platforms(void)
{
    char ch[CRL_DIGEST_LEN + 1], mh[CRL_DIGEST_LEN + 1], co[CRL_DIGEST_LEN + 1],
        mo[CRL_DIGEST_LEN + 1], cn[CRL_DIGEST_LEN + 1], mn[CRL_DIGEST_LEN + 1], e1[512], e2[512],
        want[128];
    struct crl_oci_image img;
    struct crl_err err = CRL_ERR_INIT;
    const char *host = crl_store_arch(), *other = other_arch();
    new_layout();
    put_image(layout, host, "host", ch, mh);
    put_image(layout, other, "other", co, mo);
    put_index(
        entry(e1, sizeof(e1), "manifest", mo, "\"org.opencontainers.image.ref.name\":\"o\"", other),
        entry(e2, sizeof(e2), "manifest", mh, "\"org.opencontainers.image.ref.name\":\"h\"", host));
    ok(read_ref(NULL, &img, &err) == 0 && strcmp(img.id, ch) == 0,
       "the one for this host is picked (%s)", err.msg);
    crl_oci_image_free(&img);
    snprintf(want, sizeof(want), "no image named o for linux/%s (it is for linux/%s)", host, other);
    ok(read_ref("o", &img, &err) < 0 && strstr(err.msg, want),
       "a ref to another platform's image is refused (%s)", err.msg);
    put_index(entry(e1, sizeof(e1), "manifest", mo, "", other), NULL);
    snprintf(want, sizeof(want), "no image for linux/%s (it is for linux/%s)", host, other);
    ok(read_ref(NULL, &img, &err) < 0 && strstr(err.msg, want), "%s", err.msg);

    /* no platform in the index: the config is checked */
    put_index(entry(e1, sizeof(e1), "manifest", mo, "", ""), NULL);
    snprintf(want, sizeof(want), "is for linux/%s: this host runs linux/%s", other, host);
    ok(read_ref(NULL, &img, &err) < 0 && strstr(err.msg, want),
       "a config for another platform is refused (%s)", err.msg);

    /* a ref naming a nested index (a multi-platform image): by platform */
    char inner[1200], idx[1400], ci[CRL_DIGEST_LEN + 1];
    snprintf(inner, sizeof(inner),
             "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\","
             "\"manifests\":[%s,",
             entry(e1, sizeof(e1), "manifest", mo, "", other));
    snprintf(idx, sizeof(idx), "%s%s]}", inner, entry(e2, sizeof(e2), "manifest", mh, "", host));
    put_blob(layout, idx, ci);
    put_image(layout, host, "plain", cn, mn);
    put_index(
        entry(e1, sizeof(e1), "index", ci, "\"org.opencontainers.image.ref.name\":\"multi\"", ""),
        entry(e2, sizeof(e2), "manifest", mn, "\"org.opencontainers.image.ref.name\":\"x\"", ""));
    ok(read_ref("multi", &img, &err) == 0 && strcmp(img.id, ch) == 0,
       "a nested index gives its manifest for this host (%s)", err.msg);
    crl_oci_image_free(&img);
    ok(read_ref(NULL, &img, &err) < 0 && strstr(err.msg, "2 images (multi, x)"), "%s", err.msg);
    put_index(entry(e1, sizeof(e1), "index", ci, "", ""), NULL);
    ok(read_ref(NULL, &img, &err) == 0 && strcmp(img.id, ch) == 0,
       "a lone nested index needs no ref (%s)", err.msg);
    crl_oci_image_free(&img);
}

static void test_read_docker(void)
{
    char c1[CRL_DIGEST_LEN + 1], c2[CRL_DIGEST_LEN + 1], m[CRL_DIGEST_LEN + 1], man[1024],
        cfg1[160], cfg2[160];
    struct crl_oci_image img;
    struct crl_err err = CRL_ERR_INIT;
    new_layout();
    put_image(layout, crl_store_arch(), "one", c1, m);
    put_image(layout, crl_store_arch(), "two", c2, m);
    snprintf(cfg1, sizeof(cfg1), "blobs/sha256/%s", crl_digest_hex(c1));
    snprintf(cfg2, sizeof(cfg2), "blobs/sha256/%s", crl_digest_hex(c2));
    /* as `docker save` of two images writes it; skopeo's tags are in full */
    snprintf(man, sizeof(man),
             "[{\"Config\":\"%s\",\"RepoTags\":[\"docker.io/corral/one:1\"],\"Layers\":[]},"
             "{\"Config\":\"%s\",\"RepoTags\":[\"docker.io/corral/two:2\","
             "\"docker.io/corral/two:latest\"],\"Layers\":[]}]",
             cfg1, cfg2);
    put_file(layout, "manifest.json", man);
    ok(read_ref(NULL, &img, &err) < 0 &&
           strstr(err.msg, "2 images (docker.io/corral/one:1, docker.io/corral/two:2)"),
       "two images, no ref: refused, listing them (%s)", err.msg);
    ok(read_ref("corral/two", &img, &err) == 0 && strcmp(img.id, c2) == 0 &&
           strcmp(img.name, "docker.io/corral/two:latest") == 0,
       "'corral/two' picks the RepoTag docker.io/corral/two:latest, which names it (%s)", err.msg);
    crl_oci_image_free(&img);
    ok(read_ref(c1, &img, &err) == 0 && strcmp(img.id, c1) == 0 &&
           strcmp(img.name, "docker.io/corral/one:1") == 0,
       "the image id picks one, named by its first RepoTag (%s)", err.msg);
    crl_oci_image_free(&img);
    ok(read_ref("corral/one:2", &img, &err) < 0 && strstr(err.msg, "no image named corral/one:2"),
       "%s", err.msg);
}

static void test_read_many(void)
{
    char c[CRL_DIGEST_LEN + 1], m[CRL_DIGEST_LEN + 1], e[512];
    struct crl_oci_image img;
    struct crl_err err = CRL_ERR_INIT;
    new_layout();
    put_image(layout, crl_store_arch(), "one", c, m);
    /* 300 distinct entries (digests of manifests that need not exist) */
    struct crl_buf idx;
    crl_buf_init(&idx, CRL_BUF_UNBOUNDED);
    crl_buf_printf(&idx, "{\"schemaVersion\":2,\"manifests\":[");
    for (int i = 0; i < 300; i++) {
        char d[CRL_DIGEST_LEN + 1], ann[96], n[16];
        snprintf(n, sizeof(n), "%d", i);
        crl_sha256_buf(n, strlen(n), d);
        snprintf(ann, sizeof(ann), "\"org.opencontainers.image.ref.name\":\"tag-%d\"", i);
        crl_buf_printf(&idx, "%s%s", i ? "," : "", entry(e, sizeof(e), "manifest", d, ann, ""));
    }
    crl_buf_printf(&idx, "]}");
    crl_buf_append(&idx, "", 1);
    put_file(layout, "index.json", idx.data);
    crl_buf_free(&idx);
    ok(read_ref(NULL, &img, &err) < 0 && strstr(err.msg, "holds 300 images (tag-0, tag-1") &&
           strstr(err.msg, " more)") && strstr(err.msg, "?ref=REF"),
       "a long list is cut short and the message still says how to pick (%s)", err.msg);
}

static void test_ref_check(void)
{
    struct crl_err err = CRL_ERR_INIT;
    char long_ref[300];
    memset(long_ref, 'a', sizeof(long_ref) - 1);
    long_ref[sizeof(long_ref) - 1] = 0;
    ok(crl_store_ref_check("v1", &err) == 0 &&
           crl_store_ref_check("docker.io/library/app:1.0-rc+1", &err) == 0 &&
           crl_store_ref_check("app@sha256:0123", &err) == 0,
       "tags, full names and digests are refs");
    static const char *const bad[] = {"", "a b", "v1\n", "a$b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        crl_err_clear(&err);
        ok(crl_store_ref_check(bad[i], &err) < 0 && err.code == CRL_E_INVALID,
           "ref '%s' is refused (%s)", bad[i], err.msg);
    }
    ok(crl_store_ref_check(long_ref, &err) < 0 && strstr(err.msg, "longer"), "%s", err.msg);
}

/* ---- an image's kind (store.c) ---- */

/* A config of no layers for this host, with `inner` as its "config". */
static const char *kind_config(char *buf, size_t cap, const char *inner)
{
    snprintf(buf, cap,
             "{\"architecture\":\"%s\",\"os\":\"linux\",\"config\":%s,"
             "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}",
             crl_store_arch(), inner);
    return buf;
}

/* Import a layout of one image with config `cfg` as `name`; its kind as the
 * store's JSON gives it ("" if the import failed), and as its record has it. */
static void import_kind(struct crl_store *st, const char *cfg, const char *name, char *kind,
                        size_t cap, const char **rec_kind, struct crl_store_image **img)
{
    char c[CRL_DIGEST_LEN + 1], m[CRL_DIGEST_LEN + 1], e[512];
    struct crl_err err = CRL_ERR_INIT;
    json_t *out = NULL;
    new_layout();
    put_config(layout, cfg, c, m);
    put_index(entry(e, sizeof(e), "manifest", m, "", ""), NULL);
    snprintf(kind, cap, "%s", "");
    *img = NULL;
    *rec_kind = "(no record)";
    if (crl_store_import(st, -1, layout, name, NULL, &big, &out, &err) < 0) {
        diag("import %s: %s", name, err.msg);
        return;
    }
    snprintf(kind, cap, "%s", json_string_value(json_object_get(out, "kind")));
    json_decref(out);
    if (crl_store_lookup(st, name, img, &err) == 0)
        *rec_kind = (*img)->kind;
}

static void test_kind(void)
{
    static const char diff[] =
        "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    char path[PATH_MAX], kind[32], c[512];
    struct crl_err err = CRL_ERR_INIT;
    struct crl_store *st = NULL;
    struct crl_store_image *img = NULL;
    const char *rec = NULL;

    /* what build-vm writes, and what build-debian does */
    json_t *rt = json_pack("{s:[s], s:s}", "cmd", "/bin/bash", "kind", "vm");
    json_t *cfg = crl_store_config_json(rt, diff);
    json_t *labels = json_object_get(json_object_get(cfg, "config"), "Labels");
    is_str(json_string_value(json_object_get(labels, CRL_IMAGE_KIND_LABEL)), "vm",
           "kind vm goes out as the label " CRL_IMAGE_KIND_LABEL);
    json_decref(cfg);
    json_object_set_new(rt, "kind", json_string("appliance"));
    cfg = crl_store_config_json(rt, diff);
    ok(!json_object_get(json_object_get(cfg, "config"), "Labels"),
       "an unknown kind goes out as nothing: no Labels");
    json_decref(cfg);
    json_object_del(rt, "kind");
    cfg = crl_store_config_json(rt, diff);
    ok(!json_object_get(json_object_get(cfg, "config"), "Labels"),
       "an ordinary image's config has no Labels (its id is what it was)");
    json_decref(cfg);

    snprintf(path, sizeof(path), "%s/store", tmpl);
    if (crl_store_open(path, true, &st, &err) < 0) {
        fail("open a store: %s", err.msg);
        json_decref(rt);
        return;
    }
    /* the round trip: build-vm's config (with no layer) imported */
    json_object_set_new(rt, "kind", json_string("vm"));
    cfg = crl_store_config_json(rt, diff);
    json_object_set_new(json_object_get(cfg, "rootfs"), "diff_ids", json_array());
    json_object_set_new(cfg, "architecture", json_string(crl_store_arch()));
    char *text = json_dumps(cfg, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(cfg);
    import_kind(st, text, "kind/vm:1", kind, sizeof(kind), &rec, &img);
    free(text);
    is_str(kind, "vm", "an image labelled " CRL_IMAGE_KIND_LABEL "=vm is of kind vm");
    is_str(rec, "vm", "and its record, read back from the store, says so");
    crl_store_image_free(img);

    /* beside other labels, as a Dockerfile's LABEL makes them */
    import_kind(
        st,
        kind_config(c, sizeof(c), "{\"Labels\":{\"maintainer\":\"x\",\"org.corral.kind\":\"vm\"}}"),
        "kind/labels:1", kind, sizeof(kind), &rec, &img);
    ok(strcmp(kind, "vm") == 0 && rec && strcmp(rec, "vm") == 0,
       "the kind label among others: vm (%s)", kind);
    crl_store_image_free(img);

    static const char *const others[][2] = {
        {"{\"org.corral.kind\":\"appliance\"}", "an unknown kind"},
        {"{\"org.corral.kind\":7}", "a kind that is no string"},
        {"{\"org.corral.kind\":\"VM\"}", "VM (kinds are lower case)"},
        {"null", "Labels null"},
    };
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        char inner[128], name[32];
        snprintf(inner, sizeof(inner), "{\"Labels\":%s}", others[i][0]);
        snprintf(name, sizeof(name), "kind/other:%zu", i);
        import_kind(st, kind_config(c, sizeof(c), inner), name, kind, sizeof(kind), &rec, &img);
        ok(strcmp(kind, "container") == 0 && img && !rec, "%s is ignored: kind container (%s)",
           others[i][1], kind);
        crl_store_image_free(img);
    }
    import_kind(st, kind_config(c, sizeof(c), "{}"), "kind/plain:1", kind, sizeof(kind), &rec,
                &img);
    ok(strcmp(kind, "container") == 0 && img && !rec, "no Labels: kind container (%s)", kind);
    crl_store_image_free(img);
    crl_store_close(st);
    json_decref(rt);
}

/* ---- a pull from one store into another ---- */

struct fetcher {
    struct crl_store *from;
    unsigned calls;
    bool flip;            /* change a byte of a layer on its way */
    const char *id;       /* the image's: */
    const char *swap_cfg; /* send this config for its config */
};

static int fetch_from(void *ctx, const char *digest, int fd, uint64_t max, struct crl_err *err)
{
    struct fetcher *f = ctx;
    f->calls++;
    if (f->swap_cfg && strcmp(digest, f->id) == 0)
        return crl_write_full(fd, f->swap_cfg, strlen(f->swap_cfg)) < 0 ? -1 : 0;
    int in = crl_store_blob_open(f->from, digest, err);
    if (in < 0)
        return -1;
    char buf[65536];
    ssize_t n;
    uint64_t got = 0;
    while ((n = read(in, buf, sizeof(buf))) > 0) {
        if ((got += (uint64_t)n) > max) {
            close(in);
            return crl_err_set(err, CRL_E_TOO_LARGE, "over %llu", (unsigned long long)max);
        }
        if (f->flip && strcmp(digest, f->id) != 0 && got == (uint64_t)n)
            buf[n / 2] ^= 1;
        crl_write_full(fd, buf, (size_t)n);
    }
    close(in);
    return 0;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* A pull of `remote` into a fresh store: its error code (CRL_OK) and message. */
static enum crl_errc pull_into(const char *sub, json_t *remote, struct fetcher *f, char *msg,
                               size_t cap, json_t **out)
{
    char path[PATH_MAX];
    struct crl_store *to = NULL;
    struct crl_err err = CRL_ERR_INIT;
    snprintf(path, sizeof(path), "%s/%s", tmpl, sub);
    if (crl_store_open(path, true, &to, &err) == 0)
        crl_store_pull(to, remote, "pulled:1", fetch_from, f, &big, out, &err);
    snprintf(msg, cap, "%s", err.msg);
    if (err.code != CRL_OK) {
        char d[PATH_MAX + 16];
        snprintf(d, sizeof(d), "%s/layers", path);
        ok(count_entries(d) == 0, "%s: no layer kept", sub);
        snprintf(d, sizeof(d), "%s/tmp", path);
        ok(count_entries(d) == 0, "%s: nothing left in tmp/", sub);
        struct crl_store_image *img = NULL;
        struct crl_err e = CRL_ERR_INIT;
        ok(crl_store_lookup(to, "pulled:1", &img, &e) < 0, "%s: no image", sub);
        crl_store_image_free(img);
    }
    crl_store_close(to);
    return err.code;
}

static void test_pull(void)
{
    char path[PATH_MAX], msg[512];
    struct crl_store *from = NULL;
    struct crl_err err = CRL_ERR_INIT;
    json_t *out = NULL;
    snprintf(path, sizeof(path), "%s/pull-root", tmpl);
    mkdir(path, 0755);
    put_file(path, "hello", "a file to pull");
    put_file(path, "other", "and another");
    snprintf(msg, sizeof(msg), "%s/pull-from", tmpl);
    json_t *rt = json_pack("{s:[s]}", "cmd", "/hello");
    if (crl_store_open(msg, true, &from, &err) < 0 ||
        crl_store_import_rootfs(from, path, rt, "src:1", &out, &err) < 0) {
        fail("an image to pull: %s", err.msg);
        json_decref(rt);
        crl_store_close(from);
        return;
    }
    json_decref(rt);
    json_t *layer = json_array_get(json_object_get(out, "layers"), 0);
    ok(crl_digest_valid(json_string_value(json_object_get(layer, "file_digest"))),
       "an import records its layer file's digest");

    struct fetcher f = {.from = from};
    json_t *got = NULL;
    is_int(pull_into("to-ok", out, &f, msg, sizeof(msg), &got), CRL_OK, "a pull: %s", msg);
    is_str(json_string_value(json_object_get(got, "id")),
           json_string_value(json_object_get(out, "id")), "the same image id");
    ok(json_equal(json_object_get(got, "layers"), json_object_get(out, "layers")),
       "the same layers, file digests and all");
    is_int(f.calls, 2, "its config and its one layer fetched");
    json_decref(got);
    got = NULL;
    /* again into the same store: the layer is there, only the config comes */
    f.calls = 0;
    is_int(pull_into("to-ok", out, &f, msg, sizeof(msg), &got), CRL_OK, "again: %s", msg);
    is_int(f.calls, 1, "a layer the store has is not fetched again");
    json_decref(got);

    const char *id = json_string_value(json_object_get(out, "id"));
    f = (struct fetcher){.from = from, .flip = true, .id = id};
    is_int(pull_into("to-flip", out, &f, msg, sizeof(msg), NULL), CRL_E_INVALID,
           "a layer changed on its way is refused");
    like(msg, "digest mismatch", "and says so: %s", msg);

    f = (struct fetcher){.from = from, .id = id, .swap_cfg = "{\"rootfs\":{\"diff_ids\":[]}}"};
    is_int(pull_into("to-cfg", out, &f, msg, sizeof(msg), NULL), CRL_E_INVALID,
           "a config that is not the image's is refused");
    like(msg, "digest mismatch", "by its digest: %s", msg);

    static const struct {
        const char *key, *value_json, *why;
        enum crl_errc code;
    } lies[] = {
        {"digest", "\"sha256:0000000000000000000000000000000000000000000000000000000000000000\"",
         "a layer the config does not name", CRL_E_INVALID},
        {"file_digest", "null", "no file digest (an older corral's record)", CRL_E_UNSUPPORTED},
        {"size", "0", "a size of 0", CRL_E_INVALID},
        {"size", "-5", "a negative size", CRL_E_INVALID},
        {"size", "\"12\"", "a size that is no number", CRL_E_INVALID},
        {"size", "2000000000000", "a size over the limit", CRL_E_TOO_LARGE},
        {"size", "10", "a size smaller than the file", CRL_E_TOO_LARGE},
    };
    for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
        json_t *lie = json_deep_copy(out);
        json_t *l = json_array_get(json_object_get(lie, "layers"), 0);
        json_object_set_new(l, lies[i].key, json_loads(lies[i].value_json, JSON_DECODE_ANY, NULL));
        char sub[32];
        snprintf(sub, sizeof(sub), "to-lie-%zu", i);
        f = (struct fetcher){.from = from};
        enum crl_errc code = pull_into(sub, lie, &f, msg, sizeof(msg), NULL);
        ok(code == lies[i].code, "%s: refused (%s)", lies[i].why, msg);
        json_decref(lie);
    }
    json_t *lie = json_deep_copy(out);
    json_array_append(json_object_get(lie, "layers"), layer);
    is_int(pull_into("to-lie-n", lie, &f, msg, sizeof(msg), NULL), CRL_E_INVALID,
           "more layers than the config names: refused (%s)", msg);
    json_object_set_new(lie, "id", json_string("sha256:x"));
    is_int(pull_into("to-lie-id", lie, &f, msg, sizeof(msg), NULL), CRL_E_INVALID,
           "no valid id: refused (%s)", msg);
    json_decref(lie);
    json_decref(out);
    crl_store_close(from);
}

int main(void)
{
    snprintf(tmpl, sizeof(tmpl), "/tmp/corral-test-image.XXXXXX");
    if (!mkdtemp(tmpl))
        skip_all("mkdtemp failed");
    TAP_RUN(test_names, 10);
    TAP_RUN(test_digest, 10);
    TAP_RUN(test_clean_path, 10);
    TAP_RUN(test_apply_semantics, 30);
    TAP_RUN(test_apply_hostile, 30);
    TAP_RUN(test_read_by_ref, 30);
    TAP_RUN(test_read_platforms, 30);
    TAP_RUN(test_read_docker, 30);
    TAP_RUN(test_read_many, 30);
    TAP_RUN(test_ref_check, 10);
    TAP_RUN(test_kind, 30);
    TAP_RUN(test_pull, 60);
    crl_rm_rf_at(AT_FDCWD, tmpl);
    return done_testing();
}
