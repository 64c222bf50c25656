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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../../lib/client/copy.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "../corral/cli.h"
#include "api.h"
#include "bench.h"
#include "peer.h"

#define MEMORY_MB 64
/* 100 sandboxes at the default 1 CPU each would pass the admission cap of
 * 16 CPUs per host CPU on a small host; the disk figure is not about CPU. */
#define DISK_CPUS 0.1
#define IMPORT_PREFIX "bench-import-"
#define MIB (1024.0 * 1024.0)

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

struct results {
    char state_dir[PATH_MAX];
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
    struct crl_bench_sandboxes sbs;
    size_t imports; /* bench-import-0.. up to this may exist */
};

/* Write back what earlier steps left dirty on dir's filesystem, so that a
 * timed step does not pay for the one before it. */
static void settle(const char *dir)
{
    cleanup_close int fd = crl_openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY, 0);
    if (fd >= 0)
        syncfs(fd);
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
        if (du.n > 0) /* qsort() of NULL is undefined, even of nothing */
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

static json_t *sandbox_spec(const char *image, double cpus)
{
    json_t *spec = crl_bench_spec(image, MEMORY_MB);
    if (spec && cpus > 0)
        json_object_set_new(json_object_get(spec, "resources"), "cpus", json_real(cpus));
    return spec;
}

/* Undo what the run made, an error or a signal notwithstanding. */
static void scratch_cleanup(struct scratch *s)
{
    crl_bench_sandboxes_clear(&s->sbs);
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

static int setup(struct crl_bench_run *run, struct scratch *s, struct results *r,
                 struct crl_err *err)
{
    const struct crl_bench_opts *o = &run->o;
    json_auto_t *h = NULL, *img = NULL;
    if (crl_bench_host(s->c, run->host_id, sizeof(run->host_id), &h, err) < 0)
        return -1;
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
    crl_bench_step(run, "making an OCI layout of %s's layer with umoci (untimed)", o->image);
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
        if (crl_bench_run_cmd(steps[i], err) < 0 || crl_bench_check_interrupted(err) < 0)
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
    int rc = crl_bench_run_cmd(argv, err);
    if (rc == 0)
        r->unpack.ms[r->unpack.n++] = crl_bench_ms_since(t0);
    crl_rm_rf_at(AT_FDCWD, bundle);
    return rc;
}

static int measure_imports(const struct crl_bench_run *run, struct scratch *s, struct results *r,
                           struct crl_err *err)
{
    const struct crl_bench_opts *o = &run->o;
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
        crl_bench_step(run, "import %zu of %zu, and umoci unpack", i + 1, o->imports);
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
    double ms;
    if (crl_bench_sandbox_create(&s->sbs, spec, NULL, &ms, err) < 0)
        return crl_err_prefix(err, "create (%s)", crl_cli_str(spec, "image", "?"));
    if (out)
        out->ms[out->n++] = ms;
    return crl_bench_sandbox_destroy_last(&s->sbs, err);
}

static int measure_creates(const struct crl_bench_run *run, struct scratch *s, struct results *r,
                           struct crl_err *err)
{
    const struct crl_bench_opts *o = &run->o;
    json_auto_t *bb = sandbox_spec("busybox", 0);
    json_auto_t *big = sandbox_spec(o->image, 0);
    size_t warm = crl_bench_warmup(o->iterations);
    if (crl_bench_samples_alloc(&r->create_busybox, o->iterations, err) < 0 ||
        crl_bench_samples_alloc(&r->create_image, o->iterations, err) < 0)
        return -1;
    crl_bench_step(run, "create latency, busybox and %s interleaved (%zu warm-up, %zu each)",
                   o->image, warm, o->iterations);
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

static int measure_disk(const struct crl_bench_run *run, struct scratch *s, struct results *r,
                        struct crl_err *err)
{
    const struct crl_bench_opts *o = &run->o;
    json_auto_t *spec = sandbox_spec(o->image, DISK_CPUS);
    json_auto_t *req = json_pack("{s:[s,s,s]}", "cmd", "/bin/sh", "-c", "echo x > /root/f");
    long long before, after;
    if (fs_used(r->state_dir, &before, err) < 0)
        return -1;
    crl_bench_step(run, "disk: %zu sandboxes of %s, each writing /root/f", o->sandboxes, o->image);
    size_t first = s->sbs.n;
    for (size_t i = 0; i < o->sandboxes; i++) {
        char id[CRL_BENCH_ID_MAX];
        double ms;
        if (crl_bench_sandbox_create(&s->sbs, spec, id, NULL, err) < 0) {
            if (err->code != CRL_E_CAPACITY)
                return crl_err_prefix(err, "create %zu of %zu", i + 1, o->sandboxes);
            snprintf(r->refused, sizeof(r->refused), "%s", err->msg);
            crl_err_clear(err);
            fprintf(stderr, "corral: bench images: admission refused sandbox %zu: %s\n", i + 1,
                    r->refused);
            break;
        }
        if (crl_bench_exec(s->c, id, req, &ms, NULL, err) < 0)
            return crl_err_prefix(err, "writing /root/f");
        r->made++;
    }
    if (fs_used(r->state_dir, &after, err) < 0)
        return -1;
    r->vfs_growth_bytes = after - before;
    for (size_t i = first; i < s->sbs.n; i++) {
        json_auto_t *sb = NULL;
        if (crl_client_inspect(s->c, s->sbs.ids[i], &sb, err) < 0)
            return crl_err_prefix(err, "inspect %s", s->sbs.ids[i]);
        json_t *u = json_object_get(sb, "usage");
        r->upper_bytes += json_integer_value(json_object_get(u, "disk_bytes"));
        r->memory_bytes += json_integer_value(json_object_get(u, "memory_bytes"));
    }
    crl_bench_step(run, "destroying them");
    while (s->sbs.n > first)
        if (crl_bench_sandbox_destroy_last(&s->sbs, err) < 0 ||
            crl_bench_check_interrupted(err) < 0)
            return -1;
    return 0;
}

/* ---- the report ---- */

static json_t *seconds_json(const struct crl_bench_stats *st)
{
    return json_pack("{s:f, s:f, s:f, s:I}", "p50_s", st->p50 / 1e3, "min_s", st->min / 1e3,
                     "max_s", st->max / 1e3, "n", (json_int_t)st->n);
}

/* The three tables: import, create latency, disk. */
static void print_tables(const struct crl_bench_opts *o, const struct results *r,
                         const struct crl_bench_stats *im, const struct crl_bench_stats *un,
                         const struct crl_bench_stats *cb, const struct crl_bench_stats *ci)
{
    char what[96];
    printf("  %-44s %8s %8s %8s\n", "import of the OCI layout", "p50 s", "min s", "max s");
    printf("  %-44s %8.2f %8.2f %8.2f\n", "corral (POST /v1/images, to the 201)", im->p50 / 1e3,
           im->min / 1e3, im->max / 1e3);
    printf("  %-44s %8.2f %8.2f %8.2f\n", "umoci unpack", un->p50 / 1e3, un->min / 1e3,
           un->max / 1e3);
    printf("  import p50: corral / umoci unpack = %.2fx (%zu each; corral stores a %.1f MiB "
           "EROFS layer)\n\n",
           crl_bench_ratio(im->p50, un->p50), im->n, (double)r->imported_bytes / MIB);
    printf("  %-44s %8s %8s\n", "create latency (to ready)", "p50 ms", "p99 ms");
    printf("  %-44s %8.2f %8.2f\n", "busybox", cb->p50, cb->p99);
    printf("  %-44s %8.2f %8.2f\n", o->image, ci->p50, ci->p99);
    printf("  create p50: %s / busybox = %.2fx (%zu each, interleaved)\n\n", o->image,
           crl_bench_ratio(ci->p50, cb->p50), ci->n);
    snprintf(what, sizeof(what), "disk, %zu sandboxes of %s", r->made, o->image);
    printf("  %-44s %10s\n", what, "MiB");
    printf("  %-44s %10.1f\n", "image, stored once", (double)r->image_bytes / MIB);
    printf("  %-44s %10.1f\n", "growth of the state dir's filesystem",
           (double)r->vfs_growth_bytes / MIB);
    printf("  %-44s %10.1f\n", "upper dirs in all (tmpfs: memory)", (double)r->upper_bytes / MIB);
    printf("  %-44s %10.1f\n", "memory of the sandboxes in all", (double)r->memory_bytes / MIB);
    snprintf(what, sizeof(what), "peer: %zu unpacked copies", o->sandboxes);
    printf("  %-44s %10.1f\n", what, (double)(r->unpacked_bytes * (long long)o->sandboxes) / MIB);
    if (r->refused[0])
        printf("  admission stopped at %zu of %zu: %s\n", r->made, o->sandboxes, r->refused);
    printf("\n");
}

static void report(const struct crl_bench_run *run, void *res)
{
    const struct crl_bench_opts *o = &run->o;
    struct results *r = res;
    struct crl_bench_stats im = crl_bench_stats_of(&r->imp), un = crl_bench_stats_of(&r->unpack);
    struct crl_bench_stats cb = crl_bench_stats_of(&r->create_busybox),
                           ci = crl_bench_stats_of(&r->create_image);
    long long unpacked_n = r->unpacked_bytes * (long long)o->sandboxes;
    if (!o->json_only) {
        crl_bench_report_head(run);
        printf("\nimage %s: one layer, %.1f MiB stored (EROFS); as an OCI layout (gzip) %.1f MiB; "
               "unpacked %.1f MiB\n\n",
               o->image, (double)r->layer_bytes / MIB, (double)r->layout_bytes / MIB,
               (double)r->unpacked_bytes / MIB);
        print_tables(o, r, &im, &un, &cb, &ci);
    }
    json_auto_t *j = crl_bench_report_json(run, "corral-images");
    json_object_set_new(j, "image", json_string(o->image));
    json_object_set_new(j, "image_layer_bytes", json_integer(r->layer_bytes));
    json_object_set_new(j, "layout_bytes", json_integer(r->layout_bytes));
    json_object_set_new(j, "unpacked_bytes", json_integer(r->unpacked_bytes));
    json_object_set_new(j, "import",
                        json_pack("{s:o, s:o, s:o, s:I}", "corral", seconds_json(&im),
                                  "umoci_unpack", seconds_json(&un), "ratio_p50",
                                  crl_bench_json_real(crl_bench_ratio(im.p50, un.p50)),
                                  "imported_layer_bytes", (json_int_t)r->imported_bytes));
    json_object_set_new(j, "create",
                        json_pack("{s:o, s:o, s:o}", "busybox", crl_bench_stats_json(&cb, false),
                                  "image", crl_bench_stats_json(&ci, false), "ratio_p50",
                                  crl_bench_json_real(crl_bench_ratio(ci.p50, cb.p50))));
    json_object_set_new(
        j, "disk",
        json_pack("{s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I}", "sandboxes", (json_int_t)r->made,
                  "requested", (json_int_t)o->sandboxes, "refused",
                  r->refused[0] ? json_string(r->refused) : json_null(), "image_stored_bytes",
                  (json_int_t)r->image_bytes, "fs_growth_bytes", (json_int_t)r->vfs_growth_bytes,
                  "upper_dirs_bytes", (json_int_t)r->upper_bytes, "memory_bytes",
                  (json_int_t)r->memory_bytes, "unpacked_x_n_bytes", (json_int_t)unpacked_n));
    crl_bench_report_line(j);
}

/* ---- the command ---- */

static int measure(struct crl_bench_run *run, void *res, struct crl_err *err)
{
    struct results *r = res;
    struct scratch s = {0};
    if (crl_client_open(run->url, NULL, &s.c, err) < 0)
        return -1;
    s.sbs = (struct crl_bench_sandboxes){.c = s.c, .who = run->cmd->name};
    int rc = setup(run, &s, r, err);
    if (rc == 0)
        rc = measure_imports(run, &s, r, err);
    if (rc == 0)
        rc = measure_creates(run, &s, r, err);
    if (rc == 0)
        rc = measure_disk(run, &s, r, err);
    if (rc < 0)
        crl_bench_step(run, "cleaning up");
    scratch_cleanup(&s);
    crl_client_close(s.c);
    return rc;
}

static void results_free(void *res)
{
    struct results *r = res;
    crl_bench_samples_free_each(&r->imp, &r->unpack, &r->create_busybox, &r->create_image, NULL);
}

const struct crl_bench_cmd crl_bench_images = {
    .name = "bench images",
    .help = help,
    .root = "to mount the image's layer and for umoci",
    .takes = CRL_BENCH_TAKES_IMAGE | CRL_BENCH_TAKES_IMPORTS | CRL_BENCH_TAKES_SANDBOXES,
    .count_min = 1,
    .count_max = 100000,
    .defaults = {.image = "debian", .iterations = 50, .imports = 3, .sandboxes = 100},
    .ops = {measure, report, results_free, sizeof(struct results)},
};
