/* A checkpoint's two halves in the guest (builtin.c runs them as root):
 *
 *   corral:layer-out  the writable layer (the overlay's upper dir, on the
 *                     descriptor CRL_GA_LAYER_FD) as a tar in the format of
 *                     an OCI layer: an overlayfs whiteout (a 0/0 character
 *                     device) is D/.wh.NAME, an opaque directory is
 *                     followed by D/.wh..wh..opq.  What a checkpoint keeps
 *                     (lib/traj/ckpt.h) and no more: files, directories,
 *                     symlinks, user.* xattrs (not user.overlay.*); no
 *                     devices, fifos or sockets, no name that begins with
 *                     ".wh." (the format's own); an id past 65535, which
 *                     no sandbox's id map holds, is 65534.
 *   corral:layer-in   a checkpoint's change set (backend.h's struct
 *                     crl_restore_req) applied over the root, through the
 *                     overlay, as the container backend applies it:
 *                     crl_tar_apply with owners; "entries=N" on stderr.
 *
 * The host treats what layer-out writes as hostile all the same: it
 * unpacks it in a jailed helper (lib/backend/microvm/view.c). */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/helper/stream.h"
#include "../../lib/helper/tar.h"
#include "agent.h"

#define NOBODY 65534

/* An empty regular entry named dir/prefix+base: a whiteout, or an opaque marker. */
static int marker(struct archive *w, const char *dir, const char *name, time_t mtime)
{
    char path[8192];
    int n = snprintf(path, sizeof(path), "%s%s%s", dir, dir[0] ? "/" : "", name);
    if (n < 0 || (size_t)n >= sizeof(path))
        return 0; /* a name too long for any tar reader here: left out */
    struct archive_entry *m = archive_entry_new();
    if (!m)
        return -1;
    archive_entry_set_pathname(m, path);
    archive_entry_set_filetype(m, AE_IFREG);
    archive_entry_set_perm(m, 0);
    archive_entry_set_size(m, 0);
    archive_entry_set_mtime(m, mtime, 0);
    int r = archive_write_header(w, m);
    archive_entry_free(m);
    return r < ARCHIVE_WARN ? -1 : 0;
}

/* Keep user.* (not user.overlay.*); say whether trusted.overlay.opaque is "y". */
static bool filter_xattrs(struct archive_entry *e)
{
    struct kept {
        char *name;
        void *value;
        size_t size;
    } kept[64];
    size_t n = 0;
    bool opaque = false;
    const char *name;
    const void *value;
    size_t size;
    archive_entry_xattr_reset(e);
    while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
        if (strcmp(name, "trusted.overlay.opaque") == 0)
            opaque = size == 1 && *(const char *)value == 'y';
        else if (strncmp(name, "user.", 5) == 0 && strncmp(name, "user.overlay.", 13) != 0 &&
                 n < sizeof(kept) / sizeof(kept[0])) {
            kept[n].name = strdup(name);
            kept[n].value = malloc(size ? size : 1);
            if (!kept[n].name || !kept[n].value) {
                free(kept[n].name);
                free(kept[n].value);
                continue;
            }
            memcpy(kept[n].value, value, size);
            kept[n].size = size;
            n++;
        }
    }
    archive_entry_xattr_clear(e);
    for (size_t i = 0; i < n; i++) {
        archive_entry_xattr_add_entry(e, kept[i].name, kept[i].value, kept[i].size);
        free(kept[i].name);
        free(kept[i].value);
    }
    return opaque;
}

/* One entry of the upper dir, transformed as the header says. */
static int layer_entry(struct archive *d, struct archive *w, struct archive_entry *e, void *ctx,
                       char *msg, size_t msglen)
{
    (void)ctx;
    char path[8192];
    if (snprintf(path, sizeof(path), "%s", archive_entry_pathname(e)) >= (int)sizeof(path))
        return 0; /* longer than any path the host takes */
    char dir[sizeof(path)];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) : 0;
    memcpy(dir, path, dlen);
    dir[dlen] = 0;
    if (strncmp(base, ".wh.", 4) == 0)
        return 0;
    mode_t type = archive_entry_filetype(e);
    if (type == AE_IFCHR && archive_entry_rdev(e) == 0) {
        char wh[4096];
        snprintf(wh, sizeof(wh), ".wh.%s", base);
        if (marker(w, dir, wh, archive_entry_mtime(e)) < 0) {
            snprintf(msg, msglen, "tar: %s", archive_error_string(w));
            return -1;
        }
        return 0;
    }
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
        return 0;
    bool opaque = filter_xattrs(e);
    if (archive_entry_uid(e) > 65535)
        archive_entry_set_uid(e, NOBODY);
    if (archive_entry_gid(e) > 65535)
        archive_entry_set_gid(e, NOBODY);
    archive_entry_set_uname(e, NULL);
    archive_entry_set_gname(e, NULL);
    if (crl_tar_write_entry(d, w, e, msg, msglen) < 0)
        return -1;
    if (type == AE_IFDIR && opaque && marker(w, path, ".wh..wh..opq", archive_entry_mtime(e)) < 0) {
        snprintf(msg, msglen, "tar: %s", archive_error_string(w));
        return -1;
    }
    return 0;
}

static int layer_out(char *msg, size_t msglen)
{
    if (fchdir(CRL_GA_LAYER_FD) < 0 || chdir("upper") < 0) {
        snprintf(msg, msglen, "the writable layer: %s", strerror(errno));
        return -1;
    }
    close(CRL_GA_LAYER_FD);
    return crl_tar_out_each(1, layer_entry, NULL, msg, msglen);
}

int crl_ga_layer(char *const argv[])
{
    char msg[512] = "";
    if (argv[1]) {
        dprintf(2, "%s: no arguments, please\n", argv[0]);
        return CRL_STREAM_FAILED;
    }
    if (strcmp(argv[0], CRL_GA_BUILTIN_LAYER_OUT) == 0) {
        if (layer_out(msg, sizeof(msg)) < 0) {
            dprintf(2, "%s\n", msg);
            return CRL_STREAM_FAILED;
        }
        return CRL_STREAM_OK;
    }
    unsigned long n = 0;
    if (chdir("/") < 0) {
        dprintf(2, "/: %s\n", strerror(errno));
        return CRL_STREAM_FAILED;
    }
    int code = crl_tar_apply(0, CRL_TAR_APPLY_OWNERS, &n, msg, sizeof(msg));
    /* Read to the end: the host must not meet a closed pipe. */
    char sink[65536];
    while (read(0, sink, sizeof(sink)) > 0)
        ;
    if (code != CRL_STREAM_OK)
        dprintf(2, "%s\n", msg);
    else
        dprintf(2, "entries=%lu\n", n);
    return code;
}
