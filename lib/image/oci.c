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
#include <sys/syscall.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "digest.h"
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

static int open_beneath(int dir, const char *path)
{
    struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    return (int)syscall(SYS_openat2, dir, path, &how, sizeof(how));
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

/* From an index, the manifest for this host (linux/amd64 or the only one). */
static json_t *pick_manifest(json_t *index, struct crl_err *err)
{
    json_t *ms = json_object_get(index, "manifests");
    if (!json_is_array(ms) || json_array_size(ms) == 0) {
        crl_err_set(err, CRL_E_INVALID, "index.json lists no manifests");
        return NULL;
    }
    if (json_array_size(ms) == 1)
        return json_array_get(ms, 0);
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        json_t *p = json_object_get(m, "platform");
        const char *os = str_at(p, "os"), *arch = str_at(p, "architecture");
        if (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, "amd64") == 0)
            return m;
    }
    crl_err_set(err, CRL_E_INVALID,
                "the archive holds %zu images and none is for linux/amd64: give one", i);
    return NULL;
}

static int check_size(json_t *desc, struct src_file *f, const char *name, struct crl_err *err)
{
    json_t *sz = json_object_get(desc, "size");
    if (json_is_integer(sz) && (uint64_t)json_integer_value(sz) != f->size)
        return crl_err_set(err, CRL_E_INVALID, "%s: %llu bytes, but its descriptor says %lld", name,
                           (unsigned long long)f->size, json_integer_value(sz));
    return 0;
}

static int read_oci(struct src *s, struct crl_oci_image *out, json_t **manifest_out,
                    struct crl_err *err)
{
    json_t *index = src_json(s, "index.json", NULL, NULL, NULL, err);
    if (!index)
        return -1;
    json_t *desc = pick_manifest(index, err);
    json_t *nested = NULL;
    int ret = -1;
    if (!desc)
        goto out;
    const char *ref = str_at(json_object_get(desc, "annotations"), "io.containerd.image.name");
    if (!ref)
        ref = str_at(json_object_get(desc, "annotations"), "org.opencontainers.image.ref.name");
    if (ref && (strchr(ref, ':') || strchr(ref, '/')))
        snprintf(out->name, sizeof(out->name), "%s", ref);
    if (is_index(str_at(desc, "mediaType"))) {
        if (!(nested = desc_json(s, desc, "index.json", NULL, NULL, err)) ||
            !(desc = pick_manifest(nested, err)))
            goto out;
    }
    *manifest_out = desc_json(s, desc, "index.json", NULL, NULL, err);
    if (!*manifest_out)
        goto out;
    ret = 0;
out:
    json_decref(nested);
    json_decref(index);
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

static int resolve(struct src *s, const char *want_name, struct crl_oci_image *out,
                   struct crl_err *err)
{
    bool have_index = src_find(s, "index.json", 0) != NULL ||
                      (s->layout >= 0 && faccessat(s->layout, "index.json", F_OK, 0) == 0);
    bool have_docker = src_find(s, "manifest.json", 0) != NULL ||
                       (s->layout >= 0 && faccessat(s->layout, "manifest.json", F_OK, 0) == 0);
    int ret = -1;
    json_t *manifest = NULL, *dm = NULL;
    if (have_docker) {
        /* docker save: manifest.json is [{Config, RepoTags, Layers}] */
        json_t *arr = src_json(s, "manifest.json", NULL, NULL, NULL, err);
        if (!arr)
            return -1;
        dm = json_array_get(arr, 0);
        if (want_name && json_array_size(arr) > 1) {
            size_t i, j;
            json_t *m, *t;
            json_array_foreach(arr, i, m) json_array_foreach(json_object_get(m, "RepoTags"), j, t)
            {
                const char *tag = json_string_value(t);
                if (tag && strcmp(tag, want_name) == 0)
                    dm = m;
            }
        }
        json_incref(dm);
        json_decref(arr);
        if (!json_is_object(dm)) {
            crl_err_set(err, CRL_E_INVALID, "manifest.json lists no image");
            goto out;
        }
        const char *tag = json_string_value(json_array_get(json_object_get(dm, "RepoTags"), 0));
        if (tag)
            snprintf(out->name, sizeof(out->name), "%s", tag);
        const char *cfg = str_at(dm, "Config");
        json_t *layers = json_object_get(dm, "Layers");
        if (!cfg || !json_is_array(layers)) {
            crl_err_set(err, CRL_E_INVALID, "manifest.json: no Config or Layers");
            goto out;
        }
        /* Its config is named by its digest: "<hex>.json" or "blobs/sha256/<hex>". */
        char want[CRL_DIGEST_LEN + 1] = "";
        const char *b = strrchr(cfg, '/');
        b = b ? b + 1 : cfg;
        if (strlen(b) >= 64) {
            snprintf(want, sizeof(want), "sha256:%.64s", b);
            if (!crl_digest_valid(want))
                want[0] = 0;
        }
        if (config_from(s, cfg, want[0] ? want : NULL, out, err) < 0)
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
    if (read_oci(s, out, &manifest, err) < 0)
        goto out;
    json_t *cdesc = json_object_get(manifest, "config");
    const char *cd = str_at(cdesc, "digest");
    char cname[128];
    if (blob_name(cd, cname, sizeof(cname), err) < 0) {
        crl_err_prefix(err, "the manifest's config");
        goto out;
    }
    if (config_from(s, cname, cd, out, err) < 0)
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
    json_decref(dm);
    json_decref(manifest);
    return ret;
}

int crl_oci_read(int fd, const char *dir, int scratch_fd, const struct crl_import_limits *lim,
                 struct crl_oci_image *out, struct crl_err *err)
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
    ret = resolve(&s, NULL, out, err);
out:
    src_free(&s);
    if (ret < 0)
        crl_oci_image_free(out);
    return ret;
}
