/* Copying between this machine and a sandbox, over the files endpoint:
 * one file as raw bytes, a directory as a tar stream (libarchive) made or
 * unpacked on the fly by a helper thread, so neither side is held in
 * memory or spooled to disk.
 *
 * Both calls use the client `c` from the calling thread only (the helper
 * thread touches no client), so the one-client-per-thread rule holds. */
#ifndef CRL_CLIENT_COPY_H
#define CRL_CLIENT_COPY_H

#include "../util/err.h"
#include "client.h"

/* Copy `local` into sandbox `id` at `path` (absolute).
 * - A file becomes the file `path`, or `path`<name> when `path` ends with
 *   '/'; it keeps its permission bits.  "-" is stdin, read to its end from
 *   where it is and sent chunked, to the file `path`.
 * - A directory's contents go into the directory `path`, created if
 *   missing (as `cp -R dir/. path` would), owned by root; only files,
 *   directories and symlinks are copied (anything else is an error). */
int crl_copy_to_sandbox(struct crl_client *c, const char *local, const char *id, const char *path,
                        struct crl_err *err);

/* Copy `path` out of sandbox `id` to `local`.
 * - A file becomes `local`, or `local`/<name> when `local` is a directory;
 *   "-" is stdout.  It is written to a temporary name beside its target
 *   and renamed over it once complete (a failure removes it); it gets the
 *   mode of the file it replaces, else 0666 less the umask.
 * - A directory's contents are extracted into the directory `local`,
 *   created if missing, with libarchive's SECURE_SYMLINKS, _NODOTDOT and
 *   _NOABSOLUTEPATHS; hard links and anything other than files,
 *   directories and symlinks are refused.  With "-" the tar stream itself
 *   goes to stdout.
 * - Nothing written here keeps a setuid, setgid or sticky bit. */
int crl_copy_from_sandbox(struct crl_client *c, const char *id, const char *path, const char *local,
                          struct crl_err *err);

/* A local directory's contents as a tar stream made on the fly (only
 * files, directories and symlinks; owned by root; names relative to it):
 * `send` uploads what `source` reads until its end, which fails the upload
 * if the directory could not be read in full. */
typedef int (*crl_copy_send_fn)(void *ctx, crl_client_source_fn source, void *src_ctx,
                                struct crl_err *err);
int crl_copy_dir_stream(const char *local, crl_copy_send_fn send, void *ctx, struct crl_err *err);

#endif
