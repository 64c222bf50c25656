/* corral-spawner: the helper corrald starts to enter sandboxes (see
 * lib/backend/container/spawn_proto.h).  Not for direct use. */
#include <stdio.h>
#include <string.h>

#include "../../lib/backend/container/spawn_proto.h"
#include "../../lib/backend/container/spawner.h"
#include "../../lib/util/log.h"

int main(int argc, char **argv)
{
    enum crl_log_format fmt = CRL_LOG_TEXT;
    enum crl_log_level level = CRL_LOG_INFO;
    if (argc < 2 || strncmp(argv[1], "--workdir=", 10) != 0) {
        fprintf(stderr, "corral-spawner is started by corrald, not by hand\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "--log-format=", 13) == 0)
            crl_log_parse_format(argv[i] + 13, &fmt);
        else if (strncmp(argv[i], "--log-level=", 12) == 0)
            crl_log_parse_level(argv[i] + 12, &level);
    }
    crl_log_setup(level, fmt, "corral-spawner");
    return crl_spawner_main(CRL_SPAWN_FD, argv[1] + 10);
}
