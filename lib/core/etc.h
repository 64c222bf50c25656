/* The files a sandbox's /etc gets at run time, whatever its image holds
 * (or, for a function sandbox, whatever the host's /etc holds): what
 * Docker and Podman provide too, so that `localhost` and the sandbox's own
 * name resolve and nothing names the machine an image was built on.  One
 * place for their contents, used by every backend that has a filesystem.
 *
 * Each writes a NUL-terminated text into buf and returns its length, or -1
 * if it does not fit. */
#ifndef CRL_CORE_ETC_H
#define CRL_CORE_ETC_H

#include <stddef.h>
#include <sys/types.h>

/* /etc/hostname */
int crl_etc_hostname(char *buf, size_t cap, const char *hostname);
/* /etc/hosts: localhost (IPv4 and IPv6) and the sandbox's name, which with
 * loopback only is 127.0.1.1 (Debian's convention for a machine's own
 * name without a fixed address). */
int crl_etc_hosts(char *buf, size_t cap, const char *hostname);
/* /etc/resolv.conf for a network mode: "none" without `nameservers` names
 * no resolver, so a lookup of any name /etc/hosts lacks fails at once
 * instead of waiting; else it names `nameservers` (space-separated
 * addresses: corrald's resolver, on the sandbox's gateway; a sandbox of
 * mode none has one when it has services). */
int crl_etc_resolv_conf(char *buf, size_t cap, const char *network_mode, const char *nameservers);
/* The IPv4 nameservers of a resolv.conf (the host's: /etc/resolv.conf),
 * space-separated, into buf; "" if none.  -1 if it cannot be read. */
int crl_etc_nameservers(const char *resolv_conf, char *buf, size_t cap);
/* /etc/passwd and /etc/group with root, nobody and the sandbox's user
 * (`name`, uid, gid, home), for a sandbox whose processes run as an id no
 * image names (the function backend's). */
int crl_etc_passwd(char *buf, size_t cap, const char *name, uid_t uid, gid_t gid, const char *home);
int crl_etc_group(char *buf, size_t cap, const char *name, gid_t gid);

#endif
