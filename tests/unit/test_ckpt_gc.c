/* lib/traj/ckpt_gc.c: garbage collection.  Mark and sweep: what stays
 * restores exactly, missing and corrupt manifests, the grace and what makes
 * a blob young again, a sweep that died holding a blob; a million marks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/sha256.h"
#include "ckpt_fixture.h"

/* ---- garbage collection ---- */

static const char *blob_file(const char *sub, const char *id)
{
    return at("%s/sha256/%s", sub, id + 7);
}

static bool has_content(const char *sub, const char *content)
{
    char id[CRL_CKPT_ID_MAX];
    crl_sha256_buf(content, strlen(content), id);
    return access(blob_file(sub, id), F_OK) == 0;
}

/* Make a file look written `secs` ago. */
static void age(const char *path, time_t secs)
{
    set_mtime(path, time(NULL) - secs, 0);
}

static bool fresh(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && st.st_mtime >= time(NULL) - 60;
}

/* Two trajectories of two checkpoints each, sharing a content: a is kept,
 * b is not. */
static void test_gc(void)
{
    make_dir();
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *ia = crl_ckpt_index_new(), *ib = crl_ckpt_index_new();
    struct crl_err e = CRL_ERR_INIT;
    char a1[CRL_CKPT_ID_MAX], a2[CRL_CKPT_ID_MAX], b1[CRL_CKPT_ID_MAX], b2[CRL_CKPT_ID_MAX];
    char resp[CRL_CKPT_ID_MAX], orphan[CRL_CKPT_ID_MAX];
    mkd(at("a"), 0755);
    wfile(at("a/shared"), "in both trajectories", 0644);
    wfile(at("a/mine"), "only in a's first step", 0644);
    mkd(at("keep_a1"), 0755);
    copy_tree(at("a"), at("keep_a1"));
    int fails = take(s, ia, at("a"), CRL_LAYER_PLAIN, 0, a1, NULL) < 0;
    wfile(at("a/later"), "a's second step", 0644);
    rm(at("a/mine"));
    fails += take(s, ia, at("a"), CRL_LAYER_PLAIN, 0, a2, NULL) < 0;
    mkd(at("b"), 0755);
    wfile(at("b/copy"), "in both trajectories", 0644);
    wfile(at("b/own"), "only in b", 0644);
    fails += take(s, ib, at("b"), CRL_LAYER_PLAIN, 0, b1, NULL) < 0;
    wfile(at("b/own"), "b's second step", 0644);
    fails += take(s, ib, at("b"), CRL_LAYER_PLAIN, 0, b2, NULL) < 0;
    fails += crl_blob_put(s, "a response body", 15, resp, NULL) < 0;
    fails += crl_blob_put(s, "nobody's", 8, orphan, NULL) < 0;
    is_int(fails, 0, "four checkpoints, two more blobs");
    is_int(count_blobs("store"), 11, "11 blobs: 4 manifests, 5 contents (one shared), 2 others");

    struct crl_ckpt_marks *m = crl_ckpt_marks_new();
    uint64_t missing = 0;
    ok(crl_ckpt_mark_checkpoint(s, m, a2, &missing, &e) == 0 &&
           crl_ckpt_mark_blob(m, resp, &e) == 0,
       "mark a's last checkpoint and a response blob: %s", e.msg);
    is_int(missing, 0, "nothing is missing");
    is_int(crl_ckpt_marks_count(m), 6, "6 marked: 2 manifests, 3 contents, the response");
    ok(crl_ckpt_marked(m, a1) && !crl_ckpt_marked(m, b1) && !crl_ckpt_marked(m, orphan),
       "the parent is marked with its child; b and the orphan are not");
    ok(crl_ckpt_mark_blob(m, NULL, &e) == 0 && crl_ckpt_mark_blob(m, "", &e) == 0 &&
           crl_ckpt_mark_checkpoint(s, m, "", NULL, &e) == 0 && crl_ckpt_marks_count(m) == 6,
       "NULL and \"\" mark nothing");
    is_int(crl_ckpt_mark_blob(m, "sha256:xyz", &e), -1, "a malformed blob id");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");
    is_int(crl_ckpt_mark_checkpoint(s, m, "nope", NULL, &e), -1, "a malformed checkpoint id");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");

    struct crl_ckpt_gc_stats gs;
    crl_err_clear(&e);
    ok(crl_ckpt_sweep(s, m, 0, &gs, &e) == 0, "sweep with a grace of 0: %s", e.msg);
    is_int(gs.blobs_removed, 5, "5 removed: b's 2 manifests and 2 own contents, the orphan");
    is_int(gs.blobs_kept, 6, "the 6 marked kept");
    is_int(gs.young_kept, 0, "none kept as young");
    ok(gs.bytes_removed > 0, "bytes removed counted (%llu)", (unsigned long long)gs.bytes_removed);
    is_int(count_blobs("store"), 6, "6 files left in sha256/");
    ok(access(blob_file("store", b1), F_OK) < 0 && access(blob_file("store", b2), F_OK) < 0 &&
           !has_content("store", "only in b") && !has_content("store", "b's second step") &&
           access(blob_file("store", orphan), F_OK) < 0,
       "b's own blobs and the orphan are gone");
    ok(has_content("store", "in both trajectories"), "the content b shared with a stays");
    ok(has_content("store", "only in a's first step"),
       "a content only a's first checkpoint holds stays: the chain was marked");
    check_restore(s, a2, at("a"), NULL, 0, "a's last checkpoint after the sweep");
    check_restore(s, a1, at("keep_a1"), NULL, 0, "a's first checkpoint after the sweep");
    ok(crl_ckpt_check(s, a2, &e) == 0, "check: a is complete: %s", e.msg);
    is_int(crl_ckpt_check(s, b2, &e), -1, "check: b is gone");
    is_int(e.code, CRL_E_NOT_FOUND, "CRL_E_NOT_FOUND");
    ok(crl_ckpt_sweep(s, m, 0, &gs, &e) == 0 && gs.blobs_removed == 0 && gs.blobs_kept == 6,
       "a second sweep removes nothing");
    crl_ckpt_marks_free(m);

    /* Missing blobs are counted; a chain is read once per set. */
    m = crl_ckpt_marks_new();
    missing = 0;
    ok(crl_ckpt_mark_checkpoint(s, m, b2, &missing, &e) == 0, "mark a checkpoint that is gone");
    is_int(missing, 1, "its manifest is counted missing, not fatal");
    char only_a[CRL_CKPT_ID_MAX];
    crl_sha256_buf("only in a's first step", 22, only_a);
    must(unlink(blob_file("store", only_a)) == 0, "unlink", only_a);
    ok(crl_ckpt_mark_checkpoint(s, m, a2, &missing, &e) == 0, "mark a with a content missing");
    is_int(missing, 2, "the content is counted missing too");
    ok(crl_ckpt_marked(m, only_a), "and still marked");
    wfile(blob_file("store", a1), "not a zstd frame", 0600);
    ok(crl_ckpt_mark_checkpoint(s, m, a2, &missing, &e) == 0 && missing == 2,
       "a chain marked already is not read again (its first manifest now damaged)");
    crl_ckpt_marks_free(m);
    m = crl_ckpt_marks_new();
    is_int(crl_ckpt_mark_checkpoint(s, m, a2, NULL, &e), -1, "a corrupt manifest in the chain");
    is_int(e.code, CRL_E_INTERNAL, "is CRL_E_INTERNAL");
    like(e.msg, a1 + 7, "naming its file: %s", e.msg);
    char junk[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "[1,2,3]", 7, junk, NULL);
    is_int(crl_ckpt_mark_checkpoint(s, m, junk, NULL, &e), -1, "a blob that is not a manifest");
    like(e.msg, "not a version 1 manifest", "is refused: %s", e.msg);
    like(e.msg, "store/sha256/", "naming its file");
    crl_ckpt_marks_free(m);

    crl_ckpt_index_free(ia);
    crl_ckpt_index_free(ib);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* The grace: young blobs stay, a put of an existing blob (or a take that
 * finds its contents and manifest stored) makes it young, old tmp/ files
 * go, a blob a sweep held is put back. */
static void test_gc_young(void)
{
    make_dir();
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_marks *none = crl_ckpt_marks_new();
    struct crl_err e = CRL_ERR_INIT;
    struct crl_ckpt_gc_stats gs;
    char young[CRL_CKPT_ID_MAX], old[CRL_CKPT_ID_MAX], again[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "young", 5, young, NULL);
    crl_blob_put(s, "old", 3, old, NULL);
    age(blob_file("store", old), 7200);
    ok(crl_ckpt_sweep(s, none, 3600, &gs, &e) == 0, "sweep with a grace of an hour: %s", e.msg);
    ok(gs.young_kept == 1 && access(blob_file("store", young), F_OK) == 0,
       "an unmarked blob younger than the grace stays");
    ok(gs.blobs_removed == 1 && access(blob_file("store", old), F_OK) < 0,
       "an unmarked blob older than it goes");

    crl_blob_put(s, "old", 3, old, NULL);
    age(blob_file("store", old), 7200);
    struct stat st1, st2;
    must(stat(blob_file("store", old), &st1) == 0, "stat", old);
    ok(crl_blob_put(s, "old", 3, again, &e) == 0 && fresh(blob_file("store", old)),
       "a put of an existing blob makes its mtime now");
    must(stat(blob_file("store", old), &st2) == 0, "stat", old);
    ok(st1.st_ino == st2.st_ino, "without rewriting it");
    ok(crl_ckpt_sweep(s, none, 3600, &gs, &e) == 0 && gs.young_kept == 2 && gs.blobs_removed == 0,
       "so a sweep keeps it as young");

    /* A take storing contents (small and streamed) and a manifest the store
     * has: each made young. */
    mkd(at("src"), 0755);
    wfile(at("src/small"), "a small content", 0644);
    size_t big = (1u << 20) + 99;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i % 253);
    wfile_len(at("src/big"), data, big, 0644);
    char small_id[CRL_CKPT_ID_MAX], big_id[CRL_CKPT_ID_MAX], id[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "a small content", 15, small_id, NULL);
    crl_blob_put(s, data, big, big_id, NULL);
    free(data);
    age(blob_file("store", small_id), 7200);
    age(blob_file("store", big_id), 7200);
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats cs;
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &cs) == 0 && cs.blobs_new == 1,
       "a take whose contents are stored: only its manifest is new");
    ok(fresh(blob_file("store", small_id)) && fresh(blob_file("store", big_id)),
       "and both contents, found stored, are made young");
    crl_ckpt_index_free(idx);
    age(blob_file("store", id), 7200);
    idx = crl_ckpt_index_new();
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, again, &cs) == 0 && strcmp(id, again) == 0 &&
           cs.blobs_new == 0,
       "the same state again: the same manifest, nothing written");
    ok(fresh(blob_file("store", id)), "and the manifest, found stored, is made young");
    crl_ckpt_index_free(idx);

    /* tmp/: by age too; names in sha256/ no blob has are left alone. */
    wfile(at("store/tmp/old.tmp"), "x", 0600);
    wfile(at("store/tmp/new.tmp"), "x", 0600);
    age(at("store/tmp/old.tmp"), 100);
    wfile(at("store/sha256/README"), "not a blob", 0600);
    age(at("store/sha256/README"), 7200);
    ok(crl_ckpt_sweep(s, none, 50, &gs, &e) == 0, "sweep with a grace of 50 s: %s", e.msg);
    is_int(gs.tmp_removed, 1, "one tmp file removed");
    ok(access(at("store/tmp/old.tmp"), F_OK) < 0 && access(at("store/tmp/new.tmp"), F_OK) == 0,
       "the one older than the grace");
    ok(access(at("store/sha256/README"), F_OK) == 0, "a name that is no blob's stays");

    is_int(crl_ckpt_sweep(s, none, -1, &gs, &e), -1, "a negative grace");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");

    /* A sweep that died holding a blob: the next open puts it back. */
    char held[CRL_CKPT_ID_MAX];
    crl_blob_put(s, "held by a sweep", 15, held, NULL);
    crl_ckpt_store_close(s);
    must(rename(blob_file("store", held), at("store/tmp/%s.0123456789abcdef.gc", held + 7)) == 0,
         "rename", held);
    age(at("store/tmp/%s.0123456789abcdef.gc", held + 7), 7200);
    s = open_store("store");
    ok(access(blob_file("store", held), F_OK) == 0 &&
           access(at("store/tmp/%s.0123456789abcdef.gc", held + 7), F_OK) < 0,
       "a blob a dead sweep held in tmp/ is put back at open");
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    ok(crl_blob_get(s, held, &b, 100, &e) == 0 && b.len == 15, "and reads back");
    crl_buf_free(&b);

    crl_ckpt_marks_free(none);
    crl_ckpt_store_close(s);
    remove_dir();
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void random_id(uint64_t *seed, char id[CRL_CKPT_ID_MAX])
{
    int n = snprintf(id, CRL_CKPT_ID_MAX, "sha256:");
    for (int i = 0; i < 4; i++)
        n += snprintf(id + n, (size_t)(CRL_CKPT_ID_MAX - n), "%016llx",
                      (unsigned long long)splitmix(seed));
}

/* A million marks, the all-zero digest, and digests sharing 16 bytes. */
static void test_marks(void)
{
    enum { N = 1000000 };
    struct crl_ckpt_marks *m = crl_ckpt_marks_new();
    char id[CRL_CKPT_ID_MAX];
    char(*ids)[CRL_CKPT_ID_MAX] = malloc(2 * (size_t)N * sizeof(*ids));
    uint64_t seed = 42;
    for (int i = 0; i < 2 * N; i++)
        random_id(&seed, ids[i]);
    int bad = 0;
    unsigned long long t = crl_now_ns();
    for (int i = 0; i < N; i++)
        bad += crl_ckpt_mark_blob(m, ids[i], NULL) < 0;
    unsigned long long add = crl_now_ns() - t;
    is_int(bad, 0, "a million ids marked");
    is_int(crl_ckpt_marks_count(m), N, "a million in the set");
    t = crl_now_ns();
    for (int i = 0; i < N; i++)
        bad += !crl_ckpt_marked(m, ids[i]);
    unsigned long long hit = crl_now_ns() - t;
    t = crl_now_ns();
    for (int i = N; i < 2 * N; i++)
        bad += crl_ckpt_marked(m, ids[i]);
    unsigned long long miss = crl_now_ns() - t;
    is_int(bad, 0, "each of them is marked, and a million others are not");
    diag("a million marks: %.0f ms to add, %.0f ms to find, %.0f ms to miss a million others",
         ms(add), ms(hit), ms(miss));
    free(ids);

    static const char *const malformed[] = {
        "sha256:",
        "sha256:0123",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
        "sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
        "sha512:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(malformed); i++) {
        struct crl_err e = CRL_ERR_INIT;
        bad += crl_ckpt_mark_blob(m, malformed[i], &e) != -1 || e.code != CRL_E_INVALID ||
               crl_ckpt_marked(m, malformed[i]);
    }
    is_int(bad, 0, "malformed ids (short, long, upper case, no or another prefix) are refused");
    char zero[CRL_CKPT_ID_MAX];
    snprintf(zero, sizeof(zero), "sha256:%064d", 0);
    ok(!crl_ckpt_marked(m, zero), "the all-zero digest is not marked");
    ok(crl_ckpt_mark_blob(m, zero, NULL) == 0 && crl_ckpt_marked(m, zero) &&
           crl_ckpt_marks_count(m) == N + 1,
       "until it is");
    crl_ckpt_marks_free(m);

    m = crl_ckpt_marks_new();
    for (int i = 0; i < 2000; i++) {
        snprintf(id, sizeof(id), "sha256:%032x%032x", 0xabcdef, i);
        bad += crl_ckpt_mark_blob(m, id, NULL) < 0 || crl_ckpt_mark_blob(m, id, NULL) < 0;
    }
    for (int i = 0; i < 4000; i++) {
        snprintf(id, sizeof(id), "sha256:%032x%032x", 0xabcdef, i);
        bad += crl_ckpt_marked(m, id) != (i < 2000);
    }
    ok(bad == 0 && crl_ckpt_marks_count(m) == 2000,
       "2,000 ids sharing their first 16 bytes, each marked twice: 2,000 in the set");
    crl_ckpt_marks_free(m);
}

int main(void)
{
    if (geteuid() != 0)
        skip_all("not root: the tests chown, mknod whiteouts and set trusted.* xattrs");
    TAP_RUN(test_gc, 60);
    TAP_RUN(test_gc_young, 60);
    TAP_RUN(test_marks, 120);
    return done_testing();
}
