#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/client/client.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../corral/cli.h"

#define DAEMON_READY_S 30.0
#define DAEMON_STOP_S 30.0

int crl_bench_daemon_log_tail(const struct crl_bench_daemon *d, char *buf, size_t cap)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/corrald.log", d->dir);
    cleanup_close int fd = crl_openat(AT_FDCWD, path, O_RDONLY, 0);
    buf[0] = 0;
    if (fd < 0)
        return -1;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)cap - 1 ? end - (off_t)cap + 1 : 0;
    ssize_t n = pread(fd, buf, cap - 1, from);
    buf[n > 0 ? n : 0] = 0;
    return 0;
}

void crl_bench_daemon_stop(struct crl_bench_daemon *d)
{
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        int status;
        unsigned long long deadline = crl_now_ns() + (unsigned long long)(DAEMON_STOP_S * 1e9);
        while (waitpid(d->pid, &status, WNOHANG) == 0) {
            if (crl_now_ns() > deadline) {
                fprintf(stderr, "corral: bench: corrald did not stop in %.0f s; killing it\n",
                        DAEMON_STOP_S);
                kill(d->pid, SIGKILL);
                waitpid(d->pid, &status, 0);
                break;
            }
            usleep(20000);
        }
        d->pid = 0;
    }
    if (d->dir[0] && crl_rm_rf_at(AT_FDCWD, d->dir) < 0)
        fprintf(stderr, "corral: bench: could not remove %s: %s\n", d->dir, strerror(errno));
    d->dir[0] = 0;
}

int crl_bench_daemon_start(struct crl_bench_daemon *d, struct crl_err *err)
{
    char self[PATH_MAX], corrald[PATH_MAX + 16], state[128], sock[128], log[128], cgparent[96];
    const char *bindir = d->bindir;
    if (!bindir) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n < 0)
            return crl_err_sys(err, errno, "readlink /proc/self/exe");
        self[n] = 0;
        bindir = dirname(self);
    }
    snprintf(corrald, sizeof(corrald), "%s/corrald", bindir);
    if (access(corrald, X_OK) < 0)
        return crl_err_sys(err, errno, "no corrald in %s", bindir);
    snprintf(d->images_from, sizeof(d->images_from), "%s/images", bindir);
    struct stat st;
    if (stat(d->images_from, &st) < 0 || !S_ISDIR(st.st_mode))
        d->images_from[0] = 0;
    snprintf(d->dir, sizeof(d->dir), "/tmp/corral-bench.XXXXXX");
    if (!mkdtemp(d->dir)) {
        d->dir[0] = 0;
        return crl_err_sys(err, errno, "creating a temporary directory");
    }
    /* mkdtemp makes it 0700; sandbox ids must traverse it to their layers. */
    if (chmod(d->dir, 0711) < 0)
        return crl_err_sys(err, errno, "chmod %s", d->dir);
    snprintf(state, sizeof(state), "%s/state", d->dir);
    snprintf(sock, sizeof(sock), "%s/corrald.sock", d->dir);
    snprintf(log, sizeof(log), "%s/corrald.log", d->dir);
    /* Its own cgroup parent, so it never touches another corrald's. */
    snprintf(cgparent, sizeof(cgparent), "corral-bench-%d%s%s", (int)getpid(), d->tag ? "-" : "",
             d->tag ? d->tag : "");
    snprintf(d->url, sizeof(d->url), "unix://%s", sock);
    char *argv[16];
    int a = 0;
    argv[a++] = corrald;
    argv[a++] = "--state";
    argv[a++] = state;
    argv[a++] = "--socket";
    argv[a++] = sock;
    argv[a++] = "--cgroup-parent";
    argv[a++] = cgparent;
    argv[a++] = "--log-level";
    argv[a++] = "warn";
    if (d->images_from[0]) {
        argv[a++] = "--images-from";
        argv[a++] = d->images_from;
    }
    argv[a] = NULL;
    int logfd = crl_openat(AT_FDCWD, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (logfd < 0)
        return crl_err_sys(err, errno, "%s", log);
    fflush(NULL);
    d->pid = fork();
    if (d->pid < 0) {
        close(logfd);
        return crl_err_sys(err, errno, "fork");
    }
    if (d->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the bench */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(logfd, STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        execv(corrald, argv);
        _exit(127);
    }
    close(logfd);

    cleanup_client struct crl_client *c = NULL;
    if (crl_client_open(d->url, "", &c, err) < 0)
        return -1;
    unsigned long long deadline = crl_now_ns() + (unsigned long long)(DAEMON_READY_S * 1e9);
    for (;;) {
        struct crl_err e = CRL_ERR_INIT;
        int status;
        if (crl_client_request(c, "GET", "/healthz", NULL, NULL, NULL, &e) == 0)
            return 0;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            char tail[300];
            d->pid = 0;
            crl_bench_daemon_log_tail(d, tail, sizeof(tail));
            return crl_err_set(err, CRL_E_UNAVAILABLE, "corrald exited at start: %s", tail);
        }
        if (crl_now_ns() > deadline || crl_cli_interrupted)
            return crl_err_set(err, CRL_E_UNAVAILABLE, "corrald was not ready in %.0f s",
                               DAEMON_READY_S);
        usleep(20000);
    }
}
