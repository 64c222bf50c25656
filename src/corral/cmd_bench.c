/* corral bench: the benchmarks are a program of their own, corral-bench
 * (src/corral-bench), built next to corral as corrald is; this command
 * runs it in our place with the same arguments, so that the CLI carries
 * none of the bench's code (docs/benchmarks.md). */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/util/fdio.h"
#include "cli.h"

int crl_cmd_bench(int argc, char **argv)
{
    char bench[PATH_MAX];
    struct crl_err err = CRL_ERR_INIT;
    if (crl_sibling_path("corral-bench", bench, sizeof(bench), &err) < 0)
        return crl_cli_fail(&err);
    /* argv[0] is "bench"; argv[argc] is NULL, as execv() wants it. */
    argv[0] = bench;
    execv(bench, argv);
    return crl_cli_failf("bench: running %s: %s", bench, strerror(errno));
}
