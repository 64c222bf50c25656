/* lib/traj/ckpt_manifest.c: manifests and their chains.  A chain
 * flattened past 32, each step restored exactly; damaged and missing blobs
 * and manifests found by a restore, a check and an index load. */
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/sha256.h"
#include "ckpt_fixture.h"

/* ---- a long chain ---- */

static json_t *manifest(struct crl_ckpt_store *s, const char *id)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    json_t *j = NULL;
    if (crl_blob_get(s, id, &b, 1 << 24, NULL) == 0)
        j = json_loadb(b.data, b.len, 0, NULL);
    crl_buf_free(&b);
    return j;
}

static void test_deep_chain(void)
{
    make_dir();
    mkd(at("src"), 0755);
    mkd(at("src/d"), 0755);
    wfile(at("src/base"), "always here", 0644);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    char ids[41][CRL_CKPT_ID_MAX];
    int bad_depth = 0, flat_at = 0;
    for (int i = 1; i <= 40; i++) {
        char c[64];
        snprintf(c, sizeof(c), "step %d", i);
        wfile(at("src/counter"), c, 0644);
        if (i % 5 == 0)
            wfile(at("src/d/f%d", i), c, 0644);
        if (i % 7 == 0)
            rm(at("src/d/f%d", i - 2 - (i - 2) % 5));
        if (take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, ids[i], NULL) < 0)
            break;
        char keep[32];
        snprintf(keep, sizeof(keep), "keep%d", i);
        mkd(at("%s", keep), 0755);
        copy_tree(at("src"), at("%s", keep));
        json_t *m = manifest(s, ids[i]);
        int depth = (int)json_integer_value(json_object_get(m, "depth"));
        bool null_parent = json_is_null(json_object_get(m, "parent"));
        int want = i <= 32 ? i : i - 32;
        if (depth != want || null_parent != (want == 1))
            bad_depth++, diag("step %d: depth %d", i, depth);
        if (i == 33 && null_parent)
            flat_at = i;
        if (i > 1 && !null_parent &&
            strcmp(json_string_value(json_object_get(m, "parent")), ids[i - 1]) != 0)
            bad_depth++, diag("step %d: parent is not step %d", i, i - 1);
        json_decref(m);
    }
    is_int(bad_depth, 0, "depths and parents as expected over 40 steps");
    is_int(flat_at, 33, "the 33rd checkpoint is written flattened (parent null)");
    static const int check[] = {1, 31, 32, 33, 34, 40};
    for (size_t k = 0; k < CRL_ARRAY_SIZE(check); k++) {
        char keep[32], what[32];
        snprintf(keep, sizeof(keep), "keep%d", check[k]);
        snprintf(what, sizeof(what), "step %d", check[k]);
        check_restore(s, ids[check[k]], at("%s", keep), NULL, 0, what);
    }
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_ckpt_check(s, ids[40], &e) == 0, "check of step 40: %s", e.msg);
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* ---- damage ---- */

static void test_damage(void)
{
    make_dir();
    mkd(at("src"), 0755);
    wfile(at("src/victim"), "the content that will be damaged", 0644);
    wfile(at("src/other"), "fine", 0644);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    char id[CRL_CKPT_ID_MAX], blob[CRL_CKPT_ID_MAX];
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, NULL) == 0, "a checkpoint");
    const char *content = "the content that will be damaged";
    crl_sha256_buf(content, strlen(content), blob);
    const char *path = at("store/sha256/%s", blob + 7);
    /* Flip a byte of the data (the last 3 bytes are zstd's block end). */
    int fd = open(path, O_RDWR | O_CLOEXEC);
    must(fd >= 0, "open", path);
    char c;
    off_t end = lseek(fd, 0, SEEK_END);
    must(pread(fd, &c, 1, end - 5) == 1, "read", path);
    c ^= 1;
    must(pwrite(fd, &c, 1, end - 5) == 1, "write", path);
    close(fd);
    struct crl_err e = CRL_ERR_INIT;
    int tfd = memfd_create("t", MFD_CLOEXEC);
    is_int(crl_ckpt_write_tar(s, id, tfd, NULL, &e), -1, "restoring over a corrupt blob fails");
    is_int(e.code, CRL_E_INTERNAL, "with CRL_E_INTERNAL");
    like(e.msg, blob + 7, "naming the blob's file");
    like(e.msg, "victim", "and the path: %s", e.msg);
    close(tfd);
    must(unlink(path) == 0, "unlink", path);
    is_int(crl_ckpt_check(s, id, &e), -1, "check: a blob is missing");
    is_int(e.code, CRL_E_NOT_FOUND, "CRL_E_NOT_FOUND");
    like(e.msg, blob, "naming it: %s", e.msg);
    tfd = memfd_create("t", MFD_CLOEXEC);
    is_int(crl_ckpt_write_tar(s, id, tfd, NULL, &e), -1, "restoring it fails");
    is_int(e.code, CRL_E_NOT_FOUND, "with CRL_E_NOT_FOUND");
    close(tfd);
    must(unlink(at("store/sha256/%s", id + 7)) == 0, "unlink", "manifest");
    is_int(crl_ckpt_check(s, id, &e), -1, "check: the manifest is missing");
    is_int(e.code, CRL_E_NOT_FOUND, "CRL_E_NOT_FOUND: %s", e.msg);
    struct crl_ckpt_index *loaded = NULL;
    is_int(crl_ckpt_index_load(s, id, &loaded, &e), -1, "index_load of a missing checkpoint");
    /* A blob that is valid zstd and the right hash but not a manifest. */
    char junk[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "[1,2,3]", 7, junk, NULL);
    is_int(crl_ckpt_check(s, junk, &e), -1, "a blob that is not a manifest");
    like(e.msg, "not a version 1 manifest", "is refused: %s", e.msg);
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

int main(void)
{
    if (geteuid() != 0)
        skip_all("not root: the tests chown, mknod whiteouts and set trusted.* xattrs");
    TAP_RUN(test_deep_chain, 120);
    TAP_RUN(test_damage, 30);
    return done_testing();
}
