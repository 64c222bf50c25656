/* Reading an image out of a docker-archive, an oci-archive or an OCI image
 * layout directory: which config, which layers in which order, under which
 * name.  A tar is spooled entry by entry into a scratch directory, each
 * file hashed as it is written; then index.json (OCI) or manifest.json
 * (docker save) is followed to the manifest, its config and its layers.
 * Every blob named by a digest is checked against it (and against the size
 * its descriptor gives); layers are checked against their diff_ids when
 * they are expanded (lib/image/store.c). */
#ifndef CRL_IMAGE_OCI_H
#define CRL_IMAGE_OCI_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct crl_oci_layer {
    int fd;                           /* the blob, read from offset 0; -1 for a pull's */
    char blob[CRL_DIGEST_LEN + 1];    /* its digest, "" when the archive names none */
    char diff_id[CRL_DIGEST_LEN + 1]; /* from the config */
    /* A pulled layer (crl_store_pull()): its EROFS file was fetched into
     * scratch/layer-<i>.erofs and checked against this digest; "" otherwise. */
    char erofs_digest[CRL_DIGEST_LEN + 1];
};

struct crl_oci_image {
    char *config; /* the config blob, NUL-terminated */
    size_t config_len;
    char id[CRL_DIGEST_LEN + 1];        /* the config's digest */
    char name[CRL_IMAGE_NAME_MAX + 1];  /* the archive's own full name for it, or "" */
    char label[CRL_IMAGE_NAME_MAX + 1]; /* what the archive calls it (a tag, maybe), or "" */
    struct crl_oci_layer *layers;       /* bottom first */
    size_t n_layers;
};

/* `fd` (a tar, possibly compressed) or `dir` (a layout); scratch files go in
 * `scratch_fd`.  Counts spooled bytes against lim->max_total_bytes.
 *
 * Of several images, `ref` picks one: by a reference name the archive gives
 * it (the org.opencontainers.image.ref.name or io.containerd.image.name
 * annotation in index.json, one of its RepoTags in manifest.json; compared
 * as written, else as Docker normalizes names: "app" is
 * "docker.io/library/app:latest"), or by its digest (the manifest's in
 * index.json, the config's in manifest.json).  Without one, the only image
 * for this host (linux and crl_store_arch(), or naming no platform) is read;
 * several are refused with a message that lists them and says how to pick.
 * A nested index (a multi-platform image's) is followed by platform, and
 * the config of the image read must not name another platform. */
int crl_oci_read(int fd, const char *dir, const char *ref, int scratch_fd,
                 const struct crl_import_limits *lim, struct crl_oci_image *out,
                 struct crl_err *err);
void crl_oci_image_free(struct crl_oci_image *img);

/* An image known by its config blob alone, as a pull from another host
 * starts (crl_store_pull()): `config` (malloc'd, NUL-terminated, owned by
 * *out from here on, even on failure) gives its id, by digest, and its
 * layers' diff_ids; their fds are -1.  The config must be a JSON object for
 * this host's platform, with at most CRL_IMAGE_MAX_LAYERS layers. */
int crl_oci_from_config(char *config, size_t len, struct crl_oci_image *out, struct crl_err *err);

#endif
