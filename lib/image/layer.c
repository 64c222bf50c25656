#include "layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../helper/apply.h"
#include "../util/fdio.h"
#include "../util/path.h"
#include "../util/sha256.h"

int crl_layer_clean_path(const char *name, char *out, size_t cap)
{
    return crl_path_normalise(name, name ? strlen(name) : 0, CRL_PATH_RULES_LAYER, out, cap) < 0
               ? -1
               : 0;
}

int crl_layer_apply(struct archive *a, int root, const char *what, uint64_t max_entries,
                    struct crl_layer_stats *st, struct crl_err *err)
{
    /* A layer keeps what an image needs: its owners, its device nodes and
     * fifos (inert: layers are mounted nodev), file capabilities; an xattr
     * the store's file system will not hold is dropped.  An entry named ""
     * stands for the root, as "./" does. */
    struct crl_apply o = {
        .mode = CRL_APPLY_OVERLAY,
        .flags = CRL_APPLY_OWNERS | CRL_APPLY_DEVICES | CRL_APPLY_CAPS | CRL_APPLY_EMPTY_ROOT,
        .root = root,
        .what = what,
        .max_entries = max_entries,
    };
    struct crl_apply_stats s = {0};
    int r = crl_apply_archive(a, &o, &s, err);
    st->entries += s.entries;
    st->bytes += s.bytes;
    return r;
}

/* ---- a directory into a layer tar ---- */

struct tar_out {
    int fd;
    struct crl_sha256 h;
};

static la_ssize_t tar_write(struct archive *a, void *ud, const void *buf, size_t len)
{
    struct tar_out *t = ud;
    if (crl_write_full(t->fd, buf, len) < 0) {
        archive_set_error(a, errno, "write: %s", strerror(errno));
        return -1;
    }
    crl_sha256_update(&t->h, buf, len);
    return (la_ssize_t)len;
}

/* A file's data, holes written as zeros. */
static int copy_data(struct archive *d, struct archive *w, const char *path, struct crl_err *err)
{
    static const char zeros[4096];
    const void *buf;
    size_t len;
    la_int64_t off, pos = 0;
    int r;
    while ((r = archive_read_data_block(d, &buf, &len, &off)) == ARCHIVE_OK) {
        while (pos < off) {
            size_t k = off - pos < (la_int64_t)sizeof(zeros) ? (size_t)(off - pos) : sizeof(zeros);
            if (archive_write_data(w, zeros, k) < 0)
                return crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", path,
                                   archive_error_string(w));
            pos += (la_int64_t)k;
        }
        if (archive_write_data(w, buf, len) < 0)
            return crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", path, archive_error_string(w));
        pos = off + (la_int64_t)len;
    }
    if (r != ARCHIVE_EOF)
        return crl_err_set(err, CRL_E_INTERNAL, "reading %s: %s", path, archive_error_string(d));
    return 0;
}

static int tar_entries(struct archive *d, struct archive *w, struct archive_entry_linkresolver *lr,
                       const char *rootfs, struct crl_err *err)
{
    size_t rl = strlen(rootfs);
    for (;;) {
        struct archive_entry *e = archive_entry_new(), *spare = NULL;
        int r = archive_read_next_header2(d, e);
        if (r == ARCHIVE_EOF) {
            archive_entry_free(e);
            return 0;
        }
        if (r < ARCHIVE_WARN) {
            crl_err_set(err, CRL_E_INTERNAL, "reading %s: %s", rootfs, archive_error_string(d));
            archive_entry_free(e);
            return -1;
        }
        archive_read_disk_descend(d);
        const char *src = archive_entry_pathname(e);
        const char *rel = strncmp(src, rootfs, rl) == 0 ? src + rl : src;
        while (*rel == '/')
            rel++;
        mode_t type = archive_entry_filetype(e);
        if (!*rel || (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)) {
            archive_entry_free(e);
            continue;
        }
        char path[4096];
        snprintf(path, sizeof(path), "%s", src);
        archive_entry_copy_sourcepath(e, path);
        archive_entry_copy_pathname(e, rel);
        archive_entry_copy_uname(e, NULL);
        archive_entry_copy_gname(e, NULL);
        archive_entry_linkify(lr, &e, &spare);
        int rc = 0;
        if (archive_write_header(w, e) < ARCHIVE_WARN)
            rc = crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", path, archive_error_string(w));
        else if (type == AE_IFREG && archive_entry_size(e) > 0 && !archive_entry_hardlink(e))
            rc = copy_data(d, w, path, err);
        archive_entry_free(e);
        archive_entry_free(spare);
        if (rc < 0)
            return -1;
    }
}

int crl_layer_from_dir(const char *rootfs, int fd, char diff_id[CRL_DIGEST_LEN + 1],
                       struct crl_err *err)
{
    struct tar_out t = {.fd = fd};
    if (crl_sha256_init(&t.h) < 0)
        return crl_err_sys(err, ENOMEM, "sha256");
    struct archive *d = archive_read_disk_new();
    struct archive *w = archive_write_new();
    struct archive_entry_linkresolver *lr = archive_entry_linkresolver_new();
    int ret = -1;
    if (!d || !w || !lr) {
        crl_err_sys(err, ENOMEM, "libarchive");
        goto out;
    }
    archive_read_disk_set_symlink_physical(d);
    archive_read_disk_set_behavior(d, ARCHIVE_READDISK_NO_ACL | ARCHIVE_READDISK_NO_FFLAGS |
                                          ARCHIVE_READDISK_NO_SPARSE |
                                          ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
    archive_entry_linkresolver_set_strategy(lr, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
    if (archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
        archive_write_open(w, &t, NULL, tar_write, NULL) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "tar: %s", archive_error_string(w));
        goto out;
    }
    if (archive_read_disk_open(d, rootfs) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "%s: %s", rootfs, archive_error_string(d));
        goto out;
    }
    if (tar_entries(d, w, lr, rootfs, err) < 0)
        goto out;
    if (archive_write_close(w) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", rootfs, archive_error_string(w));
        goto out;
    }
    ret = 0;
out:
    archive_entry_linkresolver_free(lr);
    archive_write_free(w);
    archive_read_free(d);
    if (ret == 0)
        crl_sha256_final(&t.h, diff_id);
    else
        crl_sha256_free(&t.h);
    return ret;
}
