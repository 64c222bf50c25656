/* corral call: call a registered function with JSON arguments and print
 * its JSON result.  corral functions: list the registered functions. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/functions/functions.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/cleanup.h"
#include "cli.h"

static const char call_help[] =
    "usage: corral call [--json] NAME [JSON|-]\n"
    "\n"
    "Call the registered function NAME (see 'corral functions') with JSON\n"
    "arguments: the argument, or stdin with '-'; none means {}.  Prints the\n"
    "result as JSON; what the function wrote to stderr goes to ours.  When the\n"
    "call fails (it exits non-zero, is killed for its time, memory or output,\n"
    "or its output is not JSON), prints why and its stderr, and exits 1.\n"
    "Arguments of at most 1 MiB.  Ctrl-C kills the call.\n"
    "\n"
    "  --json              print corrald's whole answer\n";

static const char functions_help[] =
    "usage: corral functions [--json]\n"
    "\n"
    "List the functions corrald has registered (the files of its\n"
    "STATE/functions directory), and the definitions it could not\n"
    "load, with why.\n"
    "\n"
    "  --json              print corrald's answer as JSON\n";

/* stdin to its end, at most `max` bytes. */
static int read_stdin(struct crl_buf *b, size_t max, struct crl_err *err)
{
    char chunk[65536];
    for (;;) {
        ssize_t n = read(0, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR && !crl_cli_interrupted)
            continue;
        if (n < 0)
            return crl_err_sys(err, errno, "reading the arguments from stdin");
        if (n == 0)
            return 0;
        if (b->len + (size_t)n > max)
            return crl_err_set(err, CRL_E_TOO_LARGE, "the arguments are larger than %zu bytes",
                               max);
        if (crl_buf_append(b, chunk, (size_t)n) < 0)
            return crl_err_sys(err, ENOMEM, "reading the arguments from stdin");
    }
}

static void print_value(json_t *v, FILE *f)
{
    json_dumpf(v, f, JSON_INDENT(2) | JSON_ENCODE_ANY);
    fputc('\n', f);
}

int crl_cmd_call(int argc, char **argv)
{
    enum { OPT_JSON = CRL_CLI_OPT_OTHER };
    static const struct option opts[] = {
        {"json", no_argument, 0, OPT_JSON}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    bool as_json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_JSON: as_json = true; break;
        case 'h': return crl_cli_help(call_help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind == argc)
        return crl_cli_usage(argv[0], "needs the name of a function");
    const char *name = argv[optind++];
    const char *arg = optind < argc ? argv[optind++] : NULL;
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s' (the arguments are one JSON value)",
                             argv[optind]);
    if (!crl_function_name_ok(name))
        return crl_cli_usage(argv[0], "'%s' is not a function name (1-64 of [a-z0-9_-])", name);

    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    crl_cli_catch_signals(cl);
    struct crl_buf body;
    crl_buf_init(&body, CRL_BUF_UNBOUNDED);
    if (arg && strcmp(arg, "-") == 0) {
        if (read_stdin(&body, CRL_FUNCTION_MAX_ARGS, &err) < 0) {
            crl_buf_free(&body);
            return crl_cli_interrupted ? 128 + crl_cli_interrupted : crl_cli_fail(&err);
        }
    } else {
        crl_buf_append(&body, arg ? arg : "{}", strlen(arg ? arg : "{}"));
    }
    /* Checked here, so that a typo is a usage error and not a round trip. */
    json_error_t je;
    json_auto_t *args =
        body.len ? json_loadb(body.data, body.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je) : NULL;
    if (body.len && !args) {
        crl_buf_free(&body);
        return crl_cli_usage(argv[0], "the arguments are not JSON: %s at line %d column %d",
                             je.text, je.line, je.column);
    }

    char path[128];
    snprintf(path, sizeof(path), "/v1/functions/%s/call", name);
    struct crl_client_mem src = {.data = body.data ? body.data : "", .len = body.len};
    json_auto_t *answer = NULL;
    int rc = crl_client_upload(cl, "POST", path, crl_client_mem_source, &src, (long long)body.len,
                               "application/json", &answer, &err);
    crl_buf_free(&body);
    if (rc < 0) /* a hang-up on Ctrl-C: corrald kills the call */
        return crl_cli_interrupted ? 128 + crl_cli_interrupted : crl_cli_fail(&err);
    if (!json_is_object(answer))
        return crl_cli_failf("call %s: corrald's answer is not a JSON object", name);
    if (as_json) {
        print_value(answer, stdout);
        return json_is_true(json_object_get(answer, "ok")) ? 0 : CRL_EXIT_FAIL;
    }
    const char *fstderr = crl_cli_str(answer, "stderr", "");
    fputs(fstderr, stderr);
    if (json_is_true(json_object_get(answer, "ok"))) {
        print_value(json_object_get(answer, "result"), stdout);
        return 0;
    }
    return crl_cli_failf("call %s failed (%s): %s", name, crl_cli_str(answer, "reason", "?"),
                         crl_cli_str(answer, "error", "no reason given"));
}

static void show(json_t *answer)
{
    json_t *list = json_object_get(answer, "functions");
    size_t i;
    json_t *fn;
    printf("%-24s %-8s %s\n", "NAME", "RUNTIME", "DESCRIPTION");
    json_array_foreach(list, i, fn)
    {
        const char *error = crl_cli_str(fn, "error", NULL);
        if (error)
            printf("%-24s %-8s error: %s\n", crl_cli_str(fn, "name", "?"), "-", error);
        else
            printf("%-24s %-8s %s\n", crl_cli_str(fn, "name", "?"), crl_cli_str(fn, "runtime", "?"),
                   crl_cli_str(fn, "description", ""));
    }
}

int crl_cmd_functions(int argc, char **argv)
{
    bool as_json;
    int rc = crl_cli_read_flags(argc, argv, functions_help, 0, NULL, &as_json, NULL);
    return rc >= 0 ? rc : crl_cli_show("/v1/functions", as_json, show);
}
