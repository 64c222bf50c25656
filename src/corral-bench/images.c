/* corral bench images: what images cost, measured on this machine in one
 * run against a peer where there is one:
 *
 *   1. importing an image (an OCI layout of the debian image's layer, as
 *      umoci writes it) through the API, against `umoci unpack` of the
 *      same layout;
 *   2. sandbox create latency from that large image against busybox's;
 *   3. the disk N sandboxes of it use, against N unpacked copies.
 *
 * It prints figures and ratios and never judges an absolute time. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../lib/client/copy.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "bench.h"
#include "daemon.h"
#include "peer.h"
#include "../corral/cli.h"

#define DEFAULT_ITERATIONS 50
#define DEFAULT_IMPORTS 3
#define DEFAULT_SANDBOXES 100
#define MEMORY_MB 64
/* 100 sandboxes at the default 1 CPU each would pass the admission cap of
 * 16 CPUs per host CPU on a small host; the disk figure is not about CPU. */
#define DISK_CPUS 0.1
#define IMPORT_PREFIX "bench-import-"
#define MIB (1024.0 * 1024.0)

extern char **environ;

static const char help[] =
    "usage: corral bench images [OPTIONS]\n"
    "\n"
    "Measure, on this machine and in one run, with the image NAME (one layer):\n"
    "  1. import: POST /v1/images of an OCI layout of NAME's layer (made by umoci,\n"
    "     one gzip layer), each time into an empty store, against `umoci unpack`\n"
    "     of the same layout: p50 of each and the ratio;\n"
    "  2. create latency (64 MiB) of NAME against busybox, interleaved: p50, p99\n"
    "     and the ratio of the p50s;\n"
    "  3. disk: N sandboxes of NAME, each writing a small file: the growth of the\n"
    "     state directory's filesystem and their upper dirs, against NAME stored\n"
    "     once and N unpacked copies of its root filesystem.\n"
    "Prints a table and a JSON line.  Uses corrald at $CORRAL_URL unless\n"
    "--start-daemon; needs root (mount, umoci) and umoci.\n"
    "\n"
    "  --start-daemon      run a private corrald (next to this corral, fresh state\n"
    "                      in a temporary directory) for the bench, stop it after\n"
    "  --image NAME        the large image (default debian)\n"
    "  --iterations N      creates measured per image (default 50)\n"
    "  --imports N         imports and unpacks measured (default 3)\n"
    "  --sandboxes N       sandboxes for the disk figure (default 100)\n"
    "  --json              print only the JSON line\n";

struct opts {
    const char *image;
    size_t iterations, imports, sandboxes;
    bool quiet;
};

struct results {
    char host_id[32], state_dir[PATH_MAX];
    long long layer_bytes;    /* the image's layer, stored */
    long long layout_bytes;   /* the OCI layout both sides read */
    long long imported_bytes; /* the layer our import stored */
    long long unpacked_bytes; /* one unpacked root filesystem, du */
    long long image_bytes;    /* the image, stored: its layers */
    struct crl_bench_samples imp, unpack, create_busybox, create_image;
    size_t made;                /* sandboxes in the disk phase */
    char refused[480];          /* why admission stopped it, if it did */
    long long vfs_growth_bytes; /* statvfs of the state dir, after - before */
    long long upper_bytes;      /* sum of usage.disk_bytes */
    long long memory_bytes;     /* sum of usage.memory_bytes */
};

/* What the run made, so that every way out, an error or a signal included,
 * undoes it. */
struct scratch {
    struct crl_client *c;
    char dir[64];       /* /tmp/corral-bench-images.XXXXXX: layout, bundles */
    char mnt[PATH_MAX]; /* the image's layer, mounted */
    char **ids;         /* live sandboxes */
    size_t nids, cap;
    size_t imports; /* bench-import-0.. up to this may exist */
};

#define STEP(o, ...)                                              \
    do {                                                          \
        if (!(o)->quiet) {                                        \
            fprintf(stderr, "corral bench images: " __VA_ARGS__); \
            fputc('\n', stderr);                                  \
        }                                                         \
    } while (0)

/* Write back what earlier steps left dirty on dir's filesystem, so that a
 * timed step does not pay for the one before it. */
static void settle(const char *dir)
{
    cleanup_close int fd = crl_openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY, 0);
    if (fd >= 0)
        syncfs(fd);
}

/* ---- commands: umoci, cp ---- */

/* Run argv (searched in PATH) to its end, stdout to /dev/null; a failure
 * names the command and the first line it wrote to stderr. */
static int run_cmd(char *const argv[], struct crl_err *err)
{
    FILE *errf = tmpfile();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    if (errf)
        posix_spawn_file_actions_adddup2(&fa, fileno(errf), STDERR_FILENO);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        if (errf)
            fclose(errf);
        return crl_err_sys(err, rc, "running %s", argv[0]);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            status = -1;
            break;
        }
    char msg[256] = "";
    if (errf) {
        ssize_t n = pread(fileno(errf), msg, sizeof(msg) - 1, 0);
        msg[n > 0 ? n : 0] = 0;
        msg[strcspn(msg, "\n")] = 0;
        fclose(errf);
    }
    if (status != 0)
        return crl_err_set(err, CRL_E_INTERNAL, "%s %s failed (wait status %d): %s", argv[0],
                           argv[1] ? argv[1] : "", status, msg);
    return 0;
}

/* ---- du: bytes a tree takes on disk, hard links once ---- */

struct inode_use {
    dev_t dev;
    ino_t ino;
    long long bytes;
};

/* nftw() passes no context: the walk's state is file-scoped. */
static struct {
    bool apparent; /* st_size instead of allocated blocks */
    long long bytes;
    struct inode_use *linked; /* files with st_nlink > 1, counted at the end */
    size_t n, cap;
} du;

static int du_visit(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    long long b = du.apparent ? (long long)st->st_size : (long long)st->st_blocks * 512;
    if (flag == FTW_NS)
        return 0;
    if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
        if (du.n == du.cap) {
            size_t cap = du.cap ? du.cap * 2 : 256;
            struct inode_use *p = realloc(du.linked, cap * sizeof(*p));
            if (!p)
                return -1;
            du.linked = p;
            du.cap = cap;
        }
        du.linked[du.n++] = (struct inode_use){st->st_dev, st->st_ino, b};
        return 0;
    }
    du.bytes += b;
    return 0;
}

static int cmp_inode(const void *a, const void *b)
{
    const struct inode_use *x = a, *y = b;
    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* What `du -s` (or, apparent, `du -s --apparent-size`) says of `path`. */
static int du_tree(const char *path, bool apparent, long long *out, struct crl_err *err)
{
    du.apparent = apparent;
    du.bytes = 0;
    du.n = 0;
    int rc = nftw(path, du_visit, 64, FTW_PHYS | FTW_MOUNT);
    if (rc == 0) {
        qsort(du.linked, du.n, sizeof(*du.linked), cmp_inode);
        for (size_t i = 0; i < du.n; i++)
            if (i == 0 || cmp_inode(&du.linked[i - 1], &du.linked[i]) != 0)
                du.bytes += du.linked[i].bytes;
        *out = du.bytes;
    }
    free(du.linked);
    du.linked = NULL;
    du.n = du.cap = 0;
    if (rc != 0)
        return crl_err_sys(err, errno ? errno : ENOMEM, "walking %s", path);
    return 0;
}

/* ---- sandboxes, tracked so that none outlives the run ---- */

static json_t *sandbox_spec(const char *image, double cpus)
{
    json_t *spec = json_pack("{s:s, s:{s:i}, s:{s:s}}", "image", image, "resources", "memory_mb",
                             MEMORY_MB, "labels", "corral-bench", "1");
    if (spec && cpus > 0)
        json_object_set_new(json_object_get(spec, "resources"), "cpus", json_real(cpus));
    return spec;
}

static int create_tracked(struct scratch *s, json_t *spec, const char **id, struct crl_err *err)
{
    if (s->nids == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        char **p = realloc(s->ids, cap * sizeof(*p));
        if (!p)
            return crl_err_sys(err, ENOMEM, "allocating sandbox ids");
        s->ids = p;
        s->cap = cap;
    }
    json_auto_t *sb = NULL;
    if (crl_client_create(s->c, spec, &sb, err) < 0)
        return -1;
    char *dup = strdup(crl_cli_str(sb, "id", ""));
    if (!dup) {
        /* Not tracked: destroy it here. */
        crl_client_destroy(s->c, crl_cli_str(sb, "id", ""), NULL, NULL);
        return crl_err_sys(err, ENOMEM, "allocating a sandbox id");
    }
    s->ids[s->nids++] = dup;
    *id = dup;
    return 0;
}

/* Destroy the most recently created sandbox; one that will not go stays
 * tracked, for scratch_cleanup() to try again. */
static int destroy_last(struct scratch *s, struct crl_err *err)
{
    char *id = s->ids[s->nids - 1];
    if (crl_client_destroy(s->c, id, NULL, err) < 0)
        return crl_err_prefix(err, "destroy %s", id);
    free(id);
    s->nids--;
    return 0;
}

static void scratch_cleanup(struct scratch *s)
{
    while (s->nids > 0) {
        struct crl_err e = CRL_ERR_INIT;
        char *id = s->ids[--s->nids];
        if (crl_client_destroy(s->c, id, NULL, &e) < 0 && e.code != CRL_E_NOT_FOUND)
            fprintf(stderr, "corral: bench images: could not destroy %s: %s\n", id, e.msg);
        free(id);
    }
    free(s->ids);
    s->ids = NULL;
    bool removed = false;
    for (size_t i = 0; i < s->imports; i++) {
        struct crl_err e = CRL_ERR_INIT;
        char path[64];
        snprintf(path, sizeof(path), "/v1/images/" IMPORT_PREFIX "%zu", i);
        if (crl_client_request(s->c, "DELETE", path, NULL, NULL, NULL, &e) == 0)
            removed = true;
    }
    if (removed)
        crl_client_request(s->c, "POST", "/v1/images/gc", NULL, NULL, NULL, NULL);
    crl_bench_layer_release(s->mnt);
    s->mnt[0] = 0;
    if (s->dir[0] && crl_rm_rf_at(AT_FDCWD, s->dir) < 0)
        fprintf(stderr, "corral: bench images: could not remove %s: %s\n", s->dir, strerror(errno));
    s->dir[0] = 0;
}

/* ---- 0. the layout both importers read ---- */

static int setup(struct scratch *s, const struct opts *o, struct results *r, struct crl_err *err)
{
    json_auto_t *h = NULL, *img = NULL;
    if (crl_client_request(s->c, "GET", "/v1/host", NULL, &h, NULL, err) < 0)
        return -1;
    snprintf(r->host_id, sizeof(r->host_id), "%s", crl_cli_str(h, "host_id", "?"));
    snprintf(r->state_dir, sizeof(r->state_dir), "%s", crl_cli_str(h, "state_dir", ""));
    if (crl_bench_layer_mount(s->c, o->image, s->mnt, sizeof(s->mnt), &r->layer_bytes, err) < 0) {
        char msg[sizeof(err->msg)];
        snprintf(msg, sizeof(msg), "%s", err->msg);
        if (err->code == CRL_E_NOT_FOUND)
            crl_err_set(err, CRL_E_NOT_FOUND, "%s (`make images` builds debian in build/images)",
                        msg);
        return -1;
    }
    snprintf(s->dir, sizeof(s->dir), "/tmp/corral-bench-images.XXXXXX");
    if (!mkdtemp(s->dir)) {
        s->dir[0] = 0;
        return crl_err_sys(err, errno, "creating a temporary directory");
    }
    char layout[128], tagged[140], bundle[128], rootfs[140], src[PATH_MAX + 4];
    snprintf(layout, sizeof(layout), "%s/layout", s->dir);
    snprintf(tagged, sizeof(tagged), "%s:d", layout);
    snprintf(bundle, sizeof(bundle), "%s/bundle", s->dir);
    snprintf(rootfs, sizeof(rootfs), "%s/rootfs/", bundle);
    snprintf(src, sizeof(src), "%s/.", s->mnt);
    STEP(o, "making an OCI layout of %s's layer with umoci (untimed)", o->image);
    /* An empty image, unpacked, filled with the layer's tree and repacked:
     * one layer as umoci writes it (a gzip tar), with no blob left over
     * that either side would read for nothing. */
    char *const init[] = {"umoci", "init", "--layout", layout, NULL};
    char *const make[] = {"umoci", "new", "--image", tagged, NULL};
    char *const unpack[] = {"umoci", "unpack", "--image", tagged, bundle, NULL};
    char *const copy[] = {"cp", "-a", src, rootfs, NULL};
    char *const repack[] = {"umoci", "repack", "--image", tagged, bundle, NULL};
    char *const gc[] = {"umoci", "gc", "--layout", layout, NULL};
    char *const *steps[] = {init, make, unpack, copy, repack, gc};
    for (size_t i = 0; i < CRL_ARRAY_SIZE(steps); i++)
        if (run_cmd(steps[i], err) < 0 || crl_bench_check_interrupted(err) < 0)
            return crl_err_prefix(err, "making the OCI layout");
    crl_bench_layer_release(s->mnt);
    s->mnt[0] = 0;
    if (du_tree(layout, true, &r->layout_bytes, err) < 0 ||
        du_tree(rootfs, false, &r->unpacked_bytes, err) < 0)
        return -1;
    char path[320];
    snprintf(path, sizeof(path), "/v1/images/%s", o->image);
    if (crl_client_request(s->c, "GET", path, NULL, &img, NULL, err) < 0)
        return -1;
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(img, "layers"), i, l) r->image_bytes +=
        json_integer_value(json_object_get(l, "size"));
    return 0;
}

/* ---- 1. import against umoci unpack ---- */

struct import_ctx {
    struct crl_client *c;
    const char *name;
    json_t **out;
};

/* As `corral image import DIR` sends a layout: a tar stream made on the fly. */
static int send_layout(void *ctx, crl_client_source_fn source, void *src_ctx, struct crl_err *err)
{
    struct import_ctx *d = ctx;
    return crl_client_image_import(d->c, d->name, NULL, source, src_ctx, -1, d->out, err);
}

static int gc_store(struct crl_client *c, long long *removed, struct crl_err *err)
{
    json_auto_t *out = NULL;
    if (crl_client_request(c, "POST", "/v1/images/gc", NULL, &out, NULL, err) < 0)
        return crl_err_prefix(err, "image gc");
    *removed = json_integer_value(json_object_get(out, "layers_removed"));
    return 0;
}

static int import_once(struct scratch *s, size_t i, struct results *r, struct crl_err *err)
{
    char name[64], path[96], layout[128];
    snprintf(name, sizeof(name), IMPORT_PREFIX "%zu", i);
    snprintf(path, sizeof(path), "/v1/images/%s", name);
    snprintf(layout, sizeof(layout), "%s/layout", s->dir);
    json_auto_t *img = NULL;
    struct import_ctx ctx = {s->c, name, &img};
    s->imports = i + 1;
    settle(s->dir);
    unsigned long long t0 = crl_now_ns();
    if (crl_copy_dir_stream(layout, send_layout, &ctx, err) < 0)
        return crl_err_prefix(err, "importing %s", layout);
    r->imp.ms[r->imp.n++] = crl_bench_ms_since(t0);
    json_t *layers = json_object_get(img, "layers");
    r->imported_bytes = json_integer_value(json_object_get(json_array_get(layers, 0), "size"));
    /* Remove it and collect its layer, so that the next import expands
     * and builds the layer again instead of finding it stored. */
    long long removed = 0;
    if (crl_client_request(s->c, "DELETE", path, NULL, NULL, NULL, err) < 0)
        return crl_err_prefix(err, "removing %s", name);
    if (gc_store(s->c, &removed, err) < 0)
        return -1;
    if (removed < 1)
        return crl_err_set(err, CRL_E_INTERNAL,
                           "removing %s freed no layer: its layer is used by another image, "
                           "so its import was not timed building it",
                           name);
    return 0;
}

static int unpack_once(struct scratch *s, size_t i, struct results *r, struct crl_err *err)
{
    char tagged[140], bundle[128];
    snprintf(tagged, sizeof(tagged), "%s/layout:d", s->dir);
    snprintf(bundle, sizeof(bundle), "%s/unpack-%zu", s->dir, i);
    char *const argv[] = {"umoci", "unpack", "--image", tagged, bundle, NULL};
    settle(s->dir);
    unsigned long long t0 = crl_now_ns();
    int rc = run_cmd(argv, err);
    if (rc == 0)
        r->unpack.ms[r->unpack.n++] = crl_bench_ms_since(t0);
    crl_rm_rf_at(AT_FDCWD, bundle);
    return rc;
}

static int measure_imports(struct scratch *s, const struct opts *o, struct results *r,
                           struct crl_err *err)
{
    long long removed;
    if (crl_bench_samples_alloc(&r->imp, o->imports, err) < 0 ||
        crl_bench_samples_alloc(&r->unpack, o->imports, err) < 0)
        return -1;
    /* A layer left unreferenced by an earlier run would make the first
     * import a dedup. */
    if (gc_store(s->c, &removed, err) < 0)
        return -1;
    /* Interleaved, so that drift in the machine's speed hits both. */
    for (size_t i = 0; i < o->imports; i++) {
        STEP(o, "import %zu of %zu, and umoci unpack", i + 1, o->imports);
        if (import_once(s, i, r, err) < 0 || crl_bench_check_interrupted(err) < 0 ||
            unpack_once(s, i, r, err) < 0 || crl_bench_check_interrupted(err) < 0)
            return -1;
    }
    return 0;
}

/* ---- 2. create latency: the large image against busybox ---- */

static int create_timed(struct scratch *s, json_t *spec, struct crl_bench_samples *out,
                        struct crl_err *err)
{
    const char *id;
    unsigned long long t0 = crl_now_ns();
    if (create_tracked(s, spec, &id, err) < 0)
        return crl_err_prefix(err, "create (%s)", crl_cli_str(spec, "image", "?"));
    double ms = crl_bench_ms_since(t0);
    if (out)
        out->ms[out->n++] = ms;
    return destroy_last(s, err);
}

static int measure_creates(struct scratch *s, const struct opts *o, struct results *r,
                           struct crl_err *err)
{
    json_auto_t *bb = sandbox_spec("busybox", 0);
    json_auto_t *big = sandbox_spec(o->image, 0);
    size_t warm = o->iterations / 10 > 5 ? o->iterations / 10 : 5;
    if (crl_bench_samples_alloc(&r->create_busybox, o->iterations, err) < 0 ||
        crl_bench_samples_alloc(&r->create_image, o->iterations, err) < 0)
        return -1;
    STEP(o, "create latency, busybox and %s interleaved (%zu warm-up, %zu each)", o->image, warm,
         o->iterations);
    for (size_t i = 0; i < warm + o->iterations; i++) {
        bool measured = i >= warm;
        struct crl_bench_samples *a = measured ? &r->create_busybox : NULL;
        struct crl_bench_samples *b = measured ? &r->create_image : NULL;
        /* Alternate which goes first, so neither always follows the other's
         * destroy. */
        int rc = i % 2 ? create_timed(s, big, b, err) || create_timed(s, bb, a, err)
                       : create_timed(s, bb, a, err) || create_timed(s, big, b, err);
        if (rc || crl_bench_check_interrupted(err) < 0)
            return -1;
    }
    return 0;
}

/* ---- 3. disk: N sandboxes of the image ---- */

static int fs_used(const char *dir, long long *used, struct crl_err *err)
{
    struct statvfs v;
    /* Written data may still sit in the page cache: count it allocated. */
    settle(dir);
    if (statvfs(dir, &v) < 0)
        return crl_err_sys(err, errno, "statvfs %s", dir);
    *used = (long long)(v.f_blocks - v.f_bfree) * (long long)v.f_frsize;
    return 0;
}

static int measure_disk(struct scratch *s, const struct opts *o, struct results *r,
                        struct crl_err *err)
{
    json_auto_t *spec = sandbox_spec(o->image, DISK_CPUS);
    json_auto_t *req = json_pack("{s:[s,s,s]}", "cmd", "/bin/sh", "-c", "echo x > /root/f");
    long long before, after;
    if (fs_used(r->state_dir, &before, err) < 0)
        return -1;
    STEP(o, "disk: %zu sandboxes of %s, each writing /root/f", o->sandboxes, o->image);
    size_t first = s->nids;
    for (size_t i = 0; i < o->sandboxes; i++) {
        const char *id;
        json_auto_t *res = NULL;
        if (crl_bench_check_interrupted(err) < 0)
            return -1;
        if (create_tracked(s, spec, &id, err) < 0) {
            if (err->code != CRL_E_CAPACITY)
                return crl_err_prefix(err, "create %zu of %zu", i + 1, o->sandboxes);
            snprintf(r->refused, sizeof(r->refused), "%s", err->msg);
            crl_err_clear(err);
            fprintf(stderr, "corral: bench images: admission refused sandbox %zu: %s\n", i + 1,
                    r->refused);
            break;
        }
        if (crl_client_exec(s->c, id, req, &res, err) < 0)
            return crl_err_prefix(err, "exec in %s", id);
        if (crl_client_exit_status(res) != 0)
            return crl_err_set(err, CRL_E_INTERNAL, "writing /root/f in %s: status %d (%s)", id,
                               crl_client_exit_status(res), crl_cli_str(res, "reason", "?"));
        r->made++;
    }
    if (fs_used(r->state_dir, &after, err) < 0)
        return -1;
    r->vfs_growth_bytes = after - before;
    for (size_t i = first; i < s->nids; i++) {
        json_auto_t *sb = NULL;
        if (crl_client_inspect(s->c, s->ids[i], &sb, err) < 0)
            return crl_err_prefix(err, "inspect %s", s->ids[i]);
        json_t *u = json_object_get(sb, "usage");
        r->upper_bytes += json_integer_value(json_object_get(u, "disk_bytes"));
        r->memory_bytes += json_integer_value(json_object_get(u, "memory_bytes"));
    }
    STEP(o, "destroying them");
    while (s->nids > first)
        if (destroy_last(s, err) < 0 || crl_bench_check_interrupted(err) < 0)
            return -1;
    return 0;
}

/* ---- the report ---- */

static json_t *seconds_json(const struct crl_bench_stats *st)
{
    return json_pack("{s:f, s:f, s:f, s:I}", "p50_s", st->p50 / 1e3, "min_s", st->min / 1e3,
                     "max_s", st->max / 1e3, "n", (json_int_t)st->n);
}

static json_t *ratio_json(double x)
{
    return isnan(x) ? json_null() : json_real(x);
}

static void report(const struct opts *o, struct results *r, const char *load0, const char *load1,
                   bool json_only)
{
    struct crl_bench_stats im = crl_bench_stats_of(&r->imp), un = crl_bench_stats_of(&r->unpack);
    struct crl_bench_stats cb = crl_bench_stats_of(&r->create_busybox),
                           ci = crl_bench_stats_of(&r->create_image);
    double import_x = un.p50 > 0 ? im.p50 / un.p50 : NAN;
    double create_x = cb.p50 > 0 ? ci.p50 / cb.p50 : NAN;
    long long unpacked_n = r->unpacked_bytes * (long long)o->sandboxes;
    struct crl_bench_machine m;
    crl_bench_machine(&m);

    if (!json_only) {
        printf("corral bench images  %s  host %s (%s %s, %ld CPUs)  load %s -> %s\n", m.date,
               r->host_id, m.u.sysname, m.u.release, m.cpus, load0, load1);
        printf("image %s: one layer, %.1f MiB stored (EROFS); as an OCI layout (gzip) %.1f MiB; "
               "unpacked %.1f MiB\n\n",
               o->image, (double)r->layer_bytes / MIB, (double)r->layout_bytes / MIB,
               (double)r->unpacked_bytes / MIB);
        printf("  %-44s %8s %8s %8s\n", "import of the OCI layout", "p50 s", "min s", "max s");
        printf("  %-44s %8.2f %8.2f %8.2f\n", "corral (POST /v1/images, to the 201)", im.p50 / 1e3,
               im.min / 1e3, im.max / 1e3);
        printf("  %-44s %8.2f %8.2f %8.2f\n", "umoci unpack", un.p50 / 1e3, un.min / 1e3,
               un.max / 1e3);
        printf("  import p50: corral / umoci unpack = %.2fx (%zu each; corral stores a %.1f MiB "
               "EROFS layer)\n\n",
               import_x, im.n, (double)r->imported_bytes / MIB);
        char what[96];
        printf("  %-44s %8s %8s\n", "create latency (to ready)", "p50 ms", "p99 ms");
        printf("  %-44s %8.2f %8.2f\n", "busybox", cb.p50, cb.p99);
        snprintf(what, sizeof(what), "%s", o->image);
        printf("  %-44s %8.2f %8.2f\n", what, ci.p50, ci.p99);
        printf("  create p50: %s / busybox = %.2fx (%zu each, interleaved)\n\n", o->image, create_x,
               ci.n);
        snprintf(what, sizeof(what), "disk, %zu sandboxes of %s", r->made, o->image);
        printf("  %-44s %10s\n", what, "MiB");
        printf("  %-44s %10.1f\n", "image, stored once", (double)r->image_bytes / MIB);
        printf("  %-44s %10.1f\n", "growth of the state dir's filesystem",
               (double)r->vfs_growth_bytes / MIB);
        printf("  %-44s %10.1f\n", "upper dirs in all (tmpfs: memory)",
               (double)r->upper_bytes / MIB);
        printf("  %-44s %10.1f\n", "memory of the sandboxes in all", (double)r->memory_bytes / MIB);
        snprintf(what, sizeof(what), "peer: %zu unpacked copies", o->sandboxes);
        printf("  %-44s %10.1f\n", what, (double)unpacked_n / MIB);
        if (r->refused[0])
            printf("  admission stopped at %zu of %zu: %s\n", r->made, o->sandboxes, r->refused);
        printf("\n");
    }
    json_auto_t *j =
        json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:s}", "bench", "corral-images", "date",
                  m.date, "host_id", r->host_id, "kernel", m.u.release, "cpus", (json_int_t)m.cpus,
                  "load_before", load0, "load_after", load1, "image", o->image);
    json_object_set_new(j, "image_layer_bytes", json_integer(r->layer_bytes));
    json_object_set_new(j, "layout_bytes", json_integer(r->layout_bytes));
    json_object_set_new(j, "unpacked_bytes", json_integer(r->unpacked_bytes));
    json_object_set_new(j, "import",
                        json_pack("{s:o, s:o, s:o, s:I}", "corral", seconds_json(&im),
                                  "umoci_unpack", seconds_json(&un), "ratio_p50",
                                  ratio_json(import_x), "imported_layer_bytes",
                                  (json_int_t)r->imported_bytes));
    json_object_set_new(j, "create",
                        json_pack("{s:o, s:o, s:o}", "busybox", crl_bench_stats_json(&cb, false),
                                  "image", crl_bench_stats_json(&ci, false), "ratio_p50",
                                  ratio_json(create_x)));
    json_object_set_new(
        j, "disk",
        json_pack("{s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I}", "sandboxes", (json_int_t)r->made,
                  "requested", (json_int_t)o->sandboxes, "refused",
                  r->refused[0] ? json_string(r->refused) : json_null(), "image_stored_bytes",
                  (json_int_t)r->image_bytes, "fs_growth_bytes", (json_int_t)r->vfs_growth_bytes,
                  "upper_dirs_bytes", (json_int_t)r->upper_bytes, "memory_bytes",
                  (json_int_t)r->memory_bytes, "unpacked_x_n_bytes", (json_int_t)unpacked_n));
    char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (line)
        printf("%s\n", line);
    free(line);
}

/* ---- the command ---- */

static int measure(const char *url, const struct opts *o, struct results *r, struct crl_err *err)
{
    struct scratch s = {0};
    if (crl_client_open(url, NULL, &s.c, err) < 0)
        return -1;
    int rc = setup(&s, o, r, err);
    if (rc == 0)
        rc = measure_imports(&s, o, r, err);
    if (rc == 0)
        rc = measure_creates(&s, o, r, err);
    if (rc == 0)
        rc = measure_disk(&s, o, r, err);
    if (rc < 0 && !o->quiet)
        fprintf(stderr, "corral bench images: cleaning up\n");
    scratch_cleanup(&s);
    crl_client_close(s.c);
    return rc;
}

static void results_free(struct results *r)
{
    crl_bench_samples_free(&r->imp);
    crl_bench_samples_free(&r->unpack);
    crl_bench_samples_free(&r->create_busybox);
    crl_bench_samples_free(&r->create_image);
}

int crl_bench_images(int argc, char **argv)
{
    enum {
        OPT_START = CRL_CLI_OPT_OTHER,
        OPT_ITER,
        OPT_IMPORTS,
        OPT_SANDBOXES,
        OPT_IMAGE,
        OPT_JSON
    };
    static const struct option opts[] = {{"start-daemon", no_argument, 0, OPT_START},
                                         {"iterations", required_argument, 0, OPT_ITER},
                                         {"imports", required_argument, 0, OPT_IMPORTS},
                                         {"sandboxes", required_argument, 0, OPT_SANDBOXES},
                                         {"image", required_argument, 0, OPT_IMAGE},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct crl_err err = CRL_ERR_INIT;
    struct opts o = {.image = "debian",
                     .iterations = DEFAULT_ITERATIONS,
                     .imports = DEFAULT_IMPORTS,
                     .sandboxes = DEFAULT_SANDBOXES};
    bool start = false;
    long long v;
    int c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_START: start = true; break;
        case OPT_ITER:
        case OPT_IMPORTS:
        case OPT_SANDBOXES: {
            const char *flag = c == OPT_ITER      ? "--iterations"
                               : c == OPT_IMPORTS ? "--imports"
                                                  : "--sandboxes";
            if (crl_cli_parse_int(flag, optarg, 1, 100000, &v, &err) < 0)
                return crl_cli_usage(argv[0], "%s", err.msg);
            *(c == OPT_ITER      ? &o.iterations
              : c == OPT_IMPORTS ? &o.imports
                                 : &o.sandboxes) = (size_t)v;
            break;
        }
        case OPT_IMAGE:
            if (!crl_client_image_name_ok(optarg))
                return crl_cli_usage(argv[0], "--image: '%s' is not an image name", optarg);
            o.image = optarg;
            break;
        case OPT_JSON: o.quiet = true; break;
        case 'h': return crl_cli_help(help);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (optind < argc)
        return crl_cli_usage(argv[0], "unexpected argument '%s'", argv[optind]);
    if (geteuid() != 0)
        return crl_cli_failf("bench images: needs root, to mount the image's layer and for umoci");

    crl_cli_catch_signals(NULL);
    struct crl_bench_daemon d = {0};
    const char *url;
    int brc = crl_bench_begin(start, &d, &url, "bench images");
    if (brc)
        return brc;
    char load0[64], load1[64];
    struct results r = {0};
    crl_bench_loadavg(load0, sizeof(load0));
    int rc = measure(url, &o, &r, &err);
    crl_bench_loadavg(load1, sizeof(load1));
    crl_bench_end(start, &d, rc, "bench images");
    if (rc == 0)
        report(&o, &r, load0, load1, o.quiet);
    results_free(&r);
    if (rc < 0) {
        if (crl_cli_interrupted)
            return 128 + crl_cli_interrupted;
        crl_err_prefix(&err, "bench images");
        return crl_cli_fail(&err);
    }
    return 0;
}
