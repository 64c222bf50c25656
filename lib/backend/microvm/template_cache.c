/* Saved templates that outlive their corrald: a template once booted and
 * saved is also written to a cache directory (--template-cache, by default
 * <state>/templates), so that a restarted corrald, or another on the same
 * machine, restores its guests at once instead of booting a template
 * again: a full system's boot is tens of seconds under TCG.
 *
 * An entry is a template's kind and everything its migration stream
 * depends on, hashed (cache_key): the guest's kernel and initramfs (their
 * contents: the agent is in the initramfs), QEMU's binary (its identity:
 * a stream only loads into the QEMU that wrote it), the accelerator, the
 * machine, and the template's own kind (shape, devices; a full system's
 * image and disk size).  Its files, named by the key and a random boot id
 * so that a reader never pairs one boot's state with another's RAM:
 *
 *   <key>-<boot>.state   the devices' state (QEMU's migration stream)
 *   <key>-<boot>.ram     the guest's RAM as saved (sparse)
 *   <key>-<boot>.disk    a full system's disk (sparse; a hard link of the
 *                        template's where the file system allows)
 *   <key>.json           written last, by rename: which boot, its HELLO,
 *                        the sizes to check the files against
 *
 * A load copies the RAM into a new memfd, sealed as a built template's is,
 * and restores from the entry's state and disk files, which are never
 * written again (a new save of the key writes new files and renames its
 * json over; the old files go then, and whoever has them open keeps
 * them).  Anything that does not check is ignored: the template is built. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/sha256.h"
#include "mvm_int.h"

/* Entries kept: the oldest beyond this go at a save. */
#define CACHE_MAX_ENTRIES 32

/* ---- the key ---- */

static int hash_file(struct crl_sha256 *h, const char *path, struct crl_err *err)
{
    cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return crl_err_sys(err, errno, "open %s", path);
    return crl_sha256_update_fd(h, fd, NULL) < 0 ? crl_err_sys(err, errno, "read %s", path) : 0;
}

int mvm_cache_init(struct mvm_state *st, const char *dir, struct crl_err *err)
{
    st->cache[0] = 0;
    if (!dir || !dir[0] || st->missing[0])
        return 0;
    if (crl_mkdir_p(dir, 0700) < 0)
        return crl_err_sys(err, errno, "the template cache %s", dir);
    struct crl_sha256 h;
    if (crl_sha256_init(&h) < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "sha256");
    struct stat q;
    char line[256];
    int r = hash_file(&h, st->kernel, err);
    if (r == 0)
        r = hash_file(&h, st->initrd, err);
    if (r == 0 && stat(st->qemu, &q) < 0)
        r = crl_err_sys(err, errno, "stat %s", st->qemu);
    if (r < 0) {
        crl_sha256_free(&h);
        return -1;
    }
    snprintf(line, sizeof(line), "qemu %s %" PRIu64 " %" PRIu64 " %" PRId64 ".%09ld accel %s",
             st->qemu, (uint64_t)q.st_dev, (uint64_t)q.st_ino, (int64_t)q.st_mtim.tv_sec,
             q.st_mtim.tv_nsec, st->accel);
    crl_sha256_update(&h, line, strlen(line));
    crl_sha256_final(&h, st->cache_ident);
    snprintf(st->cache, sizeof(st->cache), "%s", dir);
    return 0;
}

void mvm_cache_key(const struct mvm_state *st, const struct mvm_template_key *k, char out[17])
{
    char text[512], digest[CRL_DIGEST_LEN + 1];
    snprintf(text, sizeof(text), "%s %s %u %u %d %d %s %u", st->cache_ident,
             st->machine == MVM_PC ? "pc" : "microvm", k->mem_mb, k->vcpus, k->nic, k->volume_slots,
             st->machine == MVM_PC ? k->image_id : "-", st->machine == MVM_PC ? k->disk_mb : 0);
    crl_sha256_buf(text, strlen(text), digest);
    snprintf(out, 17, "%.16s", crl_digest_hex(digest));
}

/* ---- files ---- */

/* Copy what `in` holds (its data, not its holes) into `out`, size bytes. */
static int copy_sparse(int in, int out, off_t size, struct crl_err *err)
{
    if (ftruncate(out, size) < 0)
        return crl_err_sys(err, errno, "ftruncate");
    static char buf[1 << 20];
    off_t pos = 0;
    while (pos < size) {
        off_t data = lseek(in, pos, SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            break; /* only a hole is left */
        if (data < 0)
            return crl_err_sys(err, errno, "lseek SEEK_DATA");
        off_t hole = lseek(in, data, SEEK_HOLE);
        if (hole < 0)
            return crl_err_sys(err, errno, "lseek SEEK_HOLE");
        for (off_t o = data; o < hole;) {
            size_t want = (size_t)(hole - o) < sizeof(buf) ? (size_t)(hole - o) : sizeof(buf);
            ssize_t n = pread(in, buf, want, o);
            if (n <= 0)
                return crl_err_sys(err, n < 0 ? errno : EIO, "read at %lld", (long long)o);
            if (pwrite(out, buf, (size_t)n, o) != n)
                return crl_err_sys(err, errno, "write at %lld", (long long)o);
            o += n;
        }
        pos = hole;
    }
    return 0;
}

/* dir/name made from `in` (size bytes): a hard link of `in_path` where
 * one is given and the file system allows, else a sparse copy. */
static int put(const struct mvm_state *st, const char *name, int in, const char *in_path,
               off_t size, struct crl_err *err)
{
    char path[PATH_MAX + 64], tmp[PATH_MAX + 96];
    snprintf(path, sizeof(path), "%s/%s", st->cache, name);
    if (in_path && link(in_path, path) == 0)
        return 0;
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", st->cache, name);
    cleanup_close int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0)
        return crl_err_sys(err, errno, "create %s", tmp);
    if (copy_sparse(in, out, size, err) < 0 || rename(tmp, path) < 0) {
        if (!err->code)
            crl_err_sys(err, errno, "rename %s", tmp);
        unlink(tmp);
        return crl_err_prefix(err, "%s", path);
    }
    return 0;
}

static void remove_boot(const struct mvm_state *st, const char *key, const char *boot)
{
    static const char *const ext[] = {"state", "ram", "disk"};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(ext); i++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof(p), "%s/%s-%s.%s", st->cache, key, boot, ext[i]);
        unlink(p);
    }
}

/* The entry's json, parsed; NULL if there is none that reads. */
static json_t *read_meta(const struct mvm_state *st, const char *key)
{
    char p[PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/%s.json", st->cache, key);
    return json_load_file(p, 0, NULL);
}

void mvm_cache_remove(const struct mvm_state *st, const char *key)
{
    if (!st->cache[0])
        return;
    json_t *m = read_meta(st, key);
    const char *boot = json_string_value(json_object_get(m, "boot"));
    if (boot && strspn(boot, "0123456789abcdef") == strlen(boot))
        remove_boot(st, key, boot);
    json_decref(m);
    char p[PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/%s.json", st->cache, key);
    unlink(p);
}

/* The oldest entries beyond CACHE_MAX_ENTRIES go (of the first 256 seen). */
static void trim(const struct mvm_state *st)
{
    struct ent {
        char key[17];
        time_t mtime;
    } ents[256];
    size_t n = 0;
    DIR *d = opendir(st->cache);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < CRL_ARRAY_SIZE(ents)) {
        struct stat sb;
        if (strlen(e->d_name) != 21 || strcmp(e->d_name + 16, ".json") != 0 ||
            fstatat(dirfd(d), e->d_name, &sb, 0) < 0)
            continue;
        snprintf(ents[n].key, sizeof(ents[n].key), "%.16s", e->d_name);
        ents[n++].mtime = sb.st_mtime;
    }
    if (d)
        closedir(d);
    while (n > CACHE_MAX_ENTRIES) {
        size_t oldest = 0;
        for (size_t i = 1; i < n; i++)
            oldest = ents[i].mtime < ents[oldest].mtime ? i : oldest;
        mvm_cache_remove(st, ents[oldest].key);
        ents[oldest] = ents[--n];
    }
}

int mvm_cache_save(const struct mvm_state *st, const char *key, const struct mvm_cache_entry *c,
                   struct crl_err *err)
{
    if (!st->cache[0])
        return 0;
    uint8_t rnd[8];
    char boot[17];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return crl_err_sys(err, errno, "getrandom");
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(boot + 2 * i, 3, "%02x", rnd[i]);
    struct stat ss, rs, ds;
    cleanup_close int state = open(c->state_path, O_RDONLY | O_CLOEXEC);
    cleanup_close int disk = c->disk_path[0] ? open(c->disk_path, O_RDONLY | O_CLOEXEC) : -1;
    if (state < 0 || fstat(state, &ss) < 0 || fstat(c->ram_fd, &rs) < 0 ||
        (c->disk_path[0] && (disk < 0 || fstat(disk, &ds) < 0)))
        return crl_err_sys(err, errno, "the template's files");
    char name[64];
    int r;
    snprintf(name, sizeof(name), "%s-%s.state", key, boot);
    r = put(st, name, state, c->state_path, ss.st_size, err);
    snprintf(name, sizeof(name), "%s-%s.ram", key, boot);
    if (r == 0)
        r = put(st, name, c->ram_fd, NULL, rs.st_size, err);
    snprintf(name, sizeof(name), "%s-%s.disk", key, boot);
    if (r == 0 && disk >= 0)
        r = put(st, name, disk, c->disk_path, ds.st_size, err);
    json_t *m = r == 0 ? json_pack("{s:s, s:{s:i, s:s, s:s}, s:I, s:I, s:I, s:s}", "boot", boot,
                                   "hello", "proto", c->hello.proto, "agent", c->hello.agent,
                                   "kernel", c->hello.kernel, "state_bytes", (json_int_t)ss.st_size,
                                   "ram_bytes", (json_int_t)rs.st_size, "disk_bytes",
                                   (json_int_t)(disk >= 0 ? ds.st_size : 0), "template", c->name)
                       : NULL;
    char meta[PATH_MAX + 32], tmp[PATH_MAX + 48];
    snprintf(meta, sizeof(meta), "%s/%s.json", st->cache, key);
    snprintf(tmp, sizeof(tmp), "%s/.%s.json.tmp", st->cache, key);
    json_t *old = r == 0 ? read_meta(st, key) : NULL;
    if (r == 0 && (!m || json_dump_file(m, tmp, JSON_COMPACT) < 0 || rename(tmp, meta) < 0))
        r = crl_err_sys(err, errno ? errno : ENOMEM, "write %s", meta);
    json_decref(m);
    const char *old_boot = json_string_value(json_object_get(old, "boot"));
    if (r == 0 && old_boot && strspn(old_boot, "0123456789abcdef") == strlen(old_boot))
        remove_boot(st, key, old_boot); /* an earlier save of the same key */
    json_decref(old);
    if (r < 0) {
        unlink(tmp);
        remove_boot(st, key, boot);
        return -1;
    }
    trim(st);
    return 0;
}

int mvm_cache_load(const struct mvm_state *st, const char *key, unsigned mem_mb,
                   struct mvm_cache_entry *c, struct crl_err *err)
{
    if (!st->cache[0])
        return 0;
    json_t *m = read_meta(st, key);
    if (!m)
        return 0;
    const char *boot = json_string_value(json_object_get(m, "boot"));
    json_t *hello = json_object_get(m, "hello");
    const char *agent = json_string_value(json_object_get(hello, "agent"));
    const char *kernel = json_string_value(json_object_get(hello, "kernel"));
    json_int_t sizes[3] = {json_integer_value(json_object_get(m, "state_bytes")),
                           json_integer_value(json_object_get(m, "ram_bytes")),
                           json_integer_value(json_object_get(m, "disk_bytes"))};
    int r = 0;
    if (!boot || strlen(boot) != 16 || strspn(boot, "0123456789abcdef") != 16 || !agent ||
        !kernel || strlen(agent) >= sizeof(c->hello.agent) ||
        strlen(kernel) >= sizeof(c->hello.kernel) ||
        sizes[1] != (json_int_t)((uint64_t)mem_mb << 20)) {
        crl_warn(NULL, "template cache %s/%s.json: not an entry of this kind: ignored", st->cache,
                 key);
        goto out;
    }
    c->hello.proto = (int)json_integer_value(json_object_get(hello, "proto"));
    snprintf(c->hello.agent, sizeof(c->hello.agent), "%s", agent);
    snprintf(c->hello.kernel, sizeof(c->hello.kernel), "%s", kernel);
    static const char *const ext[] = {"state", "ram", "disk"};
    char paths[3][PATH_MAX];
    int fds[3] = {-1, -1, -1};
    for (int i = 0; i < 3; i++) {
        struct stat sb;
        snprintf(paths[i], sizeof(paths[i]), "%s/%s-%s.%s", st->cache, key, boot, ext[i]);
        if (i == 2 && sizes[2] == 0)
            break;
        if ((fds[i] = open(paths[i], O_RDONLY | O_CLOEXEC)) < 0 || fstat(fds[i], &sb) < 0 ||
            sb.st_size != sizes[i]) {
            crl_warn(NULL, "template cache: %s is missing or of another size: ignored", paths[i]);
            close_fds(fds, 3);
            goto out;
        }
    }
    /* The RAM into a memfd, sealed as a built template's. */
    c->ram_fd = memfd_create(key, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (c->ram_fd < 0 || copy_sparse(fds[1], c->ram_fd, (off_t)sizes[1], err) < 0 ||
        fcntl(c->ram_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) <
            0) {
        if (!err->code)
            crl_err_sys(err, errno, "the template's RAM from %s", paths[1]);
        close_fd(&c->ram_fd);
        close_fds(fds, 3);
        r = -1;
        goto out;
    }
    close_fds(fds, 3);
    snprintf(c->state_path, sizeof(c->state_path), "%s", paths[0]);
    snprintf(c->disk_path, sizeof(c->disk_path), "%s", sizes[2] ? paths[2] : "");
    c->state_bytes = (uint64_t)sizes[0];
    r = 1;
out:
    json_decref(m);
    return r;
}
