/* The checkpoint store's directory and its blobs: opening it, writing a
 * blob through tmp/ (batched during a take, made durable together), and
 * reading one back verified against its id.  The layout is in ckpt.h. */
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

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

#define ZSTD_LEVEL 3
#define TMP_MAX_AGE_S 3600
#define BATCH_SYNCFS_MIN 8

/* ---- the store ---- */

/* 64 lowercase hex digits to bytes, checked on the way (a NUL stops it):
 * marking and sweeping parse millions of them. */
bool crl__ckpt_hex_bin(const char *hex, uint8_t out[DIGEST_BYTES])
{
    static const int8_t val[256] = {
        ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,
        ['6'] = 7,  ['7'] = 8,  ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12,
        ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16, /* 0: not a digit */
    };
    for (int i = 0; i < DIGEST_BYTES; i++) {
        int hi = val[(unsigned char)hex[2 * i]], lo = hi ? val[(unsigned char)hex[2 * i + 1]] : 0;
        if (!lo)
            return false;
        out[i] = (uint8_t)((hi - 1) << 4 | (lo - 1));
    }
    return true;
}

static bool held_name(const char *name)
{
    uint8_t d[DIGEST_BYTES];
    return strlen(name) == HELD_NAME_LEN && crl__ckpt_hex_bin(name, d) && name[64] == '.' &&
           strcmp(name + HELD_NAME_LEN - strlen(HELD_SUFFIX), HELD_SUFFIX) == 0;
}

/* Seconds from t to now; negative for a time ahead of this host's clock. */
double crl__ckpt_age_s(const struct timespec *t, const struct timespec *now)
{
    return (double)now->tv_sec - (double)t->tv_sec + (double)(now->tv_nsec - t->tv_nsec) / 1e9;
}

bool crl__ckpt_blob_file_ok(struct crl_ckpt_store *s, const char *hex)
{
    struct stat st;
    /* An empty file is no zstd frame: a blob whose write was torn, replaced. */
    return fstatat(s->blob_fd, hex, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           st.st_size > 0;
}

/* Give the blob a sweep held as tmp/`held` its name sha256/`hex` again;
 * if a put has written it anew meanwhile, that copy stays. */
int crl__ckpt_blob_unhold(struct crl_ckpt_store *s, const char *held, const char *hex,
                          struct crl_err *err)
{
    int r = renameat2(s->tmp_fd, held, s->blob_fd, hex, RENAME_NOREPLACE);
    if (r < 0 && (errno == EINVAL || errno == ENOSYS)) /* NFS: the same bytes either way */
        r = renameat(s->tmp_fd, held, s->blob_fd, hex);
    if (r < 0 && errno == EEXIST) {
        if (crl__ckpt_blob_file_ok(s, hex)) {
            unlinkat(s->tmp_fd, held, 0);
            return 0;
        }
        r = renameat(s->tmp_fd, held, s->blob_fd, hex); /* over a torn write */
    }
    if (r < 0 && errno != ENOENT) /* ENOENT: another sweep put it back first */
        return crl_err_sys(err, errno, "rename %s/tmp/%s to sha256/%s", s->dir, held, hex);
    return 0;
}

/* Remove tmp/ files at least max_age_s old (by age, not by pid: the writer
 * may be on another host), and give every blob a sweep held there its name
 * back, whatever its age: a sweep that died holding one may have held a
 * blob a put had just made young; one still running finds it gone and
 * leaves it be. */
int crl__ckpt_tmp_clean(struct crl_ckpt_store *s, double max_age_s, uint64_t *removed,
                        struct crl_err *err)
{
    int fd = crl_openat(s->tmp_fd, ".", O_RDONLY | O_DIRECTORY, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return crl_err_sys(err, e, "open %s/tmp", s->dir);
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    bool unheld = false;
    int ret = 0;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                ret = crl_err_sys(err, errno, "readdir %s/tmp", s->dir);
            break;
        }
        const char *name = de->d_name;
        struct stat st;
        if (name[0] == '.')
            continue;
        if (held_name(name)) {
            char hex[65];
            memcpy(hex, name, 64);
            hex[64] = 0;
            unheld = true;
            if ((ret = crl__ckpt_blob_unhold(s, name, hex, err)) < 0)
                break;
            continue;
        }
        if (fstatat(s->tmp_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
            crl__ckpt_age_s(&st.st_mtim, &now) < max_age_s)
            continue;
        if (unlinkat(s->tmp_fd, name, 0) == 0) {
            (*removed)++;
        } else if (errno != ENOENT) {
            ret = crl_err_sys(err, errno, "unlink %s/tmp/%s", s->dir, name);
            break;
        }
    }
    closedir(d);
    if (unheld && fsync(s->blob_fd) < 0 && ret == 0)
        ret = crl_err_sys(err, errno, "fsync %s/sha256", s->dir);
    return ret;
}

int crl_ckpt_store_open(const char *dir, struct crl_ckpt_store **out, struct crl_err *err)
{
    struct crl_ckpt_store *s = calloc(1, sizeof(*s));
    if (!s)
        return crl_err_sys(err, ENOMEM, "checkpoint store %s", dir);
    s->blob_fd = s->tmp_fd = -1;
    int w = snprintf(s->dir, sizeof(s->dir), "%s", dir);
    cleanup_close int dfd = -1;
    if (w < 0 || (size_t)w >= sizeof(s->dir) - 80) {
        crl_err_set(err, CRL_E_INVALID, "checkpoint store %s: path too long", dir);
        goto fail;
    }
    if (crl_mkdir_p(dir, 0700) < 0 ||
        (dfd = crl_openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY, 0)) < 0) {
        crl_err_sys(err, errno, "checkpoint store %s", dir);
        goto fail;
    }
    bool created = false;
    static const char *const subs[] = {"sha256", "tmp"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(subs); i++) {
        if (mkdirat(dfd, subs[i], 0700) == 0)
            created = true;
        else if (errno != EEXIST) {
            crl_err_sys(err, errno, "checkpoint store %s/%s", dir, subs[i]);
            goto fail;
        }
    }
    if (created && fsync(dfd) < 0) {
        crl_err_sys(err, errno, "fsync %s", dir);
        goto fail;
    }
    s->blob_fd = crl_openat(dfd, "sha256", O_RDONLY | O_DIRECTORY, 0);
    s->tmp_fd = crl_openat(dfd, "tmp", O_RDONLY | O_DIRECTORY, 0);
    if (s->blob_fd < 0 || s->tmp_fd < 0) {
        crl_err_sys(err, errno, "checkpoint store %s", dir);
        goto fail;
    }
    s->cctx = ZSTD_createCCtx();
    s->dctx = ZSTD_createDCtx();
    s->zbuf = malloc(CHUNK);
    if (!s->cctx || !s->dctx || !s->zbuf ||
        ZSTD_isError(ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_compressionLevel, ZSTD_LEVEL))) {
        crl_err_sys(err, ENOMEM, "checkpoint store %s: zstd", dir);
        goto fail;
    }
    uint64_t n = 0;
    struct crl_err e = CRL_ERR_INIT;
    if (crl__ckpt_tmp_clean(s, TMP_MAX_AGE_S, &n, &e) < 0)
        crl_warn(NULL, "checkpoint store: %s", e.msg);
    *out = s;
    return 0;
fail:
    crl_ckpt_store_close(s);
    return -1;
}

void crl_ckpt_store_close(struct crl_ckpt_store *s)
{
    if (!s)
        return;
    crl__ckpt_batch_abort(s);
    if (s->blob_fd >= 0)
        close(s->blob_fd);
    if (s->tmp_fd >= 0)
        close(s->tmp_fd);
    ZSTD_freeCCtx(s->cctx);
    ZSTD_freeDCtx(s->dctx);
    free(s->zbuf);
    free(s->walk_buf);
    free(s);
}

const char *crl_ckpt_store_dir(const struct crl_ckpt_store *s)
{
    return s->dir;
}

int crl_ckpt_store_sync(struct crl_ckpt_store *s, struct crl_err *err)
{
    if (!s->dirty)
        return 0;
    if (fsync(s->blob_fd) < 0)
        return crl_err_sys(err, errno, "fsync %s/sha256", s->dir);
    s->dirty = false;
    return 0;
}

/* ---- writing blobs ---- */

/* Whether blob `id` is there, made young: its mtime is set to now first,
 * and only then is it looked for, so that a sweep cannot remove it from
 * under the reference its caller is about to make (see the header). */
int crl__ckpt_blob_refresh(struct crl_ckpt_store *s, const char *id, struct crl_err *err)
{
    const char *hex = crl_digest_hex(id);
    if (utimensat(s->blob_fd, hex, NULL, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : crl_err_sys(err, errno, "utimensat %s/sha256/%s", s->dir, hex);
    return crl__ckpt_blob_file_ok(s, hex) ? 1 : 0;
}

int crl__ckpt_tmp_create(struct crl_ckpt_store *s, char name[48], struct crl_err *err)
{
    for (int tries = 0; tries < 8; tries++) {
        unsigned long long r[2] = {0, 0};
        if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
            r[0] = (unsigned long long)getpid() << 32 ^ crl_now_ns();
            r[1] = crl_now_ns() * 0x9e3779b97f4a7c15ull;
        }
        snprintf(name, 48, "%016llx%016llx.tmp", r[0], r[1]);
        int fd = crl_openat(s->tmp_fd, name, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST)
            return crl_err_sys(err, errno, "create %s/tmp/%s", s->dir, name);
    }
    return crl_err_set(err, CRL_E_INTERNAL, "create a file in %s/tmp: names keep colliding",
                       s->dir);
}

/* Give tmp/`tmp` (written through fd) the name of blob `id`: fdatasync, then
 * a rename that never replaces a blob.  1 if it became the blob, 0 if the
 * blob was there already. */
static int blob_commit(struct crl_ckpt_store *s, const char *tmp, int fd, const char *id,
                       bool synced, struct crl_err *err)
{
    const char *hex = crl_digest_hex(id);
    if (!synced && fdatasync(fd) < 0) {
        int e = errno;
        unlinkat(s->tmp_fd, tmp, 0);
        return crl_err_sys(err, e, "fdatasync %s/tmp/%s", s->dir, tmp);
    }
    int r = renameat2(s->tmp_fd, tmp, s->blob_fd, hex, RENAME_NOREPLACE);
    if (r < 0 && (errno == EINVAL || errno == ENOSYS)) { /* a filesystem without it (NFS) */
        r = -1;
        errno = EEXIST;
    }
    if (r < 0 && errno == EEXIST) {
        /* There already: keep it (made young, as any put that finds it),
         * unless it is the empty file of a torn write (or, without
         * RENAME_NOREPLACE, not there after all). */
        int there = crl__ckpt_blob_refresh(s, id, err);
        if (there != 0) {
            unlinkat(s->tmp_fd, tmp, 0);
            s->dirty = true; /* its writer may not have synced the directory yet */
            return there > 0 ? 0 : -1;
        }
        r = renameat(s->tmp_fd, tmp, s->blob_fd, hex);
    }
    if (r < 0) {
        int e = errno;
        unlinkat(s->tmp_fd, tmp, 0);
        return crl_err_sys(err, e, "rename %s/tmp/%s to sha256/%s", s->dir, tmp, hex);
    }
    s->dirty = true;
    return 1;
}

void crl__ckpt_batch_abort(struct crl_ckpt_store *s)
{
    for (size_t i = 0; i < s->n_batch; i++) {
        unlinkat(s->tmp_fd, s->batch[i].tmp, 0);
        close(s->batch[i].fd);
    }
    s->n_batch = 0;
    s->batching = false;
}

/* Make the batch's blobs durable and give them their names.  Each
 * fdatasync costs a flush of the device's cache (ext4 sends one even when
 * the journal needs no commit), so a large batch is made durable by one
 * syncfs(2) instead, which also flushes whatever else is dirty on that
 * filesystem, and (since Linux 5.8) reports writeback errors. */
int crl__ckpt_batch_flush(struct crl_ckpt_store *s, struct crl_ckpt_stats *st, struct crl_err *err)
{
    int ret = 0;
    bool synced = false;
    if (s->n_batch >= BATCH_SYNCFS_MIN) {
        if (syncfs(s->tmp_fd) < 0)
            ret = crl_err_sys(err, errno, "syncfs %s", s->dir);
        synced = true;
    } else {
        for (size_t i = 0; i < s->n_batch; i++)
            sync_file_range(s->batch[i].fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    }
    size_t i = 0;
    for (; i < s->n_batch && ret == 0; i++) {
        struct pending_blob *b = &s->batch[i];
        int r = blob_commit(s, b->tmp, b->fd, b->id, synced, err);
        close(b->fd);
        if (r > 0 && st) {
            st->blobs_new++;
            st->bytes_stored += b->bytes;
        }
        ret = r < 0 ? -1 : 0;
    }
    for (; i < s->n_batch; i++) {
        unlinkat(s->tmp_fd, s->batch[i].tmp, 0);
        close(s->batch[i].fd);
    }
    s->n_batch = 0;
    return ret;
}

bool crl__ckpt_batch_has(const struct crl_ckpt_store *s, const char *id)
{
    for (size_t i = 0; i < s->n_batch; i++)
        if (strcmp(s->batch[i].id, id) == 0)
            return true;
    return false;
}

/* A blob is written to tmp/`tmp` (fd): commit it now, or queue it while
 * batching.  Takes fd.  1 if it is (or will be) new. */
int crl__ckpt_blob_finish(struct crl_ckpt_store *s, const char *tmp, int fd, const char *id,
                          uint64_t bytes, struct crl_ckpt_stats *st, struct crl_err *err)
{
    if (!s->batching) {
        int r = blob_commit(s, tmp, fd, id, false, err);
        close(fd);
        if (r > 0 && st) {
            st->blobs_new++;
            st->bytes_stored += bytes;
        }
        return r;
    }
    if (s->n_batch == BATCH_MAX && crl__ckpt_batch_flush(s, st, err) < 0) {
        unlinkat(s->tmp_fd, tmp, 0);
        close(fd);
        return -1;
    }
    struct pending_blob *b = &s->batch[s->n_batch++];
    snprintf(b->tmp, sizeof(b->tmp), "%s", tmp);
    b->fd = fd;
    snprintf(b->id, sizeof(b->id), "%s", id);
    b->bytes = bytes;
    return 1;
}

/* Compress `len` bytes into fd (end: finish the frame); *out_bytes counts
 * what was written. */
int crl__ckpt_zwrite(struct crl_ckpt_store *s, int fd, const void *src, size_t len, bool end,
                     uint64_t *out_bytes, const char *tmp, struct crl_err *err)
{
    ZSTD_inBuffer in = {src, len, 0};
    for (;;) {
        ZSTD_outBuffer out = {s->zbuf, CHUNK, 0};
        size_t rem = ZSTD_compressStream2(s->cctx, &out, &in, end ? ZSTD_e_end : ZSTD_e_continue);
        if (ZSTD_isError(rem))
            return crl_err_set(err, CRL_E_INTERNAL, "compress %s/tmp/%s: %s", s->dir, tmp,
                               ZSTD_getErrorName(rem));
        if (out.pos && crl_write_full(fd, s->zbuf, out.pos) < 0)
            return crl_err_sys(err, errno, "write %s/tmp/%s", s->dir, tmp);
        *out_bytes += out.pos;
        if (end ? rem == 0 : in.pos == in.size)
            return 0;
    }
}

/* Store bytes whose id is known.  Returns 1 if a blob was written. */
int crl__ckpt_put_hashed(struct crl_ckpt_store *s, const void *data, size_t len, const char *id,
                         struct crl_ckpt_stats *st, struct crl_err *err)
{
    if (strcmp(id, EMPTY_ID) == 0 || crl__ckpt_batch_has(s, id))
        return 0;
    int there = crl__ckpt_blob_refresh(s, id, err);
    if (there != 0) {
        s->dirty = true;
        return there > 0 ? 0 : -1;
    }
    char tmp[48];
    int fd = crl__ckpt_tmp_create(s, tmp, err);
    if (fd < 0)
        return -1;
    uint64_t bytes = 0;
    ZSTD_CCtx_reset(s->cctx, ZSTD_reset_session_only);
    ZSTD_CCtx_setPledgedSrcSize(s->cctx, len);
    if (crl__ckpt_zwrite(s, fd, data, len, true, &bytes, tmp, err) < 0) {
        unlinkat(s->tmp_fd, tmp, 0);
        close(fd);
        return -1;
    }
    return crl__ckpt_blob_finish(s, tmp, fd, id, bytes, st, err);
}

int crl_blob_put(struct crl_ckpt_store *s, const void *data, size_t len, char id[CRL_CKPT_ID_MAX],
                 struct crl_err *err)
{
    crl_sha256_buf(data, len, id);
    return crl__ckpt_put_hashed(s, data, len, id, NULL, err) < 0 ? -1 : 0;
}

/* ---- reading blobs ---- */

static int corrupt(struct blob_rd *r, const char *why, struct crl_err *err)
{
    return crl_err_set(err, CRL_E_INTERNAL, "blob %s (%s/sha256/%s) is corrupt: %s", r->id,
                       r->s->dir, crl_digest_hex(r->id), why);
}

void crl__ckpt_blob_rd_close(struct blob_rd *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    crl_sha256_free(&r->h);
}

int crl__ckpt_blob_rd_open(struct crl_ckpt_store *s, const char *id, struct blob_rd *r,
                           struct crl_err *err)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    r->s = s;
    if (!crl_digest_valid(id))
        return crl_err_set(err, CRL_E_INVALID, "%s is not a blob id (sha256:<64 hex>)",
                           id ? id : "(null)");
    snprintf(r->id, sizeof(r->id), "%s", id);
    if (strcmp(id, EMPTY_ID) == 0) {
        r->done = true;
        return 0;
    }
    r->fd = crl_openat(s->blob_fd, crl_digest_hex(id), O_RDONLY | O_NOFOLLOW, 0);
    if (r->fd < 0) {
        if (errno == ENOENT)
            return crl_err_set(err, CRL_E_NOT_FOUND, "blob %s is not in %s", id, s->dir);
        return crl_err_sys(err, errno, "open %s/sha256/%s", s->dir, crl_digest_hex(id));
    }
    if (crl_sha256_init(&r->h) < 0) {
        crl__ckpt_blob_rd_close(r);
        return crl_err_sys(err, ENOMEM, "sha256");
    }
    ZSTD_DCtx_reset(s->dctx, ZSTD_reset_session_only);
    r->in = (ZSTD_inBuffer){s->zbuf, 0, 0};
    r->frame_left = 1; /* no frame yet: an empty file is truncated */
    return 0;
}

/* Up to cap bytes of the blob; 0 at its end, once verified against its id. */
ssize_t crl__ckpt_blob_rd_read(struct blob_rd *r, void *buf, size_t cap, struct crl_err *err)
{
    while (!r->done) {
        if (r->in.pos == r->in.size && !r->eof) {
            ssize_t n = crl_read_full(r->fd, r->s->zbuf, CHUNK);
            if (n < 0)
                return crl_err_sys(err, errno, "read %s/sha256/%s", r->s->dir,
                                   crl_digest_hex(r->id));
            r->in = (ZSTD_inBuffer){r->s->zbuf, (size_t)n, 0};
            r->eof = n == 0;
        }
        if (r->in.pos == r->in.size && r->eof) {
            if (r->frame_left != 0)
                return corrupt(r, "truncated", err);
            char got[CRL_CKPT_ID_MAX];
            crl_sha256_final(&r->h, got);
            if (strcmp(got, r->id) != 0)
                return corrupt(r, "its bytes hash to another id", err);
            r->done = true;
            break;
        }
        ZSTD_outBuffer out = {buf, cap, 0};
        size_t ret = ZSTD_decompressStream(r->s->dctx, &out, &r->in);
        if (ZSTD_isError(ret))
            return corrupt(r, ZSTD_getErrorName(ret), err);
        r->frame_left = ret;
        if (out.pos) {
            crl_sha256_update(&r->h, buf, out.pos);
            r->total += out.pos;
            return (ssize_t)out.pos;
        }
    }
    return 0;
}

int crl_blob_get(struct crl_ckpt_store *s, const char *id, struct crl_buf *out, size_t max,
                 struct crl_err *err)
{
    struct blob_rd r;
    if (crl__ckpt_blob_rd_open(s, id, &r, err) < 0)
        return -1;
    size_t start = out->len;
    char chunk[16384];
    ssize_t n;
    while ((n = crl__ckpt_blob_rd_read(&r, chunk, sizeof(chunk), err)) > 0) {
        if (out->len - start + (size_t)n > max) {
            crl__ckpt_blob_rd_close(&r);
            return crl_err_set(err, CRL_E_TOO_LARGE, "blob %s is larger than %zu bytes", id, max);
        }
        if (crl_buf_append(out, chunk, (size_t)n) < 0) {
            crl__ckpt_blob_rd_close(&r);
            return crl_err_sys(err, ENOMEM, "reading blob %s", id);
        }
    }
    crl__ckpt_blob_rd_close(&r);
    return n < 0 ? -1 : 0;
}
