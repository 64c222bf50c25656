/* Named volumes (docs/api.md, Volumes): storage that outlives sandboxes,
 * mounted into them at create.  A volume is a directory of the volume
 * dir (`--volume-dir`, else <state>/volumes) holding `volume.json` (its
 * name, size, labels, creation time) and `disk.ext4`, a sparse file made
 * with mkfs.ext4 at the volume's size: the kernel enforces the size (a
 * write past it is ENOSPC), and ext4's journal keeps it consistent however
 * corrald or a sandbox ends.
 *
 * corrald mounts a volume once, at its first use, as a detached mount of
 * the file through a loop device (LOOP_CONFIGURE with autoclear; fsopen,
 * fsmount: nodev, nosuid, in no mount table), keeps that descriptor while
 * it runs, and gives each sandbox an idmapped clone of it (read-only if
 * asked), so every sandbox sees the same owners whatever its uid range: a
 * file of uid 1000 in one is uid 1000 in the next.  A volume is mounted
 * read-write by one sandbox at a time, or read-only by any number: a
 * mount that breaks that rule is refused (409), as is removing a volume in
 * use.  When corrald ends, the sandboxes' mounts are all that hold the
 * file system; when the last goes, the kernel unmounts it and frees the
 * loop device.  A volume still held so (by a sandbox of a corrald that was
 * killed) is not mounted again until it is free: two mounts of one file
 * would corrupt it.
 *
 * A microvm's guest mounts a volume with its own kernel: it is given the
 * disk file (read-only if asked), once corrald's mount has gone, so that
 * one kernel alone has the file system at a time; a volume is then used
 * by guests alone (read-write by one, or read-only by any number) or by
 * sandboxes on the host alone, never both at once (409). */
#ifndef CRL_CORE_VOLUME_H
#define CRL_CORE_VOLUME_H

#include <jansson.h>

#include "../util/err.h"
#include "spec.h"

#define CRL_VOLUMES_MAX 1024
#define CRL_VOLUME_MIN_MB 16
#define CRL_VOLUME_MAX_MB (1024u * 1024u) /* 1 TiB */

struct crl_volumes;

/* How a backend's sandboxes use volumes. */
enum crl_volume_use {
    CRL_VOLUMES_NONE,  /* they cannot */
    CRL_VOLUMES_MOUNT, /* idmapped clones of corrald's mount (containers, functions) */
    CRL_VOLUMES_DISK,  /* the disk file, for a guest's kernel (microVMs) */
};

/* Open the volume dir `dir` (made if missing), reading what is there. */
int crl_volumes_open(const char *dir, struct crl_volumes **out, struct crl_err *err);
/* Close every volume's mount (the sandboxes' own stay) and free. */
void crl_volumes_free(struct crl_volumes *vs);

/* POST /v1/volumes's body: {"name", "size_mb", "labels"}. */
int crl_volume_create(struct crl_volumes *vs, json_t *body, json_t **out, struct crl_err *err);
int crl_volume_remove(struct crl_volumes *vs, const char *name, struct crl_err *err);
json_t *crl_volume_inspect(struct crl_volumes *vs, const char *name, struct crl_err *err);
/* Every volume (the API orders, filters and pages them: crl_req_list). */
json_t *crl_volumes_list(struct crl_volumes *vs);

/* Take the volumes spec->volumes names for sandbox `id` to use so: each
 * exists, and its users allow one more (409 naming who holds it
 * otherwise); fds[i] gets volume i's mount or disk file (corrald's:
 * borrowed until the release).  All or nothing. */
int crl_volumes_take(struct crl_volumes *vs, const char *id, const struct crl_spec *spec,
                     enum crl_volume_use use, int *fds, struct crl_err *err);
/* A sandbox a corrald before this one mounted spec's volumes into, and
 * that runs on (an adopted one): its mounts are its own, so nothing is
 * mounted here; it is only a user again, which the rules above hold
 * others to, and its volumes stay mounted by it alone until it ends (an
 * earlier corrald's mount is never mounted again while it lives). */
int crl_volumes_adopt(struct crl_volumes *vs, const char *id, const struct crl_spec *spec,
                      struct crl_err *err);
/* Give back what sandbox `id` took (nothing taken: nothing happens). */
void crl_volumes_release(struct crl_volumes *vs, const char *id);

#endif
