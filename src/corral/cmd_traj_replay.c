/* corral traj replay: run a trajectory's calls again on a fresh sandbox and
 * report every step whose result differs from the recorded one, a
 * deterministic replay for audits.
 *
 * The path replayed runs from the start to the newest head (or --head N).
 * The sandbox is made from the recorded spec without its trajectory, so
 * nothing fast-forwards and nothing is recorded; a trajectory that starts
 * from a checkpoint (a fork's) starts from it, through a fork of a scratch
 * sandbox.  Session ids are mapped from the recorded ones to the new ones.
 * Snapshots are skipped: they change nothing a later step can see. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../lib/core/spec.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/cleanup.h"
#include "cli.h"

#define REPLAY_DIFFER 1
#define REPLAY_ERROR 2
#define SHOW_MAX 100 /* bytes of a differing line shown */

static const char help[] =
    "usage: corral traj replay [--head N] ID\n"
    "\n"
    "Run trajectory ID again on a fresh sandbox made from its recorded spec\n"
    "(without the trajectory: nothing is recorded), step by step from its start\n"
    "to its newest head, and print every step whose result differs from the\n"
    "recorded one, with a short diff: for a command its exit code, signal,\n"
    "stdout and stderr; for a file read its bytes; for the others their HTTP\n"
    "status.  Snapshots are skipped.  Then a summary, 'N steps, M differ', and\n"
    "the sandbox is destroyed.\n"
    "\n"
    "  --head N            replay the path to step N instead\n"
    "\n"
    "Exit status: 0 when no step differs, 1 when some do, 2 on an error.\n";

struct replay {
    struct crl_client *cl;
    char sb[64];
    json_t *sessions; /* recorded session id -> the new one */
    size_t steps, differ, skipped;
};

/* ---- re-issuing a step ---- */

/* "%XX" every byte but the unreserved ones, for a query string. */
static void url_escape(struct crl_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-._~/", c))
            crl_buf_append(b, s, 1);
        else
            crl_buf_printf(b, "%%%02X", c);
    }
}

/* /v1/sandboxes/SB/files?path=...&user=...&mode=..., from the recorded query. */
static int files_target(struct replay *rp, json_t *query, struct crl_buf *b, struct crl_err *err)
{
    static const char *const keys[] = {"path", "user", "mode"};
    if (!json_is_string(json_object_get(query, "path")))
        return crl_err_set(err, CRL_E_INVALID, "the step records no path");
    crl_buf_printf(b, "/v1/sandboxes/%s/files", rp->sb);
    for (size_t i = 0; i < CRL_ARRAY_SIZE(keys); i++) {
        const char *v = crl_cli_str(query, keys[i], NULL);
        if (!v)
            continue;
        crl_buf_printf(b, "%s%s=", i ? "&" : "?", keys[i]);
        url_escape(b, v);
    }
    return 0;
}

/* A base64 field into *out (the caller frees it); a missing one is empty. */
static int b64_field(json_t *obj, const char *key, char **out, size_t *len, struct crl_err *err)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    *len = 0;
    if (!v)
        return 0;
    if (!json_is_string(v) ||
        crl_base64_decode(json_string_value(v), json_string_length(v), out, len) < 0)
        return crl_err_set(err, CRL_E_INVALID, "%s is not base64", key);
    return 0;
}

static int read_file(struct replay *rp, const char *target, struct crl_buf *bytes,
                     struct crl_err *err)
{
    cleanup_close int fd = memfd_create("corral-replay", MFD_CLOEXEC);
    if (fd < 0)
        return crl_err_sys(err, errno, "memfd_create");
    if (crl_client_download(rp->cl, target, fd, err) < 0)
        return -1;
    if (lseek(fd, 0, SEEK_SET) < 0)
        return crl_err_sys(err, errno, "lseek");
    char chunk[65536];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof(chunk))) > 0)
        if (crl_buf_append(bytes, chunk, (size_t)n) < 0)
            return crl_err_sys(err, ENOMEM, "reading a file");
    if (n < 0)
        return crl_err_sys(err, errno, "reading back a file");
    return 0;
}

/* The session a step names, in the new sandbox. */
static const char *session_of(struct replay *rp, json_t *req)
{
    const char *sid = crl_cli_str(req, "session", "");
    const char *mapped = json_string_value(json_object_get(rp->sessions, sid));
    return mapped ? mapped : sid;
}

/* Issue the recorded request `rec` on the new sandbox.  Returns 0 with
 * *status the HTTP status of the answer (an error's too: *answer is NULL
 * then and *why says it), *answer the JSON answer and `bytes` a file's;
 * -1 when no answer came, or the step cannot be issued (CRL_E_UNSUPPORTED:
 * skip it). */
static int issue(struct replay *rp, json_t *rec, long *status, json_t **answer,
                 struct crl_buf *bytes, struct crl_err *why, struct crl_err *err)
{
    const char *kind = crl_cli_str(rec, "kind", "");
    json_t *req = json_object_get(rec, "request");
    json_t *body = json_object_get(req, "body");
    bool has_body = json_is_object(body) || json_is_array(body);
    struct crl_buf target;
    crl_buf_init(&target, CRL_BUF_UNBOUNDED);
    json_auto_t *send = NULL;
    int rc;
    *answer = NULL;
    *status = 0;
    if (!json_is_object(req)) {
        crl_buf_free(&target);
        return crl_err_set(err, CRL_E_INVALID, "the step records no request");
    }
    if (json_object_get(req, "body_sha256") && !json_object_get(req, "body_base64") &&
        strcmp(kind, "file_write") != 0) {
        crl_buf_free(&target);
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "its body was not JSON, so only its hash was recorded");
    }
    if (strcmp(kind, "exec") == 0 || strcmp(kind, "session_run") == 0) {
        if (strcmp(kind, "exec") == 0)
            crl_buf_printf(&target, "/v1/sandboxes/%s/exec", rp->sb);
        else
            crl_buf_printf(&target, "/v1/sandboxes/%s/sessions/%s/run", rp->sb,
                           session_of(rp, req));
        if (has_body) {
            send = json_deep_copy(body);
            json_object_del(send, "stream"); /* the result as one object */
        }
        rc = crl_client_request(rp->cl, "POST", target.data, send, answer, NULL, why);
    } else if (strcmp(kind, "session_open") == 0) {
        crl_buf_printf(&target, "/v1/sandboxes/%s/sessions", rp->sb);
        rc = crl_client_request(rp->cl, "POST", target.data, has_body ? body : NULL, answer, NULL,
                                why);
        const char *was = crl_cli_str(json_object_get(rec, "response"), "session_id", NULL);
        const char *now = crl_cli_str(*answer, "session_id", NULL);
        if (rc == 0 && was && now)
            json_object_set_new(rp->sessions, was, json_string(now));
    } else if (strcmp(kind, "session_close") == 0) {
        crl_buf_printf(&target, "/v1/sandboxes/%s/sessions/%s", rp->sb, session_of(rp, req));
        rc = crl_client_request(rp->cl, "DELETE", target.data, NULL, answer, NULL, why);
    } else if (strcmp(kind, "file_read") == 0) {
        if (files_target(rp, json_object_get(req, "query"), &target, err) < 0) {
            crl_buf_free(&target);
            return -1;
        }
        rc = read_file(rp, target.data, bytes, why);
    } else if (strcmp(kind, "file_write") == 0) {
        cleanup_free char *data = NULL;
        size_t len;
        if (json_object_get(rec, "blob_error") && json_object_get(req, "body_blob")) {
            crl_buf_free(&target);
            return crl_err_set(err, CRL_E_INTERNAL, "the bytes it wrote cannot be read back: %s",
                               crl_cli_str(rec, "blob_error", "?"));
        }
        if (files_target(rp, json_object_get(req, "query"), &target, err) < 0 ||
            b64_field(req, "body_base64", &data, &len, err) < 0) {
            crl_buf_free(&target);
            return -1;
        }
        struct crl_client_mem src = {.data = data ? data : "", .len = len};
        rc = crl_client_upload(rp->cl, "PUT", target.data, crl_client_mem_source, &src,
                               (long long)len, "application/octet-stream", answer, why);
    } else {
        crl_buf_free(&target);
        return crl_err_set(err, CRL_E_UNSUPPORTED, "a step of kind '%s' is not replayed", kind);
    }
    crl_buf_free(&target);
    *status = crl_client_last_status(rp->cl);
    if (rc < 0 && *status < 400) { /* no answer, or one cut short */
        *err = *why;
        return -1;
    }
    return 0;
}

/* ---- comparing ---- */

/* A line for the diff: printable ASCII as is, the rest as \xNN, at most
 * SHOW_MAX bytes of the original. */
static void show_line(const char *p, size_t n)
{
    size_t shown = n > SHOW_MAX ? SHOW_MAX : n;
    for (size_t i = 0; i < shown; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            putchar(c);
        else if (c == '\\')
            fputs("\\\\", stdout);
        else
            printf("\\x%02x", c);
    }
    printf("%s\n", n > shown ? "..." : "");
}

/* The line `k` (from 0) of data[0..len): false if there are fewer. */
static bool nth_line(const char *data, size_t len, size_t k, const char **p, size_t *n)
{
    const char *s = data, *end = data + len;
    for (;;) {
        if (s >= end)
            return false;
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t l = nl ? (size_t)(nl - s) : (size_t)(end - s);
        if (k-- == 0) {
            *p = s;
            *n = l;
            return true;
        }
        s += l + 1;
    }
}

/* Print where two outputs first differ, a line of each. */
static void diff_bytes(const char *tag, const char *a, size_t alen, const char *b, size_t blen)
{
    size_t k = 0;
    const char *pa = NULL, *pb = NULL;
    size_t na = 0, nb = 0;
    bool ha, hb;
    for (;; k++) {
        ha = nth_line(a, alen, k, &pa, &na);
        hb = nth_line(b, blen, k, &pb, &nb);
        if (!ha || !hb || na != nb || memcmp(pa, pb, na) != 0)
            break;
    }
    if (ha && hb && na == nb && memcmp(pa, pb, na) == 0) /* one ends in a newline, one not */
        printf("  %s differs at the end of line %zu (a newline)\n", tag, k + 1);
    else
        printf("  %s differs at line %zu (%zu bytes recorded, %zu now):\n", tag, k + 1, alen, blen);
    printf("    - ");
    if (ha)
        show_line(pa, na);
    else
        printf("(no line %zu)\n", k + 1);
    printf("    + ");
    if (hb)
        show_line(pb, nb);
    else
        printf("(no line %zu)\n", k + 1);
}

/* An output of a result as bytes (text, or base64 when its encoding says). */
static int output_of(json_t *result, const char *key, char **out, size_t *len)
{
    json_t *v = json_object_get(result, key);
    const char *s = json_string_value(v);
    *out = NULL;
    *len = 0;
    if (!s)
        return 0;
    if (strcmp(crl_cli_str(result, "encoding", ""), "base64") == 0)
        return crl_base64_decode(s, json_string_length(v), out, len);
    *out = malloc(json_string_length(v) + 1);
    if (!*out)
        return -1;
    memcpy(*out, s, json_string_length(v));
    *len = json_string_length(v);
    return 0;
}

static bool same_value(json_t *a, json_t *b)
{
    bool na = !a || json_is_null(a), nb = !b || json_is_null(b);
    return na || nb ? na == nb : json_equal(a, b);
}

static void header(bool *shown, json_t *rec)
{
    if (*shown)
        return;
    struct crl_buf what;
    crl_buf_init(&what, CRL_BUF_UNBOUNDED);
    crl_cli_traj_what(rec, &what);
    printf("step %lld (%s: %s) differs:\n", json_integer_value(json_object_get(rec, "n")),
           crl_cli_str(rec, "kind", "?"), what.len ? what.data : "");
    crl_buf_free(&what);
    *shown = true;
}

static void value_text(json_t *v, char *buf, size_t cap)
{
    if (!v || json_is_null(v))
        snprintf(buf, cap, "none");
    else if (json_is_integer(v))
        snprintf(buf, cap, "%lld", json_integer_value(v));
    else
        snprintf(buf, cap, "%s", json_string_value(v) ? json_string_value(v) : "?");
}

/* Compare a step's answer now with the recorded one, printing what
 * differs; true if anything does. */
static bool compare(json_t *rec, long status, json_t *answer, struct crl_buf *bytes,
                    const struct crl_err *why)
{
    const char *kind = crl_cli_str(rec, "kind", "");
    long was = (long)json_integer_value(json_object_get(rec, "status"));
    json_t *resp = json_object_get(rec, "response");
    bool shown = false;
    if (status != was) {
        header(&shown, rec);
        printf("  status: recorded %ld, now %ld", was, status);
        if (status >= 400)
            printf(" (%s)", why->msg);
        printf("\n");
        return true;
    }
    if (status >= 300)
        return false;
    if (strcmp(kind, "exec") == 0 || strcmp(kind, "session_run") == 0) {
        static const char *const fields[] = {"exit_code", "signal"};
        for (size_t i = 0; i < CRL_ARRAY_SIZE(fields); i++) {
            json_t *a = json_object_get(resp, fields[i]), *b = json_object_get(answer, fields[i]);
            if (same_value(a, b))
                continue;
            char ta[64], tb[64];
            value_text(a, ta, sizeof(ta));
            value_text(b, tb, sizeof(tb));
            header(&shown, rec);
            printf("  %s: recorded %s, now %s\n", fields[i], ta, tb);
        }
        static const char *const streams[] = {"stdout", "stderr"};
        for (size_t i = 0; i < CRL_ARRAY_SIZE(streams); i++) {
            cleanup_free char *a = NULL;
            cleanup_free char *b = NULL;
            size_t alen, blen;
            if (output_of(resp, streams[i], &a, &alen) < 0 ||
                output_of(answer, streams[i], &b, &blen) < 0) {
                header(&shown, rec);
                printf("  %s: not readable (bad base64)\n", streams[i]);
                continue;
            }
            if (alen == blen && (!alen || memcmp(a, b, alen) == 0))
                continue;
            header(&shown, rec);
            diff_bytes(streams[i], a ? a : "", alen, b ? b : "", blen);
        }
    } else if (strcmp(kind, "file_read") == 0) {
        cleanup_free char *a = NULL;
        size_t alen;
        struct crl_err e = CRL_ERR_INIT;
        if (json_object_get(rec, "blob_error") || !json_object_get(rec, "content_base64") ||
            b64_field(rec, "content_base64", &a, &alen, &e) < 0) {
            header(&shown, rec);
            printf("  the recorded bytes cannot be read: %s\n",
                   crl_cli_str(rec, "blob_error", e.msg[0] ? e.msg : "not in the export"));
            return true;
        }
        if (alen != bytes->len || (alen && memcmp(a, bytes->data, alen) != 0)) {
            header(&shown, rec);
            diff_bytes("content", a ? a : "", alen, bytes->data ? bytes->data : "", bytes->len);
        }
    }
    return shown;
}

/* ---- the path and the sandbox ---- */

struct collect {
    bool *on_path;
    size_t n_steps;
    json_t *records; /* array, index n-1 */
};

static int collect_line(void *ctx, json_t *line, struct crl_err *err)
{
    struct collect *c = ctx;
    json_int_t n = json_integer_value(json_object_get(line, "n"));
    /* steps recorded since the trajectory was read are on no path of ours */
    if (n >= 1 && (size_t)n <= c->n_steps && c->on_path[n])
        json_array_set(c->records, (size_t)n - 1, line);
    return 0;
}

/* The records of the steps from the start to `head`, in order: a new
 * array in *out. */
static int load_path(struct crl_client *cl, const char *id, json_t *info, json_int_t head,
                     json_t **out, struct crl_err *err)
{
    json_t *steps = json_object_get(info, "steps");
    size_t n = json_array_size(steps);
    cleanup_free uint32_t *parent = calloc(n + 1, sizeof(*parent));
    cleanup_free bool *on_path = calloc(n + 1, sizeof(*on_path));
    if (!parent || !on_path)
        return crl_err_sys(err, ENOMEM, "the steps of %s", id);
    size_t i;
    json_t *s;
    json_array_foreach(steps, i, s)
    {
        json_int_t k = json_integer_value(json_object_get(s, "n"));
        json_int_t p = json_integer_value(json_object_get(s, "parent"));
        if (k < 1 || (size_t)k > n || p < 0 || p >= k)
            return crl_err_set(err, CRL_E_INTERNAL, "trajectory %s: step %zu is malformed", id,
                               i + 1);
        parent[k] = (uint32_t)p;
    }
    size_t len = 0;
    for (uint32_t k = (uint32_t)head; k; k = parent[k]) {
        on_path[k] = true;
        len++;
    }
    struct collect c = {.on_path = on_path, .n_steps = n, .records = json_array()};
    for (i = 0; i < n; i++)
        json_array_append_new(c.records, json_null());
    char target[200];
    snprintf(target, sizeof(target), "/v1/trajectories/%s/steps", id);
    if (crl_client_stream(cl, "GET", target, NULL, collect_line, &c, NULL, err) < 0) {
        json_decref(c.records);
        return -1;
    }
    json_t *path = json_array();
    for (size_t k = 1; k <= n; k++) {
        if (!on_path[k])
            continue;
        json_t *rec = json_array_get(c.records, k - 1);
        if (json_is_null(rec)) {
            json_decref(path);
            json_decref(c.records);
            return crl_err_set(err, CRL_E_INTERNAL, "trajectory %s: step %zu is not in the export",
                               id, k);
        }
        json_array_append(path, rec);
    }
    json_decref(c.records);
    *out = path; /* parents come before children: ascending n is path order */
    return 0;
}

/* A fresh sandbox for the recorded spec, on the trajectory's base state. */
static int make_sandbox(struct replay *rp, const char *id, json_t *info, struct crl_err *err)
{
    json_auto_t *spec = json_deep_copy(json_object_get(info, "spec"));
    json_auto_t *sb = NULL;
    if (!json_is_object(spec))
        return crl_err_set(err, CRL_E_INTERNAL, "trajectory %s records no spec", id);
    json_object_del(spec, "trajectory");
    json_t *labels = json_object_get(spec, "labels");
    if (!labels)
        json_object_set_new(spec, "labels", labels = json_object());
    if (json_object_size(labels) < CRL_SPEC_MAX_LABELS)
        json_object_set_new(labels, "corral.replay", json_string(id));
    if (crl_client_create(rp->cl, spec, &sb, err) < 0)
        return crl_err_prefix(err, "creating a sandbox for the replay");
    snprintf(rp->sb, sizeof(rp->sb), "%s", crl_cli_str(sb, "id", ""));
    const char *base = crl_cli_str(info, "base", NULL);
    if (!base)
        return 0;
    /* The trajectory began on a checkpoint (it was forked): start there. */
    char target[128];
    json_auto_t *body = json_pack("{s:s}", "checkpoint", base);
    json_auto_t *forked = NULL;
    snprintf(target, sizeof(target), "/v1/sandboxes/%s/fork", rp->sb);
    int rc = crl_client_request(rp->cl, "POST", target, body, &forked, NULL, err);
    struct crl_err derr = CRL_ERR_INIT;
    if (crl_client_destroy(rp->cl, rp->sb, NULL, &derr) < 0)
        fprintf(stderr, "corral: destroying %s: %s\n", rp->sb, derr.msg);
    rp->sb[0] = 0;
    if (rc < 0)
        return crl_err_prefix(err, "starting from checkpoint %s", base);
    snprintf(rp->sb, sizeof(rp->sb), "%s", crl_cli_str(forked, "id", ""));
    return 0;
}

static int run(struct replay *rp, json_t *path, struct crl_err *err)
{
    size_t i;
    json_t *rec;
    json_array_foreach(path, i, rec)
    {
        if (crl_cli_interrupted)
            return crl_err_set(err, CRL_E_UNAVAILABLE, "interrupted");
        const char *kind = crl_cli_str(rec, "kind", "?");
        json_int_t n = json_integer_value(json_object_get(rec, "n"));
        if (strcmp(kind, "snapshot") == 0) {
            rp->skipped++;
            continue;
        }
        long status;
        json_auto_t *answer = NULL;
        struct crl_buf bytes;
        struct crl_err why = CRL_ERR_INIT;
        crl_buf_init(&bytes, CRL_BUF_UNBOUNDED);
        int rc = issue(rp, rec, &status, &answer, &bytes, &why, err);
        if (rc < 0 && err->code == CRL_E_UNSUPPORTED) {
            printf("step %lld (%s) skipped: %s\n", (long long)n, kind, err->msg);
            crl_err_clear(err);
            rp->skipped++;
            crl_buf_free(&bytes);
            continue;
        }
        if (rc < 0) {
            crl_buf_free(&bytes);
            return crl_err_prefix(err, "step %lld (%s)", (long long)n, kind);
        }
        rp->steps++;
        if (compare(rec, status, answer, &bytes, &why))
            rp->differ++;
        crl_buf_free(&bytes);
        fflush(stdout);
    }
    return 0;
}

int crl_cmd_traj_replay(int argc, char **argv)
{
    enum { OPT_HEAD = CRL_CLI_OPT_OTHER };
    static const struct option opts[] = {
        {"head", required_argument, 0, OPT_HEAD}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    long long head = 0;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_HEAD:
            if (crl_cli_parse_int("--head", optarg, 1, UINT32_MAX, &head, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    const char *id;
    int urc = crl_cli_traj_one_id(argc, argv, &id);
    if (urc >= 0)
        return urc;

    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *info = NULL;
    json_auto_t *path = NULL;
    char target[200];
    if (crl_cli_connect(&cl) != 0)
        return REPLAY_ERROR;
    snprintf(target, sizeof(target), "/v1/trajectories/%s", id);
    if (crl_client_request(cl, "GET", target, NULL, &info, NULL, &err) < 0) {
        crl_cli_fail(&err);
        return REPLAY_ERROR;
    }
    json_int_t n_steps = (json_int_t)json_array_size(json_object_get(info, "steps"));
    if (head > n_steps) {
        crl_cli_failf("--head %lld: trajectory %s has %lld steps", head, id, (long long)n_steps);
        return REPLAY_ERROR;
    }
    if (!head) { /* the newest head: the branch last written */
        size_t i;
        json_t *h;
        json_array_foreach(json_object_get(info, "heads"), i, h) if (json_integer_value(h) > head)
            head = json_integer_value(h);
    }
    if (!head) {
        printf("0 steps, 0 differ\n");
        return 0;
    }
    if (load_path(cl, id, info, head, &path, &err) < 0) {
        crl_cli_fail(&err);
        return REPLAY_ERROR;
    }

    struct replay rp = {.cl = cl, .sessions = json_object()};
    /* From here a signal only sets a flag: the sandbox must go first. */
    crl_cli_catch_signals(NULL);
    int rc = make_sandbox(&rp, id, info, &err);
    if (rc == 0 && !crl_cli_interrupted) {
        crl_client_set_cancel(cl, &crl_cli_interrupted);
        rc = run(&rp, path, &err);
        crl_client_set_cancel(cl, NULL); /* a second Ctrl-C must not stop the destroy */
    }
    if (rc < 0 && !crl_cli_interrupted)
        crl_cli_fail(&err);
    if (rc == 0) {
        printf("%zu steps, %zu differ", rp.steps, rp.differ);
        if (rp.skipped)
            printf(", %zu skipped", rp.skipped);
        printf("\n");
        fflush(stdout);
    }
    struct crl_err derr = CRL_ERR_INIT;
    if (rp.sb[0] && crl_client_destroy(cl, rp.sb, NULL, &derr) < 0) {
        crl_err_prefix(&derr, "destroying %s", rp.sb);
        crl_cli_fail(&derr);
        rc = -1;
    }
    json_decref(rp.sessions);
    if (crl_cli_interrupted)
        return 128 + crl_cli_interrupted;
    if (rc < 0)
        return REPLAY_ERROR;
    return rp.differ ? REPLAY_DIFFER : 0;
}
