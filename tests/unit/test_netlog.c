/* lib/core/netlog: a log prefix's rule mapped back to the rule's text
 * under the sandbox's policy, and (as root, in a network namespace of the
 * test's own) a denial log without a network yet. */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/core/netlog.h"
#include "../../lib/core/netpolicy.h"
#include "../../lib/core/netrules.h"
#include "tap.h"

static bool policy(const char *json, struct crl_net_policy *p)
{
    json_t *j = json_loads(json, 0, NULL);
    struct crl_err e = CRL_ERR_INIT;
    int r = j ? crl_net_policy_from_json(j, p, &e) : -1;
    json_decref(j);
    if (r < 0)
        diag("policy %s: %s", json, e.msg);
    return r == 0;
}

static const char *text(const struct crl_net_policy *p, const char *what, const char *name,
                        unsigned port)
{
    static char buf[512];
    crl_netlog_rule_text(p, what, name, port, buf, sizeof(buf));
    return buf;
}

static void test_rule_text(void)
{
    struct crl_net_policy p;
    if (!policy("{\"mode\": \"full\", \"deny\": [\"203.0.113.0/24\", \"api.example:443\","
                " \"*.cdn.example:80,8000-8080\"]}",
                &p)) {
        ok(0, "the policy parses");
        return;
    }
    is_str(text(&p, "deny[0]", NULL, 0), "deny[0] 203.0.113.0/24", "deny[0]: its text");
    is_str(text(&p, "deny[3]", NULL, 0), "deny[3]", "an index past the list: as it came");
    is_str(text(&p, "deny[1", NULL, 0), "deny[1", "a malformed index: as it came");
    is_str(text(&p, "deny[-1]", NULL, 0), "deny[-1]", "a negative index: as it came");
    is_str(text(&p, CRL_NET_LOG_DENY_NAMES, "api.example", 443), "deny[1] api.example:443",
           "a name's port: the deny rule of that name and port");
    is_str(text(&p, CRL_NET_LOG_DENY_NAMES, "x.cdn.example", 8001),
           "deny[2] *.cdn.example:80,8000-8080", "a wildcard's port range");
    is_str(text(&p, CRL_NET_LOG_DENY_NAMES, "api.example", 80), CRL_NET_LOG_DENY_NAMES,
           "a port no rule of the name has: the set's rule");
    is_str(text(&p, CRL_NET_LOG_DENY_NAMES, NULL, 443), CRL_NET_LOG_DENY_NAMES,
           "no name known: the set's rule");
    is_str(text(&p, "not allowed", NULL, 0), "not allowed", "the chain's end: as it is");
    is_str(text(NULL, "deny[0]", NULL, 0), "deny[0]", "no policy: as it came");
    crl_net_policy_free(&p);
}

static void case_no_network(void)
{
    if (unshare(CLONE_NEWNET) < 0) {
        ok(0, "unshare(CLONE_NEWNET): %s", strerror(errno));
        return;
    }
    struct crl_loop *loop = crl_loop_new();
    struct crl_netlog *n = NULL;
    struct crl_err e = CRL_ERR_INIT;
    ok(crl_netlog_new(loop, 2000, &n, &e) == 0, "a denial log");
    is_int(crl_netlog_group(n), 2000, "on the group asked for");
    struct crl_sandbox sb;
    memset(&sb, 0, sizeof(sb));
    snprintf(sb.id, sizeof(sb.id), "sb-test");
    json_t *j = crl_netlog_json(n, &sb);
    char *s = json_dumps(j, JSON_SORT_KEYS);
    is_str(s, "{\"denied\": [], \"denied_total\": 0, \"denied_unlogged\": 0}",
           "a sandbox without denials: none, counted 0");
    free(s);
    json_decref(j);
    crl_netlog_free(n);
    crl_loop_free(loop);
}

int main(void)
{
    test_rule_text();
    if (geteuid() != 0)
        skip(2, "needs root: a network namespace and netlink");
    else
        tap_run("a denial log without a network", case_no_network, 30);
    return done_testing();
}
