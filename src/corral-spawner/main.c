/* corral-spawner: the helper corrald starts to enter sandboxes (see
 * lib/backend/container/spawn_proto.h).  Not for direct use: corrald passes
 * the socket as fd 3 and its settings in the environment. */
#include <stdio.h>
#include <stdlib.h>

#include "../../lib/backend/container/spawn_proto.h"
#include "../../lib/backend/container/spawner.h"
#include "../../lib/util/log.h"

int main(void)
{
    const char *workdir = getenv("CORRAL_SPAWNER_WORKDIR");
    const char *level_s = getenv("CORRAL_SPAWNER_LOG");
    enum crl_log_level level = CRL_LOG_INFO;
    if (!workdir) {
        fprintf(stderr, "corral-spawner is started by corrald, not by hand\n");
        return 2;
    }
    if (level_s)
        crl_log_parse_level(level_s, &level);
    crl_log_setup(level, CRL_LOG_TEXT, "corral-spawner");
    return crl_spawner_main(CRL_SPAWN_FD, workdir);
}
