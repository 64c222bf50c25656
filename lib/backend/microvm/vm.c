/* One QEMU and the guest in it: the command line, the launch, the agent's
 * channel and QMP, the console, the end.
 *
 * QEMU gets everything as descriptors it inherits: the kernel, the
 * initramfs and each layer as /proc/self/fd/N, the agent's channel and
 * QMP as connected sockets (chardev socket,fd=N), a template's state as
 * -incoming fd:N.  So it needs no path of the host's, no directory of its
 * own and no socket file: it runs as the sandbox slot's unprivileged uid,
 * in the sandbox's cgroup and network namespace, in mount, IPC and UTS
 * namespaces of its own, with no new privileges and QEMU's own seccomp
 * filter (-sandbox on, no spawning, no privileges, no obsolete calls). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../agent/msg.h"
#include "../../os/vnet.h"
#include "../../util/cleanup.h"
#include "../../util/fdio.h"
#include "../../util/log.h"
#include "../../vmm/qmp.h"
#include "mvm_int.h"

#define MAX_ARGS 160
#define READ_CHUNK (64u * 1024u)
/* What corrald sends is bounded by the guest's windows, but for PONGs: a
 * guest that PINGs without reading its PONGs would grow the queue. */
#define OUTQ_MAX (8u << 20)

/* ---- the accelerator ---- */

static bool cpu_has_virt(void)
{
    FILE *f = fopen("/proc/cpuinfo", "re");
    if (!f)
        return false;
    char line[4096];
    bool hw = false;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "flags", 5) == 0) {
            hw = strstr(line, " vmx") || strstr(line, " svm");
            break;
        }
    fclose(f);
    return hw;
}

const char *mvm_accel_detect(const char *want, char *why, size_t cap, struct crl_err *err)
{
    bool hw = cpu_has_virt();
    bool kvm_ok = access("/dev/kvm", R_OK | W_OK) == 0;
    if (want && strcmp(want, "tcg") == 0) {
        snprintf(why, cap, "tcg as --microvm-accel asked");
        return "tcg";
    }
    if (hw && kvm_ok) {
        snprintf(why, cap, "kvm: the CPU has hardware virtualisation and /dev/kvm opens");
        return "kvm";
    }
    const char *cause = !hw ? "the CPU shows neither vmx nor svm (a nested guest without them: "
                              "a KVM guest would hang)"
                            : "/dev/kvm cannot be opened";
    if (want && strcmp(want, "kvm") == 0) {
        crl_err_set(err, CRL_E_UNSUPPORTED, "--microvm-accel kvm: %s", cause);
        return NULL;
    }
    snprintf(why, cap, "tcg (emulation, many times slower than kvm): %s", cause);
    return "tcg";
}

/* ---- the command line ---- */

struct argv_buf {
    char *v[MAX_ARGS + 1];
    size_t n;
    char text[8192];
    size_t off;
};

__attribute__((format(printf, 2, 3))) static void arg(struct argv_buf *a, const char *fmt, ...)
{
    if (a->n >= MAX_ARGS || a->off >= sizeof(a->text))
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(a->text + a->off, sizeof(a->text) - a->off, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof(a->text) - a->off) {
        a->off = sizeof(a->text); /* marks it overflowed */
        return;
    }
    a->v[a->n++] = a->text + a->off;
    a->off += (size_t)w + 1;
}

/* The same devices, in the same order, for a template and every restore of
 * it: a migration stream only fits the machine it was saved from. */
/* Fd sets of a full system's disk (volumes take 1..MVM_VOLUME_SLOTS). */
#define DISK_FDSET 20
#define DISK_BACKING_FDSET 21

static int build_argv(const struct mvm_state *st, const struct mvm_launch *l, int kernel_fd,
                      int initrd_fd, int agent_fd, int qmp_fd, const int *slot_fds,
                      int (*volume_fds)[2], const int *disk_fds, int tap_fd, struct argv_buf *a,
                      struct crl_err *err)
{
    bool kvm = strcmp(st->accel, "kvm") == 0;
    /* What differs between the machines: its type, and its devices' bus
     * (virtio-blk-device on microvm's MMIO, virtio-blk-pci on q35's PCI). */
    bool pc = st->machine == MVM_PC;
    const char *bus = pc ? "pci" : "device";
    arg(a, "%s", st->qemu);
    arg(a, "-M");
    if (pc)
        arg(a, "q35,smm=off,vmport=off%s", l->ram_fd >= 0 ? ",memory-backend=ram0" : "");
    else
        arg(a, "microvm,x-option-roms=off,pit=off,pic=off,rtc=on,isa-serial=off%s",
            l->ram_fd >= 0 ? ",memory-backend=ram0" : "");
    if (l->ram_fd >= 0) {
        /* A template's RAM is a memfd it writes (share=on); its clones map
         * it privately (share=off): they read its pages where they lie and
         * copy only what they write.  Its migration leaves the RAM out. */
        arg(a, "-object");
        arg(a, "memory-backend-file,id=ram0,size=%uM,mem-path=/proc/self/fd/%d,share=%s", l->mem_mb,
            l->ram_fd, l->incoming_fd >= 0 ? "off" : "on");
    }
    arg(a, "-accel");
    /* TCG's translation cache is 1 GiB by default, charged to the cgroup as
     * it fills: 64 MiB is plenty for one small guest. */
    arg(a, "%s", kvm ? "kvm" : "tcg,tb-size=64");
    arg(a, "-cpu");
    arg(a, "%s", kvm ? "host" : "qemu64,+arat");
    arg(a, "-m");
    arg(a, "%uM", l->mem_mb);
    arg(a, "-smp");
    arg(a, "%u", l->vcpus);
    arg(a, "-nodefaults");
    arg(a, "-no-user-config");
    arg(a, "-nographic");
    arg(a, "-no-reboot");
    arg(a, "-sandbox");
    arg(a, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
    arg(a, "-kernel");
    arg(a, "/proc/self/fd/%d", kernel_fd);
    arg(a, "-initrd");
    arg(a, "/proc/self/fd/%d", initrd_fd);
    arg(a, "-append");
    /* tsc_early_khz: without it many TCG boots hang calibrating the TSC
     * (measured.md); cryptomgr.notests: the crypto self-tests are a third
     * of the kernel's boot under TCG; panic=-1 reboot=t: a panicking guest
     * resets at once by a triple fault (the other ways a microvm has none
     * of, and the kernel tries them for many seconds), which -no-reboot
     * makes QEMU's exit. */
    /* A full system's: eth0 as a microVM's (no renaming by udev). */
    arg(a, "console=hvc0 quiet panic=-1 reboot=t cryptomgr.notests corral.port=corral.agent%s%s",
        kvm ? "" : " tsc_early_khz=2100000", pc ? " net.ifnames=0" : "");
    arg(a, "-chardev");
    arg(a, "stdio,id=con,signal=off");
    arg(a, "-device");
    arg(a, "virtio-serial-%s,max_ports=2", bus);
    arg(a, "-device");
    arg(a, "virtconsole,chardev=con");
    arg(a, "-chardev");
    arg(a, "socket,id=agent,fd=%d", agent_fd);
    arg(a, "-device");
    arg(a, "virtserialport,chardev=agent,name=corral.agent");
    arg(a, "-chardev");
    arg(a, "socket,id=qmp,fd=%d", qmp_fd);
    arg(a, "-mon");
    arg(a, "chardev=qmp,mode=control");
    for (int i = 0; i < MVM_SLOTS; i++) {
        arg(a, "-drive");
        arg(a, "id=l%d,file=/proc/self/fd/%d,format=raw,if=none,readonly=on", i, slot_fds[i]);
        arg(a, "-device");
        arg(a, "virtio-blk-%s,drive=l%d", bus, i);
    }
    /* A full system's disk: the template's raw ext4, or a clone's qcow2
     * over it, its backing a node of its own (the path in the overlay's
     * header is never opened).  Both by fd set (QEMU runs as another uid),
     * read-only and read-write descriptors each. */
    if (pc) {
        for (int j = 0; j < 3; j++)
            if (disk_fds[j] >= 0) {
                arg(a, "-add-fd");
                arg(a, "fd=%d,set=%d", disk_fds[j], j < 2 ? DISK_FDSET : DISK_BACKING_FDSET);
            }
        arg(a, "-blockdev");
        arg(a, "driver=file,node-name=disk-file,filename=/dev/fdset/%d", DISK_FDSET);
        if (l->disk_backing_fd >= 0) {
            arg(a, "-blockdev");
            arg(a, "driver=file,node-name=base-file,filename=/dev/fdset/%d,read-only=on",
                DISK_BACKING_FDSET);
            arg(a, "-blockdev");
            arg(a, "driver=raw,node-name=base,file=base-file,read-only=on");
            arg(a, "-blockdev");
            arg(a, "driver=qcow2,node-name=disk,file=disk-file,backing=base");
        } else {
            arg(a, "-blockdev");
            arg(a, "driver=raw,node-name=disk,file=disk-file");
        }
        arg(a, "-device");
        arg(a, "virtio-blk-pci,drive=disk");
    }
    /* A volume's file is corrald's descriptor, which QEMU (another uid)
     * could not open again by its /proc path: it is an fd set's, of a
     * read-only descriptor and, for a drive it writes, a read-write one
     * (QEMU opens a drive read-only first), which QEMU dups for the drive.
     * No locks on a placeholder, which many drives and guests read; a
     * volume's are QEMU's own guard against a second writer. */
    for (int i = 0; l->volume_slots && i < MVM_VOLUME_SLOTS; i++) {
        /* a template's boot: its RAM shared, no state to restore */
        bool template = l->ram_fd >= 0 && l->incoming_fd < 0;
        bool placeholder = l->volume_fds[i] < 0 || template;
        for (int j = 0; j < 2; j++)
            if (volume_fds[i][j] >= 0) {
                arg(a, "-add-fd");
                arg(a, "fd=%d,set=%d", volume_fds[i][j], i + 1);
            }
        arg(a, "-drive");
        arg(a, "id=v%d,file=/dev/fdset/%d,format=raw,if=none,readonly=%s%s", i, i + 1,
            l->volume_ro[i] ? "on" : "off", placeholder ? ",file.locking=off" : "");
        arg(a, "-device");
        arg(a, "virtio-blk-%s,drive=v%d", bus, i);
    }
    if (tap_fd >= 0) {
        /* No vnet header (the same tap flags for a template's and its
         * clones'), no vhost: QEMU's own virtio-net over the tap. */
        arg(a, "-netdev");
        arg(a, "tap,id=n0,fd=%d,vhost=off", tap_fd);
        arg(a, "-device");
        /* no option ROM: nothing boots from the network */
        arg(a, "virtio-net-%s,netdev=n0,mac=%s%s", bus, MVM_MAC, pc ? ",romfile=" : "");
    }
    if (l->incoming_fd >= 0) {
        /* The state comes over QMP once x-ignore-shared is set (QEMU 7.2
         * takes migration capabilities from QMP only). */
        arg(a, "-incoming");
        arg(a, "defer");
    }
    if (a->n >= MAX_ARGS || a->off >= sizeof(a->text))
        return crl_err_set(err, CRL_E_INTERNAL, "the QEMU command line is too long");
    a->v[a->n] = NULL;
    return 0;
}

/* ---- the launch ---- */

/* Each volume slot's descriptors for its fd set, QEMU's to close: [0]
 * read-only, [1] read-write where the drive writes (a volume read-write,
 * a template's placeholder).  Opened afresh, not dup'd: QEMU's locks are
 * its open files', which must go with it. */
static int volume_fds_open(const struct mvm_state *st, const struct mvm_launch *l, int (*out)[2],
                           struct crl_err *err)
{
    for (int i = 0; i < MVM_VOLUME_SLOTS; i++) {
        int src = l->volume_fds[i] >= 0 ? l->volume_fds[i] : st->placeholder_fd;
        if ((out[i][0] = crl_reopen(src, O_RDONLY)) < 0 ||
            (!l->volume_ro[i] && (out[i][1] = crl_reopen(src, O_RDWR)) < 0))
            return crl_err_sys(err, errno, "volume slot %d: open /proc/self/fd/%d", i, src);
    }
    return 0;
}

/* A full system's disk's descriptors, QEMU's to close: its file read-only
 * and read-write, its backing read-only (-1 where there is none), opened
 * afresh as a volume's are. */
static int disk_fds_open(const struct mvm_launch *l, int out[3], struct crl_err *err)
{
    const int src[3] = {l->disk_fd, l->disk_fd, l->disk_backing_fd};
    const int flags[3] = {O_RDONLY, O_RDWR, O_RDONLY};
    for (int j = 0; j < 3; j++)
        if (src[j] >= 0 && (out[j] = crl_reopen(src[j], flags[j])) < 0)
            return crl_err_sys(err, errno, "the guest's disk: open /proc/self/fd/%d", src[j]);
    return 0;
}

struct child {
    const struct mvm_launch *l;
    char *const *argv;
    const int *keep; /* descriptors QEMU inherits */
    int n_keep;
    int console_w;
    int cg_fds[CRL_CGROUP_MAX_FDS];
    int n_cg;
    gid_t kvm_gid;
    pid_t parent;
    int make_tap; /* >= 0: open a tap in the new namespace onto this descriptor */
};

/* In the forked child, before exec: only system calls (corrald has
 * threads).  Any failure exits 127 with a line on the console pipe. */
static void child_fail(int fd, const char *what)
{
    char line[160];
    int e = errno;
    size_t n = strlen(what);
    if (n > 100)
        n = 100;
    memcpy(line, "corrald: launching QEMU: ", 25);
    memcpy(line + 25, what, n);
    const char *es = strerrordesc_np(e);
    size_t m = es ? strlen(es) : 0;
    if (m > 30)
        m = 30;
    line[25 + n] = ':';
    line[26 + n] = ' ';
    memcpy(line + 27 + n, es ? es : "", m);
    line[27 + n + m] = '\n';
    ssize_t w = write(fd, line, 28 + n + m);
    (void)w;
    _exit(127);
}

static void child_run(const struct child *c)
{
    int con = c->console_w;
    sigset_t all;
    sigemptyset(&all);
    if (sigprocmask(SIG_SETMASK, &all, NULL) < 0)
        child_fail(con, "sigprocmask");
    for (int s = 1; s < NSIG; s++)
        signal(s, SIG_DFL);
    for (int i = 0; i < c->n_cg; i++) {
        int fd = openat(c->cg_fds[i], "cgroup.procs", O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1)
            child_fail(con, "joining the sandbox's cgroup");
        close(fd);
    }
    if (c->l->netns_fd >= 0 ? setns(c->l->netns_fd, CLONE_NEWNET) < 0 : unshare(CLONE_NEWNET) < 0)
        child_fail(con, "the network namespace");
    if (c->make_tap >= 0) {
        int t = crl_vnet_tap_open("tap0");
        if (t < 0 || dup2(t, c->make_tap) < 0)
            child_fail(con, "a tap in the template's namespace");
        close(t);
    }
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) < 0)
        child_fail(con, "unshare mount, IPC and UTS namespaces");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        child_fail(con, "making the mounts private");
    if (sethostname("qemu", 4) < 0)
        child_fail(con, "sethostname");
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(con, 1) < 0 || dup2(con, 2) < 0)
        child_fail(con, "stdio");
    for (int i = 0; i < c->n_keep; i++)
        if (fcntl(c->keep[i], F_SETFD, 0) < 0)
            child_fail(con, "passing a descriptor");
    gid_t groups[1] = {c->kvm_gid};
    if (setgroups(c->kvm_gid ? 1 : 0, groups) < 0 ||
        setresgid(c->l->gid, c->l->gid, c->l->gid) < 0 ||
        setresuid(c->l->uid, c->l->uid, c->l->uid) < 0)
        child_fail(con, "dropping to the sandbox's uid");
    /* After the change of ids, which clears it: QEMU dies with corrald. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != c->parent)
        child_fail(con, "corrald went away");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        child_fail(con, "no_new_privs");
    char *envp[] = {"PATH=/usr/bin:/bin", NULL};
    execve(c->argv[0], c->argv, envp);
    child_fail(con, c->argv[0]);
}

/* ---- the guest's channel ---- */

static void vm_fail(struct mvm_vm *vm, const char *reason, const struct crl_err *err)
{
    mvm_vm_kill(vm, reason, "%s", err->msg);
}

static void flush_out(struct mvm_vm *vm)
{
    while (vm->outq.len) {
        ssize_t n = write(vm->agent_fd, vm->outq.data, vm->outq.len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            mvm_vm_kill(vm, "agent_lost", "writing to the agent's channel: %s",
                        n < 0 ? strerror(errno) : "closed");
            return;
        }
        crl_buf_consume(&vm->outq, (size_t)n);
    }
    if (vm->agent_fd >= 0 && vm->w_agent.active)
        crl_watch_modify(vm->st->host->loop, &vm->w_agent, EPOLLIN | (vm->outq.len ? EPOLLOUT : 0));
}

int mvm_vm_send(struct mvm_vm *vm, uint16_t type, uint32_t stream, const void *payload,
                uint32_t len)
{
    if (vm->dying || vm->agent_fd < 0)
        return -1;
    struct crl_err err = CRL_ERR_INIT;
    size_t cap = CRL_AGENT_HEADER_SIZE + (size_t)len;
    char *tmp = malloc(cap);
    long n = tmp ? crl_agent_encode(CRL_AGENT_SIDE_HOST, (uint8_t *)tmp, cap, type, stream, payload,
                                    len, &err)
                 : crl_err_sys(&err, ENOMEM, "a frame to the guest");
    if (n < 0 || crl_buf_append(&vm->outq, tmp, (size_t)n) < 0) {
        free(tmp);
        if (n >= 0)
            crl_err_sys(&err, ENOMEM, "the agent's queue");
        crl_error(vm->name, "a frame to the guest: %s", err.msg);
        mvm_vm_kill(vm, "internal", "%s", err.msg);
        return -1;
    }
    free(tmp);
    flush_out(vm);
    return 0;
}

int mvm_vm_send_json(struct mvm_vm *vm, uint16_t type, uint32_t stream, char *json, size_t len)
{
    int r = mvm_vm_send(vm, type, stream, json, (uint32_t)len);
    free(json);
    return r;
}

int mvm_vm_configure(struct mvm_vm *vm, struct crl_agent_config *c, struct crl_err *err)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->realtime_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    c->seed_len = 32;
    if (getrandom(c->seed, c->seed_len, 0) != (ssize_t)c->seed_len)
        return crl_err_sys(err, errno, "getrandom for the guest's seed");
    char *json;
    size_t len;
    int r = crl_agent_build_config(c, &json, &len, err);
    explicit_bzero(c->seed, sizeof(c->seed));
    if (r < 0)
        return -1;
    crl_agent_host_config_sent(&vm->sess);
    return mvm_vm_send_json(vm, CRL_AGENT_CONFIG, 0, json, len) < 0
               ? crl_err_set(err, CRL_E_INTERNAL, "the guest is gone")
               : 0;
}

static void handle(struct mvm_vm *vm, const struct crl_agent_frame *f)
{
    switch (f->type) {
    case CRL_AGENT_HELLO: vm->ops->hello(vm); return;
    case CRL_AGENT_READY: vm->ops->ready(vm); return;
    case CRL_AGENT_PING: {
        if (vm->outq.len > OUTQ_MAX) {
            mvm_vm_kill(vm, "agent_flood",
                        "the guest sends PINGs and reads no PONG (%zu bytes queued for it)",
                        vm->outq.len);
            return;
        }
        uint8_t pong[CRL_AGENT_PING_FRAME_SIZE];
        crl_agent_encode_ping(pong, CRL_AGENT_PONG, crl_agent_frame_u64(f));
        if (crl_buf_append(&vm->outq, pong, sizeof(pong)) == 0)
            flush_out(vm);
        return;
    }
    case CRL_AGENT_PONG: return;
    case CRL_AGENT_BYE: mvm_vm_kill(vm, "guest_exited", "the guest's agent said goodbye"); return;
    case CRL_AGENT_ERROR:
        if (f->stream == 0) {
            struct crl_agent_error e;
            struct crl_err err = CRL_ERR_INIT;
            if (crl_agent_parse_error(f->payload, f->len, &e, &err) < 0)
                vm_fail(vm, "agent_protocol", &err);
            else
                mvm_vm_kill(vm, "agent_error", "the guest's agent failed: %s", e.message);
            return;
        }
        break;
    }
    vm->ops->frame(vm, f);
}

static void agent_io(struct crl_watch *w, uint32_t ev)
{
    struct mvm_vm *vm = w->data;
    if (ev & EPOLLOUT)
        flush_out(vm);
    if (vm->dying || !(ev & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        return;
    static uint8_t buf[READ_CHUNK];
    ssize_t n = read(vm->agent_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        /* QEMU closed the channel: it is ending; its reaping says why. */
        crl_watch_stop(vm->st->host->loop, &vm->w_agent);
        return;
    }
    struct crl_err err = CRL_ERR_INIT;
    size_t off = 0;
    while (off < (size_t)n && !vm->dying) {
        size_t took = crl_agent_host_feed(&vm->sess, buf + off, (size_t)n - off);
        off += took;
        struct crl_agent_frame f;
        int r = 0;
        while (!vm->dying && (r = crl_agent_host_next(&vm->sess, &f, &err)) == 1)
            handle(vm, &f);
        if (!vm->dying && r < 0) {
            vm_fail(vm, "agent_protocol", &err);
            return;
        }
        if (took == 0 && r == 0)
            break; /* cannot happen: a drained decoder takes bytes */
    }
}

/* ---- the console ---- */

static void console_io(struct crl_watch *w, uint32_t ev)
{
    struct mvm_vm *vm = w->data;
    char buf[4096];
    ssize_t n = read(vm->console_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        crl_watch_stop(vm->st->host->loop, w);
        return;
    }
    /* Keep the newest bytes only: a guest may print without end. */
    size_t cap = sizeof(vm->console) - 1, add = (size_t)n;
    const char *src = buf;
    if (add > cap) {
        src += add - cap;
        add = cap;
    }
    if (vm->console_len + add > cap) {
        size_t drop = vm->console_len + add - cap;
        memmove(vm->console, vm->console + drop, vm->console_len - drop);
        vm->console_len -= drop;
    }
    memcpy(vm->console + vm->console_len, src, add);
    vm->console_len += add;
    vm->console[vm->console_len] = 0;
}

/* The last line or so of the console, printable, for an error message. */
static void console_tail(struct mvm_vm *vm, char *out, size_t cap)
{
    size_t len = vm->console_len;
    while (len && (vm->console[len - 1] == '\n' || vm->console[len - 1] == '\r'))
        len--;
    size_t start = len > 200 ? len - 200 : 0;
    size_t o = 0;
    for (size_t i = start; i < len && o + 1 < cap; i++) {
        unsigned char ch = (unsigned char)vm->console[i];
        out[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : ' ';
    }
    out[o] = 0;
}

/* ---- the end ---- */

static void reaped(struct crl_watch *w, uint32_t ev)
{
    struct mvm_vm *vm = w->data;
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (waitid((idtype_t)P_PIDFD, (id_t)vm->pidfd, &si, WEXITED | WNOHANG) < 0 || si.si_pid == 0)
        return;
    struct crl_loop *loop = vm->st->host->loop;
    crl_watch_stop(loop, &vm->w_pid);
    /* What the console still holds: QEMU's last words. */
    if (vm->console_fd >= 0)
        while (vm->w_console.active && vm->console_fd >= 0) {
            uint32_t before = (uint32_t)vm->console_len;
            console_io(&vm->w_console, EPOLLIN);
            if ((uint32_t)vm->console_len == before)
                break;
        }
    vm->reaped = true;
    if (!vm->dying) {
        char tail[256];
        console_tail(vm, tail, sizeof(tail));
        snprintf(vm->reason, sizeof(vm->reason), "vm_exited");
        if (si.si_code == CLD_EXITED)
            snprintf(vm->msg, sizeof(vm->msg), "QEMU exited with status %d: %s", si.si_status,
                     tail[0] ? tail : "(no output)");
        else
            snprintf(vm->msg, sizeof(vm->msg), "QEMU was killed by signal %d: %s", si.si_status,
                     tail[0] ? tail : "(no output)");
        vm->dying = true;
    }
    crl_timer_stop(loop, &vm->deadline);
    crl_timer_stop(loop, &vm->poll);
    crl_watch_stop(loop, &vm->w_agent);
    crl_watch_stop(loop, &vm->w_console);
    if (vm->qmp) {
        crl_qmp_close(vm->qmp);
        vm->qmp = NULL;
    }
    vm->ops->dead(vm, vm->reason, vm->msg);
}

void mvm_vm_kill(struct mvm_vm *vm, const char *reason, const char *fmt, ...)
{
    if (!vm->dying) {
        vm->dying = true;
        snprintf(vm->reason, sizeof(vm->reason), "%s", reason);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(vm->msg, sizeof(vm->msg), fmt, ap);
        va_end(ap);
        crl_debug(vm->name, "killing QEMU (pid %d): %s: %s", (int)vm->pid, vm->reason, vm->msg);
    }
    crl_timer_stop(vm->st->host->loop, &vm->deadline);
    crl_watch_stop(vm->st->host->loop, &vm->w_agent);
    if (!vm->reaped && vm->pidfd >= 0 &&
        syscall(SYS_pidfd_send_signal, vm->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
        crl_log_syscall(vm->name, errno, "pidfd_send_signal(QEMU %d, SIGKILL)", (int)vm->pid);
}

void mvm_vm_free(struct mvm_vm *vm)
{
    struct crl_loop *loop = vm->st->host->loop;
    crl_timer_stop(loop, &vm->deadline);
    crl_timer_stop(loop, &vm->poll);
    crl_watch_stop(loop, &vm->w_pid);
    crl_watch_stop(loop, &vm->w_agent);
    crl_watch_stop(loop, &vm->w_console);
    if (vm->qmp)
        crl_qmp_close(vm->qmp);
    vm->qmp = NULL;
    close_fd(&vm->pidfd);
    close_fd(&vm->agent_fd);
    close_fd(&vm->console_fd);
    close_fd(&vm->state_fd);
    if (vm->sess_open)
        crl_agent_host_free(&vm->sess);
    vm->sess_open = false;
    crl_buf_free(&vm->outq);
}

static void deadline_hit(struct crl_timer *t)
{
    struct mvm_vm *vm = t->data;
    char tail[256];
    console_tail(vm, tail, sizeof(tail));
    mvm_vm_kill(vm, "start_timeout", "the guest did not reach %s in time (%.1f s); console: %s",
                vm->awaited, crl_wall_s() - vm->t_start, tail[0] ? tail : "(nothing)");
}

void mvm_vm_deadline(struct mvm_vm *vm, unsigned ms, const char *what)
{
    snprintf(vm->awaited, sizeof(vm->awaited), "%s", what);
    crl_timer_start(vm->st->host->loop, &vm->deadline, (uint64_t)ms * 1000000ull, deadline_hit, vm);
}

void mvm_vm_deadline_stop(struct mvm_vm *vm)
{
    crl_timer_stop(vm->st->host->loop, &vm->deadline);
}

void mvm_vm_takeover(struct mvm_vm *vm, const struct crl_agent_hello *hello)
{
    crl_agent_host_takeover(&vm->sess, hello);
}

/* A restore: once QEMU has loaded the state, the guest must run. */
static void status_polled(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx);

static void status_poll(struct crl_timer *t)
{
    struct mvm_vm *vm = t->data;
    struct crl_err err = CRL_ERR_INIT;
    if (vm->qmp && crl_qmp_command(vm->qmp, "query-status", NULL, -1, status_polled, vm, &err) < 0)
        mvm_vm_kill(vm, "qmp_lost", "query-status: %s", err.msg);
}

/* A step of a restore failed (err): the guest is killed, never handed out. */
static bool restore_failed(struct mvm_vm *vm, const char *what, const struct crl_err *err)
{
    if (err && !vm->dying)
        mvm_vm_kill(vm, "restore_failed", "%s: %s", what, err->msg);
    return err != NULL;
}

static void cont_answered(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx)
{
    restore_failed(ctx, "cont after the restore", err);
}

static void status_polled(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx)
{
    struct mvm_vm *vm = ctx;
    if (err) {
        if (!vm->dying)
            mvm_vm_kill(vm, "qmp_lost", "%s", err->msg);
        return;
    }
    const char *status = json_string_value(json_object_get(ret, "status"));
    crl_debug(vm->name, "after the restore: %s (%.0f ms)", status ? status : "?",
              (crl_wall_s() - vm->t_start) * 1e3);
    if (status && strcmp(status, "inmigrate") == 0) {
        crl_timer_start(vm->st->host->loop, &vm->poll, 2 * 1000000ull, status_poll, vm);
        return;
    }
    struct crl_err e = CRL_ERR_INIT;
    if (status && strcmp(status, "running") != 0 &&
        crl_qmp_command(q, "cont", NULL, -1, cont_answered, vm, &e) < 0)
        mvm_vm_kill(vm, "qmp_lost", "cont: %s", e.msg);
}

static void incoming_answered(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx)
{
    restore_failed(ctx, "loading the template's state", err);
}

static void incoming_started(struct crl_qmp *q, json_t *ret, const struct crl_err *err, void *ctx)
{
    struct mvm_vm *vm = ctx;
    if (!restore_failed(vm, "loading the template's state", err))
        status_poll(&vm->poll);
}

/* A restore: x-ignore-shared when the RAM is the template's memfd, the
 * state's descriptor, the load, then the status until it is done. */
static void qmp_ready(struct crl_qmp *q, void *ctx)
{
    struct mvm_vm *vm = ctx;
    if (!vm->incoming)
        return;
    struct crl_err err = CRL_ERR_INIT;
    json_t *caps =
        json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared", "state", 1);
    if ((vm->ram_shared && crl_qmp_command(q, "migrate-set-capabilities", caps, -1,
                                           incoming_answered, vm, &err) < 0) ||
        crl_qmp_command(q, "getfd", json_pack("{s:s}", "fdname", "state"), vm->state_fd,
                        incoming_answered, vm, &err) < 0 ||
        crl_qmp_command(q, "migrate-incoming", json_pack("{s:s}", "uri", "fd:state"), -1,
                        incoming_started, vm, &err) < 0)
        mvm_vm_kill(vm, "qmp_lost", "starting the restore: %s", err.msg);
    if (!vm->ram_shared)
        json_decref(caps);
    close_fd(&vm->state_fd); /* QEMU has its own now */
}

static void qmp_event(struct crl_qmp *q, const char *name, json_t *data, void *ctx)
{
    struct mvm_vm *vm = ctx;
    if (strcmp(name, "GUEST_PANICKED") == 0 || strcmp(name, "SHUTDOWN") == 0) {
        char tail[256];
        console_io(&vm->w_console, EPOLLIN);
        console_tail(vm, tail, sizeof(tail));
        mvm_vm_kill(vm, strcmp(name, "SHUTDOWN") == 0 ? "guest_exited" : "guest_panicked",
                    "the guest %s; console: %s",
                    strcmp(name, "SHUTDOWN") == 0 ? "powered off" : "panicked",
                    tail[0] ? tail : "(nothing)");
    }
}

static void qmp_fail(struct crl_qmp *q, const struct crl_err *err, void *ctx)
{
    struct mvm_vm *vm = ctx;
    /* The client stays, failed (every command now fails at once), until
     * QEMU is reaped or the VM freed: they close it, outside its callbacks. */
    if (!vm->dying) {
        char tail[256];
        console_io(&vm->w_console, EPOLLIN); /* QEMU's last words, if it is ending */
        console_tail(vm, tail, sizeof(tail));
        mvm_vm_kill(vm, "qmp_lost", "%s; QEMU said: %s", err->msg, tail[0] ? tail : "nothing");
    }
}

static const struct crl_qmp_ops qmp_ops = {
    .ready = qmp_ready,
    .event = qmp_event,
    .fail = qmp_fail,
};

int mvm_vm_start(struct mvm_state *st, struct mvm_vm *vm, const char *name,
                 const struct mvm_launch *l, const struct mvm_vm_ops *ops, void *ctx,
                 struct crl_err *err)
{
    struct crl_loop *loop = st->host->loop;
    memset(vm, 0, sizeof(*vm));
    vm->st = st;
    vm->ops = ops;
    vm->ctx = ctx;
    vm->pidfd = vm->agent_fd = vm->qmp_fd = vm->console_fd = vm->state_fd = -1;
    snprintf(vm->name, sizeof(vm->name), "%s", name);
    crl_buf_init(&vm->outq, CRL_BUF_UNBOUNDED);
    int agent[2] = {-1, -1}, qmp[2] = {-1, -1}, con[2] = {-1, -1};
    int volume_fds[MVM_VOLUME_SLOTS][2];
    memset(volume_fds, -1, sizeof(volume_fds));
    int disk_fds[3] = {-1, -1, -1};
    cleanup_close int tap_hold = -1; /* a template's tap's number, until QEMU has it */
    cleanup_close int kernel_fd = open(st->kernel, O_RDONLY | O_CLOEXEC);
    cleanup_close int initrd_fd = open(st->initrd, O_RDONLY | O_CLOEXEC);
    if (kernel_fd < 0 || initrd_fd < 0)
        return crl_err_sys(err, errno, "the guest's %s %s", kernel_fd < 0 ? "kernel" : "initramfs",
                           kernel_fd < 0 ? st->kernel : st->initrd);
    if (crl_agent_host_init(&vm->sess, err) < 0)
        return -1;
    vm->sess_open = true;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, agent) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qmp) < 0 || pipe2(con, O_CLOEXEC) < 0) {
        crl_err_sys(err, errno, "QEMU's channels");
        goto fail;
    }
    int slot_fds[MVM_SLOTS];
    int keep[4 + MVM_SLOTS + 2 * MVM_VOLUME_SLOTS + 3 + 3];
    int n_keep = 0;
    keep[n_keep++] = kernel_fd;
    keep[n_keep++] = initrd_fd;
    keep[n_keep++] = agent[1];
    keep[n_keep++] = qmp[1];
    for (int i = 0; i < MVM_SLOTS; i++) {
        slot_fds[i] = l->layer_fds[i] >= 0 ? l->layer_fds[i] : st->placeholder_fd;
        keep[n_keep++] = slot_fds[i];
    }
    if (l->volume_slots && volume_fds_open(st, l, volume_fds, err) < 0)
        goto fail;
    if (st->machine == MVM_PC && disk_fds_open(l, disk_fds, err) < 0)
        goto fail;
    for (int j = 0; j < 3; j++)
        if (disk_fds[j] >= 0)
            keep[n_keep++] = disk_fds[j];
    for (int i = 0; l->volume_slots && i < MVM_VOLUME_SLOTS; i++)
        for (int j = 0; j < 2; j++)
            if (volume_fds[i][j] >= 0)
                keep[n_keep++] = volume_fds[i][j];
    if (l->ram_fd >= 0)
        keep[n_keep++] = l->ram_fd;
    /* A template's tap is made by the child, in its namespace, onto a
     * descriptor number held here meanwhile. */
    tap_hold = l->tap_fd == MVM_TAP_MAKE ? open("/dev/null", O_RDWR | O_CLOEXEC) : -1;
    int tap_fd = l->tap_fd == MVM_TAP_MAKE ? tap_hold : l->tap_fd;
    if (l->tap_fd == MVM_TAP_MAKE && tap_hold < 0) {
        crl_err_sys(err, errno, "open /dev/null");
        goto fail;
    }
    if (tap_fd >= 0)
        keep[n_keep++] = tap_fd;
    static struct argv_buf a; /* the loop's thread only */
    memset(&a, 0, sizeof(a));
    if (build_argv(st, l, kernel_fd, initrd_fd, agent[1], qmp[1], slot_fds, volume_fds, disk_fds,
                   tap_fd, &a, err) < 0)
        goto fail;
    struct child c = {
        .l = l,
        .argv = a.v,
        .keep = keep,
        .n_keep = n_keep,
        .console_w = con[1],
        .kvm_gid = strcmp(st->accel, "kvm") == 0 ? st->kvm_gid : 0,
        .parent = getpid(),
        .make_tap = l->tap_fd == MVM_TAP_MAKE ? tap_hold : -1,
    };
    if (l->cg && (c.n_cg = crl_cgroup_join_dirs(l->cg, c.cg_fds, err)) < 0)
        goto fail;
    vm->t_start = crl_wall_s();
    pid_t pid = fork();
    if (pid == 0)
        child_run(&c);
    int fork_errno = errno;
    close_fds(c.cg_fds, c.n_cg); /* the child has its copies */
    close_fds(&volume_fds[0][0], 2 * MVM_VOLUME_SLOTS);
    memset(volume_fds, -1, sizeof(volume_fds));
    close_fds(disk_fds, 3);
    memset(disk_fds, -1, sizeof(disk_fds));
    if (pid < 0) {
        crl_err_sys(err, fork_errno, "fork for QEMU");
        goto fail;
    }
    vm->pid = pid;
    vm->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (vm->pidfd < 0) {
        crl_err_sys(err, errno, "pidfd_open(QEMU %d)", (int)pid);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        goto fail;
    }
    close(agent[1]);
    close(qmp[1]);
    close(con[1]);
    vm->agent_fd = agent[0];
    vm->console_fd = con[0];
    crl_set_nonblock(vm->agent_fd, 1);
    crl_set_nonblock(vm->console_fd, 1);
    crl_watch_start(loop, &vm->w_pid, vm->pidfd, EPOLLIN, reaped, vm);
    crl_watch_start(loop, &vm->w_agent, vm->agent_fd, EPOLLIN, agent_io, vm);
    crl_watch_start(loop, &vm->w_console, vm->console_fd, EPOLLIN, console_io, vm);
    vm->deadline.data = vm;
    vm->poll.data = vm;
    vm->incoming = l->incoming_fd >= 0;
    vm->ram_shared = l->ram_fd >= 0;
    if (vm->incoming && (vm->state_fd = fcntl(l->incoming_fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        mvm_vm_kill(vm, "internal", "dup of the template's state: %s", strerror(errno));
        return 0; /* dead() follows */
    }
    if (crl_qmp_open(loop, qmp[0], &qmp_ops, vm, &vm->qmp, err) < 0) {
        close(qmp[0]);
        mvm_vm_kill(vm, "internal", "%s", err->msg);
        return 0; /* dead() follows */
    }
    return 0;
fail:
    close_fds(agent, 2);
    close_fds(qmp, 2);
    close_fds(con, 2);
    close_fds(&volume_fds[0][0], 2 * MVM_VOLUME_SLOTS);
    close_fds(disk_fds, 3);
    crl_agent_host_free(&vm->sess);
    vm->sess_open = false;
    crl_buf_free(&vm->outq);
    return -1;
}
