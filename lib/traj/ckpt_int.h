/* Inside the checkpoint store (ckpt.h): what its five files share, and no
 * other file includes.  Each file is one idea:
 *
 *   ckpt_blob.c      the store's directory; blobs written through tmp/
 *                    (batched during a take) and read back verified
 *   ckpt_manifest.c  paths, entries and the index; a manifest's JSON;
 *                    merging a chain; loading and checking a checkpoint
 *   ckpt_take.c      taking a checkpoint: the walk of a layer
 *   ckpt_tar.c       restoring: the merged state as a tar stream
 *   ckpt_gc.c        garbage collection: marks and the sweep
 *
 * A function one of them offers the others is named crl__ckpt_<name>: the
 * double underscore says "internal to the store", as libuv's uv__ does, so
 * these stay apart from ckpt.h's public crl_ckpt_* (and index_load, behind
 * the public crl_ckpt_index_load, keeps a name of its own).  Its contract
 * comment stays with its definition.  The formats and the rules (merging,
 * durability, what a sweep may remove) are in ckpt.h. */
#ifndef CRL_TRAJ_CKPT_INT_H
#define CRL_TRAJ_CKPT_INT_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <zstd.h>

#include "../util/sha256.h"
#include "ckpt.h"

#define EMPTY_ID "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define INLINE_MAX ((size_t)1 << 20) /* files up to this are read once, into memory */
#define CHUNK ((size_t)128 << 10)
#define DENTS_BUF ((size_t)32 << 10)
#define XATTR_LIST_MAX_BYTES 65536
#define BATCH_MAX 128 /* blobs written and not yet synced, each holding its fd */

/* "<64 hex>.<16 hex>.gc": a blob a sweep holds in tmp/ (see blob_remove). */
#define HELD_SUFFIX ".gc"
#define HELD_NAME_LEN (64 + 1 + 16 + sizeof(HELD_SUFFIX) - 1)

#define DIGEST_BYTES 32

/* ---- ckpt_blob.c: the store and its blobs ---- */

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
     * synced or named, to be made durable together (crl__ckpt_batch_flush). */
    bool batching;
    struct pending_blob batch[BATCH_MAX];
    size_t n_batch;
    /* A take's buffers, kept between takes: getdents64 (DENTS_BUF),
     * flistxattr (XATTR_LIST_MAX_BYTES), file contents (INLINE_MAX + 1). */
    uint8_t *walk_buf;
};

bool crl__ckpt_hex_bin(const char *hex, uint8_t out[DIGEST_BYTES]);
double crl__ckpt_age_s(const struct timespec *t, const struct timespec *now);
bool crl__ckpt_blob_file_ok(struct crl_ckpt_store *s, const char *hex);
int crl__ckpt_blob_unhold(struct crl_ckpt_store *s, const char *held, const char *hex,
                          struct crl_err *err);
int crl__ckpt_tmp_clean(struct crl_ckpt_store *s, double max_age_s, uint64_t *removed,
                        struct crl_err *err);

/* Writing, as a take does: a blob goes to tmp/ (crl__ckpt_tmp_create),
 * compressed (crl__ckpt_zwrite), then is committed or queued
 * (crl__ckpt_blob_finish) and flushed with the batch. */
int crl__ckpt_blob_refresh(struct crl_ckpt_store *s, const char *id, struct crl_err *err);
int crl__ckpt_tmp_create(struct crl_ckpt_store *s, char name[48], struct crl_err *err);
void crl__ckpt_batch_abort(struct crl_ckpt_store *s);
int crl__ckpt_batch_flush(struct crl_ckpt_store *s, struct crl_ckpt_stats *st, struct crl_err *err);
bool crl__ckpt_batch_has(const struct crl_ckpt_store *s, const char *id);
int crl__ckpt_blob_finish(struct crl_ckpt_store *s, const char *tmp, int fd, const char *id,
                          uint64_t bytes, struct crl_ckpt_stats *st, struct crl_err *err);
int crl__ckpt_zwrite(struct crl_ckpt_store *s, int fd, const void *src, size_t len, bool end,
                     uint64_t *out_bytes, const char *tmp, struct crl_err *err);
int crl__ckpt_put_hashed(struct crl_ckpt_store *s, const void *data, size_t len, const char *id,
                         struct crl_ckpt_stats *st, struct crl_err *err);

/* Reading a blob as a stream, verified against its id at the end. */
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

int crl__ckpt_blob_rd_open(struct crl_ckpt_store *s, const char *id, struct blob_rd *r,
                           struct crl_err *err);
ssize_t crl__ckpt_blob_rd_read(struct blob_rd *r, void *buf, size_t cap, struct crl_err *err);
void crl__ckpt_blob_rd_close(struct blob_rd *r);

/* ---- ckpt_manifest.c: paths, entries, the index, manifests ---- */

enum ent_type { ENT_FILE = 1, ENT_DIR, ENT_SYMLINK, ENT_WHITEOUT };

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

int crl__ckpt_cmp_path(const char *a, const char *b);

struct ent *crl__ckpt_ent_new(const char *path, size_t len, enum ent_type type);
struct ent *crl__ckpt_ent_clone(const struct ent *o);
void crl__ckpt_ent_free(struct ent *e);
bool crl__ckpt_str_eq(const char *a, const char *b);
bool crl__ckpt_ent_equal(const struct ent *a, const struct ent *b, bool ignore_link);

struct ent *crl__ckpt_idx_find(const struct crl_ckpt_index *idx, const char *path, size_t len);
struct ent *crl__ckpt_idx_parent(const struct crl_ckpt_index *idx, const struct ent *e);
int crl__ckpt_merge(struct crl_ckpt_index *idx, struct ent *e, const char *what,
                    struct crl_err *err);
int crl__ckpt_cmp_ent_path(const void *a, const void *b);
int crl__ckpt_idx_sorted(const struct crl_ckpt_index *idx, struct ent ***out, struct crl_err *err);
struct crl_ckpt_index *crl__ckpt_idx_clone(const struct crl_ckpt_index *o);

json_t *crl__ckpt_ent_json(const struct ent *e, bool with_replaced);
int crl__ckpt_index_load(struct crl_ckpt_store *s, const char *ckpt_id, struct crl_ckpt_index **out,
                         struct crl_err *err);

#endif
