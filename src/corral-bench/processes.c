/* corral bench processes: what talking to a background process costs,
 * measured in one run against the same done on the host:
 *
 *   1. a byte written to `cat` through an attached connection and its echo
 *      read back (docs/api.md, Processes: attach);
 *   2. the same byte sent as POST .../stdin, its echo read on the attach;
 *   3. the peer: the byte through a `cat` of the host's own, over two
 *      pipes, as a program that ran the process itself would talk to it;
 *   4. starting a background process (POST .../processes, until it runs)
 *      against fork+exec+wait of /bin/true on the host.
 *
 * It prints figures and ratios, and never judges an absolute time. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../corral/cli.h"
#include "api.h"
#include "bench.h"
#include "peer.h"

static const char help[] =
    "usage: corral bench processes [OPTIONS]\n"
    "\n"
    "Measure background processes, on this machine and in one run:\n"
    "  1. a byte to `cat` in a sandbox through an attached connection\n"
    "     (Upgrade: corral-attach) and its echo back;\n"
    "  2. the byte as POST .../stdin, its echo read on the attach;\n"
    "  3. the peer: the byte through a `cat` on the host, over two pipes;\n"
    "  4. POST .../processes of `true` until it runs, against fork+exec+wait\n"
    "     of /bin/true on the host.\n"
    "p50, p99 and the ratios of the p50s.\n";

enum { ATTACH, STDIN, PEER, START, FORK_EXEC, N_FIGS };

static const struct {
    const char *key, *what;
} figs[N_FIGS] = {
    [ATTACH] = {"attach_echo", "attach: a byte to cat and its echo"},
    [STDIN] = {"stdin_post_echo", "POST .../stdin of a byte, its echo on the attach"},
    [PEER] = {"peer_pipe_echo", "peer: a byte through the host's cat, two pipes"},
    [START] = {"process_start", "POST .../processes of true, until it runs"},
    [FORK_EXEC] = {"floor_fork_exec", "floor: fork+exec+wait /bin/true (pipe)"},
};

struct results {
    struct crl_bench_samples s[N_FIGS];
};

static void results_free(void *res)
{
    struct results *r = res;
    for (int k = 0; k < N_FIGS; k++)
        crl_bench_samples_free(&r->s[k]);
}

/* A byte out on `out`, the same byte back on `in`. */
static int echo(int out, int in, struct crl_err *err)
{
    char b = 'x', got = 0;
    if (crl_write_full(out, &b, 1) < 0)
        return crl_err_sys(err, errno, "writing a byte");
    ssize_t n;
    do
        n = read(in, &got, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1 || got != b)
        return crl_err_set(err, CRL_E_INTERNAL, "no echo (read %zd)", n);
    return 0;
}

struct attach_ctx {
    int sock;
};

static int attach_op(void *ctx, size_t i, struct crl_err *err)
{
    struct attach_ctx *a = ctx;
    return echo(a->sock, a->sock, err);
}

struct stdin_ctx {
    struct crl_client *c;
    const char *path;
    int sock;
};

static int stdin_op(void *ctx, size_t i, struct crl_err *err)
{
    struct stdin_ctx *s = ctx;
    struct crl_client_mem m = {.data = "x", .len = 1};
    char got = 0;
    if (crl_client_upload(s->c, "POST", s->path, crl_client_mem_source, &m, 1, NULL, NULL, err) < 0)
        return -1;
    ssize_t n;
    do
        n = read(s->sock, &got, 1);
    while (n < 0 && errno == EINTR);
    return n == 1 && got == 'x' ? 0 : crl_err_set(err, CRL_E_INTERNAL, "no echo (read %zd)", n);
}

struct peer_ctx {
    int to, from;
};

static int peer_op(void *ctx, size_t i, struct crl_err *err)
{
    struct peer_ctx *p = ctx;
    return echo(p->to, p->from, err);
}

struct start_ctx {
    struct crl_client *c;
    const char *path;
};

static int start_op(void *ctx, size_t i, struct crl_err *err)
{
    struct start_ctx *s = ctx;
    json_auto_t *req = json_pack("{s:[s]}", "cmd", "true");
    json_auto_t *out = NULL;
    return crl_client_request(s->c, "POST", s->path, req, &out, NULL, err);
}

/* The host's cat, with a pipe each way. */
static pid_t host_cat(struct peer_ctx *p, struct crl_err *err)
{
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) < 0)
        return crl_err_sys(err, errno, "pipe");
    if (pipe2(from, O_CLOEXEC) < 0) {
        close_fds(to, 2);
        return crl_err_sys(err, errno, "pipe");
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to[0], 0);
        dup2(from[1], 1);
        execl("/bin/cat", "cat", (char *)NULL);
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    p->to = to[1];
    p->from = from[0];
    if (pid < 0) {
        close(p->to);
        close(p->from);
        return crl_err_sys(err, errno, "fork");
    }
    return pid;
}

static int measure(struct crl_bench_run *run, void *res, struct crl_err *err)
{
    struct results *r = res;
    size_t n = run->o.iterations, warm = crl_bench_warmup(n);
    cleanup_client struct crl_client *c = NULL;
    if (crl_client_open(run->url, NULL, &c, err) < 0 ||
        crl_bench_host(c, run->host_id, sizeof(run->host_id), NULL, err) < 0)
        return -1;
    struct crl_bench_sandboxes sbs = {.c = c, .who = run->cmd->name};
    char id[64], path[256], stdin_path[300];
    double ms;
    json_auto_t *spec = crl_bench_spec(run->o.image, 256);
    json_auto_t *req = json_pack("{s:[s]}", "cmd", "cat");
    json_auto_t *p = NULL;
    int rc = -1, sock = -1;
    struct peer_ctx peer = {-1, -1};
    pid_t cat = -1;
    crl_bench_step(run, "a sandbox and a background cat in it, attached");
    if (crl_bench_sandbox_create(&sbs, spec, id, &ms, err) < 0)
        goto out;
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
    if (crl_client_request(c, "POST", path, req, &p, NULL, err) < 0)
        goto out;
    int pid = (int)json_integer_value(json_object_get(p, "pid"));
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes/%d/attach", id, pid);
    if ((sock = crl_client_tunnel(c, path, "corral-attach", err)) < 0)
        goto out;
    snprintf(stdin_path, sizeof(stdin_path), "/v1/sandboxes/%s/processes/%d/stdin", id, pid);
    struct attach_ctx a = {sock};
    struct stdin_ctx s = {c, stdin_path, sock};
    if ((cat = host_cat(&peer, err)) < 0)
        goto out;
    struct peer_ctx *pp = &peer;
    crl_bench_step(run, "echo: attach, POST .../stdin, the host's pipes (%zu each)", n);
    if (crl_bench_timed(warm, n, attach_op, &a, &r->s[ATTACH], err) < 0 ||
        crl_bench_timed(warm, n, stdin_op, &s, &r->s[STDIN], err) < 0 ||
        crl_bench_timed(warm, n, peer_op, pp, &r->s[PEER], err) < 0)
        goto out;
    crl_bench_step(run, "start: POST .../processes of true, fork+exec+wait (%zu each)", n);
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
    struct start_ctx st = {c, path};
    char *const true_argv[] = {"true", NULL};
    if (crl_bench_timed(warm, n, start_op, &st, &r->s[START], err) < 0 ||
        crl_bench_fork_exec("/bin/true", true_argv, "", warm, n, &r->s[FORK_EXEC], err) < 0)
        goto out;
    rc = 0;
out:
    if (sock >= 0)
        close(sock);
    if (cat > 0) {
        close(peer.to);
        close(peer.from);
        waitpid(cat, NULL, 0);
    }
    crl_bench_sandboxes_clear(&sbs);
    return rc;
}

static void report(const struct crl_bench_run *run, void *res)
{
    struct results *r = res;
    struct crl_bench_stats f[N_FIGS];
    for (int k = 0; k < N_FIGS; k++)
        f[k] = crl_bench_stats_of(&r->s[k]);
    if (!run->o.json_only) {
        static const struct crl_bench_table table = {.label = 56, .prec = 3, .rate = 9};
        crl_bench_report_head(run);
        printf("  %zu iterations\n\n", run->o.iterations);
        crl_bench_table_head(&table, "");
        for (int k = 0; k < N_FIGS; k++)
            crl_bench_table_row(&table, figs[k].what, &f[k], true);
        printf("\n  echo p50: attach %.1fx the host's pipes (%+.3f ms); POST .../stdin %.1fx\n"
               "  start p50: %.1fx the host's fork+exec+wait of /bin/true\n\n",
               crl_bench_ratio(f[ATTACH].p50, f[PEER].p50), f[ATTACH].p50 - f[PEER].p50,
               crl_bench_ratio(f[STDIN].p50, f[PEER].p50),
               crl_bench_ratio(f[START].p50, f[FORK_EXEC].p50));
    }
    json_auto_t *j = crl_bench_report_json(run, "corral processes");
    json_object_set_new(j, "iterations", json_integer((json_int_t)run->o.iterations));
    for (int k = 0; k < N_FIGS; k++)
        json_object_set_new(j, figs[k].key, crl_bench_stats_json(&f[k], true));
    crl_bench_json_ratio(j, "ratio_attach_vs_pipe_p50", f[ATTACH].p50, f[PEER].p50);
    crl_bench_json_ratio(j, "ratio_stdin_post_vs_pipe_p50", f[STDIN].p50, f[PEER].p50);
    crl_bench_json_ratio(j, "ratio_start_vs_fork_exec_p50", f[START].p50, f[FORK_EXEC].p50);
    crl_bench_report_line(j);
}

const struct crl_bench_cmd crl_bench_processes = {
    .name = "bench processes",
    .help = help,
    .takes = CRL_BENCH_TAKES_IMAGE,
    .defaults = {.iterations = 500},
    .ops = {measure, report, results_free, sizeof(struct results)},
};
