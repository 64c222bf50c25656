/* The route table's handler columns: what serves each entry of routes.def,
 * in the same order as the matcher's (router.c). */
#include "routes.h"

#include "../functions/functions.h"
#include "cluster.h"
#include "handlers_actions.h"
#include "handlers_ports.h"
#include "handlers_code.h"
#include "handlers_exec.h"
#include "handlers_files.h"
#include "handlers_fs.h"
#include "handlers_functions.h"
#include "handlers_images.h"
#include "handlers_pools.h"
#include "handlers_volumes.h"
#include "handlers_processes.h"
#include "handlers_sandboxes.h"
#include "handlers_traj.h"
#include "service_server.h"
#include "request.h"

static const struct crl_handler handlers[] = {
#define ROUTE(ep, method, pattern, ...) {__VA_ARGS__},
#include "routes.def"
#undef ROUTE
};

const struct crl_handler *crl_routes_handler(int entry)
{
    if (entry < 0 || entry >= (int)(sizeof(handlers) / sizeof(handlers[0])))
        return NULL;
    return &handlers[entry];
}
