#include "image.h"

#include <dirent.h>
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
#include "spec.h"

struct crl_image_store {
    struct crl_image **images;
    size_t n;
};

static void image_free(struct crl_image *img)
{
    if (!img)
        return;
    if (img->rootfs_fd >= 0)
        close(img->rootfs_fd);
    crl_strv_free(img->env);
    crl_strv_free(img->entrypoint);
    crl_strv_free(img->cmd);
    free(img->cwd);
    free(img->user);
    free(img);
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
            crl_strv_free(v);
            return NULL;
        }
    }
    return v;
}

static json_t *strv_to_json(char **v)
{
    json_t *a = json_array();
    for (; v && *v; v++)
        json_array_append_new(a, json_string(*v));
    return a;
}

static int load_image(const char *dir, const char *name, const char *origin, struct crl_image **out,
                      struct crl_err *err)
{
    struct crl_image *img = calloc(1, sizeof(*img));
    if (!img)
        return crl_err_sys(err, ENOMEM, "image %s", name);
    img->rootfs_fd = -1;
    img->origin = origin;
    snprintf(img->name, sizeof(img->name), "%s", name);
    snprintf(img->rootfs, sizeof(img->rootfs), "%s/%s/rootfs", dir, name);
    img->rootfs_fd = crl_openat(AT_FDCWD, img->rootfs, O_PATH | O_DIRECTORY, 0);
    if (img->rootfs_fd < 0) {
        crl_err_sys(err, errno, "image %s: open %s", name, img->rootfs);
        image_free(img);
        return -1;
    }
    char cfg[4096 + 32];
    snprintf(cfg, sizeof(cfg), "%s/%s/config.json", dir, name);
    json_error_t je;
    json_t *c = json_load_file(cfg, 0, &je);
    if (c) {
        img->env = strv_from_json(json_object_get(c, "env"));
        img->entrypoint = strv_from_json(json_object_get(c, "entrypoint"));
        img->cmd = strv_from_json(json_object_get(c, "cmd"));
        const char *s;
        if ((s = json_string_value(json_object_get(c, "cwd"))))
            img->cwd = strdup(s);
        if ((s = json_string_value(json_object_get(c, "user"))))
            img->user = strdup(s);
        json_decref(c);
    } else if (access(cfg, F_OK) == 0) {
        crl_err_set(err, CRL_E_INTERNAL, "image %s: %s: %s", name, cfg, je.text);
        image_free(img);
        return -1;
    }
    if (!img->cwd)
        img->cwd = strdup("/");
    if (!img->env) {
        img->env = calloc(3, sizeof(char *));
        if (img->env) {
            img->env[0] =
                strdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
            img->env[1] = strdup("HOME=/root");
        }
    }
    *out = img;
    return 0;
}

static int store_add(struct crl_image_store *s, struct crl_image *img)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->images[i]->name, img->name) == 0) {
            /* The state dir's own copy wins over --images-from. */
            image_free(img);
            return 0;
        }
    struct crl_image **v = realloc(s->images, (s->n + 1) * sizeof(*v));
    if (!v)
        return -1;
    s->images = v;
    s->images[s->n++] = img;
    return 0;
}

static int scan_dir(struct crl_image_store *s, const char *dir, const char *origin,
                    struct crl_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return crl_err_sys(err, errno, "image directory %s", dir);
    struct dirent *de;
    int ret = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char rootfs[PATH_MAX];
        struct stat st;
        snprintf(rootfs, sizeof(rootfs), "%s/%s/rootfs", dir, de->d_name);
        if (stat(rootfs, &st) < 0 || !S_ISDIR(st.st_mode))
            continue;
        struct crl_image *img = NULL;
        if (load_image(dir, de->d_name, origin, &img, err) < 0 || store_add(s, img) < 0) {
            ret = -1;
            break;
        }
    }
    closedir(d);
    return ret;
}

static const char busybox_passwd[] = "root:x:0:0:root:/root:/bin/sh\n"
                                     "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
static const char busybox_group[] = "root:x:0:\ntty:x:5:\nusers:x:100:\nnogroup:x:65534:\n";
static const char busybox_config[] =
    "{\"env\": [\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\", "
    "\"HOME=/root\"], \"cwd\": \"/\", \"user\": \"0:0\", \"cmd\": [\"/bin/sh\"]}\n";

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
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return crl_err_sys(err, errno, "pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    char *argv[] = {(char *)bin, (char *)"--list-full", NULL};
    char *envp[] = {NULL};
    pid_t pid;
    int r = posix_spawn(&pid, bin, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (r != 0) {
        close(pfd[0]);
        return crl_err_sys(err, r, "running %s --list-full", bin);
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    ssize_t n;
    while (buf && (n = read(pfd[0], buf + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (len + 1 >= cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    if (!buf)
        return crl_err_sys(err, ENOMEM, "busybox applets");
    buf[len] = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || len == 0) {
        free(buf);
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s --list-full failed: is it Debian's busybox-static?", bin);
    }
    *out = buf;
    return 0;
}

int crl_image_build_busybox(const char *images_dir, const char *busybox_bin, struct crl_err *err)
{
    const char *bin = busybox_bin ? busybox_bin : "/bin/busybox";
    char tmp[PATH_MAX], final[PATH_MAX], p[PATH_MAX] = "";
    cleanup_free char *applets = NULL;
    snprintf(final, sizeof(final), "%s/busybox", images_dir);
    snprintf(tmp, sizeof(tmp), "%s/.busybox.tmp.%d", images_dir, getpid());
    crl_rm_rf_at(AT_FDCWD, tmp);
    static const char *const dirs[] = {
        "rootfs",         "rootfs/bin",      "rootfs/sbin",    "rootfs/usr",
        "rootfs/usr/bin", "rootfs/usr/sbin", "rootfs/etc",     "rootfs/root",
        "rootfs/home",    "rootfs/var",      "rootfs/var/tmp", "rootfs/run",
        "rootfs/proc",    "rootfs/sys",      "rootfs/dev",     "rootfs/tmp"};
    if (crl_mkdir_p(tmp, 0755) < 0)
        return crl_err_sys(err, errno, "mkdir %s", tmp);
    for (size_t i = 0; i < CRL_ARRAY_SIZE(dirs); i++) {
        snprintf(p, sizeof(p), "%s/%s", tmp, dirs[i]);
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            goto sys_fail;
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
    snprintf(p, sizeof(p), "%s/config.json", tmp);
    if (write_file(p, busybox_config, 0644, err) < 0)
        goto fail;
    crl_rm_rf_at(AT_FDCWD, final);
    if (rename(tmp, final) < 0)
        goto sys_fail;
    return 0;
sys_fail:
    crl_err_sys(err, errno, "building the busybox image at %s", p);
fail:
    crl_rm_rf_at(AT_FDCWD, tmp);
    return -1;
}

int crl_image_store_open(const char *state_dir, const char *const *images_from, size_t n_from,
                         const char *busybox_bin, struct crl_image_store **out, struct crl_err *err)
{
    struct crl_image_store *s = calloc(1, sizeof(*s));
    if (!s)
        return crl_err_sys(err, ENOMEM, "image store");
    char dir[PATH_MAX], bb[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/images", state_dir);
    if (crl_mkdir_p(dir, 0700) < 0) {
        crl_err_sys(err, errno, "mkdir %s", dir);
        goto fail;
    }
    /* Half-built images of a crashed corrald. */
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strncmp(de->d_name, ".busybox.tmp.", 13) == 0)
            crl_rm_rf_at(dirfd(d), de->d_name);
    if (d)
        closedir(d);
    snprintf(bb, sizeof(bb), "%s/busybox/rootfs/bin/busybox", dir);
    if (access(bb, X_OK) < 0) {
        crl_info(NULL, "building the busybox image from %s",
                 busybox_bin ? busybox_bin : "/bin/busybox");
        if (crl_image_build_busybox(dir, busybox_bin, err) < 0)
            goto fail;
    }
    if (scan_dir(s, dir, "state", err) < 0)
        goto fail;
    for (size_t i = 0; i < n_from; i++)
        if (scan_dir(s, images_from[i], "images-from", err) < 0)
            goto fail;
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
    for (size_t i = 0; i < s->n; i++)
        image_free(s->images[i]);
    free(s->images);
    free(s);
}

struct crl_image *crl_image_get(struct crl_image_store *s, const char *name, struct crl_err *err)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->images[i]->name, name) == 0) {
            s->images[i]->refs++;
            return s->images[i];
        }
    char avail[512] = "";
    size_t off = 0;
    for (size_t i = 0; i < s->n && off < sizeof(avail); i++)
        off += (size_t)snprintf(avail + off, sizeof(avail) - off, "%s%s", i ? ", " : "",
                                s->images[i]->name);
    crl_err_set(err, CRL_E_NOT_FOUND, "image '%s' not found (available: %s)", name,
                s->n ? avail : "none");
    return NULL;
}

void crl_image_put(struct crl_image *img)
{
    if (img && img->refs)
        img->refs--;
}

json_t *crl_image_json(const struct crl_image *img)
{
    return json_pack("{s:s, s:s, s:o, s:s, s:s?, s:o, s:o, s:i}", "name", img->name, "origin",
                     img->origin, "env", strv_to_json(img->env), "cwd", img->cwd, "user", img->user,
                     "entrypoint", strv_to_json(img->entrypoint), "cmd", strv_to_json(img->cmd),
                     "sandboxes", (json_int_t)img->refs);
}

json_t *crl_image_list_json(struct crl_image_store *s)
{
    json_t *a = json_array();
    for (size_t i = 0; i < s->n; i++)
        json_array_append_new(a, crl_image_json(s->images[i]));
    return json_pack("{s:o}", "images", a);
}
