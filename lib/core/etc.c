#include "etc.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdbool.h>
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

int crl_etc_resolv_conf(char *buf, size_t cap, const char *network_mode, const char *nameservers)
{
    bool none = strcmp(network_mode, "none") == 0;
    if (none && (!nameservers || !*nameservers))
        return fits(
            snprintf(buf, cap,
                     "# Network mode \"none\": loopback only, so no nameserver is named here.\n"
                     "# Names resolve from /etc/hosts; a resolver then asks 127.0.0.1:53,\n"
                     "# which refuses at once unless something in the sandbox serves there.\n"
                     "options attempts:1 timeout:1\n"),
            cap);
    if (!nameservers || !*nameservers)
        return fits(snprintf(buf, cap, "# Network mode \"%s\": no resolver.\n", network_mode), cap);
    int off = snprintf(buf, cap,
                       "# Network mode \"%s\": corrald's resolver, which answers %s\n"
                       "# (every DNS packet of the sandbox goes there).\n",
                       network_mode,
                       none ? "the names of the sandbox's services only"
                            : "what the sandbox's policy allows and its services' names");
    char list[256];
    snprintf(list, sizeof(list), "%s", nameservers);
    char *save = NULL;
    for (char *ns = strtok_r(list, " ", &save); ns && off >= 0 && (size_t)off < cap;
         ns = strtok_r(NULL, " ", &save))
        off += snprintf(buf + off, cap - (size_t)off, "nameserver %s\n", ns);
    return off >= 0 && (size_t)off < cap ? off : -1;
}

int crl_etc_nameservers(const char *resolv_conf, char *buf, size_t cap)
{
    FILE *f = fopen(resolv_conf, "re");
    if (!f)
        return -1;
    char line[512];
    size_t off = 0;
    buf[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        char addr[64];
        struct in_addr in;
        if (sscanf(line, " nameserver %63s", addr) == 1 && inet_pton(AF_INET, addr, &in) == 1 &&
            off + strlen(addr) + 2 < cap)
            off += (size_t)snprintf(buf + off, cap - off, "%s%s", off ? " " : "", addr);
    }
    fclose(f);
    return (int)off;
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
