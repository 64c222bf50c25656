/* /v1/volumes: named volumes that outlive sandboxes (lib/core/volume.h). */
#ifndef CRL_API_HANDLERS_VOLUMES_H
#define CRL_API_HANDLERS_VOLUMES_H

struct crl_req;

void crl_h_volumes_list(struct crl_req *r);
/* POST {"name", "size_mb", "labels"} -> 201 */
void crl_h_volume_create(struct crl_req *r);
void crl_h_volume_inspect(struct crl_req *r);
void crl_h_volume_remove(struct crl_req *r);

#endif
