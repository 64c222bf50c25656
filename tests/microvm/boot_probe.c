/* boot_probe: the /init of a test microVM (tests and measurements only; the
 * real guest agent is corral-agent).  As PID 1 it mounts devtmpfs, proc and
 * sysfs, loads the modules listed in /lib/modules/modules.order with
 * finit_module, prints
 *
 *   corral-boot-probe ready <uptime> release=<uname -r> modules=<loaded>/<listed>
 *
 * on the console, then echoes lines over the virtio-serial port named
 * "corral.agent" (or the name given as corral.port=NAME on the kernel command
 * line).  The line "poweroff" powers the guest off.  Anything fatal is
 * printed and powers off too: PID 1 must not exit (the kernel would panic). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define MODDIR "/lib/modules"
#define PORTS "/sys/class/virtio-ports"

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line))
        n = sizeof(line) - 1;
    /* One write per line, so that lines do not interleave with the kernel's. */
    (void)!write(STDOUT_FILENO, line, (size_t)n);
}

static void __attribute__((noreturn)) power_off(void)
{
    sync();
    reboot(RB_POWER_OFF);
    /* Without a way to power off (no ACPI), stop here: the host kills QEMU. */
    for (;;)
        pause();
}

static void __attribute__((noreturn)) die(const char *what)
{
    say("corral-boot-probe: %s: %s\n", what, strerror(errno));
    power_off();
}

static double uptime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void mount_one(const char *src, const char *dst, const char *type)
{
    mkdir(dst, 0755);
    if (mount(src, dst, type, MS_NOSUID | MS_NOEXEC, NULL) < 0 && errno != EBUSY)
        die(dst);
}

/* The kernel gives init /dev/console as fds 0-2 only when the initramfs has
 * that node and a console is registered.  This initramfs has no node, and a
 * console on hvc0 registers only once virtio_console is loaded: reopen
 * /dev/console from devtmpfs, waiting up to wait_ms for it.  Returns 0 when
 * fds 0-2 are the console. */
static int console(int wait_ms)
{
    if (fcntl(STDOUT_FILENO, F_GETFD) >= 0)
        return 0;
    for (int waited = 0;; waited += 5) {
        int fd = open("/dev/console", O_RDWR | O_NOCTTY);
        if (fd >= 0) {
            for (int i = 0; i < 3; i++)
                if (fd != i)
                    dup2(fd, i);
            if (fd > 2)
                close(fd);
            return 0;
        }
        if (waited >= wait_ms)
            return -1;
        usleep(5000);
    }
}

/* Loads each module of the list in order; returns how many loaded (or were
 * there already).  A failure is reported and the rest still tried. */
static int load_modules(int *listed)
{
    FILE *f = fopen(MODDIR "/modules.order", "re");
    int loaded = 0;
    *listed = 0;
    if (!f)
        return 0;
    char name[256];
    while (fgets(name, sizeof(name), f)) {
        name[strcspn(name, "\n")] = '\0';
        if (!name[0])
            continue;
        ++*listed;
        char path[512];
        snprintf(path, sizeof(path), MODDIR "/%s", name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            say("corral-boot-probe: open %s: %s\n", path, strerror(errno));
            continue;
        }
        if (syscall(SYS_finit_module, fd, "", 0) == 0 || errno == EEXIST)
            loaded++;
        else
            say("corral-boot-probe: finit_module %s: %s\n", name, strerror(errno));
        close(fd);
    }
    fclose(f);
    return loaded;
}

/* The port's name as the host gave it: corral.port=NAME on the command line,
 * else corral.agent. */
static void port_name(char *buf, size_t len)
{
    snprintf(buf, len, "corral.agent");
    char cmdline[4096];
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, cmdline, sizeof(cmdline) - 1);
    close(fd);
    if (n <= 0)
        return;
    cmdline[n] = '\0';
    for (char *p = cmdline; (p = strstr(p, "corral.port=")); p++) {
        if (p != cmdline && p[-1] != ' ')
            continue;
        p += strlen("corral.port=");
        snprintf(buf, len, "%.*s", (int)strcspn(p, " \n"), p);
        return;
    }
}

/* /dev/vportNpM of the port called NAME, once the device and its node are
 * there (virtio-serial announces ports after the driver loads). */
static int open_port(const char *name, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 5) {
        DIR *d = opendir(PORTS);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char path[512], got[128] = "";
            snprintf(path, sizeof(path), PORTS "/%s/name", e->d_name);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                continue;
            ssize_t n = read(fd, got, sizeof(got) - 1);
            close(fd);
            if (n <= 0)
                continue;
            got[n] = '\0';
            got[strcspn(got, "\n")] = '\0';
            if (strcmp(got, name) != 0)
                continue;
            snprintf(path, sizeof(path), "/dev/%s", e->d_name);
            fd = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
            if (fd >= 0) {
                closedir(d);
                return fd;
            }
        }
        if (d)
            closedir(d);
        usleep(5000);
    }
    errno = ENOENT;
    return -1;
}

static void write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; /* the host went away: the next reader gets a fresh line */
        p += n;
        len -= (size_t)n;
    }
}

/* Echo lines until "poweroff".  While no host client is connected the port
 * polls as hung up and reads end-of-file: wait and look again (a restored
 * guest's host side connects after the restore). */
static void __attribute__((noreturn)) serve(int fd)
{
    char line[4096];
    size_t have = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            die("poll");
        }
        if (!(p.revents & POLLIN)) {
            usleep(5000);
            continue;
        }
        ssize_t n = read(fd, line + have, sizeof(line) - have);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            have = 0;
            usleep(5000);
            continue;
        }
        have += (size_t)n;
        char *nl;
        while ((nl = memchr(line, '\n', have))) {
            size_t len = (size_t)(nl - line) + 1;
            if (len == sizeof("poweroff") && memcmp(line, "poweroff\n", len) == 0) {
                write_all(fd, "bye\n", 4);
                power_off();
            }
            write_all(fd, line, len);
            memmove(line, line + len, have - len);
            have -= len;
        }
        if (have == sizeof(line)) {
            /* a line longer than the buffer: echo it in parts */
            write_all(fd, line, have);
            have = 0;
        }
    }
}

int main(void)
{
    mount_one("devtmpfs", "/dev", "devtmpfs");
    console(0);
    mount_one("proc", "/proc", "proc");
    mount_one("sysfs", "/sys", "sysfs");

    int listed;
    int loaded = load_modules(&listed);
    if (console(5000) < 0)
        power_off(); /* nowhere to say why: the host sees no marker */
    struct utsname u;
    if (uname(&u) < 0)
        die("uname");
    say("corral-boot-probe ready %.3f release=%s modules=%d/%d\n", uptime(), u.release, loaded,
        listed);

    char name[128];
    port_name(name, sizeof(name));
    int fd = open_port(name, 10000);
    if (fd < 0)
        die(name);
    say("corral-boot-probe port %s %.3f\n", name, uptime());
    serve(fd);
}
