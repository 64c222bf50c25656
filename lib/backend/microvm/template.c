/* Templates: a guest booted once per shape (memory, vCPUs) to the point
 * where its agent has said HELLO and waits for a CONFIG, then stopped and
 * saved with QEMU's migration to a file.  Every sandbox of that shape
 * starts by restoring the file into a fresh QEMU with the same devices
 * (vm.c builds one command line for both): its RAM, its kernel already
 * booted, its agent already waiting.  What makes each one its own (the
 * layers behind the block devices, hostname, clock, entropy) comes after,
 * with the CONFIG.
 *
 * The template's RAM is a memfd it writes; its migration leaves the RAM
 * out (x-ignore-shared), so the file holds only the devices' state.  Once
 * the template's QEMU is gone the memfd is sealed against any write, and
 * every clone maps it privately: it reads the template's pages where they
 * lie (one copy in the host's memory, however many clones) and copies only
 * those it writes.  A clone runs as its slot's uid and could open the
 * memfd for writing, but the seals refuse every write and shared writable
 * mapping, so no clone can change what the next one starts from.
 *
 * The template boots with the empty placeholder behind every layer slot;
 * it never reads past their first blocks (the kernel's partition scan,
 * which the agent drops from its cache before it mounts a layer).  It runs
 * as nobody, in namespaces of its own, like any guest.
 *
 * A full system's template (MVM_PC, the vm backend) is an image's: it
 * boots with the image's layers and a disk of its own (a raw ext4 made
 * here, the writable layer), and the CONFIG its first HELLO gets builds
 * the root and names the init: the agent answers READY and hands the
 * guest to systemd, which starts the agent again as a service; that one's
 * HELLO, once the system is up, is where the template is saved.  Its disk
 * is then its clones' backing, never written again. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/run.h"
#include "../../util/sha256.h"
#include "../../vmm/qmp.h"
#include "mvm_int.h"

#define NOBODY 65534
#define RETRY_AFTER_S 30.0

enum tstate { T_BUILDING, T_READY, T_FAILED };

struct waiter {
    mvm_template_cb cb;
    void *ctx;
    struct waiter *next;
};

struct mvm_template {
    struct mvm_template *next;
    unsigned mem_mb, vcpus;
    bool nic;          /* with a network device: a clone's device set is its template's */
    bool volume_slots; /* with MVM_VOLUME_SLOTS disks for volumes, likewise */
    /* A full system's: its image, the layers it boots (held while it
     * does), its disk (size, file, descriptor) and whether its init has
     * the guest yet. */
    char image_id[CRL_DIGEST_LEN + 1];
    char image_name[128];
    int layer_fds[MVM_SLOTS];
    size_t n_layers;
    unsigned disk_mb;
    char disk_path[PATH_MAX];
    int disk_fd;
    bool config_sent, handed_over;
    char name[48];
    char cache_key[17]; /* its entry in the template cache (template_cache.c) */
    bool cached;        /* loaded from it: its state and disk are the cache's files */
    enum tstate state;
    char path[PATH_MAX];
    struct crl_agent_hello hello;
    struct mvm_vm vm;
    bool vm_live;
    bool saving, saved;
    int ram_fd; /* the guest's RAM, a memfd: sealed once saved */
    struct crl_timer poll;
    struct waiter *waiters;
    double started, hello_s, save_s, ended, last_used;
    uint64_t bytes, ram_bytes;
    unsigned restores;
    char error[300];
};

static void notify(struct mvm_template *t)
{
    struct waiter *w = t->waiters;
    t->waiters = NULL;
    while (w) {
        struct waiter *next = w->next;
        w->cb(w->ctx);
        free(w);
        w = next;
    }
}

/* What only its boot needs: the image's layers and the disk's
 * read-write descriptor (the file stays, its clones' backing). */
static void boot_fds_close(struct mvm_template *t)
{
    for (int i = 0; i < MVM_SLOTS; i++)
        close_fd(&t->layer_fds[i]);
    close_fd(&t->disk_fd);
}

static void failed(struct mvm_template *t, const char *what, const char *msg)
{
    if (t->state != T_BUILDING)
        return;
    t->state = T_FAILED;
    t->ended = crl_wall_s();
    snprintf(t->error, sizeof(t->error), "%s%s", what, msg);
    if (t->ram_fd >= 0)
        close(t->ram_fd);
    t->ram_fd = -1;
    crl_warn(t->name, "template failed: %s (%s)", t->error,
             t->vm.st->machine == MVM_PC ? "creates of this image and shape fail until it is "
                                           "built again"
                                         : "sandboxes of this shape boot cold");
    unlink(t->path);
    if (t->disk_path[0])
        unlink(t->disk_path);
    if (t->vm_live && !t->vm.dying)
        mvm_vm_kill(&t->vm, "template_failed", "%s", t->error);
    notify(t);
}

/* ---- saving ---- */

static void polled(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx);

static void poll_again(struct crl_timer *tm)
{
    struct mvm_template *t = tm->data;
    struct crl_err err = CRL_ERR_INIT;
    if (!t->vm.qmp || crl_qmp_command(t->vm.qmp, "query-migrate", NULL, -1, polled, t, &err) < 0)
        failed(t, "saving: ", err.msg[0] ? err.msg : "QMP is gone");
}

static void polled(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx)
{
    struct mvm_template *t = ctx;
    if (err) {
        failed(t, "query-migrate: ", err->msg);
        return;
    }
    const char *status = json_string_value(json_object_get(ret, "status"));
    if (status && strcmp(status, "completed") == 0) {
        /* Ready once its QEMU is gone and its RAM sealed (t_dead). */
        struct stat sb;
        t->save_s = crl_wall_s() - t->started - t->hello_s;
        t->bytes = stat(t->path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        t->saved = true;
        mvm_vm_kill(&t->vm, "template_saved", "saved");
        return;
    }
    if (status && (strcmp(status, "failed") == 0 || strcmp(status, "cancelled") == 0)) {
        const char *desc = json_string_value(json_object_get(ret, "error-desc"));
        failed(t, "the migration to a file failed: ", desc ? desc : status);
        return;
    }
    crl_timer_start(t->vm.st->host->loop, &t->poll, 10 * 1000000ull, poll_again, t);
}

static void answered(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx)
{
    struct mvm_template *t = ctx;
    if (err)
        failed(t, "saving: ", err->msg);
}

static void migrate_started(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx)
{
    struct mvm_template *t = ctx;
    if (err) {
        failed(t, "saving: ", err->msg);
        return;
    }
    poll_again(&t->poll);
}

/* A full system's first CONFIG: the image's layers over the template's
 * disk, made the root, and handed to the image's init. */
static void configure_system(struct mvm_template *t)
{
    struct crl_err err = CRL_ERR_INIT;
    struct crl_agent_config *c = calloc(1, sizeof(*c));
    uint8_t id[CRL_AGENT_MACHINE_ID / 2];
    if (!c) {
        failed(t, "", "out of memory for a CONFIG");
        return;
    }
    snprintf(c->hostname, sizeof(c->hostname), "corral-template");
    snprintf(c->init, sizeof(c->init), "/sbin/init");
    c->n_layers = t->n_layers;
    for (size_t i = 0; i < t->n_layers; i++)
        snprintf(c->layers[i], sizeof(c->layers[i]), "/dev/vd%c", (char)('a' + i));
    snprintf(c->disk, sizeof(c->disk), "/dev/vd%c", (char)('a' + MVM_DISK_SLOT));
    if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id))
        crl_err_sys(&err, errno, "getrandom for a machine-id");
    for (size_t i = 0; i < sizeof(id); i++)
        snprintf(c->machine_id + 2 * i, 3, "%02x", id[i]);
    snprintf(c->etc_hostname, sizeof(c->etc_hostname), "corral-template\n");
    snprintf(c->etc_hosts, sizeof(c->etc_hosts), "127.0.0.1\tlocalhost\n");
    if (err.code || mvm_vm_configure(&t->vm, c, &err) < 0)
        failed(t, "the template's CONFIG: ", err.msg);
    free(c);
    t->config_sent = true;
}

/* HELLO: the agent waits for its CONFIG.  Stop the guest there and save
 * it: a full system's once its init started the agent's service. */
static void t_hello(struct mvm_vm *vm)
{
    struct mvm_template *t = vm->ctx;
    if (t->saving)
        return;
    if (vm->st->machine == MVM_PC && !t->handed_over) {
        if (!t->config_sent)
            configure_system(t);
        return;
    }
    t->saving = true;
    t->hello = vm->sess.hello;
    t->hello_s = crl_wall_s() - t->started;
    mvm_vm_deadline_stop(vm);
    mvm_vm_deadline(vm, 60000, "a saved state");
    crl_info(t->name, "the guest's agent greets (%.1f s after start): saving it", t->hello_s);
    struct crl_err err = CRL_ERR_INIT;
    cleanup_close int fd = open(t->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        crl_err_sys(&err, errno, "create %s", t->path);
        failed(t, "", err.msg);
        return;
    }
    struct crl_qmp *q = vm->qmp;
    if (!q ||
        crl_qmp_command(q, "migrate-set-parameters",
                        json_pack("{s:I}", "max-bandwidth", (json_int_t)1 << 40), -1, answered, t,
                        &err) < 0 ||
        crl_qmp_command(q, "migrate-set-capabilities",
                        json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability",
                                  "x-ignore-shared", "state", 1),
                        -1, answered, t, &err) < 0 ||
        crl_qmp_command(q, "stop", NULL, -1, answered, t, &err) < 0 ||
        crl_qmp_command(q, "getfd", json_pack("{s:s}", "fdname", "tmpl"), fd, answered, t, &err) <
            0 ||
        crl_qmp_command(q, "migrate", json_pack("{s:s}", "uri", "fd:tmpl"), -1, migrate_started, t,
                        &err) < 0)
        failed(t, "saving: ", err.msg[0] ? err.msg : "QMP is gone");
}

static void t_ready(struct mvm_vm *vm)
{
    struct mvm_template *t = vm->ctx;
    if (!t->config_sent || t->handed_over) {
        failed(t, "", "the guest said READY to a template that sent no CONFIG");
        return;
    }
    /* The root is built and the init has the guest: the agent greets
     * again, as a service, once the system is up. */
    t->handed_over = true;
    mvm_vm_takeover(vm, &vm->sess.hello);
    mvm_vm_deadline_stop(vm);
    bool kvm = strcmp(vm->st->accel, "kvm") == 0;
    mvm_vm_deadline(vm, kvm ? 120000 : 600000, "the system's agent (HELLO after its init)");
    crl_info(t->name, "root built (%.1f s after start): the image's init boots the system",
             crl_wall_s() - t->started);
}

static void t_frame(struct mvm_vm *vm, const struct crl_agent_frame *f)
{
}

/* Seal the RAM: no write, no shared writable mapping, no change of size,
 * no other seal; a private mapping (a clone's) is still allowed. */
static int seal(struct mvm_template *t)
{
    struct stat sb;
    unsigned seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
    if (fcntl(t->ram_fd, F_ADD_SEALS, seals) < 0 || fstat(t->ram_fd, &sb) < 0)
        return -errno;
    t->ram_bytes = (uint64_t)sb.st_blocks * 512;
    return 0;
}

static void cache_save(struct mvm_state *st, struct mvm_template *t);

static void t_dead(struct mvm_vm *vm, const char *reason, const char *msg)
{
    struct mvm_template *t = vm->ctx;
    int e = t->saved && t->state == T_BUILDING ? seal(t) : 0;
    if (t->saved && t->state == T_BUILDING && e == 0) {
        t->state = T_READY;
        t->ended = crl_wall_s();
        crl_info(vm->name,
                 "template ready: HELLO %.0f ms after start, saved in %.0f ms (state %.1f MB, "
                 "RAM %.1f MB shared by its clones)",
                 t->hello_s * 1e3, t->save_s * 1e3, (double)t->bytes / 1e6,
                 (double)t->ram_bytes / 1e6);
        notify(t);
        cache_save(vm->st, t);
    } else if (e) {
        failed(t, "sealing its RAM: ", strerror(-e));
    }
    failed(t, "the template's guest ended before it was saved: ", msg);
    boot_fds_close(t);
    crl_timer_stop(vm->st->host->loop, &t->poll);
    mvm_vm_free(vm);
    t->vm_live = false;
}

static const struct mvm_vm_ops template_ops = {
    .frame = t_frame,
    .hello = t_hello,
    .ready = t_ready,
    .dead = t_dead,
};

static const char *kind_suffix(const struct mvm_template *t)
{
    return t->nic && t->volume_slots ? "-nic-vol" : t->nic ? "-nic" : t->volume_slots ? "-vol" : "";
}

/* A microVM's by its shape; a full system's by its image and disk too. */
static void name_it(const struct mvm_state *st, struct mvm_template *t)
{
    if (st->machine == MVM_PC)
        snprintf(t->name, sizeof(t->name), "vm-%.12s-%um-%uc-%ud%s", t->image_id + 7, t->mem_mb,
                 t->vcpus, t->disk_mb, kind_suffix(t));
    else
        snprintf(t->name, sizeof(t->name), "template-%um-%uc%s", t->mem_mb, t->vcpus,
                 kind_suffix(t));
}

/* mkfs.ext4 on a sparse file of disk_mb: a full system's writable layer
 * (the agent makes the upper and work dirs on it).  Once per template. */
static int make_disk(struct mvm_state *st, struct mvm_template *t, struct crl_err *err)
{
    snprintf(t->disk_path, sizeof(t->disk_path), "%s/%s.disk", st->dir, t->name);
    cleanup_close int fd = open(t->disk_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)t->disk_mb << 20) < 0)
        return crl_err_sys(err, errno, "the template's disk %s (%u MiB)", t->disk_path, t->disk_mb);
    int rc = crl_mkfs_ext4(t->disk_path, err);
    if (rc == 0 && (t->disk_fd = open(t->disk_path, O_RDWR | O_CLOEXEC)) < 0)
        rc = crl_err_sys(err, errno, "open %s", t->disk_path);
    return rc;
}

static int build(struct mvm_state *st, struct mvm_template *t, const struct mvm_template_key *k,
                 struct crl_err *err)
{
    bool pc = st->machine == MVM_PC;
    cleanup_close int volume_fd = -1; /* the volume slots' placeholder, below */
    name_it(st, t);
    snprintf(t->path, sizeof(t->path), "%s/%s.state", st->dir, t->name);
    if (t->ram_fd >= 0)
        close(t->ram_fd);
    t->ram_fd = memfd_create(t->name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (t->ram_fd < 0 || ftruncate(t->ram_fd, (off_t)t->mem_mb << 20) < 0) {
        crl_err_sys(err, errno, "the template's RAM (a memfd of %u MiB)", t->mem_mb);
        close_fd(&t->ram_fd);
        return -1;
    }
    struct mvm_launch l = {
        .mem_mb = t->mem_mb,
        .vcpus = t->vcpus,
        .disk_fd = -1,
        .disk_backing_fd = -1,
        .incoming_fd = -1,
        .ram_fd = t->ram_fd,
        .netns_fd = -1,
        .tap_fd = t->nic ? MVM_TAP_MAKE : -1, /* a tap of its own, in its own namespace */
        .uid = NOBODY,
        .gid = NOBODY,
    };
    for (int i = 0; i < MVM_SLOTS; i++)
        l.layer_fds[i] = -1;
    /* A full system boots its image, on a disk of its own. */
    t->config_sent = t->handed_over = false;
    if (pc) {
        t->n_layers = k->n_layers;
        for (size_t i = 0; i < k->n_layers; i++)
            if ((t->layer_fds[i] = fcntl(k->layer_fds[i], F_DUPFD_CLOEXEC, 0)) < 0) {
                crl_err_sys(err, errno, "dup of a layer");
                goto fail;
            }
        memcpy(l.layer_fds, t->layer_fds, sizeof(l.layer_fds));
        if (make_disk(st, t, err) < 0)
            goto fail;
        l.disk_fd = t->disk_fd;
    }
    /* Volume slots read-write (a clone's guest mounts a volume on one so),
     * over an empty file of the largest volume's size: a memfd of its own,
     * gone with its QEMU. */
    if (t->volume_slots) {
        volume_fd = memfd_create("corral-volume-slot", MFD_CLOEXEC);
        if (volume_fd < 0 || ftruncate(volume_fd, (off_t)MVM_VOLUME_PLACEHOLDER_BYTES) < 0) {
            crl_err_sys(err, errno, "the template's volume slots (a memfd)");
            goto fail;
        }
        l.volume_slots = true;
        for (int i = 0; i < MVM_VOLUME_SLOTS; i++)
            l.volume_fds[i] = volume_fd;
    }
    t->state = T_BUILDING;
    t->saving = t->saved = false;
    t->started = crl_wall_s();
    t->error[0] = 0;
    t->poll.data = t;
    if (mvm_vm_start(st, &t->vm, t->name, &l, &template_ops, t, err) < 0)
        goto fail;
    t->vm_live = true;
    st->n.template_builds++;
    mvm_vm_deadline(&t->vm, strcmp(st->accel, "kvm") == 0 ? 20000 : 60000, "HELLO");
    crl_info(t->name, "building a template (QEMU pid %d, %s%s%s)", (int)t->vm.pid, st->accel,
             pc ? ", image " : "", pc ? t->image_name : "");
    return 0;
fail:
    close_fd(&t->ram_fd);
    boot_fds_close(t);
    if (t->disk_path[0])
        unlink(t->disk_path);
    t->disk_path[0] = 0;
    return -1;
}

/* A template saved: into the cache too, for the next corrald. */
static void cache_save(struct mvm_state *st, struct mvm_template *t)
{
    struct mvm_cache_entry c = {.ram_fd = t->ram_fd, .hello = t->hello, .name = t->name};
    snprintf(c.state_path, sizeof(c.state_path), "%s", t->path);
    snprintf(c.disk_path, sizeof(c.disk_path), "%s", t->disk_path);
    struct crl_err err = CRL_ERR_INIT;
    double t0 = crl_wall_s();
    if (mvm_cache_save(st, t->cache_key, &c, &err) < 0)
        crl_warn(t->name, "not kept in the template cache: %s", err.msg);
    else if (st->cache[0])
        crl_info(t->name, "kept in the template cache %s as %s (%.0f ms)", st->cache, t->cache_key,
                 (crl_wall_s() - t0) * 1e3);
}

/* A template the cache has: ready at once, its files the cache's. */
static void cache_load(struct mvm_state *st, struct mvm_template *t)
{
    struct mvm_cache_entry c = {.ram_fd = -1};
    struct crl_err err = CRL_ERR_INIT;
    double t0 = crl_wall_s();
    int r = mvm_cache_load(st, t->cache_key, t->mem_mb, &c, &err);
    if (r < 0)
        crl_warn(NULL, "template cache entry %s: %s: building the template", t->cache_key, err.msg);
    if (r <= 0)
        return;
    name_it(st, t);
    t->ram_fd = c.ram_fd;
    t->hello = c.hello;
    snprintf(t->path, sizeof(t->path), "%s", c.state_path);
    snprintf(t->disk_path, sizeof(t->disk_path), "%s", c.disk_path);
    t->cached = true;
    t->bytes = c.state_bytes;
    struct stat sb;
    t->ram_bytes = fstat(t->ram_fd, &sb) == 0 ? (uint64_t)sb.st_blocks * 512 : 0;
    t->state = T_READY;
    t->ended = crl_wall_s();
    st->n.template_loads++;
    crl_info(t->name, "template loaded from the cache %s (%s) in %.0f ms", st->cache, t->cache_key,
             (crl_wall_s() - t0) * 1e3);
}

static void forget(struct mvm_template *t)
{
    if (t->path[0] && !t->cached)
        unlink(t->path);
    if (t->disk_path[0] && !t->cached)
        unlink(t->disk_path); /* its clones keep their descriptors of it */
    close_fd(&t->ram_fd);
    boot_fds_close(t);
    free(t);
}

/* Forget the template used longest ago that nothing waits on or builds:
 * a template holds a memfd as large as what its guest touched, and shapes
 * are the users' to choose.  Its clones keep their own descriptor of it. */
static void evict_one(struct mvm_state *st)
{
    struct mvm_template **victim = NULL;
    for (struct mvm_template **tp = &st->templates; *tp; tp = &(*tp)->next)
        if (!(*tp)->vm_live && !(*tp)->waiters &&
            (!victim || (*tp)->last_used < (*victim)->last_used))
            victim = tp;
    if (!victim)
        return;
    struct mvm_template *t = *victim;
    *victim = t->next;
    crl_info(NULL, "template %s forgotten (%u at most): its kind boots a new one", t->name,
             MVM_MAX_TEMPLATES);
    forget(t);
}

static bool matches(const struct mvm_state *st, const struct mvm_template *t,
                    const struct mvm_template_key *k)
{
    if (t->mem_mb != k->mem_mb || t->vcpus != k->vcpus || t->nic != k->nic ||
        t->volume_slots != k->volume_slots)
        return false;
    return st->machine != MVM_PC ||
           (t->disk_mb == k->disk_mb && strcmp(t->image_id, k->image_id) == 0);
}

int mvm_template_get(struct mvm_state *st, const struct mvm_template_key *k, struct mvm_restore *r,
                     mvm_template_cb waiting, void *ctx, struct crl_err *err)
{
    struct mvm_template *t = st->templates;
    unsigned n = 0;
    while (t && !matches(st, t, k)) {
        t = t->next;
        n++;
    }
    if (!t) {
        if (n >= MVM_MAX_TEMPLATES)
            evict_one(st);
        if (!(t = calloc(1, sizeof(*t))))
            return crl_err_sys(err, ENOMEM, "a template");
        t->mem_mb = k->mem_mb;
        t->vcpus = k->vcpus;
        t->nic = k->nic;
        t->volume_slots = k->volume_slots;
        if (st->machine == MVM_PC) {
            snprintf(t->image_id, sizeof(t->image_id), "%s", k->image_id);
            snprintf(t->image_name, sizeof(t->image_name), "%s", k->image_name);
            t->disk_mb = k->disk_mb;
        }
        for (int i = 0; i < MVM_SLOTS; i++)
            t->layer_fds[i] = -1;
        t->disk_fd = -1;
        t->ram_fd = -1;
        t->state = T_FAILED;
        t->next = st->templates;
        st->templates = t;
        mvm_cache_key(st, k, t->cache_key);
        cache_load(st, t);
    }
    t->last_used = crl_wall_s();
    if (t->state == T_READY) {
        r->disk_fd = -1;
        r->fd = open(t->path, O_RDONLY | O_CLOEXEC);
        r->ram_fd = r->fd >= 0 ? fcntl(t->ram_fd, F_DUPFD_CLOEXEC, 0) : -1;
        if (r->ram_fd >= 0 && t->disk_path[0])
            r->disk_fd = open(t->disk_path, O_RDONLY | O_CLOEXEC);
        if (r->fd >= 0 && r->ram_fd >= 0 && (!t->disk_path[0] || r->disk_fd >= 0)) {
            r->hello = t->hello;
            snprintf(r->name, sizeof(r->name), "%s", t->name);
            snprintf(r->disk_path, sizeof(r->disk_path), "%s", t->disk_path);
            r->disk_bytes = (uint64_t)t->disk_mb << 20;
            r->cached = t->cached;
            t->restores++;
            return 1;
        }
        crl_warn(NULL, "template %s: %s: building it again", t->name, strerror(errno));
        close_fd(&r->fd);
        close_fd(&r->ram_fd);
        close_fd(&r->disk_fd);
        t->state = T_FAILED;
        t->ended = 0;
    }
    if (t->state == T_FAILED) {
        if (t->ended && crl_wall_s() - t->ended < RETRY_AFTER_S)
            return crl_err_set(err, CRL_E_UNAVAILABLE,
                               "template %s failed %.0f s ago (built again %.0f s after): %s",
                               t->name, crl_wall_s() - t->ended, RETRY_AFTER_S, t->error);
        if (t->vm_live || build(st, t, k, err) < 0) {
            if (!t->vm_live) {
                snprintf(t->error, sizeof(t->error), "%s", err->msg);
                t->ended = crl_wall_s();
            }
            return -1;
        }
    }
    struct waiter *w = calloc(1, sizeof(*w));
    if (!w)
        return crl_err_sys(err, ENOMEM, "a template's waiter");
    w->cb = waiting;
    w->ctx = ctx;
    w->next = t->waiters;
    t->waiters = w;
    return 0;
}

void mvm_template_drop(struct mvm_state *st, const char *name, const char *why)
{
    for (struct mvm_template **tp = &st->templates; *tp; tp = &(*tp)->next)
        if (strcmp((*tp)->name, name) == 0 && !(*tp)->vm_live && !(*tp)->waiters) {
            struct mvm_template *t = *tp;
            *tp = t->next;
            crl_warn(name, "template dropped: %s: the next create of its kind builds it again",
                     why);
            mvm_cache_remove(st, t->cache_key);
            forget(t);
            return;
        }
}

void mvm_template_unwait(struct mvm_state *st, void *ctx)
{
    for (struct mvm_template *t = st->templates; t; t = t->next)
        for (struct waiter **w = &t->waiters; *w;) {
            if ((*w)->ctx == ctx) {
                struct waiter *gone = *w;
                *w = gone->next;
                free(gone);
            } else {
                w = &(*w)->next;
            }
        }
}

static const char *tstate_name(enum tstate s)
{
    return s == T_READY ? "ready" : s == T_BUILDING ? "building" : "failed";
}

json_t *mvm_templates_json(struct mvm_state *st)
{
    json_t *a = json_array();
    for (struct mvm_template *t = st->templates; t && a; t = t->next) {
        json_t *o = json_pack(
            "{s:I, s:I, s:b, s:b, s:s, s:I, s:I, s:f, s:f}", "memory_mb", (json_int_t)t->mem_mb,
            "vcpus", (json_int_t)t->vcpus, "nic", t->nic, "volume_slots", t->volume_slots, "state",
            tstate_name(t->state), "restores", (json_int_t)t->restores, "state_bytes",
            (json_int_t)t->bytes, "boot_to_hello_s", t->hello_s, "save_s", t->save_s);
        if (o) {
            json_object_set_new(o, "name", json_string(t->name));
            json_object_set_new(o, "ram_bytes", json_integer((json_int_t)t->ram_bytes));
        }
        if (o && t->image_id[0]) {
            json_object_set_new(o, "image", json_string(t->image_name));
            json_object_set_new(o, "image_id", json_string(t->image_id));
            json_object_set_new(o, "disk_mb", json_integer(t->disk_mb));
        }
        if (o && t->error[0])
            json_object_set_new(o, "error", json_string(t->error));
        if (o)
            json_object_set_new(o, "from_cache", json_boolean(t->cached));
        json_array_append_new(a, o);
    }
    return a;
}

void mvm_templates_free(struct mvm_state *st)
{
    while (st->templates) {
        struct mvm_template *t = st->templates;
        st->templates = t->next;
        crl_timer_stop(st->host->loop, &t->poll);
        if (t->vm_live) {
            mvm_vm_kill(&t->vm, "shutdown", "corrald is shutting down");
            /* Reap it here: the loop will not run again for it. */
            siginfo_t si;
            waitid((idtype_t)P_PIDFD, (id_t)t->vm.pidfd, &si, WEXITED);
            mvm_vm_free(&t->vm);
        }
        struct waiter *w = t->waiters;
        while (w) {
            struct waiter *next = w->next;
            free(w);
            w = next;
        }
        forget(t);
    }
}
