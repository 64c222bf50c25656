#include "python.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "peer.h"

/* The python floor, timed inside a python3 -I that has imported the
 * modules src/corral-zygote/main.c preloads (keep the two lists alike):
 * fork + waitpid of a child that only calls os._exit(0), then of a child
 * that runs print(1) as the zygote's child does (compiled and evaluated in
 * a fresh namespace, stdout flushed, to /dev/null) before it exits: no
 * jail, no corrald.  argv: warm-up count, measured count.  It prints its
 * version and VmRSS in kB, then a line of the two latencies in ms per
 * measured fork. */
static const char python_floor[] =
    "import sys, os, io, re, json, math, random, time, datetime, collections, itertools,"
    " functools, operator, string, textwrap, typing, dataclasses, decimal, fractions,"
    " statistics, hashlib, base64, pathlib, copy, heapq, bisect, contextlib, traceback,"
    " enum, uuid, csv, struct, shlex, tempfile, glob, fnmatch\n"
    "warm, n = int(sys.argv[1]), int(sys.argv[2])\n"
    "null = os.open('/dev/null', os.O_WRONLY)\n"
    "def bare():\n"
    "    os._exit(0)\n"
    "def run():\n"
    "    os.dup2(null, 1)\n"
    "    exec(compile('print(1)', '<exec>', 'exec'), {'__name__': '__main__'})\n"
    "    sys.stdout.flush()\n"
    "    os._exit(0)\n"
    "def timed(child):\n"
    "    t0 = time.perf_counter_ns()\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        child()\n"
    "    os.waitpid(pid, 0)\n"
    "    return (time.perf_counter_ns() - t0) / 1e6\n"
    "out = [(timed(bare), timed(run)) for i in range(warm + n)][warm:]\n"
    "rss = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS:')]\n"
    "print(sys.version.split()[0], rss[0] if rss else -1)\n"
    "print('\\n'.join('%.6f %.6f' % t for t in out))\n";

/* Not a PATH lookup first: a version manager's shim there (pyenv) would
 * add its own startup. */
int crl_bench_python_find(char *out, size_t cap, struct crl_err *err)
{
    const char *path = getenv("PATH");
    snprintf(out, cap, "/usr/bin/python3");
    if (access(out, X_OK) == 0)
        return 0;
    if (!path || !*path)
        path = "/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(out, cap, "%.*s/python3", (int)len, path);
        if (len > 0 && access(out, X_OK) == 0)
            return 0;
        path += len + (path[len] == ':');
    }
    return crl_err_set(err, CRL_E_NOT_FOUND, "no python3 in /usr/bin or PATH");
}

int crl_bench_python_print(const char *python, double *ms, struct crl_err *err)
{
    char *const argv[] = {"python3", "-c", "print(1)", NULL};
    int status;
    cleanup_free char *out = NULL;
    unsigned long long t0 = crl_now_ns();
    if (crl_bench_capture(python, argv, &status, &out, err) < 0)
        return -1;
    *ms = crl_bench_ms_since(t0);
    if (status != 0 || !out || strcmp(out, "1\n") != 0)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "%s -c 'print(1)' ended with wait status %d, printing '%s'", python,
                           status, out ? out : "");
    return 0;
}

int crl_bench_python_floor(const char *python, size_t warm, size_t n,
                           struct crl_bench_python_floor *f, struct crl_err *err)
{
    char w[32], m[32];
    snprintf(w, sizeof(w), "%zu", warm);
    snprintf(m, sizeof(m), "%zu", n);
    char *const argv[] = {"python3", "-I", "-c", (char *)python_floor, w, m, NULL};
    int status;
    cleanup_free char *out = NULL;
    struct crl_bench_samples *bare = &f->bare, *run = &f->run;
    if (crl_bench_samples_alloc(bare, n, err) < 0 || crl_bench_samples_alloc(run, n, err) < 0 ||
        crl_bench_capture(python, argv, &status, &out, err) < 0)
        return -1;
    if (status != 0 || !out)
        return crl_err_set(err, CRL_E_INTERNAL, "the python fork floor ended with wait status %d",
                           status);
    size_t vlen = strcspn(out, " \n");
    snprintf(f->version, sizeof(f->version), "%.*s", (int)vlen, out);
    char *p = out + vlen, *end;
    f->rss_kb = strtol(p, &end, 10);
    for (p = end; run->n < n; p = end) {
        double a = strtod(p, &end);
        if (end == p)
            break;
        double b = strtod(p = end, &end);
        if (end == p)
            break;
        /* The forks' own time, without the python loop's. */
        crl_bench_samples_add(bare, a);
        crl_bench_samples_add(run, b);
    }
    if (run->n != n)
        return crl_err_set(err, CRL_E_INTERNAL, "the python fork floor printed %zu of %zu times",
                           run->n, n);
    return 0;
}
