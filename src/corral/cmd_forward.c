/* corral forward: a local TCP port whose connections reach a port of a
 * sandbox, each through a tunnel of its own to corrald (the port proxy's
 * "corral-tcp" upgrade), so the stream goes only through corrald and its
 * auth.  A child per connection pumps its bytes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli.h"

static const char forward_help[] =
    "usage: corral forward ID [ADDR:]LOCAL:REMOTE\n"
    "\n"
    "Listen on LOCAL (of ADDR, default 127.0.0.1; 0: a free port, printed) and\n"
    "pass each connection to port REMOTE of sandbox ID, through corrald, until\n"
    "either side closes.  Runs until interrupted.  A server in the sandbox may\n"
    "listen on its loopback.\n";

/* Bytes both ways between a and b until both have ended. */
static void pump(int a, int b)
{
    int fds[2] = {a, b};
    bool eof[2] = {false, false};
    char buf[64 * 1024];
    while (!eof[0] || !eof[1]) {
        struct pollfd p[2] = {{eof[0] ? -1 : a, POLLIN, 0}, {eof[1] ? -1 : b, POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            return;
        for (int i = 0; i < 2; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t n = read(fds[i], buf, sizeof(buf));
            if (n <= 0) {
                eof[i] = true;
                shutdown(fds[1 - i], SHUT_WR);
                continue;
            }
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(fds[1 - i], buf + off, (size_t)(n - off));
                if (w < 0)
                    return;
                off += w;
            }
        }
    }
}

static int parse_spec(const char *spec, char *addr, size_t cap, unsigned *local, unsigned *remote)
{
    const char *last = strrchr(spec, ':');
    if (!last)
        return -1;
    const char *mid = last;
    while (mid > spec && mid[-1] != ':')
        mid--;
    snprintf(addr, cap, "127.0.0.1");
    if (mid > spec) {
        if ((size_t)(mid - 1 - spec) >= cap)
            return -1;
        snprintf(addr, cap, "%.*s", (int)(mid - 1 - spec), spec);
    }
    char *end;
    unsigned long l = strtoul(mid, &end, 10);
    if (end != last || l > 65535)
        return -1;
    unsigned long r = strtoul(last + 1, &end, 10);
    if (*end || !last[1] || r == 0 || r > 65535)
        return -1;
    *local = (unsigned)l;
    *remote = (unsigned)r;
    return 0;
}

int crl_cmd_forward(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        return crl_cli_help(forward_help);
    if (argc != 3)
        return crl_cli_usage(argv[0], "needs a sandbox id and [ADDR:]LOCAL:REMOTE");
    const char *id = argv[1];
    if (!crl_client_id_ok(id))
        return crl_cli_usage(argv[0], "'%s' is not a sandbox id", id);
    char addr[64];
    unsigned local, remote;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (parse_spec(argv[2], addr, sizeof(addr), &local, &remote) < 0 ||
        inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return crl_cli_usage(argv[0], "'%s' is not [ADDR:]LOCAL:REMOTE (ports, an IPv4 ADDR)",
                             argv[2]);
    sa.sin_port = htons((uint16_t)local);
    cleanup_client struct crl_client *cl = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    char path[128];
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/ports/%u", id, remote);
    struct crl_err err = CRL_ERR_INIT;
    /* One tunnel first: a sandbox or port that is not there fails now. */
    int probe = crl_client_tunnel(cl, path, "corral-tcp", &err);
    if (probe < 0) {
        crl_err_prefix(&err, "%s", id);
        return crl_cli_fail(&err);
    }
    close(probe);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    socklen_t sl = sizeof(sa);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0) {
        crl_err_sys(&err, errno, "listening on %s:%u", addr, local);
        return crl_cli_fail(&err);
    }
    signal(SIGCHLD, SIG_IGN); /* the pumps reap themselves */
    printf("forwarding %s:%u to %s port %u\n", addr, ntohs(sa.sin_port), id, remote);
    fflush(stdout);
    for (;;) {
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR)
                continue;
            crl_err_sys(&err, errno, "accept");
            return crl_cli_fail(&err);
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(lfd);
            struct crl_err e = CRL_ERR_INIT;
            int t = crl_client_tunnel(cl, path, "corral-tcp", &e);
            if (t < 0) {
                fprintf(stderr, "corral forward: %s: %s\n", id, e.msg);
                _exit(1);
            }
            pump(c, t);
            _exit(0);
        }
        close(c);
    }
}
