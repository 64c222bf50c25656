/* The image store: named, read-only root filesystems and their config.
 *
 * For now an image is a directory `<dir>/<name>/rootfs` plus
 * `<dir>/<name>/config.json` ({"env": [...], "cwd": "/", "user": "0:0",
 * "entrypoint": [...], "cmd": [...]}), found under the state dir's images/
 * and under any --images-from directory.  `busybox` is built into a fresh
 * state dir from the host's busybox-static.  Backends see only this
 * interface (an O_PATH descriptor of the root and the config), so a
 * content-addressed OCI store can replace the directories behind it. */
#ifndef CRL_CORE_IMAGE_H
#define CRL_CORE_IMAGE_H

#include <jansson.h>
#include <stddef.h>

#include "../util/err.h"

struct crl_image {
    char name[128];
    char rootfs[4096];
    int rootfs_fd; /* O_PATH|O_DIRECTORY */
    char **env;    /* "K=V", NULL-terminated */
    char *cwd;
    char *user;
    char **entrypoint;
    char **cmd;
    const char *origin; /* "state" or "images-from" */
    unsigned refs;      /* sandboxes using it */
};

struct crl_image_store;

/* `busybox_bin`: the static busybox to build the busybox image from
 * (default /bin/busybox). */
int crl_image_store_open(const char *state_dir, const char *const *images_from, size_t n_from,
                         const char *busybox_bin, struct crl_image_store **out,
                         struct crl_err *err);
void crl_image_store_free(struct crl_image_store *s);

/* Look up an image by name; CRL_E_NOT_FOUND names the available ones. */
struct crl_image *crl_image_get(struct crl_image_store *s, const char *name, struct crl_err *err);
void crl_image_put(struct crl_image *img);
json_t *crl_image_list_json(struct crl_image_store *s);
json_t *crl_image_json(const struct crl_image *img);

/* Build the busybox image into `<dir>/busybox` (atomically).  Exposed for
 * tests and for `corral` tooling. */
int crl_image_build_busybox(const char *images_dir, const char *busybox_bin, struct crl_err *err);

#endif
