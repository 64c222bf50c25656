/* libFuzzer driver for lib/core/netpolicy: the bytes as a `network` object
 * (any JSON value), as one rule, and as a name to match.  Beyond "no crash,
 * no leak, no UB" it checks what the resolver and the counters will rely
 * on: a refusal is a 400 with a message and leaves nothing; an accepted
 * rule is in range, normalised (its text parses back to itself) and
 * matches what it names; an accepted policy survives to_json and parses
 * back the same, and each of its allow rules admits what it names unless
 * a deny rule refuses it.
 *
 *   tests/fuzz/run.sh builds it; corpus: tests/fuzz/corpus/netpolicy,
 *   dictionary: tests/fuzz/netpolicy.dict */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../../lib/core/netpolicy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz_netpolicy: %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                                  \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static void check_refusal(const struct crl_err *e)
{
    CHECK(e->code == CRL_E_INVALID || e->code == CRL_E_INTERNAL);
    CHECK(e->msg[0] != 0);
    CHECK(memchr(e->msg, 0, sizeof(e->msg)) != NULL);
}

static void check_rule(const struct crl_net_rule *r)
{
    CHECK(r->nports <= CRL_NET_MAX_PORTS);
    for (unsigned i = 0; i < r->nports; i++)
        CHECK(r->ports[i].lo >= 1 && r->ports[i].lo <= r->ports[i].hi);
    CHECK(memchr(r->text, 0, sizeof(r->text)) && r->text[0]);
    switch (r->kind) {
    case CRL_NET_RULE_NAME: CHECK(crl_net_name_matches(r, r->name)); break;
    case CRL_NET_RULE_WILDCARD: {
        CHECK(!crl_net_name_matches(r, r->name)); /* never the suffix itself */
        char sub[CRL_NET_NAME_MAX + 8];
        if (strlen(r->name) + 2 <= CRL_NET_NAME_MAX) {
            snprintf(sub, sizeof(sub), "x.%s", r->name);
            CHECK(crl_net_name_matches(r, sub));
        }
        break;
    }
    case CRL_NET_RULE_CIDR:
        CHECK(r->family == AF_INET || r->family == AF_INET6);
        CHECK(r->prefix <= (r->family == AF_INET ? 32 : 128));
        CHECK(crl_net_addr_matches(r, r->family, r->addr));
        CHECK(!crl_net_name_matches(r, "example"));
        break;
    default: CHECK(!"a rule of no kind");
    }
    for (const char *c = r->name; *c; c++)
        CHECK(!(*c >= 'A' && *c <= 'Z'));
    for (unsigned i = 0; i < r->nports; i++)
        CHECK(crl_net_port_matches(r, r->ports[i].lo) && crl_net_port_matches(r, r->ports[i].hi));
    /* normalised: the text parses back to itself */
    struct crl_net_rule back;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_net_rule_parse(r->text, "rule", &back, &e) < 0) {
        fprintf(stderr, "fuzz_netpolicy: '%s' refused: %s\n", r->text, e.msg);
        abort();
    }
    CHECK(strcmp(back.text, r->text) == 0 && back.kind == r->kind && back.nports == r->nports);
}

/* Each allow rule admits what it names, unless a deny rule refuses it. */
static void check_decisions(const struct crl_net_policy *p)
{
    for (size_t i = 0; i < p->nallow; i++) {
        const struct crl_net_rule *r = &p->allow[i], *by;
        bool allowed;
        if (r->kind == CRL_NET_RULE_CIDR) {
            unsigned port = r->nports ? r->ports[0].lo : 443;
            by = crl_net_policy_decide_addr(p, r->family, r->addr, port, &allowed);
        } else if (r->kind == CRL_NET_RULE_NAME) {
            by = crl_net_policy_decide_name(p, r->name, &allowed);
        } else {
            continue;
        }
        CHECK(by != NULL);
        if (allowed)
            CHECK(by >= p->allow && by < p->allow + p->nallow);
        else
            CHECK(by >= p->deny && by < p->deny + p->ndeny);
    }
    for (size_t i = 0; i < p->ndeny; i++) {
        const struct crl_net_rule *r = &p->deny[i];
        bool allowed = true;
        if (r->kind == CRL_NET_RULE_CIDR) {
            unsigned port = r->nports ? r->ports[0].hi : 1;
            crl_net_policy_decide_addr(p, r->family, r->addr, port, &allowed);
            CHECK(!allowed);
        } else if (r->kind == CRL_NET_RULE_NAME && r->nports == 0) {
            crl_net_policy_decide_name(p, r->name, &allowed);
            CHECK(!allowed);
        }
    }
}

static void fuzz_policy(const char *buf, size_t len)
{
    json_error_t je;
    json_t *j = json_loadb(buf, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j)
        return;
    struct crl_net_policy p;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_net_policy_from_json(j, &p, &e) < 0) {
        check_refusal(&e);
        CHECK(p.allow == NULL && p.deny == NULL && p.nallow == 0 && p.ndeny == 0);
        json_decref(j);
        return;
    }
    json_decref(j);
    CHECK(p.nallow <= CRL_NET_MAX_RULES && p.ndeny <= CRL_NET_MAX_RULES);
    CHECK(p.mode == CRL_NET_ALLOW || p.nallow == 0);
    CHECK(p.mode != CRL_NET_NONE || p.ndeny == 0);
    for (size_t i = 0; i < p.nallow; i++)
        check_rule(&p.allow[i]);
    for (size_t i = 0; i < p.ndeny; i++)
        check_rule(&p.deny[i]);
    check_decisions(&p);

    json_t *out = crl_net_policy_to_json(&p);
    CHECK(out != NULL);
    struct crl_net_policy back;
    e = (struct crl_err)CRL_ERR_INIT;
    if (crl_net_policy_from_json(out, &back, &e) < 0) {
        fprintf(stderr, "fuzz_netpolicy: round trip refused: %s\n", e.msg);
        abort();
    }
    json_t *again = crl_net_policy_to_json(&back);
    CHECK(again && json_equal(out, again));
    CHECK(back.mode == p.mode && back.nallow == p.nallow && back.ndeny == p.ndeny);
    json_decref(again);
    json_decref(out);
    crl_net_policy_free(&back);
    crl_net_policy_free(&p);
}

/* The bytes as one rule, and as a name and an address to match. */
static void fuzz_rule(const char *buf, size_t len)
{
    char text[512];
    if (len >= sizeof(text))
        return;
    memcpy(text, buf, len);
    text[len] = 0;
    struct crl_net_rule r;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_net_rule_parse(text, "rule", &r, &e) == 0)
        check_rule(&r);
    else
        check_refusal(&e);

    static const char *const rules[] = {"*.example", "deb.example", "10.0.0.0/8:1-1024",
                                        "2001:db8::/32"};
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        struct crl_net_rule k;
        if (crl_net_rule_parse(rules[i], "rule", &k, &e) < 0)
            abort();
        bool m = crl_net_name_matches(&k, text);
        CHECK(!m || k.kind != CRL_NET_RULE_CIDR);
        uint8_t a[16] = {0};
        memcpy(a, buf, len < 16 ? len : 16);
        crl_net_addr_matches(&k, AF_INET, a);
        crl_net_addr_matches(&k, AF_INET6, a);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A heap copy of exactly `size` bytes, so a read past the end is caught. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    fuzz_policy(buf, size);
    fuzz_rule(buf, size);
    free(buf);
    return 0;
}
