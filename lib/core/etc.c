#include "etc.h"

#include <stdio.h>
#include <string.h>

static int fits(int n, size_t cap)
{
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

int crl_etc_hostname(char *buf, size_t cap, const char *hostname)
{
    return fits(snprintf(buf, cap, "%s\n", hostname), cap);
}

int crl_etc_hosts(char *buf, size_t cap, const char *hostname)
{
    return fits(snprintf(buf, cap,
                         "127.0.0.1\tlocalhost\n"
                         "::1\tlocalhost ip6-localhost ip6-loopback\n"
                         "127.0.1.1\t%s\n",
                         hostname),
                cap);
}

int crl_etc_resolv_conf(char *buf, size_t cap, const char *network_mode)
{
    if (strcmp(network_mode, "none") == 0)
        return fits(
            snprintf(buf, cap,
                     "# Network mode \"none\": loopback only, so no nameserver is named here.\n"
                     "# Names resolve from /etc/hosts; a resolver then asks 127.0.0.1:53,\n"
                     "# which refuses at once unless something in the sandbox serves there.\n"
                     "options attempts:1 timeout:1\n"),
            cap);
    return fits(snprintf(buf, cap, "# Corral: network mode \"%s\"\n", network_mode), cap);
}

int crl_etc_passwd(char *buf, size_t cap, const char *name, uid_t uid, gid_t gid, const char *home)
{
    return fits(snprintf(buf, cap,
                         "root:x:0:0:root:/root:/bin/sh\n"
                         "%s:x:%u:%u:%s:%s:/bin/sh\n"
                         "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                         name, (unsigned)uid, (unsigned)gid, name, home),
                cap);
}

int crl_etc_group(char *buf, size_t cap, const char *name, gid_t gid)
{
    return fits(snprintf(buf, cap, "root:x:0:\n%s:x:%u:\nnogroup:x:65534:\n", name, (unsigned)gid),
                cap);
}
