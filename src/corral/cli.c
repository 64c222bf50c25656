#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/core/spec.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/cleanup.h"

/* corrald refuses larger JSON bodies by default (--max-body-mb 16); -i
 * puts stdin inside one, so the request as sent is what must fit. */
#define BODY_MAX (16u << 20)

volatile sig_atomic_t crl_cli_interrupted;

/* ---- reporting ---- */

int crl_cli_fail(const struct crl_err *err)
{
    fflush(stdout);
    fprintf(stderr, "corral: %s\n", err->msg[0] ? err->msg : "failed");
    return CRL_EXIT_FAIL;
}

int crl_cli_failf(const char *fmt, ...)
{
    struct crl_err err = CRL_ERR_INIT;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
    va_end(ap);
    return crl_cli_fail(&err);
}

int crl_cli_usage(const char *cmd, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (cmd)
        fprintf(stderr, "corral: %s: %s; see 'corral %s --help'\n", cmd, msg, cmd);
    else
        fprintf(stderr, "corral: %s; see 'corral --help'\n", msg);
    return CRL_EXIT_USAGE;
}

int crl_cli_bad_option(const char *cmd, char **argv, int c)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (c == ':')
        return crl_cli_usage(cmd, "option '%s' needs a value", arg);
    if (optopt && optopt < 0x100)
        return crl_cli_usage(cmd, "unknown option '-%c'", optopt);
    return crl_cli_usage(cmd, "unknown option '%s'", arg);
}

int crl_cli_help(const char *text)
{
    fputs(text, stdout);
    return 0;
}

int crl_cli_connect(struct crl_client **c)
{
    struct crl_err err = CRL_ERR_INIT;
    if (crl_client_open(NULL, NULL, c, &err) < 0)
        return crl_cli_fail(&err);
    return 0;
}

void crl_cli_print_json(json_t *j)
{
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    putchar('\n');
}

const char *crl_cli_bytes(double bytes, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    size_t u = 0;
    while (bytes >= 1024 && u + 1 < CRL_ARRAY_SIZE(units)) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

const char *crl_cli_age(const char *rfc3339, char *buf, size_t cap)
{
    struct tm tm = {0};
    const char *end = rfc3339 ? strptime(rfc3339, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!end) {
        snprintf(buf, cap, "-");
        return buf;
    }
    double age = difftime(time(NULL), timegm(&tm));
    if (age < 0)
        age = 0;
    if (age < 120)
        snprintf(buf, cap, "%.0fs", age);
    else if (age < 2 * 3600)
        snprintf(buf, cap, "%.0fm", age / 60);
    else if (age < 2 * 86400)
        snprintf(buf, cap, "%.0fh", age / 3600);
    else
        snprintf(buf, cap, "%.0fd", age / 86400);
    return buf;
}

const char *crl_cli_str(json_t *obj, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : dflt;
}

/* ---- flags ---- */

int crl_cli_parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out,
                      struct crl_err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return crl_err_set(err, CRL_E_INVALID, "%s needs an integer, not '%s'", flag, s);
    if (v < lo || v > hi)
        return crl_err_set(err, CRL_E_INVALID, "%s needs an integer from %lld to %lld, not '%s'",
                           flag, lo, hi, s);
    *out = v;
    return 0;
}

int crl_cli_parse_double(const char *flag, const char *s, double lo, double hi, double *out,
                         struct crl_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return crl_err_set(err, CRL_E_INVALID, "%s needs a number, not '%s'", flag, s);
    if (v < lo || v > hi)
        return crl_err_set(err, CRL_E_INVALID, "%s needs a number from %g to %g, not '%s'", flag,
                           lo, hi, s);
    *out = v;
    return 0;
}

int crl_cli_parse_kv(const char *flag, const char *s, json_t *obj, struct crl_err *err)
{
    const char *eq = strchr(s, '=');
    if (!eq || eq == s)
        return crl_err_set(err, CRL_E_INVALID, "%s needs KEY=VALUE, not '%s'", flag, s);
    cleanup_free char *key = strndup(s, (size_t)(eq - s));
    if (!key || json_object_set_new(obj, key, json_string(eq + 1)) < 0)
        return crl_err_set(err, CRL_E_INVALID, "%s: '%s' is not valid UTF-8 text", flag, s);
    return 0;
}

/* The object at spec[key], created if missing. */
static json_t *sub_object(json_t *spec, const char *key)
{
    json_t *o = json_object_get(spec, key);
    if (!o) {
        o = json_object();
        json_object_set_new(spec, key, o);
    }
    return o;
}

static const struct {
    int opt;
    const char *flag;
    const char *field; /* where it goes in the spec, and how corrald's messages name it */
} spec_flags[] = {
    {CRL_CLI_OPT_BACKEND, "--backend", "backend"},
    {CRL_CLI_OPT_IMAGE, "--image", "image"},
    {CRL_CLI_OPT_CPUS, "--cpus", "resources.cpus"},
    {CRL_CLI_OPT_MEMORY, "--memory-mb", "resources.memory_mb"},
    {CRL_CLI_OPT_PIDS, "--pids", "resources.pids"},
    {CRL_CLI_OPT_DISK, "--disk-mb", "resources.disk_mb"},
    {CRL_CLI_OPT_IDLE_TTL, "--idle-ttl", "idle_ttl_s"}, /* before ttl_s, its suffix */
    {CRL_CLI_OPT_TTL, "--ttl", "ttl_s"},
    {CRL_CLI_OPT_ON_TTL, "--on-ttl", "on_ttl"},
    {CRL_CLI_OPT_LABEL, "--label", "label"},
    {CRL_CLI_OPT_ENV, "--env", "env"},
    {CRL_CLI_OPT_CWD, "--cwd", "cwd"},
    {CRL_CLI_OPT_TRAJECTORY, "--trajectory", "trajectory"},
    {CRL_CLI_OPT_VOLUME, "--volume", "volumes"},
};

/* --volume NAME:PATH[:ro] -> {"name", "path", "read_only"} appended. */
static int volume_flag(json_t *spec, const char *arg, struct crl_err *err)
{
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg || colon[1] != '/')
        return crl_err_set(err, CRL_E_INVALID,
                           "--volume: '%s' is not NAME:PATH[:ro] (PATH absolute)", arg);
    const char *path = colon + 1;
    size_t plen = strlen(path);
    bool ro = plen > 3 && strcmp(path + plen - 3, ":ro") == 0;
    if (ro)
        plen -= 3;
    json_t *vols = json_object_get(spec, "volumes");
    if (!vols) {
        vols = json_array();
        json_object_set_new(spec, "volumes", vols);
    }
    json_t *v = json_pack("{s:s%, s:s%, s:b}", "name", arg, (size_t)(colon - arg), "path", path,
                          plen, "read_only", ro);
    if (!v)
        return crl_err_set(err, CRL_E_INVALID, "--volume: '%s' is not valid UTF-8 text", arg);
    return json_array_append_new(vols, v);
}

int crl_cli_spec_flag(json_t *spec, int opt, const char *arg, struct crl_err *err)
{
    const char *flag = NULL, *field = NULL;
    for (size_t i = 0; i < CRL_ARRAY_SIZE(spec_flags); i++)
        if (spec_flags[i].opt == opt) {
            flag = spec_flags[i].flag;
            field = spec_flags[i].field;
        }
    if (!flag)
        return crl_err_set(err, CRL_E_INTERNAL, "not a spec flag: %d", opt);
    long long n;
    double x;
    switch (opt) {
    case CRL_CLI_OPT_BACKEND:
    case CRL_CLI_OPT_IMAGE:
    case CRL_CLI_OPT_CWD:
    case CRL_CLI_OPT_TRAJECTORY:
    case CRL_CLI_OPT_ON_TTL:
        json_object_set_new(spec, field, json_string(arg));
        if (!json_object_get(spec, field))
            return crl_err_set(err, CRL_E_INVALID, "%s: '%s' is not valid UTF-8 text", flag, arg);
        return 0;
    case CRL_CLI_OPT_CPUS:
        /* ranges are the spec's to check, in crl_cli_spec_check() */
        if (crl_cli_parse_double(flag, arg, -HUGE_VAL, HUGE_VAL, &x, err) < 0)
            return -1;
        return json_object_set_new(sub_object(spec, "resources"), "cpus", json_real(x));
    case CRL_CLI_OPT_MEMORY:
    case CRL_CLI_OPT_PIDS:
    case CRL_CLI_OPT_DISK:
        if (crl_cli_parse_int(flag, arg, LLONG_MIN, LLONG_MAX, &n, err) < 0)
            return -1;
        return json_object_set_new(sub_object(spec, "resources"), field + strlen("resources."),
                                   json_integer(n));
    case CRL_CLI_OPT_TTL:
    case CRL_CLI_OPT_IDLE_TTL:
        if (crl_cli_parse_int(flag, arg, LLONG_MIN, LLONG_MAX, &n, err) < 0)
            return -1;
        return json_object_set_new(spec, field, json_integer(n));
    case CRL_CLI_OPT_LABEL: return crl_cli_parse_kv(flag, arg, sub_object(spec, "labels"), err);
    case CRL_CLI_OPT_ENV: return crl_cli_parse_kv(flag, arg, sub_object(spec, "env"), err);
    case CRL_CLI_OPT_VOLUME: return volume_flag(spec, arg, err);
    }
    return crl_err_set(err, CRL_E_INTERNAL, "not a spec flag: %d", opt);
}

int crl_cli_spec_check(json_t *spec, struct crl_err *err)
{
    struct crl_spec s;
    if (crl_spec_from_json(spec, &s, err) == 0) {
        crl_spec_free(&s);
        return 0;
    }
    /* corrald's messages name JSON fields; name the flag that set it. */
    for (size_t i = 0; i < CRL_ARRAY_SIZE(spec_flags); i++) {
        size_t n = strlen(spec_flags[i].field);
        if (strncmp(err->msg, spec_flags[i].field, n) == 0 && strchr(" .:s", err->msg[n])) {
            crl_err_prefix(err, "%s", spec_flags[i].flag);
            break;
        }
    }
    return -1;
}

/* ---- running commands ---- */

/* The bytes `v` takes in a compact JSON text. */
static size_t json_size(json_t *v)
{
    return json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
}

/* Stdin into req as "stdin" (text) or "stdin_b64", whichever is shorter as
 * JSON: text full of control characters grows sixfold when escaped. */
static int read_stdin(json_t *req, struct crl_err *err)
{
    struct crl_buf b;
    crl_buf_init(&b, CRL_BUF_UNBOUNDED);
    char chunk[65536];
    for (;;) {
        ssize_t n = read(STDIN_FILENO, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR && !crl_cli_interrupted)
            continue;
        if (n < 0) {
            crl_buf_free(&b);
            return crl_err_sys(err, errno, "reading stdin");
        }
        if (n == 0)
            break;
        /* Neither encoding is shorter than the bytes themselves. */
        if (b.len + (size_t)n > BODY_MAX) {
            crl_buf_free(&b);
            return crl_err_set(err, CRL_E_TOO_LARGE,
                               "stdin (-i) is over %u MiB, the most a request to corrald may "
                               "carry; copy it in with 'corral cp' and redirect from the file",
                               BODY_MAX >> 20);
        }
        if (crl_buf_append(&b, chunk, (size_t)n) < 0) {
            crl_buf_free(&b);
            return crl_err_sys(err, ENOMEM, "reading stdin");
        }
    }
    const char *data = b.data ? b.data : "";
    size_t len = b.len;
    json_t *text = crl_utf8_valid(data, len) ? json_stringn(data, len) : NULL;
    int rc;
    if (text && json_size(text) <= 4 * ((len + 2) / 3) + 2) { /* base64, quoted */
        rc = json_object_set_new(req, "stdin", text);
    } else {
        json_decref(text);
        size_t enclen;
        cleanup_free char *enc = crl_base64_encode(data, len, &enclen);
        rc = enc ? json_object_set_new(req, "stdin_b64", json_stringn(enc, enclen)) : -1;
    }
    crl_buf_free(&b);
    if (rc < 0)
        return crl_err_sys(err, ENOMEM, "encoding stdin");
    size_t body = json_size(req);
    if (body > BODY_MAX)
        return crl_err_set(err, CRL_E_TOO_LARGE,
                           "stdin (-i) of %zu bytes makes a request of %zu bytes, over the %u "
                           "MiB a request to corrald may carry (its JSON encoding is larger "
                           "than the bytes); copy it in with 'corral cp' and redirect from the "
                           "file",
                           len, body, BODY_MAX >> 20);
    return 0;
}

int crl_cli_exec_request(const struct crl_cli_exec *o, int argc, char **argv, json_t **out,
                         struct crl_err *err)
{
    json_t *req = json_object();
    json_t *cmd = json_array();
    /* none: corrald runs the image's entrypoint and cmd */
    if (argc > 0)
        json_object_set_new(req, "cmd", cmd);
    else
        json_decref(cmd);
    for (int i = 0; i < argc; i++) {
        json_t *s = json_string(argv[i]);
        if (!s) {
            json_decref(req);
            return crl_err_set(err, CRL_E_INVALID, "argument '%s' is not valid UTF-8", argv[i]);
        }
        json_array_append_new(cmd, s);
    }
    if (o->env && json_object_size(o->env))
        json_object_set(req, "env", o->env);
    if (o->cwd)
        json_object_set_new(req, "cwd", json_string(o->cwd));
    if (o->user)
        json_object_set_new(req, "user", json_string(o->user));
    if (o->timeout_s >= 0)
        json_object_set_new(req, "timeout_s", json_real(o->timeout_s));
    /* All the API allows: a command's output here is what the user asked
     * for, and what is past the cap is reported, not silently lost. */
    json_object_set_new(req, "max_output_bytes", json_integer(CRL_EXEC_MAX_OUTPUT));
    if (o->forward_stdin && read_stdin(req, err) < 0) {
        json_decref(req);
        return -1;
    }
    *out = req;
    return 0;
}

int crl_cli_exec_fail(const struct crl_cli_exec *o, struct crl_err *err)
{
    /* A corrald with a smaller --max-body-mb than the default refuses what
     * read_stdin() let through; its message does not mention stdin. */
    if (o->forward_stdin && err->code == CRL_E_TOO_LARGE)
        crl_err_prefix(err, "stdin (-i) is too large for corrald (copy it in with 'corral cp')");
    return crl_cli_fail(err);
}

int crl_cli_write_output(void *ctx, enum crl_client_fd which, const char *data, size_t len,
                         struct crl_err *err)
{
    int fd = which == CRL_CLIENT_STDERR ? STDERR_FILENO : STDOUT_FILENO;
    while (len) {
        /* A signal must stop a write that blocks on a reader who stopped
         * reading, or `run` could never destroy its sandbox; one that came
         * after part of a write returns that part, not EINTR. */
        if (crl_cli_interrupted)
            return crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EPIPE) {
            /* Our reader is gone (`| head -1`): stop quietly, as the
             * SIGPIPE a shell pipeline expects would, but through the
             * caller, which cleans up first. */
            crl_cli_interrupted = SIGPIPE;
            return crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
        }
        if (n < 0)
            return crl_err_sys(err, errno, "writing the command's %s",
                               fd == STDOUT_FILENO ? "stdout" : "stderr");
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

int crl_cli_result_status(json_t *result, struct crl_err *err)
{
    int status = crl_client_exit_status(result);
    if (status < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "corrald's result has no exit status");
    const char *reason = json_string_value(json_object_get(result, "reason"));
    double secs = json_number_value(json_object_get(result, "duration_s"));
    if (strcmp(reason, "timeout") == 0)
        fprintf(stderr, "corral: the command timed out after %.1f s and was killed\n", secs);
    else if (strcmp(reason, "oom") == 0)
        fprintf(stderr, "corral: the command was killed: out of memory (the sandbox's limit)\n");
    else if (strcmp(reason, "killed") == 0)
        fprintf(stderr, "corral: the command was killed: its sandbox was destroyed\n");
    if (json_is_true(json_object_get(result, "truncated"))) {
        bool out = json_is_true(json_object_get(result, "stdout_truncated"));
        bool errs = json_is_true(json_object_get(result, "stderr_truncated"));
        fflush(stdout);
        fprintf(stderr,
                "corral: the command wrote more than %u MiB to %s (max_output_bytes); the rest "
                "was dropped\n",
                CRL_EXEC_MAX_OUTPUT >> 20,
                out && errs ? "stdout and stderr"
                : errs      ? "stderr"
                            : "stdout");
        /* Output that is not all there is a failure, even of a command
         * that succeeded; its own failure status is kept. */
        if (status == 0)
            status = CRL_EXIT_FAIL;
    }
    return status;
}

static void on_signal(int sig)
{
    crl_cli_interrupted = sig;
}

void crl_cli_catch_signals(struct crl_client *c)
{
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: reads return EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    /* A closed stdout is EPIPE, seen by crl_cli_write_output(). */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, NULL);
    if (c)
        crl_client_set_cancel(c, &crl_cli_interrupted);
}

int crl_cli_read_flags(int argc, char **argv, const char *help, int nargs, const char *what,
                       bool *as_json, const char **arg)
{
    enum { OPT_JSON = CRL_CLI_OPT_OTHER };
    static const struct option opts[] = {
        {"json", no_argument, 0, OPT_JSON}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    *as_json = false;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: *as_json = true; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (nargs && optind == argc)
        return crl_cli_usage(argv[0], "needs %s", what);
    if (optind + nargs < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind + nargs]);
    if (nargs)
        *arg = argv[optind];
    return -1;
}

int crl_cli_show(const char *path, bool as_json, void (*show)(json_t *answer))
{
    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *out = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_request(cl, "GET", path, NULL, &out, NULL, &err) < 0)
        return crl_cli_fail(&err);
    if (as_json)
        crl_cli_print_json(out);
    else
        show(out);
    return 0;
}

int crl_cli_no_flags(int argc, char **argv, const char *help)
{
    static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
        if (c == 'h')
            return crl_cli_help(help);
        return crl_cli_bad_option(argv[0], argv, c);
    }
    return -1;
}

int crl_cli_delete_each(const char *prefix, char *const *names, int n)
{
    cleanup_client struct crl_client *cl = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        struct crl_err err = CRL_ERR_INIT;
        char path[400];
        snprintf(path, sizeof(path), "%s/%s", prefix, names[i]);
        if (crl_client_request(cl, "DELETE", path, NULL, NULL, NULL, &err) < 0) {
            crl_err_prefix(&err, "%s", names[i]);
            rc = crl_cli_fail(&err);
            continue;
        }
        printf("%s\n", names[i]);
        fflush(stdout);
    }
    return rc;
}

int crl_cli_dispatch(int argc, char **argv, const char *group, const struct crl_cli_sub *subs,
                     size_t n, const char *names, const char *help)
{
    if (argc < 2)
        return crl_cli_usage(argv[0], "needs a command (%s)", names);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return crl_cli_help(help);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(subs[i].name, argv[1]) != 0)
            continue;
        char self[64];
        snprintf(self, sizeof(self), "%s %s", group, argv[1]);
        argv[1] = self;
        optind = 0; /* getopt_long starts over */
        return subs[i].fn(argc - 1, argv + 1);
    }
    return crl_cli_usage(argv[0], "unknown command '%s'", argv[1]);
}
