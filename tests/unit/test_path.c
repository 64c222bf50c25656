/* lib/util/path: the two walls that keep a files-API path inside a sandbox:
 * crl_path_check (absolute, no "..", bounded) and crl_path_open_in_root
 * (openat2 RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS).  The second is tested
 * against a real tree with hostile symlinks planted in it: whatever a
 * sandbox plants, resolution must stay under its root.  Beneath them, the
 * normaliser every path checker is a call of (a table over every rule set,
 * and its limits; tests/fuzz/fuzz_path.c checks its invariants), and the
 * openat2 wrapper's handling of the caller's flags. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/util/path.h"
#include "../../lib/util/fdio.h"
#include "tap.h"

/* ---- crl_path_check ---- */

static void check_ok(const char *p)
{
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_path_check(p, "path", &e);
    if (!ok(r == 0, "'%.80s' is a valid path", p))
        diag("refused: %s", e.msg);
}

static void check_bad(const char *p, const char *re)
{
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_path_check(p, "path", &e);
    ok(r < 0 && e.code == CRL_E_INVALID, "'%.80s' is refused as invalid_argument",
       p ? p : "(NULL)");
    like(e.msg, re, "'%.80s': the message matches /%s/", p ? p : "(NULL)", re);
}

static void test_path_check(void)
{
    check_ok("/");
    check_ok("/etc/passwd");
    check_ok("/a/b/c/");
    check_ok("//a//b");
    check_ok("/a/./b");
    check_ok("/a/..b");
    check_ok("/a/b..");
    check_ok("/...");
    check_ok("/a/.../b");
    check_ok("/.hidden");
    check_ok("/with space/and\xc3\xa9");
    check_bad(NULL, "^path is required$");
    check_bad("", "^path is required$");
    check_bad("etc/passwd", "^path 'etc/passwd' must be absolute$");
    check_bad("./x", "must be absolute");
    check_bad("../x", "must be absolute");
    check_bad("/..", "^path '/\\.\\.' must not contain '\\.\\.'");
    check_bad("/../etc/passwd", "must not contain '\\.\\.'");
    check_bad("/a/..", "must not contain '\\.\\.'");
    check_bad("/a/../b", "must not contain '\\.\\.'");
    check_bad("/a/b/../../..", "must not contain '\\.\\.'");
    check_bad("//..//", "must not contain '\\.\\.'");
    check_bad("/a/..//b", "must not contain '\\.\\.'");

    char *p = malloc(PATH_MAX + 1);
    memset(p, 'a', PATH_MAX);
    p[0] = '/';
    p[PATH_MAX - 1] = 0;
    check_ok(p); /* 4095 bytes */
    p[PATH_MAX - 1] = 'a';
    p[PATH_MAX] = 0;
    check_bad(p, "^path is longer than 4095 bytes$");
    free(p);

    struct crl_err e = CRL_ERR_INIT;
    crl_path_check("rel", "the 'path' query parameter", &e);
    like(e.msg, "^the 'path' query parameter 'rel' must be absolute", "`what` names the path");
}

/* ---- crl_path_normalise: one table over every rule set ---- */

static const struct crl_path_rules abs_canon = {CRL_PATH_ABS | CRL_PATH_CANONICAL, 0};

struct taken {
    const char *in, *out;
};
struct refused {
    const char *in;
    int why; /* an enum crl_path_bad; 0 ends the list */
};

/* Per rule set, what it takes (and gives back) and what it refuses, and why. */
static const struct {
    const char *name;
    const struct crl_path_rules *rules;
    struct taken take[12];  /* ends at a NULL out */
    struct refused bad[12]; /* ends at why 0 */
} tables[] = {
    {"a change set's member",
     CRL_PATH_RULES_MEMBER,
     {{"a/b", "a/b"},
      {"./a//b/./c/", "a/b/c"},
      {"./", ""},
      {".", ""},
      {".//.", ""},
      {"a/..b/b..", "a/..b/b.."},
      {"...", "..."},
      {".wh.x", ".wh.x"}},
     {{"", CRL_PATH_EMPTY},
      {NULL, CRL_PATH_EMPTY},
      {"/etc/passwd", CRL_PATH_ABSOLUTE},
      {"//x", CRL_PATH_ABSOLUTE},
      {"..", CRL_PATH_DOTDOT},
      {"../x", CRL_PATH_DOTDOT},
      {"a/..", CRL_PATH_DOTDOT},
      {"a/../b", CRL_PATH_DOTDOT},
      {"./../x", CRL_PATH_DOTDOT},
      {"a/./../b", CRL_PATH_DOTDOT}}},
    {"a layer's member",
     CRL_PATH_RULES_LAYER,
     {{"", ""}, {"./etc/", "etc"}, {"./", ""}},
     {{"/abs", CRL_PATH_ABSOLUTE}, {"x/../..", CRL_PATH_DOTDOT}}},
    {"a files-API path",
     CRL_PATH_RULES_API,
     {{"/", "/"},
      {"//a//b/", "/a/b"},
      {"/a/./b", "/a/b"},
      {"/.", "/"},
      {"/with space/and\xc3\xa9", "/with space/and\xc3\xa9"}},
     {{"rel", CRL_PATH_RELATIVE},
      {"./x", CRL_PATH_RELATIVE},
      {"", CRL_PATH_EMPTY},
      {"/a/..", CRL_PATH_DOTDOT},
      {"/a/\xff", CRL_PATH_NOT_UTF8}}},
    {"a stored path",
     CRL_PATH_RULES_STORED,
     {{"a/b", "a/b"}, {"a", "a"}, {"a/..b", "a/..b"}, {"d/.wh", "d/.wh"}},
     {{"./a", CRL_PATH_NOT_CANONICAL},
      {"a//b", CRL_PATH_NOT_CANONICAL},
      {"a/", CRL_PATH_NOT_CANONICAL},
      {"a/.", CRL_PATH_NOT_CANONICAL},
      {".", CRL_PATH_NOT_CANONICAL},
      {"/a", CRL_PATH_ABSOLUTE},
      {"", CRL_PATH_EMPTY},
      {"a/..", CRL_PATH_DOTDOT},
      {"d/.wh.x", CRL_PATH_WHITEOUT},
      {".wh..wh..opq", CRL_PATH_WHITEOUT}}},
    {"an absolute canonical path",
     &abs_canon,
     {{"/", "/"}, {"/a/b", "/a/b"}},
     {{"/a/", CRL_PATH_NOT_CANONICAL},
      {"//a", CRL_PATH_NOT_CANONICAL},
      {"/./a", CRL_PATH_NOT_CANONICAL}}},
};

static void test_normalise(void)
{
    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        const struct crl_path_rules *rules = tables[t].rules;
        for (const struct taken *c = tables[t].take; c->out; c++) {
            char out[64] = "(unset)";
            size_t len = strlen(c->in);
            int r = crl_path_normalise(c->in, len, rules, out, sizeof(out));
            ok(r == (int)strlen(c->out) && strcmp(out, c->out) == 0,
               "%s: '%s' normalises to '%s' (got %d, '%s')", tables[t].name, c->in, c->out, r, out);
            is_int(crl_path_normalise(c->in, len, rules, NULL, 0), r,
                   "%s: '%s': the same length with no output", tables[t].name, c->in);
        }
        for (const struct refused *c = tables[t].bad; c->why; c++) {
            char out[64] = "(unset)";
            int r = crl_path_normalise(c->in, c->in ? strlen(c->in) : 0, rules, out, sizeof(out));
            ok(r == c->why, "%s: '%s' is refused: %s (got %d: %s)", tables[t].name,
               c->in ? c->in : "(NULL)", crl_path_why(c->why), r, r < 0 ? crl_path_why(r) : out);
        }
    }
}

/* The limits: the rules' max_len on the input, the output's room, NUL
 * bytes within the length, NAME_MAX per component. */
static void test_normalise_limits(void)
{
    char out[8];
    is_int(crl_path_normalise("abcdef", 6, CRL_PATH_RULES_MEMBER, out, sizeof(out)), 6,
           "6 bytes fit in 8 (a slash and a NUL besides)");
    is_int(crl_path_normalise("abcdefg", 7, CRL_PATH_RULES_MEMBER, out, sizeof(out)),
           CRL_PATH_TOO_LONG, "7 do not: the room is counted as a tar extractor always has");
    is_int(crl_path_normalise("./././././abc", 13, CRL_PATH_RULES_MEMBER, out, sizeof(out)), 3,
           "the output's room bounds the output, not the input");
    is_int(crl_path_normalise("ab/cd", 5, CRL_PATH_RULES_MEMBER, out, 1), CRL_PATH_TOO_LONG,
           "no room at all");
    is_int(crl_path_normalise("a\0b", 3, CRL_PATH_RULES_MEMBER, out, sizeof(out)), CRL_PATH_NUL,
           "a NUL inside the length is refused");
    is_int(crl_path_normalise("a\0b", 3, CRL_PATH_RULES_STORED, NULL, 0), CRL_PATH_NUL,
           "for stored paths too");

    static char big[70000];
    memset(big, 'a', sizeof(big));
    for (size_t i = 200; i < sizeof(big); i += 201)
        big[i] = '/';
    ok(crl_path_valid(big, 65535, CRL_PATH_RULES_STORED) &&
           !crl_path_valid(big, 65536, CRL_PATH_RULES_STORED),
       "a stored path is at most 65535 bytes");
    memset(big, 'a', 300);
    ok(crl_path_valid(big, NAME_MAX, CRL_PATH_RULES_STORED) &&
           !crl_path_valid(big, NAME_MAX + 1, CRL_PATH_RULES_STORED),
       "a stored path's component is at most NAME_MAX bytes");
    is_int(crl_path_normalise(big, NAME_MAX + 1, CRL_PATH_RULES_STORED, NULL, 0),
           CRL_PATH_NAME_TOO_LONG, "and says so");
    ok(crl_path_valid(big, NAME_MAX + 1, CRL_PATH_RULES_MEMBER),
       "a member name's is not limited here");

    /* first fault wins, in the documented order */
    is_int(crl_path_normalise("/..", 3, CRL_PATH_RULES_MEMBER, NULL, 0), CRL_PATH_ABSOLUTE,
           "absolute before '..'");
    is_int(crl_path_normalise("a/../.wh.x", 10, CRL_PATH_RULES_STORED, NULL, 0), CRL_PATH_DOTDOT,
           "components in order");
    is_str(crl_path_why(CRL_PATH_DOTDOT), "a path with '..'", "crl_path_why names a refusal");
}

/* The one test of an overlayfs name, on a component's bytes. */
static void test_is_whiteout(void)
{
    ok(crl_path_is_whiteout(".wh.x", 5) && crl_path_is_whiteout(".wh..wh..opq", 12),
       ".wh.NAME and the opaque marker are whiteout names");
    ok(crl_path_is_whiteout(".wh.", 4), "so is .wh. alone");
    ok(!crl_path_is_whiteout(".wh", 3) && !crl_path_is_whiteout(".wh.x", 3),
       "not under four bytes, whatever follows them");
    ok(!crl_path_is_whiteout("a.wh.x", 6) && !crl_path_is_whiteout(".WH.x", 5),
       "only at the start, and case counts");
}

/* ---- crl_path_openat2: the flags are the caller's ---- */

static void test_openat2_flags(void);

/* ---- crl_path_open_in_root against a planted tree ---- */

static char root[PATH_MAX];
static int rootfd = -1;
static char created_name[64]; /* what an escaping O_CREAT would make at the host's / */

static void put(const char *rel, const char *content)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || crl_write_full(fd, content, strlen(content)) < 0)
        bail_out("cannot write the test tree");
    close(fd);
}

static void plant(const char *target, const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    if (symlink(target, p) < 0)
        bail_out("symlink");
}

static void mkd(const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    if (mkdir(p, 0755) < 0)
        bail_out("mkdir");
}

static void build_tree(void)
{
    snprintf(root, sizeof(root), "/tmp/corral-test-path-XXXXXX");
    if (!mkdtemp(root))
        bail_out("mkdtemp");
    mkd("etc");
    mkd("a");
    mkd("a/b");
    mkd("proc");
    put("etc/passwd", "sandbox-passwd\n");
    put("etc/hostname", "sandbox-hostname\n");
    put("a/b/file", "deep\n");
    plant("/etc/passwd", "abs_passwd");              /* absolute: re-rooted */
    plant("/etc/hostname", "a/abs_hostname");        /* absolute, from a subdirectory */
    plant("../../../../../../etc/passwd", "a/b/up"); /* relative escape attempt */
    plant("/", "a/slash");                           /* the root itself */
    plant("/proc/self/root", "procroot");            /* magic link, through the sandbox's /proc */
    plant("/proc/self/root/etc/passwd", "procpasswd");
    plant("loop2", "loop1"); /* a loop */
    plant("loop1", "loop2");
    plant("/nonexistent/x", "dangling");
    plant("../etc", "a/etcdir"); /* an innocent relative link */
    snprintf(created_name, sizeof(created_name), "corral-test-path-created-%d", (int)getpid());
    char t[128];
    snprintf(t, sizeof(t), "/%s", created_name);
    plant(t, "creat_link"); /* dangling absolute: O_CREAT through it */
    rootfd = crl_openat(AT_FDCWD, root, O_RDONLY | O_DIRECTORY, 0);
    if (rootfd < 0)
        bail_out("open root");
}

static void remove_tree(void)
{
    if (rootfd >= 0)
        close(rootfd);
    int fd = crl_openat(AT_FDCWD, "/tmp", O_RDONLY | O_DIRECTORY, 0);
    if (fd >= 0) {
        crl_rm_rf_at(fd, strrchr(root, '/') + 1);
        close(fd);
    }
}

/* Open `path` in the root; read what is there.  Returns the fd or -errno. */
static long open_read(const char *path, char *buf, size_t cap)
{
    long fd = crl_path_open_in_root(rootfd, path, O_RDONLY, 0);
    buf[0] = 0;
    if (fd >= 0) {
        ssize_t n = pread((int)fd, buf, cap - 1, 0);
        buf[n > 0 ? n : 0] = 0;
    }
    return fd;
}

/* Is fd the file at host path p (same inode)? */
static bool same_file(long fd, const char *p)
{
    struct stat a, b;
    return fd >= 0 && fstat((int)fd, &a) == 0 && stat(p, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

static void test_open_plain(void)
{
    char buf[128];
    long fd = open_read("/etc/hostname", buf, sizeof(buf));
    ok(fd >= 0, "/etc/hostname opens in the root");
    is_str(buf, "sandbox-hostname\n", "and is the root's file, not the host's");
    if (fd >= 0) {
        ok(fcntl((int)fd, F_GETFD) & FD_CLOEXEC, "the fd is O_CLOEXEC");
        close((int)fd);
    }
    fd = open_read("etc/hostname", buf, sizeof(buf));
    is_str(buf, "sandbox-hostname\n", "a relative path resolves from the root too");
    if (fd >= 0)
        close((int)fd);
    fd = open_read("/a/b/file", buf, sizeof(buf));
    is_str(buf, "deep\n", "a nested file");
    if (fd >= 0)
        close((int)fd);
    fd = open_read("/a/etcdir/passwd", buf, sizeof(buf));
    is_str(buf, "sandbox-passwd\n", "an innocent relative symlink is followed");
    if (fd >= 0)
        close((int)fd);
    fd = crl_path_open_in_root(rootfd, "/etc/hostname", O_RDONLY, 0644);
    ok(fd >= 0, "a mode given without O_CREAT is ignored, not an error (openat2 would say EINVAL)");
    if (fd >= 0)
        close((int)fd);
    is_int(crl_path_open_in_root(rootfd, "/missing", O_RDONLY, 0), -ENOENT,
           "a missing file is -ENOENT");
    is_int(crl_path_open_in_root(-1, "/etc/hostname", O_RDONLY, 0), -EBADF,
           "a bad root fd is -EBADF");
    fd = crl_path_open_in_root(rootfd, "/", O_RDONLY | O_DIRECTORY, 0);
    ok(same_file(fd, root), "'/' is the root itself");
    if (fd >= 0)
        close((int)fd);
}

static void test_open_symlink_escapes(void)
{
    char buf[128];
    long fd = open_read("/abs_passwd", buf, sizeof(buf));
    ok(fd >= 0, "a symlink to /etc/passwd opens");
    is_str(buf, "sandbox-passwd\n", "and lands on <root>/etc/passwd");
    ok(!same_file(fd, "/etc/passwd"), "not on the host's /etc/passwd");
    if (fd >= 0)
        close((int)fd);

    fd = open_read("/a/abs_hostname", buf, sizeof(buf));
    is_str(buf, "sandbox-hostname\n",
           "an absolute symlink in a subdirectory lands on <root>/etc/hostname");
    ok(!same_file(fd, "/etc/hostname"), "not on the host's /etc/hostname");
    if (fd >= 0)
        close((int)fd);

    fd = open_read("/a/b/up", buf, sizeof(buf));
    is_str(buf, "sandbox-passwd\n", "a ../../../.. symlink stops at the root: <root>/etc/passwd");
    if (fd >= 0)
        close((int)fd);

    fd = open_read("/../../../etc/passwd", buf, sizeof(buf));
    is_str(buf, "sandbox-passwd\n", "'..' in the path itself stops at the root");
    if (fd >= 0)
        close((int)fd);

    fd = crl_path_open_in_root(rootfd, "/a/slash", O_RDONLY | O_DIRECTORY, 0);
    ok(same_file(fd, root), "a symlink to / is the root, not the host's /");
    if (fd >= 0)
        close((int)fd);
    fd = open_read("/a/slash/etc/passwd", buf, sizeof(buf));
    is_str(buf, "sandbox-passwd\n", "and paths through it stay inside");
    if (fd >= 0)
        close((int)fd);

    /* The root has an empty /proc: /proc/self/root is re-rooted and missing. */
    is_int(crl_path_open_in_root(rootfd, "/procroot", O_RDONLY, 0), -ENOENT,
           "a symlink to /proc/self/root is re-rooted into the tree (-ENOENT here)");
    is_int(crl_path_open_in_root(rootfd, "/loop1", O_RDONLY, 0), -ELOOP,
           "a symlink loop is -ELOOP");
    is_int(crl_path_open_in_root(rootfd, "/dangling", O_RDONLY, 0), -ENOENT,
           "a dangling symlink is -ENOENT");
}

static void test_open_creat(void)
{
    char host[128], inside[PATH_MAX];
    snprintf(host, sizeof(host), "/%s", created_name);
    snprintf(inside, sizeof(inside), "%s/%s", root, created_name);
    mode_t old = umask(022);
    long fd = crl_path_open_in_root(rootfd, "/creat_link", O_WRONLY | O_CREAT, 0640);
    umask(old);
    ok(fd >= 0, "O_CREAT through a dangling absolute symlink succeeds");
    if (fd >= 0) {
        ok(write((int)fd, "x", 1) == 1, "write through it");
        close((int)fd);
    }
    struct stat st;
    ok(stat(inside, &st) == 0 && st.st_size == 1, "the file was created inside the root");
    ok((st.st_mode & 0777) == 0640, "with the mode given (0640, umask 022)");
    bool escaped = access(host, F_OK) == 0;
    ok(!escaped, "nothing was created at the host's %s", host);
    if (escaped)
        unlink(host);

    fd = crl_path_open_in_root(rootfd, "/a/b/up", O_WRONLY | O_TRUNC, 0);
    if (fd >= 0)
        close((int)fd);
    char buf[64];
    fd = open_read("/etc/passwd", buf, sizeof(buf));
    is_str(buf, "", "O_TRUNC through an escaping symlink truncated the root's file");
    if (fd >= 0)
        close((int)fd);
    ok(stat("/etc/passwd", &st) == 0 && st.st_size > 0, "and the host's /etc/passwd is untouched");
    put("etc/passwd", "sandbox-passwd\n");

    fd = crl_path_open_in_root(rootfd, "/new/dir/file", O_WRONLY | O_CREAT, 0644);
    is_int(fd, -ENOENT, "O_CREAT does not create missing parent directories");
    if (fd >= 0)
        close((int)fd);
}

/* Magic links: a sandbox has its own /proc, so /proc/self/root and
 * /proc/self/fd/N are there to be planted.  Mount a proc inside the tree, in a
 * mount namespace of this child only. */
static void test_open_magic_links(void)
{
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        skip(4, "cannot make a private mount namespace (not root?)");
        return;
    }
    char proc[PATH_MAX];
    snprintf(proc, sizeof(proc), "%s/proc", root);
    if (mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
        skip(4, "cannot mount proc in the test tree");
        return;
    }
    /* The tree's fd from before unshare() sees the old namespace's mounts. */
    int mfd = crl_openat(AT_FDCWD, root, O_RDONLY | O_DIRECTORY, 0);
    long fd = crl_path_open_in_root(mfd, "/procroot", O_RDONLY | O_DIRECTORY, 0);
    is_int(fd, -ELOOP, "a symlink to /proc/self/root (a magic link) is refused with -ELOOP");
    if (fd >= 0)
        close((int)fd);
    fd = crl_path_open_in_root(mfd, "/procpasswd", O_RDONLY, 0);
    is_int(fd, -ELOOP, "a path through /proc/self/root is refused");
    if (fd >= 0)
        close((int)fd);
    int host = open("/etc/passwd", O_RDONLY | O_CLOEXEC);
    char p[64];
    snprintf(p, sizeof(p), "/proc/self/fd/%d", host);
    fd = crl_path_open_in_root(mfd, p, O_RDONLY, 0);
    is_int(fd, -ELOOP, "/proc/self/fd/N of a host file is refused");
    if (fd >= 0)
        close((int)fd);
    close(host);
    fd = crl_path_open_in_root(mfd, "/proc/self/status", O_RDONLY, 0);
    ok(fd >= 0, "an ordinary /proc file still opens (only magic links are refused)");
    if (fd >= 0)
        close((int)fd);
    close(mfd);
    umount2(proc, MNT_DETACH);
}

static void test_openat2_flags(void)
{
    const unsigned long long beneath = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
    long fd = crl_path_openat2(rootfd, "a/b/file", O_RDONLY, 0, beneath);
    ok(fd >= 0, "a plain path beneath opens");
    if (fd >= 0)
        close((int)fd);
    is_int(crl_path_openat2(rootfd, "a/etcdir/passwd", O_RDONLY, 0, beneath), -ELOOP,
           "RESOLVE_NO_SYMLINKS: even an innocent symlink is ELOOP");
    fd = crl_path_openat2(rootfd, "a/etcdir/passwd", O_RDONLY, 0, RESOLVE_BENEATH);
    ok(fd >= 0, "without it, a symlink that stays beneath is followed");
    if (fd >= 0)
        close((int)fd);
    is_int(crl_path_openat2(rootfd, "a/b/up", O_RDONLY, 0, RESOLVE_BENEATH), -EXDEV,
           "RESOLVE_BENEATH: a symlink out is EXDEV");
    is_int(crl_path_openat2(rootfd, "../etc/passwd", O_RDONLY, 0, RESOLVE_BENEATH), -EXDEV,
           "and so is '..' out");
    is_int(crl_path_openat2(rootfd, "/etc/passwd", O_RDONLY, 0, RESOLVE_BENEATH), -EXDEV,
           "and an absolute path");
    fd = crl_path_openat2(rootfd, "a", O_PATH | O_DIRECTORY, 0, beneath);
    ok(fd >= 0, "O_PATH opens (openat2 would refuse it with O_NOCTTY)");
    if (fd >= 0) {
        ok(fcntl((int)fd, F_GETFD) == FD_CLOEXEC, "close-on-exec always");
        close((int)fd);
    }
    fd = crl_path_openat2(rootfd, "a", O_RDONLY | O_DIRECTORY, 0755, beneath);
    ok(fd >= 0, "a mode with O_DIRECTORY is not O_TMPFILE's: dropped, not EINVAL");
    if (fd >= 0)
        close((int)fd);
    errno = 0;
    is_int(crl_path_fd(crl_path_openat2(rootfd, "missing", O_RDONLY, 0, beneath)), -1,
           "crl_path_fd: -1");
    is_int(errno, ENOENT, "with errno set");
}

int main(void)
{
    TAP_RUN(test_path_check, 10);
    TAP_RUN(test_normalise, 10);
    TAP_RUN(test_normalise_limits, 10);
    TAP_RUN(test_is_whiteout, 10);
    build_tree();
    TAP_RUN(test_openat2_flags, 10);
    TAP_RUN(test_open_plain, 10);
    TAP_RUN(test_open_symlink_escapes, 10);
    TAP_RUN(test_open_creat, 10);
    TAP_RUN(test_open_magic_links, 10);
    remove_tree();
    struct stat st;
    ok(stat(root, &st) < 0 && errno == ENOENT, "the test tree is gone");
    return done_testing();
}
