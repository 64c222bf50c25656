#include "tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "../util/cleanup.h"
#include "apply.h"
#include "stream.h"

int crl_tar_write_entry(struct archive *d, struct archive *w, struct archive_entry *e, char *msg,
                        size_t msglen)
{
    if (archive_write_header(w, e) < ARCHIVE_WARN) {
        snprintf(msg, msglen, "tar: %s", archive_error_string(w));
        return -1;
    }
    if (archive_entry_filetype(e) != AE_IFREG || archive_entry_size(e) <= 0)
        return 0;
    const void *buf;
    size_t len;
    la_int64_t off;
    int r;
    /* read_disk hands out the file's data block by block. */
    while ((r = archive_read_data_block(d, &buf, &len, &off)) == ARCHIVE_OK)
        if (archive_write_data(w, buf, len) < 0) {
            snprintf(msg, msglen, "tar: %s", archive_error_string(w));
            return -1;
        }
    if (r != ARCHIVE_EOF) {
        snprintf(msg, msglen, "reading %s: %s", archive_entry_pathname(e), archive_error_string(d));
        return -1;
    }
    return 0;
}

int crl_tar_out_each(int out_fd, crl_tar_entry_fn each, void *ctx, char *msg, size_t msglen)
{
    int ret = -1;
    struct archive *w = archive_write_new();
    struct archive *d = archive_read_disk_new();
    if (!w || !d) {
        snprintf(msg, msglen, "libarchive: out of memory");
        goto out;
    }
    /* No user/group name lookups: they would load NSS modules from the sandbox. */
    archive_read_disk_set_symlink_physical(d);
    archive_read_disk_set_behavior(d, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
    if (archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
        archive_write_open_fd(w, out_fd) != ARCHIVE_OK) {
        snprintf(msg, msglen, "tar: %s", archive_error_string(w));
        goto out;
    }
    if (archive_read_disk_open(d, ".") != ARCHIVE_OK) {
        snprintf(msg, msglen, "reading the directory: %s", archive_error_string(d));
        goto out;
    }
    for (;;) {
        struct archive_entry *e = archive_entry_new();
        int r = archive_read_next_header2(d, e);
        if (r == ARCHIVE_EOF) {
            archive_entry_free(e);
            break;
        }
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            snprintf(msg, msglen, "reading the directory: %s", archive_error_string(d));
            archive_entry_free(e);
            goto out;
        }
        archive_read_disk_descend(d);
        char name[8192];
        snprintf(name, sizeof(name), "%s", archive_entry_pathname(e));
        if (strcmp(name, ".") != 0) {
            archive_entry_copy_pathname(e, strncmp(name, "./", 2) == 0 ? name + 2 : name);
            r = each ? each(d, w, e, ctx, msg, msglen) : crl_tar_write_entry(d, w, e, msg, msglen);
        }
        archive_entry_free(e);
        if (r < 0)
            goto out;
    }
    if (archive_write_close(w) != ARCHIVE_OK) {
        snprintf(msg, msglen, "tar: %s", archive_error_string(w));
        goto out;
    }
    ret = 0;
out:
    if (d)
        archive_read_free(d);
    if (w)
        archive_write_free(w);
    return ret;
}

int crl_tar_out(int out_fd, char *msg, size_t msglen)
{
    return crl_tar_out_each(out_fd, NULL, NULL, msg, msglen);
}

int crl_tar_in(int in_fd, unsigned long *entries, char *msg, size_t msglen)
{
    int ret = -1;
    *entries = 0;
    struct archive *a = archive_read_new();
    struct archive *w = archive_write_disk_new();
    if (!a || !w) {
        snprintf(msg, msglen, "libarchive: out of memory");
        goto out;
    }
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    archive_read_support_filter_none(a);
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    archive_read_support_filter_xz(a);
    archive_write_disk_set_options(w, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
                                          ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                          ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                          ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);
    if (archive_read_open_fd(a, in_fd, 64 * 1024) != ARCHIVE_OK) {
        snprintf(msg, msglen, "the body is not a tar archive: %s", archive_error_string(a));
        goto out;
    }
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            snprintf(msg, msglen, "the body is not a valid tar archive: %s",
                     archive_error_string(a));
            goto out;
        }
        /* Device nodes and fifos are never created from an upload. */
        unsigned type = archive_entry_filetype(e);
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
            snprintf(msg, msglen, "tar entry '%s' is not a file, directory or symlink",
                     archive_entry_pathname(e));
            goto out;
        }
        if (archive_write_header(w, e) < ARCHIVE_WARN) {
            snprintf(msg, msglen, "extracting '%s': %s", archive_entry_pathname(e),
                     archive_error_string(w));
            goto out;
        }
        const void *buf;
        size_t len;
        la_int64_t off;
        while ((r = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK)
            if (archive_write_data_block(w, buf, len, off) < ARCHIVE_WARN) {
                snprintf(msg, msglen, "writing '%s': %s", archive_entry_pathname(e),
                         archive_error_string(w));
                goto out;
            }
        if (r != ARCHIVE_EOF) {
            snprintf(msg, msglen, "reading '%s' from the archive: %s", archive_entry_pathname(e),
                     archive_error_string(a));
            goto out;
        }
        if (archive_write_finish_entry(w) < ARCHIVE_WARN) {
            snprintf(msg, msglen, "finishing '%s': %s", archive_entry_pathname(e),
                     archive_error_string(w));
            goto out;
        }
        (*entries)++;
    }
    if (archive_write_close(w) != ARCHIVE_OK) {
        snprintf(msg, msglen, "extracting: %s", archive_error_string(w));
        goto out;
    }
    ret = 0;
out:
    if (a)
        archive_read_free(a);
    if (w)
        archive_write_free(w);
    return ret;
}

int crl_tar_status_of_errno(int e)
{
    switch (e) {
    case ENOENT: return CRL_STREAM_NOENT;
    case ENOTDIR: return CRL_STREAM_NOTDIR;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return CRL_STREAM_NOSPACE; /* EFBIG: a file over disk_mb (RLIMIT_FSIZE) */
    case EACCES:
    case EPERM:
    case EROFS: return CRL_STREAM_DENIED;
    case EISDIR: return CRL_STREAM_ISDIR;
    case ELOOP:
    case EXDEV:
    case ENAMETOOLONG: return CRL_STREAM_BAD_INPUT; /* a path we will not follow */
    default: return CRL_STREAM_FAILED;
    }
}

/* ---- applying a change set ---- */

/* How a failed apply ends the helper: a refusal or an unreadable stream is
 * bad input, a failed system call its errno's status. */
static int status_of(const struct crl_err *err)
{
    if (err->code == CRL_E_INVALID)
        return CRL_STREAM_BAD_INPUT;
    return err->sys_errno ? crl_tar_status_of_errno(err->sys_errno) : CRL_STREAM_FAILED;
}

/* Apply the tar read from in_fd as *o says; msg says why not, or
 * "entries=N". */
static int apply_stream(int in_fd, const struct crl_apply *o, unsigned long *entries, char *msg,
                        size_t msglen)
{
    int code = CRL_STREAM_FAILED;
    *entries = 0;
    snprintf(msg, msglen, "%s: out of memory", o->what);
    struct archive *a = archive_read_new();
    if (!a)
        return code;
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    archive_read_support_filter_none(a);
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_zstd(a);
    archive_read_support_filter_xz(a);
    if (archive_read_open_fd(a, in_fd, 64 * 1024) != ARCHIVE_OK) {
        snprintf(msg, msglen, "%s: not a tar archive: %s", o->what, archive_error_string(a));
        code = CRL_STREAM_BAD_INPUT;
        goto out;
    }
    struct crl_apply_stats st = {0};
    struct crl_err err = CRL_ERR_INIT;
    int r = crl_apply_archive(a, o, &st, &err);
    *entries = (unsigned long)st.entries;
    if (r < 0) {
        snprintf(msg, msglen, "%s", err.msg);
        code = err.code == CRL_E_TOO_LARGE ? CRL_STREAM_NOSPACE : status_of(&err);
        goto out;
    }
    snprintf(msg, msglen, "entries=%lu", *entries);
    code = CRL_STREAM_OK;
out:
    archive_read_free(a);
    return code;
}

int crl_tar_apply(int in_fd, unsigned flags, unsigned long *entries, char *msg, size_t msglen)
{
    *entries = 0;
    cleanup_close int root = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        snprintf(msg, msglen, "restoring: opening the tree: %s", strerror(errno));
        return CRL_STREAM_FAILED;
    }
    /* A restore is exact or an error: an xattr the file system will not
     * hold fails it.  Owners are numeric: no uid/gid lookups, and the
     * sandbox's NSS modules are never loaded. */
    struct crl_apply o = {
        .mode = CRL_APPLY_PERFORM,
        .flags = CRL_APPLY_EXACT | ((flags & CRL_TAR_APPLY_OWNERS) ? CRL_APPLY_OWNERS : 0),
        .root = root,
        .what = "restoring",
    };
    return apply_stream(in_fd, &o, entries, msg, msglen);
}

int crl_tar_unpack_layer(int in_fd, int root, uint64_t max_entries, unsigned long *entries,
                         char *msg, size_t msglen)
{
    /* Exact: an xattr the tree will not hold (user.* on a file system
     * without them) fails rather than leaving a checkpoint short of it. */
    struct crl_apply o = {
        .mode = CRL_APPLY_OVERLAY,
        .flags = CRL_APPLY_EXACT | CRL_APPLY_OWNERS | CRL_APPLY_USER_OPAQUE,
        .root = root,
        .what = "the guest's layer",
        .max_entries = max_entries,
    };
    return apply_stream(in_fd, &o, entries, msg, msglen);
}
