/* Garbage collection: sets of marked blob ids, marking a checkpoint's
 * chain and contents, and the sweep that removes what is unmarked and old
 * (the rules are in ckpt.h). */
#include "ckpt_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/fdio.h"

#define MARKS_MIN_CAP ((size_t)1024)

/* A set of digests, each kept in place (32 bytes): open addressing, linear
 * probing, at most 3/4 full; 1M digests take 64 MiB.  The all-zero digest
 * stands for a free slot and is kept aside.  Digests are as good as random,
 * but a sandbox's contents are not trusted and files whose digests share a
 * chosen prefix are cheap to make: the slot comes from a keyed hash of 16
 * bytes of the digest, not from its first bytes. */
struct dset {
    uint8_t (*slots)[DIGEST_BYTES];
    size_t cap; /* 0 or a power of two */
    size_t count;
    unsigned shift; /* 64 - log2(cap) */
    bool has_zero;
    uint64_t k0, k1; /* odd */
};

struct crl_ckpt_marks {
    struct dset blobs;  /* what a sweep keeps */
    struct dset walked; /* manifests whose chain and contents are marked */
};

/* A blob id ("sha256:<64 hex>") to bytes; false if malformed. */
static bool id_bin(const char *id, uint8_t out[DIGEST_BYTES])
{
    return id && strncmp(id, "sha256:", 7) == 0 && crl__ckpt_hex_bin(id + 7, out) &&
           id[7 + 64] == 0;
}

static const uint8_t zero_digest[DIGEST_BYTES];

static bool is_zero(const uint8_t *d)
{
    return memcmp(d, zero_digest, DIGEST_BYTES) == 0;
}

/* Where dg is, or the free slot where it would go. */
static size_t dset_slot(const struct dset *d, const uint8_t *dg)
{
    uint64_t w0, w1;
    memcpy(&w0, dg, 8);
    memcpy(&w1, dg + 8, 8);
    size_t mask = d->cap - 1;
    for (size_t i = (size_t)(((w0 * d->k0) ^ (w1 * d->k1)) >> d->shift);; i = (i + 1) & mask)
        if (memcmp(d->slots[i], dg, DIGEST_BYTES) == 0 || is_zero(d->slots[i]))
            return i;
}

static bool dset_has(const struct dset *d, const uint8_t *dg)
{
    if (is_zero(dg))
        return d->has_zero;
    return d->cap && memcmp(d->slots[dset_slot(d, dg)], dg, DIGEST_BYTES) == 0;
}

static int dset_grow(struct dset *d)
{
    struct dset n = *d;
    n.cap = d->cap ? d->cap * 2 : MARKS_MIN_CAP;
    n.shift = 64 - (unsigned)__builtin_ctzll(n.cap);
    if (!(n.slots = calloc(n.cap, sizeof(*n.slots))))
        return -1;
    for (size_t i = 0; i < d->cap; i++)
        if (!is_zero(d->slots[i]))
            memcpy(n.slots[dset_slot(&n, d->slots[i])], d->slots[i], DIGEST_BYTES);
    free(d->slots);
    *d = n;
    return 0;
}

/* 1 if dg is new to the set, 0 if it was there, -1 out of memory. */
static int dset_add(struct dset *d, const uint8_t *dg)
{
    if (is_zero(dg)) {
        bool had = d->has_zero;
        d->has_zero = true;
        return !had;
    }
    size_t i = d->cap ? dset_slot(d, dg) : 0;
    if (d->cap && !is_zero(d->slots[i]))
        return 0;
    if ((d->count + 1) * 4 > d->cap * 3) {
        if (dset_grow(d) < 0)
            return -1;
        i = dset_slot(d, dg);
    }
    memcpy(d->slots[i], dg, DIGEST_BYTES);
    d->count++;
    return 1;
}

struct crl_ckpt_marks *crl_ckpt_marks_new(void)
{
    struct crl_ckpt_marks *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    uint64_t k[2];
    if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k)) {
        k[0] = crl_now_ns() * 0x9e3779b97f4a7c15ull;
        k[1] = ((uint64_t)getpid() << 32 ^ crl_now_ns()) * 0xc2b2ae3d27d4eb4full;
    }
    m->blobs.k0 = m->walked.k0 = k[0] | 1;
    m->blobs.k1 = m->walked.k1 = k[1] | 1;
    return m;
}

void crl_ckpt_marks_free(struct crl_ckpt_marks *m)
{
    if (!m)
        return;
    free(m->blobs.slots);
    free(m->walked.slots);
    free(m);
}

size_t crl_ckpt_marks_count(const struct crl_ckpt_marks *m)
{
    return m->blobs.count + m->blobs.has_zero;
}

bool crl_ckpt_marked(const struct crl_ckpt_marks *m, const char *id)
{
    uint8_t d[DIGEST_BYTES];
    return id_bin(id, d) && dset_has(&m->blobs, d);
}

int crl_ckpt_mark_blob(struct crl_ckpt_marks *m, const char *id, struct crl_err *err)
{
    uint8_t d[DIGEST_BYTES];
    if (!id || !*id)
        return 0;
    if (!id_bin(id, d))
        return crl_err_set(err, CRL_E_INVALID, "%s is not a blob id (sha256:<64 hex>)", id);
    return dset_add(&m->blobs, d) < 0 ? crl_err_sys(err, ENOMEM, "marking blob %s", id) : 0;
}

/* Mark the content blobs of manifest `id`'s entries, counting those not
 * there (looked for once, when first marked). */
static int mark_entries(struct crl_ckpt_store *s, struct crl_ckpt_marks *m, const char *id,
                        json_t *entries, uint64_t *missing, struct crl_err *err)
{
    for (size_t i = 0; i < json_array_size(entries); i++) {
        json_t *e = json_array_get(entries, i);
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *blob = json_string_value(json_object_get(e, "blob"));
        uint8_t d[DIGEST_BYTES];
        bool file = type && strcmp(type, "file") == 0;
        if (!type || (file && !id_bin(blob, d)))
            return crl_err_set(err, CRL_E_INTERNAL,
                               "checkpoint %s (%s/sha256/%s) is corrupt: entry %zu is malformed",
                               id, s->dir, crl_digest_hex(id), i);
        if (!file)
            continue;
        int r = dset_add(&m->blobs, d);
        if (r < 0)
            return crl_err_sys(err, ENOMEM, "marking checkpoint %s", id);
        if (r == 0 || strcmp(blob, EMPTY_ID) == 0)
            continue;
        struct stat st;
        if (fstatat(s->blob_fd, crl_digest_hex(blob), &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno != ENOENT)
                return crl_err_sys(err, errno, "stat %s/sha256/%s", s->dir, crl_digest_hex(blob));
            (*missing)++;
        } else if (!S_ISREG(st.st_mode) || st.st_size == 0) {
            (*missing)++;
        }
    }
    return 0;
}

/* Mark what manifest `cur` (its bytes in b) names, and set cur to its
 * parent ("" for none). */
static int mark_manifest(struct crl_ckpt_store *s, struct crl_ckpt_marks *m,
                         char cur[CRL_CKPT_ID_MAX], const struct crl_buf *b, uint64_t *missing,
                         struct crl_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(b->data ? b->data : "", b->len, JSON_REJECT_DUPLICATES, &je);
    json_t *entries = json_object_get(root, "entries"), *p = json_object_get(root, "parent");
    if (!root || json_integer_value(json_object_get(root, "v")) != 1 || !json_is_array(entries) ||
        !(json_is_null(p) || crl_digest_valid(json_string_value(p)))) {
        crl_err_set(err, CRL_E_INTERNAL,
                    "checkpoint %s (%s/sha256/%s) is not a version 1 manifest%s%s", cur, s->dir,
                    crl_digest_hex(cur), root ? "" : ": ", root ? "" : je.text);
        json_decref(root);
        return -1;
    }
    int ret = mark_entries(s, m, cur, entries, missing, err);
    snprintf(cur, CRL_CKPT_ID_MAX, "%s", json_is_null(p) ? "" : json_string_value(p));
    json_decref(root);
    return ret;
}

int crl_ckpt_mark_checkpoint(struct crl_ckpt_store *s, struct crl_ckpt_marks *m, const char *id,
                             uint64_t *missing, struct crl_err *err)
{
    uint64_t none = 0;
    if (!missing)
        missing = &none;
    uint8_t d[DIGEST_BYTES];
    if (!id || !*id)
        return 0;
    if (!id_bin(id, d))
        return crl_err_set(err, CRL_E_INVALID, "%s is not a checkpoint id (sha256:<64 hex>)", id);
    char cur[CRL_CKPT_ID_MAX];
    snprintf(cur, sizeof(cur), "%s", id);
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    int ret = 0;
    while (cur[0] && ret == 0) {
        id_bin(cur, d); /* checked: the id, or a manifest's parent */
        int r = dset_add(&m->walked, d);
        if (r == 0) /* its chain is marked already */
            break;
        if (r < 0 || dset_add(&m->blobs, d) < 0) {
            ret = crl_err_sys(err, ENOMEM, "marking checkpoint %s", cur);
            break;
        }
        struct crl_err e = CRL_ERR_INIT;
        b.len = 0;
        if (crl_blob_get(s, cur, &b, CRL_CKPT_MANIFEST_MAX, &e) < 0) {
            /* Missing, or the empty file of a torn write: nothing to follow. */
            if (e.code == CRL_E_NOT_FOUND || !crl__ckpt_blob_file_ok(s, crl_digest_hex(cur))) {
                (*missing)++;
                break;
            }
            if (err)
                *err = e;
            ret = crl_err_prefix(err, "marking checkpoint %s", id);
            break;
        }
        ret = mark_manifest(s, m, cur, &b, missing, err);
    }
    crl_buf_free(&b);
    return ret;
}

/* Remove blob `hex`, unmarked and old as `was` shows, unless a put makes it
 * young meanwhile: it is moved into tmp/ (as <hex>.<tag>.gc) first, then
 * looked at again, and given its name back if its mtime moved (see the
 * header). */
static int blob_remove(struct crl_ckpt_store *s, const char *hex, const struct stat *was,
                       const char *tag, const struct timespec *now, double grace_s,
                       struct crl_ckpt_gc_stats *st, struct crl_err *err)
{
    char held[HELD_NAME_LEN + 1];
    snprintf(held, sizeof(held), "%s.%s%s", hex, tag, HELD_SUFFIX);
    if (renameat(s->blob_fd, hex, s->tmp_fd, held) < 0)
        return errno == ENOENT
                   ? 0
                   : crl_err_sys(err, errno, "rename %s/sha256/%s to tmp/%s", s->dir, hex, held);
    struct stat is;
    if (fstatat(s->tmp_fd, held, &is, AT_SYMLINK_NOFOLLOW) < 0) {
        int e = errno;
        if (e == ENOENT) /* another sweep put it back, or removed it */
            return 0;
        crl__ckpt_blob_unhold(s, held, hex, NULL);
        return crl_err_sys(err, e, "stat %s/tmp/%s", s->dir, held);
    }
    if (is.st_mtim.tv_sec != was->st_mtim.tv_sec || is.st_mtim.tv_nsec != was->st_mtim.tv_nsec ||
        crl__ckpt_age_s(&is.st_mtim, now) < grace_s) {
        /* Back, and durably at once: the take whose put made it young may
         * have synced sha256/ while it was away. */
        st->young_kept++;
        if (crl__ckpt_blob_unhold(s, held, hex, err) < 0)
            return -1;
        return fsync(s->blob_fd) < 0 ? crl_err_sys(err, errno, "fsync %s/sha256", s->dir) : 0;
    }
    if (unlinkat(s->tmp_fd, held, 0) < 0)
        return errno == ENOENT ? 0 : crl_err_sys(err, errno, "unlink %s/tmp/%s", s->dir, held);
    st->blobs_removed++;
    st->bytes_removed += (uint64_t)is.st_size;
    return 0;
}

int crl_ckpt_sweep(struct crl_ckpt_store *s, const struct crl_ckpt_marks *m, double grace_s,
                   struct crl_ckpt_gc_stats *st, struct crl_err *err)
{
    struct crl_ckpt_gc_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof(*st));
    if (!(grace_s >= 0)) /* NaN too */
        return crl_err_set(err, CRL_E_INVALID, "sweeping %s: a grace of %g s is not valid", s->dir,
                           grace_s);
    unsigned long long r;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (unsigned long long)getpid() << 32 ^ crl_now_ns();
    char tag[17];
    snprintf(tag, sizeof(tag), "%016llx", r);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int fd = crl_openat(s->blob_fd, ".", O_RDONLY | O_DIRECTORY, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return crl_err_sys(err, e, "open %s/sha256", s->dir);
    }
    int ret = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                ret = crl_err_sys(err, errno, "readdir %s/sha256", s->dir);
            break;
        }
        const char *name = de->d_name;
        uint8_t dg[DIGEST_BYTES];
        if (!crl__ckpt_hex_bin(name, dg) || name[64] != 0) /* not a blob: not ours to remove */
            continue;
        if (dset_has(&m->blobs, dg)) {
            st->blobs_kept++;
            continue;
        }
        struct stat bs;
        if (fstatat(s->blob_fd, name, &bs, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue;
            ret = crl_err_sys(err, errno, "stat %s/sha256/%s", s->dir, name);
            break;
        }
        if (!S_ISREG(bs.st_mode))
            continue;
        if (crl__ckpt_age_s(&bs.st_mtim, &now) < grace_s) {
            st->young_kept++;
            continue;
        }
        if ((ret = blob_remove(s, name, &bs, tag, &now, grace_s, st, err)) < 0)
            break;
    }
    closedir(d);
    if (ret == 0)
        ret = crl__ckpt_tmp_clean(s, grace_s, &st->tmp_removed, err);
    if (st->blobs_removed && fsync(s->blob_fd) < 0 && ret == 0)
        ret = crl_err_sys(err, errno, "fsync %s/sha256", s->dir);
    return ret;
}
