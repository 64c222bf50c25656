#include "ckpt.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include "../util/sha256.h"
#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"

#define EMPTY_ID "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define ZSTD_LEVEL 3
#define INLINE_MAX ((size_t)1 << 20) /* files up to this are read once, into memory */
#define CHUNK ((size_t)128 << 10)
#define DENTS_BUF ((size_t)32 << 10)
#define TMP_MAX_AGE_S 3600
#define OVERFLOW_ID 65534u /* what a user namespace shows for an unmapped id */
#define PATH_LEN_MAX 65535
#define XATTR_LIST_MAX_BYTES 65536
#define RETRIES 3
#define BATCH_MAX 128 /* blobs written and not yet synced, each holding its fd */
#define BATCH_SYNCFS_MIN 8

/* ---- the store ---- */

/* A blob written to tmp/ whose fdatasync and rename wait for the batch. */
struct pending_blob {
    char tmp[48];
    int fd;
    char id[CRL_CKPT_ID_MAX];
    uint64_t bytes;
};

struct crl_ckpt_store {
    char dir[PATH_MAX];
    int blob_fd; /* sha256/ */
    int tmp_fd;  /* tmp/ */
    bool dirty;  /* a blob got its name since the last sync */
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    uint8_t *zbuf; /* CHUNK bytes: compressed data on its way to or from a file */
    /* While batching (a take), new blobs wait here, written but not yet
     * synced or named, to be made durable together (batch_flush). */
    bool batching;
    struct pending_blob batch[BATCH_MAX];
    size_t n_batch;
    /* A take's buffers, kept between takes: getdents64 (DENTS_BUF),
     * flistxattr (XATTR_LIST_MAX_BYTES), file contents (INLINE_MAX + 1). */
    uint8_t *walk_buf;
};

/* "<64 hex>.<16 hex>.gc": a blob a sweep holds in tmp/ (see blob_remove). */
#define HELD_SUFFIX ".gc"
#define HELD_NAME_LEN (64 + 1 + 16 + sizeof(HELD_SUFFIX) - 1)

#define DIGEST_BYTES 32

/* 64 lowercase hex digits to bytes, checked on the way (a NUL stops it):
 * marking and sweeping parse millions of them. */
static bool hex_bin(const char *hex, uint8_t out[DIGEST_BYTES])
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

/* A blob id ("sha256:<64 hex>") to bytes; false if malformed. */
static bool id_bin(const char *id, uint8_t out[DIGEST_BYTES])
{
    return id && strncmp(id, "sha256:", 7) == 0 && hex_bin(id + 7, out) && id[7 + 64] == 0;
}

static bool held_name(const char *name)
{
    uint8_t d[DIGEST_BYTES];
    return strlen(name) == HELD_NAME_LEN && hex_bin(name, d) && name[64] == '.' &&
           strcmp(name + HELD_NAME_LEN - strlen(HELD_SUFFIX), HELD_SUFFIX) == 0;
}

/* Seconds from t to now; negative for a time ahead of this host's clock. */
static double age_s(const struct timespec *t, const struct timespec *now)
{
    return (double)now->tv_sec - (double)t->tv_sec + (double)(now->tv_nsec - t->tv_nsec) / 1e9;
}

static bool blob_file_ok(struct crl_ckpt_store *s, const char *hex)
{
    struct stat st;
    /* An empty file is no zstd frame: a blob whose write was torn, replaced. */
    return fstatat(s->blob_fd, hex, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           st.st_size > 0;
}

/* Give the blob a sweep held as tmp/`held` its name sha256/`hex` again;
 * if a put has written it anew meanwhile, that copy stays. */
static int blob_unhold(struct crl_ckpt_store *s, const char *held, const char *hex,
                       struct crl_err *err)
{
    int r = renameat2(s->tmp_fd, held, s->blob_fd, hex, RENAME_NOREPLACE);
    if (r < 0 && (errno == EINVAL || errno == ENOSYS)) /* NFS: the same bytes either way */
        r = renameat(s->tmp_fd, held, s->blob_fd, hex);
    if (r < 0 && errno == EEXIST) {
        if (blob_file_ok(s, hex)) {
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
static int tmp_clean(struct crl_ckpt_store *s, double max_age_s, uint64_t *removed,
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
            if ((ret = blob_unhold(s, name, hex, err)) < 0)
                break;
            continue;
        }
        if (fstatat(s->tmp_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
            age_s(&st.st_mtim, &now) < max_age_s)
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
    if (tmp_clean(s, TMP_MAX_AGE_S, &n, &e) < 0)
        crl_warn(NULL, "checkpoint store: %s", e.msg);
    *out = s;
    return 0;
fail:
    crl_ckpt_store_close(s);
    return -1;
}

static void batch_abort(struct crl_ckpt_store *s);

void crl_ckpt_store_close(struct crl_ckpt_store *s)
{
    if (!s)
        return;
    batch_abort(s);
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
static int blob_refresh(struct crl_ckpt_store *s, const char *id, struct crl_err *err)
{
    const char *hex = crl_digest_hex(id);
    if (utimensat(s->blob_fd, hex, NULL, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : crl_err_sys(err, errno, "utimensat %s/sha256/%s", s->dir, hex);
    return blob_file_ok(s, hex) ? 1 : 0;
}

static int tmp_create(struct crl_ckpt_store *s, char name[48], struct crl_err *err)
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
        int there = blob_refresh(s, id, err);
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

static void batch_abort(struct crl_ckpt_store *s)
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
static int batch_flush(struct crl_ckpt_store *s, struct crl_ckpt_stats *st, struct crl_err *err)
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

static bool batch_has(const struct crl_ckpt_store *s, const char *id)
{
    for (size_t i = 0; i < s->n_batch; i++)
        if (strcmp(s->batch[i].id, id) == 0)
            return true;
    return false;
}

/* A blob is written to tmp/`tmp` (fd): commit it now, or queue it while
 * batching.  Takes fd.  1 if it is (or will be) new. */
static int blob_finish(struct crl_ckpt_store *s, const char *tmp, int fd, const char *id,
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
    if (s->n_batch == BATCH_MAX && batch_flush(s, st, err) < 0) {
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
static int zwrite(struct crl_ckpt_store *s, int fd, const void *src, size_t len, bool end,
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
static int put_hashed(struct crl_ckpt_store *s, const void *data, size_t len, const char *id,
                      struct crl_ckpt_stats *st, struct crl_err *err)
{
    if (strcmp(id, EMPTY_ID) == 0 || batch_has(s, id))
        return 0;
    int there = blob_refresh(s, id, err);
    if (there != 0) {
        s->dirty = true;
        return there > 0 ? 0 : -1;
    }
    char tmp[48];
    int fd = tmp_create(s, tmp, err);
    if (fd < 0)
        return -1;
    uint64_t bytes = 0;
    ZSTD_CCtx_reset(s->cctx, ZSTD_reset_session_only);
    ZSTD_CCtx_setPledgedSrcSize(s->cctx, len);
    if (zwrite(s, fd, data, len, true, &bytes, tmp, err) < 0) {
        unlinkat(s->tmp_fd, tmp, 0);
        close(fd);
        return -1;
    }
    return blob_finish(s, tmp, fd, id, bytes, st, err);
}

int crl_blob_put(struct crl_ckpt_store *s, const void *data, size_t len, char id[CRL_CKPT_ID_MAX],
                 struct crl_err *err)
{
    crl_sha256_buf(data, len, id);
    return put_hashed(s, data, len, id, NULL, err) < 0 ? -1 : 0;
}

/* ---- reading blobs ---- */

struct blob_rd {
    struct crl_ckpt_store *s;
    int fd;
    char id[CRL_CKPT_ID_MAX];
    struct crl_sha256 h;
    ZSTD_inBuffer in;
    size_t frame_left; /* ZSTD_decompressStream's last hint: 0 at a frame's end */
    bool eof, done;
    uint64_t total;
};

static int corrupt(struct blob_rd *r, const char *why, struct crl_err *err)
{
    return crl_err_set(err, CRL_E_INTERNAL, "blob %s (%s/sha256/%s) is corrupt: %s", r->id,
                       r->s->dir, crl_digest_hex(r->id), why);
}

static void blob_rd_close(struct blob_rd *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    crl_sha256_free(&r->h);
}

static int blob_rd_open(struct crl_ckpt_store *s, const char *id, struct blob_rd *r,
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
        blob_rd_close(r);
        return crl_err_sys(err, ENOMEM, "sha256");
    }
    ZSTD_DCtx_reset(s->dctx, ZSTD_reset_session_only);
    r->in = (ZSTD_inBuffer){s->zbuf, 0, 0};
    r->frame_left = 1; /* no frame yet: an empty file is truncated */
    return 0;
}

/* Up to cap bytes of the blob; 0 at its end, once verified against its id. */
static ssize_t blob_rd_read(struct blob_rd *r, void *buf, size_t cap, struct crl_err *err)
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
    if (blob_rd_open(s, id, &r, err) < 0)
        return -1;
    size_t start = out->len;
    char chunk[16384];
    ssize_t n;
    while ((n = blob_rd_read(&r, chunk, sizeof(chunk), err)) > 0) {
        if (out->len - start + (size_t)n > max) {
            blob_rd_close(&r);
            return crl_err_set(err, CRL_E_TOO_LARGE, "blob %s is larger than %zu bytes", id, max);
        }
        if (crl_buf_append(out, chunk, (size_t)n) < 0) {
            blob_rd_close(&r);
            return crl_err_sys(err, ENOMEM, "reading blob %s", id);
        }
    }
    blob_rd_close(&r);
    return n < 0 ? -1 : 0;
}

/* ---- paths ---- */

/* Path order: bytewise, with '/' before every other byte, so a directory's
 * contents follow it at once and parents come before children. */
static int cmp_path(const char *a, const char *b)
{
    for (;; a++, b++) {
        unsigned ca = (unsigned char)*a, cb = (unsigned char)*b;
        if (ca == cb) {
            if (!ca)
                return 0;
            continue;
        }
        ca = ca == '/' ? 1 : ca == 0 ? 0 : ca + 1;
        cb = cb == '/' ? 1 : cb == 0 ? 0 : cb + 1;
        return ca < cb ? -1 : 1;
    }
}

static bool reserved_name(const char *name, size_t len)
{
    return len >= 4 && memcmp(name, ".wh.", 4) == 0;
}

/* Relative, no empty, "." or ".." component, no whiteout name, no NUL. */
static bool path_valid(const char *p, size_t len)
{
    if (len == 0 || len > PATH_LEN_MAX || memchr(p, 0, len))
        return false;
    const char *end = p + len;
    while (p <= end) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        size_t n = (size_t)((slash ? slash : end) - p);
        if (n == 0 || n > NAME_MAX || (n == 1 && p[0] == '.') ||
            (n == 2 && p[0] == '.' && p[1] == '.') || reserved_name(p, n))
            return false;
        if (!slash)
            break;
        p = slash + 1;
    }
    return true;
}

/* ---- entries and the index ---- */

enum ent_type { ENT_FILE = 1, ENT_DIR, ENT_SYMLINK, ENT_WHITEOUT };
static const char *const type_names[] = {
    [ENT_FILE] = "file", [ENT_DIR] = "dir", [ENT_SYMLINK] = "symlink", [ENT_WHITEOUT] = "whiteout"};

struct xattr {
    char *name;
    void *value;
    size_t len;
};

struct ent {
    uint8_t type;
    bool opaque;   /* the layer's opaque mark (OVERLAY) */
    bool replaced; /* a dir that took the place of a non-dir: restored opaque */
    bool has_key;
    uint32_t mode, uid, gid;
    int64_t mtime_s;
    uint32_t mtime_ns;
    uint64_t size;
    char blob[CRL_CKPT_ID_MAX];
    char *target; /* symlink */
    char *link;   /* the first path of a hard-linked file, if not this one */
    struct xattr *xattrs;
    size_t n_xattrs;
    /* fast-path key: host-specific, never in a manifest */
    uint64_t k_ino, k_size;
    int64_t k_ctime_ns;
    /* transient, during one take (valid while seen == the take's generation) */
    uint64_t seen, reset;
    struct ent *now; /* what the walk found here, if it differs */
    uint64_t hash;
    size_t plen;
    char path[];
};

struct crl_ckpt_index {
    struct ent **slots;
    size_t cap; /* a power of two; at most half full */
    size_t count;
    char id[CRL_CKPT_ID_MAX];
    unsigned depth;
    uint64_t gen;
    bool broken;
};

static uint64_t path_hash(const char *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

static void ent_free(struct ent *e)
{
    if (!e)
        return;
    free(e->target);
    free(e->link);
    for (size_t i = 0; i < e->n_xattrs; i++) {
        free(e->xattrs[i].name);
        free(e->xattrs[i].value);
    }
    free(e->xattrs);
    free(e);
}

static struct ent *ent_new(const char *path, size_t len, enum ent_type type)
{
    struct ent *e = calloc(1, sizeof(*e) + len + 1);
    if (!e)
        return NULL;
    memcpy(e->path, path, len);
    e->plen = len;
    e->hash = path_hash(path, len);
    e->type = (uint8_t)type;
    return e;
}

static struct ent *ent_clone(const struct ent *o)
{
    struct ent *e = ent_new(o->path, o->plen, o->type);
    if (!e)
        return NULL;
    e->opaque = o->opaque;
    e->replaced = o->replaced;
    e->has_key = o->has_key;
    e->mode = o->mode, e->uid = o->uid, e->gid = o->gid;
    e->mtime_s = o->mtime_s, e->mtime_ns = o->mtime_ns;
    e->size = o->size;
    memcpy(e->blob, o->blob, sizeof(e->blob));
    e->k_ino = o->k_ino, e->k_size = o->k_size, e->k_ctime_ns = o->k_ctime_ns;
    if ((o->target && !(e->target = strdup(o->target))) ||
        (o->link && !(e->link = strdup(o->link))) ||
        (o->n_xattrs && !(e->xattrs = calloc(o->n_xattrs, sizeof(*e->xattrs))))) {
        ent_free(e);
        return NULL;
    }
    for (size_t i = 0; i < o->n_xattrs; i++) {
        struct xattr *x = &e->xattrs[e->n_xattrs];
        x->name = strdup(o->xattrs[i].name);
        x->value = malloc(o->xattrs[i].len ? o->xattrs[i].len : 1);
        x->len = o->xattrs[i].len;
        e->n_xattrs++;
        if (!x->name || !x->value) {
            ent_free(e);
            return NULL;
        }
        memcpy(x->value, o->xattrs[i].value, x->len);
    }
    return e;
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Same state, fast-path keys and marks a merge derives aside. */
static bool ent_equal(const struct ent *a, const struct ent *b, bool ignore_link)
{
    if (a->type != b->type)
        return false;
    if (a->type == ENT_WHITEOUT)
        return true;
    if (a->uid != b->uid || a->gid != b->gid || a->mtime_s != b->mtime_s ||
        a->mtime_ns != b->mtime_ns)
        return false;
    if (a->type == ENT_SYMLINK)
        return str_eq(a->target, b->target);
    if (a->mode != b->mode || a->n_xattrs != b->n_xattrs)
        return false;
    for (size_t i = 0; i < a->n_xattrs; i++)
        if (strcmp(a->xattrs[i].name, b->xattrs[i].name) != 0 ||
            a->xattrs[i].len != b->xattrs[i].len ||
            memcmp(a->xattrs[i].value, b->xattrs[i].value, a->xattrs[i].len) != 0)
            return false;
    if (a->type == ENT_DIR)
        return a->opaque == b->opaque;
    return a->size == b->size && strcmp(a->blob, b->blob) == 0 &&
           (ignore_link || str_eq(a->link, b->link));
}

struct crl_ckpt_index *crl_ckpt_index_new(void)
{
    struct crl_ckpt_index *idx = calloc(1, sizeof(*idx));
    if (!idx)
        return NULL;
    idx->cap = 64;
    idx->slots = calloc(idx->cap, sizeof(*idx->slots));
    if (!idx->slots) {
        free(idx);
        return NULL;
    }
    return idx;
}

static void idx_clear(struct crl_ckpt_index *idx)
{
    for (size_t i = 0; i < idx->cap; i++)
        ent_free(idx->slots[i]);
    free(idx->slots);
    idx->slots = NULL;
    idx->count = idx->cap = 0;
}

void crl_ckpt_index_free(struct crl_ckpt_index *idx)
{
    if (!idx)
        return;
    idx_clear(idx);
    free(idx);
}

const char *crl_ckpt_index_id(const struct crl_ckpt_index *idx)
{
    return idx->id;
}

size_t crl_ckpt_index_count(const struct crl_ckpt_index *idx)
{
    return idx->count;
}

static size_t idx_slot(const struct crl_ckpt_index *idx, const char *path, size_t len, uint64_t h)
{
    size_t mask = idx->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        struct ent *e = idx->slots[i];
        if (!e || (e->hash == h && e->plen == len && memcmp(e->path, path, len) == 0))
            return i;
    }
}

static struct ent *idx_find(const struct crl_ckpt_index *idx, const char *path, size_t len)
{
    return idx->slots[idx_slot(idx, path, len, path_hash(path, len))];
}

/* Rebuild the table at `cap` slots, leaving out entries marked dropped
 * (seen == UINT64_MAX). */
static int idx_rehash(struct crl_ckpt_index *idx, size_t cap)
{
    struct ent **slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -1;
    size_t mask = cap - 1, count = 0;
    for (size_t i = 0; i < idx->cap; i++) {
        struct ent *e = idx->slots[i];
        if (!e)
            continue;
        if (e->seen == UINT64_MAX) {
            ent_free(e);
            continue;
        }
        size_t j = (size_t)e->hash & mask;
        while (slots[j])
            j = (j + 1) & mask;
        slots[j] = e;
        count++;
    }
    free(idx->slots);
    idx->slots = slots;
    idx->cap = cap;
    idx->count = count;
    return 0;
}

/* Put e in, replacing (and freeing) what had its path. */
static int idx_put(struct crl_ckpt_index *idx, struct ent *e)
{
    if ((idx->count + 1) * 2 > idx->cap && idx_rehash(idx, idx->cap * 2) < 0)
        return -1;
    size_t i = idx_slot(idx, e->path, e->plen, e->hash);
    if (idx->slots[i])
        ent_free(idx->slots[i]);
    else
        idx->count++;
    idx->slots[i] = e;
    return 0;
}

/* Remove everything below `path`. */
static int idx_drop_below(struct crl_ckpt_index *idx, const char *path, size_t len)
{
    bool any = false;
    for (size_t i = 0; i < idx->cap; i++) {
        struct ent *e = idx->slots[i];
        if (e && e->plen > len && e->path[len] == '/' && memcmp(e->path, path, len) == 0) {
            e->seen = UINT64_MAX;
            any = true;
        }
    }
    return any ? idx_rehash(idx, idx->cap) : 0;
}

static struct ent *idx_parent(const struct crl_ckpt_index *idx, const struct ent *e)
{
    const char *slash = memrchr(e->path, '/', e->plen);
    return slash ? idx_find(idx, e->path, (size_t)(slash - e->path)) : NULL;
}

/* Apply one manifest entry to the merged state (see the header); takes e. */
static int merge(struct crl_ckpt_index *idx, struct ent *e, const char *what, struct crl_err *err)
{
    struct ent *parent = idx_parent(idx, e);
    if (parent && parent->type != ENT_DIR) {
        if (e->type == ENT_WHITEOUT) { /* already gone with its parent */
            ent_free(e);
            return 0;
        }
        crl_err_set(err, CRL_E_INTERNAL, "%s: %s lies below %s, a %s", what, e->path, parent->path,
                    type_names[parent->type]);
        ent_free(e);
        return -1;
    }
    struct ent *old = idx_find(idx, e->path, e->plen);
    bool drop = false;
    if (e->type == ENT_DIR) {
        if (old && old->type == ENT_DIR) {
            e->replaced |= old->replaced;
            drop = e->opaque && !old->opaque;
        } else if (old) {
            e->replaced = true;
        }
    } else {
        drop = old && old->type == ENT_DIR;
    }
    if ((drop && idx_drop_below(idx, e->path, e->plen) < 0) || idx_put(idx, e) < 0) {
        crl_err_sys(err, ENOMEM, "%s: merging %s", what, e->path);
        ent_free(e);
        return -1;
    }
    return 0;
}

/* ---- manifests: JSON ---- */

static int json_set_bytes(json_t *o, const char *key, const char *s, size_t len)
{
    if (crl_utf8_valid(s, len))
        return json_object_set_new(o, key, json_stringn(s, len));
    size_t n;
    cleanup_free char *b = crl_base64_encode(s, len, &n);
    char k[32];
    snprintf(k, sizeof(k), "%s_b64", key);
    return b ? json_object_set_new(o, k, json_stringn(b, n)) : -1;
}

/* key or key_b64; NULL if neither (or both, or bad base64). */
static char *json_get_bytes(json_t *o, const char *key, size_t *len)
{
    char k[32];
    snprintf(k, sizeof(k), "%s_b64", key);
    json_t *plain = json_object_get(o, key), *b64 = json_object_get(o, k);
    if ((plain != NULL) == (b64 != NULL))
        return NULL;
    if (plain) {
        if (!json_is_string(plain))
            return NULL;
        *len = json_string_length(plain);
        char *s = malloc(*len + 1);
        if (s) {
            memcpy(s, json_string_value(plain), *len);
            s[*len] = 0;
        }
        return s;
    }
    char *s = NULL;
    if (!json_is_string(b64) ||
        crl_base64_decode(json_string_value(b64), json_string_length(b64), &s, len) < 0)
        return NULL;
    return s;
}

static json_t *ent_json(const struct ent *e, bool with_replaced)
{
    json_t *o = json_object();
    if (!o || json_set_bytes(o, "path", e->path, e->plen) < 0 ||
        json_object_set_new(o, "type", json_string(type_names[e->type])) < 0)
        goto fail;
    if (e->type == ENT_WHITEOUT)
        return o;
    if (json_object_set_new(o, "uid", json_integer(e->uid)) < 0 ||
        json_object_set_new(o, "gid", json_integer(e->gid)) < 0 ||
        json_object_set_new(o, "mtime_s", json_integer(e->mtime_s)) < 0 ||
        json_object_set_new(o, "mtime_ns", json_integer(e->mtime_ns)) < 0)
        goto fail;
    if (e->type == ENT_SYMLINK)
        return json_set_bytes(o, "target", e->target, strlen(e->target)) < 0 ? NULL : o;
    if (json_object_set_new(o, "mode", json_integer(e->mode)) < 0)
        goto fail;
    if (e->n_xattrs) {
        json_t *a = json_array();
        if (json_object_set_new(o, "xattrs", a) < 0)
            goto fail;
        for (size_t i = 0; i < e->n_xattrs; i++) {
            json_t *x = json_object();
            cleanup_free char *v = crl_base64_encode(e->xattrs[i].value, e->xattrs[i].len, NULL);
            if (json_array_append_new(a, x) < 0 || !v ||
                json_set_bytes(x, "name", e->xattrs[i].name, strlen(e->xattrs[i].name)) < 0 ||
                json_object_set_new(x, "value", json_string(v)) < 0)
                goto fail;
        }
    }
    if (e->type == ENT_DIR) {
        if ((e->opaque && json_object_set_new(o, "opaque", json_true()) < 0) ||
            (with_replaced && e->replaced && json_object_set_new(o, "replaces", json_true()) < 0))
            goto fail;
        return o;
    }
    if (json_object_set_new(o, "size", json_integer((json_int_t)e->size)) < 0 ||
        json_object_set_new(o, "blob", json_string(e->blob)) < 0 ||
        (e->link && json_set_bytes(o, "link", e->link, strlen(e->link)) < 0))
        goto fail;
    return o;
fail:
    json_decref(o);
    return NULL;
}

static bool json_u32(json_t *o, const char *key, uint32_t max, uint32_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > max)
        return false;
    *out = (uint32_t)json_integer_value(v);
    return true;
}

static int parse_xattrs(json_t *a, struct ent *e)
{
    if (!a)
        return 0;
    if (!json_is_array(a) || !(e->xattrs = calloc(json_array_size(a) + 1, sizeof(*e->xattrs))))
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *x = json_array_get(a, i);
        json_t *v = json_object_get(x, "value");
        size_t nlen, vlen;
        char *value = NULL;
        struct xattr *xa = &e->xattrs[e->n_xattrs];
        if (!json_is_string(v) || !(xa->name = json_get_bytes(x, "name", &nlen)))
            return -1;
        e->n_xattrs++;
        if (strlen(xa->name) != nlen || strncmp(xa->name, "user.", 5) != 0 ||
            strncmp(xa->name, "user.overlay.", 13) == 0 ||
            (i > 0 && strcmp(e->xattrs[i - 1].name, xa->name) >= 0) ||
            crl_base64_decode(json_string_value(v), json_string_length(v), &value, &vlen) < 0)
            return -1;
        xa->value = value;
        xa->len = vlen;
    }
    return 0;
}

static struct ent *ent_from_json(json_t *o, const char *what, size_t i, struct crl_err *err)
{
    size_t plen = 0;
    cleanup_free char *path = json_get_bytes(o, "path", &plen);
    const char *type = json_string_value(json_object_get(o, "type"));
    int t = 0;
    for (int k = ENT_FILE; k <= ENT_WHITEOUT; k++)
        if (type && strcmp(type, type_names[k]) == 0)
            t = k;
    if (!path || !path_valid(path, plen) || !t) {
        crl_err_set(err, CRL_E_INTERNAL, "%s: entry %zu has no valid path and type", what, i);
        return NULL;
    }
    struct ent *e = ent_new(path, plen, (enum ent_type)t);
    if (!e) {
        crl_err_sys(err, ENOMEM, "%s", what);
        return NULL;
    }
    if (t == ENT_WHITEOUT)
        return e;
    json_t *ms = json_object_get(o, "mtime_s");
    bool ok = json_u32(o, "uid", UINT32_MAX, &e->uid) && json_u32(o, "gid", UINT32_MAX, &e->gid) &&
              json_is_integer(ms) && json_u32(o, "mtime_ns", 999999999, &e->mtime_ns);
    e->mtime_s = json_integer_value(ms);
    size_t len = 0;
    if (ok && t == ENT_SYMLINK) {
        e->target = json_get_bytes(o, "target", &len);
        ok = e->target && len > 0 && len < PATH_MAX && strlen(e->target) == len;
    } else if (ok) {
        ok = json_u32(o, "mode", 07777, &e->mode) &&
             parse_xattrs(json_object_get(o, "xattrs"), e) == 0;
    }
    if (ok && t == ENT_DIR) {
        e->opaque = json_is_true(json_object_get(o, "opaque"));
        e->replaced = json_is_true(json_object_get(o, "replaces"));
    } else if (ok && t == ENT_FILE) {
        json_t *size = json_object_get(o, "size");
        const char *blob = json_string_value(json_object_get(o, "blob"));
        ok = json_is_integer(size) && json_integer_value(size) >= 0 && crl_digest_valid(blob);
        if (ok) {
            e->size = (uint64_t)json_integer_value(size);
            snprintf(e->blob, sizeof(e->blob), "%s", blob);
            ok = e->size > 0 || strcmp(blob, EMPTY_ID) == 0;
        }
        if (ok && (json_object_get(o, "link") || json_object_get(o, "link_b64"))) {
            e->link = json_get_bytes(o, "link", &len);
            ok = e->link && path_valid(e->link, len) && cmp_path(e->link, e->path) < 0;
        }
    }
    if (!ok) {
        crl_err_set(err, CRL_E_INTERNAL, "%s: entry %zu (%s) is malformed", what, i, e->path);
        ent_free(e);
        return NULL;
    }
    return e;
}

struct manifest {
    json_t *root;
    json_t *entries;
    const char *parent; /* NULL for none */
    unsigned depth;
};

static int manifest_load(struct crl_ckpt_store *s, const char *id, struct manifest *m,
                         struct crl_err *err)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    if (crl_blob_get(s, id, &b, CRL_CKPT_MANIFEST_MAX, err) < 0) {
        crl_buf_free(&b);
        return crl_err_prefix(err, "checkpoint %s", id);
    }
    json_error_t je;
    m->root = json_loadb(b.data ? b.data : "", b.len, JSON_REJECT_DUPLICATES, &je);
    crl_buf_free(&b);
    if (!m->root)
        return crl_err_set(err, CRL_E_INTERNAL, "checkpoint %s is not a manifest: %s", id, je.text);
    json_t *v = json_object_get(m->root, "v"), *p = json_object_get(m->root, "parent");
    json_t *d = json_object_get(m->root, "depth");
    m->entries = json_object_get(m->root, "entries");
    m->parent = json_string_value(p);
    if (json_integer_value(v) != 1 || !json_is_array(m->entries) ||
        !(json_is_null(p) || crl_digest_valid(m->parent)) || !json_is_integer(d) ||
        json_integer_value(d) < 1 || json_integer_value(d) > CRL_CKPT_MAX_CHAIN) {
        json_decref(m->root);
        m->root = NULL;
        return crl_err_set(err, CRL_E_INTERNAL, "checkpoint %s is not a version 1 manifest", id);
    }
    m->depth = (unsigned)json_integer_value(d);
    return 0;
}

/* Merge the manifests of one chain, oldest first, into idx. */
static int chain_merge(struct crl_ckpt_store *s, const char *id, struct crl_ckpt_index *idx,
                       unsigned *depth, struct crl_err *err)
{
    struct manifest m[CRL_CKPT_MAX_CHAIN];
    size_t n = 0;
    int ret = -1;
    struct crl_buf prev; /* the last entry's path */
    crl_buf_init(&prev, CRL_BUF_UNBOUNDED);
    for (const char *cur = id; cur;) {
        if (n == CRL_CKPT_MAX_CHAIN) {
            crl_err_set(err, CRL_E_INTERNAL, "checkpoint %s: chain longer than %d", id,
                        CRL_CKPT_MAX_CHAIN);
            goto out;
        }
        if (manifest_load(s, cur, &m[n], err) < 0)
            goto out;
        n++;
        if (m[n - 1].depth != m[0].depth - (n - 1) || (m[n - 1].depth == 1) != !m[n - 1].parent) {
            crl_err_set(err, CRL_E_INTERNAL, "checkpoint %s: depth %u does not match its chain",
                        cur, m[n - 1].depth);
            goto out;
        }
        cur = m[n - 1].parent;
    }
    for (size_t k = n; k-- > 0;) {
        char what[CRL_CKPT_ID_MAX + 16];
        snprintf(what, sizeof(what), "checkpoint %s", k == 0 ? id : m[k - 1].parent);
        for (size_t i = 0; i < json_array_size(m[k].entries); i++) {
            struct ent *e = ent_from_json(json_array_get(m[k].entries, i), what, i, err);
            if (!e)
                goto out;
            /* Canonical: strictly in path order, which merging relies on. */
            if (i > 0 && cmp_path(prev.data, e->path) >= 0) {
                crl_err_set(err, CRL_E_INTERNAL, "%s: entry %zu (%s) is out of order", what, i,
                            e->path);
                ent_free(e);
                goto out;
            }
            prev.len = 0;
            if (crl_buf_append(&prev, e->path, e->plen + 1) < 0) {
                ent_free(e);
                crl_err_sys(err, ENOMEM, "%s", what);
                goto out;
            }
            if (merge(idx, e, what, err) < 0)
                goto out;
        }
    }
    *depth = m[0].depth;
    ret = 0;
out:
    for (size_t k = 0; k < n; k++)
        json_decref(m[k].root);
    crl_buf_free(&prev);
    return ret;
}

static int cmp_ent_path(const void *a, const void *b)
{
    return cmp_path((*(struct ent *const *)a)->path, (*(struct ent *const *)b)->path);
}

/* The entries in path order (the index keeps them). */
static int idx_sorted(const struct crl_ckpt_index *idx, struct ent ***out, struct crl_err *err)
{
    struct ent **v = malloc((idx->count + 1) * sizeof(*v));
    if (!v)
        return crl_err_sys(err, ENOMEM, "sorting %zu entries", idx->count);
    size_t n = 0;
    for (size_t i = 0; i < idx->cap; i++)
        if (idx->slots[i])
            v[n++] = idx->slots[i];
    qsort(v, n, sizeof(*v), cmp_ent_path);
    *out = v;
    return 0;
}

static struct crl_ckpt_index *idx_clone(const struct crl_ckpt_index *o)
{
    struct crl_ckpt_index *idx = calloc(1, sizeof(*idx));
    if (!idx || !(idx->slots = calloc(o->cap, sizeof(*idx->slots)))) {
        free(idx);
        return NULL;
    }
    idx->cap = o->cap;
    for (size_t i = 0; i < o->cap; i++) {
        if (o->slots[i] && !(idx->slots[i] = ent_clone(o->slots[i]))) {
            crl_ckpt_index_free(idx);
            return NULL;
        }
    }
    idx->count = o->count;
    memcpy(idx->id, o->id, sizeof(idx->id));
    idx->depth = o->depth;
    return idx;
}

/* ---- loading and checking ---- */

static int index_load(struct crl_ckpt_store *s, const char *ckpt_id, struct crl_ckpt_index **out,
                      struct crl_err *err)
{
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    if (!idx)
        return crl_err_sys(err, ENOMEM, "checkpoint index");
    if (ckpt_id && *ckpt_id) {
        if (!crl_digest_valid(ckpt_id)) {
            crl_ckpt_index_free(idx);
            return crl_err_set(err, CRL_E_INVALID, "%s is not a checkpoint id (sha256:<64 hex>)",
                               ckpt_id);
        }
        unsigned depth = 0;
        if (chain_merge(s, ckpt_id, idx, &depth, err) < 0) {
            crl_ckpt_index_free(idx);
            return -1;
        }
        snprintf(idx->id, sizeof(idx->id), "%s", ckpt_id);
        idx->depth = depth;
    }
    *out = idx;
    return 0;
}

int crl_ckpt_index_load(struct crl_ckpt_store *s, const char *ckpt_id, struct crl_ckpt_index **out,
                        struct crl_err *err)
{
    return index_load(s, ckpt_id, out, err);
}

int crl_ckpt_check(struct crl_ckpt_store *s, const char *ckpt_id, struct crl_err *err)
{
    struct crl_ckpt_index *idx;
    if (index_load(s, ckpt_id, &idx, err) < 0)
        return -1;
    int ret = 0;
    for (size_t i = 0; i < idx->cap && ret == 0; i++) {
        struct ent *e = idx->slots[i];
        if (!e || e->type != ENT_FILE || strcmp(e->blob, EMPTY_ID) == 0)
            continue;
        struct stat st;
        if (fstatat(s->blob_fd, crl_digest_hex(e->blob), &st, AT_SYMLINK_NOFOLLOW) < 0)
            ret =
                errno == ENOENT
                    ? crl_err_set(err, CRL_E_NOT_FOUND, "checkpoint %s: blob %s of %s is not in %s",
                                  ckpt_id, e->blob, e->path, s->dir)
                    : crl_err_sys(err, errno, "stat %s/sha256/%s", s->dir, crl_digest_hex(e->blob));
        else if (!S_ISREG(st.st_mode) || st.st_size == 0)
            ret = crl_err_set(err, CRL_E_INTERNAL,
                              "checkpoint %s: blob %s of %s (%s/sha256/%s) is corrupt: empty",
                              ckpt_id, e->blob, e->path, s->dir, crl_digest_hex(e->blob));
    }
    crl_ckpt_index_free(idx);
    return ret;
}

/* ---- taking a checkpoint: the walk ---- */

struct hardlink {
    uint64_t ino;
    struct ent *old; /* the index's entry, or NULL */
    struct ent *now; /* the walk's pending entry, or NULL */
    const char *path;
};

struct walk {
    struct crl_ckpt_store *s;
    struct crl_ckpt_index *idx;
    const struct crl_snapshot_view *v;
    struct crl_ckpt_stats *st;
    struct crl_err *err;
    dev_t dev;
    int64_t t0_ns; /* the coarse clock when the walk began */
    uint64_t gen;
    struct crl_buf path; /* of the entry at hand, relative to the layer */
    struct ent **pend;   /* the manifest's entries */
    size_t n_pend, cap_pend;
    struct hardlink *hl;
    size_t n_hl, cap_hl;
    uint8_t *buf; /* the store's, below */
    char *dents;
    char *xnames;
};

static int oom(struct walk *w)
{
    return crl_err_sys(w->err, ENOMEM, "%s", w->path.len ? w->path.data : "the layer");
}

static int push(struct walk *w, struct ent *e)
{
    if (w->n_pend == w->cap_pend) {
        size_t cap = w->cap_pend ? w->cap_pend * 2 : 64;
        struct ent **p = realloc(w->pend, cap * sizeof(*p));
        if (!p) {
            ent_free(e);
            return oom(w);
        }
        w->pend = p;
        w->cap_pend = cap;
    }
    w->pend[w->n_pend++] = e;
    return 0;
}

static int64_t ts_ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static bool key_match(const struct ent *e, const struct stat *st)
{
    return e->has_key && e->k_ino == (uint64_t)st->st_ino && e->k_size == (uint64_t)st->st_size &&
           e->k_ctime_ns == ts_ns(st->st_ctim);
}

static void key_set(const struct walk *w, struct ent *e, const struct stat *st)
{
    /* A change later in the clock tick of this ctime may get the same ctime
     * (timestamps come from the coarse clock): a key is trusted only once
     * its ctime is older than the walk that records it.  A whole-second
     * ctime may come from a filesystem with coarse timestamps: 2 s then. */
    int64_t c = ts_ns(st->st_ctim);
    e->has_key = c + (st->st_ctim.tv_nsec == 0 ? 2000000000 : 0) < w->t0_ns;
    e->k_ino = (uint64_t)st->st_ino;
    e->k_size = (uint64_t)st->st_size;
    e->k_ctime_ns = c;
}

static void key_copy(struct ent *to, const struct ent *from)
{
    to->has_key = from->has_key;
    to->k_ino = from->k_ino;
    to->k_size = from->k_size;
    to->k_ctime_ns = from->k_ctime_ns;
}

static uint32_t unshift(uint32_t id, uint32_t shift)
{
    return id >= shift ? id - shift : OVERFLOW_ID;
}

static struct ent *walk_ent(struct walk *w, enum ent_type type, const struct stat *st)
{
    struct ent *e = ent_new(w->path.data, w->path.len, type);
    if (!e)
        return NULL;
    e->mode = (uint32_t)st->st_mode & 07777;
    e->uid = unshift((uint32_t)st->st_uid, (uint32_t)w->v->uid_shift);
    e->gid = unshift((uint32_t)st->st_gid, (uint32_t)w->v->gid_shift);
    e->mtime_s = st->st_mtim.tv_sec;
    e->mtime_ns = (uint32_t)st->st_mtim.tv_nsec;
    key_set(w, e, st);
    return e;
}

/* An unchanged entry, repeated in the manifest (below a dir that became
 * opaque, or for a new link mark). */
static struct ent *walk_copy(struct walk *w, const struct ent *old)
{
    struct ent *e = ent_clone(old);
    if (e)
        e->replaced = false; /* derived again by the merge */
    return e;
}

static void seen(struct walk *w, struct ent *old, struct ent *now)
{
    if (old) {
        old->seen = w->gen;
        old->now = now;
    }
}

static int cmp_xattr(const void *a, const void *b)
{
    return strcmp(((const struct xattr *)a)->name, ((const struct xattr *)b)->name);
}

/* The user.* xattrs of an open file or dir, and (OVERLAY) its opaque mark. */
static int read_xattrs(struct walk *w, int fd, struct ent *e)
{
    ssize_t n = flistxattr(fd, w->xnames, XATTR_LIST_MAX_BYTES);
    if (n < 0)
        return errno == ENOTSUP ? 0 : crl_err_sys(w->err, errno, "listxattr %s", e->path);
    for (char *name = w->xnames; name < w->xnames + n; name += strlen(name) + 1) {
        bool opq = w->v->format == CRL_LAYER_OVERLAY && strcmp(name, "user.overlay.opaque") == 0;
        if (!opq && (strncmp(name, "user.", 5) != 0 || strncmp(name, "user.overlay.", 13) == 0))
            continue;
        char small[256];
        void *val = small;
        ssize_t len = fgetxattr(fd, name, small, sizeof(small));
        if (len < 0 && errno == ERANGE) {
            len = fgetxattr(fd, name, NULL, 0);
            if (len >= 0 && !(val = malloc((size_t)len + 1)))
                return oom(w);
            if (len >= 0)
                len = fgetxattr(fd, name, val, (size_t)len);
        }
        if (len < 0) {
            int errnum = errno;
            if (val != small)
                free(val);
            if (errnum == ENODATA) /* removed meanwhile */
                continue;
            return crl_err_sys(w->err, errnum, "getxattr %s %s", e->path, name);
        }
        if (opq) {
            e->opaque = len == 1 && *(char *)val == 'y';
            if (val != small)
                free(val);
            continue;
        }
        if (val == small) {
            if (!(val = malloc((size_t)len + 1)))
                return oom(w);
            memcpy(val, small, (size_t)len);
        }
        char *xname = strdup(name);
        struct xattr *x = xname ? realloc(e->xattrs, (e->n_xattrs + 1) * sizeof(*x)) : NULL;
        if (!x) {
            free(xname);
            free(val);
            return oom(w);
        }
        e->xattrs = x;
        x[e->n_xattrs++] = (struct xattr){xname, val, (size_t)len};
    }
    if (e->n_xattrs > 1)
        qsort(e->xattrs, e->n_xattrs, sizeof(*e->xattrs), cmp_xattr);
    return 0;
}

static ssize_t pread_full(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Hash a file's content into e->blob and e->size, and store it unless the
 * index has it already.  1: the file changed while being read. */
static int file_content(struct walk *w, int fd, const struct stat *st, const struct ent *old,
                        struct ent *e)
{
    const char *known = old && old->type == ENT_FILE ? old->blob : NULL;
    if ((size_t)st->st_size <= INLINE_MAX) {
        ssize_t n = pread_full(fd, w->buf, INLINE_MAX + 1, 0);
        if (n < 0)
            return crl_err_sys(w->err, errno, "read %s", e->path);
        w->st->bytes_read += (uint64_t)n;
        if ((size_t)n <= INLINE_MAX) {
            crl_sha256_buf(w->buf, (size_t)n, e->blob);
            e->size = (uint64_t)n;
            if (known && strcmp(known, e->blob) == 0)
                return 0;
            return put_hashed(w->s, w->buf, (size_t)n, e->blob, w->st, w->err) < 0 ? -1 : 0;
        }
    }
    /* Large: hash it first, as most of the time its blob exists; compress
     * (hashing again) only when it does not. */
    struct crl_sha256 h;
    uint64_t off = 0;
    ssize_t n;
    if (crl_sha256_init(&h) < 0)
        return oom(w);
    while ((n = pread_full(fd, w->buf, INLINE_MAX, (off_t)off)) > 0) {
        crl_sha256_update(&h, w->buf, (size_t)n);
        off += (uint64_t)n;
    }
    if (n < 0) {
        crl_sha256_free(&h);
        return crl_err_sys(w->err, errno, "read %s", e->path);
    }
    crl_sha256_final(&h, e->blob);
    e->size = off;
    w->st->bytes_read += off;
    if ((known && strcmp(known, e->blob) == 0) || strcmp(e->blob, EMPTY_ID) == 0 ||
        batch_has(w->s, e->blob))
        return 0;
    int there = blob_refresh(w->s, e->blob, w->err);
    if (there != 0) {
        w->s->dirty = true;
        return there > 0 ? 0 : crl_err_prefix(w->err, "%s", e->path);
    }
    char tmp[48];
    int out = tmp_create(w->s, tmp, w->err);
    if (out < 0)
        return -1;
    uint64_t stored = 0;
    off = 0;
    ZSTD_CCtx_reset(w->s->cctx, ZSTD_reset_session_only);
    if (crl_sha256_init(&h) < 0) {
        unlinkat(w->s->tmp_fd, tmp, 0);
        close(out);
        return oom(w);
    }
    int ret = 0;
    while (ret == 0 && (n = pread_full(fd, w->buf, INLINE_MAX, (off_t)off)) > 0) {
        crl_sha256_update(&h, w->buf, (size_t)n);
        off += (uint64_t)n;
        ret = zwrite(w->s, out, w->buf, (size_t)n, false, &stored, tmp, w->err);
    }
    if (ret == 0 && n < 0)
        ret = crl_err_sys(w->err, errno, "read %s", e->path);
    char again[CRL_CKPT_ID_MAX];
    crl_sha256_final(&h, again);
    w->st->bytes_read += off;
    if (ret == 0)
        ret = zwrite(w->s, out, NULL, 0, true, &stored, tmp, w->err);
    if (ret == 0 && (strcmp(again, e->blob) != 0 || off != e->size))
        ret = 1; /* it changed between the two reads: look again */
    if (ret != 0) {
        unlinkat(w->s->tmp_fd, tmp, 0);
        close(out);
        return ret;
    }
    return blob_finish(w->s, tmp, out, e->blob, stored, w->st, w->err) < 0 ? -1 : 0;
}

static int hardlink_add(struct walk *w, uint64_t ino, struct ent *old, struct ent *now)
{
    if (w->n_hl == w->cap_hl) {
        size_t cap = w->cap_hl ? w->cap_hl * 2 : 16;
        struct hardlink *p = realloc(w->hl, cap * sizeof(*p));
        if (!p)
            return oom(w);
        w->hl = p;
        w->cap_hl = cap;
    }
    w->hl[w->n_hl++] = (struct hardlink){ino, old, now, now ? now->path : old->path};
    return 0;
}

/* The walk of one name returns 0, -1 with w->err, or 1 when the entry
 * changed type or inode under the walk (look again). */
static int walk_file(struct walk *w, int dfd, const char *name, const struct stat *lst, bool force)
{
    struct ent *old = idx_find(w->idx, w->path.data, w->path.len);
    struct ent *now = NULL;
    struct stat st = *lst;
    if (old && old->type == ENT_FILE && key_match(old, lst) && (lst->st_nlink > 1 || !old->link)) {
        if (force && !(now = walk_copy(w, old)))
            return oom(w);
    } else {
        cleanup_close int fd =
            crl_openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_NOATIME, 0);
        if (fd < 0 && errno == EPERM) /* O_NOATIME on a file of another user, without CAP_FOWNER */
            fd = crl_openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0);
        if (fd < 0)
            return errno == ENOENT || errno == ELOOP || errno == ENXIO
                       ? 1
                       : crl_err_sys(w->err, errno, "open %s", w->path.data);
        /* The key is taken before the read: a change during it moves ctime
         * past the key, so the next checkpoint reads the file again. */
        if (fstat(fd, &st) < 0)
            return crl_err_sys(w->err, errno, "fstat %s", w->path.data);
        if (!S_ISREG(st.st_mode) || st.st_ino != lst->st_ino)
            return 1;
        if (!(now = walk_ent(w, ENT_FILE, &st)))
            return oom(w);
        int r = read_xattrs(w, fd, now);
        if (r == 0)
            r = file_content(w, fd, &st, old, now);
        if (r != 0) {
            ent_free(now);
            return r;
        }
        if (old && ent_equal(old, now, st.st_nlink > 1)) {
            key_copy(old, now);
            if (!force) {
                ent_free(now);
                now = NULL;
            }
        }
    }
    seen(w, old, now);
    if (now && push(w, now) < 0)
        return -1;
    if (st.st_nlink > 1 && hardlink_add(w, (uint64_t)st.st_ino, old, now) < 0)
        return -1;
    w->st->entries++;
    return 0;
}

static int walk_symlink(struct walk *w, int dfd, const char *name, const struct stat *lst,
                        bool force)
{
    struct ent *old = idx_find(w->idx, w->path.data, w->path.len);
    struct ent *now = NULL;
    if (old && old->type == ENT_SYMLINK && key_match(old, lst)) {
        if (force && !(now = walk_copy(w, old)))
            return oom(w);
    } else {
        char target[PATH_MAX];
        ssize_t n = readlinkat(dfd, name, target, sizeof(target));
        if (n < 0)
            return errno == ENOENT || errno == EINVAL
                       ? 1
                       : crl_err_sys(w->err, errno, "readlink %s", w->path.data);
        if ((size_t)n >= sizeof(target) || n == 0)
            return crl_err_set(w->err, CRL_E_INVALID, "symlink %s: target of %zd bytes",
                               w->path.data, n);
        if (!(now = walk_ent(w, ENT_SYMLINK, lst)) || !(now->target = strndup(target, (size_t)n))) {
            ent_free(now);
            return oom(w);
        }
        now->mode = 0;
        if (old && ent_equal(old, now, false)) {
            key_copy(old, now);
            if (!force) {
                ent_free(now);
                now = NULL;
            }
        }
    }
    seen(w, old, now);
    if (now && push(w, now) < 0)
        return -1;
    w->st->entries++;
    return 0;
}

static int walk_whiteout(struct walk *w, const struct stat *lst, bool force)
{
    struct ent *old = idx_find(w->idx, w->path.data, w->path.len);
    struct ent *now = NULL;
    if (!old || old->type != ENT_WHITEOUT || force) {
        if (!(now = walk_ent(w, ENT_WHITEOUT, lst)))
            return oom(w);
    }
    seen(w, old, now);
    if (now && push(w, now) < 0)
        return -1;
    w->st->entries++;
    return 0;
}

static int walk_dir(struct walk *w, int fd, unsigned depth, bool force);

static int walk_subdir(struct walk *w, int dfd, const char *name, const struct stat *lst,
                       unsigned depth, bool force)
{
    cleanup_close int fd = crl_openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP
                   ? 1
                   : crl_err_sys(w->err, errno, "open %s", w->path.data);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return crl_err_sys(w->err, errno, "fstat %s", w->path.data);
    if (st.st_ino != lst->st_ino || st.st_dev != lst->st_dev)
        return 1;
    if (depth + 1 >= CRL_CKPT_MAX_DEPTH)
        return crl_err_set(w->err, CRL_E_TOO_LARGE, "%s: more than %d levels of directories",
                           w->path.data, CRL_CKPT_MAX_DEPTH);
    struct ent *old = idx_find(w->idx, w->path.data, w->path.len);
    struct ent *now = NULL;
    bool reset = false;
    if (old && old->type == ENT_DIR && key_match(old, &st)) {
        if (force && !(now = walk_copy(w, old)))
            return oom(w);
    } else {
        if (!(now = walk_ent(w, ENT_DIR, &st)))
            return oom(w);
        if (read_xattrs(w, fd, now) < 0) {
            ent_free(now);
            return -1;
        }
        if (old && ent_equal(old, now, false)) {
            key_copy(old, now);
            if (!force) {
                ent_free(now);
                now = NULL;
            }
        } else {
            /* Newly opaque: a merge drops what older manifests had below
             * it, so this manifest lists all of it. */
            reset = now->opaque && !(old && old->type == ENT_DIR && old->opaque);
        }
    }
    seen(w, old, now);
    if (old && reset)
        old->reset = w->gen;
    if (now && push(w, now) < 0)
        return -1;
    w->st->entries++;
    return walk_dir(w, fd, depth + 1, force || reset);
}

static int walk_name(struct walk *w, int dfd, const char *name, unsigned depth, bool force)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : crl_err_sys(w->err, errno, "stat %s", w->path.data);
    if (st.st_dev != w->dev) {
        crl_warn(NULL, "checkpoint: %s is on another filesystem than the layer: left out",
                 w->path.data);
        return 0;
    }
    if (reserved_name(name, strlen(name))) {
        crl_warn(NULL, "checkpoint: %s: names beginning with .wh. are whiteouts: left out",
                 w->path.data);
        return 0;
    }
    switch (st.st_mode & S_IFMT) {
    case S_IFREG: return walk_file(w, dfd, name, &st, force);
    case S_IFDIR: return walk_subdir(w, dfd, name, &st, depth, force);
    case S_IFLNK: return walk_symlink(w, dfd, name, &st, force);
    case S_IFCHR:
        if (w->v->format == CRL_LAYER_OVERLAY && st.st_rdev == makedev(0, 0))
            return walk_whiteout(w, &st, force);
        break;
    default: break;
    }
    crl_debug(NULL, "checkpoint: %s is not a file, directory or symlink: left out", w->path.data);
    return 0;
}

static int walk_dir(struct walk *w, int fd, unsigned depth, bool force)
{
    /* Read the names first, so a level holds one descriptor and no buffer
     * of the kernel's while the walk is below it. */
    struct crl_buf names;
    crl_buf_init(&names, CRL_BUF_UNBOUNDED);
    for (;;) {
        ssize_t n = getdents64(fd, w->dents, DENTS_BUF);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            crl_buf_free(&names);
            return crl_err_sys(w->err, errno, "read directory %s",
                               w->path.len ? w->path.data : "/");
        }
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(void *)(w->dents + off);
            off += d->d_reclen;
            if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
                continue;
            if (crl_buf_append(&names, d->d_name, strlen(d->d_name) + 1) < 0) {
                crl_buf_free(&names);
                return oom(w);
            }
        }
    }
    size_t base = w->path.len;
    int ret = 0;
    for (const char *name = names.data; ret == 0 && name && name < names.data + names.len;
         name += strlen(name) + 1) {
        if ((base && crl_buf_append(&w->path, "/", 1) < 0) ||
            crl_buf_append(&w->path, name, strlen(name)) < 0) {
            ret = oom(w);
            break;
        }
        int tries = 0;
        while ((ret = walk_name(w, fd, name, depth, force)) > 0 && ++tries < RETRIES)
            ;
        if (ret > 0)
            ret = crl_err_set(w->err, CRL_E_CONFLICT, "%s kept changing while it was read",
                              w->path.data);
        w->path.len = base;
        w->path.data[base] = 0;
    }
    crl_buf_free(&names);
    return ret;
}

static int cmp_hardlink(const void *a, const void *b)
{
    const struct hardlink *x = a, *y = b;
    if (x->ino != y->ino)
        return x->ino < y->ino ? -1 : 1;
    return cmp_path(x->path, y->path);
}

/* Paths of one inode: each names the first of them as its link. */
static int finish_hardlinks(struct walk *w)
{
    if (w->n_hl > 1)
        qsort(w->hl, w->n_hl, sizeof(*w->hl), cmp_hardlink);
    for (size_t i = 0, j; i < w->n_hl; i = j) {
        for (j = i + 1; j < w->n_hl && w->hl[j].ino == w->hl[i].ino;)
            j++;
        for (size_t k = i; k < j; k++) {
            struct hardlink *h = &w->hl[k];
            const char *want = j - i > 1 && k > i ? w->hl[i].path : NULL;
            struct ent *e = h->now;
            if (!e && str_eq(h->old->link, want))
                continue;
            if (!e) {
                if (!(e = walk_copy(w, h->old)) || push(w, e) < 0)
                    return e ? -1 : oom(w);
                h->old->now = e;
            }
            if (str_eq(e->link, want))
                continue;
            free(e->link);
            e->link = NULL;
            if (want && !(e->link = strdup(want)))
                return oom(w);
        }
    }
    return 0;
}

/* Paths of the index the walk did not find: whiteouts, but none below a
 * path that is going too, or below a dir that became opaque. */
static int find_removed(struct walk *w)
{
    struct crl_ckpt_index *idx = w->idx;
    for (size_t i = 0; i < idx->cap; i++) {
        struct ent *e = idx->slots[i];
        if (!e || e->seen == w->gen || e->type == ENT_WHITEOUT)
            continue;
        struct ent *p = idx_parent(idx, e);
        if (p && (p->seen != w->gen || p->reset == w->gen ||
                  (p->now ? p->now->type : p->type) != ENT_DIR))
            continue;
        struct ent *wh = ent_new(e->path, e->plen, ENT_WHITEOUT);
        if (!wh || push(w, wh) < 0)
            return wh ? -1 : oom(w);
    }
    return 0;
}

static int manifest_put(struct crl_ckpt_store *s, json_t *entries, const char *parent,
                        unsigned depth, char id[CRL_CKPT_ID_MAX], struct crl_ckpt_stats *st,
                        struct crl_err *err)
{
    json_t *root = json_pack("{s:i, s:o, s:o, s:i}", "v", 1, "parent",
                             parent ? json_string(parent) : json_null(), "entries", entries,
                             "depth", (int)depth);
    char *text = root ? json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text)
        return crl_err_sys(err, ENOMEM, "writing a manifest");
    size_t len = strlen(text);
    crl_sha256_buf(text, len, id);
    int r = put_hashed(s, text, len, id, st, err);
    free(text);
    return r < 0 ? crl_err_prefix(err, "storing manifest %s", id) : 0;
}

static void walk_free(struct walk *w)
{
    for (size_t i = 0; i < w->n_pend; i++)
        ent_free(w->pend[i]);
    free(w->pend);
    free(w->hl);
    crl_buf_free(&w->path);
}

static void idx_swap(struct crl_ckpt_index *a, struct crl_ckpt_index *b)
{
    struct crl_ckpt_index t = *a;
    *a = *b;
    *b = t;
}

int crl_ckpt_take(struct crl_ckpt_store *s, struct crl_ckpt_index *idx, const char *parent,
                  const struct crl_snapshot_view *v, char id[CRL_CKPT_ID_MAX],
                  struct crl_ckpt_stats *st, struct crl_err *err)
{
    struct crl_ckpt_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof(*st));
    const char *par = parent ? parent : "";
    if (idx->broken)
        return crl_err_set(err, CRL_E_INVALID,
                           "checkpoint: the index was left unusable by a failed update: load it "
                           "again");
    if (strcmp(par, idx->id) != 0)
        return crl_err_set(err, CRL_E_INVALID,
                           "checkpoint: the index describes checkpoint %s, not the parent %s",
                           idx->id[0] ? idx->id : "(none)", par[0] ? par : "(none)");
    struct walk w = {.s = s, .idx = idx, .v = v, .st = st, .err = err, .gen = ++idx->gen};
    crl_buf_init(&w.path, CRL_BUF_UNBOUNDED);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    w.t0_ns = ts_ns(now);
    struct crl_ckpt_index *flat = NULL;
    int ret = -1;
    cleanup_close int root = crl_openat(v->dir_fd, ".", O_RDONLY | O_DIRECTORY, 0);
    struct stat rst;
    if (root < 0 || fstat(root, &rst) < 0) {
        crl_err_sys(err, errno, "checkpoint: open the layer");
        goto out;
    }
    w.dev = rst.st_dev;
    s->batching = true;
    if (!s->walk_buf)
        s->walk_buf = malloc(INLINE_MAX + 1 + DENTS_BUF + XATTR_LIST_MAX_BYTES);
    w.dents = (char *)s->walk_buf; /* first: struct dirent64 wants alignment */
    w.xnames = w.dents + DENTS_BUF;
    w.buf = (uint8_t *)w.xnames + XATTR_LIST_MAX_BYTES;
    if (!s->walk_buf) {
        oom(&w);
        goto out;
    }
    if (walk_dir(&w, root, 0, false) < 0 || finish_hardlinks(&w) < 0 || find_removed(&w) < 0) {
        crl_err_prefix(err, "checkpoint");
        goto out;
    }
    if (w.n_pend == 0) { /* nothing changed: no new checkpoint */
        snprintf(id, CRL_CKPT_ID_MAX, "%s", idx->id);
        ret = 0;
        goto out;
    }
    qsort(w.pend, w.n_pend, sizeof(*w.pend), cmp_ent_path);
    for (size_t i = 0; i < w.n_pend; i++) {
        if (w.pend[i]->type == ENT_WHITEOUT)
            st->removed++;
        else
            st->changed++;
    }
    unsigned depth = idx->depth + 1;
    json_t *entries = json_array();
    if (!entries) {
        oom(&w);
        goto out;
    }
    if (depth <= CRL_CKPT_MAX_CHAIN) {
        for (size_t i = 0; i < w.n_pend; i++)
            if (json_array_append_new(entries, ent_json(w.pend[i], false)) < 0) {
                json_decref(entries);
                oom(&w);
                goto out;
            }
    } else {
        /* Flatten: the whole new state, parent null. */
        depth = 1;
        if (!(flat = idx_clone(idx))) {
            json_decref(entries);
            oom(&w);
            goto out;
        }
        for (size_t i = 0; i < w.n_pend; i++) {
            struct ent *e = steal_pointer(&w.pend[i]);
            if (merge(flat, e, "checkpoint", err) < 0) {
                json_decref(entries);
                goto out;
            }
        }
        struct ent **all = NULL;
        if (idx_sorted(flat, &all, err) < 0) {
            json_decref(entries);
            goto out;
        }
        for (size_t i = 0; i < flat->count; i++)
            if (json_array_append_new(entries, ent_json(all[i], true)) < 0) {
                free(all);
                json_decref(entries);
                oom(&w);
                goto out;
            }
        free(all);
    }
    char new_id[CRL_CKPT_ID_MAX];
    if (manifest_put(s, entries, flat || !idx->id[0] ? NULL : idx->id, depth, new_id, st, err) <
            0 ||
        batch_flush(s, st, err) < 0 || crl_ckpt_store_sync(s, err) < 0) {
        crl_err_prefix(err, "checkpoint");
        goto out;
    }
    if (flat) {
        idx_swap(idx, flat);
        idx->gen = flat->gen;
    } else {
        for (size_t i = 0; i < w.n_pend; i++) {
            struct ent *e = steal_pointer(&w.pend[i]);
            if (merge(idx, e, "checkpoint", err) < 0) {
                idx->broken = true;
                goto out;
            }
        }
    }
    snprintf(idx->id, sizeof(idx->id), "%s", new_id);
    idx->depth = depth;
    snprintf(id, CRL_CKPT_ID_MAX, "%s", new_id);
    ret = 0;
out:
    batch_abort(s); /* what a failure left unsynced (a success left nothing) */
    crl_ckpt_index_free(flat);
    walk_free(&w);
    return ret;
}

/* ---- restoring: the tar stream ---- */

static la_ssize_t tar_write(struct archive *a, void *ud, const void *buf, size_t len)
{
    if (crl_write_full(*(int *)ud, buf, len) < 0) {
        archive_set_error(a, errno, "write: %s", strerror(errno));
        return -1;
    }
    return (la_ssize_t)len;
}

/* Below an opaque dir, the image shows nothing a whiteout could hide. */
static bool below_opaque(const struct crl_ckpt_index *idx, const struct ent *e)
{
    for (size_t len = e->plen;;) {
        const char *slash = memrchr(e->path, '/', len);
        if (!slash)
            return false;
        len = (size_t)(slash - e->path);
        struct ent *a = idx_find(idx, e->path, len);
        if (a && a->type == ENT_DIR && (a->opaque || a->replaced))
            return true;
    }
}

static int tar_header(struct archive *a, struct archive_entry *ae, const char *path,
                      struct crl_err *err)
{
    if (archive_write_header(a, ae) < ARCHIVE_WARN)
        return crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", path, archive_error_string(a));
    return 0;
}

/* An empty regular file named `dir/.wh.name`, or `dir/.wh..wh..opq`. */
static int tar_marker(struct archive *a, struct archive_entry *ae, const char *dir, size_t dlen,
                      const char *name, struct crl_err *err)
{
    struct crl_buf p;
    crl_buf_init(&p, CRL_BUF_UNBOUNDED);
    if ((dlen && (crl_buf_append(&p, dir, dlen) < 0 || crl_buf_append(&p, "/", 1) < 0)) ||
        crl_buf_printf(&p, ".wh.%s", name) < 0) {
        crl_buf_free(&p);
        return crl_err_sys(err, ENOMEM, "tar");
    }
    archive_entry_clear(ae);
    archive_entry_copy_pathname(ae, p.data);
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, 0644);
    archive_entry_set_size(ae, 0);
    int r = tar_header(a, ae, p.data, err);
    crl_buf_free(&p);
    return r;
}

static int tar_content(struct crl_ckpt_store *s, const struct ent *e, struct archive *a,
                       uint8_t *buf, struct crl_ckpt_stats *st, struct crl_err *err)
{
    struct blob_rd r;
    if (blob_rd_open(s, e->blob, &r, err) < 0)
        return crl_err_prefix(err, "%s", e->path);
    ssize_t n;
    while ((n = blob_rd_read(&r, buf, CHUNK, err)) > 0) {
        if (r.total > e->size)
            break;
        if (archive_write_data(a, buf, (size_t)n) != n) {
            blob_rd_close(&r);
            return crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", e->path, archive_error_string(a));
        }
        st->bytes_read += (uint64_t)n;
    }
    blob_rd_close(&r);
    if (n < 0)
        return crl_err_prefix(err, "%s", e->path);
    if (r.total != e->size)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s: blob %s (%s/sha256/%s) holds %s bytes than its entry's %llu",
                           e->path, e->blob, s->dir, crl_digest_hex(e->blob),
                           r.total > e->size ? "more" : "fewer", (unsigned long long)e->size);
    return 0;
}

static int tar_entry(struct crl_ckpt_store *s, const struct crl_ckpt_index *idx, struct ent *e,
                     struct archive *a, struct archive_entry *ae, uint8_t *buf,
                     struct crl_ckpt_stats *st, struct crl_err *err)
{
    const char *slash = memrchr(e->path, '/', e->plen);
    size_t dlen = slash ? (size_t)(slash - e->path) : 0;
    if (e->type == ENT_WHITEOUT) {
        if (below_opaque(idx, e))
            return 0;
        st->entries++;
        return tar_marker(a, ae, e->path, dlen, slash ? slash + 1 : e->path, err);
    }
    archive_entry_clear(ae);
    archive_entry_copy_pathname(ae, e->path);
    archive_entry_set_uid(ae, e->uid);
    archive_entry_set_gid(ae, e->gid);
    archive_entry_set_mtime(ae, e->mtime_s, e->mtime_ns);
    for (size_t i = 0; i < e->n_xattrs; i++)
        archive_entry_xattr_add_entry(ae, e->xattrs[i].name, e->xattrs[i].value, e->xattrs[i].len);
    st->entries++;
    if (e->type == ENT_SYMLINK) {
        archive_entry_set_filetype(ae, AE_IFLNK);
        archive_entry_set_perm(ae, 0777);
        archive_entry_copy_symlink(ae, e->target);
        return tar_header(a, ae, e->path, err);
    }
    archive_entry_set_perm(ae, e->mode);
    if (e->type == ENT_DIR) {
        archive_entry_set_filetype(ae, AE_IFDIR);
        if (tar_header(a, ae, e->path, err) < 0)
            return -1;
        if (!e->opaque && !e->replaced)
            return 0;
        st->entries++;
        return tar_marker(a, ae, e->path, e->plen, ".wh..opq", err);
    }
    archive_entry_set_filetype(ae, AE_IFREG);
    /* A hard link only to its first path restored with the same content. */
    struct ent *lead = e->link ? idx_find(idx, e->link, strlen(e->link)) : NULL;
    if (lead && lead->seen == 1 && strcmp(lead->blob, e->blob) == 0 && lead->mode == e->mode &&
        lead->uid == e->uid && lead->gid == e->gid) {
        archive_entry_copy_hardlink(ae, lead->path);
        archive_entry_set_size(ae, 0);
        return tar_header(a, ae, e->path, err);
    }
    archive_entry_set_size(ae, (la_int64_t)e->size);
    if (tar_header(a, ae, e->path, err) < 0 ||
        (e->size > 0 && tar_content(s, e, a, buf, st, err) < 0))
        return -1;
    e->seen = 1;
    return 0;
}

int crl_ckpt_write_tar(struct crl_ckpt_store *s, const char *ckpt_id, int fd,
                       struct crl_ckpt_stats *st, struct crl_err *err)
{
    struct crl_ckpt_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof(*st));
    struct crl_ckpt_index *idx = NULL;
    struct ent **v = NULL;
    struct archive *a = NULL;
    struct archive_entry *ae = NULL;
    uint8_t *buf = NULL;
    int ret = -1;
    if (index_load(s, ckpt_id, &idx, err) < 0)
        return -1;
    if (idx_sorted(idx, &v, err) < 0)
        goto out;
    a = archive_write_new();
    ae = archive_entry_new();
    buf = malloc(CHUNK);
    if (!a || !ae || !buf) {
        crl_err_sys(err, ENOMEM, "tar");
        goto out;
    }
    /* pax, not pax_restricted: only pax keeps sub-second mtimes of entries
     * that need no other extension. */
    if (archive_write_set_format_pax(a) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open(a, &fd, NULL, tar_write, NULL) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "tar: %s", archive_error_string(a));
        goto out;
    }
    for (size_t i = 0; i < idx->count; i++)
        if (tar_entry(s, idx, v[i], a, ae, buf, st, err) < 0)
            goto out;
    if (archive_write_close(a) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "tar: %s", archive_error_string(a));
        goto out;
    }
    ret = 0;
out:
    if (ret < 0)
        crl_err_prefix(err, "restoring checkpoint %s", ckpt_id && *ckpt_id ? ckpt_id : "(none)");
    archive_entry_free(ae);
    archive_write_free(a);
    free(buf);
    free(v);
    crl_ckpt_index_free(idx);
    return ret;
}

/* ---- garbage collection ---- */

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
            if (e.code == CRL_E_NOT_FOUND || !blob_file_ok(s, crl_digest_hex(cur))) {
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
        blob_unhold(s, held, hex, NULL);
        return crl_err_sys(err, e, "stat %s/tmp/%s", s->dir, held);
    }
    if (is.st_mtim.tv_sec != was->st_mtim.tv_sec || is.st_mtim.tv_nsec != was->st_mtim.tv_nsec ||
        age_s(&is.st_mtim, now) < grace_s) {
        /* Back, and durably at once: the take whose put made it young may
         * have synced sha256/ while it was away. */
        st->young_kept++;
        if (blob_unhold(s, held, hex, err) < 0)
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
        if (!hex_bin(name, dg) || name[64] != 0) /* not a blob: not ours to remove */
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
        if (age_s(&bs.st_mtim, &now) < grace_s) {
            st->young_kept++;
            continue;
        }
        if ((ret = blob_remove(s, name, &bs, tag, &now, grace_s, st, err)) < 0)
            break;
    }
    closedir(d);
    if (ret == 0)
        ret = tmp_clean(s, grace_s, &st->tmp_removed, err);
    if (st->blobs_removed && fsync(s->blob_fd) < 0 && ret == 0)
        ret = crl_err_sys(err, errno, "fsync %s/sha256", s->dir);
    return ret;
}
