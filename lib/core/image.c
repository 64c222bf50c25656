#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "../util/run.h"

/* A layer mounted once, shared by every image (and sandbox) that has it. */
struct layer_mount {
    char digest[CRL_DIGEST_LEN + 1];
    size_t store;
    int fd;
    unsigned refs;
};

struct crl_image_store {
    struct crl_store **stores; /* [0] writable, then --images-from */
    size_t n_stores;
    struct crl_image **live; /* every image in use or cached (findable by name) */
    size_t n_live;
    struct layer_mount *mounts;
    size_t n_mounts;
};

static const char default_path[] =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/* The image's environment, with PATH and HOME when it sets neither (as
 * Docker does: HOME is the user's home in the image's /etc/passwd, else /). */
static char **env_with_defaults(char **env, const char *home)
{
    size_t n = 0;
    bool path = false, has_home = false;
    for (char **p = env; p && *p; p++, n++) {
        path |= strncmp(*p, "PATH=", 5) == 0;
        has_home |= strncmp(*p, "HOME=", 5) == 0;
    }
    char **v = calloc(n + 3, sizeof(char *));
    size_t i = 0;
    for (char **p = env; v && p && *p; p++)
        if (!(v[i++] = strdup(*p)))
            goto nomem;
    if (v && !path && !(v[i++] = strdup(default_path)))
        goto nomem;
    if (v && !has_home && asprintf(&v[i++], "HOME=%s", home) < 0) {
        v[i - 1] = NULL;
        goto nomem;
    }
    return v;
nomem:
    crl_strv_free(v);
    return NULL;
}

/* ---- layer mounts ---- */

int crl_image_open_layer(const struct crl_image *img, size_t i, struct crl_err *err)
{
    const struct crl_store_image *rec = img->rec;
    if (i >= rec->n_layers)
        return crl_err_set(err, CRL_E_INTERNAL, "image %s has no layer %zu", img->name, i);
    char path[4096];
    const char *digest = rec->layers[rec->n_layers - 1 - i].digest;
    if (crl_store_layer_path(img->owner->stores[img->store], digest, path, sizeof(path)) < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "image %s: layer %s: path too long", img->name,
                           digest);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return crl_err_sys(err, errno, "image %s: open layer %s", img->name, path);
    return fd;
}

static int mount_get(struct crl_image_store *s, size_t store, const char *digest,
                     struct crl_err *err)
{
    for (size_t i = 0; i < s->n_mounts; i++)
        if (s->mounts[i].store == store && strcmp(s->mounts[i].digest, digest) == 0) {
            s->mounts[i].refs++;
            return s->mounts[i].fd;
        }
    struct layer_mount *v = realloc(s->mounts, (s->n_mounts + 1) * sizeof(*v));
    if (!v)
        return crl_err_sys(err, ENOMEM, "layer mounts");
    s->mounts = v;
    int fd = crl_store_mount_layer(s->stores[store], digest, err);
    if (fd < 0)
        return -1;
    struct layer_mount *m = &v[s->n_mounts++];
    snprintf(m->digest, sizeof(m->digest), "%s", digest);
    m->store = store;
    m->fd = fd;
    m->refs = 1;
    return fd;
}

static void mount_put(struct crl_image_store *s, int fd)
{
    for (size_t i = 0; i < s->n_mounts; i++)
        if (s->mounts[i].fd == fd) {
            if (--s->mounts[i].refs == 0) {
                close(fd);
                s->mounts[i] = s->mounts[--s->n_mounts];
            }
            return;
        }
}

/* ---- images ---- */

/* A file of the image, read through its layers from the top: the first
 * layer that has it (or a whiteout of it) decides. */
static char *image_file(const struct crl_image *img, const char *path)
{
    for (size_t i = 0; i < img->n_layers; i++) {
        struct stat st;
        if (fstatat(img->layer_fds[i], path, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (!S_ISREG(st.st_mode) || st.st_size > (4 << 20))
            return NULL;
        cleanup_close int fd = crl_openat(img->layer_fds[i], path, O_RDONLY | O_NOFOLLOW, 0);
        char *buf = malloc((size_t)st.st_size + 1);
        ssize_t n = fd >= 0 && buf ? crl_read_full(fd, buf, (size_t)st.st_size) : -1;
        if (n < 0) {
            free(buf);
            return NULL;
        }
        buf[n] = 0;
        return buf;
    }
    return NULL;
}

/* In passwd or group text, the line whose field 0 (name) or 2 (id) is
 * `key`: its id (field 2) and, for passwd, its group (field 3) and home
 * (field 5). */
static bool db_find(const char *text, const char *key, bool by_id, unsigned long *id,
                    unsigned long *gid, char *home, size_t home_cap)
{
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[1024];
        if (len < sizeof(buf)) {
            memcpy(buf, line, len);
            buf[len] = 0;
            char *f[7] = {0};
            char *p = buf;
            for (int i = 0; i < 7 && p; i++) {
                f[i] = p;
                p = strchr(p, ':');
                if (p)
                    *p++ = 0;
            }
            if (f[2] && strcmp(by_id ? f[2] : f[0], key) == 0) {
                *id = strtoul(f[2], NULL, 10);
                if (gid)
                    *gid = f[3] ? strtoul(f[3], NULL, 10) : 0;
                if (home && f[5] && *f[5])
                    snprintf(home, home_cap, "%s", f[5]);
                return true;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return false;
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* The image's User ("", "name", "uid", "name:group", "uid:gid"), as Docker
 * reads it: a user without a group takes its passwd group, else 0. */
static void resolve_user(struct crl_image *img)
{
    char spec[256];
    snprintf(spec, sizeof(spec), "%s", img->user && *img->user ? img->user : "0:0");
    char *grp = strchr(spec, ':');
    if (grp)
        *grp++ = 0;
    cleanup_free char *passwd = image_file(img, "etc/passwd");
    cleanup_free char *group = grp && !all_digits(grp) ? image_file(img, "etc/group") : NULL;
    unsigned long uid = 0, gid = 0, pgid = 0;
    bool numeric = all_digits(spec);
    if (numeric) {
        uid = strtoul(spec, NULL, 10);
        if (!db_find(passwd, spec, true, &uid, &pgid, img->home, sizeof(img->home)))
            pgid = 0;
    } else if (!db_find(passwd, spec, false, &uid, &pgid, img->home, sizeof(img->home))) {
        if (asprintf(&img->user_error, "the image's user %s is not in its /etc/passwd", spec) < 0)
            img->user_error = NULL;
        return;
    }
    gid = pgid;
    if (grp && all_digits(grp))
        gid = strtoul(grp, NULL, 10);
    else if (grp && !db_find(group, grp, false, &gid, NULL, NULL, 0)) {
        if (asprintf(&img->user_error, "the image's group %s is not in its /etc/group", grp) < 0)
            img->user_error = NULL;
        return;
    }
    if (uid > 65535 || gid > 65535) {
        if (asprintf(&img->user_error, "the image's user %s maps to ids above 65535", img->user) <
            0)
            img->user_error = NULL;
        return;
    }
    img->run_as = (struct crl_user){.uid = (uid_t)uid, .gid = (gid_t)gid, .set = true};
}

int crl_image_user(const struct crl_image *img, struct crl_user *out, struct crl_err *err)
{
    if (!img->run_as.set)
        return crl_err_set(err, CRL_E_INVALID, "%s; give a user",
                           img->user_error ? img->user_error : "the image's user is unknown");
    *out = img->run_as;
    return 0;
}

char **crl_image_default_argv(const struct crl_image *img, struct crl_err *err)
{
    size_t n = 0;
    for (char **p = img->entrypoint; p && *p; p++)
        n++;
    for (char **p = img->cmd; p && *p; p++)
        n++;
    if (n == 0) {
        crl_err_set(err, CRL_E_INVALID, "cmd is required: the image %s has no entrypoint or cmd",
                    img->name);
        return NULL;
    }
    char **v = calloc(n + 1, sizeof(char *));
    size_t i = 0;
    for (char **p = img->entrypoint; v && p && *p; p++)
        if (!(v[i++] = strdup(*p)))
            goto nomem;
    for (char **p = img->cmd; v && p && *p; p++)
        if (!(v[i++] = strdup(*p)))
            goto nomem;
    if (v)
        return v;
nomem:
    for (size_t k = 0; v && k < i; k++)
        free(v[k]);
    free(v);
    crl_err_sys(err, ENOMEM, "argv");
    return NULL;
}

static void image_free(struct crl_image *img)
{
    struct crl_image_store *s = img->owner;
    for (size_t i = 0; i < s->n_live; i++)
        if (s->live[i] == img) {
            s->live[i] = s->live[--s->n_live];
            break;
        }
    for (size_t i = 0; i < img->n_layers; i++)
        if (img->layer_fds[i] >= 0)
            mount_put(img->owner, img->layer_fds[i]);
    free(img->layer_fds);
    crl_store_image_free(img->rec);
    free(img->user_error);
    crl_strv_free(img->env);
    free(img);
}

bool crl_image_is_vm(const struct crl_image *img)
{
    return img->rec && img->rec->kind && strcmp(img->rec->kind, "vm") == 0;
}

void crl_image_put(struct crl_image *img)
{
    if (img && --img->refs == 0)
        image_free(img);
}

/* The first store that has `name`: its index, and the record. */
static int find(struct crl_image_store *s, const char *name, struct crl_store_image **rec,
                struct crl_err *err)
{
    for (size_t i = 0; i < s->n_stores; i++) {
        struct crl_err e = CRL_ERR_INIT;
        if (crl_store_lookup(s->stores[i], name, rec, &e) == 0)
            return (int)i;
        if (e.code != CRL_E_NOT_FOUND) {
            *err = e;
            return -1;
        }
    }
    /* Name what there is. */
    char avail[512] = "";
    size_t off = 0;
    for (size_t i = 0; i < s->n_stores && off < sizeof(avail); i++) {
        char **tags = NULL;
        if (crl_store_tags(s->stores[i], &tags, NULL) < 0)
            continue;
        for (char **t = tags; *t && off < sizeof(avail); t++)
            off += (size_t)snprintf(avail + off, sizeof(avail) - off, "%s%s", off ? ", " : "", *t);
        for (char **t = tags; *t; t++)
            free(*t);
        free(tags);
    }
    return crl_err_set(err, CRL_E_NOT_FOUND, "image '%s' not found (available: %s)", name,
                       off ? avail : "none");
}

static struct crl_image *image_load(struct crl_image_store *s, const char *name,
                                    struct crl_err *err)
{
    struct crl_store_image *rec = NULL;
    int store = find(s, name, &rec, err);
    if (store < 0)
        return NULL;
    struct crl_image *img = calloc(1, sizeof(*img));
    if (!img || !(img->layer_fds = calloc(rec->n_layers + 1, sizeof(int)))) {
        free(img);
        crl_store_image_free(rec);
        crl_err_sys(err, ENOMEM, "image %s", name);
        return NULL;
    }
    snprintf(img->name, sizeof(img->name), "%s", name);
    img->rec = rec;
    img->owner = s;
    img->refs = 1;
    img->origin = store == 0 ? "store" : "images-from";
    img->store = (size_t)store;
    /* overlayfs wants the top layer first */
    for (size_t i = 0; i < rec->n_layers; i++) {
        int fd = mount_get(s, (size_t)store, rec->layers[rec->n_layers - 1 - i].digest, err);
        if (fd < 0) {
            crl_err_prefix(err, "image %s", name);
            image_free(img);
            return NULL;
        }
        img->layer_fds[img->n_layers++] = fd;
    }
    img->cwd = rec->cwd;
    img->user = rec->user;
    img->entrypoint = rec->entrypoint;
    img->cmd = rec->cmd;
    snprintf(img->home, sizeof(img->home), "/");
    resolve_user(img);
    if (!(img->env = env_with_defaults(rec->env, img->home))) {
        crl_err_sys(err, ENOMEM, "image %s", name);
        image_free(img);
        return NULL;
    }
    return img;
}

struct crl_image *crl_image_get(struct crl_image_store *s, const char *name, struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    struct crl_err e = CRL_ERR_INIT;
    const char *key = crl_store_name_canon(name, canon, &e) == 0 ? canon : name;
    for (size_t i = 0; i < s->n_live; i++)
        if (s->live[i]->cached && strcmp(s->live[i]->name, key) == 0) {
            s->live[i]->refs++;
            return s->live[i];
        }
    struct crl_image **v = realloc(s->live, (s->n_live + 1) * sizeof(*v));
    if (!v) {
        crl_err_sys(err, ENOMEM, "image cache");
        return NULL;
    }
    s->live = v;
    struct crl_image *img = image_load(s, key, err);
    if (!img)
        return NULL;
    s->live[s->n_live++] = img;
    img->cached = true; /* the cache's reference, and the caller's */
    img->refs++;
    return img;
}

/* Drop the cache's reference to images named `canon` (all, if NULL): the
 * next lookup reads the store again; sandboxes keep what they have. */
static void uncache(struct crl_image_store *s, const char *canon)
{
    for (size_t i = s->n_live; i-- > 0;) {
        struct crl_image *img = s->live[i];
        if (img->cached && (!canon || strcmp(img->name, canon) == 0)) {
            img->cached = false;
            crl_image_put(img); /* may remove it from live[] */
        }
    }
}

void crl_image_store_changed(struct crl_image_store *s)
{
    uncache(s, NULL);
}

/* Sandboxes using the image `id` of store `store`, under any name, cached
 * or not. */
static unsigned users_of(struct crl_image_store *s, const char *id, const char *origin)
{
    unsigned n = 0;
    for (size_t i = 0; i < s->n_live; i++)
        if (strcmp(s->live[i]->rec->id, id) == 0 && s->live[i]->origin == origin)
            n += s->live[i]->refs - (s->live[i]->cached ? 1 : 0);
    return n;
}

static json_t *image_json(struct crl_image_store *s, size_t store,
                          const struct crl_store_image *rec, const char *name)
{
    const char *origin = store == 0 ? "store" : "images-from";
    json_t *j = crl_store_image_json(rec);
    json_t *names = json_array();
    char **tags = NULL;
    if (crl_store_tags_of(s->stores[store], rec->id, &tags, NULL) == 0) {
        for (char **t = tags; *t; t++) {
            json_array_append_new(names, json_string(*t));
            free(*t);
        }
        free(tags);
    }
    if (!rec->env)
        json_object_set_new(j, "env", json_array()); /* execs add PATH and HOME */
    json_object_set_new(j, "name", json_string(name));
    json_object_set_new(j, "names", names);
    json_object_set_new(j, "origin", json_string(origin));
    json_object_set_new(j, "store", json_string(crl_store_dir(s->stores[store])));
    json_object_set_new(j, "sandboxes", json_integer(users_of(s, rec->id, origin)));
    return j;
}

json_t *crl_image_inspect_json(struct crl_image_store *s, const char *name, struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    struct crl_err e = CRL_ERR_INIT;
    const char *key = crl_store_name_canon(name, canon, &e) == 0 ? canon : name;
    struct crl_store_image *rec = NULL;
    int store = find(s, key, &rec, err);
    if (store < 0)
        return NULL;
    json_t *j = image_json(s, (size_t)store, rec, key);
    crl_store_image_free(rec);
    return j;
}

int crl_image_blob_open(struct crl_image_store *s, const char *digest, uint64_t *size,
                        struct crl_err *err)
{
    for (size_t i = 0; i < s->n_stores; i++) {
        struct crl_err e = CRL_ERR_INIT;
        int fd = crl_store_blob_open(s->stores[i], digest, &e);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            *size = (uint64_t)st.st_size;
            return fd;
        }
        if (fd >= 0)
            close(fd);
        else if (e.code != CRL_E_NOT_FOUND)
            return crl_err_set(err, e.code, "%s", e.msg);
    }
    return crl_err_set(err, CRL_E_NOT_FOUND, "no image of this host has a blob %s", digest);
}

json_t *crl_image_list_json(struct crl_image_store *s)
{
    json_t *a = json_array();
    json_t *seen = json_object();
    for (size_t i = 0; i < s->n_stores; i++) {
        char **tags = NULL;
        if (crl_store_tags(s->stores[i], &tags, NULL) < 0)
            continue;
        for (char **t = tags; *t; t++) {
            struct crl_store_image *rec = NULL;
            /* a name in an earlier store hides the same name in a later one */
            if (!json_object_get(seen, *t) && crl_store_lookup(s->stores[i], *t, &rec, NULL) == 0) {
                json_array_append_new(a, image_json(s, i, rec, *t));
                json_object_set_new(seen, *t, json_true());
                crl_store_image_free(rec);
            }
            free(*t);
        }
        free(tags);
    }
    json_decref(seen);
    return json_pack("{s:o}", "images", a);
}

int crl_image_remove(struct crl_image_store *s, const char *name, unsigned spare,
                     struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (crl_store_name_canon(name, canon, err) < 0)
        return -1;
    struct crl_store_image *rec = NULL;
    int store = find(s, canon, &rec, err);
    if (store < 0)
        return -1;
    int r = -1;
    unsigned users = users_of(s, rec->id, store == 0 ? "store" : "images-from");
    users = users > spare ? users - spare : 0;
    if (store != 0)
        crl_err_set(err, CRL_E_CONFLICT, "image %s is in the read-only store %s", canon,
                    crl_store_dir(s->stores[store]));
    else if (users)
        crl_err_set(err, CRL_E_CONFLICT, "image %s is used by %u sandbox%s", canon, users,
                    users == 1 ? "" : "es");
    else if ((r = crl_store_untag(s->stores[0], canon, err)) == 0)
        uncache(s, canon);
    crl_store_image_free(rec);
    return r;
}

int crl_image_tag(struct crl_image_store *s, const char *src, const char *dst, json_t **out,
                  struct crl_err *err)
{
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (crl_store_name_canon(dst, canon, err) < 0)
        return -1;
    struct crl_store_image *rec = NULL;
    int store = find(s, src, &rec, err);
    if (store < 0)
        return -1;
    crl_store_image_free(rec);
    if (store != 0)
        return crl_err_set(err, CRL_E_CONFLICT,
                           "image %s is in the read-only store %s: it can only be tagged there",
                           src, crl_store_dir(s->stores[store]));
    if (crl_store_tag(s->stores[0], src, canon, err) < 0)
        return -1;
    uncache(s, canon);
    *out = crl_image_inspect_json(s, canon, err);
    return *out ? 0 : -1;
}

json_t *crl_image_gc(struct crl_image_store *s, struct crl_err *err)
{
    uint64_t n = 0, bytes = 0;
    if (crl_store_gc(s->stores[0], &n, &bytes, err) < 0)
        return NULL;
    return json_pack("{s:I, s:I}", "layers_removed", (json_int_t)n, "bytes_freed",
                     (json_int_t)bytes);
}

const char *crl_image_store_dir(const struct crl_image_store *s)
{
    return crl_store_dir(s->stores[0]);
}

/* ---- busybox ---- */

static const char busybox_passwd[] = "root:x:0:0:root:/root:/bin/sh\n"
                                     "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
static const char busybox_group[] = "root:x:0:\ntty:x:5:\nusers:x:100:\nnogroup:x:65534:\n";

static int write_file(const char *path, const char *content, mode_t mode, struct crl_err *err)
{
    cleanup_close int fd = crl_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0 || crl_write_full(fd, content, strlen(content)) < 0)
        return crl_err_sys(err, errno, "writing %s", path);
    return 0;
}

static int copy_file(const char *src, const char *dst, mode_t mode, struct crl_err *err)
{
    cleanup_close int in = crl_openat(AT_FDCWD, src, O_RDONLY, 0);
    if (in < 0)
        return crl_err_sys(err, errno, "open %s", src);
    cleanup_close int out = crl_openat(AT_FDCWD, dst, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (out < 0)
        return crl_err_sys(err, errno, "create %s", dst);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        if (crl_write_full(out, buf, (size_t)n) < 0)
            return crl_err_sys(err, errno, "write %s", dst);
    if (n < 0)
        return crl_err_sys(err, errno, "read %s", src);
    return 0;
}

/* `busybox --list-full` names every applet with its directory. */
static int busybox_applets(const char *bin, char **out, struct crl_err *err)
{
    char *argv[] = {(char *)bin, (char *)"--list-full", NULL};
    char *envp[] = {NULL};
    int status;
    if (crl_run_capture(argv, envp, 0, 1u << 20, out, &status, err) < 0)
        return -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !**out) {
        free(*out);
        *out = NULL;
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s --list-full failed: is it Debian's busybox-static?", bin);
    }
    return 0;
}

/* The busybox image: the static binary, its applets as symlinks, and the
 * few files of /etc a shell expects; built in a scratch directory, then
 * imported as a one-layer image. */
int crl_image_build_busybox(struct crl_store *store, const char *busybox_bin, struct crl_err *err)
{
    const char *bin = busybox_bin ? busybox_bin : "/bin/busybox";
    char tmp[PATH_MAX], p[PATH_MAX] = "";
    cleanup_free char *applets = NULL;
    snprintf(tmp, sizeof(tmp), "%s/tmp/%d.busybox", crl_store_dir(store), (int)getpid());
    crl_rm_rf_at(AT_FDCWD, tmp);
    static const char *const dirs[] = {
        "rootfs",         "rootfs/bin",      "rootfs/sbin",    "rootfs/usr",
        "rootfs/usr/bin", "rootfs/usr/sbin", "rootfs/etc",     "rootfs/root",
        "rootfs/home",    "rootfs/var",      "rootfs/var/tmp", "rootfs/run",
        "rootfs/proc",    "rootfs/sys",      "rootfs/dev",     "rootfs/tmp"};
    if (crl_mkdir_p(tmp, 0700) < 0)
        return crl_err_sys(err, errno, "mkdir %s", tmp);
    for (size_t i = 0; i < CRL_ARRAY_SIZE(dirs); i++) {
        snprintf(p, sizeof(p), "%s/%s", tmp, dirs[i]);
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            goto sys_fail;
        chmod(p, 0755);
    }
    snprintf(p, sizeof(p), "%s/rootfs/tmp", tmp);
    chmod(p, 01777);
    snprintf(p, sizeof(p), "%s/rootfs/var/tmp", tmp);
    chmod(p, 01777);
    snprintf(p, sizeof(p), "%s/rootfs/root", tmp);
    chmod(p, 0700);
    snprintf(p, sizeof(p), "%s/rootfs/bin/busybox", tmp);
    if (copy_file(bin, p, 0755, err) < 0)
        goto fail;
    if (busybox_applets(bin, &applets, err) < 0)
        goto fail;
    for (char *line = applets; *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (*line && !strstr(line, "..") && strcmp(line, "bin/busybox") != 0) {
            snprintf(p, sizeof(p), "%s/rootfs/%s", tmp, line);
            if (symlink("/bin/busybox", p) < 0 && errno != EEXIST)
                goto sys_fail;
        }
        if (!nl)
            break;
        line = nl + 1;
    }
    snprintf(p, sizeof(p), "%s/rootfs/etc/passwd", tmp);
    if (write_file(p, busybox_passwd, 0644, err) < 0)
        goto fail;
    snprintf(p, sizeof(p), "%s/rootfs/etc/group", tmp);
    if (write_file(p, busybox_group, 0644, err) < 0)
        goto fail;
    snprintf(p, sizeof(p), "%s/rootfs/etc/hosts", tmp);
    if (write_file(p, "127.0.0.1\tlocalhost\n::1\tlocalhost\n", 0644, err) < 0)
        goto fail;
    json_t *cfg = json_pack("{s:[s,s], s:s, s:s, s:[s]}", "env",
                            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                            "HOME=/root", "cwd", "/", "user", "0:0", "cmd", "/bin/sh");
    snprintf(p, sizeof(p), "%s/rootfs", tmp);
    int r = crl_store_import_rootfs(store, p, cfg, "busybox", NULL, err);
    json_decref(cfg);
    crl_rm_rf_at(AT_FDCWD, tmp);
    return r;
sys_fail:
    crl_err_sys(err, errno, "building the busybox image at %s", p);
fail:
    crl_rm_rf_at(AT_FDCWD, tmp);
    return -1;
}

int crl_image_store_open(const char *state_dir, const char *images_dir,
                         const char *const *images_from, size_t n_from, const char *busybox_bin,
                         struct crl_image_store **out, struct crl_err *err)
{
    struct crl_image_store *s = calloc(1, sizeof(*s));
    if (!s || !(s->stores = calloc(n_from + 1, sizeof(*s->stores)))) {
        free(s);
        return crl_err_sys(err, ENOMEM, "image store");
    }
    char dir[PATH_MAX];
    if (images_dir)
        snprintf(dir, sizeof(dir), "%s", images_dir);
    else
        snprintf(dir, sizeof(dir), "%s/images", state_dir);
    if (crl_store_open(dir, true, &s->stores[0], err) < 0)
        goto fail;
    s->n_stores = 1;
    struct crl_store_image *rec = NULL;
    if (crl_store_lookup(s->stores[0], "busybox:latest", &rec, NULL) < 0) {
        crl_info(NULL, "building the busybox image from %s",
                 busybox_bin ? busybox_bin : "/bin/busybox");
        if (crl_image_build_busybox(s->stores[0], busybox_bin, err) < 0)
            goto fail;
    }
    crl_store_image_free(rec);
    for (size_t i = 0; i < n_from; i++) {
        if (crl_store_open(images_from[i], false, &s->stores[s->n_stores], err) < 0)
            goto fail;
        s->n_stores++;
    }
    *out = s;
    return 0;
fail:
    crl_image_store_free(s);
    return -1;
}

void crl_image_store_free(struct crl_image_store *s)
{
    if (!s)
        return;
    crl_image_store_changed(s);
    free(s->live);
    for (size_t i = 0; i < s->n_mounts; i++)
        close(s->mounts[i].fd);
    free(s->mounts);
    for (size_t i = 0; i < s->n_stores; i++)
        crl_store_close(s->stores[i]);
    free(s->stores);
    free(s);
}
