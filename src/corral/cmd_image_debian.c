/* corral image build-debian: a Debian root filesystem made by debootstrap,
 * imported as a one-layer image.  corral image build-vm is the same with
 * what a full OS in a vm guest boots (systemd, udev) and the guest
 * kernel's package, so its /lib/modules is the kernel's the host boots
 * guests with; the image is labelled kind "vm".
 *
 * debootstrap takes minutes, so its output is cached under
 * $XDG_CACHE_HOME/corral (else ~/.cache/corral), one directory per suite
 * and sorted package list: a rebuild with the same inputs only imports.
 * With --store DIR the rootfs goes into that store through the library;
 * otherwise corral sends corrald a docker-archive streamed from the cache:
 * a manifest and config written here, and the layer, a tar of the rootfs
 * made once and cached beside it (its digest with it). */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/util/sha256.h"
#include "../../lib/image/layer.h"
#include "../../lib/image/store.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "cli.h"

extern char **environ;

static const char help[] =
    "usage: corral image build-debian NAME[:TAG] [--suite S] [--packages A,B,...]\n"
    "                                 [--mirror URL] [--store DIR] [--json]\n"
    "\n"
    "Build a Debian image with debootstrap (minbase, plus the packages) and\n"
    "import it as NAME: one layer; env PATH, HOME=/root, LANG=C.UTF-8; cwd /;\n"
    "user 0:0; cmd /bin/bash.  debootstrap's output is cached under\n"
    "$XDG_CACHE_HOME/corral (else ~/.cache/corral) by suite and packages, so\n"
    "building the same again only imports it.  Needs root.\n"
    "\n"
    "  --suite S           Debian suite (default bookworm)\n"
    "  --packages A,B,...  packages to include beyond minbase\n"
    "  --mirror URL        Debian mirror (default: the one apt uses here, else\n"
    "                      http://deb.debian.org/debian)\n"
    "  --store DIR         import into the store DIR directly, without corrald\n"
    "  --json              print the image as JSON\n";

static const char help_vm[] =
    "usage: corral image build-vm NAME[:TAG] [--suite S] [--packages A,B,...]\n"
    "                             [--mirror URL] [--store DIR]\n"
    "                             [--kernel-manifest FILE] [--json]\n"
    "\n"
    "Build a Debian image that boots as a full OS in the vm backend\n"
    "(client.create(backend=\"vm\", image=NAME)) and import it as NAME: what\n"
    "build-debian makes, plus systemd (as /sbin/init), udev, dbus, kmod,\n"
    "iproute2, procps, e2fsprogs and the guest kernel's package, so that\n"
    "/lib/modules/VERSION is the kernel the host boots guests with.  The kernel\n"
    "package is named by the kernel manifest `corral setup microvm` (or make\n"
    "microvm-guest) wrote, and comes from this host's apt, as the guest kernel\n"
    "did (Debian ships kernel updates in SUITE-security, which debootstrap does\n"
    "not read).  No initramfs in /boot (the host boots its own), an empty\n"
    "/etc/machine-id (made on the first boot), root's password locked.  The\n"
    "image is labelled org.corral.kind=vm; 'corral image ls' shows KIND vm.\n"
    "Cached as build-debian's is.  Needs root.\n"
    "\n"
    "  --suite S               Debian suite (default bookworm)\n"
    "  --packages A,B,...      packages to include beyond those\n"
    "  --mirror URL            Debian mirror (default: the one apt uses here, else\n"
    "                          http://deb.debian.org/debian)\n"
    "  --store DIR             import into the store DIR directly, without corrald\n"
    "  --kernel-manifest FILE  the guest kernel's manifest (default\n"
    "                          build/microvm/kernel.manifest if there is one, else\n"
    "                          /var/lib/corral/microvm/kernel.manifest)\n"
    "  --json                  print the image as JSON\n";

#define MAX_PACKAGES 256

/* What build-vm adds to minbase: systemd as init, udev and kmod to find
 * devices and load modules, dbus for systemd's own tools, and the ip, ps
 * and mkfs.ext4 a guest's set-up runs.  linux-base and initramfs-tools are
 * the kernel package's dependencies (its Depends in bookworm and trixie):
 * it is installed with dpkg, which resolves nothing. */
static const char vm_packages[] = "systemd,systemd-sysv,udev,dbus,kmod,iproute2,procps,e2fsprogs,"
                                  "linux-base,initramfs-tools";

/* The guest kernel, from its manifest (scripts/microvm-kernel.sh writes it). */
struct guest_kernel {
    char package[129]; /* linux-image-6.1.0-57-cloud-amd64 */
    char version[129]; /* 6.1.0-57-cloud-amd64: its /lib/modules/<version> */
};

/* ---- inputs ---- */

static bool pkg_ok(const char *p)
{
    /* Debian policy 5.6.1: [a-z0-9][a-z0-9+.-]+ */
    size_t n = strlen(p);
    return n >= 2 && n <= 128 && ((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= '0' && p[0] <= '9')) &&
           strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789+.-") == n;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "a,b,,a" into a sorted, unique, comma-joined list (what the cache is
 * keyed by, and debootstrap's --include). */
static int packages(const char *arg, struct crl_buf *out, struct crl_err *err)
{
    cleanup_free char *copy = strdup(arg ? arg : "");
    char *list[MAX_PACKAGES];
    size_t n = 0;
    if (!copy)
        return crl_err_sys(err, ENOMEM, "--packages");
    for (char *save = NULL, *p = strtok_r(copy, ", ", &save); p; p = strtok_r(NULL, ", ", &save)) {
        if (!pkg_ok(p))
            return crl_err_set(err, CRL_E_INVALID, "--packages: '%s' is not a Debian package name",
                               p);
        if (n == MAX_PACKAGES)
            return crl_err_set(err, CRL_E_INVALID, "--packages: at most %d", MAX_PACKAGES);
        list[n++] = p;
    }
    qsort(list, n, sizeof(list[0]), cmp_str);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(list[i], list[i - 1]) != 0)
            crl_buf_printf(out, "%s%s", out->len ? "," : "", list[i]);
    return 0;
}

/* The mirror apt already uses: deb822 sources first, then sources.list. */
static void detect_mirror(char *out, size_t cap)
{
    snprintf(out, cap, "http://deb.debian.org/debian");
    char line[1024];
    DIR *d = opendir("/etc/apt/sources.list.d");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 8 || strcmp(de->d_name + n - 8, ".sources") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof(path), "/etc/apt/sources.list.d/%s", de->d_name);
        FILE *f = fopen(path, "re");
        while (f && fgets(line, sizeof(line), f)) {
            char uri[512];
            size_t ul;
            if (sscanf(line, "URIs: %511s", uri) == 1 && (ul = strlen(uri)) >= 6 &&
                strcmp(uri + ul - 6, "debian") == 0) {
                snprintf(out, cap, "%s", uri);
                fclose(f);
                closedir(d);
                return;
            }
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    FILE *f = fopen("/etc/apt/sources.list", "re");
    while (f && fgets(line, sizeof(line), f)) {
        char kw[16], uri[512];
        if (sscanf(line, "%15s %511s", kw, uri) != 2 || strcmp(kw, "deb") != 0)
            continue;
        size_t ul = strlen(uri);
        if (ul && uri[ul - 1] == '/')
            uri[--ul] = 0;
        if (ul >= 6 && strcmp(uri + ul - 6, "debian") == 0) {
            snprintf(out, cap, "%s", uri);
            break;
        }
    }
    if (f)
        fclose(f);
}

static int cache_root(char *out, size_t cap, struct crl_err *err)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0] == '/')
        snprintf(out, cap, "%s/corral", xdg);
    else if (home && home[0] == '/')
        snprintf(out, cap, "%s/.cache/corral", home);
    else
        return crl_err_set(err, CRL_E_INVALID, "no cache directory: set XDG_CACHE_HOME or HOME");
    if (crl_mkdir_p(out, 0700) < 0)
        return crl_err_sys(err, errno, "mkdir %s", out);
    return 0;
}

/* A manifest's `key=` line's value into out; false if none or not made of
 * `allowed` characters. */
static bool manifest_value(const char *text, const char *key, const char *allowed, char *out,
                           size_t cap)
{
    size_t kl = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, key, kl) != 0 || l[kl] != '=')
            continue;
        const char *v = l + kl + 1;
        size_t n = strcspn(v, "\n");
        if (n == 0 || n >= cap || strspn(v, allowed) < n)
            return false;
        memcpy(out, v, n);
        out[n] = 0;
        return true;
    }
    return false;
}

static int read_kernel_manifest(const char *path, struct guest_kernel *k, struct crl_err *err)
{
    cleanup_free char *text = NULL;
    size_t len = 0;
    struct crl_err e2 = CRL_ERR_INIT;
    if (crl_read_file_alloc(path, 64u << 10, &text, &len, &e2) < 0)
        return crl_err_set(err, e2.code,
                           "the guest kernel's manifest: %s: run `make microvm-guest` (in a "
                           "build tree) or `corral setup microvm` to fetch the guest kernel, or "
                           "name its manifest with --kernel-manifest FILE",
                           e2.msg);
    static const char name_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789+.-";
    if (!manifest_value(text, "package", name_chars, k->package, sizeof(k->package)) ||
        !pkg_ok(k->package) || strncmp(k->package, "linux-image-", 12) != 0)
        return crl_err_set(err, CRL_E_INVALID,
                           "the guest kernel's manifest %s names no kernel package "
                           "(package=linux-image-...)",
                           path);
    if (!manifest_value(text, "version", name_chars, k->version, sizeof(k->version)))
        return crl_err_set(err, CRL_E_INVALID,
                           "the guest kernel's manifest %s has no version= line", path);
    return 0;
}

/* ---- debootstrap, cached ---- */

/* Remove the files (not directories) in dir/sub, those ending in `suffix`
 * if it is not NULL: apt's downloads and lists, which an image need not
 * carry. */
static void prune(const char *dir, const char *sub, const char *suffix)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t n = strlen(de->d_name), sl = suffix ? strlen(suffix) : 0;
        if (de->d_type != DT_REG || (suffix && (n < sl || strcmp(de->d_name + n - sl, suffix))))
            continue;
        unlinkat(dirfd(d), de->d_name, 0);
    }
    if (d)
        closedir(d);
}

/* Run argv (in `dir` unless NULL, with `envp`), its output appended to
 * `log`.  On a failure the log's end, which says why, goes to stderr and
 * the error names `what`; `install` says how to get a program that is not
 * there. */
static int run_logged(char *const argv[], const char *dir, char *const envp[], const char *log,
                      const char *what, const char *install, struct crl_err *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    if (dir)
        posix_spawn_file_actions_addchdir_np(&fa, dir);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return crl_err_sys(err, rc, "running %s%s%s%s", argv[0], install ? " (" : "",
                           install ? install : "", install ? ")" : "");
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return crl_err_sys(err, errno, "waitpid(%s)", argv[0]);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    /* its log's end says why */
    cleanup_free char *text = NULL;
    size_t len = 0;
    struct crl_err e2 = CRL_ERR_INIT;
    if (crl_read_file_alloc(log, 64u << 20, &text, &len, &e2) == 0 && len) {
        size_t start = len, lines = 0;
        while (start > 0 && lines < 15)
            if (text[--start] == '\n')
                lines++;
        fprintf(stderr, "%s\n", text + start);
    }
    return crl_err_set(err, CRL_E_INTERNAL, "%s failed (status 0x%x; its log: %s)", what,
                       (unsigned)status, log);
}

static int run_debootstrap(const char *suite, const char *pkgs, const char *mirror,
                           const char *target, const char *log, struct crl_err *err)
{
    cleanup_free char *include = NULL;
    if (pkgs[0] && asprintf(&include, "--include=%s", pkgs) < 0) {
        include = NULL;
        return crl_err_sys(err, ENOMEM, "debootstrap");
    }
    char *argv[] = {(char *)"debootstrap",
                    (char *)"--variant=minbase",
                    include ? include : (char *)suite,
                    include ? (char *)suite : (char *)target,
                    include ? (char *)target : (char *)mirror,
                    include ? (char *)mirror : NULL,
                    NULL};
    char what[64];
    snprintf(what, sizeof(what), "debootstrap %s", suite);
    return run_logged(argv, NULL, environ, log, what, "apt-get install debootstrap", err);
}

/* ---- what build-vm does to the tree ---- */

/* What programs run in the tree get: not the caller's environment (a PATH
 * without sbin fails dpkg); INITRD=No tells the kernel's postinst hook to
 * make no initramfs, which a guest never boots (the host boots its own). */
static char *const chroot_env[] = {
    (char *)"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    (char *)"HOME=/root",
    (char *)"LC_ALL=C",
    (char *)"DEBIAN_FRONTEND=noninteractive",
    (char *)"INITRD=No",
    NULL};

/* The kernel package into rootfs: downloaded by this host's apt (where
 * `corral setup microvm` got the guest kernel: Debian's kernel updates are
 * in SUITE-security, a suite and mirror debootstrap does not read) into
 * the tree's apt cache, which prune() empties, then dpkg -i in the tree,
 * which runs its postinst (depmod). */
static int install_kernel(const char *rootfs, const struct guest_kernel *k, const char *log,
                          struct crl_err *err)
{
    char dir[4400], deb[4700], what[200];
    snprintf(dir, sizeof(dir), "%s/var/cache/apt/archives", rootfs);
    fprintf(stderr, "corral: %s, from this host's apt, into the image\n", k->package);
    /* apt would drop to _apt to download, which cannot write to a cache
     * in root's 0700 home; the .deb is checked against apt's signed lists
     * all the same */
    char *get[] = {(char *)"apt-get",
                   (char *)"download",
                   (char *)"-q",
                   (char *)"-o",
                   (char *)"APT::Sandbox::User=root",
                   (char *)k->package,
                   NULL};
    snprintf(what, sizeof(what), "apt-get download %s (is it in this host's apt sources?)",
             k->package);
    if (run_logged(get, dir, environ, log, what, NULL, err) < 0)
        return -1;
    /* apt names it PACKAGE_VERSION_ARCH.deb */
    size_t pl = strlen(k->package);
    DIR *d = opendir(dir);
    struct dirent *de;
    deb[0] = 0;
    while (d && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (strncmp(de->d_name, k->package, pl) == 0 && de->d_name[pl] == '_' && n > 4 &&
            strcmp(de->d_name + n - 4, ".deb") == 0)
            snprintf(deb, sizeof(deb), "/var/cache/apt/archives/%s", de->d_name);
    }
    if (d)
        closedir(d);
    if (!deb[0])
        return crl_err_set(err, CRL_E_INTERNAL, "apt-get download %s left no .deb in %s",
                           k->package, dir);
    char *install[] = {
        (char *)"chroot", (char *)rootfs, (char *)"dpkg", (char *)"--install", deb, NULL};
    snprintf(what, sizeof(what), "dpkg --install %s in the image", k->package);
    if (run_logged(install, NULL, chroot_env, log, what, NULL, err) < 0)
        return -1;
    /* the postinst runs depmod; a kernel whose postinst did not gets it here */
    char path[4700];
    snprintf(path, sizeof(path), "%s/lib/modules/%s", rootfs, k->version);
    if (access(path, F_OK) < 0)
        return crl_err_set(err, CRL_E_INVALID,
                           "the kernel package %s has no /lib/modules/%s (the version its "
                           "manifest names)",
                           k->package, k->version);
    snprintf(path, sizeof(path), "%s/lib/modules/%s/modules.dep", rootfs, k->version);
    char *depmod[] = {(char *)"chroot", (char *)rootfs, (char *)"depmod", (char *)k->version, NULL};
    if (access(path, F_OK) < 0 &&
        run_logged(depmod, NULL, chroot_env, log, "depmod", NULL, err) < 0)
        return -1;
    return 0;
}

/* Remove /boot/initrd.img-*, and the /initrd.img links to them. */
static int remove_initrd(const char *rootfs, struct crl_err *err)
{
    char path[4300];
    snprintf(path, sizeof(path), "%s/boot", rootfs);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strncmp(de->d_name, "initrd.img-", 11) == 0 && unlinkat(dirfd(d), de->d_name, 0) < 0) {
            int e = errno;
            closedir(d);
            return crl_err_sys(err, e, "removing %s/%s", path, de->d_name);
        }
    if (d)
        closedir(d);
    static const char *const links[] = {"initrd.img", "initrd.img.old", "boot/initrd.img",
                                        "boot/initrd.img.old"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(links); i++) {
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", rootfs, links[i]);
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && unlink(path) < 0)
            return crl_err_sys(err, errno, "removing %s", path);
    }
    return 0;
}

/* An empty /etc/machine-id: systemd's sign of a first boot, when it makes
 * one up (the guest agent writes the sandbox's own); the one systemd's
 * postinst made here would be every guest's.  D-Bus reads its own copy
 * first, which dbus's postinst wrote: it becomes a link to the real one,
 * as Debian's cloud images have it. */
static int empty_machine_id(const char *rootfs, struct crl_err *err)
{
    char path[4300];
    snprintf(path, sizeof(path), "%s/etc/machine-id", rootfs);
    if (unlink(path) < 0 && errno != ENOENT)
        return crl_err_sys(err, errno, "removing %s", path);
    cleanup_close int fd =
        crl_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0444);
    if (fd < 0)
        return crl_err_sys(err, errno, "creating %s", path);
    struct stat st;
    snprintf(path, sizeof(path), "%s/var/lib/dbus/machine-id", rootfs);
    if (lstat(path, &st) == 0 && !S_ISLNK(st.st_mode) &&
        (unlink(path) < 0 || symlink("/etc/machine-id", path) < 0))
        return crl_err_sys(err, errno, "linking %s to /etc/machine-id", path);
    return 0;
}

/* root's password locked.  debootstrap leaves it '*' (no password opens
 * it), and then /etc/shadow stays as it is; a tree that has one, or an
 * empty one, gets passwd --lock. */
static int lock_root(const char *rootfs, const char *log, struct crl_err *err)
{
    char path[4300];
    snprintf(path, sizeof(path), "%s/etc/shadow", rootfs);
    cleanup_free char *text = NULL;
    size_t len = 0;
    if (crl_read_file_alloc(path, 4u << 20, &text, &len, err) < 0)
        return -1;
    for (const char *l = text; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, "root:", 5) == 0 && (l[5] == '*' || l[5] == '!'))
            return 0;
    char *argv[] = {(char *)"chroot", (char *)rootfs, (char *)"passwd",
                    (char *)"--lock", (char *)"root", NULL};
    return run_logged(argv, NULL, chroot_env, log, "passwd --lock root", NULL, err);
}

/* build-vm's work on a debootstrap'd tree. */
static int vm_finish(const char *rootfs, const struct guest_kernel *k, const char *log,
                     struct crl_err *err)
{
    if (install_kernel(rootfs, k, log, err) < 0 || remove_initrd(rootfs, err) < 0 ||
        empty_machine_id(rootfs, err) < 0 || lock_root(rootfs, log, err) < 0)
        return -1;
    return 0;
}

/* The cached rootfs for suite+pkgs at entry/rootfs, made if missing;
 * with `kernel`, made a vm image's (vm_finish()) before it is marked
 * complete. */
static int cached_rootfs(const char *entry, const char *suite, const char *pkgs, const char *mirror,
                         const struct guest_kernel *kernel, struct crl_err *err)
{
    char done[4200], tmp[4200], path[4300];
    snprintf(done, sizeof(done), "%s/complete", entry);
    if (access(done, F_OK) == 0) {
        fprintf(stderr, "corral: debian %s%s%s: cached in %s\n", suite, pkgs[0] ? " + " : "", pkgs,
                entry);
        return 0;
    }
    if (geteuid() != 0)
        return crl_err_set(err, CRL_E_FORBIDDEN, "debootstrap needs root");
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", entry, (int)getpid());
    crl_rm_rf_at(AT_FDCWD, tmp);
    if (crl_mkdir_p(tmp, 0755) < 0)
        return crl_err_sys(err, errno, "mkdir %s", tmp);
    fprintf(stderr, "corral: debootstrap %s minbase%s%s from %s (a few minutes, once)\n", suite,
            pkgs[0] ? " + " : "", pkgs, mirror);
    char log[4300];
    snprintf(path, sizeof(path), "%s/rootfs", tmp);
    snprintf(log, sizeof(log), "%s.log", entry);
    unlink(log);
    if (run_debootstrap(suite, pkgs, mirror, path, log, err) < 0 ||
        (kernel && vm_finish(path, kernel, log, err) < 0)) {
        crl_rm_rf_at(AT_FDCWD, tmp);
        return -1;
    }
    unlink(log);
    prune(path, "var/cache/apt/archives", ".deb");
    prune(path, "var/lib/apt/lists", NULL);
    snprintf(path, sizeof(path), "%s/complete", tmp);
    char what[4096];
    snprintf(what, sizeof(what), "%s %s%s%s\n", suite, pkgs, kernel ? " " : "",
             kernel ? kernel->package : "");
    cleanup_close int fd = crl_openat(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || crl_write_full(fd, what, strlen(what)) < 0 || fsync(fd) < 0) {
        int e = errno;
        crl_rm_rf_at(AT_FDCWD, tmp);
        return crl_err_sys(err, e, "writing %s", path);
    }
    crl_rm_rf_at(AT_FDCWD, entry); /* a half-made one of a crashed run */
    if (rename(tmp, entry) < 0) {
        int e = errno;
        crl_rm_rf_at(AT_FDCWD, tmp);
        return crl_err_sys(err, e, "rename %s %s", tmp, entry);
    }
    return 0;
}

static json_t *image_config(enum crl_debian_flavour flavour)
{
    json_t *c =
        json_pack("{s:[s,s,s], s:s, s:s, s:[s]}", "env",
                  "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                  "LANG=C.UTF-8", "cwd", "/", "user", "0:0", "cmd", "/bin/bash");
    if (c && flavour == CRL_DEBIAN_VM)
        json_object_set_new(c, "kind", json_string("vm"));
    return c;
}

/* ---- the layer: a tar of the rootfs, cached with its digest ---- */

/* entry/layer.tar and its diff_id in entry/layer.diffid, made once. */
static int cached_layer(const char *entry, char diff_id[CRL_DIGEST_LEN + 1], struct crl_err *err)
{
    char tar[4200], idf[4200], tmp[4200], rootfs[4200];
    snprintf(tar, sizeof(tar), "%s/layer.tar", entry);
    snprintf(idf, sizeof(idf), "%s/layer.diffid", entry);
    char got[CRL_DIGEST_LEN + 2];
    if (crl_read_file_at(AT_FDCWD, idf, got, sizeof(got)) == CRL_DIGEST_LEN &&
        crl_digest_valid(got) && access(tar, R_OK) == 0) {
        memcpy(diff_id, got, CRL_DIGEST_LEN + 1);
        return 0;
    }
    snprintf(tmp, sizeof(tmp), "%s/.layer.tar.%d", entry, (int)getpid());
    snprintf(rootfs, sizeof(rootfs), "%s/rootfs", entry);
    int rc = 0;
    {
        cleanup_close int fd = crl_openat(AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0)
            rc = crl_err_sys(err, errno, "%s", tmp);
        else
            rc = crl_layer_from_dir(rootfs, fd, diff_id, err);
    }
    if (rc == 0 && rename(tmp, tar) < 0)
        rc = crl_err_sys(err, errno, "rename %s", tar);
    if (rc == 0) {
        cleanup_close int fd = crl_openat(AT_FDCWD, idf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || crl_write_full(fd, diff_id, CRL_DIGEST_LEN) < 0)
            rc = crl_err_sys(err, errno, "writing %s", idf);
    }
    if (rc < 0)
        unlink(tmp);
    return rc;
}

/* ---- a docker-archive, streamed: manifest, config, then the layer ---- */

static int ustar_header(char h[512], const char *name, uint64_t size, uint64_t mtime)
{
    if (strlen(name) >= 100 || size >= (1ull << 33))
        return -1;
    memset(h, 0, 512);
    memcpy(h, name, strlen(name));
    snprintf(h + 100, 8, "%07o", 0644u);
    snprintf(h + 108, 8, "%07o", 0u);
    snprintf(h + 116, 8, "%07o", 0u);
    snprintf(h + 124, 12, "%011llo", (unsigned long long)size);
    snprintf(h + 136, 12, "%011llo", (unsigned long long)mtime);
    memset(h + 148, ' ', 8);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    return 0;
}

static void ustar_file(struct crl_buf *b, const char *name, const char *data, size_t len,
                       uint64_t mtime)
{
    char h[512];
    static const char pad[512];
    ustar_header(h, name, len, mtime);
    crl_buf_append(b, h, sizeof(h));
    crl_buf_append(b, data, len);
    crl_buf_append(b, pad, (512 - len % 512) % 512);
}

struct archive_src {
    struct crl_buf head, tail; /* before and after the layer's bytes */
    size_t head_off, tail_off;
    int fd;
    uint64_t left; /* of the layer */
};

static ssize_t archive_source(void *ctx, char *buf, size_t len, struct crl_err *err)
{
    struct archive_src *s = ctx;
    if (s->head_off < s->head.len) {
        size_t n = s->head.len - s->head_off < len ? s->head.len - s->head_off : len;
        memcpy(buf, s->head.data + s->head_off, n);
        s->head_off += n;
        return (ssize_t)n;
    }
    if (s->left) {
        size_t want = s->left < len ? (size_t)s->left : len;
        ssize_t n;
        while ((n = read(s->fd, buf, want)) < 0 && errno == EINTR)
            ;
        if (n < 0)
            return crl_err_sys(err, errno, "reading the layer");
        if (n == 0)
            return crl_err_set(err, CRL_E_INTERNAL, "the cached layer shrank while it was sent");
        s->left -= (uint64_t)n;
        return n;
    }
    size_t n = s->tail.len - s->tail_off < len ? s->tail.len - s->tail_off : len;
    memcpy(buf, s->tail.data + s->tail_off, n);
    s->tail_off += n;
    return (ssize_t)n;
}

static int post_archive(const char *entry, const char *name, json_t *cfg, json_t **out,
                        struct crl_err *err)
{
    char diff_id[CRL_DIGEST_LEN + 1], tar[4200];
    if (cached_layer(entry, diff_id, err) < 0)
        return -1;
    snprintf(tar, sizeof(tar), "%s/layer.tar", entry);
    cleanup_close int fd = crl_openat(AT_FDCWD, tar, O_RDONLY, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return crl_err_sys(err, errno, "%s", tar);
    if ((uint64_t)st.st_size >= (1ull << 33))
        return crl_err_set(err, CRL_E_TOO_LARGE, "the layer is over 8 GiB; use --store");
    /* the config the offline path makes too, keys sorted: one tree, one id */
    json_auto_t *config = crl_store_config_json(cfg, diff_id);
    cleanup_free char *config_text =
        config ? json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (!config_text)
        return crl_err_set(err, CRL_E_INTERNAL, "encoding the image config");
    char config_digest[CRL_DIGEST_LEN + 1], config_name[80], layer_name[80];
    crl_sha256_buf(config_text, strlen(config_text), config_digest);
    snprintf(config_name, sizeof(config_name), "%s.json", crl_digest_hex(config_digest));
    snprintf(layer_name, sizeof(layer_name), "%s/layer.tar", crl_digest_hex(diff_id));
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (crl_store_name_canon(name, canon, err) < 0)
        return -1;
    json_auto_t *manifest = json_pack("[{s:s, s:[s], s:[s]}]", "Config", config_name, "RepoTags",
                                      canon, "Layers", layer_name);
    cleanup_free char *manifest_text = manifest ? json_dumps(manifest, JSON_COMPACT) : NULL;
    if (!manifest_text)
        return crl_err_set(err, CRL_E_INTERNAL, "encoding the manifest");

    struct archive_src src = {.fd = fd, .left = (uint64_t)st.st_size};
    crl_buf_init(&src.head, CRL_BUF_UNBOUNDED);
    crl_buf_init(&src.tail, CRL_BUF_UNBOUNDED);
    uint64_t mtime = (uint64_t)st.st_mtime;
    ustar_file(&src.head, "manifest.json", manifest_text, strlen(manifest_text), mtime);
    ustar_file(&src.head, config_name, config_text, strlen(config_text), mtime);
    char h[512];
    static const char zeros[1024];
    ustar_header(h, layer_name, (uint64_t)st.st_size, mtime);
    crl_buf_append(&src.head, h, sizeof(h));
    crl_buf_append(&src.tail, zeros, (512 - (size_t)st.st_size % 512) % 512);
    crl_buf_append(&src.tail, zeros, sizeof(zeros)); /* the end of the archive */
    long long total = (long long)(src.head.len + (size_t)st.st_size + src.tail.len);

    cleanup_client struct crl_client *cl = NULL;
    int rc = crl_client_open(NULL, NULL, &cl, err);
    if (rc == 0) {
        crl_cli_catch_signals(cl);
        rc = crl_client_image_import(cl, name, NULL, archive_source, &src, total, out, err);
    }
    crl_buf_free(&src.head);
    crl_buf_free(&src.tail);
    return rc;
}

int crl_cmd_image_build_debian(int argc, char **argv, enum crl_debian_flavour flavour)
{
    enum {
        OPT_SUITE = CRL_CLI_OPT_OTHER,
        OPT_PACKAGES,
        OPT_MIRROR,
        OPT_STORE,
        OPT_JSON,
        OPT_KERNEL_MANIFEST
    };
    static const struct option opts[] = {
        {"suite", required_argument, 0, OPT_SUITE},
        {"packages", required_argument, 0, OPT_PACKAGES},
        {"mirror", required_argument, 0, OPT_MIRROR},
        {"store", required_argument, 0, OPT_STORE},
        {"json", no_argument, 0, OPT_JSON},
        {"kernel-manifest", required_argument, 0, OPT_KERNEL_MANIFEST},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    bool vm = flavour == CRL_DEBIAN_VM;
    const char *cmd = vm ? "build-vm" : "build-debian";
    const char *suite = "bookworm", *pkg_arg = NULL, *store = NULL, *manifest = NULL;
    char mirror[512] = "";
    bool as_json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_SUITE: suite = optarg; break;
        case OPT_PACKAGES: pkg_arg = optarg; break;
        case OPT_MIRROR: snprintf(mirror, sizeof(mirror), "%s", optarg); break;
        case OPT_STORE: store = optarg; break;
        case OPT_JSON: as_json = true; break;
        case OPT_KERNEL_MANIFEST:
            if (!vm)
                return crl_cli_usage(argv[0], "--kernel-manifest is build-vm's option");
            manifest = optarg;
            break;
        case 'h': return crl_cli_help(vm ? help_vm : help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (argc - optind != 1)
        return crl_cli_usage(argv[0], argc == optind ? "needs a NAME[:TAG]" : "takes one NAME");
    const char *name = argv[optind];
    struct crl_err err = CRL_ERR_INIT;
    char canon[CRL_IMAGE_NAME_MAX + 1];
    if (crl_store_name_canon(name, canon, &err) < 0)
        return crl_cli_usage(argv[0], "%s", err.msg);
    size_t sl = strlen(suite);
    if (!sl || sl > 32 || strspn(suite, "abcdefghijklmnopqrstuvwxyz0123456789-") != sl)
        return crl_cli_usage(argv[0], "--suite '%s' is not a Debian suite name", suite);
    struct guest_kernel kernel;
    if (vm) {
        /* a build tree's (make microvm-guest), else corrald's (corral setup
         * microvm) */
        if (!manifest)
            manifest = access("build/microvm/kernel.manifest", F_OK) == 0
                           ? "build/microvm/kernel.manifest"
                           : "/var/lib/corral/microvm/kernel.manifest";
        if (read_kernel_manifest(manifest, &kernel, &err) < 0) {
            crl_err_prefix(&err, "%s %s", cmd, canon);
            return crl_cli_fail(&err);
        }
    }
    cleanup_free char *all_pkgs = NULL;
    if (vm && asprintf(&all_pkgs, "%s,%s", vm_packages, pkg_arg ? pkg_arg : "") < 0)
        all_pkgs = NULL;
    if (vm && !all_pkgs) {
        crl_err_sys(&err, ENOMEM, "%s", cmd);
        return crl_cli_fail(&err);
    }
    struct crl_buf pkgs;
    crl_buf_init(&pkgs, CRL_BUF_UNBOUNDED);
    if (packages(vm ? all_pkgs : pkg_arg, &pkgs, &err) < 0) {
        crl_buf_free(&pkgs);
        return crl_cli_usage(argv[0], "%s", err.msg);
    }
    if (!mirror[0])
        detect_mirror(mirror, sizeof(mirror));

    /* The cache entry: suite and sorted packages, and for build-vm its
     * flavour and kernel, hashed into its name. */
    char root[4096], entry[4200], key[CRL_DIGEST_LEN + 1];
    cleanup_free char *keytext = NULL;
    const char *pkg_list = pkgs.len ? pkgs.data : "";
    if (asprintf(&keytext, "%s\n%s%s%s", suite, pkg_list, vm ? "\nvm " : "",
                 vm ? kernel.package : "") < 0)
        keytext = NULL;
    json_auto_t *cfg = image_config(flavour);
    json_auto_t *out = NULL;
    int rc = keytext && cfg ? cache_root(root, sizeof(root), &err)
                            : crl_err_sys(&err, ENOMEM, "%s", cmd);
    if (rc == 0) {
        crl_sha256_buf(keytext, strlen(keytext), key);
        snprintf(entry, sizeof(entry), "%s/debian-%s%s-%.12s", root, vm ? "vm-" : "", suite,
                 crl_digest_hex(key));
        rc = cached_rootfs(entry, suite, pkg_list, mirror, vm ? &kernel : NULL, &err);
    }
    if (rc == 0 && store) {
        char rootfs[4300];
        struct crl_store *s = NULL;
        snprintf(rootfs, sizeof(rootfs), "%s/rootfs", entry);
        rc = crl_store_open(store, true, &s, &err);
        if (rc == 0)
            rc = crl_store_import_rootfs(s, rootfs, cfg, canon, &out, &err);
        if (s)
            crl_store_close(s);
    } else if (rc == 0) {
        rc = post_archive(entry, canon, cfg, &out, &err);
        if (rc < 0 && crl_cli_interrupted) {
            crl_buf_free(&pkgs);
            return 128 + crl_cli_interrupted;
        }
    }
    crl_buf_free(&pkgs);
    if (rc < 0) {
        crl_err_prefix(&err, "%s %s", cmd, canon);
        return crl_cli_fail(&err);
    }
    if (as_json)
        crl_cli_print_json(out);
    else
        printf("%s\n", canon);
    return 0;
}
