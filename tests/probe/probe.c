/* corral-probe: a tiny static program the isolation tests copy into a
 * sandbox.  Each check attempts one thing and exits with the errno it got
 * (0: it worked), as bubblewrap's test helpers do, so a test asserts
 * `returncode == errno.EPERM`.  Checks that report values print them. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int result(long r)
{
    return r < 0 ? errno : 0;
}

/* What a debugger does to a process it started: attach, stop it, read its
 * memory, let it go. */
static int ptrace_child(void)
{
    static volatile long marker = 0x5eed;
    pid_t kid = fork();
    if (kid < 0)
        return errno;
    if (kid == 0) {
        for (;;)
            pause();
    }
    int err = 0, status;
    if (ptrace(PTRACE_ATTACH, kid, 0, 0) < 0 || waitpid(kid, &status, 0) != kid)
        err = errno;
    else if (!WIFSTOPPED(status))
        err = ECHILD;
    if (!err) {
        errno = 0;
        long word = ptrace(PTRACE_PEEKDATA, kid, (void *)&marker, 0);
        if (errno)
            err = errno;
        else if (word != marker)
            err = EIO;
        else if (ptrace(PTRACE_DETACH, kid, 0, 0) < 0)
            err = errno;
    }
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    if (!err)
        puts("traced");
    return err;
}

static int usage(void)
{
    fputs("usage: corral-probe CHECK [ARG...]\n"
          "  open PATH | write PATH | kill PID | mount | umount PATH | unshare-user | unshare-net\n"
          "  clone-newns | setns | bpf | keyctl | userfaultfd | perf | kexec | init-module\n"
          "  io-uring | ptrace PID | mknod | reboot | swapon | settime | net-connect\n"
          "  sysrq | read-kcore | uid | caps | nnp | fds | forks N | alloc-mb N | seccomp\n"
          "  ids | prctl-nnp | prctl-seccomp | open-fds | socket-inet | socketpair\n"
          "  tcp-connect PORT | unix-connect PATH | abstract-connect NAME | clocks\n"
          "  ptrace-child | signal PID SIG | pidfd-getfd PID FD\n",
          stderr);
    return 100;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *c = argv[1];
    const char *arg = argc > 2 ? argv[2] : NULL;
    if (!strcmp(c, "open") && arg)
        return result(open(arg, O_RDONLY));
    if (!strcmp(c, "write") && arg)
        return result(open(arg, O_WRONLY | O_CREAT | O_TRUNC, 0644));
    if (!strcmp(c, "kill") && arg)
        return result(kill((pid_t)strtol(arg, NULL, 10), 0));
    if (!strcmp(c, "signal") && argc > 3)
        return result(kill((pid_t)strtol(arg, NULL, 10), (int)strtol(argv[3], NULL, 10)));
    if (!strcmp(c, "pidfd-getfd") && argc > 3) {
        long pidfd = syscall(SYS_pidfd_open, (pid_t)strtol(arg, NULL, 10), 0);
        if (pidfd < 0)
            return errno;
        return result(syscall(SYS_pidfd_getfd, pidfd, (int)strtol(argv[3], NULL, 10), 0));
    }
    if (!strcmp(c, "mount"))
        return result(mount("none", "/tmp", "tmpfs", 0, NULL));
    if (!strcmp(c, "umount") && arg)
        return result(umount2(arg, MNT_DETACH));
    if (!strcmp(c, "unshare-user"))
        return result(unshare(CLONE_NEWUSER));
    if (!strcmp(c, "unshare-net"))
        return result(unshare(CLONE_NEWNET));
    if (!strcmp(c, "clone-newns")) {
        long r = syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0);
        if (r == 0)
            _exit(0);
        if (r > 0)
            waitpid((pid_t)r, NULL, 0);
        return result(r);
    }
    if (!strcmp(c, "setns"))
        return result(setns(0, 0));
    if (!strcmp(c, "bpf")) {
        union bpf_attr attr;
        memset(&attr, 0, sizeof(attr));
        attr.map_type = BPF_MAP_TYPE_ARRAY;
        attr.key_size = 4;
        attr.value_size = 4;
        attr.max_entries = 1;
        return result(syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr)));
    }
    if (!strcmp(c, "keyctl"))
        return result(syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0));
    if (!strcmp(c, "userfaultfd"))
        return result(syscall(SYS_userfaultfd, 0));
    if (!strcmp(c, "perf")) {
        struct perf_event_attr pe;
        memset(&pe, 0, sizeof(pe));
        pe.type = PERF_TYPE_SOFTWARE;
        pe.size = sizeof(pe);
        pe.config = PERF_COUNT_SW_CPU_CLOCK;
        return result(syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
    }
    if (!strcmp(c, "kexec"))
        return result(syscall(SYS_kexec_load, 0, 0, NULL, 0));
    if (!strcmp(c, "init-module"))
        return result(syscall(SYS_init_module, NULL, 0, ""));
    if (!strcmp(c, "io-uring")) {
        char params[120];
        memset(params, 0, sizeof(params));
        return result(syscall(SYS_io_uring_setup, 1, params));
    }
    if (!strcmp(c, "ptrace") && arg)
        return result(ptrace(PTRACE_ATTACH, (pid_t)strtol(arg, NULL, 10), 0, 0));
    if (!strcmp(c, "mknod"))
        return result(mknod("/tmp/probe-null", S_IFCHR | 0666, makedev(1, 3)));
    if (!strcmp(c, "reboot"))
        return result(syscall(SYS_reboot, 0xfee1dead, 0x28121969, 0x4321fedc, NULL));
    if (!strcmp(c, "swapon"))
        return result(syscall(SYS_swapon, "/tmp/none", 0));
    if (!strcmp(c, "settime")) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return result(clock_settime(CLOCK_REALTIME, &ts));
    }
    if (!strcmp(c, "net-connect")) {
        /* A documentation address (TEST-NET-1): never routable, never sent. */
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0)
            return errno;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(9)};
        sa.sin_addr.s_addr = htonl(0xC0000201); /* 192.0.2.1 */
        return result(connect(s, (struct sockaddr *)&sa, sizeof(sa)));
    }
    if (!strcmp(c, "sysrq")) {
        int fd = open("/proc/sysrq-trigger", O_WRONLY);
        return result(fd);
    }
    if (!strcmp(c, "read-kcore")) {
        int fd = open("/proc/kcore", O_RDONLY);
        if (fd < 0)
            return errno;
        char b[16];
        ssize_t n = read(fd, b, sizeof(b));
        printf("%zd\n", n);
        return n < 0 ? errno : 0;
    }
    if (!strcmp(c, "uid")) {
        printf("%u %u\n", getuid(), getgid());
        return 0;
    }
    if (!strcmp(c, "caps") || !strcmp(c, "seccomp") || !strcmp(c, "nnp")) {
        const char *key = !strcmp(c, "caps")      ? "CapEff:"
                          : !strcmp(c, "seccomp") ? "Seccomp:"
                                                  : "NoNewPrivs:";
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        while (f && fgets(line, sizeof(line), f))
            if (!strncmp(line, key, strlen(key)))
                fputs(line + strlen(key) + 1, stdout);
        return f ? 0 : errno;
    }
    if (!strcmp(c, "fds")) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        while (d && (de = readdir(d)))
            if (de->d_name[0] != '.' && strtol(de->d_name, NULL, 10) != dirfd(d))
                printf("%s\n", de->d_name);
        return d ? 0 : errno;
    }
    if (!strcmp(c, "forks") && arg) {
        long want = strtol(arg, NULL, 10), n = 0;
        int err = 0;
        pid_t *kids = calloc((size_t)want + 1, sizeof(pid_t));
        for (; kids && n < want; n++) {
            pid_t p = fork();
            if (p == 0) {
                pause();
                _exit(0);
            }
            if (p < 0) {
                err = errno;
                break;
            }
            kids[n] = p;
        }
        printf("%ld\n", n);
        for (long i = 0; i < n; i++) {
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
        }
        return err;
    }
    if (!strcmp(c, "alloc-mb") && arg) {
        long mb = strtol(arg, NULL, 10);
        for (long i = 0; i < mb; i++) {
            char *p =
                mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                return errno;
            memset(p, 1, 1 << 20);
        }
        printf("%ld\n", mb);
        return 0;
    }
    /* Without /proc (the function backend's Landlock hides it): the same
     * facts from the syscalls themselves. */
    if (!strcmp(c, "ids")) {
        printf("%u %u %u %u\n", getuid(), geteuid(), getgid(), getegid());
        return 0;
    }
    if (!strcmp(c, "prctl-nnp") || !strcmp(c, "prctl-seccomp")) {
        int r = prctl(!strcmp(c, "prctl-nnp") ? PR_GET_NO_NEW_PRIVS : PR_GET_SECCOMP, 0, 0, 0, 0);
        if (r < 0)
            return errno;
        printf("%d\n", r);
        return 0;
    }
    if (!strcmp(c, "open-fds")) {
        for (int fd = 0; fd < 65536; fd++)
            if (fcntl(fd, F_GETFD) >= 0)
                printf("%d\n", fd);
        return 0;
    }
    if (!strcmp(c, "socket-inet"))
        return result(socket(AF_INET, SOCK_STREAM, 0));
    if (!strcmp(c, "socketpair")) {
        int sv[2];
        return result(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
    }
    if (!strcmp(c, "tcp-connect") && arg) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0)
            return errno;
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons((uint16_t)strtol(arg, NULL, 10))};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return result(connect(s, (struct sockaddr *)&sa, sizeof(sa)));
    }
    if ((!strcmp(c, "unix-connect") || !strcmp(c, "abstract-connect")) && arg) {
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        if (s < 0)
            return errno;
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        size_t n = strlen(arg);
        if (n + 1 >= sizeof(sa.sun_path))
            return ENAMETOOLONG;
        int abstract = !strcmp(c, "abstract-connect");
        memcpy(sa.sun_path + abstract, arg, n); /* abstract: a leading NUL */
        socklen_t len =
            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + abstract + n + (abstract ? 0 : 1));
        return result(connect(s, (struct sockaddr *)&sa, len));
    }
    if (!strcmp(c, "clocks")) {
        struct timespec m, b;
        if (clock_gettime(CLOCK_MONOTONIC, &m) < 0 || clock_gettime(CLOCK_BOOTTIME, &b) < 0)
            return errno;
        printf("%lld.%09ld %lld.%09ld\n", (long long)m.tv_sec, m.tv_nsec, (long long)b.tv_sec,
               b.tv_nsec);
        return 0;
    }
    if (!strcmp(c, "ptrace-child"))
        return ptrace_child();
    return usage();
}
