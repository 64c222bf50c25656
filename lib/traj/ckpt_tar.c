/* Restoring: the merged state of a checkpoint's chain written as a tar
 * stream in the restore format (ckpt.h, crl_ckpt_write_tar). */
#include "ckpt_int.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../util/fdio.h"

static la_ssize_t tar_write(struct archive *a, void *ud, const void *buf, size_t len)
{
    if (crl_write_full(*(int *)ud, buf, len) < 0) {
        archive_set_error(a, errno, "write: %s", strerror(errno));
        return -1;
    }
    return (la_ssize_t)len;
}

/* Below an opaque dir, the image shows nothing a whiteout could hide. */
static bool below_opaque(const struct crl_ckpt_index *idx, const struct ent *e)
{
    for (size_t len = e->plen;;) {
        const char *slash = memrchr(e->path, '/', len);
        if (!slash)
            return false;
        len = (size_t)(slash - e->path);
        struct ent *a = crl__ckpt_idx_find(idx, e->path, len);
        if (a && a->type == ENT_DIR && (a->opaque || a->replaced))
            return true;
    }
}

static int tar_header(struct archive *a, struct archive_entry *ae, const char *path,
                      struct crl_err *err)
{
    if (archive_write_header(a, ae) < ARCHIVE_WARN)
        return crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", path, archive_error_string(a));
    return 0;
}

/* An empty regular file named `dir/.wh.name`, or `dir/.wh..wh..opq`. */
static int tar_marker(struct archive *a, struct archive_entry *ae, const char *dir, size_t dlen,
                      const char *name, struct crl_err *err)
{
    struct crl_buf p;
    crl_buf_init(&p, CRL_BUF_UNBOUNDED);
    if ((dlen && (crl_buf_append(&p, dir, dlen) < 0 || crl_buf_append(&p, "/", 1) < 0)) ||
        crl_buf_printf(&p, ".wh.%s", name) < 0) {
        crl_buf_free(&p);
        return crl_err_sys(err, ENOMEM, "tar");
    }
    archive_entry_clear(ae);
    archive_entry_copy_pathname(ae, p.data);
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, 0644);
    archive_entry_set_size(ae, 0);
    int r = tar_header(a, ae, p.data, err);
    crl_buf_free(&p);
    return r;
}

static int tar_content(struct crl_ckpt_store *s, const struct ent *e, struct archive *a,
                       uint8_t *buf, struct crl_ckpt_stats *st, struct crl_err *err)
{
    struct blob_rd r;
    if (crl__ckpt_blob_rd_open(s, e->blob, &r, err) < 0)
        return crl_err_prefix(err, "%s", e->path);
    ssize_t n;
    while ((n = crl__ckpt_blob_rd_read(&r, buf, CHUNK, err)) > 0) {
        if (r.total > e->size)
            break;
        if (archive_write_data(a, buf, (size_t)n) != n) {
            crl__ckpt_blob_rd_close(&r);
            return crl_err_set(err, CRL_E_INTERNAL, "tar %s: %s", e->path, archive_error_string(a));
        }
        st->bytes_read += (uint64_t)n;
    }
    crl__ckpt_blob_rd_close(&r);
    if (n < 0)
        return crl_err_prefix(err, "%s", e->path);
    if (r.total != e->size)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s: blob %s (%s/sha256/%s) holds %s bytes than its entry's %llu",
                           e->path, e->blob, s->dir, crl_digest_hex(e->blob),
                           r.total > e->size ? "more" : "fewer", (unsigned long long)e->size);
    return 0;
}

static int tar_entry(struct crl_ckpt_store *s, const struct crl_ckpt_index *idx, struct ent *e,
                     struct archive *a, struct archive_entry *ae, uint8_t *buf,
                     struct crl_ckpt_stats *st, struct crl_err *err)
{
    const char *slash = memrchr(e->path, '/', e->plen);
    size_t dlen = slash ? (size_t)(slash - e->path) : 0;
    if (e->type == ENT_WHITEOUT) {
        if (below_opaque(idx, e))
            return 0;
        st->entries++;
        return tar_marker(a, ae, e->path, dlen, slash ? slash + 1 : e->path, err);
    }
    archive_entry_clear(ae);
    archive_entry_copy_pathname(ae, e->path);
    archive_entry_set_uid(ae, e->uid);
    archive_entry_set_gid(ae, e->gid);
    archive_entry_set_mtime(ae, e->mtime_s, e->mtime_ns);
    for (size_t i = 0; i < e->n_xattrs; i++)
        archive_entry_xattr_add_entry(ae, e->xattrs[i].name, e->xattrs[i].value, e->xattrs[i].len);
    st->entries++;
    if (e->type == ENT_SYMLINK) {
        archive_entry_set_filetype(ae, AE_IFLNK);
        archive_entry_set_perm(ae, 0777);
        archive_entry_copy_symlink(ae, e->target);
        return tar_header(a, ae, e->path, err);
    }
    archive_entry_set_perm(ae, e->mode);
    if (e->type == ENT_DIR) {
        archive_entry_set_filetype(ae, AE_IFDIR);
        if (tar_header(a, ae, e->path, err) < 0)
            return -1;
        if (!e->opaque && !e->replaced)
            return 0;
        st->entries++;
        return tar_marker(a, ae, e->path, e->plen, ".wh..opq", err);
    }
    archive_entry_set_filetype(ae, AE_IFREG);
    /* A hard link only to its first path restored with the same content. */
    struct ent *lead = e->link ? crl__ckpt_idx_find(idx, e->link, strlen(e->link)) : NULL;
    if (lead && lead->seen == 1 && strcmp(lead->blob, e->blob) == 0 && lead->mode == e->mode &&
        lead->uid == e->uid && lead->gid == e->gid) {
        archive_entry_copy_hardlink(ae, lead->path);
        archive_entry_set_size(ae, 0);
        return tar_header(a, ae, e->path, err);
    }
    archive_entry_set_size(ae, (la_int64_t)e->size);
    if (tar_header(a, ae, e->path, err) < 0 ||
        (e->size > 0 && tar_content(s, e, a, buf, st, err) < 0))
        return -1;
    e->seen = 1;
    return 0;
}

int crl_ckpt_write_tar(struct crl_ckpt_store *s, const char *ckpt_id, int fd,
                       struct crl_ckpt_stats *st, struct crl_err *err)
{
    struct crl_ckpt_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof(*st));
    struct crl_ckpt_index *idx = NULL;
    struct ent **v = NULL;
    struct archive *a = NULL;
    struct archive_entry *ae = NULL;
    uint8_t *buf = NULL;
    int ret = -1;
    if (crl__ckpt_index_load(s, ckpt_id, &idx, err) < 0)
        return -1;
    if (crl__ckpt_idx_sorted(idx, &v, err) < 0)
        goto out;
    a = archive_write_new();
    ae = archive_entry_new();
    buf = malloc(CHUNK);
    if (!a || !ae || !buf) {
        crl_err_sys(err, ENOMEM, "tar");
        goto out;
    }
    /* pax, not pax_restricted: only pax keeps sub-second mtimes of entries
     * that need no other extension. */
    if (archive_write_set_format_pax(a) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open(a, &fd, NULL, tar_write, NULL) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "tar: %s", archive_error_string(a));
        goto out;
    }
    for (size_t i = 0; i < idx->count; i++)
        if (tar_entry(s, idx, v[i], a, ae, buf, st, err) < 0)
            goto out;
    if (archive_write_close(a) != ARCHIVE_OK) {
        crl_err_set(err, CRL_E_INTERNAL, "tar: %s", archive_error_string(a));
        goto out;
    }
    ret = 0;
out:
    if (ret < 0)
        crl_err_prefix(err, "restoring checkpoint %s", ckpt_id && *ckpt_id ? ckpt_id : "(none)");
    archive_entry_free(ae);
    archive_write_free(a);
    free(buf);
    free(v);
    crl_ckpt_index_free(idx);
    return ret;
}
