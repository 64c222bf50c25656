/* corral bench: the benchmarks are a program of their own, corral-bench
 * (src/corral-bench), built next to corral as corrald is; this command
 * runs it in our place with the same arguments, so that the CLI carries
 * none of the bench's code (docs/benchmarks.md). */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int crl_cmd_bench(int argc, char **argv)
{
    char self[PATH_MAX], bench[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n < 0)
        return crl_cli_failf("bench: readlink /proc/self/exe: %s", strerror(errno));
    self[n] = 0;
    snprintf(bench, sizeof(bench), "%s/corral-bench", dirname(self));
    /* argv[0] is "bench"; argv[argc] is NULL, as execv() wants it. */
    argv[0] = bench;
    execv(bench, argv);
    return crl_cli_failf("bench: running %s: %s", bench, strerror(errno));
}
