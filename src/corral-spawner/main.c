/* corral-spawner: the helper corrald starts to enter sandboxes (see
 * lib/backend/container/spawn_proto.h).  Not for direct use: corrald passes
 * the socket as fd 3 and its settings in the environment. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    /* corral-init lives next to us unless corrald says otherwise. */
    char init[PATH_MAX];
    const char *init_env = getenv("CORRAL_SPAWNER_INIT");
    if (init_env) {
        snprintf(init, sizeof(init), "%s", init_env);
    } else {
        ssize_t n = readlink("/proc/self/exe", init, sizeof(init) - 16);
        if (n < 0)
            return 1;
        init[n] = 0;
        char *slash = strrchr(init, '/');
        snprintf(slash ? slash + 1 : init, sizeof(init) - (size_t)(slash ? slash + 1 - init : 0),
                 "corral-init");
    }
    return crl_spawner_main(CRL_SPAWN_FD, workdir, init);
}
