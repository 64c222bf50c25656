/* The image endpoints: list, inspect, remove, tag, gc, and import. */
#ifndef CRL_API_HANDLERS_IMAGES_H
#define CRL_API_HANDLERS_IMAGES_H

#include <stdbool.h>
#include <stddef.h>

struct crl_api;
struct crl_err;
struct crl_req;

/* GET /v1/images: every image in the store. */
void crl_h_images_list(struct crl_req *r);
/* POST /v1/images/tag {"source", "target"}: 201 with the image. */
void crl_h_images_tag(struct crl_req *r);
/* POST /v1/images/gc: what unreferenced blobs were removed. */
void crl_h_images_gc(struct crl_req *r);
/* GET /v1/images/{image}: one image. */
void crl_h_image_inspect(struct crl_req *r);
/* DELETE /v1/images/{image}: 204 once removed. */
void crl_h_image_remove(struct crl_req *r);
/* GET /v1/blobs/sha256/{hex}: a blob of the image store by its digest (an
 * image's config by its id, a layer's EROFS file by its diff_id), for a
 * host that pulls the image. */
void crl_h_blob_get(struct crl_req *r);
/* POST /v1/images: an import.  Begin starts the importer at the headers
 * (the request's state: the import, which may outlive it) and takes the
 * body chunk by chunk (body, as crl_h_files_put_body() does a file's); end
 * closes its stdin once the body is in, and the importer's exit answers.
 * Cancel cuts a body short: the importer refuses the truncated archive,
 * or is killed 10 s later. */
bool crl_h_images_import_begin(struct crl_req *r);
int crl_h_images_import_body(struct crl_req *r, const char *data, size_t *len);
void crl_h_images_import_end(struct crl_req *r);
void crl_h_images_import_cancel(struct crl_req *r);
/* Pull `image` from other hosts for the create `r`: `hosts` is what
 * corral-import --pull reads on stdin (pull.c).  One pull per image at a
 * time: a create for one under way waits for the same.  `done` gets r (with
 * err NULL once the image is here) unless its client left; 0: r waits,
 * with a pending count held until then. */
typedef void (*crl_pull_done_fn)(struct crl_req *r, const struct crl_err *err);
int crl_h_images_pull(struct crl_req *r, const char *image, const char *hosts,
                      crl_pull_done_fn done, struct crl_err *err);
/* At shutdown: kill and reap every importer still running. */
void crl_h_images_stop(struct crl_api *a);

#endif
