/* corral-bench [cycle|functions|images|traj] [OPTIONS]: main() only
 * dispatches to one bench; with no name (or options first) it is the
 * sandbox cycle, as `corral bench` is. */
#include <string.h>

#include "bench.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *self; /* the command's name in messages and usage */
} benches[] = {
    {"cycle", crl_bench_cycle, "bench"},
    {"functions", crl_bench_functions, "bench functions"},
    {"images", crl_bench_images, "bench images"},
    {"traj", crl_bench_traj, "bench traj"},
};

int main(int argc, char **argv)
{
    for (size_t i = 0; argc > 1 && i < sizeof(benches) / sizeof(benches[0]); i++)
        if (strcmp(argv[1], benches[i].name) == 0) {
            argv[1] = (char *)benches[i].self;
            return benches[i].fn(argc - 1, argv + 1);
        }
    argv[0] = (char *)benches[0].self;
    return crl_bench_cycle(argc, argv);
}
