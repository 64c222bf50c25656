/* lib/vmm/qmp: the QMP client against a QEMU played by the test over a
 * socketpair (greeting, capabilities first, answers matched to commands,
 * events, QEMU's errors, a descriptor passed, and every way a hostile
 * QEMU can break the connection), then against a real QEMU when one is
 * installed (qemu-system-x86_64 -M microvm -S: no guest runs). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/vmm/qmp.h"
#include "tap.h"

extern char **environ;

#define GREETING                                                                      \
    "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 1, \"minor\": 2, \"major\": 7}, " \
    "\"package\": \"\"}, \"capabilities\": [\"oob\"]}}\r\n"

struct seen {
    int ready, fails, events, replies;
    char fail_msg[256], event[64], reply_err[256];
    json_t *ret;
};

static void on_ready(struct crl_qmp *q, void *ctx)
{
    ((struct seen *)ctx)->ready++;
}

static void on_event(struct crl_qmp *q, const char *name, json_t *data, void *ctx)
{
    struct seen *s = ctx;
    s->events++;
    snprintf(s->event, sizeof(s->event), "%s", name);
}

static void on_fail(struct crl_qmp *q, const struct crl_err *err, void *ctx)
{
    struct seen *s = ctx;
    s->fails++;
    snprintf(s->fail_msg, sizeof(s->fail_msg), "%s", err->msg);
}

static const struct crl_qmp_ops ops = {on_ready, on_event, on_fail};

static void on_reply(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx)
{
    struct seen *s = ctx;
    s->replies++;
    json_decref(s->ret);
    s->ret = ret ? json_incref(ret) : NULL;
    snprintf(s->reply_err, sizeof(s->reply_err), "%s", err ? err->msg : "");
}

static void spin(struct crl_loop *loop)
{
    for (int i = 0; i < 5; i++)
        crl_loop_once(loop, 20);
}

static void put(int fd, const char *text)
{
    if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        bail_out("write to the client");
}

/* One line the client sent, or "" if none is waiting. */
static const char *line(int fd)
{
    static char buf[4096];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) != 1)
        return "";
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

struct pair {
    struct crl_loop *loop;
    struct crl_qmp *q;
    int srv;
    struct seen seen;
};

static void start(struct pair *p, bool greet_and_ready)
{
    memset(p, 0, sizeof(*p));
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        bail_out("socketpair");
    p->loop = crl_loop_new();
    p->srv = sv[1];
    struct crl_err e = CRL_ERR_INIT;
    if (crl_qmp_open(p->loop, sv[0], &ops, &p->seen, &p->q, &e) < 0)
        bail_out(e.msg);
    if (greet_and_ready) {
        put(p->srv, GREETING);
        spin(p->loop);
        line(p->srv);
        put(p->srv, "{\"return\": {}, \"id\": 0}\r\n");
        spin(p->loop);
    }
}

static void stop(struct pair *p)
{
    crl_qmp_close(p->q);
    close(p->srv);
    json_decref(p->seen.ret);
    crl_loop_free(p->loop);
}

static void test_protocol(void)
{
    struct pair p;
    struct crl_err e = CRL_ERR_INIT;
    start(&p, false);
    is_str(line(p.srv), "", "nothing is sent before QEMU's greeting");
    ok(crl_qmp_command(p.q, "query-status", NULL, -1, on_reply, &p.seen, &e) == 0,
       "a command before the client is ready is queued");
    put(p.srv, GREETING);
    spin(p.loop);
    is_str(crl_qmp_version(p.q), "7.2.1", "QEMU's version from its greeting");
    is_str(line(p.srv), "{\"execute\":\"qmp_capabilities\",\"id\":0}\n",
           "then qmp_capabilities, alone");
    ok(!crl_qmp_ready(p.q) && p.seen.ready == 0, "not ready until QEMU accepts it");
    put(p.srv, "{\"return\": {}, \"id\": 0}\r\n");
    spin(p.loop);
    ok(crl_qmp_ready(p.q) && p.seen.ready == 1, "ready once it did");
    is_str(line(p.srv), "{\"execute\":\"query-status\",\"id\":1}\n",
           "and the queued command goes out");
    put(p.srv, "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": \"STOP\"}\r\n"
               "{\"return\": {\"status\": \"running\", \"running\": true}, \"id\": 1}\r\n");
    spin(p.loop);
    ok(p.seen.events == 1 && !strcmp(p.seen.event, "STOP"), "an event is passed on by name");
    ok(p.seen.replies == 1 && p.seen.ret &&
           !strcmp(json_string_value(json_object_get(p.seen.ret, "status")), "running"),
       "the answer goes to its command");

    crl_qmp_command(p.q, "bogus", json_pack("{s:i}", "x", 1), -1, on_reply, &p.seen, &e);
    is_str(line(p.srv), "{\"execute\":\"bogus\",\"id\":2,\"arguments\":{\"x\":1}}\n",
           "arguments go with it");
    put(p.srv, "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command bogus has "
               "not been found\"}, \"id\": 2}\r\n");
    spin(p.loop);
    like(p.seen.reply_err, "QMP bogus: CommandNotFound: The command bogus",
         "QEMU's error names the command, its class and description");

    int pfd[2];
    if (pipe(pfd) < 0)
        bail_out("pipe");
    crl_qmp_command(p.q, "getfd", json_pack("{s:s}", "fdname", "mig"), pfd[1], on_reply, &p.seen,
                    &e);
    char buf[256], ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {buf, sizeof(buf)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    ssize_t n = recvmsg(p.srv, &m, 0);
    struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&m) : NULL;
    int got = -1;
    if (cm && cm->cmsg_type == SCM_RIGHTS)
        memcpy(&got, CMSG_DATA(cm), sizeof(int));
    ok(got >= 0 && write(got, "x", 1) == 1 && read(pfd[0], buf, 1) == 1,
       "a descriptor goes with its command");
    close(got);
    close(pfd[0]);
    close(pfd[1]);
    put(p.srv, "{\"return\": {}, \"id\": 3}\r\n");
    spin(p.loop);
    is_int(p.seen.replies, 3, "every command answered once");
    is_int(p.seen.fails, 0, "and the connection stands");

    crl_qmp_command(p.q, "stop", NULL, -1, on_reply, &p.seen, &e);
    line(p.srv);
    stop(&p);
    ok(p.seen.replies == 4 && strstr(p.seen.reply_err, "closed") && p.seen.fails == 0,
       "close answers what waits with \"closed\", and says no failure");
}

/* A QEMU that says `text` after the client is ready: the connection fails
 * with a message holding `words`, and a waiting command hears of it. */
static void hostile(const char *text, size_t repeat, const char *words, const char *what)
{
    struct pair p;
    struct crl_err e = CRL_ERR_INIT;
    start(&p, true);
    crl_qmp_command(p.q, "query-status", NULL, -1, on_reply, &p.seen, &e);
    line(p.srv);
    for (size_t i = 0; i < repeat; i++) {
        struct pollfd pf = {.fd = p.srv, .events = POLLOUT};
        while (poll(&pf, 1, 0) != 1 && p.seen.fails == 0)
            crl_loop_once(p.loop, 10);
        if (p.seen.fails || send(p.srv, text, strlen(text), MSG_NOSIGNAL) < 0)
            break;
    }
    if (!*text)
        shutdown(p.srv, SHUT_WR);
    spin(p.loop);
    if (!ok(p.seen.fails == 1 && strstr(p.seen.fail_msg, words), "%s", what))
        diag("fails %d: %s", p.seen.fails, p.seen.fail_msg);
    ok(p.seen.replies == 1 && strstr(p.seen.reply_err, "query-status"),
       "  and the waiting command gets the error");
    ok(crl_qmp_command(p.q, "cont", NULL, -1, on_reply, &p.seen, &e) < 0 &&
           e.code == CRL_E_UNAVAILABLE,
       "  a later command is refused");
    stop(&p);
}

static void test_hostile(void)
{
    hostile("{\"return\": {}, \"id\": 7}\n", 1, "an answer to no command of ours",
            "an answer with another id");
    hostile("{\"no\": 1}\n", 1, "an answer to no command of ours", "neither return nor error");
    hostile("[1, 2]\n", 1, "not a JSON object", "a line that is not an object");
    hostile("{\"a\": 1, \"a\": 2}\n", 1, "not JSON", "duplicate keys");
    hostile("garbage\n", 1, "not JSON", "garbage");
    static char chunk[65537];
    memset(chunk, 'x', sizeof(chunk) - 1);
    hostile(chunk, 20, "over 1 MiB", "a line over 1 MiB, never ended");
    hostile("", 1, "closed the connection", "the end of the stream");

    struct pair p;
    start(&p, false);
    put(p.srv, "{\"return\": {}}\n");
    spin(p.loop);
    ok(p.seen.fails == 1 && strstr(p.seen.fail_msg, "greeting"), "a first line not a greeting");
    stop(&p);
}

/* ---- a real QEMU ---- */

static const char *qemu_path(void)
{
    static const char *const paths[] = {"/usr/bin/qemu-system-x86_64",
                                        "/usr/local/bin/qemu-system-x86_64"};
    for (size_t i = 0; i < 2; i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return NULL;
}

static void test_real_qemu(void)
{
    const char *qemu = qemu_path();
    if (!qemu) {
        skip(4, "qemu-system-x86_64 is not installed (make deps installs it)");
        return;
    }
    char dir[] = "/tmp/test_qmp.XXXXXX", sock[128], arg[160];
    if (!mkdtemp(dir))
        bail_out("mkdtemp");
    snprintf(sock, sizeof(sock), "%s/qmp.sock", dir);
    snprintf(arg, sizeof(arg), "unix:%s,server=on,wait=off", sock);
    char *argv[] = {(char *)qemu, "-M",       "microvm", "-nodefaults", "-no-user-config",
                    "-S",         "-display", "none",    "-accel",      "tcg",
                    "-qmp",       arg,        NULL};
    pid_t pid;
    if (posix_spawn(&pid, qemu, NULL, NULL, argv, environ) != 0)
        bail_out("posix_spawn qemu");
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    bool connected = false;
    for (int i = 0; i < 500 && !connected; i++) {
        connected = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        if (!connected)
            usleep(10000);
    }
    if (!ok(connected, "QEMU's QMP socket answers")) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return;
    }
    struct crl_loop *loop = crl_loop_new();
    struct seen seen = {0};
    struct crl_qmp *q;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_qmp_open(loop, fd, &ops, &seen, &q, &e) < 0)
        bail_out(e.msg);
    crl_qmp_command(q, "query-status", NULL, -1, on_reply, &seen, &e);
    for (int i = 0; i < 500 && seen.replies < 1 && !seen.fails; i++)
        crl_loop_once(loop, 10);
    ok(seen.ready == 1 && seen.ret &&
           !strcmp(json_string_value(json_object_get(seen.ret, "status")), "prelaunch"),
       "ready, and query-status says prelaunch (-S)");
    diag("QEMU %s", crl_qmp_version(q));
    crl_qmp_command(q, "quit", NULL, -1, on_reply, &seen, &e);
    for (int i = 0; i < 500 && !seen.fails; i++)
        crl_loop_once(loop, 10);
    ok(seen.replies == 2 && !seen.reply_err[0], "quit is answered");
    if (!ok(seen.fails == 1 && strstr(seen.fail_msg, "closed the connection"),
            "then QEMU's end is the connection's"))
        diag("fails %d: %s", seen.fails, seen.fail_msg);
    crl_qmp_close(q);
    json_decref(seen.ret);
    crl_loop_free(loop);
    int st;
    if (waitpid(pid, &st, 0) != pid)
        kill(pid, SIGKILL);
    unlink(sock);
    rmdir(dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    TAP_RUN(test_protocol, 10);
    TAP_RUN(test_hostile, 20);
    TAP_RUN(test_real_qemu, 30);
    return done_testing();
}
