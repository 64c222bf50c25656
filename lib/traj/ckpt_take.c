/* Taking a checkpoint: the walk of a layer against the index of its
 * parent, storing what changed and a manifest of it. */
#include "ckpt_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "../util/path.h"

#define OVERFLOW_ID 65534u /* what a user namespace shows for an unmapped id */
#define RETRIES 3

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
            crl__ckpt_ent_free(e);
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
    struct ent *e = crl__ckpt_ent_new(w->path.data, w->path.len, type);
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
    struct ent *e = crl__ckpt_ent_clone(old);
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
            return crl__ckpt_put_hashed(w->s, w->buf, (size_t)n, e->blob, w->st, w->err) < 0 ? -1
                                                                                             : 0;
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
        crl__ckpt_batch_has(w->s, e->blob))
        return 0;
    int there = crl__ckpt_blob_refresh(w->s, e->blob, w->err);
    if (there != 0) {
        w->s->dirty = true;
        return there > 0 ? 0 : crl_err_prefix(w->err, "%s", e->path);
    }
    char tmp[48];
    int out = crl__ckpt_tmp_create(w->s, tmp, w->err);
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
        ret = crl__ckpt_zwrite(w->s, out, w->buf, (size_t)n, false, &stored, tmp, w->err);
    }
    if (ret == 0 && n < 0)
        ret = crl_err_sys(w->err, errno, "read %s", e->path);
    char again[CRL_CKPT_ID_MAX];
    crl_sha256_final(&h, again);
    w->st->bytes_read += off;
    if (ret == 0)
        ret = crl__ckpt_zwrite(w->s, out, NULL, 0, true, &stored, tmp, w->err);
    if (ret == 0 && (strcmp(again, e->blob) != 0 || off != e->size))
        ret = 1; /* it changed between the two reads: look again */
    if (ret != 0) {
        unlinkat(w->s->tmp_fd, tmp, 0);
        close(out);
        return ret;
    }
    return crl__ckpt_blob_finish(w->s, tmp, out, e->blob, stored, w->st, w->err) < 0 ? -1 : 0;
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
    struct ent *old = crl__ckpt_idx_find(w->idx, w->path.data, w->path.len);
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
            crl__ckpt_ent_free(now);
            return r;
        }
        if (old && crl__ckpt_ent_equal(old, now, st.st_nlink > 1)) {
            key_copy(old, now);
            if (!force) {
                crl__ckpt_ent_free(now);
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
    struct ent *old = crl__ckpt_idx_find(w->idx, w->path.data, w->path.len);
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
            crl__ckpt_ent_free(now);
            return oom(w);
        }
        now->mode = 0;
        if (old && crl__ckpt_ent_equal(old, now, false)) {
            key_copy(old, now);
            if (!force) {
                crl__ckpt_ent_free(now);
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
    struct ent *old = crl__ckpt_idx_find(w->idx, w->path.data, w->path.len);
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
    struct ent *old = crl__ckpt_idx_find(w->idx, w->path.data, w->path.len);
    struct ent *now = NULL;
    bool reset = false;
    if (old && old->type == ENT_DIR && key_match(old, &st)) {
        if (force && !(now = walk_copy(w, old)))
            return oom(w);
    } else {
        if (!(now = walk_ent(w, ENT_DIR, &st)))
            return oom(w);
        if (read_xattrs(w, fd, now) < 0) {
            crl__ckpt_ent_free(now);
            return -1;
        }
        if (old && crl__ckpt_ent_equal(old, now, false)) {
            key_copy(old, now);
            if (!force) {
                crl__ckpt_ent_free(now);
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
    if (crl_path_is_whiteout(name, strlen(name))) {
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
    return crl__ckpt_cmp_path(x->path, y->path);
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
            if (!e && crl__ckpt_str_eq(h->old->link, want))
                continue;
            if (!e) {
                if (!(e = walk_copy(w, h->old)) || push(w, e) < 0)
                    return e ? -1 : oom(w);
                h->old->now = e;
            }
            if (crl__ckpt_str_eq(e->link, want))
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
        struct ent *p = crl__ckpt_idx_parent(idx, e);
        if (p && (p->seen != w->gen || p->reset == w->gen ||
                  (p->now ? p->now->type : p->type) != ENT_DIR))
            continue;
        struct ent *wh = crl__ckpt_ent_new(e->path, e->plen, ENT_WHITEOUT);
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
    int r = crl__ckpt_put_hashed(s, text, len, id, st, err);
    free(text);
    return r < 0 ? crl_err_prefix(err, "storing manifest %s", id) : 0;
}

static void walk_free(struct walk *w)
{
    for (size_t i = 0; i < w->n_pend; i++)
        crl__ckpt_ent_free(w->pend[i]);
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
    qsort(w.pend, w.n_pend, sizeof(*w.pend), crl__ckpt_cmp_ent_path);
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
            if (json_array_append_new(entries, crl__ckpt_ent_json(w.pend[i], false)) < 0) {
                json_decref(entries);
                oom(&w);
                goto out;
            }
    } else {
        /* Flatten: the whole new state, parent null. */
        depth = 1;
        if (!(flat = crl__ckpt_idx_clone(idx))) {
            json_decref(entries);
            oom(&w);
            goto out;
        }
        for (size_t i = 0; i < w.n_pend; i++) {
            struct ent *e = steal_pointer(&w.pend[i]);
            if (crl__ckpt_merge(flat, e, "checkpoint", err) < 0) {
                json_decref(entries);
                goto out;
            }
        }
        struct ent **all = NULL;
        if (crl__ckpt_idx_sorted(flat, &all, err) < 0) {
            json_decref(entries);
            goto out;
        }
        for (size_t i = 0; i < flat->count; i++)
            if (json_array_append_new(entries, crl__ckpt_ent_json(all[i], true)) < 0) {
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
        crl__ckpt_batch_flush(s, st, err) < 0 || crl_ckpt_store_sync(s, err) < 0) {
        crl_err_prefix(err, "checkpoint");
        goto out;
    }
    if (flat) {
        idx_swap(idx, flat);
        idx->gen = flat->gen;
    } else {
        for (size_t i = 0; i < w.n_pend; i++) {
            struct ent *e = steal_pointer(&w.pend[i]);
            if (crl__ckpt_merge(idx, e, "checkpoint", err) < 0) {
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
    crl__ckpt_batch_abort(s); /* what a failure left unsynced (a success left nothing) */
    crl_ckpt_index_free(flat);
    walk_free(&w);
    return ret;
}
