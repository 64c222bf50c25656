/* Idmapped mounts: a mount whose files' owners are shifted into a
 * sandbox's id range, so that one file tree (an image layer, a volume)
 * shows every sandbox the same owners, and no file is ever chowned. */
#ifndef CRL_OS_IDMAP_H
#define CRL_OS_IDMAP_H

#include <stdbool.h>
#include <stdint.h>

#include "../util/err.h"

/* A user namespace (its descriptor) whose ids 0..count-1 are the host's
 * base..base+count-1: what a sandbox with that range sees, for
 * crl_mount_idmapped() where no process of the sandbox's own has one (a
 * function sandbox runs in the host's).  Needs root. */
int crl_userns_of_range(uint32_t base, uint32_t count, struct crl_err *err);

/* A detached clone of mount `mnt` seen through `userns`'s ids (a file of
 * id 0 belongs to what the namespace's 0 is on the host), nodev, nosuid,
 * read-only if asked.  -1 with errno on failure. */
int crl_mount_idmapped(int mnt, int userns, bool read_only);

#endif
