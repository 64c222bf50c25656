/* hostile_agent: the /init of a test microVM that breaks the agent protocol
 * on purpose (tests/integration/test_microvm.py; never in a real guest).
 *
 * It boots as corral-agent does (mounts, modules, the port), greets its
 * host with a valid HELLO so that a template of it is saved, and waits for
 * a CONFIG.  Then, instead of READY, it misbehaves in the way the CONFIG's
 * disk_mb picks (disk_mb % 6), so that a test chooses through the create:
 *
 *   0  a STDOUT frame header announcing 2 MiB (over the 1 MiB limit)
 *   1  a frame of type 99
 *   2  STDOUT on stream 7, which the host never opened
 *   3  a second HELLO whose JSON does not parse
 *   4  a flood of valid PINGs, never reading the PONGs
 *   5  a burst of bytes no decoder takes (0xff)
 *
 * and then waits forever: the host must kill it, name why, and go on. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <unistd.h>

#include "../../lib/agent/proto.h"
#include "../../lib/guest/boot.h"

static void write_all(int fd, const void *p, size_t len)
{
    const char *c = p;
    while (len > 0) {
        ssize_t n = write(fd, c, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        c += n;
        len -= (size_t)n;
    }
}

static void frame(int fd, uint16_t type, uint32_t stream, const void *payload, uint32_t len)
{
    uint8_t h[CRL_AGENT_HEADER_SIZE];
    crl_agent_put_header(h, type, stream, len);
    write_all(fd, h, sizeof(h));
    if (len)
        write_all(fd, payload, len);
}

static int read_full(int fd, void *buf, size_t len)
{
    char *c = buf;
    while (len > 0) {
        ssize_t n = read(fd, c, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            usleep(10000); /* no host yet (the port reads as hung up): wait */
            continue;
        }
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The CONFIG's "disk_mb", 0 if absent. */
static unsigned disk_mb_of(const char *json)
{
    const char *k = strstr(json, "\"disk_mb\":");
    return k ? (unsigned)strtoul(k + 10, NULL, 10) : 0;
}

static void misbehave(int fd, unsigned how)
{
    static char buf[64 * 1024];
    switch (how) {
    case 0: {
        uint8_t h[CRL_AGENT_HEADER_SIZE];
        crl_agent_put_header(h, CRL_AGENT_STDOUT, 1, 2u << 20);
        write_all(fd, h, sizeof(h));
        break;
    }
    case 1: frame(fd, 99, 0, NULL, 0); break;
    case 2: frame(fd, CRL_AGENT_STDOUT, 7, "0123456789", 10); break;
    case 3: frame(fd, CRL_AGENT_HELLO, 0, "{", 1); break;
    case 4: {
        uint8_t ping[CRL_AGENT_PING_FRAME_SIZE];
        size_t n = 0;
        for (uint64_t i = 0; n + sizeof(ping) <= sizeof(buf); i++) {
            crl_agent_encode_ping(ping, CRL_AGENT_PING, i);
            memcpy(buf + n, ping, sizeof(ping));
            n += sizeof(ping);
        }
        for (int i = 0; i < 4096; i++) /* 256 MiB of PINGs, if the host lets it */
            write_all(fd, buf, n);
        break;
    }
    default:
        memset(buf, 0xff, sizeof(buf));
        write_all(fd, buf, sizeof(buf));
        break;
    }
}

static void quiet(const char *path, int errnum)
{
}

int main(void)
{
    crl_guest_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, NULL);
    crl_guest_console(0);
    crl_guest_mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC, NULL);
    crl_guest_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NOEXEC, NULL);
    int listed;
    crl_guest_load_modules(CRL_GUEST_MODULES, &listed, quiet);
    crl_guest_console(5000);
    char name[128];
    crl_guest_port_name(name, sizeof(name));
    int fd = crl_guest_open_port(name, 10000);
    if (fd < 0) {
        printf("hostile_agent: no port %s\n", name);
        reboot(RB_POWER_OFF);
    }
    static const char hello[] = "{\"proto\":2,\"agent\":\"hostile 0\",\"kernel\":\"test\"}";
    frame(fd, CRL_AGENT_HELLO, 0, hello, sizeof(hello) - 1);
    static char payload[CRL_AGENT_MAX_JSON + 1];
    for (;;) {
        uint8_t h[CRL_AGENT_HEADER_SIZE];
        read_full(fd, h, sizeof(h));
        uint32_t len =
            (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        uint16_t type = (uint16_t)(h[4] | h[5] << 8);
        if (len > CRL_AGENT_MAX_JSON)
            continue; /* the host sends nothing so big before CONFIG */
        read_full(fd, payload, len);
        payload[len] = 0;
        if (type == CRL_AGENT_CONFIG) {
            unsigned how = disk_mb_of(payload) % 6;
            printf("hostile_agent: misbehaving (%u)\n", how);
            misbehave(fd, how);
            break;
        }
    }
    for (;;)
        pause();
}
