#include "bench.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/client/client.h"
#include "../../lib/util/cleanup.h"
#include "../corral/cli.h"

enum {
    OPT_START = CRL_CLI_OPT_OTHER,
    OPT_ITER, /* the three counts in this order: count_flag() indexes by it */
    OPT_IMPORTS,
    OPT_SANDBOXES,
    OPT_IMAGE,
    OPT_JSON,
    OPT_BASELINE
};

/* Every bench option, with what a bench must take to be offered it.  Each
 * bench's getopt table holds only its own, so that an abbreviation means
 * in one what it always has (--im is --image in traj, ambiguous in images). */
static const struct {
    struct option opt;
    unsigned takes;
} all_opts[] = {
    {{"start-daemon", no_argument, 0, OPT_START}, 0},
    {{"iterations", required_argument, 0, OPT_ITER}, 0},
    {{"imports", required_argument, 0, OPT_IMPORTS}, CRL_BENCH_TAKES_IMPORTS},
    {{"sandboxes", required_argument, 0, OPT_SANDBOXES}, CRL_BENCH_TAKES_SANDBOXES},
    {{"image", required_argument, 0, OPT_IMAGE}, CRL_BENCH_TAKES_IMAGE},
    {{"json", no_argument, 0, OPT_JSON}, 0},
    {{"baseline", required_argument, 0, OPT_BASELINE}, CRL_BENCH_TAKES_BASELINE},
    {{"help", no_argument, 0, 'h'}, 0},
};

/* --iterations, --imports or --sandboxes (c) = arg, in the bench's range:
 * -1 to go on, else the usage error's status. */
static int count_flag(struct crl_bench_run *run, int c, const char *arg)
{
    static const char *const flags[] = {"--iterations", "--imports", "--sandboxes"};
    size_t *const into[] = {&run->o.iterations, &run->o.imports, &run->o.sandboxes};
    const struct crl_bench_cmd *cmd = run->cmd;
    long long lo = cmd->count_max ? cmd->count_min : 10,
              hi = cmd->count_max ? cmd->count_max : 1000000;
    struct crl_err err = CRL_ERR_INIT;
    long long v;
    int k = c - OPT_ITER;
    if (crl_cli_parse_int(flags[k], arg, lo, hi, &v, &err) < 0)
        return crl_cli_usage(cmd->name, "%s", err.msg);
    *into[k] = (size_t)v;
    return -1;
}

/* The options into run->o: -1 to go on, else the status to exit with. */
static int parse(struct crl_bench_run *run, int argc, char **argv)
{
    const struct crl_bench_cmd *cmd = run->cmd;
    struct option opts[CRL_ARRAY_SIZE(all_opts) + 1] = {{0}};
    size_t n = 0;
    for (size_t i = 0; i < CRL_ARRAY_SIZE(all_opts); i++)
        if ((all_opts[i].takes & ~cmd->takes) == 0)
            opts[n++] = all_opts[i].opt;
    int c, rc = -1;
    optind = 0;
    opterr = 0;
    while (rc < 0 && (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_START: run->o.start = true; break;
        case OPT_ITER:
        case OPT_IMPORTS:
        case OPT_SANDBOXES: rc = count_flag(run, c, optarg); break;
        case OPT_IMAGE:
            if (!crl_client_image_name_ok(optarg))
                return crl_cli_usage(cmd->name, "--image: '%s' is not an image name", optarg);
            run->o.image = optarg;
            break;
        case OPT_JSON: run->o.json_only = true; break;
        case OPT_BASELINE: run->o.baseline = optarg; break;
        case 'h': return crl_cli_help(cmd->help);
        default: return crl_cli_bad_option(cmd->name, argv, c);
        }
    }
    if (rc < 0 && optind < argc)
        return crl_cli_usage(cmd->name, "unexpected argument '%s'", argv[optind]);
    if (run->o.baseline)
        run->o.start = true;
    return rc;
}

/* Start daemon d for `what`, pointing *url at it: 0, or the status to exit
 * with after saying why. */
static int start_daemon(struct crl_bench_daemon *d, const char **url, const char *what)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_bench_daemon_start(d, &err) < 0) {
        crl_bench_daemon_stop(d);
        crl_err_prefix(&err, "%s: --start-daemon", what);
        return crl_cli_fail(&err);
    }
    *url = d->url;
    return 0;
}

/* Stop it, with the end of its log when the bench failed. */
static void stop_daemon(struct crl_bench_daemon *d, int rc, const char *what)
{
    char tail[300];
    if (rc < 0 && crl_bench_daemon_log_tail(d, tail, sizeof(tail)) == 0 && tail[0])
        fprintf(stderr, "corral: %s: corrald's log ends with:\n%s\n", what, tail);
    crl_bench_daemon_stop(d);
}

/* Between the daemons' start and stop: the load before and after, and the
 * measurements.  0; -1 with *err; or, when a daemon did not start, the
 * status to exit with, said. */
static int measure(struct crl_bench_run *run, void *res, struct crl_err *err)
{
    const struct crl_bench_cmd *cmd = run->cmd;
    char base_what[96];
    int rc;
    snprintf(base_what, sizeof(base_what), "%s --baseline", cmd->name);
    run->bd = (struct crl_bench_daemon){.bindir = run->o.baseline, .tag = "baseline"};
    if (run->o.start && (rc = start_daemon(&run->d, &run->url, cmd->name)) != 0)
        return rc;
    if (run->o.baseline && (rc = start_daemon(&run->bd, &run->base_url, base_what)) != 0) {
        stop_daemon(&run->d, 0, cmd->name);
        return rc;
    }
    crl_bench_loadavg(run->load0, sizeof(run->load0));
    rc = cmd->ops.measure(run, res, err);
    crl_bench_loadavg(run->load1, sizeof(run->load1));
    if (run->o.baseline)
        stop_daemon(&run->bd, rc, base_what);
    if (run->o.start)
        stop_daemon(&run->d, rc, cmd->name);
    return rc;
}

int crl_bench_main(const struct crl_bench_cmd *cmd, int argc, char **argv)
{
    struct crl_bench_run run = {.cmd = cmd, .o = cmd->defaults, .argc = argc, .argv = argv};
    struct crl_err err = CRL_ERR_INIT;
    int rc = parse(&run, argc, argv);
    if (rc >= 0)
        return rc;
    if (cmd->root && geteuid() != 0)
        return crl_cli_failf("%s: needs root, %s", cmd->name, cmd->root);
    if (run.o.start && geteuid() != 0)
        return crl_cli_failf("%s: --start-daemon needs root (corrald does)", cmd->name);
    void *res = calloc(1, cmd->ops.size);
    if (!res)
        return crl_cli_failf("%s: out of memory", cmd->name);

    crl_cli_catch_signals(NULL);
    rc = measure(&run, res, &err);
    if (rc == 0) {
        crl_bench_machine(&run.machine);
        cmd->ops.report(&run, res);
    }
    cmd->ops.free(res);
    free(res);
    if (rc >= 0)
        return rc;
    if (crl_cli_interrupted)
        return 128 + crl_cli_interrupted;
    crl_err_prefix(&err, "%s", cmd->name);
    return crl_cli_fail(&err);
}

void crl_bench_step(const struct crl_bench_run *run, const char *fmt, ...)
{
    if (run->o.json_only)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "corral %s: ", run->cmd->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
