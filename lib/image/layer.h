/* Applying one OCI layer (a tar stream) to an empty directory, by
 * lib/helper/apply.h's applier in its CRL_APPLY_OVERLAY mode, in the form
 * overlayfs reads as a layer: a whiteout `.wh.NAME` becomes a 0/0 character
 * device NAME, an opaque marker `.wh..wh..opq` becomes the overlay "opaque"
 * xattr (trusted.overlay.opaque for a host or guest overlay, and
 * user.overlay.opaque for one mounted in a user namespace) on its directory.
 *
 * Everything is created through descriptors, beneath the layer's directory,
 * without following any symlink: an entry that is absolute, has a `..`
 * component, goes through a symlink, or hard-links to something outside the
 * layer is refused (CRL_E_INVALID naming it), never skipped.  Kept: regular
 * files (sparse ones too), directories, symlinks, hard links, fifos and
 * device nodes (inert: layers are mounted nodev; a 0/0 character device is
 * refused, as overlayfs would take it for a whiteout), ownership, permission bits
 * with setuid/setgid/sticky, modification times, and xattrs in the user.*
 * namespace plus security.capability; other xattrs (trusted.*, selinux
 * labels) and sockets are dropped. */
#ifndef CRL_IMAGE_LAYER_H
#define CRL_IMAGE_LAYER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"
#include "store.h"

struct archive;

struct crl_layer_stats {
    uint64_t entries;
    uint64_t bytes; /* file data written */
};

/* Read every entry of `a` (an open tar reader) into `root_fd`.  `what`
 * names the layer in errors. */
int crl_layer_apply(struct archive *a, int root_fd, const char *what, uint64_t max_entries,
                    struct crl_layer_stats *st, struct crl_err *err);

/* The other way: tar a root filesystem directory into `fd` (pax; paths
 * relative to it; numeric owners, modes with setuid, xattrs, hard links
 * kept; device nodes, fifos and sockets left out, as a sandbox gets its own
 * /dev; mounts below it not crossed), and give the tar's digest, its
 * diff_id. */
int crl_layer_from_dir(const char *rootfs, int fd, char diff_id[CRL_DIGEST_LEN + 1],
                       struct crl_err *err);

/* Clean an entry name (crl_path_normalise under CRL_PATH_RULES_LAYER):
 * strip "./" and empty components; refuse absolute names and `..`.
 * Returns 0 with `out` ("" for the root), or -1. */
int crl_layer_clean_path(const char *name, char *out, size_t cap);

#endif
