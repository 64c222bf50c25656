#include "backend.h"

#include <jansson.h>

#include <errno.h>
#include <unistd.h>

#include "../util/buf.h"
#include "../util/err.h"
#include "../util/log.h"
#include "host.h"
#include "netrules.h"
#include "sandbox.h"

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

void crl_backend_pause_info(json_t *o, const struct crl_cgroup_reclaim *last)
{
    if (o && last->how)
        json_object_set_new(o, "last_pause",
                            json_pack("{s:s, s:I, s:I}", "memory_release", last->how,
                                      "memory_before_bytes", (json_int_t)last->before_bytes,
                                      "memory_after_bytes", (json_int_t)last->after_bytes));
}

/* ---- the network namespace ---- */

static bool linked(const struct crl_sandbox *sb)
{
    return crl_net_policy_mode(sb->spec.network) != CRL_NET_NONE;
}

int crl_backend_net_claim(struct crl_sandbox *sb, struct crl_err *err)
{
    struct crl_host *h = sb->host;
    if (!linked(sb))
        return crl_netns_get(h->netns, err);
    if (crl_net_policy_has_names(sb->spec.network))
        return crl_err_set(err, CRL_E_UNSUPPORTED,
                           "network rules by name need corrald's resolver, which this version "
                           "does not have yet: give addresses (CIDRs) for now");
    struct crl_vnet *v = crl_host_vnet(h, err);
    if (!v)
        return -1;
    struct crl_buf rules;
    crl_buf_init(&rules, CRL_BUF_UNBOUNDED);
    int fd = -1;
    if (crl_net_policy_nft(sb->spec.network, &rules) < 0) {
        crl_err_sys(err, ENOMEM, "network rules");
    } else if (crl_vnet_parked(v, sb->slot)) {
        fd = crl_vnet_unpark(v, sb->slot, rules.data, err);
    } else if ((fd = crl_netns_get(h->netns, err)) >= 0 &&
               crl_vnet_attach(v, sb->slot, fd, rules.data, err) < 0) {
        crl_netns_put(h->netns, fd); /* attach undid its link: the namespace is as it was */
        fd = -1;
    }
    crl_buf_free(&rules);
    return fd;
}

void crl_backend_net_release(struct crl_sandbox *sb, int netns_fd, bool quarantine)
{
    struct crl_host *h = sb->host;
    if (netns_fd < 0)
        return;
    if (!linked(sb) || !h->vnet) {
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
}
