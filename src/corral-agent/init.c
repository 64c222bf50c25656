/* PID 1's duties in a microVM guest: the kernel's file systems, the
 * initramfs's modules, and a CONFIG's identity and root. */
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../lib/guest/boot.h"
#include "../../lib/util/fdio.h"
#include "../../lib/util/log.h"
#include "agent.h"

#ifndef BLKFLSBUF /* <linux/fs.h>, which clashes with <sys/mount.h> */
#define BLKFLSBUF _IO(0x12, 97)
#endif

/* Where the root is assembled, in the initramfs (a tmpfs of its own). */
#define RUN "/run/corral"
#define LAYERS RUN "/layers"
#define RW RUN "/rw"
#define NEWROOT RUN "/root"
/* /etc/hostname, hosts and resolv.conf, in a layer of their own above the
 * image's: not in the writable layer, so no checkpoint carries them. */
#define ETC_LAYER RUN "/etc-layer"

void crl_ga_power_off(void)
{
    sync();
    reboot(RB_POWER_OFF);
    /* Without a way to power off (no ACPI), stop here: the host kills QEMU. */
    for (;;)
        pause();
}

static void module_failed(const char *path, int errnum)
{
    crl_warn(NULL, "finit_module %s: %s", path, strerror(errnum));
}

/* Seconds since boot, for the console's lines: where a boot's time goes. */
static double uptime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int crl_ga_init_boot(struct crl_err *err)
{
    double t0 = uptime();
    if (crl_guest_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755") < 0)
        return crl_err_sys(err, errno, "mount devtmpfs on /dev");
    crl_guest_console(0);
    if (crl_guest_mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL) < 0)
        return crl_err_sys(err, errno, "mount proc on /proc");
    if (crl_guest_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL) < 0)
        return crl_err_sys(err, errno, "mount sysfs on /sys");
    /* cgroup2 only where the kernel has it: a guest can do without. */
    if (crl_guest_mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NOEXEC | MS_NODEV,
                        NULL) < 0)
        crl_info(NULL, "no cgroup2 in the guest: mount on /sys/fs/cgroup: %s", strerror(errno));
    int listed;
    int loaded = crl_guest_load_modules(CRL_GUEST_MODULES, &listed, module_failed);
    if (crl_guest_console(5000) < 0)
        return crl_err_sys(err, ENODEV, "no /dev/console after 5 s");
    crl_info(NULL, "init at %.3f s, modules %d/%d loaded at %.3f s", t0, loaded, listed, uptime());
    char name[128];
    crl_guest_port_name(name, sizeof(name));
    int fd = crl_guest_open_port(name, 10000);
    if (fd < 0)
        return crl_err_sys(err, errno, "virtio-serial port %s not found after 10 s", name);
    crl_info(NULL, "port %s open at %.3f s", name, uptime());
    return fd;
}

int crl_ga_rw_fd = -1;

static int set_identity(const struct crl_agent_config *c, struct crl_err *err)
{
    if (sethostname(c->hostname, strlen(c->hostname)) < 0)
        return crl_err_sys(err, errno, "sethostname %s", c->hostname);
    struct timespec ts = {.tv_sec = (time_t)(c->realtime_ns / 1000000000),
                          .tv_nsec = (long)(c->realtime_ns % 1000000000)};
    if (clock_settime(CLOCK_REALTIME, &ts) < 0)
        return crl_err_sys(err, errno, "clock_settime to %lld ns", (long long)c->realtime_ns);
    /* The seed is credited: a restored template would otherwise hand every
     * sandbox the same RNG state. */
    struct {
        struct rand_pool_info info;
        unsigned char buf[CRL_AGENT_MAX_SEED];
    } pool;
    pool.info.entropy_count = (int)(c->seed_len * 8);
    pool.info.buf_size = (int)c->seed_len;
    memcpy(pool.buf, c->seed, c->seed_len);
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return crl_err_sys(err, errno, "open /dev/urandom");
    int r = ioctl(fd, RNDADDENTROPY, &pool);
    int e = errno;
    close(fd);
    explicit_bzero(&pool, sizeof(pool));
    if (r < 0)
        return crl_err_sys(err, e, "RNDADDENTROPY of %zu bytes", c->seed_len);
    return 0;
}

static int mkdirs(const char *path, struct crl_err *err)
{
    char p[CRL_AGENT_MAX_PATH + 1];
    if (strlen(path) >= sizeof(p))
        return crl_err_set(err, CRL_E_INVALID, "mkdir: a path of %zu bytes", strlen(path));
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return crl_err_sys(err, errno, "mkdir %s", p);
            *s = c;
            if (!c)
                return 0;
        }
    }
}

/* A guest restored from a template read its disks' first blocks at boot
 * (the partition scan), when they were the template's empty placeholders;
 * the host has put the sandbox's layers and volumes behind them since.  Drop what the
 * kernel cached of the device so the mount reads the layer itself. */
static int forget_cache(const char *dev, struct crl_err *err)
{
    int fd = open(dev, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return crl_err_sys(err, errno, "open %s", dev);
    int r = ioctl(fd, BLKFLSBUF, 0);
    int e = errno;
    close(fd);
    if (r < 0)
        return crl_err_sys(err, e, "BLKFLSBUF on %s", dev);
    return 0;
}

/* Write a small file at dir/name: replaced (a new inode) or, in_place,
 * truncated and rewritten (the same inode: a file of a layer beneath a
 * mounted overlay, which shows its new content without a copy up). */
static int put_file(int dir, const char *name, const char *text, mode_t mode, bool in_place,
                    struct crl_err *err)
{
    if (!in_place && unlinkat(dir, name, 0) < 0 && errno != ENOENT)
        return crl_err_sys(err, errno, "replace %s", name);
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (in_place ? O_TRUNC : O_EXCL);
    int fd = openat(dir, name, flags, mode);
    if (fd < 0 || crl_write_full(fd, text, strlen(text)) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return crl_err_sys(err, e, "write %s", name);
    }
    close(fd);
    return 0;
}

/* The /etc files the host sent, in the directory `etc` (made here). */
static int write_etc_files_at(int dir, const struct crl_agent_config *c, bool in_place,
                              struct crl_err *err)
{
    const char *names[3] = {"hostname", "hosts", "resolv.conf"};
    const char *texts[3] = {c->etc_hostname, c->etc_hosts, c->etc_resolv_conf};
    if (mkdirat(dir, "etc", 0755) < 0 && errno != EEXIST)
        return crl_err_sys(err, errno, "mkdir /etc");
    int etc = openat(dir, "etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (etc < 0)
        return crl_err_sys(err, errno, "open /etc");
    for (int i = 0; i < 3; i++)
        if (texts[i][0] && put_file(etc, names[i], texts[i], 0644, in_place, err) < 0)
            goto fail;
    /* A full system's machine-id (a newline ends it, as systemd writes it). */
    char id[CRL_AGENT_MACHINE_ID + 2];
    snprintf(id, sizeof(id), "%s\n", c->machine_id);
    if (c->machine_id[0] && put_file(etc, "machine-id", id, 0444, in_place, err) < 0)
        goto fail;
    close(etc);
    return 0;
fail:
    close(etc);
    return crl_err_prefix(err, "/etc");
}

static int write_etc_files(int dir, const struct crl_agent_config *c, struct crl_err *err)
{
    return write_etc_files_at(dir, c, false, err);
}

/* What a full system's init starts the agent with: a unit enabled in
 * multi-user.target.  The service's output goes to the console too, where
 * the host reads a failed boot's last words. */
static const char service_unit[] =
    "[Unit]\n"
    "Description=Corral's agent: the host's channel into this machine\n"
    "\n"
    "[Service]\n"
    "ExecStart=" CRL_GA_SERVICE_BIN " --systemd\n"
    "Delegate=yes\n"
    "OOMScoreAdjust=-1000\n"
    "StandardOutput=journal+console\n"
    "StandardError=journal+console\n"
    "\n"
    "[Install]\n"
    "WantedBy=multi-user.target\n";

static int mkdirs_at(int dir, const char *path, struct crl_err *err)
{
    char p[256];
    snprintf(p, sizeof(p), "%s", path);
    for (char *s = p;; s++)
        if (*s == '/' || *s == '\0') {
            char ch = *s;
            *s = '\0';
            if (mkdirat(dir, p, 0755) < 0 && errno != EEXIST)
                return crl_err_sys(err, errno, "mkdir %s", p);
            *s = ch;
            if (!ch)
                return 0;
        }
}

/* The journal in memory (/run/log/journal): a system writes it all the
 * time, and in the writable layer it would be in every checkpoint. */
static const char journald_conf[] = "[Journal]\nStorage=volatile\n";

/* A full system's part of the /etc layer: the agent's own binary (this
 * one, so the guest's agent is always the host's version, whatever the
 * image holds) and its unit, enabled; the journal's setting; and the
 * commit of a machine-id mounted over /etc/machine-id (init_config's)
 * masked: the machine-id is the host's to give. */
static int system_layer(int dir, struct crl_err *err)
{
    const char *wants = "etc/systemd/system/multi-user.target.wants";
    if (mkdirs_at(dir, "usr/lib/corral", err) < 0 || mkdirs_at(dir, wants, err) < 0 ||
        mkdirs_at(dir, "etc/systemd/journald.conf.d", err) < 0)
        return -1;
    int etc_sys = openat(dir, "etc/systemd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (etc_sys < 0)
        return crl_err_sys(err, errno, "open etc/systemd");
    int r = put_file(etc_sys, "system/" CRL_GA_SERVICE_UNIT, service_unit, 0644, false, err);
    if (r == 0)
        r = put_file(etc_sys, "journald.conf.d/corral.conf", journald_conf, 0644, false, err);
    if (r == 0 && symlinkat("/dev/null", etc_sys, "system/systemd-machine-id-commit.service") < 0)
        r = crl_err_sys(err, errno, "mask systemd-machine-id-commit.service");
    close(etc_sys);
    char link[256];
    snprintf(link, sizeof(link), "%s/" CRL_GA_SERVICE_UNIT, wants);
    if (r == 0 && symlinkat("../" CRL_GA_SERVICE_UNIT, dir, link) < 0)
        r = crl_err_sys(err, errno, "enable %s", CRL_GA_SERVICE_UNIT);
    if (r < 0)
        return -1;
    int src = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    int dst = src < 0 ? -1
                      : openat(dir, CRL_GA_SERVICE_BIN + 1, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                               0755);
    if (src < 0 || dst < 0) {
        r = crl_err_sys(err, errno, "copy the agent to %s", CRL_GA_SERVICE_BIN);
    } else {
        char buf[65536];
        ssize_t n;
        while ((n = read(src, buf, sizeof(buf))) > 0)
            if (crl_write_full(dst, buf, (size_t)n) < 0)
                break;
        if (n != 0)
            r = crl_err_sys(err, errno, "copy the agent to %s", CRL_GA_SERVICE_BIN);
    }
    if (src >= 0)
        close(src);
    if (dst >= 0)
        close(dst);
    return r;
}

/* A full system keeps the writable layer and the /etc layer where its
 * agent, a service started by its init, finds them: bound under the new
 * root's /run, a tmpfs mounted here (systemd keeps a /run it finds). */
static int system_run(struct crl_err *err)
{
    if (mkdirs(NEWROOT "/run", err) < 0)
        return -1;
    if (mount("tmpfs", NEWROOT "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0)
        return crl_err_sys(err, errno, "mount a tmpfs on the new root's /run");
    if (mkdirs(NEWROOT CRL_GA_SYSTEM_RW, err) < 0 || mkdirs(NEWROOT CRL_GA_SYSTEM_ETC, err) < 0)
        return -1;
    if (mount(RW, NEWROOT CRL_GA_SYSTEM_RW, NULL, MS_BIND, NULL) < 0 ||
        mount(ETC_LAYER, NEWROOT CRL_GA_SYSTEM_ETC, NULL, MS_BIND, NULL) < 0)
        return crl_err_sys(err, errno, "bind the writable and /etc layers under /run");
    return 0;
}

/* /etc/machine-id, the /etc layer's, read-only over itself: systemd opens
 * it for writing first, which through the overlay would copy it up into
 * the writable layer, where a clone's own (written in place in the /etc
 * layer) would not show.  Read-only, it opens it to read. */
static int machine_id_mount(struct crl_err *err)
{
    const char *src = CRL_GA_SYSTEM_ETC "/etc/machine-id";
    if (mount(src, "/etc/machine-id", NULL, MS_BIND, NULL) < 0 ||
        mount(NULL, "/etc/machine-id", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) < 0)
        return crl_err_sys(err, errno, "bind %s read-only on /etc/machine-id", src);
    return 0;
}

/* Whether the image's /etc, as its top-most layer with one has it, is a
 * directory (or there is none): then the /etc files go in a layer of their
 * own; else (a symlink, a whiteout) they are written into the root. */
static bool etc_layer_fits(size_t n_layers)
{
    for (size_t i = 0; i < n_layers; i++) {
        char p[96];
        struct stat st;
        snprintf(p, sizeof(p), LAYERS "/%zu/etc", i);
        if (lstat(p, &st) == 0)
            return S_ISDIR(st.st_mode);
    }
    return true;
}

/* The layers read-only (top first, as overlayfs lists them too) under the
 * /etc layer, the writable layer (ext4 on the disk, else a tmpfs) as the
 * upper dir, the overlay at NEWROOT.  No redirects and no metacopy (as in a
 * userxattr overlay, a container's): the upper dir alone says what changed,
 * which a checkpoint reads (corral:layer-out).  Sets *etc_done when the
 * /etc files are in their layer. */
static int build_root(const struct crl_agent_config *c, bool *etc_done, struct crl_err *err)
{
    *etc_done = false;
    if (mkdirs(RW, err) < 0 || mkdirs(NEWROOT, err) < 0)
        return -1;
    if (c->disk[0]) {
        if (mount(c->disk, RW, "ext4", MS_NOSUID | MS_NODEV, NULL) < 0)
            return crl_err_sys(err, errno, "mount the writable disk %s (ext4) on %s", c->disk, RW);
    } else {
        char opts[64] = "mode=0755";
        if (c->disk_mb)
            snprintf(opts, sizeof(opts), "mode=0755,size=%um", (unsigned)c->disk_mb);
        if (mount("tmpfs", RW, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
            return crl_err_sys(err, errno, "mount a tmpfs (%s) on %s", opts, RW);
    }
    if (mkdirs(RW "/upper", err) < 0 || mkdirs(RW "/work", err) < 0)
        return -1;
    if ((crl_ga_rw_fd = open(RW, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return crl_err_sys(err, errno, "open %s", RW);
    if (c->n_layers == 0) {
        /* Nothing to stack: the writable layer alone is the root. */
        if (mount(RW "/upper", NEWROOT, NULL, MS_BIND, NULL) < 0)
            return crl_err_sys(err, errno, "bind %s/upper on %s", RW, NEWROOT);
        return 0;
    }
    char lower[CRL_AGENT_MAX_LAYERS * 32 + 64];
    size_t off = 0;
    for (size_t i = 0; i < c->n_layers; i++) {
        char dir[64];
        snprintf(dir, sizeof(dir), LAYERS "/%zu", i);
        if (mkdirs(dir, err) < 0 || forget_cache(c->layers[i], err) < 0)
            return -1;
        if (mount(c->layers[i], dir, "erofs", MS_RDONLY | MS_NODEV, NULL) < 0)
            return crl_err_sys(err, errno, "mount layer %zu (%s, erofs) on %s", i, c->layers[i],
                               dir);
        off += (size_t)snprintf(lower + off, sizeof(lower) - off, "%s%s", i ? ":" : "", dir);
    }
    char etc_lower[sizeof(lower) + 64];
    if (etc_layer_fits(c->n_layers)) {
        if (mkdirs(ETC_LAYER, err) < 0)
            return -1;
        /* A full system's holds the agent's service too (its binary is
         * about 2 MiB). */
        const char *opts = c->init[0] ? "mode=0755,size=16m" : "mode=0755,size=1m";
        if (mount("tmpfs", ETC_LAYER, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
            return crl_err_sys(err, errno, "mount a tmpfs on %s", ETC_LAYER);
        int d = open(ETC_LAYER, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d < 0)
            return crl_err_sys(err, errno, "open %s", ETC_LAYER);
        int r = write_etc_files(d, c, err);
        if (r == 0 && c->init[0])
            r = system_layer(d, err);
        close(d);
        if (r < 0)
            return -1;
        snprintf(etc_lower, sizeof(etc_lower), "%s:%s", ETC_LAYER, lower);
        *etc_done = true;
    } else if (c->init[0]) {
        return crl_err_set(err, CRL_E_INVALID,
                           "a full system's image needs an /etc directory (its top layer with "
                           "one has something else there)");
    } else {
        snprintf(etc_lower, sizeof(etc_lower), "%s", lower);
    }
    char data[sizeof(etc_lower) + 160];
    snprintf(data, sizeof(data),
             "lowerdir=%s,upperdir=%s/upper,workdir=%s/work,redirect_dir=off,metacopy=off",
             etc_lower, RW, RW);
    if (mount("overlay", NEWROOT, "overlay", MS_NODEV, data) < 0)
        return crl_err_sys(err, errno, "mount overlay on %s (%s)", NEWROOT, data);
    return 0;
}

/* Move the kernel's file systems into the new root and make it "/".  Not
 * pivot_root(2): it refuses to move the initramfs (rootfs cannot be
 * unmounted), so this is switch_root's way: MS_MOVE onto "/" and chroot.
 * The initramfs stays beneath, holding only this program and the modules. */
static int switch_root(struct crl_err *err)
{
    static const char *const moved[] = {"/dev", "/proc", "/sys"};
    for (size_t i = 0; i < sizeof(moved) / sizeof(moved[0]); i++) {
        char dst[128];
        snprintf(dst, sizeof(dst), NEWROOT "%s", moved[i]);
        if (mkdir(dst, 0755) < 0 && errno != EEXIST)
            return crl_err_sys(err, errno, "mkdir %s in the new root", moved[i]);
        if (mount(moved[i], dst, NULL, MS_MOVE, NULL) < 0)
            return crl_err_sys(err, errno, "move %s into the new root", moved[i]);
    }
    if (chdir(NEWROOT) < 0)
        return crl_err_sys(err, errno, "chdir %s", NEWROOT);
    if (mount(NEWROOT, "/", NULL, MS_MOVE, NULL) < 0)
        return crl_err_sys(err, errno, "move %s onto /", NEWROOT);
    if (chroot(".") < 0 || chdir("/") < 0)
        return crl_err_sys(err, errno, "chroot into the new root");
    /* What programs expect besides: ptys and POSIX shared memory. */
    if (crl_guest_mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                        "newinstance,ptmxmode=0666,mode=0620") < 0)
        crl_warn(NULL, "mount devpts on /dev/pts: %s", strerror(errno));
    if (crl_guest_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0)
        crl_warn(NULL, "mount tmpfs on /dev/shm: %s", strerror(errno));
    return 0;
}

/* Where the /etc files have no layer of their own (no image layers, or an
 * image whose /etc is no directory): over whatever the root has (a symlink
 * replaced, not followed), where it has an /etc directory. */
static int write_etc(const struct crl_agent_config *c, struct crl_err *err)
{
    struct stat st;
    if (lstat("/etc", &st) < 0 || !S_ISDIR(st.st_mode))
        return 0;
    int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return crl_err_sys(err, errno, "open /");
    int r = write_etc_files(root, c, err);
    close(root);
    return r;
}

static int if_up(int sock, const char *name, struct crl_err *err)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0)
        return crl_err_sys(err, errno, "SIOCGIFFLAGS %s", name);
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(sock, SIOCSIFFLAGS, &ifr) < 0)
        return crl_err_sys(err, errno, "%s up", name);
    return 0;
}

static int set_in_addr(int sock, unsigned long req, const char *name, struct in_addr a,
                       struct crl_err *err)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
    sin->sin_family = AF_INET;
    sin->sin_addr = a;
    if (ioctl(sock, req, &ifr) < 0)
        return crl_err_sys(err, errno, "%s of %s",
                           req == SIOCSIFADDR ? "the address" : "the netmask", name);
    return 0;
}

/* Loopback up; and the network device (eth0: the only one a guest has)
 * with the sandbox's address and its default route, where it has one.
 * IPv6 off on it, as on a container's eth0. */
static int set_network(const struct crl_agent_config *c, struct crl_err *err)
{
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return crl_err_sys(err, errno, "socket");
    int r = if_up(sock, "lo", err);
    if (r == 0 && c->net_address[0]) {
        struct in_addr addr, gw, mask = {.s_addr = htonl(~0u << (32 - c->net_prefix))};
        inet_pton(AF_INET, c->net_address, &addr); /* parse_config checked both */
        inet_pton(AF_INET, c->net_gateway, &gw);
        int fd = open("/proc/sys/net/ipv6/conf/eth0/disable_ipv6", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t w = write(fd, "1", 1);
            (void)w;
            close(fd);
        }
        struct rtentry rt;
        memset(&rt, 0, sizeof(rt));
        struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst;
        struct sockaddr_in *via = (struct sockaddr_in *)&rt.rt_gateway;
        struct sockaddr_in *gm = (struct sockaddr_in *)&rt.rt_genmask;
        dst->sin_family = via->sin_family = gm->sin_family = AF_INET;
        via->sin_addr = gw;
        rt.rt_flags = RTF_UP | RTF_GATEWAY;
        rt.rt_dev = (char *)"eth0";
        if (set_in_addr(sock, SIOCSIFADDR, "eth0", addr, err) < 0 ||
            set_in_addr(sock, SIOCSIFNETMASK, "eth0", mask, err) < 0 ||
            if_up(sock, "eth0", err) < 0)
            r = -1;
        else if (ioctl(sock, SIOCADDRT, &rt) < 0)
            r = crl_err_sys(err, errno, "the default route via %s", c->net_gateway);
    }
    close(sock);
    return r;
}

/* The sandbox's volumes (CONFIG's, ext4 on their devices), each at its
 * path in the new root, made if missing: after the switch, so an image's
 * symlinks on the way resolve inside it, as in a container.  A volume
 * the host gave read-only is read-only on its device too. */
static int mount_volumes(const struct crl_agent_config *c, struct crl_err *err)
{
    for (size_t i = 0; i < c->n_volumes; i++) {
        const struct crl_agent_volume *v = &c->volumes[i];
        if (mkdirs(v->path, err) < 0 || forget_cache(v->device, err) < 0)
            return -1;
        unsigned long flags = MS_NOSUID | MS_NODEV | (v->read_only ? MS_RDONLY : 0);
        if (mount(v->device, v->path, "ext4", flags, NULL) < 0)
            return crl_err_sys(err, errno, "mount volume %zu (%s, ext4) on %s", i, v->device,
                               v->path);
    }
    return 0;
}

int crl_ga_init_config(const struct crl_agent_config *c, bool first, struct crl_err *err)
{
    if (set_identity(c, err) < 0)
        return -1;
    if (!first)
        return 0;
    bool etc_done;
    if (build_root(c, &etc_done, err) < 0 || (c->init[0] && system_run(err) < 0) ||
        switch_root(err) < 0)
        return crl_err_prefix(err, "the guest's root");
    /* An image with nothing to hand the guest to fails here, before READY,
     * where the host hears why. */
    if (c->init[0] && access(c->init, X_OK) < 0)
        return crl_err_sys(err, errno,
                           "the image has no init at %s (a full system's image: corral image "
                           "build-vm)",
                           c->init);
    if (c->init[0] && c->machine_id[0] && machine_id_mount(err) < 0)
        return crl_err_prefix(err, "the guest's machine-id");
    if (!etc_done && write_etc(c, err) < 0)
        return crl_err_prefix(err, "the guest's /etc");
    if (mount_volumes(c, err) < 0)
        return crl_err_prefix(err, "the guest's volumes");
    if (set_network(c, err) < 0)
        return crl_err_prefix(err, "the guest's network");
    return 0;
}

int crl_ga_exec_init(const char *init, struct crl_err *err)
{
    /* crl_ga_init_config found it before READY */
    crl_info(NULL, "handing the guest to %s at %.3f s", init, uptime());
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    char *argv[] = {(char *)init, NULL};
    char *envp[] = {"HOME=/", "TERM=linux", NULL};
    execve(init, argv, envp);
    return crl_err_sys(err, errno, "exec %s", init);
}

/* ---- the agent as a full system's service ---- */

/* Run argv to its end (at most `secs`), its first line of output in out. */
static int run_line(char *const argv[], unsigned secs, char *out, size_t cap)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(p[1], 1);
        alarm(secs); /* survives the exec: SIGALRM ends the program */
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (pid > 0 && n + 1 < cap && (r = read(p[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    close(p[0]);
    out[n] = 0;
    out[strcspn(out, "\n")] = 0;
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The service's own cgroup (systemd delegates it): execs get leaves there. */
static void own_cgroup(void)
{
    char line[256];
    if (crl_read_file_at(AT_FDCWD, "/proc/self/cgroup", line, sizeof(line)) <= 0)
        return;
    char *path = strstr(line, "0::/");
    if (!path)
        return;
    path += 3;
    path[strcspn(path, "\n")] = 0;
    snprintf(crl_ga_leaves, sizeof(crl_ga_leaves), "/sys/fs/cgroup%s", path);
}

int crl_ga_service_boot(struct crl_err *err)
{
    if ((crl_ga_rw_fd = open(CRL_GA_SYSTEM_RW, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return crl_err_sys(err, errno,
                           "open %s (is this guest's PID 1 corral-agent's init? "
                           "--systemd serves a guest it booted)",
                           CRL_GA_SYSTEM_RW);
    own_cgroup();
    char name[128];
    crl_guest_port_name(name, sizeof(name));
    int fd = crl_guest_open_port(name, 30000);
    if (fd < 0)
        return crl_err_sys(err, errno, "virtio-serial port %s not found after 30 s", name);
    /* The host saves a template once the agent greets it: after the boot,
     * so that every clone starts from a system at rest. */
    char state[64];
    char *argv[] = {"/bin/systemctl", "is-system-running", "--wait", NULL};
    int rc = run_line(argv, 600, state, sizeof(state));
    /* and udev's workers done with every device (blkid on a dozen disks
     * is seconds under emulation), not left for each clone to finish */
    char settle_out[64];
    char *settle[] = {"/bin/udevadm", "settle", "--timeout=120", NULL};
    run_line(settle, 130, settle_out, sizeof(settle_out));
    crl_info(NULL, "the system is %s at %.3f s (systemctl: %d)", state[0] ? state : "?", uptime(),
             rc);
    if (strcmp(state, "running") != 0) {
        char *failed[] = {"/bin/systemctl", "--failed", "--no-legend", "--plain", NULL};
        char units[256];
        run_line(failed, 30, units, sizeof(units));
        crl_warn(NULL, "the system is %s: failed units begin with: %s", state, units);
    }
    return fd;
}

/* A clone's host SSH keys are its own: where the image has them (from the
 * template's boot), they are made again. */
static int ssh_host_keys(struct crl_err *err)
{
    static const char *const kinds[] = {"rsa", "ecdsa", "ed25519"};
    bool had = false;
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        char p[64];
        snprintf(p, sizeof(p), "/etc/ssh/ssh_host_%s_key", kinds[i]);
        if (unlink(p) == 0)
            had = true;
        snprintf(p, sizeof(p), "/etc/ssh/ssh_host_%s_key.pub", kinds[i]);
        unlink(p);
    }
    if (!had || access("/usr/bin/ssh-keygen", X_OK) < 0)
        return 0;
    char out[128];
    char *argv[] = {"/usr/bin/ssh-keygen", "-A", NULL};
    if (run_line(argv, 60, out, sizeof(out)) != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "ssh-keygen -A failed: %s", out);
    return 0;
}

int crl_ga_service_config(const struct crl_agent_config *c, struct crl_err *err)
{
    if (set_identity(c, err) < 0)
        return -1;
    int etc = open(CRL_GA_SYSTEM_ETC, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (etc < 0)
        return crl_err_sys(err, errno, "open %s", CRL_GA_SYSTEM_ETC);
    int r = write_etc_files_at(etc, c, true, err);
    close(etc);
    if (r < 0 || ssh_host_keys(err) < 0)
        return crl_err_prefix(err, "the guest's identity");
    if (mount_volumes(c, err) < 0)
        return crl_err_prefix(err, "the guest's volumes");
    if (set_network(c, err) < 0)
        return crl_err_prefix(err, "the guest's network");
    return 0;
}
