/* lib/image: names, digests, and the OCI layer applier against real tars
 * (written with libarchive in memory): whiteouts and opaque directories in
 * overlayfs form, hard links, symlinks, modes; and every hostile entry the
 * applier must refuse, with nothing written outside the layer. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../../lib/image/digest.h"
#include "../../lib/image/layer.h"
#include "../../lib/image/store.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

static void test_names(void)
{
    char out[CRL_IMAGE_NAME_MAX + 1];
    struct crl_err err = CRL_ERR_INIT;
    ok(crl_image_name_canon("busybox", out, &err) == 0 && strcmp(out, "busybox:latest") == 0,
       "a bare name gets :latest");
    ok(crl_image_name_canon("reg:5000/team/app", out, &err) == 0 &&
           strcmp(out, "reg:5000/team/app:latest") == 0,
       "a registry port is not a tag");
    ok(crl_image_name_canon("team/app:v1.2", out, &err) == 0 && strcmp(out, "team/app:v1.2") == 0,
       "a tag is kept");
    static const char *const bad[] = {"",   "../x",       "/abs",  "a//b",    "a b",
                                      "a:", "sha256:abc", "a/./b", ".hidden", "a$b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        crl_err_clear(&err);
        ok(crl_image_name_canon(bad[i], out, &err) < 0 && err.code == CRL_E_INVALID,
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
    crl_rm_rf_at(AT_FDCWD, tmpl);
    return done_testing();
}
