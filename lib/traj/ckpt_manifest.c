/* Manifests and the index: paths in manifest order, an index's entries
 * and its hash table, the JSON of a manifest both ways, merging a chain
 * into an index, and loading and checking a checkpoint. */
#include "ckpt_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../util/cleanup.h"
#include "../util/path.h"

/* ---- paths ---- */

/* Path order: bytewise, with '/' before every other byte, so a directory's
 * contents follow it at once and parents come before children. */
int crl__ckpt_cmp_path(const char *a, const char *b)
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

/* Relative, no empty, "." or ".." component, no whiteout name, no NUL:
 * the path-safety module's rules for a stored path. */
static bool path_valid(const char *p, size_t len)
{
    return crl_path_valid(p, len, CRL_PATH_RULES_STORED);
}

/* ---- entries and the index ---- */

static const char *const type_names[] = {
    [ENT_FILE] = "file", [ENT_DIR] = "dir", [ENT_SYMLINK] = "symlink", [ENT_WHITEOUT] = "whiteout"};

static uint64_t path_hash(const char *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
    return h;
}

void crl__ckpt_ent_free(struct ent *e)
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

struct ent *crl__ckpt_ent_new(const char *path, size_t len, enum ent_type type)
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

struct ent *crl__ckpt_ent_clone(const struct ent *o)
{
    struct ent *e = crl__ckpt_ent_new(o->path, o->plen, o->type);
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
        crl__ckpt_ent_free(e);
        return NULL;
    }
    for (size_t i = 0; i < o->n_xattrs; i++) {
        struct xattr *x = &e->xattrs[e->n_xattrs];
        x->name = strdup(o->xattrs[i].name);
        x->value = malloc(o->xattrs[i].len ? o->xattrs[i].len : 1);
        x->len = o->xattrs[i].len;
        e->n_xattrs++;
        if (!x->name || !x->value) {
            crl__ckpt_ent_free(e);
            return NULL;
        }
        memcpy(x->value, o->xattrs[i].value, x->len);
    }
    return e;
}

bool crl__ckpt_str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Same state, fast-path keys and marks a merge derives aside. */
bool crl__ckpt_ent_equal(const struct ent *a, const struct ent *b, bool ignore_link)
{
    if (a->type != b->type)
        return false;
    if (a->type == ENT_WHITEOUT)
        return true;
    if (a->uid != b->uid || a->gid != b->gid || a->mtime_s != b->mtime_s ||
        a->mtime_ns != b->mtime_ns)
        return false;
    if (a->type == ENT_SYMLINK)
        return crl__ckpt_str_eq(a->target, b->target);
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
           (ignore_link || crl__ckpt_str_eq(a->link, b->link));
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
        crl__ckpt_ent_free(idx->slots[i]);
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

struct ent *crl__ckpt_idx_find(const struct crl_ckpt_index *idx, const char *path, size_t len)
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
            crl__ckpt_ent_free(e);
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
        crl__ckpt_ent_free(idx->slots[i]);
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

struct ent *crl__ckpt_idx_parent(const struct crl_ckpt_index *idx, const struct ent *e)
{
    const char *slash = memrchr(e->path, '/', e->plen);
    return slash ? crl__ckpt_idx_find(idx, e->path, (size_t)(slash - e->path)) : NULL;
}

/* Apply one manifest entry to the merged state (see the header); takes e. */
int crl__ckpt_merge(struct crl_ckpt_index *idx, struct ent *e, const char *what,
                    struct crl_err *err)
{
    struct ent *parent = crl__ckpt_idx_parent(idx, e);
    if (parent && parent->type != ENT_DIR) {
        if (e->type == ENT_WHITEOUT) { /* already gone with its parent */
            crl__ckpt_ent_free(e);
            return 0;
        }
        crl_err_set(err, CRL_E_INTERNAL, "%s: %s lies below %s, a %s", what, e->path, parent->path,
                    type_names[parent->type]);
        crl__ckpt_ent_free(e);
        return -1;
    }
    struct ent *old = crl__ckpt_idx_find(idx, e->path, e->plen);
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
        crl__ckpt_ent_free(e);
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

json_t *crl__ckpt_ent_json(const struct ent *e, bool with_replaced)
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
    struct ent *e = crl__ckpt_ent_new(path, plen, (enum ent_type)t);
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
            ok = e->link && path_valid(e->link, len) && crl__ckpt_cmp_path(e->link, e->path) < 0;
        }
    }
    if (!ok) {
        crl_err_set(err, CRL_E_INTERNAL, "%s: entry %zu (%s) is malformed", what, i, e->path);
        crl__ckpt_ent_free(e);
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
            if (i > 0 && crl__ckpt_cmp_path(prev.data, e->path) >= 0) {
                crl_err_set(err, CRL_E_INTERNAL, "%s: entry %zu (%s) is out of order", what, i,
                            e->path);
                crl__ckpt_ent_free(e);
                goto out;
            }
            prev.len = 0;
            if (crl_buf_append(&prev, e->path, e->plen + 1) < 0) {
                crl__ckpt_ent_free(e);
                crl_err_sys(err, ENOMEM, "%s", what);
                goto out;
            }
            if (crl__ckpt_merge(idx, e, what, err) < 0)
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

int crl__ckpt_cmp_ent_path(const void *a, const void *b)
{
    return crl__ckpt_cmp_path((*(struct ent *const *)a)->path, (*(struct ent *const *)b)->path);
}

/* The entries in path order (the index keeps them). */
int crl__ckpt_idx_sorted(const struct crl_ckpt_index *idx, struct ent ***out, struct crl_err *err)
{
    struct ent **v = malloc((idx->count + 1) * sizeof(*v));
    if (!v)
        return crl_err_sys(err, ENOMEM, "sorting %zu entries", idx->count);
    size_t n = 0;
    for (size_t i = 0; i < idx->cap; i++)
        if (idx->slots[i])
            v[n++] = idx->slots[i];
    qsort(v, n, sizeof(*v), crl__ckpt_cmp_ent_path);
    *out = v;
    return 0;
}

struct crl_ckpt_index *crl__ckpt_idx_clone(const struct crl_ckpt_index *o)
{
    struct crl_ckpt_index *idx = calloc(1, sizeof(*idx));
    if (!idx || !(idx->slots = calloc(o->cap, sizeof(*idx->slots)))) {
        free(idx);
        return NULL;
    }
    idx->cap = o->cap;
    for (size_t i = 0; i < o->cap; i++) {
        if (o->slots[i] && !(idx->slots[i] = crl__ckpt_ent_clone(o->slots[i]))) {
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

int crl__ckpt_index_load(struct crl_ckpt_store *s, const char *ckpt_id, struct crl_ckpt_index **out,
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
    return crl__ckpt_index_load(s, ckpt_id, out, err);
}

int crl_ckpt_check(struct crl_ckpt_store *s, const char *ckpt_id, struct crl_err *err)
{
    struct crl_ckpt_index *idx;
    if (crl__ckpt_index_load(s, ckpt_id, &idx, err) < 0)
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
