/* lib/helper/tar: crl_tar_apply, a checkpoint's change set applied over a
 * tree.  Archives are built here with libarchive's writer, applied into a
 * fresh directory per case, and the tree is checked: what is extracted and
 * how exactly (owners, modes, setuid, mtimes, xattrs, links), whiteouts and
 * opaque directories, and every refusal (absolute paths, '..', symlink
 * escapes, hard links out, devices), with nothing written outside. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../../lib/core/backend.h"
#include "../../lib/helper/tar.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

/* Every case works in root/<case>/tree; root/<case>/outside stands for the host. */
static char root[PATH_MAX];

/* ---- building archives ---- */

struct tb {
    struct archive *a;
    int fd;
};

static void tb_begin(struct tb *t)
{
    t->fd = memfd_create("tar", MFD_CLOEXEC);
    t->a = archive_write_new();
    if (t->fd < 0 || !t->a || archive_write_set_format_pax(t->a) != ARCHIVE_OK ||
        archive_write_open_fd(t->a, t->fd) != ARCHIVE_OK)
        bail_out("building a tar");
}

struct ent {
    unsigned type; /* AE_IF*; 0: a regular file */
    const char *path;
    mode_t mode;
    uid_t uid;
    gid_t gid;
    const char *data;     /* a file's contents */
    const char *symlink;  /* a symlink's target */
    const char *hardlink; /* a hard link's target */
    time_t mtime;
    const char *xattr[6]; /* name, value pairs */
};

static void tb_add(struct tb *t, struct ent e)
{
    struct archive_entry *ae = archive_entry_new();
    archive_entry_set_pathname(ae, e.path);
    unsigned type = e.type ? e.type : AE_IFREG;
    archive_entry_set_filetype(ae, type);
    archive_entry_set_perm(ae, e.mode ? e.mode : (type == AE_IFDIR ? 0755 : 0644));
    archive_entry_set_uid(ae, e.uid);
    archive_entry_set_gid(ae, e.gid);
    archive_entry_set_mtime(ae, e.mtime ? e.mtime : 1500000000, 0);
    if (e.symlink)
        archive_entry_set_symlink(ae, e.symlink);
    if (e.hardlink)
        archive_entry_set_hardlink(ae, e.hardlink);
    if (type == AE_IFCHR || type == AE_IFBLK)
        archive_entry_set_rdev(ae, makedev(1, 3));
    for (int i = 0; i < 6 && e.xattr[i]; i += 2)
        archive_entry_xattr_add_entry(ae, e.xattr[i], e.xattr[i + 1], strlen(e.xattr[i + 1]));
    size_t len = e.data ? strlen(e.data) : 0;
    archive_entry_set_size(ae, type == AE_IFREG && !e.hardlink ? (la_int64_t)len : 0);
    if (archive_write_header(t->a, ae) != ARCHIVE_OK)
        bail_out(archive_error_string(t->a));
    if (len && type == AE_IFREG && !e.hardlink)
        archive_write_data(t->a, e.data, len);
    archive_entry_free(ae);
}

/* Close the archive: its fd, at offset 0. */
static int tb_end(struct tb *t)
{
    archive_write_close(t->a);
    archive_write_free(t->a);
    lseek(t->fd, 0, SEEK_SET);
    return t->fd;
}

/* ---- the tree ---- */

static char tree[PATH_MAX], outside[PATH_MAX];

/* A fresh root/<name>/{tree,outside}, and the cwd in tree. */
static void fresh(const char *name)
{
    snprintf(tree, sizeof(tree), "%s/%s/tree", root, name);
    snprintf(outside, sizeof(outside), "%s/%s/outside", root, name);
    if (crl_mkdir_p(tree, 0755) < 0 || crl_mkdir_p(outside, 0755) < 0 || chdir(tree) < 0)
        bail_out("fresh tree");
    int fd = open("../outside/victim", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, "host", 4) != 4)
        bail_out("outside/victim");
    close(fd);
}

static void put(const char *path, const char *data)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || crl_write_full(fd, data, strlen(data)) < 0)
        bail_out(path);
    close(fd);
}

static const char *get(const char *path)
{
    static char buf[256];
    if (crl_read_file_at(AT_FDCWD, path, buf, sizeof(buf)) < 0)
        return NULL;
    return buf;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* The outside is as fresh() made it: one file, "host". */
static void outside_untouched(void)
{
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/victim", outside);
    is_str(get(p), "host", "outside/victim is untouched");
    int n = 0;
    DIR *d = opendir(outside);
    for (struct dirent *de; d && (de = readdir(d));)
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    is_int(n, 1, "nothing was created outside the tree");
}

static int apply(int fd, unsigned flags, char *msg, size_t cap)
{
    unsigned long n;
    int code = crl_tar_apply(fd, flags, &n, msg, cap);
    close(fd);
    return code;
}

/* ---- cases ---- */

static void test_extract_exact(void)
{
    fresh("exact");
    struct tb t;
    tb_begin(&t);
    tb_add(&t, (struct ent){.type = AE_IFDIR,
                            .path = "./etc/",
                            .mode = 0750,
                            .uid = 1000,
                            .gid = 1001,
                            .mtime = 1400000000});
    tb_add(&t, (struct ent){.path = "etc/x",
                            .data = "hello",
                            .mode = 0640,
                            .uid = 1000,
                            .gid = 1001,
                            .mtime = 1300000000,
                            .xattr = {"user.note", "kept", "trusted.secret", "dropped",
                                      "user.overlay.opaque", "y"}});
    tb_add(&t, (struct ent){.path = "etc/suid", .data = "#!", .mode = 04755, .uid = 0});
    tb_add(&t, (struct ent){.path = "etc/sgid", .data = "#!", .mode = 02755, .uid = 7, .gid = 7});
    tb_add(&t, (struct ent){.type = AE_IFLNK, .path = "etc/link", .symlink = "/etc/passwd"});
    tb_add(&t, (struct ent){.path = "etc/hard", .hardlink = "etc/x"});
    tb_add(&t, (struct ent){.path = "./", .type = AE_IFDIR, .mode = 0700}); /* the root: kept */
    char msg[512];
    unsigned long n = 0;
    int fd = tb_end(&t);
    int code = crl_tar_apply(fd, CRL_TAR_APPLY_OWNERS, &n, msg, sizeof(msg));
    close(fd);
    if (!is_int(code, CRL_STREAM_OK, "a plain change set applies"))
        diag("%s", msg);
    is_int(n, 6, "six entries counted (the root is not)");
    is_str(msg, "entries=6", "the message says how many");
    struct stat st;
    ok(stat("etc", &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0750 &&
           st.st_uid == 1000 && st.st_gid == 1001 && st.st_mtime == 1400000000,
       "a directory: mode, owner and mtime (set after its contents)");
    ok(stat("etc/x", &st) == 0 && (st.st_mode & 07777) == 0640 && st.st_uid == 1000 &&
           st.st_gid == 1001 && st.st_mtime == 1300000000 && st.st_nlink == 2,
       "a file: mode, owner, mtime, and its hard link");
    is_str(get("etc/x"), "hello", "its contents");
    char v[32] = "";
    ssize_t vl = getxattr("etc/x", "user.note", v, sizeof(v) - 1);
    ok(vl == 4 && memcmp(v, "kept", 4) == 0, "user.* xattrs are restored");
    ok(getxattr("etc/x", "trusted.secret", v, sizeof(v)) < 0 && errno == ENODATA,
       "trusted.* xattrs are dropped");
    ok(getxattr("etc/x", "user.overlay.opaque", v, sizeof(v)) < 0 && errno == ENODATA,
       "user.overlay.* (overlayfs' own) is dropped");
    ok(stat("etc/suid", &st) == 0 && (st.st_mode & 07777) == 04755 && st.st_uid == 0,
       "setuid is kept");
    ok(stat("etc/sgid", &st) == 0 && (st.st_mode & 07777) == 02755 && st.st_gid == 7,
       "setgid is kept");
    char target[64] = "";
    ok(readlink("etc/link", target, sizeof(target) - 1) > 0 && !strcmp(target, "/etc/passwd"),
       "a symlink keeps its target, absolute or not (it is only resolved inside)");
    struct stat a, b;
    ok(stat("etc/hard", &a) == 0 && stat("etc/x", &b) == 0 && a.st_ino == b.st_ino,
       "a hard link is a link");
    ok(stat(".", &st) == 0 && (st.st_mode & 07777) == 0755, "the root itself is never changed");
    outside_untouched();
}

static void test_whiteouts(void)
{
    fresh("whiteouts");
    mkdir("a", 0755);
    put("a/keep", "k");
    put("a/gone", "g");
    crl_mkdir_p("a/gonedir/sub", 0755);
    put("a/gonedir/sub/x", "x");
    symlink("../../outside", "a/gonelink");
    put("top", "t");
    struct tb t;
    tb_begin(&t);
    tb_add(&t, (struct ent){.type = AE_IFDIR, .path = "a", .mtime = 1234567890});
    tb_add(&t, (struct ent){.path = "a/.wh.gone"});
    tb_add(&t, (struct ent){.path = "a/.wh.gonedir"});
    tb_add(&t, (struct ent){.path = "a/.wh.gonelink"});
    tb_add(&t, (struct ent){.path = "a/.wh.never-there"});
    tb_add(&t, (struct ent){.path = ".wh.top"});
    char msg[512];
    int code = apply(tb_end(&t), CRL_TAR_APPLY_OWNERS, msg, sizeof(msg));
    if (!is_int(code, CRL_STREAM_OK, "whiteouts apply"))
        diag("%s", msg);
    ok(!exists("a/gone"), ".wh.NAME removes a file");
    ok(!exists("a/gonedir"), ".wh.NAME removes a directory and all below it");
    ok(!exists("a/gonelink"), ".wh.NAME removes a symlink, not what it points to");
    ok(!exists("top"), "a whiteout at the root");
    is_str(get("a/keep"), "k", "a sibling stays");
    ok(!exists("a/.wh.gone"), "no whiteout file is left behind");
    struct stat st;
    ok(stat("a", &st) == 0 && st.st_mtime == 1234567890,
       "the directory's mtime is the archive's, whiteouts applied or not");
    outside_untouched();
}

static void test_opaque(void)
{
    fresh("opaque");
    crl_mkdir_p("d/olddir", 0755);
    put("d/old", "o");
    put("d/olddir/x", "x");
    symlink("../../outside", "d/oldlink");
    mkdir("other", 0755);
    put("other/stays", "s");
    struct tb t;
    tb_begin(&t);
    tb_add(&t, (struct ent){.type = AE_IFDIR, .path = "d"});
    tb_add(&t, (struct ent){.path = "d/new", .data = "n"});
    tb_add(&t, (struct ent){.path = "d/.wh..wh..opq"});
    tb_add(&t, (struct ent){.path = "d/new2", .data = "n2"});
    char msg[512];
    int code = apply(tb_end(&t), CRL_TAR_APPLY_OWNERS, msg, sizeof(msg));
    if (!is_int(code, CRL_STREAM_OK, "an opaque directory applies"))
        diag("%s", msg);
    ok(!exists("d/old") && !exists("d/olddir") && !exists("d/oldlink"),
       "what the directory had before is gone");
    is_str(get("d/new"), "n", "what the stream made before the marker stays");
    is_str(get("d/new2"), "n2", "and what it made after");
    is_str(get("other/stays"), "s", "other directories are untouched");
    outside_untouched();
}

static void test_type_changes(void)
{
    fresh("types");
    crl_mkdir_p("x/deep/er", 0755);
    put("x/deep/er/f", "f");
    put("y", "was a file");
    mkdir("z", 0755);
    put("z/f", "f");
    struct tb t;
    tb_begin(&t);
    tb_add(&t, (struct ent){.path = "x", .data = "now a file"});
    tb_add(&t, (struct ent){.type = AE_IFDIR, .path = "y"});
    tb_add(&t, (struct ent){.type = AE_IFLNK, .path = "z", .symlink = "y"});
    char msg[512];
    int code = apply(tb_end(&t), CRL_TAR_APPLY_OWNERS, msg, sizeof(msg));
    if (!is_int(code, CRL_STREAM_OK, "type changes apply"))
        diag("%s", msg);
    is_str(get("x"), "now a file", "a file replaces a full directory");
    struct stat st;
    ok(lstat("y", &st) == 0 && S_ISDIR(st.st_mode), "a directory replaces a file");
    ok(lstat("z", &st) == 0 && S_ISLNK(st.st_mode), "a symlink replaces a directory");
    outside_untouched();
}

/* One hostile archive: refused as bad input, the message matching re. */
static void refused(const char *name, struct ent *ents, size_t n, const char *re)
{
    fresh(name);
    symlink("../outside", "pl"); /* planted by the sandbox */
    struct tb t;
    tb_begin(&t);
    for (size_t i = 0; i < n; i++)
        tb_add(&t, ents[i]);
    char msg[512];
    int code = apply(tb_end(&t), CRL_TAR_APPLY_OWNERS, msg, sizeof(msg));
    is_int(code, CRL_STREAM_BAD_INPUT, "%s: refused as bad input", name);
    like(msg, re, "%s: the message names it", name);
    outside_untouched();
}

#define REFUSED(name, re, ...)                             \
    do {                                                   \
        struct ent e_[] = {__VA_ARGS__};                   \
        refused(name, e_, sizeof(e_) / sizeof(e_[0]), re); \
    } while (0)

static void test_refusals(void)
{
    REFUSED("dotdot", "^restoring /\\.\\./outside/evil: a path with '\\.\\.': refused$",
            {.path = "../outside/evil", .data = "x"});
    REFUSED("dotdot-inner", "refused", {.path = "a/../../outside/evil", .data = "x"});
    REFUSED("absolute", "^restoring /tmp/evil: an absolute path: refused$",
            {.path = "/tmp/evil", .data = "x"});
    REFUSED("symlink-escape",
            "^restoring /l/evil: ", {.type = AE_IFLNK, .path = "l", .symlink = "../outside"},
            {.path = "l/evil", .data = "x"});
    REFUSED("planted-symlink", "^restoring /pl/evil: ", {.path = "pl/evil", .data = "x"});
    REFUSED("planted-symlink-dir",
            "^restoring /pl/sub/evil: ", {.path = "pl/sub/evil", .data = "x"});
    REFUSED("dir-through-symlink",
            "^restoring /pl/newdir: ", {.type = AE_IFDIR, .path = "pl/newdir"});
    REFUSED("whiteout-through-symlink",
            "^restoring /pl/victim \\(a whiteout\\): ", {.path = "pl/.wh.victim"});
    REFUSED("opaque-through-symlink",
            "^restoring /pl \\(emptying an opaque directory\\): ", {.path = "pl/.wh..wh..opq"});
    REFUSED("replace-through-symlink",
            "^restoring /pl/victim: ", {.path = "pl/victim", .data = "evil"});
    REFUSED("hardlink-dotdot", "^restoring /h: a hard link out of the tree",
            {.path = "h", .hardlink = "../outside/victim"});
    REFUSED("hardlink-absolute", "^restoring /h: a hard link out of the tree",
            {.path = "h", .hardlink = "/etc/passwd"});
    REFUSED("hardlink-through-symlink", "^restoring /h: ", {.path = "h", .hardlink = "pl/victim"});
    REFUSED("chardev", "^restoring /dev/mem: device nodes, fifos and sockets are never restored$",
            {.type = AE_IFCHR, .path = "dev/mem"});
    REFUSED("blockdev", "never restored", {.type = AE_IFBLK, .path = "sda"});
    REFUSED("fifo", "never restored", {.type = AE_IFIFO, .path = "fifo"});
    REFUSED("overlay-internal", "^restoring /\\.wh\\.\\.wh\\.orph: not a whiteout",
            {.path = ".wh..wh.orph"});
    REFUSED("opaque-root", "root cannot be made opaque", {.path = ".wh..wh..opq"});

    /* A directory entry over a planted symlink replaces the link: nothing
     * is written through it. */
    fresh("dir-over-symlink");
    symlink("../outside", "pl");
    struct tb t;
    tb_begin(&t);
    tb_add(&t, (struct ent){.type = AE_IFDIR, .path = "pl"});
    tb_add(&t, (struct ent){.path = "pl/victim", .data = "mine"});
    char msg[512];
    int code = apply(tb_end(&t), CRL_TAR_APPLY_OWNERS, msg, sizeof(msg));
    if (!is_int(code, CRL_STREAM_OK, "a directory over a planted symlink applies"))
        diag("%s", msg);
    struct stat st;
    ok(lstat("pl", &st) == 0 && S_ISDIR(st.st_mode), "the symlink became a directory");
    is_str(get("pl/victim"), "mine", "its file is in the tree");
    outside_untouched();

    fresh("not-tar");
    int fd = memfd_create("junk", MFD_CLOEXEC);
    if (write(fd, "this is not a tar archive, not at all, no", 41) != 41)
        bail_out("junk");
    lseek(fd, 0, SEEK_SET);
    code = apply(fd, 0, msg, sizeof(msg));
    is_int(code, CRL_STREAM_BAD_INPUT, "garbage is bad input");
    like(msg, "^restoring: not a (valid )?tar archive", "and says so");
}

/* Without CRL_TAR_APPLY_OWNERS, as an unprivileged uid (a function
 * sandbox's): everything is the caller's, modes are kept. */
static void test_not_owners(void)
{
    fresh("unprivileged");
    if (chown(tree, 65534, 65534) < 0 || setgroups(0, NULL) < 0 ||
        setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
        bail_out("dropping to 65534");
    struct tb t;
    tb_begin(&t);
    tb_add(&t, (struct ent){.type = AE_IFDIR, .path = "d", .uid = 0, .mode = 0700});
    tb_add(&t, (struct ent){.path = "d/f",
                            .data = "f",
                            .uid = 1000,
                            .gid = 5,
                            .mode = 04750,
                            .xattr = {"user.a", "b"}});
    tb_add(&t, (struct ent){.path = "d/g", .hardlink = "d/f"});
    char msg[512];
    int code = apply(tb_end(&t), 0, msg, sizeof(msg));
    if (!is_int(code, CRL_STREAM_OK, "an unprivileged apply works"))
        diag("%s", msg);
    struct stat st;
    ok(stat("d/f", &st) == 0 && st.st_uid == 65534 && st.st_gid == 65534,
       "the archive's owners are ignored: the caller owns everything");
    is_int(st.st_mode & 07777, 04750, "the mode is kept, setuid included (on its own file)");
    ok(stat("d", &st) == 0 && (st.st_mode & 07777) == 0700, "a directory's mode");
    ok(stat("d/g", &st) == 0 && st.st_nlink == 2, "a hard link within the tree");
}

/* A full disk fails the apply with a message naming the file. */
static void test_no_space(void)
{
    fresh("nospace");
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("tmpfs", tree, "tmpfs", 0, "size=64k") < 0 || chdir(tree) < 0) {
        skip(3, "cannot mount a small tmpfs");
        return;
    }
    static char big[1 << 20];
    memset(big, 'x', sizeof(big) - 1);
    struct tb t;
    tb_begin(&t);
    tb_add(&t, (struct ent){.type = AE_IFDIR, .path = "etc"});
    tb_add(&t, (struct ent){.path = "etc/x", .data = big});
    char msg[512];
    int code = apply(tb_end(&t), CRL_TAR_APPLY_OWNERS, msg, sizeof(msg));
    is_int(code, CRL_STREAM_NOSPACE, "a full disk is CRL_STREAM_NOSPACE");
    is_str(msg, "restoring /etc/x: No space left on device", "naming the file");
    is_int(crl_tar_status_of_errno(EFBIG), CRL_STREAM_NOSPACE,
           "EFBIG (a file over RLIMIT_FSIZE) is no space too");
}

int main(void)
{
    if (geteuid() != 0)
        skip_all("needs root (owners, setuid, a tmpfs)");
    snprintf(root, sizeof(root), "/tmp/corral-tar-apply-XXXXXX");
    if (!mkdtemp(root))
        bail_out("mkdtemp");
    chmod(root, 0755);
    TAP_RUN(test_extract_exact, 10);
    TAP_RUN(test_whiteouts, 10);
    TAP_RUN(test_opaque, 10);
    TAP_RUN(test_type_changes, 10);
    TAP_RUN(test_refusals, 20);
    TAP_RUN(test_not_owners, 10);
    TAP_RUN(test_no_space, 10);
    crl_rm_rf_at(AT_FDCWD, root);
    struct stat st;
    ok(stat(root, &st) < 0 && errno == ENOENT, "the test tree is gone");
    return done_testing();
}
