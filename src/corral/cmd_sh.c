/* corral sh: a shell in a sandbox.  On a terminal, a terminal of its own
 * (terminal.c); else, or with --lines, a session: each line read runs in
 * one shell that keeps its working directory and environment between
 * lines, and Ctrl-C stops the running command, not the session. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/core/spec.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "cli.h"

static const char help[] =
    "usage: corral sh [OPTIONS] ID\n"
    "\n"
    "A shell in sandbox ID.  On a terminal it is a terminal of its own, as\n"
    "'docker exec -it' gives: bash if the image has it, else /bin/sh, with our\n"
    "TERM and window size; programs such as python3, vim, top and less work,\n"
    "Ctrl-C and Ctrl-Z reach the program in front, and corral exits with the\n"
    "shell's status.  It runs as a background process ('corral ps'): if we go\n"
    "(SIGHUP, SIGTERM) it runs on, and 'corral attach ID PID' comes back to it.\n"
    "\n"
    "Otherwise (or with --lines) each line read from stdin runs in one shell\n"
    "session that keeps its working directory and environment between lines,\n"
    "printing its output as it comes (the prompt is 'corral:ID$ ' on a\n"
    "terminal); end of input or 'exit' ends it, with the last command's status.\n"
    "\n"
    "  --env K=V           an environment variable (repeatable)\n"
    "  --cwd DIR           its starting directory\n"
    "  --user U            root, UID or UID:GID (default: the image's user)\n"
    "  --shell PATH        the shell (default: bash if there, else /bin/sh)\n"
    "  --lines             a line at a time, even on a terminal\n"
    "  --timeout S         --lines: kill each command after S seconds\n"
    "                      (default 300; 0: none)\n";

/* After Ctrl-C, corrald is still killing the command for a moment and
 * the session answers 409 (busy) meanwhile: the next line waits this long
 * for it, no longer (a command that ignores the kill holds it longer). */
#define CANCEL_WAIT_NS (5ull * 1000000000)

/* Is session `sid` alive (so a 409 means "wait": busy now, or it was a
 * moment ago, when it answered)? */
static bool session_alive(struct crl_client *cl, const char *id, const char *sid)
{
    char path[128];
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *out = NULL;
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", id);
    if (crl_client_request(cl, "GET", path, NULL, &out, NULL, &err) < 0)
        return false;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(out, "sessions"), i, s)
    {
        if (strcmp(crl_cli_str(s, "session_id", ""), sid) == 0)
            return json_is_true(json_object_get(s, "alive"));
    }
    return false;
}

/* Run one line in the session.  `after_cancel`: the previous command was
 * stopped by Ctrl-C, so a busy session is waited for, briefly. */
static int run_line(struct crl_client *cl, const char *id, const char *sid, json_t *req,
                    bool after_cancel, json_t **result, struct crl_err *err)
{
    unsigned long long deadline = crl_now_ns() + CANCEL_WAIT_NS;
    long pause_ms = 10;
    for (;;) {
        int rc = crl_client_session_run_stream(cl, id, sid, req, crl_cli_write_output, NULL, result,
                                               err);
        if (rc == 0 || !after_cancel || err->code != CRL_E_CONFLICT || crl_cli_interrupted ||
            crl_now_ns() > deadline || !session_alive(cl, id, sid))
            return rc;
        struct timespec ts = {0, pause_ms * 1000000};
        nanosleep(&ts, NULL); /* a signal cuts it short; the loop sees the flag */
        if (pause_ms < 200)
            pause_ms *= 2;
    }
}

int crl_cmd_sh(int argc, char **argv)
{
    enum { OPT_TIMEOUT = CRL_CLI_OPT_OTHER, OPT_ENV, OPT_CWD, OPT_USER, OPT_SHELL, OPT_LINES };
    static const struct option opts[] = {{"timeout", required_argument, 0, OPT_TIMEOUT},
                                         {"lines", no_argument, 0, OPT_LINES},
                                         {"env", required_argument, 0, OPT_ENV},
                                         {"cwd", required_argument, 0, OPT_CWD},
                                         {"user", required_argument, 0, OPT_USER},
                                         {"shell", required_argument, 0, OPT_SHELL},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *open_req = json_object();
    json_auto_t *env = json_object();
    double timeout_s = -1;
    bool lines = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_TIMEOUT:
            if (crl_cli_parse_double("--timeout", optarg, 0, 86400, &timeout_s, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case OPT_ENV:
            if (crl_cli_parse_kv("--env", optarg, env, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            break;
        case OPT_CWD: json_object_set_new(open_req, "cwd", json_string(optarg)); break;
        case OPT_USER: json_object_set_new(open_req, "user", json_string(optarg)); break;
        case OPT_SHELL: json_object_set_new(open_req, "shell", json_string(optarg)); break;
        case OPT_LINES: lines = true; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind == argc)
        return crl_cli_usage(argv[0], "needs a sandbox id");
    if (optind + 1 < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind + 1]);
    const char *id = argv[optind];
    if (!crl_client_id_ok(id))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", id);
    if (json_object_size(env))
        json_object_set(open_req, "env", env);

    cleanup_client struct crl_client *cl = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (!lines && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) {
        /* A terminal: the shell is a process with one of its own. */
        json_t *shell = json_object_get(open_req, "shell");
        json_object_set_new(open_req, "cmd",
                            shell ? json_pack("[O]", shell)
                                  : json_string("if [ -x /bin/bash ]; then exec /bin/bash; fi; "
                                                "exec /bin/sh"));
        json_object_del(open_req, "shell");
        crl_cli_catch_signals(NULL);
        return crl_cli_run_terminal(cl, id, open_req);
    }
    /* Caught before the open, not cancelling it, so a session that opens
     * is always closed. */
    crl_cli_catch_signals(NULL);
    char sid[64];
    if (crl_client_session_open(cl, id, open_req, sid, sizeof(sid), &err) < 0)
        return crl_cli_interrupted ? 128 + crl_cli_interrupted : crl_cli_fail(&err);
    crl_client_set_cancel(cl, &crl_cli_interrupted);

    bool tty = isatty(STDIN_FILENO);
    bool alive = true;
    bool after_cancel = false;
    int status = 0;
    cleanup_free char *line = NULL;
    size_t cap = 0;
    while (alive && !crl_cli_interrupted) {
        if (tty) {
            fprintf(stderr, "corral:%s$ ", id);
            fflush(stderr);
        }
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0 && errno == EINTR && crl_cli_interrupted == SIGINT) {
            clearerr(stdin); /* Ctrl-C at the prompt: a fresh prompt */
            crl_cli_interrupted = 0;
            if (tty)
                fputc('\n', stderr);
            continue;
        }
        if (n < 0)
            break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (strspn(line, " \t") == (size_t)n)
            continue;
        json_auto_t *req = json_pack("{s:s}", "cmd", line);
        json_auto_t *result = NULL;
        if (!req) {
            fprintf(stderr, "corral: the line is not valid UTF-8\n");
            status = CRL_EXIT_FAIL;
            continue;
        }
        if (timeout_s >= 0)
            json_object_set_new(req, "timeout_s", json_real(timeout_s));
        json_object_set_new(req, "max_output_bytes", json_integer(CRL_EXEC_MAX_OUTPUT));
        int rc = run_line(cl, id, sid, req, after_cancel, &result, &err);
        after_cancel = false;
        if (rc < 0) {
            if (crl_cli_interrupted == SIGINT) { /* the command is killed; the session goes on */
                status = 128 + SIGINT;
                crl_cli_interrupted = 0;
                after_cancel = true;
                fputc('\n', stderr);
                continue;
            }
            if (crl_cli_interrupted)
                break;
            crl_cli_fail(&err);
            status = CRL_EXIT_FAIL;
            /* A session or sandbox that is gone will not come back. */
            if (err.code == CRL_E_NOT_FOUND || err.code == CRL_E_UNAVAILABLE)
                return status;
            continue;
        }
        status = crl_cli_result_status(result, &err);
        if (status < 0)
            status = crl_cli_fail(&err);
        alive = !json_is_false(json_object_get(result, "session_alive"));
    }
    int ended_by = crl_cli_interrupted; /* a signal other than SIGINT ends the session */
    if (tty && alive)
        fputc('\n', stderr);
    /* An ended session stays listed until it is closed; SIGTERM, SIGHUP
     * or a closed stdout end it too, not just end of input. */
    crl_client_set_cancel(cl, NULL);
    if (crl_client_session_close(cl, id, sid, &err) < 0 && err.code != CRL_E_NOT_FOUND)
        crl_cli_fail(&err);
    return ended_by ? 128 + ended_by : status;
}
