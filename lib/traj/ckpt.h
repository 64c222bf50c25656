/* The checkpoint store: what a sandbox's writable layer held after each step
 * of a trajectory, incremental, content-addressed, zstd-compressed and
 * deduplicated, in a directory another host can read over a shared
 * filesystem (nothing in it names a host, an inode, a pid or an fd).
 *
 * On disk, under one directory (e.g. <state>/trajectories/blobs):
 *
 *   sha256/<hex>   a blob: one zstd frame (`zstd -d` reads it) whose
 *                  uncompressed bytes hash to sha256:<hex>.  File contents
 *                  and manifests are blobs; the same bytes are stored once.
 *                  The empty blob is never written: its id is always there.
 *   tmp/<rand>     a blob being written.  It is made durable, then renamed
 *                  into sha256/ (never over an existing blob), so nothing
 *                  half-written has a final name; leftovers of a crashed
 *                  writer (on any host) are removed by the next open once
 *                  an hour old.
 *   tmp/<hex>.<rand>.gc  a blob a sweep is removing (below); one left by a
 *                  sweep that died is put back by the next open or sweep.
 *
 * A checkpoint is a manifest blob; its id is the checkpoint's id.  It is
 * canonical JSON (sorted keys, compact, entries in path order), so the same
 * state over the same parent always gives the same id:
 *
 *   {"depth":N,"entries":[...],"parent":"sha256:..."|null,"v":1}
 *
 * `depth` counts the manifests of the chain, this one included.  Each entry
 * is a path relative to the layer's root (never the root itself):
 *
 *   {"path":P, "type":"file", "mode":M, "uid":U, "gid":G, "mtime_s":S,
 *    "mtime_ns":NS, "size":Z, "blob":ID, "xattrs":[...], "link":L}
 *   {"path":P, "type":"dir", ... "xattrs":[...], "opaque":true, "replaces":true}
 *   {"path":P, "type":"symlink", "uid":U, "gid":G, "mtime_s":S, "mtime_ns":NS, "target":T}
 *   {"path":P, "type":"whiteout"}     P was removed (an image below may have it)
 *
 * mode is the permission bits (07777); uid and gid are the sandbox's ids
 * (host id - shift; a host id below the shift, which the sandbox sees as
 * unmapped, is stored as 65534); xattrs are {"name":N,"value":base64} in
 * name order, user.* only (user.overlay.* and every other namespace are
 * dropped: security.capability v3 carries a host uid).  A path, target,
 * link or xattr name that is not UTF-8 is stored base64 as "path_b64",
 * "target_b64", "link_b64", "name_b64".  Optional fields are left out when
 * empty or false.
 *
 * A manifest holds what changed since its parent: upserts and whiteouts.
 * Merging a chain (for a restore, or to rebuild an index) applies manifests
 * oldest first, each entry in path order:
 *   - a whiteout deletes the path and everything below it and stays as a
 *     whiteout (ignored below a path that is already removed);
 *   - a file or symlink replaces what is at its path and everything below;
 *   - a dir that is opaque, where the merged state had no opaque dir, drops
 *     everything the older manifests had below it (its manifest lists all of
 *     its contents); a dir that takes the place of anything but a dir
 *     "replaces" what an image had there, and keeps that mark while it stays
 *     a dir: both are restored as opaque.
 * When a chain would get deeper than CRL_CKPT_MAX_CHAIN manifests, the
 * checkpoint is written flattened instead (the whole merged state, parent
 * null, depth 1), so a restore never reads more than that many manifests.
 *
 * Hard links: every path of a file is a file entry with the content's blob
 * (so the content is stored once); a path whose inode has other paths in
 * the same layer also names the first of them in path order as "link", and
 * a restore writes it as a tar hard link when that path is restored as the
 * same content, else as a copy.
 *
 * What a layer holds: regular files, directories, symlinks, and (OVERLAY
 * format only) whiteouts, 0/0 character devices.  Left out: fifos, sockets
 * and device nodes (a sandbox gets its own /dev); and, with a warning,
 * anything on another filesystem (a mount below the layer) and names
 * beginning with ".wh." (reserved for whiteouts in the restore format).
 * The root directory's own metadata is not kept.  A dir is opaque when
 * (OVERLAY only) its user.overlay.opaque is "y"; trusted.overlay.* is
 * ignored, and so are overlayfs redirects and metacopy, which a userxattr
 * overlay does not use.  A tree deeper than CRL_CKPT_MAX_DEPTH levels is
 * refused (CRL_E_TOO_LARGE).
 *
 * Incremental cost.  An index remembers, for each path, a fast-path key
 * (inode, ctime, size): a path whose key is unchanged is not read again;
 * every metadata or content change moves ctime.  A key is only trusted once
 * its ctime is older than the start of the checkpoint that recorded it (a
 * change within the same clock tick keeps ctime: the racy-git problem), so
 * a file written just before a checkpoint is hashed again at the next one.
 * Entries rebuilt by crl_ckpt_index_load() have no key: their files are
 * hashed and compared by content and metadata.
 *
 * Garbage collection.  Blobs are removed by a sweep only: the trajectory
 * layer marks what it keeps (every checkpoint a trajectory or a live
 * sandbox refers to, with its chain and contents, and every other blob it
 * refers to, e.g. a response body), then sweeps the rest, but for young
 * blobs: those whose file's mtime is within a grace period.  Marking and
 * sweeping may run while other handles, here or on other hosts, take
 * checkpoints and put blobs.  What keeps a sweep from removing a blob that a
 * reference made after the marking began is about to name:
 *   - a blob written since then is young: its mtime is when it was written;
 *   - a put that finds its blob there already (crl_blob_put(), and a take
 *     storing a content or manifest the store has) makes it young again:
 *     it sets the blob's mtime to now first, then checks that it is there.
 *     A sweep takes an old unmarked blob away from its name first (a
 *     rename into tmp/), then looks at its mtime again, and gives it its
 *     name back if the mtime moved.  So a refresh lands either before the
 *     rename, and the sweep sees it, or after, and the put finds no blob
 *     and writes it anew: no sweep removes a blob a put has returned for.
 *     (A blob put back is fsync'd into sha256/ at once, as the put's take
 *     may have synced the directory while it was away.)
 *   - what a take keeps from its index without a put (unchanged files, the
 *     parent chain) is not refreshed: it is named by the take's parent,
 *     which must be marked; a sandbox's current checkpoint is a root.
 * So the grace must cover the longest a reference can go unseen by the
 * marking: a take's run (its first new blob is written at its start), the
 * time until its id is recorded where the marking finds it, and the clock
 * skew between hosts (an mtime comes from the clock of the host, or the
 * file server, that set it).  A new reference to an old checkpoint made
 * without a put (a restore or fork from one that was not marked) is for
 * the caller to exclude while a sweep runs.  A sweep's grace of 0 is for a
 * store nothing else writes to.
 *
 * Errors are struct crl_err; each names the path or blob concerned.  A
 * store handle is for one thread at a time; any number of handles, in any
 * number of processes or hosts, may share a directory. */
#ifndef CRL_TRAJ_CKPT_H
#define CRL_TRAJ_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/backend.h"
#include "../util/buf.h"
#include "../util/err.h"

#define CRL_CKPT_ID_MAX 72 /* "sha256:" + 64 hex + NUL */
#define CRL_CKPT_MAX_CHAIN 32
#define CRL_CKPT_MAX_DEPTH 256                  /* directory levels in a layer */
#define CRL_CKPT_MANIFEST_MAX ((size_t)1 << 29) /* bytes of one manifest's JSON */

struct crl_ckpt_store;

/* Open the store in `dir`, creating it (mode 0700) if missing, and remove
 * tmp/ files older than an hour. */
int crl_ckpt_store_open(const char *dir, struct crl_ckpt_store **out, struct crl_err *err);
/* NULL is fine.  Does not sync. */
void crl_ckpt_store_close(struct crl_ckpt_store *s);
const char *crl_ckpt_store_dir(const struct crl_ckpt_store *s);

/* Store `len` bytes as a blob and give its id ("sha256:<hex>" of the bytes).
 * Idempotent: an existing blob is not rewritten, but made young (its mtime
 * set to now: see garbage collection above).  The blob's file is
 * fdatasync'd before it gets its name; it is durable once
 * crl_ckpt_store_sync() has returned 0 after the put. */
int crl_blob_put(struct crl_ckpt_store *s, const void *data, size_t len, char id[CRL_CKPT_ID_MAX],
                 struct crl_err *err);

/* Append blob `id`'s bytes to *out (the caller initialises and frees it),
 * verifying them against the id.  CRL_E_INVALID for a malformed id,
 * CRL_E_NOT_FOUND for a missing blob, CRL_E_TOO_LARGE past `max` bytes,
 * CRL_E_INTERNAL naming the file for a corrupt one. */
int crl_blob_get(struct crl_ckpt_store *s, const char *id, struct crl_buf *out, size_t max,
                 struct crl_err *err);

/* Make every blob put through this handle durable: one fsync of sha256/,
 * none if nothing was put since the last sync. */
int crl_ckpt_store_sync(struct crl_ckpt_store *s, struct crl_err *err);

/* What a layer held at a checkpoint: for each path its type, mode, owner,
 * mtime, size, content blob, symlink target, user.* xattrs, opaque and link
 * marks, and its fast-path key; and which checkpoint that was. */
struct crl_ckpt_index;

/* An empty index: the state of no checkpoint.  NULL when out of memory. */
struct crl_ckpt_index *crl_ckpt_index_new(void);
void crl_ckpt_index_free(struct crl_ckpt_index *idx);
/* The checkpoint the index describes ("" for none), and its entry count
 * (whiteouts included). */
const char *crl_ckpt_index_id(const struct crl_ckpt_index *idx);
size_t crl_ckpt_index_count(const struct crl_ckpt_index *idx);

/* Rebuild the index of checkpoint `ckpt_id` (NULL or "": empty) by merging
 * its chain, e.g. after a restore, so that the next checkpoint is
 * incremental against it.  Its entries have no fast-path key. */
int crl_ckpt_index_load(struct crl_ckpt_store *s, const char *ckpt_id, struct crl_ckpt_index **out,
                        struct crl_err *err);

struct crl_ckpt_stats {
    uint64_t entries;      /* take: paths walked; write_tar: tar entries written */
    uint64_t changed;      /* upserts in the manifest */
    uint64_t removed;      /* whiteouts in the manifest */
    uint64_t bytes_read;   /* file contents read (take) or restored (write_tar) */
    uint64_t bytes_stored; /* compressed bytes of new blobs, the manifest's too */
    uint64_t blobs_new;    /* blobs written, the manifest too */
};

/* Take a checkpoint of the layer `v` against `idx`, the state of checkpoint
 * `parent` (NULL or "" with an empty index for the first one; any other
 * pairing is CRL_E_INVALID).  Walks v->dir_fd (never following a symlink,
 * never leaving its filesystem), stores new contents as blobs and a
 * manifest of what changed, and gives its id; when nothing changed, nothing
 * is written and *id is parent ("" for none).  Durable on return: new
 * blobs are written first and made durable together before they get their
 * names (each fdatasync'd; 8 or more by one syncfs(2) of the store's
 * filesystem instead, as each fdatasync costs a device cache flush), then
 * one fsync of sha256/.  On success idx describes the new checkpoint; on
 * failure it is as it was (but should memory run out after the checkpoint
 * is written, it is left unusable, and later takes fail with CRL_E_INVALID
 * until it is loaded again).  *st (may be NULL) is filled.  A file that
 * keeps changing while it is read fails the take with CRL_E_CONFLICT. */
int crl_ckpt_take(struct crl_ckpt_store *s, struct crl_ckpt_index *idx, const char *parent,
                  const struct crl_snapshot_view *v, char id[CRL_CKPT_ID_MAX],
                  struct crl_ckpt_stats *st, struct crl_err *err);

/* Write the merged state of the chain ending at `ckpt_id` (NULL or "":
 * empty) to fd as a tar stream in the restore format of
 * struct crl_restore_req (lib/core/backend.h): pax (sub-second mtimes need
 * it; pax_restricted drops them), numeric owners only, paths relative
 * without "./", parents before children (path components sorted bytewise),
 * each path once; `D/.wh.NAME` for a whiteout (none below an opaque dir),
 * `D/.wh..wh..opq` right after an opaque dir's own entry; user.* xattrs
 * as SCHILY.xattr; contents streamed from their blobs, each verified.
 * Blocking writes; on failure fd holds a partial stream. */
int crl_ckpt_write_tar(struct crl_ckpt_store *s, const char *ckpt_id, int fd,
                       struct crl_ckpt_stats *st, struct crl_err *err);

/* 0 if checkpoint `ckpt_id` can be restored: every manifest of its chain is
 * there and intact, and every content blob it names exists (contents are not
 * read).  CRL_E_NOT_FOUND naming the first missing blob, CRL_E_INTERNAL for
 * a corrupt one. */
int crl_ckpt_check(struct crl_ckpt_store *s, const char *ckpt_id, struct crl_err *err);

/* ---- garbage collection: mark, then sweep ---- */

/* A set of blob ids, held as 32-byte digests in one hash table (about 64
 * MiB per million).  NULL when out of memory. */
struct crl_ckpt_marks;
struct crl_ckpt_marks *crl_ckpt_marks_new(void);
/* NULL is fine. */
void crl_ckpt_marks_free(struct crl_ckpt_marks *m);
/* How many blob ids are marked, and whether `id` is one of them. */
size_t crl_ckpt_marks_count(const struct crl_ckpt_marks *m);
bool crl_ckpt_marked(const struct crl_ckpt_marks *m, const char *id);

/* Mark one blob id (e.g. a response or body blob a log references).  NULL
 * and "" are no-ops; a malformed id is CRL_E_INVALID.  Nothing is read. */
int crl_ckpt_mark_blob(struct crl_ckpt_marks *m, const char *id, struct crl_err *err);

/* Mark checkpoint `id` (NULL or "": a no-op): its manifest, every manifest
 * of its chain, and every content blob they name.  Each manifest is read
 * once per set: the walk stops at one a previous call marked (so marking
 * every checkpoint of a trajectory reads its chains once), and each content
 * blob is looked for once, when first marked.  A missing manifest (which
 * ends its chain) or content blob is not an error: it is counted in
 * *missing (may be NULL), which is not reset.  CRL_E_INVALID for a
 * malformed id; CRL_E_INTERNAL naming the file for a corrupt manifest; on
 * failure the set holds what was marked so far, and sweeping with it would
 * remove what the rest of the chain holds. */
int crl_ckpt_mark_checkpoint(struct crl_ckpt_store *s, struct crl_ckpt_marks *m, const char *id,
                             uint64_t *missing, struct crl_err *err);

struct crl_ckpt_gc_stats {
    uint64_t blobs_kept;    /* marked */
    uint64_t blobs_removed; /* unmarked and old */
    uint64_t bytes_removed; /* their files' (compressed) sizes */
    uint64_t young_kept;    /* unmarked, but within the grace */
    uint64_t tmp_removed;   /* files of tmp/ older than the grace */
};

/* Remove every blob of sha256/ that is not marked and is at least grace_s
 * seconds old by its mtime (see garbage collection above for what the
 * grace must cover; a negative or NaN grace is CRL_E_INVALID), and every
 * file of tmp/ at least that old; names in sha256/ that are no blob's are
 * left alone.  Removals are made durable by one fsync of sha256/ at the
 * end (a blob put back, rarely, by one at once).  *st (may be NULL) is
 * filled, also on failure with what was done. */
int crl_ckpt_sweep(struct crl_ckpt_store *s, const struct crl_ckpt_marks *m, double grace_s,
                   struct crl_ckpt_gc_stats *st, struct crl_err *err);

#endif
