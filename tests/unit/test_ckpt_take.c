/* lib/traj/ckpt_take.c: taking checkpoints.  Of a plain tree and of an
 * overlayfs upper dir across changes, each restored through the tar stream
 * with the fixture's applier of the restore format and compared exactly
 * with the source (types, modes, owners with the uid shift, ns mtimes,
 * contents, symlinks, hard links, user xattrs); the tar's own invariants;
 * identical state giving identical ids; an index rebuilt from the store;
 * rewrites within a clock tick; what a walk leaves out or refuses; and the
 * cost of a checkpoint of 1,000 files, unchanged and with one file changed
 * (diag figures; no test gates on a time). */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../../lib/util/sha256.h"
#include "ckpt_fixture.h"

#define SHIFT 100000u

static bool same_file(const char *a, const char *b)
{
    struct stat x, y;
    return lstat(a, &x) == 0 && lstat(b, &y) == 0 && x.st_ino == y.st_ino && x.st_dev == y.st_dev;
}

/* ---- a plain tree across changes ---- */

/* Owned by the sandbox's ids: host id = sandbox id + SHIFT. */
static void sown(const char *path, uid_t u, gid_t g)
{
    own(path, u + SHIFT, g + SHIFT);
}

static void build_tree(void)
{
    mkd(at("src"), 0755);
    mkd(at("src/etc"), 0755);
    wfile(at("src/etc/passwd"), "root:x:0:0::/root:/bin/sh\n", 0644);
    wfile(at("src/etc/shadow"), "root:*:1::::::\n", 0640);
    sown(at("src/etc/shadow"), 0, 42);
    mkd(at("src/home"), 0755);
    mkd(at("src/home/user"), 0700);
    sown(at("src/home/user"), 1000, 1000);
    wfile(at("src/home/user/notes.txt"), "remember the milk\n", 0600);
    sown(at("src/home/user/notes.txt"), 1000, 1000);
    xset(at("src/home/user/notes.txt"), "user.mime", "text/plain");
    xset(at("src/home/user/notes.txt"), "user.bin", "\x01\x02\xff");
    xset(at("src/home/user"), "user.dirattr", "yes");
    wfile(at("src/home/user/empty"), "", 0644);
    wfile(at("src/home/user/dup1"), "same bytes twice", 0644);
    wfile(at("src/home/user/dup2"), "same bytes twice", 0644);
    wfile(at("src/home/user/caf\xc3\xa9.txt"), "utf-8 name", 0644);
    wfile(at("src/home/user/raw\xff.bin"), "not utf-8 name", 0644);
    mkd(at("src/bin"), 0755);
    wfile(at("src/bin/tool"), "#!/bin/sh\necho hi\n", 04755);
    must(symlink("tool", at("src/bin/alias")) == 0, "symlink", "alias");
    must(symlink("/nowhere/at/all", at("src/bin/dangling")) == 0, "symlink", "dangling");
    sown(at("src/bin/dangling"), 7, 7);
    must(link(at("src/bin/tool"), at("src/bin/tool-hard")) == 0, "link", "tool-hard");
    must(link(at("src/bin/tool"), at("src/etc/tool-hard2")) == 0, "link", "tool-hard2");
    /* Big enough to take the streaming path. */
    size_t big = (1u << 20) + 4321;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i % 251);
    wfile_len(at("src/bin/big"), data, big, 0755);
    free(data);
    must(mkfifo(at("src/fifo"), 0644) == 0, "mkfifo", "fifo");
    wfile(at("src/.wh.sneaky"), "reserved name", 0644);
    own(at("src/etc/passwd"), 5, 5); /* below the shift: unmapped, 65534 */
    set_mtime(at("src/etc/passwd"), 1700000000, 123456789);
    set_mtime(at("src/bin/alias"), 1600000000, 987654321);
    set_mtime(at("src/etc"), 1500000000, 5);
}

static void test_plain(void)
{
    make_dir();
    build_tree();
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id1[CRL_CKPT_ID_MAX], id[CRL_CKPT_ID_MAX], prev[CRL_CKPT_ID_MAX], src[4096];
    snprintf(src, sizeof(src), "%s", at("src"));

    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id1, &st) == 0, "first checkpoint");
    ok(crl_digest_valid(id1), "its id is a digest");
    is_int(st.entries, 18, "every kept entry walked (fifo and .wh. name left out)");
    /* Distinct contents: passwd shadow notes dup tool big utf8 raw = 8, plus the manifest. */
    is_int(st.blobs_new, 9, "one blob per distinct content, the empty file none, and the manifest");
    is_int(count_blobs("store"), 9, "as many files in sha256/");
    check_restore(s, id1, src, NULL, SHIFT, "checkpoint 1");
    ok(same_file(at("out/bin/tool"), at("out/bin/tool-hard")) &&
           same_file(at("out/bin/tool"), at("out/etc/tool-hard2")),
       "hard links restored as hard links");
    struct stat sb;
    ok(lstat(at("out/etc/passwd"), &sb) == 0 && sb.st_uid == 65534,
       "an owner below the shift is restored as 65534");
    ok(lstat(at("out/etc/shadow"), &sb) == 0 && sb.st_uid == 0 && sb.st_gid == 42,
       "owners are stored as host id - shift");
    ok(crl_ckpt_check(s, id1, NULL) == 0, "check: the checkpoint is complete");

    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0 && strcmp(id, id1) == 0,
       "unchanged: the same id");
    is_int(st.blobs_new, 0, "and no new blob");
    is_int(count_blobs("store"), 9, "nothing written");

    /* Changes, one checkpoint each, each restored and compared. */
    snprintf(prev, sizeof(prev), "%s", id1);

    /* 2: modify, delete, add two files with the same new content. */
    wfile(at("src/home/user/notes.txt"), "remember the eggs\n", 0600);
    sown(at("src/home/user/notes.txt"), 1000, 1000);
    must(unlink(at("src/etc/shadow")) == 0, "unlink", "shadow");
    wfile(at("src/home/user/new1"), "fresh and duplicated", 0644);
    wfile(at("src/home/user/new2"), "fresh and duplicated", 0644);
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0 && strcmp(id, prev) != 0,
       "step 2: a new checkpoint");
    is_int(st.blobs_new, 3, "step 2: notes, one blob for two new files (dedup), the manifest");
    is_int(st.removed, 1, "step 2: one removal");
    check_restore(s, id, src, NULL, SHIFT, "step 2");
    snprintf(prev, sizeof(prev), "%s", id);

    /* 3: a file becomes a dir, a dir becomes a file, a dir tree goes. */
    rm(at("src/home/user/dup1"));
    mkd(at("src/home/user/dup1"), 0750);
    wfile(at("src/home/user/dup1/inner"), "inside the new dir", 0644);
    rm(at("src/bin"));
    wfile(at("src/bin"), "bin is a file now", 0755);
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 3: file <-> dir");
    check_restore(s, id, src, NULL, SHIFT, "step 3");
    snprintf(prev, sizeof(prev), "%s", id);

    /* 4: metadata only: chmod, chown, an xattr, an mtime; a symlink retargeted. */
    must(chmod(at("src/home/user/new1"), 0600) == 0, "chmod", "new1");
    sown(at("src/home/user/new2"), 33, 33);
    xset(at("src/home/user/new2"), "user.tag", "v2");
    must(lremovexattr(at("src/home/user/notes.txt"), "user.mime") == 0, "removexattr", "notes");
    set_mtime(at("src/etc/passwd"), 1700000001, 1);
    must(symlink("../home", at("src/etc/link")) == 0, "symlink", "link");
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 4: metadata");
    is_int(st.blobs_new, 1, "step 4: only the manifest is new");
    check_restore(s, id, src, NULL, SHIFT, "step 4");
    snprintf(prev, sizeof(prev), "%s", id);

    /* 5: hard links: the first path goes, another stays linked. */
    mkd(at("src/l"), 0755);
    wfile(at("src/l/a"), "linked content", 0644);
    must(link(at("src/l/a"), at("src/l/b")) == 0 && link(at("src/l/a"), at("src/l/c")) == 0, "link",
         "l");
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 5a: three links");
    check_restore(s, id, src, NULL, SHIFT, "step 5a");
    ok(same_file(at("out/l/a"), at("out/l/c")), "step 5a: linked");
    must(unlink(at("src/l/a")) == 0, "unlink", "l/a");
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 5b: the first link goes");
    check_restore(s, id, src, NULL, SHIFT, "step 5b");
    ok(same_file(at("out/l/b"), at("out/l/c")), "step 5b: the other two still linked");
    char id5[CRL_CKPT_ID_MAX];
    snprintf(id5, sizeof(id5), "%s", id);

    /* An older checkpoint still restores to its own state. */
    mkd(at("keep5"), 0755);
    copy_tree(src, at("keep5")); /* (copies break links; compared below without them) */
    rm(at("src/home"));
    ok(take(s, idx, src, CRL_LAYER_PLAIN, SHIFT, id, &st) == 0, "step 6: a whole tree goes");
    check_restore(s, id, src, NULL, SHIFT, "step 6");
    check_restore(s, id5, at("keep5"), NULL, SHIFT, "step 5 again, after step 6");

    /* The same state, walked from a fresh index, gives the same id; an
     * index rebuilt from the store takes the next checkpoint against it. */
    struct crl_ckpt_index *idx2 = crl_ckpt_index_new();
    char again[CRL_CKPT_ID_MAX];
    struct crl_ckpt_store *s2 = open_store("store2");
    ok(take(s2, idx2, src, CRL_LAYER_PLAIN, SHIFT, again, &st) == 0, "a fresh index");
    crl_ckpt_index_free(idx2);
    struct crl_ckpt_index *loaded = NULL;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_ckpt_index_load(s, id, &loaded, &e) == 0, "index_load %s", e.msg);
    is_str(crl_ckpt_index_id(loaded), id, "the loaded index is of that checkpoint");
    ok(take(s, loaded, src, CRL_LAYER_PLAIN, SHIFT, again, &st) == 0 && strcmp(again, id) == 0,
       "after index_load, no change: the same id");
    is_int(st.blobs_new, 0, "and nothing written");
    ok(st.bytes_read > 0, "(the files were hashed: no fast-path keys after a load)");
    crl_ckpt_index_free(loaded);

    /* A restore, taken against the loaded index, is the same checkpoint. */
    ok(crl_ckpt_index_load(s, id5, &loaded, &e) == 0, "index_load step 5");
    check_restore(s, id5, at("keep5"), NULL, SHIFT, "step 5 restored");
    ok(take(s, loaded, at("out"), CRL_LAYER_PLAIN, 0, again, &st) == 0 && strcmp(again, id5) == 0,
       "a restored tree, walked against the loaded index: the same id (%llu changed)",
       (unsigned long long)st.changed);
    crl_ckpt_index_free(loaded);

    /* The parent must be the index's checkpoint. */
    int fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct crl_snapshot_view v = {fd, CRL_LAYER_PLAIN, SHIFT, SHIFT};
    is_int(crl_ckpt_take(s, idx, id1, &v, again, &st, &e), -1, "a parent the index is not of");
    is_int(e.code, CRL_E_INVALID, "is CRL_E_INVALID");
    close(fd);

    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    crl_ckpt_store_close(s2);
    remove_dir();
}

static void test_determinism(void)
{
    make_dir();
    mkd(at("a"), 0755);
    mkd(at("a/d"), 0700);
    wfile(at("a/d/f"), "content", 0640);
    xset(at("a/d/f"), "user.k", "v");
    must(symlink("d/f", at("a/s")) == 0, "symlink", "s");
    set_mtime(at("a/d/f"), 1234567890, 42);
    set_mtime(at("a/s"), 1234567890, 43);
    set_mtime(at("a/d"), 1234567890, 44);
    mkd(at("b"), 0755);
    copy_tree(at("a"), at("b"));
    struct crl_ckpt_store *s1 = open_store("s1"), *s2 = open_store("s2");
    struct crl_ckpt_index *i1 = crl_ckpt_index_new(), *i2 = crl_ckpt_index_new();
    char x[CRL_CKPT_ID_MAX], y[CRL_CKPT_ID_MAX];
    ok(take(s1, i1, at("a"), CRL_LAYER_PLAIN, 0, x, NULL) == 0 &&
           take(s2, i2, at("b"), CRL_LAYER_PLAIN, 0, y, NULL) == 0,
       "two copies of a tree, two stores");
    is_str(x, y, "the same state gives the same id (inodes and stores differ)");
    struct crl_ckpt_index *i3 = crl_ckpt_index_new();
    mkd(at("empty"), 0755);
    ok(take(s1, i3, at("empty"), CRL_LAYER_PLAIN, 0, x, NULL) == 0 && x[0] == 0,
       "an empty layer and no parent: no checkpoint (\"\")");
    struct crl_ckpt_stats st;
    int fd = memfd_create("t", MFD_CLOEXEC);
    ok(crl_ckpt_write_tar(s1, "", fd, &st, NULL) == 0 && st.entries == 0,
       "and \"\" restores as nothing");
    close(fd);
    crl_ckpt_index_free(i1);
    crl_ckpt_index_free(i2);
    crl_ckpt_index_free(i3);
    crl_ckpt_store_close(s1);
    crl_ckpt_store_close(s2);
    remove_dir();
}

/* ---- an overlayfs upper dir over an image ---- */

static void whiteout(const char *path)
{
    must(mknod(path, S_IFCHR | 0, makedev(0, 0)) == 0, "mknod", path);
}

static void opaque(const char *path)
{
    xset(path, "user.overlay.opaque", "y");
}

static void check_overlay(struct crl_ckpt_store *s, const char *id, const char *what)
{
    rm(at("expect"));
    mkd(at("expect"), 0755);
    copy_tree(at("lower"), at("expect"));
    overlay_apply(at("upper"), at("expect"));
    check_restore(s, id, at("expect"), at("lower"), 0, what);
}

static void test_overlay(void)
{
    make_dir();
    /* The image. */
    mkd(at("lower"), 0755);
    mkd(at("lower/etc"), 0755);
    wfile(at("lower/etc/hosts"), "127.0.0.1 localhost\n", 0644);
    wfile(at("lower/etc/motd"), "welcome\n", 0644);
    wfile(at("lower/etc/gone"), "to be whited out\n", 0644);
    mkd(at("lower/usr"), 0755);
    mkd(at("lower/usr/lib"), 0755);
    wfile(at("lower/usr/lib/a.so"), "old library a", 0644);
    wfile(at("lower/usr/lib/b.so"), "old library b", 0644);
    mkd(at("lower/var"), 0755);
    mkd(at("lower/var/cache"), 0755);
    wfile(at("lower/var/cache/x"), "cached x", 0644);
    mkd(at("lower/opt"), 0755);
    wfile(at("lower/opt/keep"), "image file under a dir made opaque later", 0644);
    set_mtime(at("lower/etc"), 1000, 1);
    set_mtime(at("lower/usr"), 1000, 2);

    /* Step 1, as overlayfs would leave the upper dir. */
    mkd(at("upper"), 0755);
    mkd(at("upper/etc"), 0755);
    set_mtime(at("upper/etc"), 2000, 1);
    wfile(at("upper/etc/hosts"), "127.0.0.1 localhost sandbox\n", 0644); /* copied up */
    whiteout(at("upper/etc/gone"));
    wfile(at("upper/etc/new"), "created in the sandbox\n", 0600);
    xset(at("upper/etc"), "trusted.overlay.impure", "y"); /* overlayfs's own: ignored */
    xset(at("upper/etc"), "user.overlay.origin", "xx");   /* likewise */
    mkd(at("upper/usr"), 0755);
    mkd(at("upper/usr/lib"), 0700); /* rm -rf usr/lib; mkdir usr/lib */
    opaque(at("upper/usr/lib"));
    wfile(at("upper/usr/lib/c.so"), "new library c", 0644);
    mkd(at("upper/var"), 0755);
    whiteout(at("upper/var/cache")); /* rm -rf var/cache */
    mkd(at("upper/opt"), 0755);
    wfile(at("upper/opt/added"), "added beside an image file", 0644);
    must(mkfifo(at("upper/opt/pipe"), 0600) == 0, "mkfifo", "pipe");
    wfile(at("upper/opt/.wh.fake"), "a file named like a whiteout", 0644);

    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id[CRL_CKPT_ID_MAX];
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 1");
    is_int(st.removed, 2, "two whiteouts");
    check_overlay(s, id, "overlay 1");

    /* The tar says what it should. */
    int fd = memfd_create("t", MFD_CLOEXEC);
    crl_ckpt_write_tar(s, id, fd, NULL, NULL);
    lseek(fd, 0, SEEK_SET);
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    archive_read_open_fd(a, fd, 65536);
    struct archive_entry *e;
    char order[2048] = "";
    while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
        size_t l = strlen(order);
        snprintf(order + l, sizeof(order) - l, "%s ", archive_entry_pathname(e));
        const char *name;
        const void *val;
        size_t sz;
        archive_entry_xattr_reset(e);
        while (archive_entry_xattr_next(e, &name, &val, &sz) == ARCHIVE_OK)
            if (strncmp(name, "user.", 5) != 0 || strncmp(name, "user.overlay.", 13) == 0)
                fail("the tar carries xattr %s on %s", name, archive_entry_pathname(e));
    }
    archive_read_free(a);
    close(fd);
    is_str(order,
           "etc/ etc/.wh.gone etc/hosts etc/new opt/ opt/added usr/ usr/lib/ "
           "usr/lib/.wh..wh..opq usr/lib/c.so var/ var/.wh.cache ",
           "the tar, in order");

    /* Step 2: a whited-out file comes back; a dir with children in an
     * older manifest becomes opaque; an upper file (over the image) goes. */
    must(unlink(at("upper/etc/gone")) == 0, "unlink", "gone");
    wfile(at("upper/etc/gone"), "back again\n", 0644);
    opaque(at("upper/opt")); /* everything in opt removed, then files recreated */
    must(unlink(at("upper/opt/.wh.fake")) == 0, "unlink", ".wh.fake");
    wfile(at("upper/opt/second"), "second file after opaque", 0644);
    whiteout(at("upper/etc/motd"));
    rm(at("upper/etc/new")); /* only ever in the upper: no whiteout left by overlayfs */
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 2");
    check_overlay(s, id, "overlay 2");

    /* Step 3: an opaque dir goes (a whiteout now), and a whited-out dir
     * comes back as a dir, which overlayfs makes opaque. */
    rm(at("upper/usr/lib"));
    whiteout(at("upper/usr/lib"));
    rm(at("upper/var/cache"));
    mkd(at("upper/var/cache"), 0755);
    opaque(at("upper/var/cache"));
    wfile(at("upper/var/cache/y"), "new cache", 0644);
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 3");
    check_overlay(s, id, "overlay 3");

    /* Step 4: a file over the image's dir; step 5: a dir again. */
    rm(at("upper/usr/lib"));
    wfile(at("upper/usr/lib"), "lib is a file", 0644);
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 4");
    check_overlay(s, id, "overlay 4");
    rm(at("upper/usr/lib"));
    mkd(at("upper/usr/lib"), 0755);
    opaque(at("upper/usr/lib"));
    wfile(at("upper/usr/lib/d.so"), "d", 0644);
    ok(take(s, idx, at("upper"), CRL_LAYER_OVERLAY, 0, id, &st) == 0, "overlay: checkpoint 5");
    check_overlay(s, id, "overlay 5");

    struct crl_ckpt_index *loaded = NULL;
    ok(crl_ckpt_index_load(s, id, &loaded, NULL) == 0, "overlay: index_load");
    char again[CRL_CKPT_ID_MAX];
    ok(take(s, loaded, at("upper"), CRL_LAYER_OVERLAY, 0, again, &st) == 0 &&
           strcmp(again, id) == 0,
       "overlay: after index_load, the same id");
    crl_ckpt_index_free(loaded);
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* PLAIN: a dir that replaces a file is restored opaque over an image. */
static void test_replaced_dir(void)
{
    make_dir();
    mkd(at("image"), 0755);
    mkd(at("image/d"), 0755);
    wfile(at("image/d/from-image"), "must not show through", 0644);
    mkd(at("src"), 0755);
    wfile(at("src/d"), "a file over the image dir", 0644);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    char id[CRL_CKPT_ID_MAX];
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, NULL) == 0, "d is a file");
    rm(at("src/d"));
    mkd(at("src/d"), 0755);
    wfile(at("src/d/mine"), "mine", 0644);
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, NULL) == 0, "d is a dir again");
    struct crl_ckpt_stats st;
    ok(restore(s, id, at("image"), at("out"), &st) == 0, "restored over the image");
    ok(access(at("out/d/mine"), F_OK) == 0 && access(at("out/d/from-image"), F_OK) < 0,
       "the image's contents of d do not show through");
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* Two writes of the same size within one clock tick leave ctime as it
 * was: a checkpoint must not trust a key that recent.  (Since Linux 6.13
 * a ctime that was read gets a finer one at the next change, on ext4, xfs,
 * btrfs and tmpfs: there this cannot fail; on 6.1 it can.) */
static void test_racy(void)
{
    make_dir();
    mkd(at("src"), 0755);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id[CRL_CKPT_ID_MAX];
    int missed = 0;
    for (int i = 0; i < 20; i++) {
        char c[8];
        snprintf(c, sizeof(c), "v%04d", i);
        wfile(at("src/f"), c, 0644);
        struct timespec keep = {1000000000, 0};
        struct timespec ts[2] = {keep, keep}; /* the same mtime every time too */
        utimensat(AT_FDCWD, at("src/f"), ts, 0);
        if (take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) < 0 || st.changed != 1) {
            missed++;
            continue;
        }
        struct crl_buf b;
        crl_buf_init(&b, CRL_BUF_UNBOUNDED);
        char blob[CRL_CKPT_ID_MAX];
        crl_sha256_buf(c, strlen(c), blob);
        missed += crl_blob_get(s, blob, &b, 100, NULL) < 0;
        crl_buf_free(&b);
    }
    is_int(missed, 0, "20 rewrites of the same size and mtime at once: each one seen");
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* ---- limits: another filesystem, a tree too deep ---- */

static void test_limits(void)
{
    make_dir();
    mkd(at("src"), 0755);
    wfile(at("src/kept"), "kept", 0644);
    mkd(at("src/mnt"), 0755);
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id[CRL_CKPT_ID_MAX];
    /* A mount below the layer, in a mount namespace of this test's own. */
    if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
        mount("none", at("src/mnt"), "tmpfs", 0, NULL) == 0) {
        wfile(at("src/mnt/elsewhere"), "on another filesystem", 0644);
        ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) == 0, "a mount below the layer");
        is_int(st.entries, 1, "is left out, and nothing below it is read");
        umount(at("src/mnt"));
    } else {
        skip(2, "cannot mount a tmpfs in a mount namespace of our own");
    }
    /* CRL_CKPT_MAX_DEPTH levels of directories. */
    char path[8192];
    int n = snprintf(path, sizeof(path), "%s/src/deep", dir);
    for (int i = 0; i < CRL_CKPT_MAX_DEPTH + 2; i++) {
        must(mkdir(path, 0755) == 0, "mkdir", path);
        n += snprintf(path + n, sizeof(path) - (size_t)n, "/d");
    }
    struct crl_err e = CRL_ERR_INIT;
    char before[CRL_CKPT_ID_MAX];
    snprintf(before, sizeof(before), "%s", crl_ckpt_index_id(idx));
    is_int(take_ex(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st, &e), -1,
           "a tree deeper than %d levels is refused", CRL_CKPT_MAX_DEPTH);
    is_int(e.code, CRL_E_TOO_LARGE, "CRL_E_TOO_LARGE: %.120s...", e.msg);
    is_str(crl_ckpt_index_id(idx), before, "and the index is as it was");
    rm(at("src/deep"));
    ok(take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) == 0 &&
           strcmp(id, crl_ckpt_index_id(idx)) == 0,
       "which takes the next checkpoint as if nothing happened");
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

/* The same walk with bare syscalls (getdents64 and fstatat of each name):
 * what an unchanged checkpoint cannot be faster than. */
static void bare_walk(int dfd, unsigned *count)
{
    static char buf[32768] __attribute__((aligned(8))); /* struct dirent64 */
    char names[65536];
    size_t len = 0;
    ssize_t k;
    while ((k = getdents64(dfd, buf, sizeof(buf))) > 0)
        for (ssize_t o = 0; o < k;) {
            struct dirent64 *de = (struct dirent64 *)(void *)(buf + o);
            o += de->d_reclen;
            size_t l = strlen(de->d_name) + 1;
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && len + l < sizeof(names)) {
                memcpy(names + len, de->d_name, l);
                len += l;
            }
        }
    for (size_t o = 0; o < len; o += strlen(names + o) + 1) {
        struct stat st;
        if (fstatat(dfd, names + o, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        (*count)++;
        if (S_ISDIR(st.st_mode)) {
            int fd = openat(dfd, names + o, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0) {
                bare_walk(fd, count);
                close(fd);
            }
        }
    }
}

static void test_figures(void)
{
    make_dir();
    mkd(at("src"), 0755);
    for (int d = 0; d < 20; d++) {
        mkd(at("src/d%02d", d), 0755);
        for (int f = 0; f < 50; f++) {
            char c[128];
            snprintf(c, sizeof(c), "file %d of dir %d: a small file, as most are\n", f, d);
            wfile(at("src/d%02d/f%02d.txt", d, f), c, 0644);
        }
    }
    usleep(50000); /* ctimes older than the clock tick: keys are trusted */
    struct crl_ckpt_store *s = open_store("store");
    struct crl_ckpt_index *idx = crl_ckpt_index_new();
    struct crl_ckpt_stats st;
    char id1[CRL_CKPT_ID_MAX], id[CRL_CKPT_ID_MAX];
    unsigned long long t = crl_now_ns();
    int fails = take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id1, &st) < 0;
    unsigned long long first = crl_now_ns() - t;
    diag("1,020 entries: first checkpoint %.2f ms (%llu blobs, %llu bytes stored)", ms(first),
         (unsigned long long)st.blobs_new, (unsigned long long)st.bytes_stored);

    enum { N = 20 };
    unsigned long long best = ~0ull, sum = 0;
    uint64_t read = 0;
    for (int i = 0; i < N; i++) {
        t = crl_now_ns();
        fails += take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) < 0 || strcmp(id, id1) != 0;
        unsigned long long d = crl_now_ns() - t;
        sum += d;
        best = d < best ? d : best;
        read += st.bytes_read;
    }
    is_int(read, 0, "unchanged, %d times: no file content read (fast-path keys)", N);
    unsigned long long bare = 0, bare_best = ~0ull;
    unsigned count = 0;
    for (int i = 0; i < N; i++) {
        t = crl_now_ns();
        int fd = open(at("src"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        bare_walk(fd, &count);
        close(fd);
        unsigned long long d = crl_now_ns() - t;
        bare += d;
        bare_best = d < bare_best ? d : bare_best;
    }
    diag("unchanged checkpoint of 1,020 entries: %.3f ms mean, %.3f ms best; the bare walk "
         "(getdents64 + fstatat, %u entries): %.3f ms mean, %.3f ms best: %.2fx",
         ms(sum / N), ms(best), count / N, ms(bare / N), ms(bare_best),
         (double)best / (double)(bare_best ? bare_best : 1));

    /* One small file changed: its blob, the manifest, two fdatasyncs and a
     * directory fsync.  The syncs, measured alone for comparison. */
    unsigned long long one = 0, one_best = ~0ull;
    for (int i = 0; i < N; i++) {
        char c[64];
        snprintf(c, sizeof(c), "changed %d\n", i);
        wfile(at("src/d07/f13.txt"), c, 0644);
        t = crl_now_ns();
        fails += take(s, idx, at("src"), CRL_LAYER_PLAIN, 0, id, &st) < 0;
        unsigned long long d = crl_now_ns() - t;
        one += d;
        one_best = d < one_best ? d : one_best;
        fails += st.changed != 1 || st.blobs_new != 2;
    }
    unsigned long long sync = 0;
    for (int i = 0; i < N; i++) {
        char c[64], bid[CRL_CKPT_ID_MAX];
        snprintf(c, sizeof(c), "sync figure %d %llu", i, crl_now_ns());
        t = crl_now_ns();
        fails += crl_blob_put(s, c, strlen(c), bid, NULL) < 0;
        snprintf(c, sizeof(c), "sync figure b %d %llu", i, crl_now_ns());
        fails += crl_blob_put(s, c, strlen(c), bid, NULL) < 0;
        fails += crl_ckpt_store_sync(s, NULL) < 0;
        sync += crl_now_ns() - t;
    }
    double change = ms(one_best) - ms(best) - ms(sync / N);
    diag("one small file changed in 1,020 entries: %.3f ms mean, %.3f ms best; two blob puts and "
         "a sync alone: %.3f ms mean; so beyond the unchanged walk and the syncs, the change "
         "costs ~%.3f ms",
         ms(one / N), ms(one_best), ms(sync / N), change > 0 ? change : 0.0);

    /* The same, on a layer of 10 files. */
    mkd(at("small"), 0755);
    for (int f = 0; f < 10; f++)
        wfile(at("small/f%d", f), "small", 0644);
    struct crl_ckpt_index *sidx = crl_ckpt_index_new();
    fails += take(s, sidx, at("small"), CRL_LAYER_PLAIN, 0, id, &st) < 0;
    unsigned long long small = 0;
    for (int i = 0; i < N; i++) {
        char c[64];
        snprintf(c, sizeof(c), "changed %d\n", i);
        wfile(at("small/f3"), c, 0644);
        t = crl_now_ns();
        fails += take(s, sidx, at("small"), CRL_LAYER_PLAIN, 0, id, &st) < 0;
        small += crl_now_ns() - t;
    }
    diag("one small file changed in 10 entries: %.3f ms mean (syncs ~%.3f ms of it)", ms(small / N),
         ms(sync / N));
    crl_ckpt_index_free(sidx);

    int fd = memfd_create("t", MFD_CLOEXEC);
    t = crl_now_ns();
    fails += crl_ckpt_write_tar(s, id1, fd, &st, NULL) < 0;
    unsigned long long tar = crl_now_ns() - t;
    diag("restore stream of 1,020 entries: %.2f ms, %lld bytes of tar", ms(tar),
         (long long)lseek(fd, 0, SEEK_CUR));
    close(fd);

    struct crl_ckpt_index *loaded = NULL;
    t = crl_now_ns();
    fails += crl_ckpt_index_load(s, crl_ckpt_index_id(idx), &loaded, NULL) < 0;
    unsigned long long load = crl_now_ns() - t;
    t = crl_now_ns();
    fails += take(s, loaded, at("src"), CRL_LAYER_PLAIN, 0, id, &st) < 0 ||
             strcmp(id, crl_ckpt_index_id(idx)) != 0;
    unsigned long long hashed = crl_now_ns() - t;
    diag("index_load of a %d-deep chain: %.2f ms; the next checkpoint, hashing every file: "
         "%.2f ms (%llu bytes read)",
         N + 1, ms(load), ms(hashed), (unsigned long long)st.bytes_read);
    crl_ckpt_index_free(loaded);
    is_int(fails, 0, "every checkpoint of the figures succeeded as expected");
    crl_ckpt_index_free(idx);
    crl_ckpt_store_close(s);
    remove_dir();
}

int main(void)
{
    if (geteuid() != 0)
        skip_all("not root: the tests chown, mknod whiteouts and set trusted.* xattrs");
    TAP_RUN(test_plain, 60);
    TAP_RUN(test_determinism, 30);
    TAP_RUN(test_overlay, 60);
    TAP_RUN(test_replaced_dir, 30);
    TAP_RUN(test_racy, 30);
    TAP_RUN(test_limits, 60);
    TAP_RUN(test_figures, 120);
    return done_testing();
}
