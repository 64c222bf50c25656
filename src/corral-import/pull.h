/* corral-import's --pull: an image from another host of the cluster. */
#ifndef CORRAL_IMPORT_PULL_H
#define CORRAL_IMPORT_PULL_H

#include <jansson.h>

#include "../../lib/image/store.h"

int crl_import_pull(struct crl_store *s, const char *name, const struct crl_import_limits *lim,
                    json_t **out, struct crl_err *err);

#endif
