#include "oci.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/path.h"
#include "../util/sha256.h"
#include "layer.h"

#define JSON_MAX (4u << 20) /* manifests, indexes and configs */

/* A file of the archive: spooled (tar) or in the layout directory. */
struct src_file {
    char *name;
    char *link; /* a symlink or hard link in the tar: the name it stands for */
    int spool;  /* index of its spool file, -1 for none */
    char digest[CRL_DIGEST_LEN + 1];
    uint64_t size;
};

struct src {
    int scratch; /* where spool files go */
    int layout;  /* a layout directory, or -1 */
    struct src_file *files;
    size_t n;
    uint64_t spooled;
    const struct crl_import_limits *lim;
};

static void src_free(struct src *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->files[i].name);
        free(s->files[i].link);
    }
    free(s->files);
    if (s->layout >= 0)
        close(s->layout);
}

static struct src_file *src_add(struct src *s, const char *name)
{
    struct src_file *v = realloc(s->files, (s->n + 1) * sizeof(*v));
    if (!v)
        return NULL;
    s->files = v;
    struct src_file *f = &v[s->n];
    memset(f, 0, sizeof(*f));
    f->spool = -1;
    if (!(f->name = strdup(name)))
        return NULL;
    s->n++;
    return f;
}

/* A name relative to the link's own directory, for docker's
 * "../<id>/layer.tar" symlinks. */
static int resolve_link(const char *from, const char *target, char *out, size_t cap)
{
    char joined[8192];
    if (target[0] == '/')
        return -1;
    const char *slash = strrchr(from, '/');
    int n = snprintf(joined, sizeof(joined), "%.*s%s%s", slash ? (int)(slash - from) : 0, from,
                     slash ? "/" : "", target);
    if (n < 0 || (size_t)n >= sizeof(joined))
        return -1;
    /* fold "x/../" */
    char *parts[256];
    size_t np = 0;
    char *save = NULL;
    for (char *tok = strtok_r(joined, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        if (strcmp(tok, ".") == 0)
            continue;
        if (strcmp(tok, "..") == 0) {
            if (!np)
                return -1;
            np--;
            continue;
        }
        if (np == 256)
            return -1;
        parts[np++] = tok;
    }
    size_t o = 0;
    for (size_t i = 0; i < np; i++) {
        int w = snprintf(out + o, cap - o, "%s%s", i ? "/" : "", parts[i]);
        if (w < 0 || (size_t)w >= cap - o)
            return -1;
        o += (size_t)w;
    }
    return 0;
}

static int spool_tar(struct src *s, int fd, struct crl_err *err)
{
    struct archive *a = archive_read_new();
    if (!a)
        return crl_err_sys(err, ENOMEM, "archive");
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    int ret = 0;
    if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
        ret = crl_err_set(err, CRL_E_INVALID, "not a tar archive: %s", archive_error_string(a));
        goto out;
    }
    struct archive_entry *e;
    char buf[1 << 16];
    for (;;) {
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            const char *m = archive_error_string(a);
            ret = crl_err_set(err, CRL_E_INVALID, "archive: %s", m ? m : "unreadable");
            goto out;
        }
        char name[4096];
        const char *raw = archive_entry_pathname(e);
        if (!raw || crl_layer_clean_path(raw, name, sizeof(name)) < 0) {
            ret = crl_err_set(err, CRL_E_INVALID, "archive: entry %s is absolute or has '..'",
                              raw ? raw : "(unnamed)");
            goto out;
        }
        mode_t type = archive_entry_filetype(e);
        const char *hl = archive_entry_hardlink(e);
        if (type == AE_IFDIR || !name[0])
            continue;
        if (s->n >= 100000) {
            ret = crl_err_set(err, CRL_E_TOO_LARGE, "archive: too many entries");
            goto out;
        }
        struct src_file *f = src_add(s, name);
        if (!f) {
            ret = crl_err_sys(err, ENOMEM, "archive");
            goto out;
        }
        if (hl || type == AE_IFLNK) {
            char t[4096];
            int bad =
                hl ? crl_layer_clean_path(hl, t, sizeof(t))
                   : resolve_link(name, archive_entry_symlink(e) ? archive_entry_symlink(e) : "/",
                                  t, sizeof(t));
            if (bad < 0 || !(f->link = strdup(t))) {
                ret = crl_err_set(err, CRL_E_INVALID, "archive: link %s points outside", name);
                goto out;
            }
            continue;
        }
        if (type != AE_IFREG)
            continue;
        char sp[32];
        f->spool = (int)(s->n - 1);
        snprintf(sp, sizeof(sp), "spool-%d", f->spool);
        cleanup_close int out = crl_openat(s->scratch, sp, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (out < 0) {
            ret = crl_err_sys(err, errno, "spooling %s", name);
            goto out;
        }
        struct crl_sha256 h;
        if (crl_sha256_init(&h) < 0) {
            ret = crl_err_sys(err, ENOMEM, "sha256");
            goto out;
        }
        la_ssize_t n;
        while ((n = archive_read_data(a, buf, sizeof(buf))) > 0) {
            s->spooled += (uint64_t)n;
            if (s->spooled > s->lim->max_total_bytes) {
                crl_sha256_free(&h);
                ret = crl_err_set(err, CRL_E_TOO_LARGE, "archive: more than %llu bytes",
                                  (unsigned long long)s->lim->max_total_bytes);
                goto out;
            }
            crl_sha256_update(&h, buf, (size_t)n);
            if (crl_write_full(out, buf, (size_t)n) < 0) {
                crl_sha256_free(&h);
                ret = crl_err_sys(err, errno, "spooling %s", name);
                goto out;
            }
            f->size += (uint64_t)n;
        }
        if (n < 0) {
            crl_sha256_free(&h);
            const char *m = archive_error_string(a);
            ret = crl_err_set(err, CRL_E_INVALID, "archive: %s: %s", name, m ? m : "truncated");
            goto out;
        }
        crl_sha256_final(&h, f->digest);
    }
out:
    archive_read_free(a);
    return ret;
}

static struct src_file *src_find(struct src *s, const char *name, int depth)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->files[i].name, name) == 0) {
            if (s->files[i].link) {
                if (depth > 8)
                    return NULL;
                return src_find(s, s->files[i].link, depth + 1);
            }
            return &s->files[i];
        }
    return NULL;
}

/* A file the image names in a layout directory: `path` comes from the
 * image's own JSON (a manifest.json's "Config", a digest's blob path), so
 * it may say "../x" or "/etc/x"; RESOLVE_BENEATH refuses any resolution
 * that leaves the layout.  The file itself must not be a symlink
 * (O_NOFOLLOW), but a directory symlinked within the layout is followed
 * and a mount below it crossed: the layout is the importing user's own
 * directory, and nothing in its format forbids either. */
static int open_beneath(int dir, const char *path)
{
    return crl_path_fd(crl_path_openat2(dir, path, O_RDONLY | O_NOFOLLOW, 0,
                                        RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS));
}

/* Open a file of the source; *f describes it (digest computed for layout
 * files on first use). */
static int src_open(struct src *s, const char *name, struct src_file **fout, struct crl_err *err)
{
    struct src_file *f = src_find(s, name, 0);
    if (s->layout >= 0 && !f) {
        int fd = open_beneath(s->layout, name);
        if (fd < 0) {
            if (errno == ENOENT)
                return crl_err_set(err, CRL_E_INVALID, "the image names %s, which is missing",
                                   name);
            return crl_err_sys(err, errno, "open %s", name);
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            return crl_err_set(err, CRL_E_INVALID, "%s is not a regular file", name);
        }
        if (!(f = src_add(s, name))) {
            close(fd);
            return crl_err_sys(err, ENOMEM, "%s", name);
        }
        struct crl_sha256 h;
        if (crl_sha256_init(&h) < 0) {
            close(fd);
            return crl_err_sys(err, ENOMEM, "sha256");
        }
        char buf[1 << 16];
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
            if (n > 0) {
                crl_sha256_update(&h, buf, (size_t)n);
                f->size += (uint64_t)n;
            }
        crl_sha256_final(&h, f->digest);
        if (n < 0) {
            close(fd);
            return crl_err_sys(err, errno, "read %s", name);
        }
        lseek(fd, 0, SEEK_SET);
        *fout = f;
        return fd;
    }
    if (!f || f->spool < 0)
        return crl_err_set(err, CRL_E_INVALID, "the image names %s, which is not in the archive",
                           name);
    char sp[32];
    snprintf(sp, sizeof(sp), "spool-%d", f->spool);
    int fd = crl_openat(s->scratch, sp, O_RDONLY, 0);
    if (fd < 0)
        return crl_err_sys(err, errno, "open spooled %s", name);
    *fout = f;
    return fd;
}

/* A JSON file of the source, optionally checked against a digest. */
static json_t *src_json(struct src *s, const char *name, const char *want, char **raw,
                        size_t *raw_len, struct crl_err *err)
{
    struct src_file *f;
    cleanup_close int fd = src_open(s, name, &f, err);
    if (fd < 0)
        return NULL;
    if (want && strcmp(f->digest, want) != 0) {
        crl_err_set(err, CRL_E_INVALID, "%s: digest mismatch: content is %s, expected %s", name,
                    f->digest, want);
        return NULL;
    }
    if (f->size > JSON_MAX) {
        crl_err_set(err, CRL_E_INVALID, "%s: %llu bytes is too large for a manifest or config",
                    name, (unsigned long long)f->size);
        return NULL;
    }
    char *buf = malloc(f->size + 1);
    if (!buf) {
        crl_err_sys(err, ENOMEM, "%s", name);
        return NULL;
    }
    ssize_t n = crl_read_full(fd, buf, f->size);
    if (n < 0 || (uint64_t)n != f->size) {
        free(buf);
        crl_err_sys(err, n < 0 ? errno : EIO, "read %s", name);
        return NULL;
    }
    buf[n] = 0;
    json_error_t je;
    json_t *j = json_loadb(buf, (size_t)n, 0, &je);
    if (!j) {
        crl_err_set(err, CRL_E_INVALID, "%s is not JSON: %s (line %d)", name, je.text, je.line);
        free(buf);
        return NULL;
    }
    if (raw) {
        *raw = buf;
        *raw_len = (size_t)n;
    } else {
        free(buf);
    }
    return j;
}

static int blob_name(const char *digest, char *out, size_t cap, struct crl_err *err)
{
    if (!crl_digest_valid(digest))
        return crl_err_set(err, CRL_E_INVALID, "%s is not a sha256 digest",
                           digest ? digest : "(missing digest)");
    snprintf(out, cap, "blobs/sha256/%s", crl_digest_hex(digest));
    return 0;
}

/* A descriptor's blob as JSON, checked against its digest and size. */
static json_t *desc_json(struct src *s, json_t *desc, const char *what, char **raw, size_t *len,
                         struct crl_err *err)
{
    const char *digest = json_string_value(json_object_get(desc, "digest"));
    char name[128];
    if (blob_name(digest, name, sizeof(name), err) < 0) {
        crl_err_prefix(err, "%s", what);
        return NULL;
    }
    json_t *j = src_json(s, name, digest, raw, len, err);
    return j;
}

static const char *str_at(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static bool is_index(const char *mt)
{
    return mt && (strcmp(mt, "application/vnd.oci.image.index.v1+json") == 0 ||
                  strcmp(mt, "application/vnd.docker.distribution.manifest.list.v2+json") == 0);
}

/* ---- which image: by reference name, then by platform ---- */

/* One image an index (a descriptor) or manifest.json (an entry) offers. */
struct offer {
    json_t *entry;               /* borrowed from the index or manifest.json */
    json_t *names;               /* the names it may be picked by (strings) */
    char id[CRL_DIGEST_LEN + 1]; /* the digest it may be picked by too, or "" */
    const char *os, *arch;       /* its platform; NULL where it names none */
};

enum list_what { LIST_NAMES, LIST_PLATFORMS, LIST_IDS };

static void offers_free(struct offer *o, size_t n)
{
    for (size_t i = 0; o && i < n; i++)
        json_decref(o[i].names);
    free(o);
}

/* What messages call it: its first name, else its digest. */
static const char *offer_label(const struct offer *o)
{
    size_t i;
    json_t *v;
    json_array_foreach(o->names, i, v)
    {
        if (json_is_string(v))
            return json_string_value(v);
    }
    return o->id[0] ? o->id : "(unnamed)";
}

/* One that names no platform is a candidate too: most layouts (umoci's,
 * skopeo's) and every manifest.json say none. */
static bool offer_for_host(const struct offer *o)
{
    return (!o->os || strcmp(o->os, "linux") == 0) &&
           (!o->arch || strcmp(o->arch, crl_store_arch()) == 0);
}

/* A reference as Docker compares them: docker.io/ for a name with no
 * registry, library/ for one of Docker Hub's own, :latest with no tag; so
 * "app:1" picks the "docker.io/library/app:1" that skopeo and docker 25
 * write.  False for a reference by digest. */
static bool ref_normal(const char *ref, char *out, size_t cap)
{
    if (strchr(ref, '@'))
        return false;
    const char *slash = strchr(ref, '/');
    size_t first = slash ? (size_t)(slash - ref) : 0;
    bool registry = slash && (memchr(ref, '.', first) || memchr(ref, ':', first) ||
                              (first == 9 && strncmp(ref, "localhost", 9) == 0));
    const char *last = strrchr(ref, '/'), *colon = strrchr(ref, ':');
    bool tagged = colon && (!last || colon > last);
    int n = snprintf(out, cap, "%s%s%s%s", registry ? "" : "docker.io/",
                     registry || slash ? "" : "library/", ref, tagged ? "" : ":latest");
    return n > 0 && (size_t)n < cap;
}

/* What of `o` `ref` stands for: one of its names (compared as they are, or
 * as Docker normalizes both when `normal`), or its digest; NULL if none. */
static const char *offer_match(const struct offer *o, const char *ref, bool normal)
{
    char want[2 * CRL_IMAGE_NAME_MAX], have[2 * CRL_IMAGE_NAME_MAX];
    if (normal && !ref_normal(ref, want, sizeof(want)))
        return NULL;
    size_t i;
    json_t *v;
    json_array_foreach(o->names, i, v)
    {
        const char *s = json_string_value(v);
        if (s && (normal ? ref_normal(s, have, sizeof(have)) && strcmp(have, want) == 0
                         : strcmp(s, ref) == 0))
            return s;
    }
    return !normal && o->id[0] && strcmp(o->id, ref) == 0 ? o->id : NULL;
}

/* "a, b and 3 more" of the offers `sel` marks (every one when NULL), in
 * some 200 bytes whatever a hostile index lists. */
static const char *offer_list(const struct offer *o, size_t n, const bool *sel, enum list_what w,
                              char *buf, size_t cap)
{
    size_t len = 0, shown = 0, total = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (sel && !sel[i])
            continue;
        total++;
        char one[CRL_DIGEST_LEN + 8];
        if (w == LIST_PLATFORMS)
            snprintf(one, sizeof(one), "%.30s/%.30s", o[i].os ? o[i].os : "?",
                     o[i].arch ? o[i].arch : "?");
        else
            snprintf(one, sizeof(one), "%s",
                     w == LIST_IDS && o[i].id[0] ? o[i].id : offer_label(&o[i]));
        size_t need = strlen(one) + (shown ? 2 : 0);
        if (len + need > 200 || len + need >= cap)
            continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", shown ? ", " : "", one);
        shown++;
    }
    if (shown < total)
        snprintf(buf + len, cap - len, "%s%zu more", shown ? " and " : "", total - shown);
    return buf;
}

/* Of the `n` images `where` holds, the one to import (*pick): those `ref`
 * names (all of them when it is NULL), and of those the ones for this host
 * or that name no platform (the config of the one chosen is checked once
 * read).  Several entries of one digest are one image.  *as: the name `ref`
 * matched, NULL for a digest or no ref.  In a `nested` index (a
 * multi-platform image's) the platform alone decides. */
static int choose(const struct offer *o, size_t n, const char *ref, const char *where, bool nested,
                  size_t *pick, const char **as, struct crl_err *err)
{
    const char *arch = crl_store_arch();
    char list[256];
    cleanup_free bool *sel = calloc(n ? n : 1, sizeof(*sel));
    if (!sel)
        return crl_err_sys(err, ENOMEM, "%s", where);
    size_t n_sel = 0;
    bool normal = false;
    for (int pass = 0; ref && pass < 2 && !n_sel; pass++) {
        normal = pass == 1;
        for (size_t i = 0; i < n; i++)
            if (offer_match(&o[i], ref, normal)) {
                sel[i] = true;
                n_sel++;
            }
    }
    if (!ref)
        for (; n_sel < n; n_sel++)
            sel[n_sel] = true;
    if (!n_sel)
        return crl_err_set(err, CRL_E_INVALID, "%s holds no image named %s; it holds %s", where,
                           ref, offer_list(o, n, NULL, LIST_NAMES, list, sizeof(list)));
    size_t n_host = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (sel[i] && offer_for_host(&o[i]))
            n_host++;
    if (!n_host)
        return crl_err_set(err, CRL_E_INVALID, "%s holds no image%s%s for linux/%s (%s for %s)",
                           where, ref ? " named " : "", ref ? ref : "", arch,
                           n_sel == 1 ? "it is" : "they are",
                           offer_list(o, n, sel, LIST_PLATFORMS, list, sizeof(list)));
    for (size_t i = 0; i < n; i++) {
        sel[i] = sel[i] && offer_for_host(&o[i]);
        if (sel[i] && first == n)
            first = i;
    }
    bool one = n_host == 1 || o[first].id[0];
    for (size_t i = first + 1; one && n_host > 1 && i < n; i++)
        if (sel[i] && strcmp(o[i].id, o[first].id) != 0)
            one = false;
    if (one) {
        *pick = first;
        *as = ref ? offer_match(&o[first], ref, normal) : NULL;
        if (*as == o[first].id)
            *as = NULL;
        return 0;
    }
    if (nested)
        return crl_err_set(err, CRL_E_INVALID,
                           "%s lists %zu manifests for linux/%s (%s) and does not say which one "
                           "to import",
                           where, n_host, arch,
                           offer_list(o, n, sel, LIST_IDS, list, sizeof(list)));
    if (ref)
        return crl_err_set(err, CRL_E_INVALID,
                           "%s holds %zu images named %s for linux/%s: pick one by its digest (%s)",
                           where, n_host, ref, arch,
                           offer_list(o, n, sel, LIST_IDS, list, sizeof(list)));
    char some[64] = "";
    if (n_host < n)
        snprintf(some, sizeof(some), ", %zu of them for linux/%s", n_host, arch);
    return crl_err_set(err, CRL_E_INVALID,
                       "%s holds %zu images%s (%s): pick one with `corral image import PATH:REF` "
                       "or --ref REF (API: POST /v1/images?ref=REF)",
                       where, n, some, offer_list(o, n, sel, LIST_NAMES, list, sizeof(list)));
}

/* The images an OCI index lists: by their names (containerd's full one
 * first, then the ref.name annotation, often a tag only) and digest. */
static struct offer *index_offers(json_t *index, const char *what, size_t *n, struct crl_err *err)
{
    static const char *const keys[] = {"io.containerd.image.name",
                                       "org.opencontainers.image.ref.name"};
    json_t *ms = json_object_get(index, "manifests");
    size_t k = json_is_array(ms) ? json_array_size(ms) : 0;
    if (!k) {
        crl_err_set(err, CRL_E_INVALID, "%s lists no manifests", what);
        return NULL;
    }
    struct offer *o = calloc(k, sizeof(*o));
    if (!o) {
        crl_err_sys(err, ENOMEM, "%s", what);
        return NULL;
    }
    for (size_t i = 0; i < k; i++) {
        json_t *d = json_array_get(ms, i), *ann = json_object_get(d, "annotations");
        const char *digest = str_at(d, "digest");
        o[i].entry = d;
        if (!(o[i].names = json_array())) {
            offers_free(o, i);
            crl_err_sys(err, ENOMEM, "%s", what);
            return NULL;
        }
        for (size_t j = 0; j < CRL_ARRAY_SIZE(keys); j++)
            if (json_is_string(json_object_get(ann, keys[j])))
                json_array_append(o[i].names, json_object_get(ann, keys[j]));
        if (crl_digest_valid(digest))
            snprintf(o[i].id, sizeof(o[i].id), "%s", digest);
        o[i].os = str_at(json_object_get(d, "platform"), "os");
        o[i].arch = str_at(json_object_get(d, "platform"), "architecture");
    }
    *n = k;
    return o;
}

/* docker save names a config "<hex>.json" or "blobs/sha256/<hex>": its
 * digest, or "" when the name is not one. */
static void config_digest(const char *name, char out[CRL_DIGEST_LEN + 1])
{
    out[0] = 0;
    const char *b = name ? strrchr(name, '/') : NULL;
    b = b ? b + 1 : name;
    if (b && strlen(b) >= 64) {
        snprintf(out, CRL_DIGEST_LEN + 1, "sha256:%.64s", b);
        if (!crl_digest_valid(out))
            out[0] = 0;
    }
}

/* The images a docker save manifest.json lists, [{Config, RepoTags,
 * Layers}]: by their RepoTags and config digest (docker's image id). */
static struct offer *docker_offers(json_t *arr, size_t *n, struct crl_err *err)
{
    size_t k = json_is_array(arr) ? json_array_size(arr) : 0;
    if (!k) {
        crl_err_set(err, CRL_E_INVALID, "manifest.json lists no image");
        return NULL;
    }
    struct offer *o = calloc(k, sizeof(*o));
    if (!o) {
        crl_err_sys(err, ENOMEM, "manifest.json");
        return NULL;
    }
    for (size_t i = 0; i < k; i++) {
        json_t *m = json_array_get(arr, i), *tags = json_object_get(m, "RepoTags");
        o[i].entry = m;
        o[i].names = json_is_array(tags) ? json_incref(tags) : json_array();
        if (!o[i].names) {
            offers_free(o, i);
            crl_err_sys(err, ENOMEM, "manifest.json");
            return NULL;
        }
        config_digest(str_at(m, "Config"), o[i].id);
    }
    *n = k;
    return o;
}

/* Refuse an image a sandbox here could not run, by what its config says
 * (an index need not say: umoci's and skopeo's do not). */
static int check_config_platform(const struct crl_oci_image *out, struct crl_err *err)
{
    const char *arch = crl_store_arch();
    json_t *c = json_loadb(out->config, out->config_len, 0, NULL);
    const char *os = str_at(c, "os"), *a = str_at(c, "architecture");
    int ret = 0;
    if ((os && strcmp(os, "linux") != 0) || (a && strcmp(a, arch) != 0))
        ret = crl_err_set(err, CRL_E_INVALID,
                          "the image %s is for %.30s/%.30s: this host runs "
                          "linux/%s",
                          out->label[0] ? out->label : out->id, os ? os : "linux", a ? a : arch,
                          arch);
    json_decref(c);
    return ret;
}

/* Whether a reference names a repository, not a tag only. */
static bool full_name(const char *ref)
{
    return ref && (strchr(ref, ':') || strchr(ref, '/'));
}

static int check_size(json_t *desc, struct src_file *f, const char *name, struct crl_err *err)
{
    json_t *sz = json_object_get(desc, "size");
    if (json_is_integer(sz) && (uint64_t)json_integer_value(sz) != f->size)
        return crl_err_set(err, CRL_E_INVALID, "%s: %llu bytes, but its descriptor says %lld", name,
                           (unsigned long long)f->size, json_integer_value(sz));
    return 0;
}

/* The manifest index.json leads to: the image `ref` names (or the only one
 * for this host), through nested indexes (a multi-platform image's) by
 * platform.  `where` is "the archive" or "the layout", for messages. */
static int read_oci(struct src *s, const char *ref, const char *where, struct crl_oci_image *out,
                    json_t **manifest_out, struct crl_err *err)
{
    json_t *cur = src_json(s, "index.json", NULL, NULL, NULL, err);
    if (!cur)
        return -1;
    struct offer *o = NULL;
    size_t n = 0, k = 0;
    const char *as = NULL;
    json_t *next = NULL;
    int ret = -1;
    if (!(o = index_offers(cur, "index.json", &n, err)) ||
        choose(o, n, ref, where, false, &k, &as, err) < 0)
        goto out;
    json_t *desc = o[k].entry, *ann = json_object_get(desc, "annotations");
    snprintf(out->label, sizeof(out->label), "%s", offer_label(&o[k]));
    const char *name = full_name(as) ? as : NULL;
    if (!name && full_name(str_at(ann, "io.containerd.image.name")))
        name = str_at(ann, "io.containerd.image.name");
    if (!name && full_name(str_at(ann, "org.opencontainers.image.ref.name")))
        name = str_at(ann, "org.opencontainers.image.ref.name");
    if (name)
        snprintf(out->name, sizeof(out->name), "%s", name);
    char what[CRL_IMAGE_NAME_MAX + 32];
    snprintf(what, sizeof(what), "index.json");
    for (int depth = 0;; depth++) {
        if (!(next = desc_json(s, desc, what, NULL, NULL, err)))
            goto out;
        const char *mt = str_at(next, "mediaType");
        if (!is_index(str_at(desc, "mediaType")) && !is_index(mt) &&
            (mt || !json_is_array(json_object_get(next, "manifests"))))
            break;
        snprintf(what, sizeof(what), "the image index %s", out->label);
        if (depth == 3) {
            crl_err_set(err, CRL_E_INVALID, "%s: indexes nest more than 3 deep", what);
            goto out;
        }
        offers_free(o, n);
        o = NULL;
        json_decref(cur);
        cur = steal_pointer(&next);
        if (!(o = index_offers(cur, what, &n, err)) ||
            choose(o, n, NULL, what, true, &k, &as, err) < 0)
            goto out;
        desc = o[k].entry;
    }
    *manifest_out = steal_pointer(&next);
    ret = 0;
out:
    offers_free(o, n);
    json_decref(next);
    json_decref(cur);
    return ret;
}

static void layers_free(struct crl_oci_image *img)
{
    for (size_t i = 0; i < img->n_layers; i++)
        if (img->layers[i].fd >= 0)
            close(img->layers[i].fd);
    free(img->layers);
    img->layers = NULL;
    img->n_layers = 0;
}

void crl_oci_image_free(struct crl_oci_image *img)
{
    layers_free(img);
    free(img->config);
    img->config = NULL;
}

static int set_layers_from_config(struct crl_oci_image *out, size_t n, struct crl_err *err)
{
    json_t *cfg = json_loadb(out->config, out->config_len, 0, NULL);
    json_t *ids = json_object_get(json_object_get(cfg, "rootfs"), "diff_ids");
    int ret = 0;
    if (!json_is_array(ids) || json_array_size(ids) != n)
        ret = crl_err_set(err, CRL_E_INVALID,
                          "the config lists %zu diff_ids for the manifest's %zu layers",
                          json_array_size(ids), n);
    for (size_t i = 0; ret == 0 && i < n; i++) {
        const char *d = json_string_value(json_array_get(ids, i));
        if (!crl_digest_valid(d))
            ret = crl_err_set(err, CRL_E_INVALID, "the config's diff_id %zu is not sha256", i);
        else
            snprintf(out->layers[i].diff_id, sizeof(out->layers[i].diff_id), "%s", d);
    }
    json_decref(cfg);
    return ret;
}

static int add_layer(struct src *s, struct crl_oci_image *out, const char *name, json_t *desc,
                     const char *digest, struct crl_err *err)
{
    struct src_file *f;
    int fd = src_open(s, name, &f, err);
    if (fd < 0)
        return -1;
    struct crl_oci_layer *L = &out->layers[out->n_layers++];
    L->fd = fd;
    if (digest && strcmp(f->digest, digest) != 0)
        return crl_err_set(err, CRL_E_INVALID, "layer %s: digest mismatch: content is %s", name,
                           f->digest);
    if (desc && check_size(desc, f, name, err) < 0)
        return -1;
    snprintf(L->blob, sizeof(L->blob), "%s", digest ? digest : "");
    return 0;
}

static int config_from(struct src *s, const char *name, const char *want, struct crl_oci_image *out,
                       struct crl_err *err)
{
    json_t *c = src_json(s, name, want, &out->config, &out->config_len, err);
    if (!c)
        return -1;
    bool ok = json_is_object(c);
    json_decref(c);
    if (!ok)
        return crl_err_set(err, CRL_E_INVALID, "the config %s is not a JSON object", name);
    crl_sha256_buf(out->config, out->config_len, out->id);
    return 0;
}

/* The image to import, `ref` naming it (NULL: the only one for this host):
 * its config and layers, opened. */
static int resolve(struct src *s, const char *ref, struct crl_oci_image *out, struct crl_err *err)
{
    bool have_index = src_find(s, "index.json", 0) != NULL ||
                      (s->layout >= 0 && faccessat(s->layout, "index.json", F_OK, 0) == 0);
    bool have_docker = src_find(s, "manifest.json", 0) != NULL ||
                       (s->layout >= 0 && faccessat(s->layout, "manifest.json", F_OK, 0) == 0);
    const char *where = s->layout >= 0 ? "the layout" : "the archive";
    int ret = -1;
    json_t *manifest = NULL, *arr = NULL;
    struct offer *o = NULL;
    size_t n_o = 0;
    if (have_docker) {
        /* docker save: manifest.json is [{Config, RepoTags, Layers}] */
        if (!(arr = src_json(s, "manifest.json", NULL, NULL, NULL, err)))
            return -1;
        size_t k;
        const char *as = NULL;
        if (!(o = docker_offers(arr, &n_o, err)) ||
            choose(o, n_o, ref, where, false, &k, &as, err) < 0)
            goto out;
        json_t *dm = o[k].entry;
        snprintf(out->label, sizeof(out->label), "%s", offer_label(&o[k]));
        const char *tag =
            as ? as : json_string_value(json_array_get(json_object_get(dm, "RepoTags"), 0));
        if (tag)
            snprintf(out->name, sizeof(out->name), "%s", tag);
        const char *cfg = str_at(dm, "Config");
        json_t *layers = json_object_get(dm, "Layers");
        if (!cfg || !json_is_array(layers)) {
            crl_err_set(err, CRL_E_INVALID, "manifest.json: no Config or Layers for %s",
                        out->label);
            goto out;
        }
        /* Its config is named by its digest: "<hex>.json" or "blobs/sha256/<hex>". */
        char want[CRL_DIGEST_LEN + 1];
        config_digest(cfg, want);
        if (config_from(s, cfg, want[0] ? want : NULL, out, err) < 0 ||
            check_config_platform(out, err) < 0)
            goto out;
        size_t n = json_array_size(layers);
        if (n > CRL_IMAGE_MAX_LAYERS) {
            crl_err_set(err, CRL_E_INVALID, "%zu layers: at most %d", n, CRL_IMAGE_MAX_LAYERS);
            goto out;
        }
        if (!(out->layers = calloc(n ? n : 1, sizeof(*out->layers)))) {
            crl_err_sys(err, ENOMEM, "layers");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            const char *ln = json_string_value(json_array_get(layers, i));
            char ld[CRL_DIGEST_LEN + 1] = "";
            if (!ln) {
                crl_err_set(err, CRL_E_INVALID, "manifest.json: layer %zu is not a name", i);
                goto out;
            }
            if (strncmp(ln, "blobs/sha256/", 13) == 0)
                snprintf(ld, sizeof(ld), "sha256:%s", ln + 13);
            if (add_layer(s, out, ln, NULL, crl_digest_valid(ld) ? ld : NULL, err) < 0)
                goto out;
        }
        ret = set_layers_from_config(out, n, err);
        goto out;
    }
    if (!have_index) {
        crl_err_set(err, CRL_E_INVALID,
                    "neither index.json (OCI) nor manifest.json (docker save) is in the archive");
        goto out;
    }
    if (read_oci(s, ref, where, out, &manifest, err) < 0)
        goto out;
    json_t *cdesc = json_object_get(manifest, "config");
    const char *cd = str_at(cdesc, "digest");
    char cname[128];
    if (blob_name(cd, cname, sizeof(cname), err) < 0) {
        crl_err_prefix(err, "the manifest's config");
        goto out;
    }
    if (config_from(s, cname, cd, out, err) < 0 || check_config_platform(out, err) < 0)
        goto out;
    json_t *layers = json_object_get(manifest, "layers");
    size_t n = json_array_size(layers);
    if (!json_is_array(layers) || n > CRL_IMAGE_MAX_LAYERS) {
        crl_err_set(err, CRL_E_INVALID, "the manifest's layers: %s",
                    json_is_array(layers) ? "too many" : "missing");
        goto out;
    }
    if (!(out->layers = calloc(n ? n : 1, sizeof(*out->layers)))) {
        crl_err_sys(err, ENOMEM, "layers");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(layers, i);
        const char *mt = str_at(d, "mediaType");
        const char *ld = str_at(d, "digest");
        if (mt && strstr(mt, "nondistributable")) {
            crl_err_set(err, CRL_E_INVALID, "layer %zu is a foreign layer (%s): not in the archive",
                        i, mt);
            goto out;
        }
        char ln[128];
        if (blob_name(ld, ln, sizeof(ln), err) < 0) {
            crl_err_prefix(err, "layer %zu", i);
            goto out;
        }
        if (add_layer(s, out, ln, d, ld, err) < 0)
            goto out;
    }
    ret = set_layers_from_config(out, n, err);
out:
    offers_free(o, n_o);
    json_decref(arr);
    json_decref(manifest);
    return ret;
}

int crl_oci_from_config(char *config, size_t len, struct crl_oci_image *out, struct crl_err *err)
{
    memset(out, 0, sizeof(*out));
    out->config = config;
    out->config_len = len;
    crl_sha256_buf(config, len, out->id);
    json_t *c = json_loadb(config, len, 0, NULL);
    size_t n = json_array_size(json_object_get(json_object_get(c, "rootfs"), "diff_ids"));
    bool obj = json_is_object(c);
    json_decref(c);
    int ret = -1;
    if (!obj)
        crl_err_set(err, CRL_E_INVALID, "the config is not a JSON object");
    else if (n > CRL_IMAGE_MAX_LAYERS)
        crl_err_set(err, CRL_E_INVALID, "%zu layers: at most %d", n, CRL_IMAGE_MAX_LAYERS);
    else if (check_config_platform(out, err) < 0)
        ;
    else if (!(out->layers = calloc(n ? n : 1, sizeof(*out->layers))))
        crl_err_sys(err, ENOMEM, "layers");
    else
        ret = 0;
    for (size_t i = 0; ret == 0 && i < n; i++)
        out->layers[out->n_layers++].fd = -1;
    if (ret == 0)
        ret = set_layers_from_config(out, n, err);
    if (ret < 0)
        crl_oci_image_free(out);
    return ret;
}

int crl_oci_read(int fd, const char *dir, const char *ref, int scratch_fd,
                 const struct crl_import_limits *lim, struct crl_oci_image *out,
                 struct crl_err *err)
{
    memset(out, 0, sizeof(*out));
    struct src s = {.scratch = scratch_fd, .layout = -1, .lim = lim};
    int ret = -1;
    if (dir) {
        s.layout = crl_openat(AT_FDCWD, dir, O_PATH | O_DIRECTORY, 0);
        if (s.layout < 0) {
            crl_err_sys(err, errno, "%s", dir);
            goto out;
        }
    } else if (spool_tar(&s, fd, err) < 0) {
        goto out;
    }
    ret = resolve(&s, ref, out, err);
out:
    src_free(&s);
    if (ret < 0)
        crl_oci_image_free(out);
    return ret;
}
