#include "backend.h"

#include <jansson.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/err.h"
#include "../util/log.h"
#include "../util/worker.h"
#include "host.h"
#include "netlog.h"
#include "netrules.h"
#include "resolver.h"
#include "sandbox.h"

int crl_backend_pty_resize(struct crl_sandbox *sb, struct crl_proc *p, unsigned rows, unsigned cols,
                           struct crl_err *err)
{
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    int fd = p->out_fd >= 0 ? p->out_fd : p->in_fd;
    if (!p->tty || fd < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "process %d of %s has no terminal", (int)p->ns_pid,
                           sb->id);
    if (ioctl(fd, TIOCSWINSZ, &ws) < 0)
        return crl_err_sys(err, errno, "resizing the terminal of process %d", (int)p->ns_pid);
    return 0;
}

int crl_backend_host_pty(unsigned rows, unsigned cols, int *master, int *slave, struct crl_err *err)
{
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    int unlock = 0;
    int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return crl_err_sys(err, errno, "opening a terminal (/dev/ptmx)");
    int s = ioctl(m, TIOCSPTLCK, &unlock) < 0
                ? -1
                : ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (s < 0 || ioctl(s, TIOCSWINSZ, &ws) < 0) {
        int e = errno;
        if (s >= 0)
            close(s);
        close(m);
        return crl_err_sys(err, e, "setting up a terminal");
    }
    *master = m;
    *slave = s;
    return 0;
}

int crl_backend_signal_host(struct crl_sandbox *sb, struct crl_proc *p, struct crl_cgroup *cg,
                            const char *leaf, int sig, enum crl_signal_scope scope,
                            struct crl_err *err)
{
    if (!p->started || p->exited || p->pidfd < 0)
        return crl_err_set(err, CRL_E_CONFLICT, "process %d of %s has ended", (int)p->ns_pid,
                           sb->id);
    if (scope == CRL_SIGNAL_TREE) {
        if (!cg)
            return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
        return crl_cgroup_signal_leaf(cg, leaf, sig, err) < 0 ? -1 : 0;
    }
    /* The group is the one it leads (a session leader cannot leave it),
     * while it lives: the pidfd says it does, so its pid is its own. */
    int r =
        (int)syscall(SYS_pidfd_send_signal, p->pidfd, scope == CRL_SIGNAL_GROUP ? 0 : sig, NULL, 0);
    if (r == 0 && scope == CRL_SIGNAL_GROUP)
        r = kill(-p->pid, sig);
    if (r < 0 && errno == ESRCH)
        return crl_err_set(err, CRL_E_CONFLICT, "process %d of %s has ended", (int)p->ns_pid,
                           sb->id);
    return r < 0 ? crl_err_sys(err, errno, "signal %d to process %d", sig, (int)p->ns_pid) : 0;
}

int crl_restore_error(int code, const char *msg, bool live, struct crl_err *err)
{
    switch (code) {
    case CRL_STREAM_OK: return 0;
    case CRL_STREAM_NOSPACE: return crl_err_set(err, CRL_E_NO_SPACE, "%s (disk_mb)", msg);
    case CRL_STREAM_BAD_INPUT: return crl_err_set(err, CRL_E_INVALID, "%s", msg);
    default:
        if (code == CRL_STREAM_GONE || (code >= 128 && !live))
            return crl_err_set(err, CRL_E_CONFLICT, "restoring: the sandbox ended meanwhile");
        if (code >= 128)
            return crl_err_set(err, CRL_E_INTERNAL,
                               "restoring: the helper was killed by signal %d (out of memory_mb?)",
                               code - 128);
        return crl_err_set(err, CRL_E_INTERNAL, "%s",
                           msg[0] ? msg : "restoring: the helper failed");
    }
}

int crl_backend_pause_cgroup(struct crl_sandbox *sb, struct crl_cgroup *cg, bool pause,
                             struct crl_cgroup_reclaim *last, struct crl_err *err)
{
    if (!cg)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is not running", sb->id);
    return pause ? crl_cgroup_pause(cg, sb->id, last, err) : crl_cgroup_freeze(cg, false, err);
}

void crl_backend_cgroup_usage(struct crl_cgroup *cg, struct crl_usage *u)
{
    struct crl_cgroup_stats cs;
    crl_cgroup_stats(cg, &cs);
    u->cpu_s = (double)cs.cpu_ns / 1e9;
    u->memory_bytes = cs.memory_bytes;
    u->memory_peak_bytes = cs.memory_peak_bytes;
    u->pids = cs.pids;
    u->oom_kills = cs.oom_kills;
}

void crl_backend_pause_info(json_t *o, const struct crl_cgroup_reclaim *last)
{
    if (o && last->how)
        json_object_set_new(o, "last_pause",
                            json_pack("{s:s, s:I, s:I}", "memory_release", last->how,
                                      "memory_before_bytes", (json_int_t)last->before_bytes,
                                      "memory_after_bytes", (json_int_t)last->after_bytes));
}

/* ---- the network namespace ---- */

/* A link for a policy that reaches out, or for services to reach. */
static bool linked(const struct crl_sandbox *sb)
{
    return crl_net_policy_mode(sb->spec.network) != CRL_NET_NONE || sb->spec.services;
}

/* The policy's rules for the sandbox's chain, into *rules (freed by the
 * caller); the network is made if it is not yet (the rules log to its group). */
static int render(const struct crl_sandbox *sb, const struct crl_net_policy *p,
                  struct crl_buf *rules, struct crl_err *err)
{
    crl_buf_init(rules, CRL_BUF_UNBOUNDED);
    struct crl_vnet *v = crl_host_vnet(sb->host, err);
    if (!v)
        return -1;
    if (crl_net_policy_nft(p, sb->slot, crl_vnet_log_group(v), rules) < 0)
        return crl_err_sys(err, ENOMEM, "network rules");
    return 0;
}

/* A link being made for a sandbox, on the network's worker. */
struct net_job {
    struct crl_worker_job job;
    struct crl_sandbox *sb; /* a reference is held */
    struct crl_vnet *v;
    unsigned slot;
    int fd; /* a namespace of the pool to link; -1: the slot's parked one */
    bool parked;
    char *rules;
    crl_net_claimed_fn done;
};

static int net_work(struct crl_worker_job *j, struct crl_err *err)
{
    struct net_job *n = (struct net_job *)j;
    if (n->parked)
        return (n->fd = crl_vnet_unpark(n->v, n->slot, n->rules, err)) < 0 ? -1 : 0;
    return crl_vnet_attach(n->v, n->slot, n->fd, n->rules, err);
}

static void net_done(struct crl_worker_job *j, const struct crl_err *err)
{
    struct net_job *n = (struct net_job *)j;
    struct crl_sandbox *sb = n->sb;
    struct crl_host *h = sb->host;
    int fd = n->fd;
    if (err && !n->parked && fd >= 0)
        crl_netns_put(h->netns, fd); /* attach undid its link: the namespace is as it was */
    if (!err) {
        sb->net_linked = true;
        crl_resolver_attach(h->resolver, sb->slot, sb);
    }
    crl_net_claimed_fn done = n->done;
    free(n->rules);
    free(n);
    done(sb, err ? -1 : fd, err);
    crl_sandbox_unref(sb);
}

int crl_backend_net_claim(struct crl_sandbox *sb, crl_net_claimed_fn done, struct crl_err *err)
{
    struct crl_host *h = sb->host;
    if (!linked(sb))
        return crl_netns_get(h->netns, err);
    if (!done)
        return crl_err_set(err, CRL_E_UNSUPPORTED, "a %s sandbox has no network link",
                           sb->ops->name);
    struct crl_vnet *v = crl_host_vnet(h, err);
    if (!v)
        return -1;
    struct net_job *n = calloc(1, sizeof(*n));
    struct crl_buf rules;
    if (!n)
        return crl_err_sys(err, ENOMEM, "network");
    if (render(sb, sb->spec.network, &rules, err) < 0) {
        free(n);
        return -1;
    }
    n->parked = crl_vnet_parked(v, sb->slot);
    n->fd = n->parked ? -1 : crl_netns_get(h->netns, err);
    if (!n->parked && n->fd < 0) {
        crl_buf_free(&rules);
        free(n);
        return -1;
    }
    n->rules = rules.data; /* the buffer's, now the job's */
    n->sb = sb;
    n->v = v;
    n->slot = sb->slot;
    n->done = done;
    n->job.work = net_work;
    n->job.done = net_done;
    crl_sandbox_ref(sb);
    crl_worker_submit(h->net_worker, &n->job);
    return CRL_NET_PENDING;
}

int crl_backend_net_relink(struct crl_sandbox *sb, struct crl_err *err)
{
    struct crl_host *h = sb->host;
    int fd = sb->ops->netns ? sb->ops->netns(sb) : -1;
    struct crl_buf rules;
    if (fd < 0)
        return crl_err_set(err, CRL_E_INTERNAL, "sandbox %s has no network namespace", sb->id);
    if (render(sb, sb->spec.network, &rules, err) < 0)
        return -1;
    int r = crl_vnet_attach(h->vnet, sb->slot, fd, rules.data, err);
    crl_buf_free(&rules);
    if (r < 0)
        return -1;
    sb->net_linked = true;
    crl_resolver_attach(h->resolver, sb->slot, sb);
    return 0;
}

int crl_backend_net_set(struct crl_sandbox *sb, struct crl_net_policy *p, struct crl_err *err)
{
    struct crl_host *h = sb->host;
    if (!sb->ops->netns)
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "a %s sandbox has no network to change in this version", sb->ops->name);
    if (sb->state != CRL_SB_READY && sb->state != CRL_SB_PAUSED)
        return crl_err_set(err, CRL_E_CONFLICT, "sandbox %s is %s", sb->id,
                           crl_sb_state_name(sb->state));
    int fd = sb->ops->netns(sb);
    bool none = crl_net_policy_mode(p) == CRL_NET_NONE;
    struct crl_buf rules;
    int r = 0;
    if (none && !sb->net_linked) {
        r = 0; /* nothing to change: it has loopback only */
        crl_buf_init(&rules, CRL_BUF_UNBOUNDED);
    } else if (render(sb, p, &rules, err) < 0) {
        r = -1;
    } else if (sb->net_linked) {
        r = crl_vnet_set_rules(h->vnet, sb->slot, rules.data, err);
    } else if (fd < 0 || !crl_host_vnet(h, err)) {
        r = fd < 0 ? crl_err_set(err, CRL_E_CONFLICT,
                                 "sandbox %s has no network to link (a %s sandbox created with "
                                 "network none has no device for one)",
                                 sb->id, sb->ops->name)
                   : -1;
    } else if ((r = crl_vnet_attach(h->vnet, sb->slot, fd, rules.data, err)) == 0) {
        sb->net_linked = true;
        crl_resolver_attach(h->resolver, sb->slot, sb);
    }
    crl_buf_free(&rules);
    if (r < 0)
        return -1;
    if (sb->spec.network) {
        crl_net_policy_free(sb->spec.network);
        free(sb->spec.network);
    }
    sb->spec.network = none ? (crl_net_policy_free(p), free(p), NULL) : p;
    if (sb->owner->changed)
        sb->owner->changed(sb);
    crl_info(sb->id, "network: policy now mode %s",
             crl_net_mode_name(crl_net_policy_mode(sb->spec.network)));
    return 0;
}

int crl_backend_net_nameserver(const struct crl_sandbox *sb, char *buf, size_t cap)
{
    const struct crl_host *h = sb->host;
    if (!sb->net_linked || !h->vnet) {
        snprintf(buf, cap, "%s", "");
        return 0;
    }
    struct in_addr a = {.s_addr = htonl(crl_vnet_gateway(h->vnet, sb->slot))};
    return inet_ntop(AF_INET, &a, buf, (socklen_t)cap) ? 0 : -1;
}

int crl_backend_net_address(const struct crl_sandbox *sb, char *addr, char *gw, size_t cap)
{
    const struct crl_host *h = sb->host;
    if (!sb->net_linked || !h->vnet)
        return -1;
    struct in_addr a = {.s_addr = htonl(crl_vnet_address(h->vnet, sb->slot))};
    struct in_addr g = {.s_addr = htonl(crl_vnet_gateway(h->vnet, sb->slot))};
    return inet_ntop(AF_INET, &a, addr, (socklen_t)cap) &&
                   inet_ntop(AF_INET, &g, gw, (socklen_t)cap)
               ? 0
               : -1;
}

json_t *crl_backend_net_json(const struct crl_sandbox *sb)
{
    const struct crl_host *h = sb->host;
    char addr[INET_ADDRSTRLEN], gw[INET_ADDRSTRLEN];
    if (crl_backend_net_address(sb, addr, gw, sizeof(addr)) < 0)
        return NULL;
    json_t *rules = crl_vnet_rule_counters(h->vnet, sb->slot);
    json_t *o = json_pack("{s:s, s:s, s:o, s:o}", "address", addr, "gateway", gw, "dns",
                          crl_resolver_slot_json(h->resolver, sb->slot), "rules",
                          rules ? rules : json_array());
    json_t *denied = crl_netlog_json(h->netlog, sb);
    if (o && denied)
        json_object_update(o, denied);
    json_decref(denied);
    return o;
}

int crl_backend_net_tap(struct crl_sandbox *sb, int netns_fd, struct crl_err *err)
{
    struct crl_host *h = sb->host;
    if (!sb->net_linked || !h->vnet)
        return crl_err_set(err, CRL_E_INTERNAL, "sandbox %s has no network link", sb->id);
    int tap = crl_vnet_vm_link(h->vnet, sb->slot, netns_fd, err);
    if (tap >= 0)
        sb->net_tap = true;
    return tap;
}

void crl_backend_net_release(struct crl_sandbox *sb, int netns_fd, bool quarantine)
{
    struct crl_host *h = sb->host;
    if (netns_fd < 0)
        return;
    if (sb->net_linked && h->resolver)
        crl_resolver_detach(h->resolver, sb->slot);
    if (sb->net_tap && !quarantine && h->vnet) {
        struct crl_err err = CRL_ERR_INIT;
        if (crl_vnet_vm_unlink(h->vnet, sb->slot, netns_fd, &err) < 0) {
            crl_warn(sb->id, "network: %s: its namespace is not kept", err.msg);
            quarantine = true;
        }
    }
    sb->net_tap = false;
    if (!sb->net_linked || !h->vnet) {
        if (quarantine)
            close(netns_fd);
        else
            crl_netns_put(h->netns, netns_fd);
    } else if (quarantine) {
        crl_vnet_detach(h->vnet, sb->slot);
        close(netns_fd);
    } else {
        crl_vnet_park(h->vnet, sb->slot, netns_fd);
    }
    sb->net_linked = false;
}

void *crl_backend_state(struct crl_host *h, const struct crl_backend_ops *ops)
{
    for (size_t i = 0; h->backend_state && i < h->cfg.n_backends; i++)
        if (h->cfg.backends[i] == ops)
            return h->backend_state[i];
    return NULL;
}
