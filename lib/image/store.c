#include "store.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/sha256.h"
#include "erofs.h"
#include "layer.h"
#include "oci.h"

static const char *const store_dirs[] = {"layers", "images", "configs", "tags", "tmp"};

struct crl_store {
    char dir[PATH_MAX];
    int fd; /* O_PATH of dir */
    bool writable;
    unsigned seq;
};

/* ---- small helpers ---- */

/* The one kind an image may name; anything else is an ordinary image, so
 * a label some other tool set means nothing here. */
static const char *kind_known(const char *kind)
{
    return kind && strcmp(kind, "vm") == 0 ? "vm" : NULL;
}

static void strv_free(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

static char **strv_from_json(json_t *arr)
{
    if (!json_is_array(arr))
        return NULL;
    size_t n = json_array_size(arr);
    char **v = calloc(n + 1, sizeof(char *));
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(arr, i));
        if (!s || !(v[i] = strdup(s))) {
            strv_free(v);
            return NULL;
        }
    }
    return v;
}

static json_t *strv_json(char **v)
{
    if (!v)
        return json_null();
    json_t *a = json_array();
    for (; *v; v++)
        json_array_append_new(a, json_string(*v));
    return a;
}

/* Write `len` bytes as `name` in dirfd, durably and atomically: a
 * temporary file, fsync, rename, fsync of the directory. */
static int write_atomic(int dirfd, const char *name, const void *data, size_t len,
                        struct crl_err *err)
{
    char tmp[NAME_MAX + 1];
    snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
    cleanup_close int fd = crl_openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return crl_err_sys(err, errno, "create %s", tmp);
    if (crl_write_full(fd, data, len) < 0 || fsync(fd) < 0 ||
        renameat(dirfd, tmp, dirfd, name) < 0) {
        int e = errno;
        unlinkat(dirfd, tmp, 0);
        return crl_err_sys(err, e, "write %s", name);
    }
    fsync(dirfd);
    return 0;
}

static int sub_fd(const struct crl_store *s, const char *sub, int flags)
{
    return crl_openat(s->fd, sub, flags | O_DIRECTORY, 0);
}

/* ---- names ---- */

int crl_store_name_canon(const char *name, char out[CRL_IMAGE_NAME_MAX + 1], struct crl_err *err)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0)
        return crl_err_set(err, CRL_E_INVALID, "image name is empty");
    if (n > CRL_IMAGE_NAME_MAX - 7)
        return crl_err_set(err, CRL_E_INVALID, "image name is longer than %d characters",
                           CRL_IMAGE_NAME_MAX - 7);
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '/' || c == ':'))
            return crl_err_set(err, CRL_E_INVALID,
                               "image name %s: '%c' is not allowed (letters, digits, . _ - / :)",
                               name, c);
    }
    if (name[0] == '/' || name[0] == '.' || name[0] == ':' || name[0] == '-' ||
        name[n - 1] == '/' || name[n - 1] == ':' || strstr(name, "//") || strstr(name, "..") ||
        strstr(name, "/."))
        return crl_err_set(err, CRL_E_INVALID, "image name %s is malformed", name);
    if (strncmp(name, "sha256:", 7) == 0)
        return crl_err_set(err, CRL_E_INVALID, "image name %s looks like an id", name);
    const char *slash = strrchr(name, '/');
    const char *colon = strrchr(name, ':');
    bool tagged = colon && (!slash || colon > slash);
    snprintf(out, CRL_IMAGE_NAME_MAX + 1, "%s%s", name, tagged ? "" : ":latest");
    return 0;
}

int crl_store_ref_check(const char *ref, struct crl_err *err)
{
    size_t n = ref ? strlen(ref) : 0;
    if (n == 0)
        return crl_err_set(err, CRL_E_INVALID, "reference name is empty");
    if (n > CRL_IMAGE_NAME_MAX)
        return crl_err_set(err, CRL_E_INVALID, "reference name is longer than %d characters",
                           CRL_IMAGE_NAME_MAX);
    for (const char *p = ref; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("._-/:@+", c))
            continue;
        /* the ref is quoted only when what is wrong in it prints */
        if (c >= ' ' && c < 0x7f)
            return crl_err_set(err, CRL_E_INVALID,
                               "reference name %s: '%c' is not allowed (letters, digits, "
                               ". _ - / : @ +)",
                               ref, c);
        return crl_err_set(err, CRL_E_INVALID,
                           "reference name: byte 0x%02x at %zu is not allowed (letters, digits, "
                           ". _ - / : @ +)",
                           c, (size_t)(p - ref));
    }
    return 0;
}

static void tag_file(const char *canon, char *out, size_t cap)
{
    snprintf(out, cap, "%s", canon);
    for (char *p = out; *p; p++)
        if (*p == '/')
            *p = '%';
}

static void tag_unfile(const char *file, char *out, size_t cap)
{
    snprintf(out, cap, "%s", file);
    for (char *p = out; *p; p++)
        if (*p == '%')
            *p = '/';
}

/* ---- open ---- */

/* tmp/<pid>.<n> of processes that are gone. */
static void remove_stale_tmp(struct crl_store *s)
{
    int fd = sub_fd(s, "tmp", O_RDONLY);
    if (fd < 0)
        return;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        long pid = strtol(de->d_name, NULL, 10);
        if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM))
            continue;
        crl_rm_rf_at(dirfd(d), de->d_name);
    }
    closedir(d);
}

int crl_store_open(const char *dir, bool writable, struct crl_store **out, struct crl_err *err)
{
    struct crl_store *s = calloc(1, sizeof(*s));
    if (!s)
        return crl_err_sys(err, ENOMEM, "image store");
    snprintf(s->dir, sizeof(s->dir), "%s", dir);
    s->writable = writable;
    if (writable && crl_mkdir_p(dir, 0700) < 0) {
        crl_err_sys(err, errno, "image store %s", dir);
        free(s);
        return -1;
    }
    s->fd = crl_openat(AT_FDCWD, dir, O_PATH | O_DIRECTORY, 0);
    if (s->fd < 0) {
        crl_err_sys(err, errno, "image store %s", dir);
        free(s);
        return -1;
    }
    if (writable) {
        for (size_t i = 0; i < CRL_ARRAY_SIZE(store_dirs); i++)
            if (mkdirat(s->fd, store_dirs[i], 0700) < 0 && errno != EEXIST) {
                crl_err_sys(err, errno, "image store %s/%s", dir, store_dirs[i]);
                crl_store_close(s);
                return -1;
            }
        remove_stale_tmp(s);
    }
    *out = s;
    return 0;
}

void crl_store_close(struct crl_store *s)
{
    if (!s)
        return;
    close(s->fd);
    free(s);
}

const char *crl_store_dir(const struct crl_store *s)
{
    return s->dir;
}

bool crl_store_writable(const struct crl_store *s)
{
    return s->writable;
}

/* Imports hold the lock shared, the garbage collector exclusive. */
static int store_lock(const struct crl_store *s, int op, struct crl_err *err)
{
    int fd = crl_openat(s->fd, "lock", O_RDWR | O_CREAT, 0600);
    if (fd < 0)
        return crl_err_sys(err, errno, "image store lock");
    while (flock(fd, op) < 0) {
        if (errno == EINTR)
            continue;
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return crl_err_set(err, CRL_E_CONFLICT, "an import into the image store is running");
        return crl_err_sys(err, e, "image store lock");
    }
    return fd;
}

/* ---- records ---- */

void crl_store_image_free(struct crl_store_image *img)
{
    if (!img)
        return;
    free(img->layers);
    strv_free(img->env);
    strv_free(img->entrypoint);
    strv_free(img->cmd);
    free(img->cwd);
    free(img->user);
    free(img->created);
    free(img->kind);
    free(img);
}

json_t *crl_store_image_json(const struct crl_store_image *img)
{
    json_t *layers = json_array();
    uint64_t total = 0;
    for (size_t i = 0; i < img->n_layers; i++) {
        const struct crl_store_layer *L = &img->layers[i];
        json_array_append_new(layers, json_pack("{s:s, s:I, s:s*}", "digest", L->digest, "size",
                                                (json_int_t)L->size, "file_digest",
                                                L->file_digest[0] ? L->file_digest : NULL));
        total += L->size;
    }
    return json_pack("{s:s, s:o, s:I, s:o, s:s, s:s, s:o, s:o, s:s, s:s}", "id", img->id, "layers",
                     layers, "size", (json_int_t)total, "env", strv_json(img->env), "cwd", img->cwd,
                     "user", img->user, "entrypoint", strv_json(img->entrypoint), "cmd",
                     strv_json(img->cmd), "created", img->created ? img->created : "", "kind",
                     img->kind ? img->kind : "container");
}

static struct crl_store_image *record_parse(json_t *j, struct crl_err *err)
{
    struct crl_store_image *img = calloc(1, sizeof(*img));
    const char *id = json_string_value(json_object_get(j, "id"));
    json_t *layers = json_object_get(j, "layers");
    if (!img || !crl_digest_valid(id) || !json_is_array(layers)) {
        crl_store_image_free(img);
        crl_err_set(err, CRL_E_INTERNAL, "image record is malformed");
        return NULL;
    }
    snprintf(img->id, sizeof(img->id), "%s", id);
    img->n_layers = json_array_size(layers);
    img->layers = calloc(img->n_layers ? img->n_layers : 1, sizeof(*img->layers));
    for (size_t i = 0; img->layers && i < img->n_layers; i++) {
        json_t *l = json_array_get(layers, i);
        const char *d = json_string_value(json_object_get(l, "digest"));
        if (!crl_digest_valid(d)) {
            crl_store_image_free(img);
            crl_err_set(err, CRL_E_INTERNAL, "image record: layer %zu is malformed", i);
            return NULL;
        }
        snprintf(img->layers[i].digest, sizeof(img->layers[i].digest), "%s", d);
        img->layers[i].size = (uint64_t)json_integer_value(json_object_get(l, "size"));
        const char *fd = json_string_value(json_object_get(l, "file_digest"));
        if (crl_digest_valid(fd))
            snprintf(img->layers[i].file_digest, sizeof(img->layers[i].file_digest), "%s", fd);
    }
    img->env = strv_from_json(json_object_get(j, "env"));
    img->entrypoint = strv_from_json(json_object_get(j, "entrypoint"));
    img->cmd = strv_from_json(json_object_get(j, "cmd"));
    const char *cwd = json_string_value(json_object_get(j, "cwd"));
    const char *user = json_string_value(json_object_get(j, "user"));
    const char *created = json_string_value(json_object_get(j, "created"));
    img->cwd = strdup(cwd && *cwd ? cwd : "/");
    img->user = strdup(user && *user ? user : "0:0");
    img->created = strdup(created ? created : "");
    const char *kind = kind_known(json_string_value(json_object_get(j, "kind")));
    img->kind = kind ? strdup(kind) : NULL;
    if (!img->layers || !img->cwd || !img->user || !img->created || (kind && !img->kind)) {
        crl_store_image_free(img);
        crl_err_sys(err, ENOMEM, "image record");
        return NULL;
    }
    return img;
}

static int load_record(const struct crl_store *s, const char *id, struct crl_store_image **out,
                       struct crl_err *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/images/%s.json", s->dir, crl_digest_hex(id));
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        if (access(path, F_OK) < 0)
            return crl_err_set(err, CRL_E_NOT_FOUND, "image %s is not in the store", id);
        return crl_err_set(err, CRL_E_INTERNAL, "%s: %s", path, je.text);
    }
    *out = record_parse(j, err);
    json_decref(j);
    return *out ? 0 : -1;
}

/* ---- lookup and tags ---- */

static int read_tag(const struct crl_store *s, const char *canon, char id[CRL_DIGEST_LEN + 1])
{
    char f[PATH_MAX], path[PATH_MAX + 8];
    tag_file(canon, f, sizeof(f));
    snprintf(path, sizeof(path), "tags/%s", f);
    cleanup_close int fd = crl_openat(s->fd, path, O_RDONLY, 0);
    if (fd < 0)
        return -1;
    ssize_t n = crl_read_full(fd, id, CRL_DIGEST_LEN);
    id[n > 0 ? n : 0] = 0;
    return crl_digest_valid(id) ? 0 : -1;
}

static bool hex_prefix(const char *p)
{
    size_t n = strlen(p);
    if (n < 12 || n > 64)
        return false;
    for (; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

/* An id, or a unique hex prefix of one, among images/. */
static int find_id(const struct crl_store *s, const char *want, char id[CRL_DIGEST_LEN + 1],
                   struct crl_err *err)
{
    const char *hex = strncmp(want, "sha256:", 7) == 0 ? want + 7 : want;
    if (!hex_prefix(hex))
        return crl_err_set(err, CRL_E_NOT_FOUND, "no image %s", want);
    int fd = sub_fd(s, "images", O_RDONLY);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return crl_err_set(err, CRL_E_NOT_FOUND, "no image %s", want);
    }
    int found = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, hex, strlen(hex)) == 0 && strlen(de->d_name) == 64 + 5) {
            found++;
            snprintf(id, CRL_DIGEST_LEN + 1, "sha256:%.64s", de->d_name);
        }
    closedir(d);
    if (found == 1)
        return 0;
    return crl_err_set(err, found ? CRL_E_INVALID : CRL_E_NOT_FOUND,
                       found ? "%s names more than one image" : "no image %s", want);
}

int crl_store_lookup(struct crl_store *s, const char *name, struct crl_store_image **out,
                     struct crl_err *err)
{
    char id[CRL_DIGEST_LEN + 1];
    char canon[CRL_IMAGE_NAME_MAX + 1];
    struct crl_err e2 = CRL_ERR_INIT;
    if (crl_store_name_canon(name, canon, &e2) == 0 && read_tag(s, canon, id) == 0)
        return load_record(s, id, out, err);
    if (find_id(s, name, id, &e2) == 0)
        return load_record(s, id, out, err);
    if (e2.code == CRL_E_INVALID && strstr(e2.msg, "more than one"))
        return crl_err_set(err, CRL_E_INVALID, "%s", e2.msg);
    return crl_err_set(err, CRL_E_NOT_FOUND, "no image %s", name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every tag (id NULL) or those of one image. */
static int list_tags(const struct crl_store *s, const char *id, char ***out, struct crl_err *err)
{
    size_t n = 0;
    char **v = calloc(1, sizeof(char *));
    if (!v)
        return crl_err_sys(err, ENOMEM, "tags");
    int fd = sub_fd(s, "tags", O_RDONLY);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        *out = v;
        return 0;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char canon[CRL_IMAGE_NAME_MAX + 1], tid[CRL_DIGEST_LEN + 1];
        tag_unfile(de->d_name, canon, sizeof(canon));
        if (read_tag(s, canon, tid) < 0 || (id && strcmp(id, tid) != 0))
            continue;
        char **nv = realloc(v, (n + 2) * sizeof(char *));
        if (!nv || !(nv[n] = strdup(canon))) {
            v = nv ? nv : v;
            closedir(d);
            strv_free(v);
            return crl_err_sys(err, ENOMEM, "tags");
        }
        v = nv;
        v[++n] = NULL;
    }
    closedir(d);
    qsort(v, n, sizeof(char *), cmp_str);
    *out = v;
    return 0;
}

int crl_store_tags(struct crl_store *s, char ***out, struct crl_err *err)
{
    return list_tags(s, NULL, out, err);
}

int crl_store_tags_of(struct crl_store *s, const char *id, char ***out, struct crl_err *err)
{
    return list_tags(s, id, out, err);
}

static int write_tag(struct crl_store *s, const char *canon, const char *id, struct crl_err *err)
{
    char f[PATH_MAX], line[CRL_DIGEST_LEN + 2];
    tag_file(canon, f, sizeof(f));
    cleanup_close int tags = sub_fd(s, "tags", O_RDONLY);
    if (tags < 0)
        return crl_err_sys(err, errno, "image store tags");
    int n = snprintf(line, sizeof(line), "%s\n", id);
    return write_atomic(tags, f, line, (size_t)n, err);
}

int crl_store_tag(struct crl_store *s, const char *src, const char *dst, struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    struct crl_store_image *img = NULL;
    if (crl_store_name_canon(dst, canon, err) < 0 || crl_store_lookup(s, src, &img, err) < 0)
        return -1;
    int r = write_tag(s, canon, img->id, err);
    crl_store_image_free(img);
    return r;
}

int crl_store_untag(struct crl_store *s, const char *name, struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1], id[CRL_DIGEST_LEN + 1], f[PATH_MAX], path[PATH_MAX + 8];
    if (crl_store_name_canon(name, canon, err) < 0)
        return -1;
    if (read_tag(s, canon, id) < 0)
        return crl_err_set(err, CRL_E_NOT_FOUND, "no image %s", canon);
    tag_file(canon, f, sizeof(f));
    snprintf(path, sizeof(path), "tags/%s", f);
    if (unlinkat(s->fd, path, 0) < 0)
        return crl_err_sys(err, errno, "remove tag %s", canon);
    char **left = NULL;
    if (list_tags(s, id, &left, err) < 0)
        return -1;
    bool last = !left[0];
    strv_free(left);
    if (last) {
        snprintf(path, sizeof(path), "images/%s.json", crl_digest_hex(id));
        if (unlinkat(s->fd, path, 0) < 0 && errno != ENOENT)
            return crl_err_sys(err, errno, "remove image %s", id);
    }
    return 0;
}

/* ---- paths and mounts ---- */

int crl_store_blob_open(const struct crl_store *s, const char *digest, struct crl_err *err)
{
    if (!crl_digest_valid(digest))
        return crl_err_set(err, CRL_E_INVALID, "'%.80s' is not a sha256 digest", digest);
    static const char *const where[][2] = {{"layers", ".erofs"}, {"configs", ".json"}};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(where); i++) {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s%s", where[i][0], crl_digest_hex(digest), where[i][1]);
        int fd = crl_openat(s->fd, path, O_RDONLY | O_NOFOLLOW, 0);
        if (fd >= 0)
            return fd;
        if (errno != ENOENT)
            return crl_err_sys(err, errno, "%s/%s", s->dir, path);
    }
    return crl_err_set(err, CRL_E_NOT_FOUND, "no blob %s in the image store %s", digest, s->dir);
}

int crl_store_layer_path(const struct crl_store *s, const char *digest, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/layers/%s.erofs", s->dir, crl_digest_hex(digest));
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int crl_store_mount_layer(const struct crl_store *s, const char *digest, struct crl_err *err)
{
    char path[PATH_MAX];
    if (!crl_digest_valid(digest) || crl_store_layer_path(s, digest, path, sizeof(path)) < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "bad layer digest");
    if (access(path, R_OK) < 0)
        return crl_err_sys(err, errno, "layer %s of the store %s", digest, s->dir);
    return crl_erofs_mount(path, err);
}

/* ---- import ---- */

static uint64_t lim_or(uint64_t v, uint64_t dflt)
{
    return v ? v : dflt;
}

/* The layer's decompressed bytes, hashed and counted on their way to the
 * tar reader: one pass gives both the files and the check of the diff_id. */
struct expand {
    struct archive *raw;
    struct crl_sha256 h;
    uint64_t n, cap;
    bool over;
    char buf[1 << 16];
};

static la_ssize_t expand_read(struct archive *a, void *ud, const void **buf)
{
    struct expand *x = ud;
    la_ssize_t n = archive_read_data(x->raw, x->buf, sizeof(x->buf));
    if (n < 0) {
        const char *m = archive_error_string(x->raw);
        archive_set_error(a, EIO, "%s", m ? m : "unreadable");
        return -1;
    }
    x->n += (uint64_t)n;
    if (x->n > x->cap) {
        x->over = true;
        archive_set_error(a, EFBIG, "expands past %llu bytes", (unsigned long long)x->cap);
        return -1;
    }
    crl_sha256_update(&x->h, x->buf, (size_t)n);
    *buf = x->buf;
    return n;
}

static int expand_layer(int blob_fd, int root, const char *what, const char *diff_id,
                        const struct crl_import_limits *lim, uint64_t *total, struct crl_err *err)
{
    struct expand *x = calloc(1, sizeof(*x));
    struct archive *tar = NULL;
    int ret = -1;
    if (!x || crl_sha256_init(&x->h) < 0) {
        free(x);
        return crl_err_sys(err, ENOMEM, "%s", what);
    }
    uint64_t room = lim->max_total_bytes > *total ? lim->max_total_bytes - *total : 0;
    x->cap = lim->max_layer_bytes < room ? lim->max_layer_bytes : room;
    x->raw = archive_read_new();
    tar = archive_read_new();
    if (!x->raw || !tar) {
        crl_err_sys(err, ENOMEM, "%s", what);
        goto out;
    }
    archive_read_support_filter_all(x->raw);
    archive_read_support_format_raw(x->raw);
    archive_read_support_format_tar(tar);
    struct archive_entry *e;
    if (archive_read_open_fd(x->raw, blob_fd, 1 << 16) != ARCHIVE_OK ||
        archive_read_next_header(x->raw, &e) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INVALID, "%s: %s", what,
                    archive_error_string(x->raw) ? archive_error_string(x->raw) : "unreadable");
        goto out;
    }
    if (archive_read_open(tar, x, NULL, expand_read, NULL) != ARCHIVE_OK) {
        crl_err_set(err, x->over ? CRL_E_TOO_LARGE : CRL_E_INVALID, "%s: not a tar: %s", what,
                    archive_error_string(tar) ? archive_error_string(tar) : "unreadable");
        goto out;
    }
    struct crl_layer_stats st = {0};
    if (crl_layer_apply(tar, root, what, lim_or(lim->max_entries, 4u << 20), &st, err) < 0) {
        if (x->over)
            crl_err_set(err, CRL_E_TOO_LARGE, "%s expands past %llu bytes (a decompression bomb?)",
                        what, (unsigned long long)x->cap);
        goto out;
    }
    /* the tar's end: hash whatever padding follows it */
    const void *b;
    la_ssize_t n;
    while ((n = expand_read(tar, x, &b)) > 0)
        ;
    if (n < 0) {
        crl_err_set(err, x->over ? CRL_E_TOO_LARGE : CRL_E_INVALID, "%s: %s", what,
                    archive_error_string(tar));
        goto out;
    }
    char got[CRL_DIGEST_LEN + 1];
    crl_sha256_final(&x->h, got);
    if (strcmp(got, diff_id) != 0) {
        crl_err_set(err, CRL_E_INVALID,
                    "%s: digest mismatch: its content is %s, but the config's diff_id is %s", what,
                    got, diff_id);
        goto out;
    }
    *total += x->n;
    ret = 0;
out:
    if (x->h.ctx)
        crl_sha256_free(&x->h);
    archive_read_free(tar);
    archive_read_free(x->raw);
    free(x);
    return ret;
}

/* A file's size and sha256, as an image record keeps them for a layer. */
static int file_digest(int dirfd, const char *path, uint64_t *size, char digest[CRL_DIGEST_LEN + 1],
                       struct crl_err *err)
{
    cleanup_close int fd = crl_openat(dirfd, path, O_RDONLY, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return crl_err_sys(err, errno, "%s", path);
    if (!S_ISREG(st.st_mode))
        return crl_err_set(err, CRL_E_INTERNAL, "%s is not a file", path);
    struct crl_sha256 h;
    if (crl_sha256_init(&h) < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "sha256");
    if (crl_sha256_update_fd(&h, fd, NULL) < 0) {
        crl_sha256_free(&h);
        return crl_err_sys(err, errno, "read %s", path);
    }
    crl_sha256_final(&h, digest);
    *size = (uint64_t)st.st_size;
    return 0;
}

/* A layer the store has: its file's size and digest.  0: here; 1: not. */
static int layer_present(struct crl_store *s, const char *diff_id, uint64_t *size,
                         char digest[CRL_DIGEST_LEN + 1], struct crl_err *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "layers/%s.erofs", crl_digest_hex(diff_id));
    if (faccessat(s->fd, path, F_OK, 0) < 0)
        return errno == ENOENT ? 1 : crl_err_sys(err, errno, "%s/%s", s->dir, path);
    return file_digest(s->fd, path, size, digest, err);
}

/* Expand one layer and build its EROFS file as scratch/layer-<i>.erofs. */
static int build_layer(int scratch, const char *scratch_path, size_t i,
                       const struct crl_oci_layer *L, const struct crl_import_limits *lim,
                       uint64_t *total, uint64_t *size, char digest[CRL_DIGEST_LEN + 1],
                       struct crl_err *err)
{
    char what[160], dname[32], fname[32], dpath[PATH_MAX], fpath[PATH_MAX];
    snprintf(what, sizeof(what), "layer %zu (%s)", i, L->blob[0] ? L->blob : L->diff_id);
    snprintf(dname, sizeof(dname), "layer-%zu", i);
    snprintf(fname, sizeof(fname), "layer-%zu.erofs", i);
    if (mkdirat(scratch, dname, 0755) < 0)
        return crl_err_sys(err, errno, "%s", what);
    int ret = -1;
    int f = -1;
    cleanup_close int root = crl_openat(scratch, dname, O_RDONLY | O_DIRECTORY, 0);
    if (root < 0) {
        crl_err_sys(err, errno, "%s", what);
        goto out;
    }
    if (lseek(L->fd, 0, SEEK_SET) < 0) {
        crl_err_sys(err, errno, "%s", what);
        goto out;
    }
    if (expand_layer(L->fd, root, what, L->diff_id, lim, total, err) < 0)
        goto out;
    snprintf(dpath, sizeof(dpath), "%s/%s", scratch_path, dname);
    snprintf(fpath, sizeof(fpath), "%s/%s", scratch_path, fname);
    if (crl_erofs_build(dpath, fpath, err) < 0)
        goto out;
    f = crl_openat(scratch, fname, O_RDONLY, 0);
    if (f < 0 || fsync(f) < 0) {
        crl_err_sys(err, errno, "%s", what);
        goto out;
    }
    ret = file_digest(scratch, fname, size, digest, err);
out:
    if (f >= 0)
        close(f);
    crl_rm_rf_at(scratch, dname);
    return ret;
}

static json_t *runtime_config(const char *config)
{
    json_t *c = json_loads(config, 0, NULL);
    json_t *cc = json_object_get(c, "config");
    json_t *out = json_object();
    static const char *const keys[][2] = {{"Env", "env"},
                                          {"WorkingDir", "cwd"},
                                          {"User", "user"},
                                          {"Entrypoint", "entrypoint"},
                                          {"Cmd", "cmd"}};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(keys); i++) {
        json_t *v = json_object_get(cc, keys[i][0]);
        if (v && !json_is_null(v))
            json_object_set(out, keys[i][1], v);
    }
    const char *kind = kind_known(
        json_string_value(json_object_get(json_object_get(cc, "Labels"), CRL_IMAGE_KIND_LABEL)));
    if (kind)
        json_object_set_new(out, "kind", json_string(kind));
    json_decref(c);
    return out;
}

static json_t *result_json(struct crl_store *s, const struct crl_store_image *img, const char *name)
{
    json_t *j = crl_store_image_json(img);
    char **tags = NULL;
    json_t *names = json_array();
    if (list_tags(s, img->id, &tags, NULL) == 0)
        for (char **t = tags; *t; t++)
            json_array_append_new(names, json_string(*t));
    strv_free(tags);
    json_object_set_new(j, "name", json_string(name));
    json_object_set_new(j, "names", names);
    return j;
}

/* Everything of a read image into the store: layers, config, record, tag. */
static int commit(struct crl_store *s, int scratch, const char *scratch_path,
                  struct crl_oci_image *oi, const char *name, const struct crl_import_limits *lim,
                  json_t **out, struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (!name && !oi->name[0] && oi->label[0])
        return crl_err_set(err, CRL_E_INVALID,
                           "the image %s has no repository name of its own: give it one with "
                           "--name NAME:TAG (API: ?name=NAME:TAG)",
                           oi->label);
    if (!name && !oi->name[0])
        return crl_err_set(err, CRL_E_INVALID,
                           "the archive does not name its image: give it a name with --name "
                           "NAME:TAG (API: ?name=NAME:TAG)");
    if (crl_store_name_canon(name ? name : oi->name, canon, err) < 0)
        return -1;
    uint64_t total = 0;
    json_t *layers = json_array();
    bool built[CRL_IMAGE_MAX_LAYERS] = {false};
    for (size_t i = 0; i < oi->n_layers; i++) {
        const struct crl_oci_layer *L = &oi->layers[i];
        uint64_t size = 0;
        char digest[CRL_DIGEST_LEN + 1] = "", fname[32];
        int rc = layer_present(s, L->diff_id, &size, digest, err);
        if (rc > 0 && L->erofs_digest[0]) { /* pulled: checked here */
            snprintf(fname, sizeof(fname), "layer-%zu.erofs", i);
            rc = file_digest(scratch, fname, &size, digest, err);
            if (rc == 0 && strcmp(digest, L->erofs_digest) != 0)
                rc = crl_err_set(err, CRL_E_INVALID,
                                 "layer %zu (%s): digest mismatch: the file fetched is %s, but "
                                 "the image's record says %s",
                                 i, L->diff_id, digest, L->erofs_digest);
            built[i] = true;
        } else if (rc > 0) {
            rc = build_layer(scratch, scratch_path, i, L, lim, &total, &size, digest, err);
            built[i] = true;
        }
        if (rc < 0) {
            json_decref(layers);
            return -1;
        }
        json_array_append_new(layers, json_pack("{s:s, s:I, s:s}", "digest", L->diff_id, "size",
                                                (json_int_t)size, "file_digest", digest));
    }
    /* Every layer is good: only now does any of them enter the store. */
    for (size_t i = 0; i < oi->n_layers; i++) {
        char from[32], to[128];
        snprintf(from, sizeof(from), "layer-%zu.erofs", i);
        snprintf(to, sizeof(to), "layers/%s.erofs", crl_digest_hex(oi->layers[i].diff_id));
        if (built[i] && renameat(scratch, from, s->fd, to) < 0) {
            json_decref(layers);
            return crl_err_sys(err, errno, "layer %zu: into the store", i);
        }
    }
    cleanup_close int layers_fd = sub_fd(s, "layers", O_RDONLY);
    if (layers_fd >= 0)
        fsync(layers_fd);
    char file[128], when[64];
    snprintf(file, sizeof(file), "%s.json", crl_digest_hex(oi->id));
    cleanup_close int configs = sub_fd(s, "configs", O_RDONLY);
    cleanup_close int images = sub_fd(s, "images", O_RDONLY);
    if (configs < 0 || images < 0) {
        json_decref(layers);
        return crl_err_sys(err, errno, "image store %s", s->dir);
    }
    if (write_atomic(configs, file, oi->config, oi->config_len, err) < 0) {
        json_decref(layers);
        return -1;
    }
    crl_fmt_time(crl_wall_s(), when, sizeof(when));
    json_t *rec = runtime_config(oi->config);
    json_object_set_new(rec, "id", json_string(oi->id));
    json_object_set_new(rec, "layers", layers);
    json_object_set_new(rec, "created", json_string(when));
    struct crl_store_image *img = record_parse(rec, err);
    char *text = json_dumps(rec, JSON_SORT_KEYS);
    json_decref(rec);
    int r = -1;
    if (img && text && write_atomic(images, file, text, strlen(text), err) == 0 &&
        write_tag(s, canon, oi->id, err) == 0)
        r = 0;
    free(text);
    if (r == 0 && out)
        *out = result_json(s, img, canon);
    crl_store_image_free(img);
    return r;
}

/* A private scratch directory under tmp/, named by our pid. */
static int make_scratch(struct crl_store *s, char *path, size_t cap, struct crl_err *err)
{
    if (!s->writable)
        return crl_err_set(err, CRL_E_CONFLICT, "the image store %s is read-only", s->dir);
    char name[64];
    snprintf(name, sizeof(name), "tmp/%d.%u", (int)getpid(), s->seq++);
    if (mkdirat(s->fd, name, 0700) < 0)
        return crl_err_sys(err, errno, "image store %s/%s", s->dir, name);
    snprintf(path, cap, "%s/%s", s->dir, name);
    int fd = crl_openat(s->fd, name, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        crl_err_sys(err, errno, "%s", path);
    return fd;
}

static void drop_scratch(struct crl_store *s, int fd, const char *path)
{
    close(fd);
    const char *name = path + strlen(s->dir) + 1; /* "tmp/<pid>.<n>" */
    crl_rm_rf_at(s->fd, name);
}

static void fill_limits(const struct crl_import_limits *in, struct crl_import_limits *out)
{
    out->max_layer_bytes = lim_or(in ? in->max_layer_bytes : 0, 16ull << 30);
    out->max_total_bytes = lim_or(in ? in->max_total_bytes : 0, 64ull << 30);
    out->max_entries = lim_or(in ? in->max_entries : 0, 4u << 20);
}

/* Where an image comes from: `read` fills *oi, its files in the scratch
 * directory, from what `arg` says. */
typedef int (*source_fn)(struct crl_store *s, int scratch, const void *arg,
                         const struct crl_import_limits *lim, struct crl_oci_image *oi,
                         struct crl_err *err);

/* Every way in (an archive, a root filesystem, a pull): a scratch
 * directory, the store locked shared (against the garbage collector), the
 * image read from its source and committed. */
static int take_in(struct crl_store *s, source_fn read, const void *arg, const char *canon,
                   const struct crl_import_limits *lim_in, json_t **out, struct crl_err *err)
{
    struct crl_import_limits lim;
    fill_limits(lim_in, &lim);
    char spath[PATH_MAX];
    int scratch = make_scratch(s, spath, sizeof(spath), err);
    if (scratch < 0)
        return -1;
    int lock = store_lock(s, LOCK_SH, err);
    int ret = -1;
    struct crl_oci_image oi;
    memset(&oi, 0, sizeof(oi));
    if (lock >= 0 && read(s, scratch, arg, &lim, &oi, err) == 0)
        ret = commit(s, scratch, spath, &oi, canon, &lim, out, err);
    crl_oci_image_free(&oi);
    if (lock >= 0)
        close(lock);
    drop_scratch(s, scratch, spath);
    return ret;
}

struct archive_src {
    int fd;
    const char *dir, *ref;
};

static int from_archive(struct crl_store *s, int scratch, const void *arg,
                        const struct crl_import_limits *lim, struct crl_oci_image *oi,
                        struct crl_err *err)
{
    const struct archive_src *a = arg;
    return crl_oci_read(a->fd, a->dir, a->ref, scratch, lim, oi, err);
}

int crl_store_import(struct crl_store *s, int fd, const char *dir, const char *name,
                     const char *ref, const struct crl_import_limits *lim, json_t **out,
                     struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (name && crl_store_name_canon(name, canon, err) < 0)
        return -1;
    if (ref && crl_store_ref_check(ref, err) < 0)
        return -1;
    struct archive_src a = {fd, dir, ref};
    return take_in(s, from_archive, &a, name ? canon : NULL, lim, out, err);
}

/* ---- a root filesystem directory as a one-layer image ---- */

/* One blob of another store, fetched into scratch/<fname>. */
static int fetch_blob(int scratch, const char *fname, const char *digest, uint64_t max,
                      crl_store_fetch_fn fetch, void *ctx, struct crl_err *err)
{
    cleanup_close int fd = crl_openat(scratch, fname, O_RDWR | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return crl_err_sys(err, errno, "%s", fname);
    if (fetch(ctx, digest, fd, max, err) < 0)
        return crl_err_prefix(err, "%s", digest);
    if (fsync(fd) < 0)
        return crl_err_sys(err, errno, "%s", fname);
    return 0;
}

#define PULL_CONFIG_MAX (4u << 20)

/* The config of a pull: fetched, read back, and known by its digest. */
static int pull_config(int scratch, const char *id, crl_store_fetch_fn fetch, void *ctx,
                       struct crl_oci_image *oi, struct crl_err *err)
{
    if (fetch_blob(scratch, "config", id, PULL_CONFIG_MAX, fetch, ctx, err) < 0)
        return -1;
    cleanup_close int fd = crl_openat(scratch, "config", O_RDONLY, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return crl_err_sys(err, errno, "config");
    if ((uint64_t)st.st_size > PULL_CONFIG_MAX)
        return crl_err_set(err, CRL_E_TOO_LARGE, "the config of %s is over %u bytes", id,
                           PULL_CONFIG_MAX);
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return crl_err_sys(err, ENOMEM, "config");
    if (crl_read_full(fd, buf, (size_t)st.st_size) != st.st_size) {
        free(buf);
        return crl_err_sys(err, errno ? errno : EIO, "config");
    }
    buf[st.st_size] = 0;
    if (crl_oci_from_config(buf, (size_t)st.st_size, oi, err) < 0)
        return crl_err_prefix(err, "the config of %s", id);
    if (strcmp(oi->id, id) != 0)
        return crl_err_set(err, CRL_E_INVALID, "digest mismatch: the config fetched for %s is %s",
                           id, oi->id);
    return 0;
}

/* Which layers to fetch, from the other host's description checked
 * against the config; each is fetched into scratch/layer-<i>.erofs. */
static int pull_layers(struct crl_store *s, int scratch, const json_t *remote,
                       struct crl_oci_image *oi, crl_store_fetch_fn fetch, void *ctx,
                       const struct crl_import_limits *lim, struct crl_err *err)
{
    json_t *rl = json_object_get(remote, "layers");
    if (json_array_size(rl) != oi->n_layers)
        return crl_err_set(err, CRL_E_INVALID,
                           "the image's record lists %zu layers, its config %zu",
                           json_array_size(rl), oi->n_layers);
    uint64_t total = 0;
    for (size_t i = 0; i < oi->n_layers; i++) {
        struct crl_oci_layer *L = &oi->layers[i];
        json_t *l = json_array_get(rl, i);
        const char *d = json_string_value(json_object_get(l, "digest"));
        const char *fd = json_string_value(json_object_get(l, "file_digest"));
        json_t *sz = json_object_get(l, "size");
        if (!d || strcmp(d, L->diff_id) != 0)
            return crl_err_set(err, CRL_E_INVALID,
                               "layer %zu: the image's record names %.80s, its config %s", i,
                               d ? d : "nothing", L->diff_id);
        char path[128];
        snprintf(path, sizeof(path), "layers/%s.erofs", crl_digest_hex(L->diff_id));
        if (faccessat(s->fd, path, F_OK, 0) == 0)
            continue; /* here already */
        if (!crl_digest_valid(fd))
            return crl_err_set(err, CRL_E_UNSUPPORTED,
                               "layer %zu (%s): the other host's record of it has no "
                               "file_digest (made by an older corral): import the image "
                               "there again, or here",
                               i, L->diff_id);
        if (!json_is_integer(sz) || json_integer_value(sz) <= 0 ||
            (uint64_t)json_integer_value(sz) > lim->max_layer_bytes)
            return crl_err_set(err, json_integer_value(sz) > 0 ? CRL_E_TOO_LARGE : CRL_E_INVALID,
                               "layer %zu (%s): size %lld (at most %llu)", i, L->diff_id,
                               json_integer_value(sz), (unsigned long long)lim->max_layer_bytes);
        uint64_t size = (uint64_t)json_integer_value(sz);
        if ((total += size) > lim->max_total_bytes)
            return crl_err_set(err, CRL_E_TOO_LARGE, "the image's layers are over %llu bytes",
                               (unsigned long long)lim->max_total_bytes);
        char fname[32];
        snprintf(fname, sizeof(fname), "layer-%zu.erofs", i);
        if (fetch_blob(scratch, fname, L->diff_id, size, fetch, ctx, err) < 0)
            return crl_err_prefix(err, "layer %zu", i);
        snprintf(L->erofs_digest, sizeof(L->erofs_digest), "%s", fd); /* commit() checks it */
    }
    return 0;
}

struct pull_src {
    const json_t *remote;
    crl_store_fetch_fn fetch;
    void *ctx;
};

static int from_peer(struct crl_store *s, int scratch, const void *arg,
                     const struct crl_import_limits *lim, struct crl_oci_image *oi,
                     struct crl_err *err)
{
    const struct pull_src *p = arg;
    const char *id = json_string_value(json_object_get(p->remote, "id"));
    if (!crl_digest_valid(id))
        return crl_err_set(err, CRL_E_INVALID, "the image's record has no id");
    if (pull_config(scratch, id, p->fetch, p->ctx, oi, err) < 0)
        return -1;
    return pull_layers(s, scratch, p->remote, oi, p->fetch, p->ctx, lim, err);
}

int crl_store_pull(struct crl_store *s, const json_t *remote, const char *name,
                   crl_store_fetch_fn fetch, void *ctx, const struct crl_import_limits *lim,
                   json_t **out, struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (crl_store_name_canon(name, canon, err) < 0)
        return -1;
    struct pull_src p = {remote, fetch, ctx};
    return take_in(s, from_peer, &p, canon, lim, out, err);
}

const char *crl_store_arch(void)
{
    static const char *const arches[][2] = {
        {"x86_64", "amd64"},    {"aarch64", "arm64"},   {"i686", "386"},    {"armv7l", "arm"},
        {"riscv64", "riscv64"}, {"ppc64le", "ppc64le"}, {"s390x", "s390x"},
    };
    static char arch[65];
    struct utsname u;
    if (arch[0])
        return arch;
    if (uname(&u) < 0)
        return "amd64";
    snprintf(arch, sizeof(arch), "%s", u.machine);
    for (size_t i = 0; i < CRL_ARRAY_SIZE(arches); i++)
        if (strcmp(u.machine, arches[i][0]) == 0)
            snprintf(arch, sizeof(arch), "%s", arches[i][1]);
    return arch;
}

json_t *crl_store_config_json(const json_t *runtime, const char *diff_id)
{
    static const char *const keys[][2] = {{"env", "Env"},
                                          {"cwd", "WorkingDir"},
                                          {"user", "User"},
                                          {"entrypoint", "Entrypoint"},
                                          {"cmd", "Cmd"}};
    json_t *cc = json_object();
    for (size_t i = 0; i < CRL_ARRAY_SIZE(keys); i++) {
        json_t *v = json_object_get(runtime, keys[i][0]);
        if (v)
            json_object_set(cc, keys[i][1], v);
    }
    /* Only a vm image gets Labels: an ordinary image's config, and so its
     * id, is what it was before images had kinds. */
    const char *kind = kind_known(json_string_value(json_object_get(runtime, "kind")));
    if (kind)
        json_object_set_new(cc, "Labels", json_pack("{s:s}", CRL_IMAGE_KIND_LABEL, kind));
    return json_pack("{s:s, s:s, s:o, s:{s:s, s:[s]}}", "architecture", crl_store_arch(), "os",
                     "linux", "config", cc, "rootfs", "type", "layers", "diff_ids", diff_id);
}

struct rootfs_src {
    const char *rootfs;
    const json_t *config;
};

static int from_rootfs(struct crl_store *s, int scratch, const void *arg,
                       const struct crl_import_limits *lim, struct crl_oci_image *oi,
                       struct crl_err *err)
{
    const struct rootfs_src *r = arg;
    struct crl_oci_layer *L = calloc(1, sizeof(*L));
    if (!L)
        return crl_err_sys(err, ENOMEM, "layer");
    oi->layers = L; /* freed with oi, its fd closed */
    oi->n_layers = 1;
    L->fd = crl_openat(scratch, "rootfs.tar", O_RDWR | O_CREAT | O_EXCL, 0600);
    if (L->fd < 0)
        return crl_err_sys(err, errno, "a scratch rootfs.tar in %s/tmp", s->dir);
    if (crl_layer_from_dir(r->rootfs, L->fd, L->diff_id, err) < 0)
        return -1;
    snprintf(L->blob, sizeof(L->blob), "%s", L->diff_id);
    json_t *cfg = crl_store_config_json(r->config, L->diff_id);
    oi->config = json_dumps(cfg, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(cfg);
    if (!oi->config)
        return crl_err_sys(err, ENOMEM, "config");
    oi->config_len = strlen(oi->config);
    crl_sha256_buf(oi->config, oi->config_len, oi->id);
    return 0;
}

int crl_store_import_rootfs(struct crl_store *s, const char *rootfs, const json_t *config,
                            const char *name, json_t **out, struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (crl_store_name_canon(name, canon, err) < 0)
        return -1;
    struct rootfs_src r = {rootfs, config};
    return take_in(s, from_rootfs, &r, canon, NULL, out, err);
}

/* ---- garbage collection ---- */

static int collect_refs(struct crl_store *s, char ***out, struct crl_err *err)
{
    size_t n = 0;
    char **v = calloc(1, sizeof(char *));
    int fd = sub_fd(s, "images", O_RDONLY);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!v || !d) {
        if (fd >= 0 && !d)
            close(fd);
        free(v);
        return crl_err_sys(err, errno ? errno : ENOMEM, "image store %s/images", s->dir);
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strlen(de->d_name) != 64 + 5 || strcmp(de->d_name + 64, ".json") != 0)
            continue;
        char id[CRL_DIGEST_LEN + 1];
        snprintf(id, sizeof(id), "sha256:%.64s", de->d_name);
        struct crl_store_image *img = NULL;
        if (load_record(s, id, &img, NULL) < 0)
            continue;
        char **nv = realloc(v, (n + img->n_layers + 2) * sizeof(char *));
        if (!nv) {
            crl_store_image_free(img);
            break;
        }
        v = nv;
        for (size_t i = 0; i < img->n_layers; i++)
            v[n++] = strdup(crl_digest_hex(img->layers[i].digest));
        v[n++] = strdup(crl_digest_hex(id));
        v[n] = NULL;
        crl_store_image_free(img);
    }
    closedir(d);
    *out = v;
    return 0;
}

static bool referenced(char **refs, const char *hex)
{
    for (char **p = refs; *p; p++)
        if (strncmp(*p, hex, 64) == 0)
            return true;
    return false;
}

static void sweep(struct crl_store *s, const char *sub, const char *suffix, char **refs,
                  uint64_t *removed, uint64_t *freed)
{
    int fd = sub_fd(s, sub, O_RDONLY);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    size_t sl = strlen(suffix);
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || strlen(de->d_name) != 64 + sl ||
            strcmp(de->d_name + 64, suffix) != 0 || referenced(refs, de->d_name))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            unlinkat(dirfd(d), de->d_name, 0) == 0) {
            if (removed)
                (*removed)++;
            *freed += (uint64_t)st.st_size;
        }
    }
    closedir(d);
}

int crl_store_gc(struct crl_store *s, uint64_t *layers_removed, uint64_t *bytes_freed,
                 struct crl_err *err)
{
    *layers_removed = *bytes_freed = 0;
    if (!s->writable)
        return crl_err_set(err, CRL_E_CONFLICT, "the image store %s is read-only", s->dir);
    int lock = store_lock(s, LOCK_EX | LOCK_NB, err);
    if (lock < 0)
        return -1;
    char **refs = NULL;
    int ret = collect_refs(s, &refs, err);
    if (ret == 0) {
        sweep(s, "layers", ".erofs", refs, layers_removed, bytes_freed);
        sweep(s, "configs", ".json", refs, NULL, bytes_freed);
        strv_free(refs);
        remove_stale_tmp(s);
    }
    close(lock);
    return ret;
}
