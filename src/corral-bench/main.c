/* corral-bench [cycle|density|functions|images|traj|processes] [OPTIONS]: main() only
 * dispatches to one bench; with no name (or options first) it is the
 * sandbox cycle, as `corral bench` is. */
#include <string.h>

#include "bench.h"

static const struct {
    const char *name;
    const struct crl_bench_cmd *cmd;
} benches[] = {
    {"cycle", &crl_bench_cycle},         {"density", &crl_bench_density},
    {"functions", &crl_bench_functions}, {"images", &crl_bench_images},
    {"traj", &crl_bench_traj},           {"processes", &crl_bench_processes},
};

int main(int argc, char **argv)
{
    for (size_t i = 0; argc > 1 && i < sizeof(benches) / sizeof(benches[0]); i++)
        if (strcmp(argv[1], benches[i].name) == 0)
            return crl_bench_main(benches[i].cmd, argc - 1, argv + 1);
    return crl_bench_main(&crl_bench_cycle, argc, argv);
}
