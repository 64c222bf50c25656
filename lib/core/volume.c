#include "volume.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../util/cleanup.h"
#include "../util/fdio.h"
#include "../util/log.h"
#include "../util/run.h"

#define META "volume.json"
#define DISK "disk.ext4"
#define MAX_USERS 4096 /* read-only mounts of one volume at once */

struct user {
    char sandbox[64];
    char path[CRL_VOLUME_PATH_MAX + 1];
    bool read_only;
    int disk_fd; /* a guest's: the disk file it has (-1: a host mount's user) */
};

struct crl_volume {
    char name[CRL_VOLUME_NAME_MAX + 1];
    unsigned size_mb;
    double created_at;
    json_t *labels;
    int mnt; /* the detached mount, -1 until first used */
    struct user *users;
    size_t n_users;
    struct crl_volume *next;
};

struct crl_volumes {
    char dir[PATH_MAX];
    int dir_fd;
    struct crl_volume *head;
    size_t n;
};

static struct crl_volume *find(struct crl_volumes *vs, const char *name)
{
    for (struct crl_volume *v = vs->head; v; v = v->next)
        if (strcmp(v->name, name) == 0)
            return v;
    return NULL;
}

static void volume_free(struct crl_volume *v)
{
    if (v->mnt >= 0)
        close(v->mnt);
    for (size_t i = 0; i < v->n_users; i++)
        if (v->users[i].disk_fd >= 0)
            close(v->users[i].disk_fd);
    json_decref(v->labels);
    free(v->users);
    free(v);
}

static struct crl_volume *volume_new(const char *name, unsigned size_mb, double created_at,
                                     json_t *labels)
{
    struct crl_volume *v = calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    snprintf(v->name, sizeof(v->name), "%s", name);
    v->size_mb = size_mb;
    v->created_at = created_at;
    v->labels = json_incref(labels);
    v->mnt = -1;
    return v;
}

/* <dir>/<name>/<file> */
static int path_of(const struct crl_volumes *vs, const char *name, const char *file, char *out,
                   size_t cap)
{
    int n = snprintf(out, cap, "%s/%s/%s", vs->dir, name, file);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* ---- the store ---- */

/* volume.json of `name`, as it was written by crl_volume_create. */
static struct crl_volume *load(struct crl_volumes *vs, const char *name)
{
    char path[PATH_MAX];
    if (path_of(vs, name, META, path, sizeof(path)) < 0)
        return NULL;
    json_error_t je;
    json_auto_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    json_t *size = json_object_get(j, "size_mb"), *labels = json_object_get(j, "labels");
    struct crl_err err = CRL_ERR_INIT;
    if (!json_is_integer(size) || json_integer_value(size) < CRL_VOLUME_MIN_MB ||
        json_integer_value(size) > CRL_VOLUME_MAX_MB ||
        !json_is_number(json_object_get(j, "created_at")) || crl_labels_check(labels, &err) < 0) {
        crl_warn(NULL, "volume %s: %s is not one corrald wrote: skipped", name, path);
        return NULL;
    }
    return volume_new(name, (unsigned)json_integer_value(size),
                      json_number_value(json_object_get(j, "created_at")), labels);
}

int crl_volumes_open(const char *dir, struct crl_volumes **out, struct crl_err *err)
{
    struct crl_volumes *vs = calloc(1, sizeof(*vs));
    if (!vs)
        return crl_err_sys(err, ENOMEM, "volumes");
    vs->dir_fd = -1;
    /* absolute and without symlinks: the kernel names a loop device's file
     * so (loop_backing) */
    if (crl_mkdir_p(dir, 0700) < 0 || !realpath(dir, vs->dir) ||
        (vs->dir_fd = open(vs->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        crl_err_sys(err, errno, "the volume dir %s", dir);
        free(vs);
        return -1;
    }
    DIR *d = fdopendir(dup(vs->dir_fd));
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (!crl_volume_name_ok(de->d_name)) {
            crl_warn(NULL, "volume dir %s: %s is not a volume's name: left alone", dir, de->d_name);
            continue;
        }
        char meta[PATH_MAX];
        struct stat st;
        if (path_of(vs, de->d_name, META, meta, sizeof(meta)) == 0 && lstat(meta, &st) < 0 &&
            errno == ENOENT) {
            /* a create that never finished: no volume was there to lose */
            crl_info(NULL, "volume dir %s: %s was never finished: removed", vs->dir, de->d_name);
            crl_rm_rf_at(vs->dir_fd, de->d_name);
            continue;
        }
        struct crl_volume *v = vs->n < CRL_VOLUMES_MAX ? load(vs, de->d_name) : NULL;
        if (v) {
            v->next = vs->head;
            vs->head = v;
            vs->n++;
        }
    }
    if (d)
        closedir(d);
    crl_info(NULL, "volumes: %zu in %s", vs->n, dir);
    *out = vs;
    return 0;
}

void crl_volumes_free(struct crl_volumes *vs)
{
    if (!vs)
        return;
    while (vs->head) {
        struct crl_volume *v = vs->head;
        vs->head = v->next;
        volume_free(v);
    }
    if (vs->dir_fd >= 0)
        close(vs->dir_fd);
    free(vs);
}

/* ---- the file system ---- */

/* Is a loop device still backed by `path`?  Its name into dev. */
static bool loop_backing(const char *path, char *dev, size_t cap)
{
    DIR *d = opendir("/sys/block");
    struct dirent *de;
    bool found = false;
    while (d && !found && (de = readdir(d))) {
        if (strncmp(de->d_name, "loop", 4) != 0)
            continue;
        char f[300], backing[PATH_MAX];
        snprintf(f, sizeof(f), "/sys/block/%s/loop/backing_file", de->d_name);
        cleanup_close int fd = open(f, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : read(fd, backing, sizeof(backing) - 1);
        if (n <= 0)
            continue;
        backing[n] = 0;
        backing[strcspn(backing, "\n")] = 0;
        if (strcmp(backing, path) == 0) {
            snprintf(dev, cap, "/dev/%s", de->d_name);
            found = true;
        }
    }
    if (d)
        closedir(d);
    return found;
}

/* A free loop device bound to `img` (autoclear: it goes with its last
 * user); its descriptor, its name into dev. */
static int loop_attach(int img, const char *path, char *dev, size_t cap, struct crl_err *err)
{
    cleanup_close int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return crl_err_sys(err, errno, "/dev/loop-control");
    for (int tries = 0; tries < 16; tries++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
            return crl_err_sys(err, errno, "a free loop device");
        snprintf(dev, cap, "/dev/loop%d", n);
        int fd = open(dev, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return crl_err_sys(err, errno, "%s", dev);
        struct loop_config cfg = {.fd = (unsigned)img};
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        snprintf((char *)cfg.info.lo_file_name, sizeof(cfg.info.lo_file_name), "%s", path);
        if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0)
            return fd;
        int e = errno;
        close(fd);
        if (e != EBUSY) /* EBUSY: another took it first */
            return crl_err_sys(err, e, "binding %s to %s", dev, path);
    }
    return crl_err_set(err, CRL_E_UNAVAILABLE, "no free loop device for %s", path);
}

/* The volume's detached mount, made at its first use. */
static int volume_mount(struct crl_volumes *vs, struct crl_volume *v, struct crl_err *err)
{
    if (v->mnt >= 0)
        return 0;
    char path[PATH_MAX], dev[64];
    if (path_of(vs, v->name, DISK, path, sizeof(path)) < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "volume %s: its path is too long", v->name);
    if (loop_backing(path, dev, sizeof(dev)))
        return crl_err_set(err, CRL_E_CONFLICT,
                           "volume '%s' is still mounted by a sandbox of an earlier corrald "
                           "(through %s): it can be mounted again once that sandbox has ended",
                           v->name, dev);
    cleanup_close int img = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (img < 0)
        return crl_err_sys(err, errno, "volume %s: %s", v->name, path);
    cleanup_close int loop = loop_attach(img, path, dev, sizeof(dev), err);
    if (loop < 0)
        return crl_err_prefix(err, "volume %s", v->name);
    cleanup_close int fs = (int)syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
    if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
        syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return crl_err_sys(err, errno, "volume %s: mounting it (ext4 on %s)", v->name, dev);
    int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID);
    if (mnt < 0)
        return crl_err_sys(err, errno, "volume %s: fsmount", v->name);
    v->mnt = mnt; /* the loop device stays while the file system is mounted */
    return 0;
}

/* Does the file system's journal hold what a mount must replay first (the
 * superblock's RECOVER feature: its last writer did not unmount it)? */
static bool needs_recovery(int img)
{
    uint8_t b[4];
    if (pread(img, b, sizeof(b), 1024 + 0x60) != (ssize_t)sizeof(b)) /* s_feature_incompat */
        return false;
    return (b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24) & 0x4;
}

/* Wait (a little) until no loop device is backed by the volume's file:
 * the kernel unmounts a file system when its last mount goes, which for
 * a sandbox's mount is when its mount namespace does. */
static int wait_unmounted(struct crl_volume *v, const char *path, struct crl_err *err)
{
    char dev[64];
    for (int i = 0; loop_backing(path, dev, sizeof(dev)); i++) {
        if (i == 400)
            return crl_err_set(err, CRL_E_CONFLICT,
                               "volume '%s' is still mounted on the host (through %s, by a "
                               "sandbox that is ending or one of an earlier corrald): a guest "
                               "may have it once that mount has gone",
                               v->name, dev);
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* The volume's disk file for a guest's own kernel to mount: corrald's
 * mount (no sandbox on the host has the volume, check_use saw to that)
 * goes first, so that one kernel alone has the file system.  A guest that
 * reads it must find it whole: a journal left to replay (a writer ended
 * without unmounting) is replayed by one mount on the host first. */
static int volume_disk(struct crl_volumes *vs, struct crl_volume *v, bool read_only,
                       struct crl_err *err)
{
    char path[PATH_MAX];
    if (path_of(vs, v->name, DISK, path, sizeof(path)) < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "volume %s: its path is too long", v->name);
    close_fd(&v->mnt);
    if (wait_unmounted(v, path, err) < 0)
        return -1;
    int img = open(path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW);
    if (img < 0)
        return crl_err_sys(err, errno, "volume %s: %s", v->name, path);
    if (read_only && needs_recovery(img)) {
        if (volume_mount(vs, v, err) < 0) {
            close(img);
            return -1;
        }
        close_fd(&v->mnt);
        if (wait_unmounted(v, path, err) < 0) {
            close(img);
            return -1;
        }
        crl_info(NULL, "volume %s: its journal replayed on the host for a guest that reads it",
                 v->name);
    }
    return img;
}

/* ---- the API ---- */

static json_t *volume_json(struct crl_volume *v)
{
    json_t *mounts = json_array();
    for (size_t i = 0; i < v->n_users; i++)
        json_array_append_new(mounts,
                              json_pack("{s:s, s:s, s:b}", "sandbox", v->users[i].sandbox, "path",
                                        v->users[i].path, "read_only", v->users[i].read_only));
    json_t *o = json_pack("{s:s, s:i, s:o, s:O, s:o, s:s}", "name", v->name, "size_mb",
                          (json_int_t)v->size_mb, "created_at", crl_json_time(v->created_at),
                          "labels", v->labels, "mounts", mounts, "enforced_by", "ext4 image");
    /* What is written in it, when it is mounted (else not known cheaply). */
    struct statfs st;
    if (o && v->mnt >= 0 && fstatfs(v->mnt, &st) == 0)
        json_object_set_new(o, "used_bytes",
                            json_integer((json_int_t)((st.f_blocks - st.f_bfree) * st.f_bsize)));
    else if (o)
        json_object_set_new(o, "used_bytes", json_null());
    return o;
}

int crl_volume_create(struct crl_volumes *vs, json_t *body, json_t **out, struct crl_err *err)
{
    static const char *const keys[] = {"name", "size_mb", "labels"};
    if (!json_is_object(body))
        return crl_err_set(err, CRL_E_INVALID, "a volume is a JSON object {\"name\", \"size_mb\"}");
    if (crl_json_check_keys(body, "", keys, CRL_ARRAY_SIZE(keys), err) < 0)
        return -1;
    const char *name;
    json_t *f = json_object_get(body, "name");
    if (!f)
        return crl_err_set(err, CRL_E_INVALID, "name is required");
    if (crl_json_get_string(f, "name", 256, &name, err) < 0)
        return -1;
    if (!crl_volume_name_ok(name))
        return crl_err_set(err, CRL_E_INVALID,
                           "name '%s' is not a volume name (1-63 of a-z, 0-9, '_', '.', '-', "
                           "starting with a letter or digit)",
                           name);
    unsigned size_mb = 1024;
    if ((f = json_object_get(body, "size_mb")) &&
        crl_json_get_uint(f, "size_mb", CRL_VOLUME_MIN_MB, CRL_VOLUME_MAX_MB, &size_mb, err) < 0)
        return -1;
    json_t *labels = json_object_get(body, "labels");
    if (labels && crl_labels_check(labels, err) < 0)
        return -1;
    if (find(vs, name))
        return crl_err_set(err, CRL_E_CONFLICT, "volume '%s' exists", name);
    if (vs->n >= CRL_VOLUMES_MAX)
        return crl_err_set(err, CRL_E_CAPACITY, "there are %d volumes, the most a host keeps",
                           CRL_VOLUMES_MAX);

    char disk[PATH_MAX], meta[PATH_MAX], tmp[PATH_MAX + 8];
    if (path_of(vs, name, DISK, disk, sizeof(disk)) < 0 ||
        path_of(vs, name, META, meta, sizeof(meta)) < 0)
        return crl_err_set(err, CRL_E_INVALID, "the volume dir's path is too long");
    snprintf(tmp, sizeof(tmp), "%s.tmp", meta);
    if (mkdirat(vs->dir_fd, name, 0700) < 0)
        return errno == EEXIST ? crl_err_set(err, CRL_E_CONFLICT,
                                             "volume '%s': %s/%s exists, not a volume corrald "
                                             "knows",
                                             name, vs->dir, name)
                               : crl_err_sys(err, errno, "mkdir %s/%s", vs->dir, name);
    double now = crl_wall_s();
    json_auto_t *m =
        json_pack("{s:s, s:i, s:f, s:o}", "name", name, "size_mb", (json_int_t)size_mb,
                  "created_at", now, "labels", labels ? json_incref(labels) : json_object());
    int fd = open(disk, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)size_mb << 20) < 0) {
        crl_err_sys(err, errno, "volume %s: %s", name, disk);
        goto fail;
    }
    close(fd);
    fd = -1;
    if (crl_mkfs_ext4(disk, err) < 0)
        goto fail;
    if (!m || json_dump_file(m, tmp, JSON_COMPACT) < 0 || rename(tmp, meta) < 0) {
        crl_err_sys(err, errno ? errno : EIO, "volume %s: writing %s", name, meta);
        goto fail;
    }
    struct crl_volume *v = volume_new(name, size_mb, now, json_object_get(m, "labels"));
    if (!v) {
        crl_err_sys(err, ENOMEM, "volume");
        goto fail;
    }
    v->next = vs->head;
    vs->head = v;
    vs->n++;
    crl_info(NULL, "volume %s: made, %u MiB", name, size_mb);
    *out = volume_json(v);
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    crl_rm_rf_at(vs->dir_fd, name);
    return -1;
}

json_t *crl_volume_inspect(struct crl_volumes *vs, const char *name, struct crl_err *err)
{
    struct crl_volume *v = find(vs, name);
    if (!v) {
        crl_err_set(err, CRL_E_NOT_FOUND, "no volume '%s'", name);
        return NULL;
    }
    return volume_json(v);
}

json_t *crl_volumes_list(struct crl_volumes *vs)
{
    json_t *arr = json_array();
    for (struct crl_volume *v = vs->head; v; v = v->next)
        json_array_append_new(arr, volume_json(v));
    return arr;
}

int crl_volume_remove(struct crl_volumes *vs, const char *name, struct crl_err *err)
{
    struct crl_volume **pv = &vs->head;
    while (*pv && strcmp((*pv)->name, name) != 0)
        pv = &(*pv)->next;
    struct crl_volume *v = *pv;
    if (!v)
        return crl_err_set(err, CRL_E_NOT_FOUND, "no volume '%s'", name);
    if (v->n_users)
        return crl_err_set(err, CRL_E_CONFLICT, "volume '%s' is mounted by sandbox %s%s", name,
                           v->users[0].sandbox, v->n_users > 1 ? " and others" : "");
    *pv = v->next;
    vs->n--;
    volume_free(v); /* its mount goes: nothing else holds the file system */
    if (crl_rm_rf_at(vs->dir_fd, name) < 0)
        crl_warn(NULL, "volume %s: removing %s/%s: %s", name, vs->dir, name, strerror(errno));
    crl_info(NULL, "volume %s: removed", name);
    return 0;
}

/* ---- sandboxes' mounts ---- */

/* May v be mounted once more so (by a guest's kernel if `disk`)?  Who
 * stands in the way otherwise. */
static int check_use(const struct crl_volume *v, bool read_only, bool disk, struct crl_err *err)
{
    for (size_t i = 0; i < v->n_users; i++)
        if ((v->users[i].disk_fd >= 0) != disk)
            return crl_err_set(err, CRL_E_CONFLICT,
                               "volume '%s' is mounted by %s sandbox %s: a microvm's guest "
                               "mounts a volume with its own kernel, so only while no container "
                               "or function sandbox has it, and they only while no guest has it",
                               v->name, disk ? "the host for" : "the guest of",
                               v->users[i].sandbox);
        else if (!read_only || !v->users[i].read_only)
            return crl_err_set(err, CRL_E_CONFLICT,
                               "volume '%s' is mounted %s by sandbox %s: a volume is mounted "
                               "read-write by one sandbox at a time, or read-only by any number",
                               v->name, v->users[i].read_only ? "read-only" : "read-write",
                               v->users[i].sandbox);
    if (v->n_users >= MAX_USERS)
        return crl_err_set(err, CRL_E_CAPACITY, "volume '%s' has %d mounts, the most it may",
                           v->name, MAX_USERS);
    return 0;
}

static int add_user(struct crl_volume *v, const char *id, const struct crl_spec_volume *sv,
                    int disk_fd, struct crl_err *err)
{
    struct user *u = realloc(v->users, (v->n_users + 1) * sizeof(*u));
    if (!u)
        return crl_err_sys(err, ENOMEM, "volume %s", v->name);
    v->users = u;
    u = &v->users[v->n_users++];
    snprintf(u->sandbox, sizeof(u->sandbox), "%s", id);
    snprintf(u->path, sizeof(u->path), "%s", sv->path);
    u->read_only = sv->read_only;
    u->disk_fd = disk_fd;
    return 0;
}

static void drop_user(struct crl_volume *v, const char *id)
{
    for (size_t i = 0; i < v->n_users;)
        if (strcmp(v->users[i].sandbox, id) == 0) {
            if (v->users[i].disk_fd >= 0)
                close(v->users[i].disk_fd);
            v->users[i] = v->users[--v->n_users];
        } else
            i++;
}

int crl_volumes_take(struct crl_volumes *vs, const char *id, const struct crl_spec *spec,
                     enum crl_volume_use use, int *fds, struct crl_err *err)
{
    bool disk = use == CRL_VOLUMES_DISK;
    for (size_t i = 0; i < spec->n_volumes; i++) {
        const struct crl_spec_volume *sv = &spec->volumes[i];
        struct crl_volume *v = find(vs, sv->name);
        if (!v) {
            crl_err_set(err, CRL_E_NOT_FOUND, "volumes[%zu]: no volume '%s'", i, sv->name);
        } else if (check_use(v, sv->read_only, disk, err) == 0) {
            int fd = -1;
            bool got = disk ? (fd = volume_disk(vs, v, sv->read_only, err)) >= 0
                            : volume_mount(vs, v, err) == 0;
            if (got && add_user(v, id, sv, fd, err) == 0) {
                fds[i] = disk ? fd : v->mnt;
                continue;
            }
            if (fd >= 0)
                close(fd);
        }
        crl_volumes_release(vs, id);
        return -1;
    }
    return 0;
}

int crl_volumes_adopt(struct crl_volumes *vs, const char *id, const struct crl_spec *spec,
                      struct crl_err *err)
{
    for (size_t i = 0; i < spec->n_volumes; i++) {
        const struct crl_spec_volume *sv = &spec->volumes[i];
        struct crl_volume *v = find(vs, sv->name);
        if (!v)
            crl_err_set(err, CRL_E_NOT_FOUND, "volumes[%zu]: no volume '%s'", i, sv->name);
        if (!v || check_use(v, sv->read_only, false, err) < 0 || add_user(v, id, sv, -1, err) < 0) {
            crl_volumes_release(vs, id);
            return -1;
        }
    }
    return 0;
}

void crl_volumes_release(struct crl_volumes *vs, const char *id)
{
    for (struct crl_volume *v = vs ? vs->head : NULL; v; v = v->next)
        drop_user(v, id);
}
