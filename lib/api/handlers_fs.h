/* The filesystem API (docs/api.md, Filesystem): stat, list, mkdir, move,
 * remove and watch, through lib/core/fs.h. */
#ifndef CRL_API_HANDLERS_FS_H
#define CRL_API_HANDLERS_FS_H

struct crl_req;

/* GET .../fs/stat, .../fs/list: 200 with the entry, or the entries. */
void crl_h_fs_get(struct crl_req *r);
/* POST .../fs/mkdir, .../fs/move (200 with the entry made), .../fs/remove. */
void crl_h_fs_post(struct crl_req *r);
/* GET .../fs/watch: NDJSON, an event a line, until the client goes. */
void crl_h_fs_watch(struct crl_req *r);
/* A watch held back by a slow client goes on. */
void crl_h_fs_drained(struct crl_req *r);
void crl_h_fs_cancel(struct crl_req *r);
void crl_h_fs_free(struct crl_req *r);

#endif
