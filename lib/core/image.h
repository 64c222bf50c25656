/* The daemon's images: named images from the content-addressed store
 * (lib/image/store.h), with their layers mounted once and shared by every
 * sandbox made from them.
 *
 * The host's own store (default <state>/images) is writable: imports, tags,
 * removals and the garbage collector act on it.  Any --images-from store is
 * read-only and consulted after it, by name.  A fresh store gets `busybox`,
 * built from the host's busybox-static.  Backends see only this interface:
 * an image is its layers' detached EROFS mounts plus its config. */
#ifndef CRL_CORE_IMAGE_H
#define CRL_CORE_IMAGE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../image/store.h"
#include "spec.h"
#include "../util/err.h"

struct crl_image {
    char name[CRL_IMAGE_NAME_MAX + 1]; /* canonical NAME:TAG it was found by */
    struct crl_store_image *rec;
    int *layer_fds; /* detached read-only mounts, top layer first */
    size_t n_layers;
    /* from rec, with defaults filled in */
    char **env; /* "K=V", NULL-terminated */
    const char *cwd;
    const char *user;
    char **entrypoint;      /* NULL when unset */
    char **cmd;             /* NULL when unset */
    struct crl_user run_as; /* user, as ids */
    char home[256];         /* its home directory, for HOME */
    char *user_error;       /* why user could not be resolved, or NULL */
    const char *origin;     /* "store" or "images-from" */
    size_t store;           /* which of the owner's stores holds it */
    struct crl_image_store *owner;
    unsigned refs; /* sandboxes using it (+1 while cached) */
    bool cached;   /* found by name by the next crl_image_get() */
};

struct crl_image_store;

/* `images_dir`: the writable store (NULL: <state_dir>/images); `images_from`:
 * read-only stores; `busybox_bin`: the static busybox the busybox image is
 * built from when the writable store has none (default /bin/busybox). */
int crl_image_store_open(const char *state_dir, const char *images_dir,
                         const char *const *images_from, size_t n_from, const char *busybox_bin,
                         struct crl_image_store **out, struct crl_err *err);
void crl_image_store_free(struct crl_image_store *s);
/* The writable store's directory (for the importer process). */
const char *crl_image_store_dir(const struct crl_image_store *s);

/* Look up an image by name (NAME, NAME:TAG or id) and mount its layers;
 * CRL_E_NOT_FOUND names the available ones.  A reference for the caller. */
struct crl_image *crl_image_get(struct crl_image_store *s, const char *name, struct crl_err *err);
void crl_image_put(struct crl_image *img);
/* Whether it is a full system's image (its kind vm: `corral image build-vm`). */
bool crl_image_is_vm(const struct crl_image *img);

json_t *crl_image_list_json(struct crl_image_store *s);

/* A blob of any of the stores, by digest (crl_store_blob_open()), as an fd
 * to read from 0; *size gets its length. */
int crl_image_blob_open(struct crl_image_store *s, const char *digest, uint64_t *size,
                        struct crl_err *err);
/* One image's JSON (inspect); NULL with CRL_E_NOT_FOUND. */
json_t *crl_image_inspect_json(struct crl_image_store *s, const char *name, struct crl_err *err);
/* Remove a tag of the writable store: CRL_E_CONFLICT while a sandbox uses
 * the image (but `spare` references: the caller's own, and those of warm
 * pools, which the caller drains), or when it is in a read-only store. */
int crl_image_remove(struct crl_image_store *s, const char *name, unsigned spare,
                     struct crl_err *err);
/* Tag `src` (any store) as `dst` in the writable store; *out: dst's JSON. */
int crl_image_tag(struct crl_image_store *s, const char *src, const char *dst, json_t **out,
                  struct crl_err *err);
/* The writable store's garbage collector: {"layers_removed", "bytes_freed"}. */
json_t *crl_image_gc(struct crl_image_store *s, struct crl_err *err);
/* Forget cached lookups after the store changed behind the daemon's back
 * (an import by the importer process). */
void crl_image_store_changed(struct crl_image_store *s);

/* Open layer i (top first) of an image as its EROFS file, read-only:
 * for a backend that hands layers to a guest as block devices. */
int crl_image_open_layer(const struct crl_image *img, size_t i, struct crl_err *err);

/* What an exec with no cmd runs: the image's entrypoint then its cmd
 * (CRL_E_INVALID when it has neither).  A new NULL-terminated vector. */
char **crl_image_default_argv(const struct crl_image *img, struct crl_err *err);
/* The image's user as ids: "UID[:GID]", or names looked up in the image's
 * /etc/passwd and /etc/group. */
int crl_image_user(const struct crl_image *img, struct crl_user *out, struct crl_err *err);

/* Build the busybox image into `store`.  Exposed for tests and tooling. */
int crl_image_build_busybox(struct crl_store *store, const char *busybox_bin, struct crl_err *err);

#endif
