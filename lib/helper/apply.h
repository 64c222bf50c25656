/* The one applier of tar streams to a directory tree, whiteouts and all,
 * behind a checkpoint's restore (tar.h's crl_tar_apply) and an OCI layer's
 * expansion (lib/image/layer.h's crl_layer_apply).  They differ in what a
 * whiteout does, which is the mode:
 *
 *                     CRL_APPLY_PERFORM              CRL_APPLY_OVERLAY
 *                     a change set over a live tree  a layer into an empty dir
 *   D/.wh.NAME        removes D/NAME and all below   a 0/0 character device NAME,
 *                     it (no error if absent)        as overlayfs reads a layer
 *   D/.wh..wh..opq    removes from D all that this   the opaque xattrs on D:
 *                     stream has not made            trusted. and user.overlay.opaque
 *   D/.wh..wh.OTHER   refused (overlayfs' own)       a whiteout of ".wh.OTHER"
 *   the root opaque   refused                        marked
 *   a 0/0 char device a device (CRL_APPLY_DEVICES)   refused: overlayfs reads a whiteout
 *   messages name     "restoring /etc/x"             "layer 0: entry ./etc/x"
 *
 * and in what the flags below keep.  Alike in both: everything else is
 * extracted (files, sparse ones too, directories, symlinks, hard links,
 * modes with setuid/setgid/sticky, mtimes, xattrs), an entry replaces
 * what is in its way (a directory and all below it included; a directory
 * over a directory keeps it), missing parents are made (mode 0755), the
 * root ("./") is never changed, and directories get their modes and times
 * last, once nothing more is written into them.
 *
 * Everything is made through descriptors opened beneath the tree's
 * directory by crl_path_openat2 with no symlink followed.  Refused, failing
 * the whole apply with CRL_E_INVALID and a message naming the entry: a name
 * crl_path_normalise refuses (absolute, '..', too long), a path through a
 * symlink or a file, a hard link out of the tree or to nothing in it, a
 * whiteout that names nothing, a symlink with no target, and what the
 * mode refuses above.  A system call that fails is the error of crl_err_sys
 * (sys_errno set): ENOSPC is CRL_E_NO_SPACE.
 *
 * It parses what a sandbox or a client wrote: run it in a helper (the
 * spawner's restore helper, a function call's jail, corral-import), never
 * in corrald.  The one exception is corrald's busybox image, a tar it wrote
 * itself from a tree it built. */
#ifndef CRL_HELPER_APPLY_H
#define CRL_HELPER_APPLY_H

#include <stdint.h>

#include "../util/err.h"

struct archive;

enum crl_apply_mode {
    CRL_APPLY_PERFORM, /* whiteouts are done: a checkpoint's change set */
    CRL_APPLY_OVERLAY, /* whiteouts are recorded for overlayfs: an OCI layer */
};

#define CRL_APPLY_OWNERS 0x01u  /* chown to the entries' numeric ids (else all is the caller's) */
#define CRL_APPLY_DEVICES 0x02u /* keep device nodes and fifos, skip sockets (else all refused) */
#define CRL_APPLY_CAPS 0x04u    /* keep security.capability, besides user.* (not user.overlay.*) */
#define CRL_APPLY_EXACT 0x08u   /* an xattr the file system refuses fails (else it is dropped) */
#define CRL_APPLY_EMPTY_ROOT 0x10u /* an entry named "" is the root (else refused) */
/* OVERLAY: an opaque directory is marked with user.overlay.opaque alone (a
 * userxattr overlay's, and what lib/traj/ckpt.h reads), for a tree made
 * where trusted.* cannot be written (a user namespace) */
#define CRL_APPLY_USER_OPAQUE 0x20u

struct crl_apply {
    enum crl_apply_mode mode;
    unsigned flags;       /* CRL_APPLY_* */
    int root;             /* the tree's directory */
    const char *what;     /* names the stream in messages: "restoring", "layer 0" */
    uint64_t max_entries; /* past this many, CRL_E_TOO_LARGE; 0: no limit */
};

struct crl_apply_stats {
    uint64_t entries; /* applied, whiteouts included, the root not */
    uint64_t bytes;   /* file data written */
};

/* Read every entry of `a` (an open tar reader) and apply it under `o`.
 * Returns 0, or -1 with *err; *st counts what was applied either way. */
int crl_apply_archive(struct archive *a, const struct crl_apply *o, struct crl_apply_stats *st,
                      struct crl_err *err);

#endif
