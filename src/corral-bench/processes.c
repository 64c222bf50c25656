/* corral bench processes: what talking to a background process and to a
 * sandbox's files costs, measured in one run against the peers:
 *
 *   1. a byte written to `cat` through an attached connection and its echo
 *      read back (docs/api.md, Processes: attach);
 *   2. the same byte sent as POST .../stdin, its echo read on the attach;
 *   3. the peer: the byte through a `cat` of the host's own, over two
 *      pipes, as a program that ran the process itself would talk to it;
 *   4. starting a background process (POST .../processes, until it runs)
 *      against fork+exec+wait of /bin/true on the host;
 *   5. the filesystem API's stat and list of a 1,000-entry directory
 *      against an exec of `stat` and of `ls -la`, and a watch event's delay
 *      (a file made by an upload, until its create event arrives) against
 *      an exec of `ls` (what a client without a watch would poll with);
 *   6. run_code("1+1") in a code context (docs/api.md, Code) of a sandbox
 *      of the debian image, against the host's `python3 -c`, an exec of
 *      `python3 -c` in that sandbox and a call of a function sandbox of the
 *      python runtime.
 *
 * It prints figures and ratios, and never judges an absolute time. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
    "     of /bin/true on the host;\n"
    "  5. GET .../fs/stat and .../fs/list of a 1,000-entry directory against\n"
    "     an exec of `stat` and of `ls -la`; a watch event's delay (an upload\n"
    "     made the file; until its create event is read) against an exec of `ls`;\n"
    "  6. POST .../code of 1+1 (a code context of a sandbox of --image, else of\n"
    "     debian, which `make images` builds with python3) against the host's\n"
    "     python3 -c, an exec of python3 -c in that sandbox and a call of a\n"
    "     function sandbox of the python runtime.\n"
    "p50, p99 and the ratios of the p50s.\n";

enum {
    ATTACH,
    STDIN,
    PEER,
    START,
    FORK_EXEC,
    STAT,
    EXEC_STAT,
    LIST,
    EXEC_LS,
    WATCH,
    RUN_CODE,
    HOST_PY,
    EXEC_PY,
    FN_CALL,
    N_FIGS
};

static const struct {
    const char *key, *what;
} figs[N_FIGS] = {
    [ATTACH] = {"attach_echo", "attach: a byte to cat and its echo"},
    [STDIN] = {"stdin_post_echo", "POST .../stdin of a byte, its echo on the attach"},
    [PEER] = {"peer_pipe_echo", "peer: a byte through the host's cat, two pipes"},
    [START] = {"process_start", "POST .../processes of true, until it runs"},
    [FORK_EXEC] = {"floor_fork_exec", "floor: fork+exec+wait /bin/true (pipe)"},
    [STAT] = {"fs_stat", "GET .../fs/stat of a file"},
    [EXEC_STAT] = {"exec_stat", "peer: exec of stat FILE"},
    [LIST] = {"fs_list_1000", "GET .../fs/list of 1,000 entries"},
    [EXEC_LS] = {"exec_ls_1000", "peer: exec of ls -la of them"},
    [WATCH] = {"watch_event_delay", "a watch's create event, from the upload's start"},
    [RUN_CODE] = {"run_code", "POST .../code of 1+1 in a context"},
    [HOST_PY] = {"host_python_c", "peer: the host's python3 -c 'print(1+1)'"},
    [EXEC_PY] = {"exec_python_c", "peer: exec of python3 -c in the sandbox"},
    [FN_CALL] = {"function_call", "peer: a python function sandbox's call"},
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

struct get_ctx {
    struct crl_client *c;
    const char *path;
};

static int get_op(void *ctx, size_t i, struct crl_err *err)
{
    struct get_ctx *g = ctx;
    json_auto_t *out = NULL;
    return crl_client_request(g->c, "GET", g->path, NULL, &out, NULL, err);
}

struct exec_ctx {
    struct crl_client *c;
    const char *id;
    json_t *req;
};

static int exec_op(void *ctx, size_t i, struct crl_err *err)
{
    struct exec_ctx *e = ctx;
    double ms;
    return crl_bench_exec(e->c, e->id, e->req, &ms, NULL, err);
}

/* A watch on /tmp/w read on a thread of its own: each create event's
 * arrival, for the main thread that made the file. */
struct watch_ctx {
    struct crl_client *reader, *c;
    const char *id;
    char path[256];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long seen, ready;
    struct crl_err err;
};

static int watch_line(void *ctx, json_t *line, struct crl_err *err)
{
    struct watch_ctx *w = ctx;
    const char *type = json_string_value(json_object_get(line, "type"));
    pthread_mutex_lock(&w->mu);
    if (type && strcmp(type, "ready") == 0)
        w->ready = 1;
    else if (type && strcmp(type, "create") == 0)
        w->seen++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static void *watch_thread(void *arg)
{
    struct watch_ctx *w = arg;
    crl_client_stream(w->reader, "GET", w->path, NULL, watch_line, w, NULL, &w->err);
    pthread_mutex_lock(&w->mu);
    w->ready = 2; /* over */
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int watch_op(void *ctx, size_t i, struct crl_err *err)
{
    struct watch_ctx *w = ctx;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/w/f%zu", i);
    struct crl_client_mem m = {.data = "", .len = 0};
    pthread_mutex_lock(&w->mu);
    unsigned long before = w->seen;
    pthread_mutex_unlock(&w->mu);
    if (crl_client_put_source(w->c, w->id, path, crl_client_mem_source, &m, 0, NULL, -1, NULL,
                              err) < 0)
        return -1;
    pthread_mutex_lock(&w->mu);
    while (w->seen == before && w->ready != 2)
        pthread_cond_wait(&w->cv, &w->mu);
    bool over = w->ready == 2;
    pthread_mutex_unlock(&w->mu);
    return over ? crl_err_set(err, CRL_E_INTERNAL, "the watch ended: %s", w->err.msg) : 0;
}

/* The filesystem figures, in sandbox `id`. */
static int measure_fs(struct crl_bench_run *run, struct crl_bench_sandboxes *sbs,
                      struct crl_client *c, const char *id, struct results *r, struct crl_err *err)
{
    size_t n = run->o.iterations, warm = crl_bench_warmup(n);
    json_auto_t *mk = json_pack("{s:s}", "cmd",
                                "mkdir -p /tmp/d /tmp/w && cd /tmp/d && i=0; while [ $i -lt "
                                "1000 ]; do : > f$i; i=$((i+1)); done");
    double ms;
    crl_bench_step(run, "the filesystem API against execs (%zu each)", n);
    if (crl_bench_exec(c, id, mk, &ms, NULL, err) < 0)
        return -1;
    char stat_path[256], list_path[256];
    snprintf(stat_path, sizeof(stat_path), "/v1/sandboxes/%s/fs/stat?path=/tmp/d/f1", id);
    snprintf(list_path, sizeof(list_path), "/v1/sandboxes/%s/fs/list?path=/tmp/d", id);
    struct get_ctx gs = {c, stat_path}, gl = {c, list_path};
    json_auto_t *st = json_pack("{s:[s,s]}", "cmd", "stat", "/tmp/d/f1");
    json_auto_t *ls =
        json_pack("{s:[s,s,s], s:i}", "cmd", "ls", "-la", "/tmp/d", "max_output_bytes", 1 << 20);
    struct exec_ctx es = {c, id, st}, el = {c, id, ls};
    if (crl_bench_timed(warm, n, get_op, &gs, &r->s[STAT], err) < 0 ||
        crl_bench_timed(warm, n, exec_op, &es, &r->s[EXEC_STAT], err) < 0 ||
        crl_bench_timed(warm, n, get_op, &gl, &r->s[LIST], err) < 0 ||
        crl_bench_timed(warm, n, exec_op, &el, &r->s[EXEC_LS], err) < 0)
        return -1;
    struct watch_ctx w = {.c = c, .id = id, .err = CRL_ERR_INIT};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    snprintf(w.path, sizeof(w.path), "/v1/sandboxes/%s/fs/watch?path=/tmp/w", id);
    if (crl_client_open(run->url, NULL, &w.reader, err) < 0)
        return -1;
    pthread_t th;
    int rc = -1;
    if (pthread_create(&th, NULL, watch_thread, &w) != 0) {
        crl_client_close(w.reader);
        return crl_err_sys(err, errno, "a thread");
    }
    pthread_mutex_lock(&w.mu);
    while (!w.ready)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    if (w.ready == 1)
        rc = crl_bench_timed(warm, n, watch_op, &w, &r->s[WATCH], err);
    else
        crl_err_set(err, CRL_E_INTERNAL, "the watch ended: %s", w.err.msg);
    /* its end: the sandbox goes, and the stream with it */
    struct crl_err gone = CRL_ERR_INIT;
    crl_bench_sandbox_destroy_last(sbs, &gone);
    pthread_join(th, NULL);
    crl_client_close(w.reader);
    return rc;
}

struct code_ctx {
    struct crl_client *c;
    const char *path;
    json_t *req;
};

static int code_op(void *ctx, size_t i, struct crl_err *err)
{
    struct code_ctx *k = ctx;
    json_auto_t *out = NULL;
    if (crl_client_request(k->c, "POST", k->path, k->req, &out, NULL, err) < 0)
        return -1;
    json_t *res = json_array_get(json_object_get(out, "results"), 0);
    const char *text = json_string_value(json_object_get(res, "text"));
    if (!text || strcmp(text, "2") != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "run_code of 1+1 did not answer 2");
    return 0;
}

/* The code figures: a context of a python image's sandbox, the host's
 * python3 -c, an exec of it in that sandbox, a python function's call. */
static int measure_code(struct crl_bench_run *run, struct crl_bench_sandboxes *sbs,
                        struct crl_client *c, struct results *r, struct crl_err *err)
{
    size_t n = run->o.iterations, warm = crl_bench_warmup(n);
    json_auto_t *spec = crl_bench_spec(run->o.image ? run->o.image : "debian", 256);
    json_auto_t *fspec = crl_bench_spec(NULL, 128);
    json_object_set_new(fspec, "backend", json_string("function"));
    json_object_set_new(fspec, "runtime", json_string("python"));
    char id[CRL_BENCH_ID_MAX], fid[CRL_BENCH_ID_MAX], path[256];
    double ms;
    crl_bench_step(run, "run_code, python3 -c, an exec of it, a function call (%zu each)", n);
    if (crl_bench_sandbox_create(sbs, spec, id, &ms, err) < 0 ||
        crl_bench_sandbox_create(sbs, fspec, fid, &ms, err) < 0)
        return -1;
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/code", id);
    json_auto_t *one = json_pack("{s:s}", "code", "1+1");
    struct code_ctx k = {c, path, one};
    char *const py_argv[] = {"python3", "-c", "print(1+1)", NULL};
    json_auto_t *py = json_pack("{s:[s,s,s]}", "cmd", "python3", "-c", "print(1+1)");
    json_auto_t *call = json_pack("{s:s}", "cmd", "print(1+1)");
    struct exec_ctx ep = {c, id, py}, fc = {c, fid, call};
    return crl_bench_timed(warm, n, code_op, &k, &r->s[RUN_CODE], err) < 0 ||
                   crl_bench_fork_exec("/usr/bin/python3", py_argv, "2\n", warm, n, &r->s[HOST_PY],
                                       err) < 0 ||
                   crl_bench_timed(warm, n, exec_op, &ep, &r->s[EXEC_PY], err) < 0 ||
                   crl_bench_timed(warm, n, exec_op, &fc, &r->s[FN_CALL], err) < 0
               ? -1
               : 0;
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
    if (measure_fs(run, &sbs, c, id, r, err) < 0)
        goto out;
    rc = measure_code(run, &sbs, c, r, err);
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
               "  start p50: %.1fx the host's fork+exec+wait of /bin/true\n"
               "  p50: stat %.1fx faster than an exec of stat; list %.1fx faster than an exec "
               "of ls -la;\n  a watch event %.1fx faster than an exec of ls\n"
               "  run_code(1+1) p50: %.1fx faster than the host's python3 -c, %.1fx than an "
               "exec of it,\n  %.1fx than a python function sandbox's call\n\n",
               crl_bench_ratio(f[ATTACH].p50, f[PEER].p50), f[ATTACH].p50 - f[PEER].p50,
               crl_bench_ratio(f[STDIN].p50, f[PEER].p50),
               crl_bench_ratio(f[START].p50, f[FORK_EXEC].p50),
               crl_bench_ratio(f[EXEC_STAT].p50, f[STAT].p50),
               crl_bench_ratio(f[EXEC_LS].p50, f[LIST].p50),
               crl_bench_ratio(f[EXEC_LS].p50, f[WATCH].p50),
               crl_bench_ratio(f[HOST_PY].p50, f[RUN_CODE].p50),
               crl_bench_ratio(f[EXEC_PY].p50, f[RUN_CODE].p50),
               crl_bench_ratio(f[FN_CALL].p50, f[RUN_CODE].p50));
    }
    json_auto_t *j = crl_bench_report_json(run, "corral processes");
    json_object_set_new(j, "iterations", json_integer((json_int_t)run->o.iterations));
    for (int k = 0; k < N_FIGS; k++)
        json_object_set_new(j, figs[k].key, crl_bench_stats_json(&f[k], true));
    crl_bench_json_ratio(j, "ratio_attach_vs_pipe_p50", f[ATTACH].p50, f[PEER].p50);
    crl_bench_json_ratio(j, "ratio_stdin_post_vs_pipe_p50", f[STDIN].p50, f[PEER].p50);
    crl_bench_json_ratio(j, "ratio_start_vs_fork_exec_p50", f[START].p50, f[FORK_EXEC].p50);
    crl_bench_json_ratio(j, "ratio_exec_stat_vs_fs_stat_p50", f[EXEC_STAT].p50, f[STAT].p50);
    crl_bench_json_ratio(j, "ratio_exec_ls_vs_fs_list_p50", f[EXEC_LS].p50, f[LIST].p50);
    crl_bench_json_ratio(j, "ratio_exec_ls_vs_watch_event_p50", f[EXEC_LS].p50, f[WATCH].p50);
    crl_bench_json_ratio(j, "ratio_host_python_vs_run_code_p50", f[HOST_PY].p50, f[RUN_CODE].p50);
    crl_bench_json_ratio(j, "ratio_exec_python_vs_run_code_p50", f[EXEC_PY].p50, f[RUN_CODE].p50);
    crl_bench_json_ratio(j, "ratio_function_call_vs_run_code_p50", f[FN_CALL].p50, f[RUN_CODE].p50);
    crl_bench_report_line(j);
}

const struct crl_bench_cmd crl_bench_processes = {
    .name = "bench processes",
    .help = help,
    .takes = CRL_BENCH_TAKES_IMAGE,
    .defaults = {.iterations = 500},
    .ops = {measure, report, results_free, sizeof(struct results)},
};
