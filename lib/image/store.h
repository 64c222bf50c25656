/* The content-addressed image store: OCI/Docker images as EROFS layers.
 *
 * On disk, under one directory (default <state>/images):
 *
 *   layers/<hex>.erofs   one per layer, named by its diff_id (the sha256 of the
 *                        uncompressed layer tar), so a layer shared by many
 *                        images, or compressed differently, is stored once.
 *                        Each is a standalone EROFS filesystem: the container
 *                        backend mounts it (shared by every sandbox), a VM can
 *                        attach it as a read-only block device.
 *   images/<hex>.json    one per image, named by its config digest: the layer
 *                        list (bottom first, each with its .erofs file's own
 *                        digest) and the runtime config.
 *   configs/<hex>.json   the image's original config blob, as imported.
 *   tags/<name>          NAME:TAG -> image id ("sha256:<hex>"); '/' in a name
 *                        is stored as '%'.
 *   tmp/<pid>.<n>/       an import in progress.  Everything becomes visible by
 *                        rename(2) after fsync, layers first and tags last, so
 *                        a crash leaves no half-imported image: at worst a
 *                        tmp/ dir (removed when its process is gone) and
 *                        unreferenced layers (reused by a retry, or removed
 *                        by the garbage collector).
 *
 * Several processes may share one store (a daemon and the offline CLI, or
 * daemons on one host); writes are atomic renames and readers tolerate
 * entries appearing and disappearing. */
#ifndef CRL_IMAGE_STORE_H
#define CRL_IMAGE_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "../util/sha256.h"

#define CRL_IMAGE_NAME_MAX 255
#define CRL_IMAGE_MAX_LAYERS 125
/* The OCI config label that carries an image's kind out of the store and
 * back in (export, pull): its one value is "vm". */
#define CRL_IMAGE_KIND_LABEL "org.corral.kind"

struct crl_store;

/* What an import may cost before it is refused (CRL_E_TOO_LARGE). */
struct crl_import_limits {
    uint64_t max_layer_bytes; /* one layer's expanded tar; 0: 16 GiB */
    uint64_t max_total_bytes; /* everything expanded and spooled; 0: 64 GiB */
    uint64_t max_entries;     /* files in one layer; 0: 4M */
};

struct crl_store_layer {
    char digest[CRL_DIGEST_LEN + 1]; /* diff_id */
    uint64_t size;                   /* bytes of the .erofs file */
    /* The .erofs file's own sha256, by which a host that pulls the layer
     * checks it; "" in a record made before the store kept it. */
    char file_digest[CRL_DIGEST_LEN + 1];
};

/* An image as the store records it. */
struct crl_store_image {
    char id[CRL_DIGEST_LEN + 1]; /* config digest */
    struct crl_store_layer *layers;
    size_t n_layers; /* bottom first */
    char **env;      /* "K=V", NULL-terminated */
    char *cwd;
    char *user;
    char **entrypoint; /* NULL when unset */
    char **cmd;        /* NULL when unset */
    char *created;     /* when it was imported, RFC 3339 */
    char *kind;        /* "vm": a bootable full-OS image for the vm backend;
                          NULL: an ordinary one (JSON: "container") */
};

int crl_store_open(const char *dir, bool writable, struct crl_store **out, struct crl_err *err);
void crl_store_close(struct crl_store *s);
const char *crl_store_dir(const struct crl_store *s);
bool crl_store_writable(const struct crl_store *s);

/* NAME or NAME:TAG, canonical (":latest" added); CRL_E_INVALID names what is
 * wrong with it. */
int crl_store_name_canon(const char *name, char out[CRL_IMAGE_NAME_MAX + 1], struct crl_err *err);

/* A reference name that picks one image of an archive (crl_oci_read() in
 * oci.h): 1 to 255 of the characters OCI allows in one (letters, digits,
 * . _ - / : @ +).  CRL_E_INVALID says what is wrong with it. */
int crl_store_ref_check(const char *ref, struct crl_err *err);

/* OCI's name for this machine's architecture ("amd64", "arm64", ...): the
 * only one an image is imported for, and the one images made here get. */
const char *crl_store_arch(void);

/* Import a docker-archive, an oci-archive (either maybe gzip/zstd/xz
 * compressed as a whole), read from `fd` to its end, or an OCI image layout
 * directory (`dir`, with `fd` -1).  `ref` picks one image of several by a
 * name the archive gives it (NULL: the only one for this host; see
 * crl_oci_read()).  `name` tags the result (NULL: the archive's own full
 * name for the image picked, if it has one).  Every blob is checked against
 * its digest, every layer against its diff_id; hostile or damaged archives
 * are refused with CRL_E_INVALID naming the entry, oversized ones with
 * CRL_E_TOO_LARGE, and leave nothing behind.  *out (may be NULL) gets the
 * image's JSON as crl_store_image_json() gives it. */
int crl_store_import(struct crl_store *s, int fd, const char *dir, const char *name,
                     const char *ref, const struct crl_import_limits *lim, json_t **out,
                     struct crl_err *err);

/* Make a one-layer image from a root filesystem directory (debootstrap's
 * output, busybox), with `config` as {"env", "cwd", "user", "entrypoint",
 * "cmd", "kind"}; tagged `name`. */
int crl_store_import_rootfs(struct crl_store *s, const char *rootfs, const json_t *config,
                            const char *name, json_t **out, struct crl_err *err);

/* The OCI config of a one-layer image made from a root filesystem: this
 * machine's architecture, `runtime` ({"env", "cwd", "user", "entrypoint",
 * "cmd", "kind"}) as Env, WorkingDir, User, Entrypoint, Cmd and, for kind
 * "vm" only, Labels {CRL_IMAGE_KIND_LABEL: "vm"}; and `diff_id`.  No
 * timestamp: the same tree and config always give the same image id. */
json_t *crl_store_config_json(const json_t *runtime, const char *diff_id);

/* Fetch one blob of another host's store into `fd`: the one that store
 * names `digest` (an image id: its config; a diff_id: the layer's .erofs
 * file), at most `max` bytes (more: CRL_E_TOO_LARGE). */
typedef int (*crl_store_fetch_fn)(void *ctx, const char *digest, int fd, uint64_t max,
                                  struct crl_err *err);

/* Copy an image from another host's store.  `remote` is that host's
 * description of it (GET /v1/images/NAME: "id", and "layers" with each
 * one's "digest", "size" and "file_digest").  Its config is fetched and
 * checked against the id, and it is the config that names the layers (the
 * description must agree with it); each layer this store lacks is fetched,
 * at most its size, and checked against its file_digest before anything
 * enters the store, as an import does.  Tagged `name`; *out (may be NULL)
 * as crl_store_import() gives it. */
int crl_store_pull(struct crl_store *s, const json_t *remote, const char *name,
                   crl_store_fetch_fn fetch, void *ctx, const struct crl_import_limits *lim,
                   json_t **out, struct crl_err *err);

/* Look up a canonical NAME:TAG, or an image id "sha256:<hex>" (or a unique
 * prefix of at least 12 hex digits).  CRL_E_NOT_FOUND when absent. */
int crl_store_lookup(struct crl_store *s, const char *name, struct crl_store_image **out,
                     struct crl_err *err);
void crl_store_image_free(struct crl_store_image *img);

/* Every tag, as canonical names, sorted. */
int crl_store_tags(struct crl_store *s, char ***out, struct crl_err *err);
/* The tags pointing at image `id`. */
int crl_store_tags_of(struct crl_store *s, const char *id, char ***out, struct crl_err *err);

int crl_store_tag(struct crl_store *s, const char *src, const char *dst, struct crl_err *err);
/* Remove a tag; the image's record goes with its last tag.  Layers stay
 * until crl_store_gc(). */
int crl_store_untag(struct crl_store *s, const char *name, struct crl_err *err);

/* Remove layers and configs no image references, and stale tmp/ dirs. */
int crl_store_gc(struct crl_store *s, uint64_t *layers_removed, uint64_t *bytes_freed,
                 struct crl_err *err);

/* Open a blob of the store by the digest it names it by, to send it to a
 * host that pulls an image (crl_store_pull()): an image id gives its config,
 * a diff_id its layer's EROFS file.  CRL_E_NOT_FOUND when neither is here. */
int crl_store_blob_open(const struct crl_store *s, const char *digest, struct crl_err *err);

/* The path of a layer's EROFS file. */
int crl_store_layer_path(const struct crl_store *s, const char *digest, char *out, size_t cap);

/* Mount one layer read-only, nodev, nosuid as a detached mount (no path in
 * any mount table; it lives as long as the descriptor). */
int crl_store_mount_layer(const struct crl_store *s, const char *digest, struct crl_err *err);

json_t *crl_store_image_json(const struct crl_store_image *img);

#endif
