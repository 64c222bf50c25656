/* Directories as tar streams, with libarchive: out and in for the files
 * API, and a checkpoint's change set applied over a sandbox's tree.
 *
 * None of these may run in corrald: they parse what a sandbox or a client
 * wrote.  The container backend runs them in a helper the spawner forks and
 * moves into the sandbox (its root, its ids, its cgroup, the sandbox's
 * seccomp filter plus one that forbids new executable mappings); the
 * function backend in a call's jail (Landlock, its uid).  So neither a
 * hostile archive nor a symlink raced in by the sandbox can reach a host
 * path, and the checks here are a second wall. */
#ifndef CRL_HELPER_TAR_H
#define CRL_HELPER_TAR_H

#include <stddef.h>
#include <stdint.h>

/* Write the tree under the current directory to `out_fd` as a pax tar.
 * Returns 0, or -1 with a message in msg. */
int crl_tar_out(int out_fd, char *msg, size_t msglen);

/* The same walk with each entry (its name relative, "./" gone; never the
 * root) handed to `each`, which writes it as it sees fit (with
 * crl_tar_write_entry, changed or not, or other entries, or nothing):
 * 0 to go on, -1 with a message in msg to stop. */
struct archive;
struct archive_entry;
typedef int (*crl_tar_entry_fn)(struct archive *disk, struct archive *w, struct archive_entry *e,
                                void *ctx, char *msg, size_t msglen);
int crl_tar_out_each(int out_fd, crl_tar_entry_fn each, void *ctx, char *msg, size_t msglen);
/* Write an entry read from disk: its header, and a regular file's data. */
int crl_tar_write_entry(struct archive *disk, struct archive *w, struct archive_entry *e, char *msg,
                        size_t msglen);
/* Extract the tar (optionally gzip/zstd/xz compressed) read from `in_fd`
 * into the current directory, refusing absolute paths, '..' and paths
 * through symlinks.  *entries counts what was extracted. */
int crl_tar_in(int in_fd, unsigned long *entries, char *msg, size_t msglen);

#define CRL_TAR_APPLY_OWNERS 1u /* chown to the entries' numeric ids (else all are ours) */

/* Apply a checkpoint's change set (the format of struct crl_restore_req in
 * backend.h), read from `in_fd`, over the tree under the current directory:
 * apply.h's applier in its CRL_APPLY_PERFORM mode, exact (CRL_APPLY_EXACT).
 *
 *   D/.wh.NAME     removes D/NAME and everything below it (no error if absent)
 *   D/.wh..wh..opq removes from D everything this stream has not created
 *   anything else  is extracted: files, directories, symlinks, hard links,
 *                  modes (setuid included), mtimes, user.* xattrs (but
 *                  user.overlay.*, overlayfs' own), and the numeric owners
 *                  with CRL_TAR_APPLY_OWNERS; a non-directory over an
 *                  existing directory replaces it, contents and all
 *
 * Refused, failing the whole apply: absolute paths, '..', paths through a
 * symlink, hard links out of the tree, device nodes, fifos and sockets,
 * other overlayfs names (.wh..wh.*).  The root ("./") is never changed.
 * Anything that cannot be restored exactly (an owner, a mode, a time, an
 * xattr) fails too: a restore is exact or an error.
 *
 * Returns an enum crl_stream_status (backend.h): CRL_STREAM_OK with the
 * number of entries in *entries, or the failure with a message naming the
 * path, as "restoring /etc/x: No space left on device". */
int crl_tar_apply(int in_fd, unsigned flags, unsigned long *entries, char *msg, size_t msglen);

/* A microVM guest's writable layer, as its agent's corral:layer-out wrote
 * it (an OCI layer's tar: D/.wh.NAME a whiteout, D/.wh..wh..opq an opaque
 * D), unpacked from `in_fd` into the empty directory `root` in the form a
 * checkpoint reads (lib/traj/ckpt.h's CRL_LAYER_OVERLAY): whiteouts as 0/0
 * character devices, opaque directories marked user.overlay.opaque alone,
 * owners numeric.  apply.h's applier in its CRL_APPLY_OVERLAY mode, exact;
 * past max_entries (0: no limit), CRL_STREAM_NOSPACE.  Returns an enum
 * crl_stream_status, as crl_tar_apply. */
int crl_tar_unpack_layer(int in_fd, int root, uint64_t max_entries, unsigned long *entries,
                         char *msg, size_t msglen);

/* An errno as an enum crl_stream_status (ENOSPC: CRL_STREAM_NOSPACE, ...). */
int crl_tar_status_of_errno(int e);

#endif
