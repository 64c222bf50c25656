/* lib/traj/ckpt_blob.c: the checkpoint store's blobs.  Round trip,
 * idempotence, dedup, corrupt, truncated and missing ones, stale tmp
 * files. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/util/sha256.h"
#include "ckpt_fixture.h"

static void test_blobs(void)
{
    make_dir();
    struct crl_ckpt_store *s = open_store("b");
    struct crl_err e = CRL_ERR_INIT;
    char id[CRL_CKPT_ID_MAX], id2[CRL_CKPT_ID_MAX];
    const char *text = "hello, checkpoint";
    ok(crl_blob_put(s, text, strlen(text), id, &e) == 0 && crl_ckpt_store_sync(s, &e) == 0,
       "put a blob");
    char want[CRL_CKPT_ID_MAX];
    crl_sha256_buf(text, strlen(text), want);
    is_str(id, want, "its id is the sha256 of its bytes");
    struct stat st1, st2;
    must(stat(at("b/sha256/%s", id + 7), &st1) == 0, "stat", "blob");
    ok(crl_blob_put(s, text, strlen(text), id2, &e) == 0 && strcmp(id, id2) == 0,
       "the same bytes again give the same id");
    must(stat(at("b/sha256/%s", id + 7), &st2) == 0, "stat", "blob");
    ok(st1.st_ino == st2.st_ino && st1.st_size == st2.st_size,
       "and the existing blob is not rewritten");
    is_int(count_blobs("b"), 1, "one file in sha256/");

    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    ok(crl_blob_get(s, id, &b, 1 << 20, &e) == 0 && b.len == strlen(text) &&
           memcmp(b.data, text, b.len) == 0,
       "get gives the bytes back");
    crl_buf_free(&b);
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    is_int(crl_blob_get(s, id, &b, 4, &e), -1, "get past max fails");
    is_int(e.code, CRL_E_TOO_LARGE, "with CRL_E_TOO_LARGE");
    crl_buf_free(&b);

    /* A big blob, compressible, streamed both ways. */
    size_t big = 3u << 20;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)((i * 7) ^ (i >> 11));
    ok(crl_blob_put(s, data, big, id2, &e) == 0, "put 3 MiB");
    must(stat(at("b/sha256/%s", id2 + 7), &st1) == 0, "stat", "blob");
    diag("3 MiB stored as %lld bytes", (long long)st1.st_size);
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    ok(crl_blob_get(s, id2, &b, big, &e) == 0 && b.len == big && memcmp(b.data, data, big) == 0,
       "and get it back");
    crl_buf_free(&b);
    free(data);

    char empty[CRL_CKPT_ID_MAX];
    ok(crl_blob_put(s, "", 0, empty, &e) == 0 && count_blobs("b") == 2,
       "the empty blob is not written");
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    ok(crl_blob_get(s, empty, &b, 10, &e) == 0 && b.len == 0, "but it is always there");
    crl_buf_free(&b);

    /* Missing, malformed, corrupt and truncated blobs. */
    char missing[CRL_CKPT_ID_MAX];
    crl_sha256_buf("nope", 4, missing);
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    is_int(crl_blob_get(s, missing, &b, 100, &e), -1, "a missing blob");
    is_int(e.code, CRL_E_NOT_FOUND, "is CRL_E_NOT_FOUND");
    is_int(crl_blob_get(s, "sha256:xyz", &b, 100, &e), -1, "a malformed id");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");
    const char *path = at("b/sha256/%s", id + 7);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    must(fd >= 0, "open", path);
    char c;
    off_t end = lseek(fd, 0, SEEK_END);
    must(pread(fd, &c, 1, end - 3) == 1, "read", path);
    c ^= 0x20;
    must(pwrite(fd, &c, 1, end - 3) == 1, "write", path);
    close(fd);
    is_int(crl_blob_get(s, id, &b, 100, &e), -1, "a corrupt blob");
    is_int(e.code, CRL_E_INTERNAL, "is CRL_E_INTERNAL");
    like(e.msg, id + 7, "naming its file");
    diag("%s", e.msg);
    must(truncate(path, 6) == 0, "truncate", path);
    is_int(crl_blob_get(s, id, &b, 100, &e), -1, "a truncated blob");
    like(e.msg, "corrupt", "is corrupt too: %s", e.msg);
    crl_buf_free(&b);
    crl_ckpt_store_close(s);

    /* tmp/: old leftovers go at open, recent ones stay. */
    wfile(at("b/tmp/old.tmp"), "x", 0600);
    wfile(at("b/tmp/new.tmp"), "x", 0600);
    set_mtime(at("b/tmp/old.tmp"), time(NULL) - 7200, 0);
    s = open_store("b");
    ok(access(at("b/tmp/old.tmp"), F_OK) < 0 && access(at("b/tmp/new.tmp"), F_OK) == 0,
       "open removes tmp files older than an hour, and only those");
    crl_ckpt_store_close(s);
    remove_dir();
}

int main(void)
{
    if (geteuid() != 0)
        skip_all("not root: the tests chown, mknod whiteouts and set trusted.* xattrs");
    TAP_RUN(test_blobs, 60);
    return done_testing();
}
