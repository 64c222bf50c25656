/* Our terminal joined to a process of a sandbox: start one with a
 * terminal of its own and attach to it (corral sh, corral exec -t), or
 * attach to one that runs (corral attach).  The attach is an upgraded
 * connection (docs/api.md): our input's bytes go to the process, its
 * output's come to our stdout; our terminal is in raw mode meanwhile, so
 * Ctrl-C, Ctrl-Z and every key reach the program in the sandbox, and a
 * change of our window's size is passed on. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "cli.h"

static int process_path(char *buf, size_t cap, const char *id, int pid, const char *what)
{
    return snprintf(buf, cap, "/v1/sandboxes/%s/processes/%d%s", id, pid, what) < (int)cap ? 0 : -1;
}

/* Our window's size, into a request's "tty" (24x80 when we have none). */
json_t *crl_cli_tty_size(void)
{
    struct winsize ws = {0};
    if ((ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0 && ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0) ||
        !ws.ws_row || !ws.ws_col)
        ws = (struct winsize){.ws_row = 24, .ws_col = 80};
    return json_pack("{s:i, s:i}", "rows", ws.ws_row, "cols", ws.ws_col);
}

/* How the process ended, as a shell status (notes on stderr as exec's);
 * still running: we detached, and say how to come back. */
static int process_status(struct crl_client *cl, const char *id, int pid)
{
    char path[256];
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *p = NULL;
    process_path(path, sizeof(path), id, pid, "");
    if (crl_client_request(cl, "GET", path, NULL, &p, NULL, &err) < 0)
        return crl_cli_fail(&err);
    json_t *res = json_object_get(p, "result");
    if (!json_is_object(res)) {
        fprintf(stderr, "corral: detached from process %d, which runs on ('corral attach %s %d')\n",
                pid, id, pid);
        return 0;
    }
    int status = crl_cli_result_status(res, &err);
    return status < 0 ? crl_cli_fail(&err) : status;
}

static void resize(struct crl_client *cl, const char *id, int pid)
{
    char path[256];
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *size = crl_cli_tty_size();
    process_path(path, sizeof(path), id, pid, "/resize");
    crl_client_request(cl, "POST", path, size, NULL, NULL, &err); /* ended meanwhile: fine */
}

/* End of our input: the process's stdin ends too. */
static void close_stdin(struct crl_client *cl, const char *id, int pid)
{
    char path[256];
    struct crl_err err = CRL_ERR_INIT;
    process_path(path, sizeof(path), id, pid, "/stdin?eof=true");
    crl_client_request(cl, "POST", path, NULL, NULL, NULL, &err);
}

int crl_cli_attach(struct crl_client *cl, const char *id, int pid, bool raw, const char *offset)
{
    char path[256];
    struct crl_err err = CRL_ERR_INIT;
    char what[64];
    snprintf(what, sizeof(what), "/attach%s%s", offset ? "?offset=" : "", offset ? offset : "");
    if (process_path(path, sizeof(path), id, pid, what) < 0)
        return crl_cli_failf("sandbox id too long");
    int sock = crl_client_tunnel(cl, path, "corral-attach", &err);
    if (sock < 0)
        return crl_cli_fail(&err);
    struct termios saved;
    raw = raw && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0;
    if (raw) {
        struct termios t = saved;
        cfmakeraw(&t);
        tcsetattr(STDIN_FILENO, TCSANOW, &t);
        resize(cl, id, pid); /* ours may have changed since it started */
    }
    sigset_t winch;
    sigemptyset(&winch);
    sigaddset(&winch, SIGWINCH);
    sigprocmask(SIG_BLOCK, &winch, NULL);
    int sfd = raw ? signalfd(-1, &winch, SFD_CLOEXEC | SFD_NONBLOCK) : -1;
    bool in_open = true;
    char buf[16384];
    while (!crl_cli_interrupted) {
        struct pollfd pf[3] = {{.fd = sock, .events = POLLIN},
                               {.fd = in_open ? STDIN_FILENO : -1, .events = POLLIN},
                               {.fd = sfd, .events = POLLIN}};
        if (poll(pf, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[2].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) > 0)
                ;
            resize(cl, id, pid);
        }
        if (pf[1].revents) {
            ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
            if (n > 0 && crl_write_full(sock, buf, (size_t)n) < 0)
                break;
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                in_open = false;
                close_stdin(cl, id, pid);
            }
        }
        if (pf[0].revents) {
            ssize_t n = read(sock, buf, sizeof(buf));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break; /* it ended, and all its output is here */
            if (crl_write_full(STDOUT_FILENO, buf, (size_t)n) < 0)
                break;
        }
    }
    close(sock);
    if (sfd >= 0)
        close(sfd);
    sigprocmask(SIG_UNBLOCK, &winch, NULL);
    if (raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    return process_status(cl, id, pid);
}

int crl_cli_run_terminal(struct crl_client *cl, const char *id, json_t *req)
{
    char path[256];
    struct crl_err err = CRL_ERR_INIT;
    json_auto_t *p = NULL;
    json_object_del(req, "max_output_bytes"); /* an exec's; a process keeps a ring */
    json_object_set_new(req, "tty", crl_cli_tty_size());
    json_t *env = json_object_get(req, "env");
    const char *term = getenv("TERM");
    if (term && !json_object_get(env, "TERM")) {
        if (!env)
            json_object_set_new(req, "env", env = json_object());
        json_object_set_new(env, "TERM", json_string(term));
    }
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/processes", id);
    if (crl_client_request(cl, "POST", path, req, &p, NULL, &err) < 0)
        return crl_cli_fail(&err);
    int pid = (int)json_integer_value(json_object_get(p, "pid"));
    return crl_cli_attach(cl, id, pid, true, NULL);
}
