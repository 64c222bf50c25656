/* The microvm and vm backends: their ops tables, a sandbox's life, and
 * the backends' start and end (mvm_int.h says how its files divide the
 * work and where the two machines differ).
 *
 * A create restores the template of the sandbox's shape (template.c) into
 * a QEMU of its own (vm.c), with the image's EROFS layers behind the
 * guest's block devices, and sends the CONFIG that makes the guest this
 * sandbox's: the agent mounts the layers under a writable tmpfs, takes
 * its hostname, clock and entropy, and answers READY; only then does the
 * create answer.  Without a template (being built, or failed) it waits for
 * one or boots cold.  A guest that does not reach READY in time is killed
 * and started once more; the second failure fails the create, leaving
 * nothing behind.
 *
 * The vm backend: a full system restores its image's template, booted to
 * systemd (template.c), with a qcow2 overlay of the template's disk of
 * its own, made by qemu-img at create and removed at the end; its CONFIG
 * goes to the agent's service and gives the clone its identity.  It never
 * boots cold: a template that cannot be built fails the create, saying
 * why. */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "../../core/etc.h"
#include "../../core/netpolicy.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../util/run.h"
#include "microvm.h"
#include "mvm_int.h"

struct mvm_state *mvm_state_of(const struct crl_sandbox *sb)
{
    return crl_backend_state(sb->host, sb->ops);
}

/* QEMU's own memory above the guest's (its code, devices, TCG's
 * translation cache of 64 MiB): the cgroup's limit is the sum. */
#define OVERHEAD_TCG_MB 192
#define OVERHEAD_KVM_MB 96
#define QEMU_PIDS 256 /* QEMU's threads: vCPUs, I/O workers, RCU */

static bool is_kvm(const struct mvm_state *st)
{
    return strcmp(st->accel, "kvm") == 0;
}

/* ---- the end ---- */

static void release_now(struct crl_timer *t);

/* QEMU is reaped (or never ran): its cgroup empties at once, though it
 * may be busy for a moment; then everything of the sandbox goes. */
static void release_now(struct crl_timer *t)
{
    struct crl_sandbox *sb = t->data;
    struct mvm_sandbox *m = sb->priv;
    bool busy = m->cg && (crl_cgroup_count(m->cg, NULL) > 0 ||
                          (crl_cgroup_tidy(m->cg, m->failed_create) < 0 && errno == EBUSY));
    if (busy && m->release_tries++ < 500) {
        crl_cgroup_kill_all(m->cg, NULL);
        crl_timer_start(sb->host->loop, &m->release_timer, 10 * 1000000ull, release_now, sb);
        return;
    }
    struct crl_err err = CRL_ERR_INIT;
    if (m->cg) {
        if (crl_cgroup_release(m->cg, m->failed_create, &err) < 0)
            crl_warn(sb->id, "%s", err.msg);
    }
    crl_timer_stop(sb->host->loop, &m->release_timer);
    close_fd(&m->tap_fd); /* QEMU is gone: the tap goes with this, its last descriptor */
    crl_backend_net_release(sb, m->netns_fd, false);
    for (size_t i = 0; i < MVM_SLOTS; i++)
        close_fd(&m->layer_fds[i]);
    close_fd(&m->disk_base_fd);
    if (m->disk_path[0] && unlink(m->disk_path) < 0 && errno != ENOENT)
        crl_log_syscall(sb->id, errno, "unlink %s", m->disk_path);
    if (m->vm_started)
        mvm_vm_free(&m->vm);
    bool failed_create = m->failed_create;
    struct crl_err create_err = m->create_err;
    free(m);
    sb->priv = NULL;
    if (failed_create)
        crl_sandbox_created(sb, &create_err);
    else
        crl_sandbox_destroyed(sb);
}

static void release(struct mvm_sandbox *m)
{
    m->release_tries = 0;
    m->release_timer.data = m->sb;
    release_now(&m->release_timer);
}

static void fail_create(struct mvm_sandbox *m, const struct crl_err *err)
{
    m->failed_create = true;
    m->create_err = *err;
    m->releasing = true;
    if (m->vm_started && !m->vm.reaped)
        mvm_vm_kill(&m->vm, "create_failed", "%s", err->msg); /* dead() releases */
    else
        release(m);
}

static void mvm_destroy(struct crl_sandbox *sb)
{
    struct mvm_sandbox *m = sb->priv;
    if (!m) {
        crl_sandbox_destroyed(sb);
        return;
    }
    if (m->waiting_template) {
        mvm_template_unwait(mvm_state_of(sb), m);
        m->waiting_template = false;
    }
    /* A volume read-write: what the guest's kernel holds of it is written
     * back first (a paused guest is thawed for it). */
    struct crl_err err = CRL_ERR_INIT;
    if (m->rw_volume && !m->releasing && m->ready && m->vm_started && !m->vm.dying &&
        crl_cgroup_freeze(m->cg, false, &err) == 0 && mvm_sync_volumes(m, &err) == 0) {
        m->releasing = true;
        return; /* corral:sync's end kills the guest; dead() releases */
    }
    if (err.code)
        crl_warn(sb->id, "its volumes are not written back: %s", err.msg);
    m->releasing = true;
    if (m->vm_started && !m->vm.reaped)
        mvm_vm_kill(&m->vm, "destroyed", "destroyed"); /* dead() releases */
    else
        release(m);
}

/* ---- the guest's life ---- */

static int launch(struct mvm_sandbox *m, int state_fd, int ram_fd,
                  const struct crl_agent_hello *hello, struct crl_err *err);

/* What makes the guest this sandbox's: its name and /etc files (as every
 * backend gets them, lib/core/etc.h), its layers in slots 0..n-1 (top
 * first: /dev/vda...), a writable tmpfs of disk_mb, its volumes in the
 * volume slots after the layers' (/dev/vdi...). */
static void configure(struct mvm_sandbox *m)
{
    struct crl_sandbox *sb = m->sb;
    struct mvm_state *st = mvm_state_of(sb);
    struct crl_err err = CRL_ERR_INIT;
    struct crl_agent_config *c = calloc(1, sizeof(*c));
    if (!c) {
        mvm_vm_kill(&m->vm, "internal", "out of memory for a CONFIG");
        return;
    }
    snprintf(c->hostname, sizeof(c->hostname), "%s", sb->id);
    if (st->machine == MVM_PC) {
        /* A full system's root is its template's: a clone gets its own
         * machine-id (and the agent its own SSH host keys). */
        uint8_t id[CRL_AGENT_MACHINE_ID / 2];
        if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id))
            crl_err_sys(&err, errno, "getrandom for a machine-id");
        for (size_t i = 0; i < sizeof(id); i++)
            snprintf(c->machine_id + 2 * i, 3, "%02x", id[i]);
    } else {
        c->n_layers = m->n_layers;
        for (size_t i = 0; i < m->n_layers; i++)
            snprintf(c->layers[i], sizeof(c->layers[i]), "/dev/vd%c", (char)('a' + i));
        c->disk_mb = sb->spec.disk_mb;
    }
    c->n_volumes = sb->spec.n_volumes;
    for (size_t i = 0; i < sb->spec.n_volumes; i++) {
        struct crl_agent_volume *v = &c->volumes[i];
        snprintf(v->device, sizeof(v->device), "/dev/vd%c", (char)('a' + mvm_volume_base(st) + i));
        snprintf(v->path, sizeof(v->path), "%s", sb->spec.volumes[i].path);
        v->read_only = sb->spec.volumes[i].read_only;
    }
    if (m->tap_fd >= 0 &&
        crl_backend_net_address(sb, c->net_address, c->net_gateway, sizeof(c->net_address)) == 0)
        c->net_prefix = 30;
    char ns[64];
    crl_backend_net_nameserver(sb, ns, sizeof(ns));
    if (crl_etc_hostname(c->etc_hostname, sizeof(c->etc_hostname), sb->id) < 0 ||
        crl_etc_hosts(c->etc_hosts, sizeof(c->etc_hosts), sb->id) < 0 ||
        crl_etc_resolv_conf(c->etc_resolv_conf, sizeof(c->etc_resolv_conf),
                            crl_net_mode_name(crl_net_policy_mode(sb->spec.network)), ns) < 0)
        crl_err_set(&err, CRL_E_INTERNAL, "the guest's /etc files do not fit a CONFIG");
    if (err.code || mvm_vm_configure(&m->vm, c, &err) < 0)
        mvm_vm_kill(&m->vm, "internal", "%s", err.msg);
    free(c);
}

static void sb_hello(struct mvm_vm *vm)
{
    struct mvm_sandbox *m = vm->ctx;
    /* A cold boot's greeting; a restored guest was greeted before it was
     * saved (and may greet again: its CONFIG is on its way already). */
    if (strcmp(m->start_kind, "cold") != 0 || vm->sess.configs_unanswered)
        return;
    configure(m);
}

static void sb_ready(struct mvm_vm *vm)
{
    struct mvm_sandbox *m = vm->ctx;
    struct mvm_state *st = mvm_state_of(m->sb);
    mvm_vm_deadline_stop(vm);
    if (m->ready)
        return;
    m->ready = true;
    m->t_ready = crl_wall_s();
    if (strcmp(m->start_kind, "restored") == 0)
        st->n.restores++;
    else
        st->n.cold_boots++;
    crl_debug(m->sb->id, "guest ready (%s, %s) in %.0f ms", m->start_kind, st->accel,
              (m->t_ready - m->t_create) * 1e3);
    crl_sandbox_created(m->sb, NULL);
}

static void sb_frame(struct mvm_vm *vm, const struct crl_agent_frame *f)
{
    struct mvm_sandbox *m = vm->ctx;
    if (!m->ready && f->stream == 0 && f->type == CRL_AGENT_ERROR)
        return;
    mvm_procs_frame(m, f);
}

static void start(struct mvm_sandbox *m);
static void drop_disk(struct mvm_sandbox *m);

static void sb_dead(struct mvm_vm *vm, const char *reason, const char *msg)
{
    struct mvm_sandbox *m = vm->ctx;
    struct mvm_state *st = mvm_state_of(m->sb);
    struct crl_sandbox *sb = m->sb;
    mvm_procs_end(m);
    if (m->releasing) {
        release(m);
        return;
    }
    if (!m->ready) {
        st->n.start_failures++;
        crl_warn(sb->id, "the guest did not start (%s, attempt %u): %s", m->start_kind, m->attempts,
                 msg);
        /* A template another corrald saved that does not restore here is
         * no good to the next create either. */
        if (strcmp(m->start_kind, "restored") == 0 && m->template_cached)
            mvm_template_drop(st, m->template_name, msg);
        struct crl_err err = CRL_ERR_INIT;
        if (m->attempts < 2) {
            /* Once more: cold this time if the restore failed, but for a
             * full system, which restores again on a new overlay. */
            st->n.retries++;
            mvm_vm_free(vm);
            m->vm_started = false;
            if (st->machine == MVM_PC) {
                drop_disk(m);
                start(m);
                return;
            }
            if (launch(m, -1, -1, NULL, &err) == 0)
                return;
        } else {
            crl_err_set(&err, CRL_E_INTERNAL, "the %s did not start (%s, twice): %s",
                        st->machine == MVM_PC ? "VM" : "microVM", reason, msg);
        }
        fail_create(m, &err);
        return;
    }
    st->n.killed++;
    /* The sandbox failed; its teardown comes back through mvm_destroy. */
    crl_sandbox_failed(sb, reason, "%s", msg);
}

static const struct mvm_vm_ops sandbox_vm_ops = {
    .frame = sb_frame,
    .hello = sb_hello,
    .ready = sb_ready,
    .dead = sb_dead,
};

/* Start a QEMU for the sandbox: restoring state_fd over the RAM of ram_fd
 * (both taken and closed), or cold when they are -1. */
static int launch(struct mvm_sandbox *m, int state_fd, int ram_fd,
                  const struct crl_agent_hello *hello, struct crl_err *err)
{
    struct mvm_state *st = mvm_state_of(m->sb);
    struct crl_sandbox *sb = m->sb;
    struct crl_host *h = sb->host;
    cleanup_close int disk_fd = -1;
    if (m->disk_path[0] && (disk_fd = open(m->disk_path, O_RDWR | O_CLOEXEC)) < 0) {
        crl_err_sys(err, errno, "the guest's disk %s", m->disk_path);
        close_fd(&state_fd);
        close_fd(&ram_fd);
        return -1;
    }
    struct mvm_launch l = {
        .mem_mb = m->mem_mb,
        .vcpus = m->vcpus,
        .disk_fd = disk_fd,
        .disk_backing_fd = m->disk_base_fd,
        .incoming_fd = state_fd,
        .ram_fd = ram_fd,
        .netns_fd = m->netns_fd,
        .tap_fd = m->tap_fd,
        .cg = m->cg,
        .uid = h->cfg.uid_base + sb->slot * 65536u,
        .gid = h->cfg.uid_base + sb->slot * 65536u,
    };
    memcpy(l.layer_fds, m->layer_fds, sizeof(l.layer_fds));
    l.volume_slots = sb->spec.n_volumes > 0;
    for (size_t i = 0; i < MVM_VOLUME_SLOTS; i++) {
        bool used = i < sb->spec.n_volumes;
        l.volume_fds[i] = used ? sb->volume_fds[i] : -1;
        l.volume_ro[i] = !used || sb->spec.volumes[i].read_only;
    }
    m->attempts++;
    m->start_kind = state_fd >= 0 ? "restored" : "cold";
    int r = mvm_vm_start(st, &m->vm, sb->id, &l, &sandbox_vm_ops, m, err);
    if (state_fd >= 0)
        close(state_fd);
    if (ram_fd >= 0)
        close(ram_fd);
    if (r < 0)
        return -1;
    m->vm_started = true;
    if (state_fd >= 0) {
        mvm_vm_takeover(&m->vm, hello);
        configure(m);
        mvm_vm_deadline(&m->vm, is_kvm(st) ? 10000 : 30000, "READY after a restore");
    } else {
        mvm_vm_deadline(&m->vm, is_kvm(st) ? 20000 : 90000, "READY after a cold boot");
    }
    return 0;
}

static void template_waited(void *ctx)
{
    struct mvm_sandbox *m = ctx;
    m->waiting_template = false;
    start(m);
}

/* A full system's disk: a qcow2 overlay of its template's (read-only, by
 * descriptor in disk_base_fd), made by qemu-img without opening the
 * backing (its path in the header is only for a reader's eyes); the
 * template's disk is checked first, as an ext4 of the size it should
 * have, so that a lost or damaged one fails here, saying so. */
static int make_disk(struct mvm_sandbox *m, struct mvm_restore *r, struct crl_err *err)
{
    struct mvm_state *st = mvm_state_of(m->sb);
    uint8_t magic[2];
    struct stat sb;
    const char *broken = NULL;
    if (fstat(r->disk_fd, &sb) < 0 || (uint64_t)sb.st_size != r->disk_bytes)
        broken = "its size is not the one it was made with";
    else if (pread(r->disk_fd, magic, 2, 1080) != 2 || magic[0] != 0x53 || magic[1] != 0xef)
        broken = "it has no ext4 superblock";
    else if (sb.st_nlink == 0)
        broken = "it was removed";
    if (broken) {
        crl_err_set(err, CRL_E_INTERNAL,
                    "the VM's disk: template %s's disk %s is damaged (%s): it is dropped, and "
                    "the next create builds it again",
                    r->name, r->disk_path, broken);
        mvm_template_drop(st, r->name, err->msg);
        return -1;
    }
    snprintf(m->disk_path, sizeof(m->disk_path), "%s/%s.qcow2", st->dir, m->sb->id);
    char size[32];
    snprintf(size, sizeof(size), "%llu", (unsigned long long)r->disk_bytes);
    char *argv[] = {st->qemu_img, "create", "-q",         "-f",         "qcow2", "-u", "-F",
                    "raw",        "-b",     r->disk_path, m->disk_path, size,    NULL};
    static char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
    char *out = NULL;
    int status = 0;
    double t0 = crl_wall_s();
    int rc = crl_run_capture(argv, envp, 1, 4096, &out, &status, err);
    if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
        rc = crl_err_set(err, CRL_E_INTERNAL, "qemu-img create %s failed: %s", m->disk_path,
                         out && *out ? out : "(no output)");
    free(out);
    if (rc < 0) {
        unlink(m->disk_path);
        m->disk_path[0] = 0;
        return crl_err_prefix(err, "the VM's disk");
    }
    m->disk_ms = (crl_wall_s() - t0) * 1e3;
    crl_debug(m->sb->id, "disk %s over %s in %.1f ms", m->disk_path, r->disk_path, m->disk_ms);
    m->disk_base_fd = r->disk_fd;
    r->disk_fd = -1;
    return 0;
}

/* A failed start's disk goes: a retry restores onto a new one. */
static void drop_disk(struct mvm_sandbox *m)
{
    if (m->disk_path[0])
        unlink(m->disk_path);
    m->disk_path[0] = 0;
    close_fd(&m->disk_base_fd);
}

static void start(struct mvm_sandbox *m)
{
    struct crl_sandbox *sb = m->sb;
    struct mvm_state *st = mvm_state_of(sb);
    bool pc = st->machine == MVM_PC;
    struct mvm_restore r = {.fd = -1, .ram_fd = -1, .disk_fd = -1};
    struct crl_err err = CRL_ERR_INIT;
    struct mvm_template_key k = {
        .mem_mb = m->mem_mb,
        .vcpus = m->vcpus,
        .nic = m->tap_fd >= 0,
        .volume_slots = sb->spec.n_volumes > 0,
        .image_id = pc ? sb->image->rec->id : NULL,
        .image_name = pc ? sb->image->name : NULL,
        .layer_fds = m->layer_fds,
        .n_layers = m->n_layers,
        .disk_mb = sb->spec.disk_mb,
    };
    int got = sb->host->cfg.microvm_cold && !pc
                  ? -1
                  : mvm_template_get(st, &k, &r, template_waited, m, &err);
    if (got == 0) {
        m->waiting_template = true;
        return;
    }
    if (pc && got < 0) {
        crl_err_prefix(&err, "no template of image %s to restore", sb->image->name);
        fail_create(m, &err);
        return;
    }
    if (got == 1) {
        snprintf(m->template_name, sizeof(m->template_name), "%s", r.name);
        m->template_cached = r.cached;
    }
    if (pc && make_disk(m, &r, &err) < 0) {
        close_fd(&r.fd);
        close_fd(&r.ram_fd);
        close_fd(&r.disk_fd);
        fail_create(m, &err);
        return;
    }
    if (launch(m, got == 1 ? r.fd : -1, got == 1 ? r.ram_fd : -1, &r.hello, &err) < 0)
        fail_create(m, &err);
}

/* The sandbox's namespace has its link: its guest gets a network device
 * bridged to it (lib/os/vnet.h), then it starts. */
static void net_claimed(struct crl_sandbox *sb, int netns_fd, const struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    struct crl_err e2 = CRL_ERR_INIT;
    if (!err) {
        m->netns_fd = netns_fd;
        if ((m->tap_fd = crl_backend_net_tap(sb, netns_fd, &e2)) < 0)
            err = &e2;
    }
    if (err) {
        fail_create(m, err);
        return;
    }
    start(m);
}

static int mvm_create(struct crl_sandbox *sb, struct crl_err *err)
{
    struct mvm_state *st = mvm_state_of(sb);
    struct crl_host *h = sb->host;
    bool pc = st->machine == MVM_PC;
    if (st->missing[0])
        return crl_err_set(err, CRL_E_UNSUPPORTED, "%s", st->missing);
    if (!sb->image)
        return crl_err_set(err, CRL_E_INVALID, "a %s sandbox needs an image", st->backend);
    if (pc && !crl_image_is_vm(sb->image))
        return crl_err_set(err, CRL_E_INVALID,
                           "image %s is not a full system's: a vm sandbox boots an image made "
                           "by `corral image build-vm` (its kind is vm)",
                           sb->image->name);
    if (sb->spec.trajectory[0] && sb->spec.checkpoint != CRL_CKPT_NONE && !st->unpack[0])
        return crl_err_set(err, CRL_E_UNSUPPORTED, "trajectory.checkpoint %s: %s",
                           crl_checkpoint_mode_name(sb->spec.checkpoint), st->unpack_missing);
    unsigned min_mb = pc ? MVM_PC_MIN_MEMORY_MB : MVM_MIN_MEMORY_MB;
    if (sb->spec.memory_mb < min_mb)
        return crl_err_set(err, CRL_E_INVALID,
                           "memory_mb %u: a %s sandbox needs at least %u (its own kernel runs "
                           "in it%s)",
                           sb->spec.memory_mb, st->backend, min_mb, pc ? ", and systemd" : "");
    size_t nl = sb->image->n_layers;
    if (nl == 0 || nl > MVM_SLOTS)
        return crl_err_set(err, CRL_E_INVALID,
                           "image %s has %zu layers: a %s sandbox takes 1 to %d", sb->image->name,
                           nl, st->backend, MVM_SLOTS);
    struct mvm_sandbox *m = calloc(1, sizeof(*m));
    if (!m)
        return crl_err_sys(err, ENOMEM, "sandbox");
    m->sb = sb;
    m->netns_fd = m->tap_fd = m->disk_base_fd = -1;
    for (int i = 0; i < MVM_SLOTS; i++)
        m->layer_fds[i] = -1;
    m->n_layers = nl;
    for (size_t i = 0; i < sb->spec.n_volumes; i++)
        m->rw_volume |= !sb->spec.volumes[i].read_only;
    m->t_create = crl_wall_s();
    m->mem_mb = sb->spec.memory_mb;
    double c = ceil(sb->spec.cpus);
    m->vcpus = c < 1 ? 1 : c > (double)h->ncpus ? h->ncpus : (unsigned)c;
    if (!m->vcpus)
        m->vcpus = 1;
    sb->priv = m;
    for (size_t i = 0; i < nl; i++)
        if ((m->layer_fds[i] = crl_image_open_layer(sb->image, i, err)) < 0)
            goto fail;
    char name[32];
    snprintf(name, sizeof(name), "s%u", sb->slot);
    struct crl_cgroup_limits lim = {
        .memory_bytes = ((uint64_t)m->mem_mb + (is_kvm(st) ? OVERHEAD_KVM_MB : OVERHEAD_TCG_MB))
                        << 20,
        .pids = QEMU_PIDS,
        .cpus = sb->spec.cpus,
    };
    if (crl_cgroup_create(h->cgroups, name, &lim, &m->cg, err) < 0)
        goto fail;
    int ns = crl_backend_net_claim(sb, net_claimed, err);
    if (ns == CRL_NET_PENDING)
        return 0; /* net_claimed goes on */
    if (ns < 0)
        goto fail;
    m->netns_fd = ns;
    start(m);
    return 0;
fail:
    for (int i = 0; i < MVM_SLOTS; i++)
        close_fd(&m->layer_fds[i]);
    if (m->cg)
        crl_cgroup_release(m->cg, true, NULL);
    if (m->netns_fd >= 0)
        crl_backend_net_release(sb, m->netns_fd, false);
    free(m);
    sb->priv = NULL;
    return -1;
}

/* The namespace whose link a policy change acts on: a guest's network
 * device is made at create, so one created without it has none to link. */
static int mvm_netns(struct crl_sandbox *sb)
{
    struct mvm_sandbox *m = sb->priv;
    return m && m->tap_fd >= 0 ? m->netns_fd : -1;
}

/* ---- pause, stats, info ---- */

/* QEMU is the sandbox's only process: freezing its cgroup stops the guest
 * whole (vCPUs, devices, timers). */
static int mvm_pause(struct crl_sandbox *sb, struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    return crl_backend_pause_cgroup(sb, m && m->ready && !m->releasing ? m->cg : NULL, true,
                                    m ? &m->last_pause : NULL, err);
}

static int mvm_resume(struct crl_sandbox *sb, struct crl_err *err)
{
    struct mvm_sandbox *m = sb->priv;
    return crl_backend_pause_cgroup(sb, m && !m->releasing ? m->cg : NULL, false, NULL, err);
}

static int mvm_stats(struct crl_sandbox *sb, struct crl_usage *u)
{
    struct mvm_sandbox *m = sb->priv;
    memset(u, 0, sizeof(*u));
    if (!m || !m->cg)
        return -1;
    crl_backend_cgroup_usage(m->cg, u);
    u->oom_kills += m->oom_kills; /* the guest's kernel's, in its execs */
    u->disk_limit_bytes = (uint64_t)sb->spec.disk_mb << 20;
    u->disk_bytes = m->disk_bytes; /* as the guest said when its last process ended */
    return 0;
}

static json_t *mvm_info(struct crl_sandbox *sb)
{
    struct mvm_sandbox *m = sb->priv;
    struct mvm_state *st = mvm_state_of(sb);
    if (!m || !m->vm_started)
        return NULL;
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:s, s:I, s:I}", "accel", st->accel, "start",
                          m->start_kind, "qemu_pid", (json_int_t)m->vm.pid, "uid",
                          (json_int_t)(sb->host->cfg.uid_base + sb->slot * 65536u), "cgroup",
                          m->cg ? crl_cgroup_name(m->cg) : "", "vcpus", (json_int_t)m->vcpus,
                          "attempts", (json_int_t)m->attempts);
    if (!o)
        return NULL;
    json_object_set_new(o, "machine", json_string(st->machine == MVM_PC ? "q35" : "microvm"));
    if (m->template_name[0])
        json_object_set_new(o, "template", json_string(m->template_name));
    if (m->disk_path[0]) {
        json_object_set_new(o, "disk", json_string(m->disk_path));
        json_object_set_new(o, "disk_ms", json_real(m->disk_ms));
    }
    if (!is_kvm(st))
        json_object_set_new(o, "warning", json_string(st->accel_why));
    if (m->ready) {
        json_object_set_new(o, "ready_ms", json_real((m->t_ready - m->t_create) * 1e3));
        if (m->vm.sess.hello_seen)
            json_object_set_new(o, "kernel", json_string(m->vm.sess.hello.kernel));
    }
    crl_backend_pause_info(o, &m->last_pause);
    json_t *net = m->tap_fd >= 0 ? crl_backend_net_json(sb) : NULL;
    if (net)
        json_object_set_new(o, "network", net);
    return o;
}

/* ---- for an operator ---- */

static json_t *mvm_host_info(struct crl_host *h, void *state)
{
    struct mvm_state *st = state;
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:o, s:I, s:I, s:I, s:I, s:I, s:I}", "accel",
                          st->accel, "accel_why", st->accel_why, "kernel", st->kernel, "initrd",
                          st->initrd, "templates", mvm_templates_json(st), "restores",
                          (json_int_t)st->n.restores, "cold_boots", (json_int_t)st->n.cold_boots,
                          "template_builds", (json_int_t)st->n.template_builds, "start_failures",
                          (json_int_t)st->n.start_failures, "retries", (json_int_t)st->n.retries,
                          "guests_killed", (json_int_t)st->n.killed);
    if (o && st->missing[0])
        json_object_set_new(o, "not_set_up", json_string(st->missing));
    if (o) {
        json_object_set_new(o, "template_loads", json_integer((json_int_t)st->n.template_loads));
        json_object_set_new(o, "template_cache", json_string(st->cache));
    }
    return o;
}

static void mvm_metrics(struct crl_host *h, void *state, struct crl_buf *b)
{
    struct mvm_state *st = state;
    const struct {
        const char *name, *help;
        uint64_t v;
    } c[] = {
        {"restores_total", "Guests started from a template.", st->n.restores},
        {"cold_boots_total", "Guests booted cold.", st->n.cold_boots},
        {"template_builds_total", "Templates booted and saved.", st->n.template_builds},
        {"template_loads_total", "Templates loaded from the template cache.", st->n.template_loads},
        {"start_failures_total", "Starts killed before READY (each retried once).",
         st->n.start_failures},
        {"guests_killed_total", "Ready guests that died or were killed for what they did.",
         st->n.killed},
    };
    /* corral_microvm_... and corral_vm_...: a family per backend */
    for (size_t i = 0; i < CRL_ARRAY_SIZE(c); i++)
        crl_buf_printf(
            b, "# HELP corral_%s_%s %s\n# TYPE corral_%s_%s counter\ncorral_%s_%s %" PRIu64 "\n",
            st->backend, c[i].name, c[i].help, st->backend, c[i].name, st->backend, c[i].name,
            c[i].v);
}

/* ---- start and end of the backend ---- */

/* Both backends boot the same kernel and initramfs (set up by `corral
 * setup microvm`), each with its own run directory. */
static int init_machine(struct crl_host *h, void **state, enum mvm_machine machine,
                        struct crl_err *err)
{
    struct mvm_state *st = calloc(1, sizeof(*st));
    if (!st)
        return crl_err_sys(err, ENOMEM, "%s backend", machine == MVM_PC ? "vm" : "microvm");
    st->host = h;
    st->machine = machine;
    st->backend = machine == MVM_PC ? "vm" : "microvm";
    st->placeholder_fd = -1;
    *state = st;
    const struct crl_host_config *c = &h->cfg;
    snprintf(st->qemu_img, sizeof(st->qemu_img), "/usr/bin/qemu-img");
    snprintf(st->qemu, sizeof(st->qemu), "%s",
             c->qemu_path ? c->qemu_path : "/usr/bin/qemu-system-x86_64");
    if (c->microvm_kernel)
        snprintf(st->kernel, sizeof(st->kernel), "%s", c->microvm_kernel);
    else
        snprintf(st->kernel, sizeof(st->kernel), "%s/microvm/vmlinuz", h->state_dir);
    if (c->microvm_initrd)
        snprintf(st->initrd, sizeof(st->initrd), "%s", c->microvm_initrd);
    else
        snprintf(st->initrd, sizeof(st->initrd), "%s/microvm/initrd.cpio", h->state_dir);
    if (!(st->accel =
              mvm_accel_detect(c->microvm_accel, st->accel_why, sizeof(st->accel_why), err)))
        return -1;
    const char *paths[3] = {st->qemu, st->kernel, st->initrd};
    const char *what[3] = {"QEMU", "guest kernel", "guest initramfs"};
    for (int i = 0; i < 3 && !st->missing[0]; i++)
        if (access(paths[i], i == 0 ? X_OK : R_OK) < 0)
            snprintf(st->missing, sizeof(st->missing),
                     "the microvm backend is not set up: no %s at %s (%s): run `corral "
                     "setup microvm` or pass --microvm-kernel and --microvm-initrd",
                     what[i], paths[i], strerror(errno));
    if (!st->missing[0] && machine == MVM_PC && access(st->qemu_img, X_OK) < 0)
        snprintf(st->missing, sizeof(st->missing),
                 "the vm backend needs qemu-img at %s (%s): apt-get install qemu-utils",
                 st->qemu_img, strerror(errno));
    if (st->missing[0])
        crl_warn(NULL, "%s: %s", st->backend, st->missing);
    else if (!is_kvm(st))
        crl_warn(NULL, "%s: guests run under %s", st->backend, st->accel_why);
    if (is_kvm(st)) {
        struct group *g = getgrnam("kvm");
        st->kvm_gid = g ? g->gr_gid : 0;
    }
    struct crl_err e2 = CRL_ERR_INIT;
    if (crl_sibling_path("corral-unpack", st->unpack, sizeof(st->unpack), &e2) < 0 ||
        access(st->unpack, X_OK) < 0) {
        snprintf(st->unpack_missing, sizeof(st->unpack_missing),
                 "%s checkpoints need corral-unpack next to corrald (%s)", st->backend,
                 e2.msg[0] ? e2.msg : strerror(errno));
        crl_warn(NULL, "%s: %s", st->backend, st->unpack_missing);
        st->unpack[0] = 0;
    }
    snprintf(st->dir, sizeof(st->dir), "%s/%s", h->run_dir, st->backend);
    char cache[PATH_MAX];
    snprintf(cache, sizeof(cache), "%s/templates", h->state_dir);
    if (mvm_cache_init(st, c->template_cache ? c->template_cache : cache, err) < 0)
        return crl_err_prefix(err, "%s", st->backend);
    if (mkdir(st->dir, 0700) < 0 && errno != EEXIST)
        return crl_err_sys(err, errno, "mkdir %s", st->dir);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/placeholder", st->dir);
    cleanup_close int w = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w < 0 || ftruncate(w, (off_t)MVM_PLACEHOLDER_BYTES) < 0)
        return crl_err_sys(err, errno, "the empty layer %s", path);
    if ((st->placeholder_fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return crl_err_sys(err, errno, "open %s", path);
    return 0;
}

static int mvm_init(struct crl_host *h, void **state, struct crl_err *err)
{
    return init_machine(h, state, MVM_MICROVM, err);
}

static int vm_init(struct crl_host *h, void **state, struct crl_err *err)
{
    return init_machine(h, state, MVM_PC, err);
}

/* A crashed corrald's QEMUs died with it (their parent-death signal) or
 * with their cgroups (the host's reconcile); its templates (their states
 * and disks) and its full systems' overlays lived in the run directory,
 * and go. */
static int mvm_reconcile(struct crl_host *h, void *state, struct crl_err *err)
{
    struct mvm_state *st = state;
    DIR *d = opendir(st->dir);
    struct dirent *e;
    unsigned n = 0;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".state") || strstr(e->d_name, ".disk") ||
            strstr(e->d_name, ".qcow2"))
            n += unlinkat(dirfd(d), e->d_name, 0) == 0;
    if (n)
        crl_info(NULL, "%s: removed %u files a crashed corrald left in %s", st->backend, n,
                 st->dir);
    if (d)
        closedir(d);
    return 0;
}

static void mvm_shutdown(struct crl_host *h, void *state)
{
    struct mvm_state *st = state;
    mvm_templates_free(st);
    close_fd(&st->placeholder_fd);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/placeholder", st->dir);
    unlink(path);
    rmdir(st->dir);
    free(st);
}

#define MVM_OPS                                                                         \
    .volumes = CRL_VOLUMES_DISK, .reconcile = mvm_reconcile, .shutdown = mvm_shutdown,  \
    .create = mvm_create, .destroy = mvm_destroy, .stats = mvm_stats, .info = mvm_info, \
    .spawn = mvm_spawn, .kill = mvm_kill, .signal = mvm_signal, .resize = mvm_resize,   \
    .open = mvm_open, .stream = mvm_stream, .stream_cancel = mvm_stream_cancel,         \
    .snapshot_start = mvm_snapshot_start, .netns = mvm_netns, .restore = mvm_restore,   \
    .pause = mvm_pause, .resume = mvm_resume, .host_info = mvm_host_info, .metrics = mvm_metrics

const struct crl_backend_ops crl_microvm_backend = {
    .name = "microvm",
    .admit_mb = 48, /* a restored guest's QEMU, idle: about 46 MiB (docs/benchmarks.md) */
    .fds_held = 8,  /* measured: QMP and agent sockets, pidfd, console pipe, netns (v2: +1) */
    .init = mvm_init,
    MVM_OPS,
};

const struct crl_backend_ops crl_vm_backend = {
    .name = "vm",
    .admit_mb = 80, /* a restored full system's QEMU, idle: 54 MiB of MemAvailable, 73 PSS
                       (docs/benchmarks.md) */
    .fds_held = 9,  /* a microVM's and its template's disk */
    .init = vm_init,
    MVM_OPS,
};
