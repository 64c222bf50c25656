/* The microvm backend's internals, which the vm backend shares: a full
 * system is a guest of another machine (q35, its devices on PCI, a disk
 * of its own), booted to its init once per image and shape as a template
 * and restored from it; everything else is the same code.  Where the two
 * differ is st->machine: the command line (vm.c), the template's boot
 * (template.c: to the system's agent, past its init) and a clone's disk
 * (microvm.c: a qcow2 overlay of the template's).
 *
 *   microvm.c   the ops table, a sandbox's life (create from a template or
 *               cold, destroy, stats, info, pause), start and end
 *   vm.c        one QEMU: its command line, its launch (unprivileged, in
 *               the sandbox's cgroup and network namespace, in namespaces
 *               of its own, -sandbox on), its QMP connection, the agent's
 *               channel with the host's session over it (lib/agent/host.h),
 *               its console, its death
 *   template.c  a template per (memory, vCPUs): booted once to the agent's
 *               HELLO, saved with QEMU's migration to a file, restored by
 *               every sandbox of that shape
 *   procs.c     what runs in a guest: execs and sessions (spawn, kill),
 *               files (open, stream) and checkpoints (snapshot_start,
 *               restore) as EXEC streams, all but execs through the
 *               agent's builtins
 *   view.c      a checkpoint's view of the guest's writable layer: its tar
 *               unpacked by corral-unpack into a tmpfs mounted nowhere
 *
 * The guest is hostile: every byte it sends goes through the host's session
 * (frames checked, streams and windows enforced) before anything here sees
 * it; a guest that breaks the protocol is killed. */
#ifndef CRL_MICROVM_INT_H
#define CRL_MICROVM_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../agent/host.h"
#include "../../agent/msg.h"
#include "../../core/host.h"
#include "../../core/sandbox.h"
#include "../../core/volume.h"
#include "../../util/buf.h"
#include "../../util/loop.h"
#include "../../util/sha256.h"

/* Block devices a template has, and so the most layers an image restored
 * from one may have; a bigger image boots cold. */
#define MVM_SLOTS 8
/* What a guest's layer slots read as in a template: an empty sparse file
 * this big (the guest sizes its disks once, at boot). */
#define MVM_PLACEHOLDER_BYTES (64ull << 30)
/* Read-write block devices after the layers' in a guest made for volumes
 * (its template too): one per volume a spec may name.  A template's read
 * as an empty sparse file of the largest volume's size, so a clone's guest
 * takes any volume (a device reads and writes only within its file). */
#define MVM_VOLUME_SLOTS CRL_SPEC_MAX_VOLUMES
#define MVM_VOLUME_PLACEHOLDER_BYTES ((unsigned long long)CRL_VOLUME_MAX_MB << 20)
/* Shapes (memory, vCPUs) with a template at once: the least recently used
 * is forgotten for a new one. */
#define MVM_MAX_TEMPLATES 8
/* The least memory a guest boots in: Debian's kernel and corral-agent's
 * initramfs (64 MiB powers off in its firmware); a full system, systemd
 * and its services besides. */
#define MVM_MIN_MEMORY_MB 96
#define MVM_PC_MIN_MEMORY_MB 256

/* A launch's tap_fd: QEMU's child makes a tap in its own new network
 * namespace (a template's network device, connected to nothing). */
#define MVM_TAP_MAKE (-2)
/* The MAC of every guest's network device (each is alone on its bridge). */
#define MVM_MAC "52:54:00:c0:7a:01"

struct mvm_vm;
struct mvm_template;

enum mvm_machine {
    MVM_MICROVM, /* -M microvm, virtio-mmio: the agent is PID 1 (the microvm backend) */
    MVM_PC,      /* -M q35, virtio-pci, a disk: systemd is PID 1 (the vm backend) */
};

struct mvm_counters {
    uint64_t restores, cold_boots, template_builds, template_loads, start_failures, retries, killed;
};

struct mvm_state {
    struct crl_host *host;
    enum mvm_machine machine;
    const char *backend; /* its name, for messages: "microvm" or "vm" */
    char qemu_img[PATH_MAX];
    char qemu[PATH_MAX];
    char kernel[PATH_MAX];
    char initrd[PATH_MAX];
    char dir[PATH_MAX]; /* <run>/microvm: templates and the placeholder */
    const char *accel;  /* "kvm" or "tcg" */
    char accel_why[160];
    char missing[PATH_MAX + 96]; /* why no guest can start ("" if one can) */
    int placeholder_fd;
    gid_t kvm_gid; /* the group that may open /dev/kvm (0: none needed) */
    struct mvm_template *templates;
    struct mvm_counters n;
    char cache[PATH_MAX];                 /* saved templates (template_cache.c), "": none */
    char cache_ident[CRL_DIGEST_LEN + 1]; /* the guest's kernel, initramfs, QEMU, accel */
    char unpack[PATH_MAX];                /* corral-unpack, next to corrald ("": missing) */
    char unpack_missing[PATH_MAX + 64];   /* why checkpoints cannot be taken */
};

/* The state of the backend a sandbox is of (microvm or vm). */
struct mvm_state *mvm_state_of(const struct crl_sandbox *sb);

/* A full system's disk (MVM_PC): after the layers' slots, before the
 * volumes'; /dev/vdi in the guest. */
#define MVM_DISK_SLOT MVM_SLOTS
static inline unsigned mvm_volume_base(const struct mvm_state *st)
{
    return MVM_SLOTS + (st->machine == MVM_PC ? 1 : 0);
}

/* ---- vm.c ---- */

struct mvm_vm_ops {
    /* The session passed a frame (not HELLO or READY, which vm.c handles). */
    void (*frame)(struct mvm_vm *vm, const struct crl_agent_frame *f);
    /* HELLO came (a cold boot), or READY (the CONFIG sent took effect). */
    void (*hello)(struct mvm_vm *vm);
    void (*ready)(struct mvm_vm *vm);
    /* The VM is gone (reaped): why, as a reason word and a message. */
    void (*dead)(struct mvm_vm *vm, const char *reason, const char *msg);
};

struct mvm_launch {
    unsigned mem_mb, vcpus;
    int layer_fds[MVM_SLOTS]; /* -1: the placeholder */
    /* With volume_slots, MVM_VOLUME_SLOTS more disks, /dev/vdi...: a
     * volume's disk file (read-only with volume_ro), or -1: the
     * placeholder, read-only. */
    bool volume_slots;
    int volume_fds[MVM_VOLUME_SLOTS];
    bool volume_ro[MVM_VOLUME_SLOTS];
    /* A full system's disk (MVM_PC): a template's raw ext4, read-write
     * (disk_backing_fd -1), or a clone's qcow2 overlay over it (its
     * backing, read-only, by descriptor: never by the path the overlay
     * names). */
    int disk_fd, disk_backing_fd;
    int incoming_fd;       /* a template's state to restore, or -1 */
    int ram_fd;            /* a template's RAM (a memfd), or -1: anonymous RAM */
    int netns_fd;          /* the network namespace QEMU runs in (-1: a new empty one) */
    int tap_fd;            /* the network device's tap, -1 for none, or MVM_TAP_MAKE */
    struct crl_cgroup *cg; /* NULL: none (a template's build) */
    uid_t uid;
    gid_t gid;
};

struct mvm_vm {
    struct mvm_state *st;
    char name[48]; /* the sandbox's id, or the template's name */
    pid_t pid;
    int pidfd, agent_fd, qmp_fd, console_fd;
    struct crl_watch w_pid, w_agent, w_console;
    struct crl_timer deadline, poll;
    char awaited[48]; /* what the deadline waits for */
    bool incoming;    /* restored from a template */
    bool ram_shared;  /* its RAM is a template's memfd */
    int state_fd;     /* the template's state, until QEMU has it */
    struct crl_qmp *qmp;
    struct crl_agent_host sess;
    bool sess_open;
    struct crl_buf outq; /* frames to the guest not yet written */
    char console[2048];  /* the newest of what the guest and QEMU printed */
    size_t console_len;
    bool dying, reaped;
    char reason[32], msg[256]; /* why it was killed, kept for dead() */
    double t_start;
    const struct mvm_vm_ops *ops;
    void *ctx;
};

/* Start QEMU.  On success the VM is running and ops will hear of it; on
 * failure nothing is left. */
int mvm_vm_start(struct mvm_state *st, struct mvm_vm *vm, const char *name,
                 const struct mvm_launch *l, const struct mvm_vm_ops *ops, void *ctx,
                 struct crl_err *err);
/* Kill QEMU (SIGKILL) with a reason; dead() follows once it is reaped. */
void mvm_vm_kill(struct mvm_vm *vm, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* After dead(): close what is left. */
void mvm_vm_free(struct mvm_vm *vm);
/* Kill the VM if it has not reached `what` within `ms`. */
void mvm_vm_deadline(struct mvm_vm *vm, unsigned ms, const char *what);
void mvm_vm_deadline_stop(struct mvm_vm *vm);
/* A restored guest greeted its first host before it was saved. */
void mvm_vm_takeover(struct mvm_vm *vm, const struct crl_agent_hello *hello);
/* Queue a frame to the guest (a JSON payload is taken and freed); -1 only
 * if the frame is malformed or memory runs out (the VM is then killed). */
int mvm_vm_send(struct mvm_vm *vm, uint16_t type, uint32_t stream, const void *payload,
                uint32_t len);
int mvm_vm_send_json(struct mvm_vm *vm, uint16_t type, uint32_t stream, char *json, size_t len);
/* Send CONFIG: what the caller filled in, with the clock and a fresh seed
 * (wiped from *c once sent). */
int mvm_vm_configure(struct mvm_vm *vm, struct crl_agent_config *c, struct crl_err *err);
/* The accelerator's name as QEMU's -accel takes it. */
const char *mvm_accel_detect(const char *want, char *why, size_t cap, struct crl_err *err);

/* ---- template.c ---- */

/* What a template is for: a shape (memory, vCPUs), with a network device
 * or not, with volume slots or not; a full system's also an image (its
 * layers booted in it) and a disk size. */
struct mvm_template_key {
    unsigned mem_mb, vcpus;
    bool nic, volume_slots;
    const char *image_id; /* MVM_PC: the image's config digest */
    const char *image_name;
    const int *layer_fds; /* MVM_PC: its layers, top first (the template dups them) */
    size_t n_layers;
    unsigned disk_mb; /* MVM_PC */
};

/* What a restore takes from a template: descriptors of its device state,
 * its RAM (a sealed memfd) and, for a full system, its disk (read-only),
 * which the caller closes; its HELLO; its name and disk's path. */
struct mvm_restore {
    int fd, ram_fd, disk_fd;
    struct crl_agent_hello hello;
    char name[48];
    char disk_path[PATH_MAX];
    uint64_t disk_bytes;
    bool cached; /* the template came from the template cache */
};

/* 1 with *r filled; 0 when one is being built (`waiting` is called once it
 * is, or once it failed); -1 when none can be had (*err says why: a
 * microVM boots cold, a full system's create fails). */
typedef void (*mvm_template_cb)(void *ctx);
int mvm_template_get(struct mvm_state *st, const struct mvm_template_key *k, struct mvm_restore *r,
                     mvm_template_cb waiting, void *ctx, struct crl_err *err);
/* Forget a waiter (its sandbox ended first). */
void mvm_template_unwait(struct mvm_state *st, void *ctx);
/* Forget a ready template found broken (its disk lost or damaged): the
 * next create of its kind builds it again. */
void mvm_template_drop(struct mvm_state *st, const char *name, const char *why);
json_t *mvm_templates_json(struct mvm_state *st);
void mvm_templates_free(struct mvm_state *st);

/* ---- template_cache.c ---- */

/* A saved template as the cache holds it: its state's and disk's files
 * (read-only, never written again), its RAM (a sealed memfd: the caller's
 * to close), its HELLO. */
struct mvm_cache_entry {
    int ram_fd;
    char state_path[PATH_MAX];
    char disk_path[PATH_MAX]; /* "": none (a microVM's) */
    struct crl_agent_hello hello;
    const char *name; /* the template's, for an operator reading the entry */
    uint64_t state_bytes;
};

/* The cache in `dir` (made if missing; NULL or "": none), keyed by the
 * guest's kernel and initramfs (hashed here) and QEMU's identity. */
int mvm_cache_init(struct mvm_state *st, const char *dir, struct crl_err *err);
/* The entry's name for a template of this kind: 16 hex digits. */
void mvm_cache_key(const struct mvm_state *st, const struct mvm_template_key *k, char out[17]);
/* 1 with *c filled; 0: no entry (or one that does not check: ignored);
 * -1 with *err when one could not be loaded. */
int mvm_cache_load(const struct mvm_state *st, const char *key, unsigned mem_mb,
                   struct mvm_cache_entry *c, struct crl_err *err);
/* Write a saved template's entry (from c's files and RAM). */
int mvm_cache_save(const struct mvm_state *st, const char *key, const struct mvm_cache_entry *c,
                   struct crl_err *err);
void mvm_cache_remove(const struct mvm_state *st, const char *key);

/* ---- microvm.c: a sandbox ---- */

struct mvm_proc; /* procs.c */

struct mvm_sandbox {
    struct crl_sandbox *sb;
    struct mvm_vm vm;
    bool vm_started;
    struct crl_cgroup *cg;
    int netns_fd;
    int tap_fd; /* its network device's, bridged to its link (-1: none) */
    int layer_fds[MVM_SLOTS];
    size_t n_layers;
    /* A full system's: its template's disk (read-only) and its own qcow2
     * overlay of it, removed at the end. */
    int disk_base_fd;
    char disk_path[PATH_MAX];
    double disk_ms; /* what making the overlay took */
    char template_name[48];
    bool template_cached; /* its template came from the template cache */
    bool rw_volume;       /* a volume read-write: the guest writes back before its end */
    unsigned mem_mb, vcpus;
    const char *start_kind; /* "restored" or "cold" */
    unsigned attempts;
    bool waiting_template;
    bool ready;     /* READY came: it serves */
    bool releasing; /* destroy asked */
    bool failed_create;
    struct crl_err create_err;
    double t_create, t_ready;
    uint64_t oom_kills;                   /* execs the guest reported OOM-killed */
    uint64_t disk_bytes;                  /* the writable layer's use, as the last EXIT said */
    struct crl_cgroup_reclaim last_pause; /* what the last pause gave back */
    struct crl_timer release_timer;
    unsigned release_tries;
    struct mvm_proc *procs;
};

/* ---- procs.c ---- */

int mvm_spawn(struct crl_sandbox *sb, struct crl_proc *p, struct crl_err *err);
int mvm_kill(struct crl_sandbox *sb, struct crl_proc *p, enum crl_kill_scope scope);
int mvm_signal(struct crl_sandbox *sb, struct crl_proc *p, int sig, enum crl_signal_scope scope,
               struct crl_err *err);
void mvm_stream_cancel(struct crl_sandbox *sb, struct crl_stream_req *t);
int mvm_resize(struct crl_sandbox *sb, struct crl_proc *p, unsigned rows, unsigned cols,
               struct crl_err *err);
int mvm_open(struct crl_sandbox *sb, struct crl_open_req *o, struct crl_err *err);
int mvm_stream(struct crl_sandbox *sb, struct crl_stream_req *t, struct crl_err *err);
int mvm_snapshot_start(struct crl_sandbox *sb, struct crl_snapshot_req *rq, struct crl_err *err);
int mvm_restore(struct crl_sandbox *sb, struct crl_restore_req *rq, struct crl_err *err);
int mvm_sync_volumes(struct mvm_sandbox *m, struct crl_err *err);
/* A frame on an exec's or a transfer's stream. */
void mvm_procs_frame(struct mvm_sandbox *m, const struct crl_agent_frame *f);
/* The VM is gone: every process and transfer ends (as killed). */
void mvm_procs_end(struct mvm_sandbox *m);

/* ---- view.c ---- */

struct mvm_view;
/* Start corral-unpack on a tmpfs for m's layer: *tar_w is where the tar
 * goes (the caller's to close; its end is the tar's).  rq hears once both
 * the guest's half (mvm_view_guest_done) and the helper have ended. */
struct mvm_view *mvm_view_start(struct mvm_sandbox *m, struct crl_snapshot_req *rq, int *tar_w,
                                struct crl_err *err);
/* corral:layer-out ended with `code` (an enum crl_stream_status, or 128 +
 * a signal); `why` its last line. */
void mvm_view_guest_done(struct mvm_view *v, int code, const char *why);

#endif
