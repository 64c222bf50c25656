/* corral traj: trajectories, the durable logs of every call made to the
 * sandboxes that recorded them (docs/api.md, "Trajectories").
 *
 *   corral traj ls | show ID | export ID | rm ID... | replay ID | gc
 *
 * replay lives in cmd_traj_replay.c; what both show of a step is here. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/core/spec.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/cleanup.h"
#include "cli.h"

static const char help[] =
    "usage: corral traj COMMAND [OPTIONS] [ARGS]\n"
    "\n"
    "  ls [--json]                     list trajectories\n"
    "  show [--outputs] [--json] ID    a trajectory's steps, one a line\n"
    "  export ID                       every step with its outputs, as JSON Lines\n"
    "  rm ID...                        delete trajectories (refused while one is live)\n"
    "  replay [--head N] ID            run a trajectory again on a fresh sandbox and\n"
    "                                  report every step whose result differs\n"
    "  gc [--grace-s N] [--json]       remove the checkpoints nothing refers to\n"
    "\n"
    "A sandbox created with a trajectory id (spec \"trajectory\") records every\n"
    "exec, session command, file read and write and snapshot as a step; see\n"
    "docs/api.md.\n";

static const char help_ls[] =
    "usage: corral traj ls [--json]\n"
    "\n"
    "List the trajectories corrald has: steps, heads (the steps nothing\n"
    "continues: a trajectory is a tree), the sandbox that holds it, if any.\n"
    "\n"
    "  --json              print corrald's answer as JSON\n";

static const char help_show[] =
    "usage: corral traj show [--outputs] [--json] ID\n"
    "\n"
    "Show a trajectory: its spec and a table of its steps (number, parent,\n"
    "kind, HTTP status, what was asked, the checkpoint of the state after it).\n"
    "\n"
    "  --outputs           include what each step answered (output, file bytes)\n"
    "  --json              print corrald's answer as JSON\n";

static const char help_export[] =
    "usage: corral traj export ID\n"
    "\n"
    "Write every step of trajectory ID to stdout as JSON Lines, one step a\n"
    "line, as corrald sends it: the request, the answer and its outputs\n"
    "(a file read's bytes as content_base64, a file write's as the request's\n"
    "body_base64), timings and the checkpoint after it.\n";

static const char help_rm[] = "usage: corral traj rm ID...\n"
                              "\n"
                              "Delete trajectories and print each id once it is gone.  Refused\n"
                              "for one a sandbox holds (destroy the sandbox first).\n";

static const char help_gc[] =
    "usage: corral traj gc [--grace-s N] [--json]\n"
    "\n"
    "Remove the checkpoint blobs that no trajectory's log and no live sandbox's\n"
    "state refers to, once they are older than the grace (corrald does the same\n"
    "every --checkpoint-gc-s).  A checkpoint of a sandbox without a trajectory\n"
    "lives as long as that sandbox, or the grace.  A log that cannot be read\n"
    "stops it, naming the trajectory, and nothing is removed.\n"
    "\n"
    "  --grace-s N         keep what is younger than N seconds (default 3600)\n"
    "  --json              print corrald's answer as JSON\n";

/* ---- shared with replay ---- */

static void cmd_text(json_t *cmd, struct crl_buf *b)
{
    size_t i;
    json_t *a;
    if (json_is_string(cmd)) {
        crl_buf_printf(b, "%s", json_string_value(cmd));
        return;
    }
    if (!json_is_array(cmd)) {
        crl_buf_printf(b, "(the image's command)");
        return;
    }
    json_array_foreach(cmd, i, a)
        crl_buf_printf(b, "%s%s", i ? " " : "", json_is_string(a) ? json_string_value(a) : "?");
}

void crl_cli_traj_what(json_t *step, struct crl_buf *b)
{
    const char *kind = crl_cli_str(step, "kind", "");
    json_t *req = json_object_get(step, "request");
    json_t *body = json_object_get(req, "body");
    const char *sid = crl_cli_str(req, "session", "?");
    bool hashed = !body && json_object_get(req, "body_sha256");
    if (hashed && strncmp(kind, "file_", 5) != 0) {
        crl_buf_printf(b, "(a body that is not JSON)");
    } else if (strcmp(kind, "exec") == 0) {
        cmd_text(json_object_get(body, "cmd"), b);
    } else if (strcmp(kind, "session_run") == 0) {
        crl_buf_printf(b, "%s: ", sid);
        cmd_text(json_object_get(body, "cmd"), b);
    } else if (strcmp(kind, "session_open") == 0) {
        const char *opened = crl_cli_str(json_object_get(step, "response"), "session_id", NULL);
        crl_buf_printf(b, "%s", opened ? opened : "-");
    } else if (strcmp(kind, "session_close") == 0) {
        crl_buf_printf(b, "%s", sid);
    } else if (strncmp(kind, "file_", 5) == 0) {
        crl_buf_printf(b, "%s", crl_cli_str(json_object_get(req, "query"), "path", "?"));
    } else if (strcmp(kind, "snapshot") == 0) {
        crl_buf_printf(b, "%s", crl_cli_str(body, "name", ""));
    }
    /* one line in a table: control characters become spaces */
    for (size_t i = 0; i < b->len; i++)
        if ((unsigned char)b->data[i] < 0x20)
            b->data[i] = ' ';
}

const char *crl_cli_traj_ckpt(json_t *step, char *buf, size_t cap)
{
    const char *id = crl_cli_str(step, "checkpoint", NULL);
    if (!id)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.12s", strncmp(id, "sha256:", 7) == 0 ? id + 7 : id);
    return buf;
}

static const char *age_of(json_t *t, char *buf, size_t cap)
{
    return crl_cli_age(crl_cli_str(t, "created_at", "-"), buf, cap);
}

static int id_arg(const char *cmd, const char *id)
{
    if (!crl_traj_id_ok(id))
        return crl_cli_usage(cmd,
                             "'%s' is not a trajectory id (1-128 of [A-Za-z0-9._-], starting "
                             "with a letter or digit)",
                             id);
    return -1;
}

int crl_cli_traj_one_id(int argc, char **argv, const char **id)
{
    if (argc - optind != 1)
        return crl_cli_usage(argv[0],
                             argc == optind ? "needs a trajectory id" : "takes one trajectory id");
    *id = argv[optind];
    return id_arg(argv[0], *id);
}

/* ---- ls ---- */

static void show_list(json_t *out)
{
    printf("%-32s %-6s %-12s %-24s %-12s %s\n", "ID", "STEPS", "HEADS", "LIVE IN", "IMAGE", "AGE");
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(out, "trajectories"), i, t)
    {
        const char *error = crl_cli_str(t, "error", NULL);
        if (error) {
            printf("%-32s error: %s\n", crl_cli_str(t, "id", "?"), error);
            continue;
        }
        struct crl_buf heads;
        crl_buf_init(&heads, CRL_BUF_UNBOUNDED);
        size_t k;
        json_t *h;
        json_array_foreach(json_object_get(t, "heads"), k, h)
            crl_buf_printf(&heads, "%s%lld", k ? "," : "", json_integer_value(h));
        char age[16];
        json_t *spec = json_object_get(t, "spec");
        const char *image = strcmp(crl_cli_str(spec, "backend", ""), "function") == 0
                                ? crl_cli_str(spec, "runtime", "function")
                                : crl_cli_str(spec, "image", "-");
        printf("%-32s %-6lld %-12s %-24s %-12s %s\n", crl_cli_str(t, "id", "?"),
               json_integer_value(json_object_get(t, "n_steps")), heads.len ? heads.data : "-",
               crl_cli_str(t, "live_sandbox", "-"), image, age_of(t, age, sizeof(age)));
        crl_buf_free(&heads);
    }
}

static int cmd_ls(int argc, char **argv)
{
    bool as_json;
    int rc = crl_cli_read_flags(argc, argv, help_ls, 0, NULL, &as_json, NULL);
    return rc >= 0 ? rc : crl_cli_show("/v1/trajectories", as_json, show_list);
}

/* ---- show ---- */

/* Print an output's bytes indented under its step, `tag` before each line. */
static void print_block(const char *tag, const char *data, size_t len)
{
    if (!len)
        return;
    if (!crl_utf8_valid(data, len)) {
        printf("      %s (%zu bytes, not text)\n", tag, len);
        return;
    }
    const char *p = data, *end = data + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        printf("      %s %.*s\n", tag, (int)n, p);
        p += n + (nl ? 1 : 0);
    }
}

static void print_field(const char *tag, json_t *v, bool b64)
{
    const char *s = json_string_value(v);
    if (!s)
        return;
    size_t len = json_string_length(v);
    if (!b64) {
        print_block(tag, s, len);
        return;
    }
    cleanup_free char *dec = NULL;
    size_t n;
    if (crl_base64_decode(s, len, &dec, &n) < 0)
        printf("      %s (not base64)\n", tag);
    else
        print_block(tag, dec, n);
}

static void show_outputs(json_t *step)
{
    const char *kind = crl_cli_str(step, "kind", "");
    json_t *resp = json_object_get(step, "response");
    if (strcmp(kind, "exec") == 0 || strcmp(kind, "session_run") == 0) {
        bool b64 = strcmp(crl_cli_str(resp, "encoding", ""), "base64") == 0;
        if (json_object_get(resp, "reason")) {
            int st = crl_client_exit_status(resp);
            printf("      = %s, status %d\n", crl_cli_str(resp, "reason", "?"), st);
        }
        print_field("1|", json_object_get(resp, "stdout"), b64);
        print_field("2|", json_object_get(resp, "stderr"), b64);
    } else if (strcmp(kind, "file_read") == 0) {
        print_field(" |", json_object_get(step, "content_base64"), true);
    }
    json_t *e = json_object_get(resp, "error");
    if (e)
        printf("      ! %s\n", crl_cli_str(e, "message", "?"));
    if (json_object_get(step, "blob_error"))
        printf("      ! %s\n", crl_cli_str(step, "blob_error", "?"));
}

static void show_traj(json_t *t, bool outputs)
{
    json_t *spec = json_object_get(t, "spec");
    json_t *tr = json_object_get(spec, "trajectory");
    char age[16];
    printf("id:        %s\n", crl_cli_str(t, "id", "?"));
    printf("spec:      %s, %s, checkpoint %s\n", crl_cli_str(spec, "backend", "?"),
           strcmp(crl_cli_str(spec, "backend", ""), "function") == 0
               ? crl_cli_str(spec, "runtime", "?")
               : crl_cli_str(spec, "image", "?"),
           crl_cli_str(tr, "checkpoint", "every-step"));
    printf("base:      %s\n", crl_cli_str(t, "base", "the image"));
    printf("created:   %s ago\n", age_of(t, age, sizeof(age)));
    printf("live in:   %s\n", crl_cli_str(t, "live_sandbox", "-"));
    printf("heads:    ");
    size_t i;
    json_t *h;
    json_array_foreach(json_object_get(t, "heads"), i, h) printf(" %lld", json_integer_value(h));
    printf(json_array_size(json_object_get(t, "heads")) ? "\n" : " -\n");
    printf("\n%-5s %-6s %-13s %-6s %-44s %s\n", "N", "PARENT", "KIND", "STATUS", "WHAT",
           "CHECKPOINT");
    json_t *step;
    json_array_foreach(json_object_get(t, "steps"), i, step)
    {
        struct crl_buf what;
        char ck[16];
        crl_buf_init(&what, CRL_BUF_UNBOUNDED);
        crl_cli_traj_what(step, &what);
        const char *w = what.len ? what.data : "";
        bool cut = what.len > 44;
        printf("%-5lld %-6lld %-13s %-6lld %-*.*s%s %s\n",
               json_integer_value(json_object_get(step, "n")),
               json_integer_value(json_object_get(step, "parent")), crl_cli_str(step, "kind", "?"),
               json_integer_value(json_object_get(step, "status")), cut ? 41 : 44, cut ? 41 : 44, w,
               cut ? "..." : "", crl_cli_traj_ckpt(step, ck, sizeof(ck)));
        crl_buf_free(&what);
        if (outputs)
            show_outputs(step);
    }
}

static int cmd_show(int argc, char **argv)
{
    enum { OPT_JSON = CRL_CLI_OPT_OTHER, OPT_OUTPUTS };
    static const struct option opts[] = {{"json", no_argument, 0, OPT_JSON},
                                         {"outputs", no_argument, 0, OPT_OUTPUTS},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool as_json = false, outputs = false;
    int c, rc;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: as_json = true; break;
        case OPT_OUTPUTS: outputs = true; break;
        case 'h': return crl_cli_help(help_show);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    const char *id;
    if ((rc = crl_cli_traj_one_id(argc, argv, &id)) >= 0)
        return rc;
    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *out = NULL;
    char path[200];
    snprintf(path, sizeof(path), "/v1/trajectories/%s%s", id, outputs ? "?outputs=1" : "");
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_request(cl, "GET", path, NULL, &out, NULL, &err) < 0)
        return crl_cli_fail(&err);
    if (as_json)
        crl_cli_print_json(out);
    else
        show_traj(out, outputs);
    return 0;
}

/* ---- export, rm ---- */

static int cmd_export(int argc, char **argv)
{
    int rc = crl_cli_no_flags(argc, argv, help_export);
    if (rc >= 0)
        return rc;
    const char *id;
    if ((rc = crl_cli_traj_one_id(argc, argv, &id)) >= 0)
        return rc;
    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    char path[200];
    snprintf(path, sizeof(path), "/v1/trajectories/%s/steps", id);
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_download(cl, path, STDOUT_FILENO, &err) < 0)
        return crl_cli_fail(&err);
    return 0;
}

static int cmd_rm(int argc, char **argv)
{
    int rc = crl_cli_no_flags(argc, argv, help_rm);
    if (rc >= 0)
        return rc;
    if (optind == argc)
        return crl_cli_usage(argv[0], "needs at least one trajectory id");
    for (int i = optind; i < argc; i++)
        if ((rc = id_arg(argv[0], argv[i])) >= 0)
            return rc;
    return crl_cli_delete_each("/v1/trajectories", argv + optind, argc - optind);
}

/* ---- gc ---- */

static unsigned long long count(json_t *out, const char *key)
{
    return (unsigned long long)json_integer_value(json_object_get(out, key));
}

static void show_gc(json_t *out)
{
    char freed[32];
    crl_cli_bytes((double)count(out, "bytes_removed"), freed, sizeof(freed));
    printf("removed %llu blobs, freed %s; kept %llu in use and %llu younger than %g s",
           count(out, "blobs_removed"), freed, count(out, "blobs_kept"), count(out, "young_kept"),
           json_number_value(json_object_get(out, "grace_s")));
    if (count(out, "tmp_removed"))
        printf("; %llu stale temporary files removed", count(out, "tmp_removed"));
    /* referred to and not in the store: a trajectory that cannot be
     * restored past the step that refers to it */
    if (count(out, "missing"))
        printf("; %llu referenced blobs missing", count(out, "missing"));
    printf("\n");
}

static int cmd_gc(int argc, char **argv)
{
    enum { OPT_JSON = CRL_CLI_OPT_OTHER, OPT_GRACE };
    static const struct option opts[] = {{"json", no_argument, 0, OPT_JSON},
                                         {"grace-s", required_argument, 0, OPT_GRACE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    bool as_json = false;
    double grace = -1; /* corrald's default */
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: as_json = true; break;
        case OPT_GRACE:
            if (crl_cli_parse_double("--grace-s", optarg, 0, 10.0 * 365 * 86400, &grace, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case 'h': return crl_cli_help(help_gc);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *body = grace >= 0 ? json_pack("{s:f}", "grace_s", grace) : NULL;
    json_auto_t *out = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_request(cl, "POST", "/v1/trajectories/gc", body, &out, NULL, &err) < 0)
        return crl_cli_fail(&err);
    if (as_json)
        crl_cli_print_json(out);
    else
        show_gc(out);
    return 0;
}

/* ---- dispatch ---- */

static const struct crl_cli_sub subs[] = {
    {"ls", cmd_ls},         {"list", cmd_ls}, {"show", cmd_show},
    {"export", cmd_export}, {"rm", cmd_rm},   {"replay", crl_cmd_traj_replay},
    {"gc", cmd_gc},
};

int crl_cmd_traj(int argc, char **argv)
{
    return crl_cli_dispatch(argc, argv, "traj", subs, CRL_ARRAY_SIZE(subs),
                            "ls, show, export, rm, replay, gc", help);
}
