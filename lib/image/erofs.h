/* EROFS layers: built from a directory by mkfs.erofs (erofs-utils), mounted
 * straight from the file with the new mount API (kernels from 6.12 mount an
 * EROFS file without a loop device). */
#ifndef CRL_IMAGE_EROFS_H
#define CRL_IMAGE_EROFS_H

#include "../util/err.h"

/* mkfs.erofs `dir` into the new file `out` (uncompressed, mtimes kept).
 * mkfs.erofs is found on PATH. */
int crl_erofs_build(const char *dir, const char *out, struct crl_err *err);

/* A detached, read-only, nodev, nosuid mount of the EROFS file `path`:
 * returned as a descriptor that the mount lives as long as. */
int crl_erofs_mount(const char *path, struct crl_err *err);

#endif
