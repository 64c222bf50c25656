/* What a microVM guest's PID 1 does before it serves, shared by
 * corral-agent and the boot probe of the tests (tests/microvm): mount the
 * kernel's file systems, load the initramfs's modules, find the port the
 * host talks on.  libc only, and never part of libcorral: these run inside
 * a guest, not on the host.  Each returns -1 with errno set on failure. */
#ifndef CRL_GUEST_BOOT_H
#define CRL_GUEST_BOOT_H

#include <stddef.h>

/* Where microvm-initramfs.sh puts the modules and their load order. */
#define CRL_GUEST_MODULES "/lib/modules"
#define CRL_GUEST_PORT "corral.agent"

/* mkdir dst (0755; it may exist) and mount src there; a mount that is
 * already there (EBUSY) is success. */
int crl_guest_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                    const char *data);

/* Load the modules listed in dir/modules.order, in order, with
 * finit_module.  Returns how many loaded (or were loaded already) and sets
 * *listed to how many the list names; a module that fails is passed to
 * warn (its path and errno) and the rest are still tried.  A missing list
 * loads nothing. */
int crl_guest_load_modules(const char *dir, int *listed,
                           void (*warn)(const char *path, int errnum));

/* Make fds 0-2 the console (/dev/console of devtmpfs), waiting up to
 * wait_ms for it to appear: a console on hvc0 registers only once
 * virtio_console is loaded.  0 when they are (or were already). */
int crl_guest_console(int wait_ms);

/* The port's name as the host gave it: corral.port=NAME on the kernel's
 * command line, else CRL_GUEST_PORT. */
void crl_guest_port_name(char *buf, size_t len);

/* Open /dev/vportNpM of the virtio-serial port called name (read-write,
 * O_CLOEXEC, blocking), waiting up to timeout_ms for the device and its
 * node: ports are announced after the driver loads.  ENOENT when none. */
int crl_guest_open_port(const char *name, int timeout_ms);

#endif
