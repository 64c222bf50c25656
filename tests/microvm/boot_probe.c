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
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/guest/boot.h"

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
    if (crl_guest_mount(src, dst, type, MS_NOSUID | MS_NOEXEC, NULL) < 0)
        die(dst);
}

static void module_failed(const char *path, int errnum)
{
    say("corral-boot-probe: finit_module %s: %s\n", path, strerror(errnum));
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
    crl_guest_console(0);
    mount_one("proc", "/proc", "proc");
    mount_one("sysfs", "/sys", "sysfs");

    int listed;
    int loaded = crl_guest_load_modules(CRL_GUEST_MODULES, &listed, module_failed);
    if (crl_guest_console(5000) < 0)
        power_off(); /* nowhere to say why: the host sees no marker */
    struct utsname u;
    if (uname(&u) < 0)
        die("uname");
    say("corral-boot-probe ready %.3f release=%s modules=%d/%d\n", uptime(), u.release, loaded,
        listed);

    char name[128];
    crl_guest_port_name(name, sizeof(name));
    int fd = crl_guest_open_port(name, 10000);
    if (fd < 0)
        die(name);
    say("corral-boot-probe port %s %.3f\n", name, uptime());
    serve(fd);
}
