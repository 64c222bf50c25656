/* lib/core/netpolicy: the network object's grammar, its errors (each names
 * the rule and what is wrong), the matchers and the allow/deny decisions,
 * the JSON round trip, and the spec's use of it (docs/api.md, "Network"). */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../../lib/core/netpolicy.h"
#include "../../lib/core/spec.h"
#include "tap.h"

/* ---- helpers ---- */

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j)
        bail_out(text);
    return j;
}

static int policy(const char *text, struct crl_net_policy *p, struct crl_err *e)
{
    json_t *j = load(text);
    int r = crl_net_policy_from_json(j, p, e);
    json_decref(j);
    return r;
}

static bool has(const char *msg, const char *sub)
{
    return strstr(msg, sub) != NULL;
}

/* The network object `json` is refused (400) with a message holding each of `subs`. */
static void net_bad(const char *json, const char *sub1, const char *sub2)
{
    struct crl_net_policy p;
    struct crl_err e = CRL_ERR_INIT;
    int r = policy(json, &p, &e);
    if (!ok(r < 0 && e.code == CRL_E_INVALID, "%.100s: refused as invalid_argument", json))
        diag("returned %d, code %s, message '%s'", r, crl_errc_name(e.code), e.msg);
    if (!ok(has(e.msg, sub1) && (!sub2 || has(e.msg, sub2)), "%.100s: the message says '%s'%s%s",
            json, sub1, sub2 ? " and " : "", sub2 ? sub2 : ""))
        diag("message: '%s'", e.msg);
    ok(p.allow == NULL && p.deny == NULL && p.nallow == 0 && p.ndeny == 0,
       "%.100s: a refusal leaves nothing to free", json);
    if (r == 0)
        crl_net_policy_free(&p);
}

/* The rule `text` is refused; the message names it as network.allow[0] 'text' and says `why`. */
static void rule_bad(const char *text, const char *why)
{
    char json[1024], name[400];
    json_t *a = json_pack("{s:s, s:[s]}", "mode", "allow", "allow", text);
    char *dump = json_dumps(a, JSON_COMPACT);
    snprintf(json, sizeof(json), "%s", dump);
    free(dump);
    json_decref(a);
    snprintf(name, sizeof(name), "network.allow[0] '%s'", text);
    net_bad(json, name, why);
}

/* The rule `text` is accepted, of `kind`, normalised to `norm`. */
static bool rule_good(const char *text, enum crl_net_rule_kind kind, const char *norm,
                      struct crl_net_rule *r)
{
    struct crl_err e = CRL_ERR_INIT;
    if (!ok(crl_net_rule_parse(text, "rule", r, &e) == 0, "rule '%s' is accepted", text)) {
        diag("refused: %s", e.msg);
        return false;
    }
    ok(r->kind == kind, "rule '%s' is of kind %d", text, kind);
    is_str(r->text, norm, "rule '%s' normalises to '%s'", text, norm);
    return true;
}

static struct crl_net_rule rule(const char *text)
{
    struct crl_net_rule r;
    struct crl_err e = CRL_ERR_INIT;
    if (crl_net_rule_parse(text, "rule", &r, &e) < 0)
        bail_out(e.msg);
    return r;
}

static bool addr_in(const struct crl_net_rule *r, const char *a)
{
    uint8_t buf[16];
    int family = strchr(a, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(family, a, buf) != 1)
        bail_out(a);
    return crl_net_addr_matches(r, family, buf);
}

/* decide_addr on "a" and port: is it allowed, and by which rule's text ("" if the mode decided)? */
static void decide_addr_is(const struct crl_net_policy *p, const char *a, unsigned port, bool want,
                           const char *by)
{
    uint8_t buf[16];
    int family = strchr(a, ':') ? AF_INET6 : AF_INET;
    if (inet_pton(family, a, buf) != 1)
        bail_out(a);
    bool allowed = !want;
    const struct crl_net_rule *r = crl_net_policy_decide_addr(p, family, buf, port, &allowed);
    ok(allowed == want, "%s port %u is %s", a, port, want ? "allowed" : "refused");
    is_str(r ? r->text : "", by, "%s port %u: decided by '%s'", a, port, by);
}

static void decide_name_is(const struct crl_net_policy *p, const char *name, bool want,
                           const char *by)
{
    bool allowed = !want;
    const struct crl_net_rule *r = crl_net_policy_decide_name(p, name, &allowed);
    ok(allowed == want, "name %s is %s", name, want ? "allowed" : "refused");
    is_str(r ? r->text : "", by, "name %s: decided by '%s'", name, by);
}

/* ---- the object ---- */

static void test_object_errors(void)
{
    net_bad("\"none\"", "network must be an object, not a string", NULL);
    net_bad("{\"mode\": 1}", "network.mode must be a string, not an integer", NULL);
    net_bad("{\"mode\": \"bridge\"}", "network.mode 'bridge' is unknown", NULL);
    net_bad("{\"mode\": \"\"}", "network.mode '' is unknown", NULL);
    net_bad("{\"mode\": \"none\", \"ports\": [80]}", "unknown field 'network.ports'", NULL);
    net_bad("{\"mode\": \"full\", \"allow\": []}", "network.allow is only for mode 'allow'",
            "'full'");
    net_bad("{\"allow\": [\"a.example\"]}", "network.allow is only for mode 'allow'", "'none'");
    net_bad("{\"mode\": \"none\", \"deny\": [\"a.example\"]}", "network.deny is for mode", NULL);
    net_bad("{\"mode\": \"allow\", \"allow\": \"a.example\"}",
            "network.allow must be an array of rules, not a string", NULL);
    net_bad("{\"mode\": \"full\", \"deny\": {}}", "network.deny must be an array", NULL);
    net_bad("{\"mode\": \"allow\", \"allow\": [\"a.example\", 80]}",
            "network.allow[1] must be a string", NULL);
    net_bad("{\"mode\": \"full\", \"deny\": [\"a.example\", \"b\\u0000.example\"]}",
            "network.deny[1] must not contain NUL bytes", NULL);
    net_bad("{\"mode\": \"full\", \"deny\": [\"ok.example\", \"a.*.example\"]}",
            "network.deny[1] 'a.*.example'", "whole first label");
}

static void test_too_many_rules(void)
{
    json_t *list = json_array();
    for (int i = 0; i < CRL_NET_MAX_RULES; i++) {
        char r[32];
        snprintf(r, sizeof(r), "h%d.example", i);
        json_array_append_new(list, json_string(r));
    }
    json_t *o = json_pack("{s:s, s:O}", "mode", "allow", "allow", list);
    struct crl_net_policy p;
    struct crl_err e = CRL_ERR_INIT;
    if (ok(crl_net_policy_from_json(o, &p, &e) == 0, "256 rules are accepted")) {
        ok(p.nallow == 256 && strcmp(p.allow[255].text, "h255.example") == 0, "all 256 kept");
        crl_net_policy_free(&p);
    }
    json_array_append_new(list, json_string("one.too.many"));
    json_object_set(o, "allow", list);
    ok(crl_net_policy_from_json(o, &p, &e) < 0 && e.code == CRL_E_INVALID, "257 are refused");
    ok(has(e.msg, "network.allow has 257 rules; at most 256"), "the message says so: %s", e.msg);
    json_object_del(o, "allow");
    json_object_set_new(o, "mode", json_string("full"));
    json_object_set(o, "deny", list);
    ok(crl_net_policy_from_json(o, &p, &e) < 0 && has(e.msg, "network.deny has 257 rules"),
       "257 deny rules are refused: %s", e.msg);
    json_decref(list);
    json_decref(o);
}

/* ---- rules ---- */

static void test_rule_errors(void)
{
    /* names */
    rule_bad("", "the rule is empty");
    rule_bad(".", "the name is empty");
    rule_bad(":80", "the host is empty");
    rule_bad("a..example", "empty label");
    rule_bad(".example", "empty label");
    rule_bad("a.example..", "empty label");
    rule_bad("-a.example", "starts or ends with '-'");
    rule_bad("a-.example", "starts or ends with '-'");
    rule_bad("a b.example", "only letters, digits");
    rule_bad("ex!ample.org", "only letters, digits");
    rule_bad("caf\xc3\xa9.example", "only letters, digits");
    rule_bad("a.123", "last label cannot be all digits");
    rule_bad("1.2.3", "not a valid IPv4 address");
    rule_bad("1.2.3.4.", "not a valid IPv4 address");
    char label[80], name[300];
    memset(label, 'a', 64);
    snprintf(label + 64, sizeof(label) - 64, ".example");
    rule_bad(label, "longer than 63");
    /* 254 bytes: 4 labels of 62 and "ab" */
    snprintf(name, sizeof(name), "%.62s.%.62s.%.62s.%.62s.ab", label, label, label, label);
    rule_bad(name, "longer than 253");
    char big[320];
    memset(big, 'a', 300);
    big[300] = 0;
    json_t *o = json_pack("{s:s, s:[s, s]}", "mode", "allow", "allow", "a.example", big);
    char *dump = json_dumps(o, JSON_COMPACT);
    net_bad(dump, "network.allow[1] 'aaaa", "longer than 299 bytes");
    free(dump);
    json_decref(o);
    /* wildcards */
    rule_bad("*", "a lone '*'");
    rule_bad("*:443", "a lone '*'");
    rule_bad("*.", "the name is empty");
    rule_bad("a.*.example", "whole first label");
    rule_bad("*.*.example", "whole first label");
    rule_bad("*foo.example", "whole first label");
    rule_bad("foo*.example", "whole first label");
    rule_bad("a.example.*", "whole first label");
    rule_bad("*.123", "last label cannot be all digits");
    /* addresses and CIDRs */
    rule_bad("10.1.2.3/24", "host bits are set; the network is 10.1.2.0/24");
    rule_bad("10.1.2.0/33", "at most 32");
    rule_bad("10.1.2.0/", "prefix length");
    rule_bad("10.1.2.0/024", "prefix length");
    rule_bad("10.1.2.0/-1", "prefix length");
    rule_bad("10.1.2.0/2x", "prefix length");
    rule_bad("300.1.1.1", "not a valid IPv4 address");
    rule_bad("1.2.3.4.5", "not a valid IPv4 address");
    rule_bad("/24", "not a valid IPv4 address");
    rule_bad("[2001:db8::1/32]:443", "host bits are set; the network is 2001:db8::/32");
    rule_bad("2001:db8::/129", "at most 128");
    rule_bad("2001:db8::zz", "ports goes in brackets");
    rule_bad("[2001:db8::zz]:80", "not a valid IPv6 address");
    rule_bad("[10.0.0.1]:80", "not a valid IPv6 address");
    rule_bad("fe80::1%eth0", "not a valid IPv6 address");
    rule_bad("[::1", "'[' has no ']'");
    rule_bad("[::1]x", "after ']' only ':PORTS'");
    rule_bad("[]:80", "the host is empty");
    /* ports */
    rule_bad("a.example:", "port list after ':' is empty");
    rule_bad("a.example:0", "port 0 is not a port");
    rule_bad("a.example:0-80", "port 0 is not a port");
    rule_bad("a.example:65536", "above 65535");
    rule_bad("a.example:80-65536", "above 65535");
    rule_bad("a.example:99999999999999999999", "above 65535");
    rule_bad("a.example:90-80", "runs backwards");
    rule_bad("a.example:80,", "port in the list is empty");
    rule_bad("a.example:,80", "port in the list is empty");
    rule_bad("a.example:80-", "port in the list is empty");
    rule_bad("a.example:http", "not a number");
    rule_bad("a.example:+80", "not a number");
    rule_bad("a.example: 80", "not a number");
    rule_bad("a.example:1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", "more than 16");
    rule_bad("[::1]:", "port list after ':' is empty");
}

static void test_rule_forms(void)
{
    struct crl_net_rule r;
    if (rule_good("Deb.Example.", CRL_NET_RULE_NAME, "deb.example", &r))
        is_str(r.name, "deb.example", "a name is lowercased, its trailing dot dropped");
    rule_good("localhost", CRL_NET_RULE_NAME, "localhost", &r);
    rule_good("_sip._tcp.example", CRL_NET_RULE_NAME, "_sip._tcp.example", &r);
    rule_good("a-b.x1.example", CRL_NET_RULE_NAME, "a-b.x1.example", &r);
    rule_good("123.example", CRL_NET_RULE_NAME, "123.example", &r);
    if (rule_good("*.Registry.example:443", CRL_NET_RULE_WILDCARD, "*.registry.example:443", &r))
        is_str(r.name, "registry.example", "a wildcard keeps the suffix after '*.'");
    if (rule_good("10.1.2.0/24:80,443,8000-8080", CRL_NET_RULE_CIDR, "10.1.2.0/24:80,443,8000-8080",
                  &r)) {
        ok(r.family == AF_INET && r.prefix == 24 && r.addr[0] == 10 && r.addr[2] == 2,
           "an IPv4 CIDR");
        ok(r.nports == 3 && r.ports[0].lo == 80 && r.ports[0].hi == 80 && r.ports[2].lo == 8000 &&
               r.ports[2].hi == 8080,
           "three port items, the last a range");
    }
    if (rule_good("1.2.3.4", CRL_NET_RULE_CIDR, "1.2.3.4", &r))
        ok(r.prefix == 32 && r.nports == 0, "an address is a /32, every port");
    rule_good("1.2.3.4/32:53", CRL_NET_RULE_CIDR, "1.2.3.4:53", &r);
    rule_good("0.0.0.0/0", CRL_NET_RULE_CIDR, "0.0.0.0/0", &r);
    rule_good("a.example:080,80-80,1-65535", CRL_NET_RULE_NAME, "a.example:80,80,1-65535", &r);
    rule_good("a.example:1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", CRL_NET_RULE_NAME,
              "a.example:1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", &r);
    if (rule_good("[2001:DB8::/32]:443", CRL_NET_RULE_CIDR, "[2001:db8::/32]:443", &r))
        ok(r.family == AF_INET6 && r.prefix == 32, "an IPv6 CIDR with ports, in brackets");
    rule_good("2001:db8::1", CRL_NET_RULE_CIDR, "2001:db8::1", &r);
    rule_good("[2001:db8::1]", CRL_NET_RULE_CIDR, "2001:db8::1", &r);
    rule_good("2001:0db8:0:0:0:0:0:1/128", CRL_NET_RULE_CIDR, "2001:db8::1", &r);
    rule_good("::/0", CRL_NET_RULE_CIDR, "::/0", &r);
    /* the longest name there is, with ports: nothing of it is cut */
    char label[64], name[300], text[300];
    memset(label, 'a', 63);
    label[63] = 0;
    snprintf(name, sizeof(name), "%s.%s.%s.%.61s", label, label, label, label);
    snprintf(text, sizeof(text), "%s:1-2,3", name);
    if (rule_good(text, CRL_NET_RULE_NAME, text, &r))
        ok(strlen(r.name) == 253 && crl_net_name_matches(&r, name), "a 253-byte name is whole");
    snprintf(text, sizeof(text), "*.%.251s", name + 2);
    rule_good(text, CRL_NET_RULE_WILDCARD, text, &r);
    rule_good("[::ffff:10.0.0.0/104]:22", CRL_NET_RULE_CIDR, "[::ffff:10.0.0.0/104]:22", &r);
}

/* ---- matching ---- */

static void test_name_matching(void)
{
    struct crl_net_rule w = rule("*.example");
    ok(crl_net_name_matches(&w, "a.example"), "*.example matches a.example");
    ok(crl_net_name_matches(&w, "a.b.example"), "*.example matches a.b.example (any depth)");
    ok(crl_net_name_matches(&w, "A.EXAMPLE."), "case and a trailing dot do not matter");
    ok(!crl_net_name_matches(&w, "example"), "*.example does not match example itself");
    ok(!crl_net_name_matches(&w, "example."), "nor example.");
    ok(!crl_net_name_matches(&w, "aexample"), "nor aexample (a label boundary)");
    ok(!crl_net_name_matches(&w, ".example"), "nor .example (an empty label)");
    ok(!crl_net_name_matches(&w, "a..example"), "nor a..example");
    ok(!crl_net_name_matches(&w, "a.example.org"), "nor a.example.org");
    ok(!crl_net_name_matches(&w, "*.example"), "nor the text *.example");
    ok(!crl_net_name_matches(&w, "a b.example"), "nor a name with a space");
    ok(!crl_net_name_matches(&w, ""), "nor the empty name");
    struct crl_net_rule n = rule("deb.example:443");
    ok(crl_net_name_matches(&n, "deb.example"), "a name matches itself");
    ok(crl_net_name_matches(&n, "DEB.Example."), "case-insensitively, a trailing dot tolerated");
    ok(!crl_net_name_matches(&n, "x.deb.example"), "a name does not match its subdomains");
    ok(!crl_net_name_matches(&n, "deb.example.."), "nor with two trailing dots");
    ok(!crl_net_name_matches(&n, "eb.example"), "nor a suffix of it");
    char longname[400];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    ok(!crl_net_name_matches(&w, longname), "an over-long name matches nothing");
    struct crl_net_rule c = rule("10.0.0.0/8");
    ok(!crl_net_name_matches(&c, "10.0.0.1"), "a CIDR rule matches no name");
    ok(!addr_in(&n, "10.0.0.1"), "a name rule matches no address");
}

static void test_cidr_matching(void)
{
    struct crl_net_rule r = rule("0.0.0.0/0");
    ok(addr_in(&r, "0.0.0.0") && addr_in(&r, "255.255.255.255"), "/0 holds every IPv4 address");
    ok(!addr_in(&r, "2001:db8::1"), "an IPv4 /0 holds no IPv6 address");
    ok(addr_in(&r, "::ffff:8.8.8.8"), "but it holds an IPv4-mapped one");
    r = rule("10.1.2.3");
    ok(addr_in(&r, "10.1.2.3"), "/32 holds its address");
    ok(!addr_in(&r, "10.1.2.2") && !addr_in(&r, "10.1.2.4"), "and not its neighbours");
    r = rule("10.1.2.0/24");
    ok(addr_in(&r, "10.1.2.0") && addr_in(&r, "10.1.2.255"), "/24 holds its first and last");
    ok(!addr_in(&r, "10.1.1.255") && !addr_in(&r, "10.1.3.0"), "and not the ones either side");
    ok(addr_in(&r, "::ffff:10.1.2.9") && !addr_in(&r, "::ffff:10.1.3.9"),
       "IPv4-mapped addresses match as IPv4");
    ok(!addr_in(&r, "::10.1.2.9"), "an IPv4-compatible (not mapped) address does not");
    r = rule("10.1.2.0/25");
    ok(addr_in(&r, "10.1.2.127") && !addr_in(&r, "10.1.2.128"), "/25 splits a byte");
    r = rule("::/0");
    ok(addr_in(&r, "::") && addr_in(&r, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
       "::/0 holds every IPv6 address");
    ok(!addr_in(&r, "1.2.3.4"), "and no IPv4 one");
    r = rule("2001:db8::1");
    ok(addr_in(&r, "2001:db8::1") && !addr_in(&r, "2001:db8::") && !addr_in(&r, "2001:db8::2"),
       "/128 holds its address only");
    r = rule("2001:db8::/32");
    ok(addr_in(&r, "2001:db8::") && addr_in(&r, "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"),
       "/32 holds its first and last");
    ok(!addr_in(&r, "2001:db9::") && !addr_in(&r, "2001:db7:ffff::"), "and not either side");
    r = rule("2001:db8::/127");
    ok(addr_in(&r, "2001:db8::1") && !addr_in(&r, "2001:db8::2"), "/127 splits the last byte");
    ok(!crl_net_addr_matches(&r, AF_UNIX, "xxxxxxxxxxxxxxxx"), "another family matches nothing");
}

static void test_port_matching(void)
{
    struct crl_net_rule r = rule("a.example:80,443,8000-8080");
    ok(crl_net_port_matches(&r, 80) && crl_net_port_matches(&r, 443), "single ports");
    ok(crl_net_port_matches(&r, 8000) && crl_net_port_matches(&r, 8080) &&
           crl_net_port_matches(&r, 8042),
       "a range holds its ends and its middle");
    ok(!crl_net_port_matches(&r, 7999) && !crl_net_port_matches(&r, 8081) &&
           !crl_net_port_matches(&r, 81) && !crl_net_port_matches(&r, 0),
       "nothing else");
    r = rule("a.example");
    ok(crl_net_port_matches(&r, 1) && crl_net_port_matches(&r, 65535), "no ports: every port");
}

/* ---- decisions ---- */

static void test_decide(void)
{
    decide_name_is(NULL, "a.example", false, "");
    decide_addr_is(NULL, "8.8.8.8", 53, false, "");

    struct crl_net_policy p;
    struct crl_err e = CRL_ERR_INIT;
    if (policy("{\"mode\": \"allow\", \"allow\": [\"*.example\", \"10.0.0.0/8\", "
               "\"deb.org:443\", \"[2001:db8::/32]:443\"], \"deny\": [\"bad.example\", "
               "\"10.1.0.0/16:22\", \"smtp.example:25\"]}",
               &p, &e) < 0)
        bail_out(e.msg);
    decide_name_is(&p, "good.example", true, "*.example");
    decide_name_is(&p, "bad.example", false, "bad.example");
    decide_name_is(&p, "BAD.example.", false, "bad.example");
    decide_name_is(&p, "x.bad.example", true, "*.example");
    decide_name_is(&p, "smtp.example", true, "*.example"); /* its port 25 only is denied */
    decide_name_is(&p, "deb.org", true, "deb.org:443");
    decide_name_is(&p, "example", false, "");
    decide_name_is(&p, "other.org", false, "");
    decide_addr_is(&p, "10.1.2.3", 22, false, "10.1.0.0/16:22"); /* deny beats allow */
    decide_addr_is(&p, "10.1.2.3", 80, true, "10.0.0.0/8");
    decide_addr_is(&p, "10.2.0.1", 22, true, "10.0.0.0/8");
    decide_addr_is(&p, "::ffff:10.1.2.3", 22, false, "10.1.0.0/16:22");
    decide_addr_is(&p, "11.0.0.1", 80, false, "");
    decide_addr_is(&p, "2001:db8::5", 443, true, "[2001:db8::/32]:443");
    decide_addr_is(&p, "2001:db8::5", 80, false, "");
    crl_net_policy_free(&p);
    ok(p.allow == NULL && p.deny == NULL && p.mode == CRL_NET_NONE, "free clears the policy");
    crl_net_policy_free(&p); /* twice is fine */

    /* full minus deny */
    if (policy("{\"mode\": \"full\", \"deny\": [\"10.0.0.0/8\", \"evil.example\", "
               "\"*.ads.example\", \"[::1]:22\"]}",
               &p, &e) < 0)
        bail_out(e.msg);
    decide_addr_is(&p, "10.1.1.1", 80, false, "10.0.0.0/8");
    decide_addr_is(&p, "8.8.8.8", 53, true, "");
    decide_addr_is(&p, "::1", 22, false, "[::1]:22");
    decide_addr_is(&p, "::1", 23, true, "");
    decide_name_is(&p, "evil.example", false, "evil.example");
    decide_name_is(&p, "x.ads.example", false, "*.ads.example");
    decide_name_is(&p, "ads.example", true, "");
    decide_name_is(&p, "good.example", true, "");
    crl_net_policy_free(&p);

    /* name rules never decide an address */
    if (policy("{\"mode\": \"allow\", \"allow\": [\"deb.example\"]}", &p, &e) < 0)
        bail_out(e.msg);
    decide_addr_is(&p, "10.0.0.1", 443, false, "");
    crl_net_policy_free(&p);

    /* mode allow with nothing listed allows nothing */
    if (policy("{\"mode\": \"allow\"}", &p, &e) < 0)
        bail_out(e.msg);
    decide_name_is(&p, "a.example", false, "");
    decide_addr_is(&p, "1.1.1.1", 443, false, "");
    crl_net_policy_free(&p);
}

/* ---- JSON ---- */

static void round_trip(const char *in, const char *want)
{
    struct crl_net_policy p, q;
    struct crl_err e = CRL_ERR_INIT;
    if (!ok(policy(in, &p, &e) == 0, "%.100s: parsed", in)) {
        diag("%s", e.msg);
        return;
    }
    json_t *j = crl_net_policy_to_json(&p);
    char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    is_str(text, want, "%.100s: to_json", in);
    if (ok(crl_net_policy_from_json(j, &q, &e) == 0, "%.100s: its JSON parses back", in)) {
        json_t *k = crl_net_policy_to_json(&q);
        ok(json_equal(j, k), "%.100s: and gives the same JSON", in);
        ok(q.mode == p.mode && q.nallow == p.nallow && q.ndeny == p.ndeny,
           "%.100s: the same policy", in);
        json_decref(k);
        crl_net_policy_free(&q);
    }
    free(text);
    json_decref(j);
    crl_net_policy_free(&p);
}

static void test_json(void)
{
    round_trip("{}", "{\"mode\":\"none\"}");
    round_trip("{\"mode\": \"none\"}", "{\"mode\":\"none\"}");
    round_trip("{\"mode\": \"full\"}", "{\"mode\":\"full\"}");
    round_trip("{\"mode\": \"full\", \"deny\": []}", "{\"mode\":\"full\"}");
    round_trip("{\"mode\": \"full\", \"deny\": [\"10.0.0.0/8\", \"Evil.Example.\"]}",
               "{\"deny\":[\"10.0.0.0/8\",\"evil.example\"],\"mode\":\"full\"}");
    round_trip("{\"mode\": \"allow\"}", "{\"allow\":[],\"mode\":\"allow\"}");
    round_trip("{\"mode\": \"allow\", \"allow\": [\"*.Registry.example:443\", "
               "\"[2001:DB8::/32]:80-81\", \"2001:db8::1\", \"1.2.3.4/32\"], \"deny\": "
               "[\"a.registry.example\"]}",
               "{\"allow\":[\"*.registry.example:443\",\"[2001:db8::/32]:80-81\",\"2001:db8::1\","
               "\"1.2.3.4\"],\"deny\":[\"a.registry.example\"],\"mode\":\"allow\"}");
    json_t *j = crl_net_policy_to_json(NULL);
    char *text = json_dumps(j, JSON_COMPACT);
    is_str(text, "{\"mode\":\"none\"}", "no policy is mode none");
    free(text);
    json_decref(j);
    is_str(crl_net_mode_name(CRL_NET_NONE), "none", "mode names");
    is_str(crl_net_mode_name(CRL_NET_ALLOW), "allow", "mode names");
    is_str(crl_net_mode_name(CRL_NET_FULL), "full", "mode names");
}

/* ---- the spec ---- */

static void spec_bad(const char *json, enum crl_errc code, const char *sub)
{
    struct crl_spec s;
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_spec_parse(json, strlen(json), &s, &e);
    if (!ok(r < 0 && e.code == code, "spec %.100s: refused as %s", json, crl_errc_name(code)))
        diag("returned %d, code %s, message '%s'", r, crl_errc_name(e.code), e.msg);
    if (!ok(has(e.msg, sub), "spec %.100s: the message says '%s'", json, sub))
        diag("message: '%s'", e.msg);
    ok(s.network == NULL, "spec %.100s: no policy left behind", json);
    if (r == 0)
        crl_spec_free(&s);
}

static void test_spec(void)
{
    spec_bad("{\"network\": {\"mode\": \"allow\", \"allow\": [\"deb.example\", \"a.*.example\"]}}",
             CRL_E_INVALID, "network.allow[1] 'a.*.example': a wildcard");
    spec_bad("{\"network\": {\"mode\": \"full\", \"deny\": [\"10.1.2.3/24\"]}}", CRL_E_INVALID,
             "network.deny[0] '10.1.2.3/24': host bits are set");
    spec_bad("{\"network\": {\"mode\": \"allow\", \"allow\": [\"a.example:0\"]}}", CRL_E_INVALID,
             "network.allow[0] 'a.example:0': port 0");
    spec_bad("{\"network\": {\"mode\": \"none\", \"ports\": [80]}}", CRL_E_INVALID,
             "unknown field 'network.ports'");
    /* valid rules: the spec holds them (a backend that cannot honour a
     * mode refuses it at create) */
    {
        static const char body[] =
            "{\"network\": {\"mode\": \"allow\", \"allow\": [\"deb.example:443\"]}}";
        struct crl_spec s;
        struct crl_err e = CRL_ERR_INIT;
        if (is_int(crl_spec_parse(body, sizeof(body) - 1, &s, &e), 0, "a valid allow policy")) {
            ok(s.network && s.network->mode == CRL_NET_ALLOW && s.network->nallow == 1 &&
                   strcmp(s.network->allow[0].text, "deb.example:443") == 0,
               "the spec holds it");
            crl_spec_free(&s);
        }
    }
    /* a valid mode never hides another field's error */
    spec_bad("{\"network\": {\"mode\": \"full\"}, \"ttl_s\": -1}", CRL_E_INVALID, "ttl_s");
    spec_bad("{\"network\": {\"mode\": \"full\"}, \"cwd\": \"rel\"}", CRL_E_INVALID, "cwd");

    /* a spec that holds a policy (as one will once the backends take it)
     * reports all of it and frees it */
    struct crl_spec s;
    crl_spec_init(&s);
    s.network = calloc(1, sizeof(*s.network));
    struct crl_err e = CRL_ERR_INIT;
    json_t *n = load("{\"mode\": \"allow\", \"allow\": [\"deb.example:443\"], \"deny\": "
                     "[\"10.0.0.0/8\"]}");
    if (!s.network || crl_net_policy_from_json(n, s.network, &e) < 0)
        bail_out(e.msg);
    json_t *j = crl_spec_to_json(&s);
    ok(j && json_equal(json_object_get(j, "network"), n), "crl_spec_to_json gives the network");
    json_decref(j);
    json_decref(n);
    crl_spec_free(&s);
    ok(s.network == NULL, "crl_spec_free frees the policy");
    const char *none = "{\"network\": {\"mode\": \"none\"}}";
    if (ok(crl_spec_parse(none, strlen(none), &s, &e) == 0 && s.network == NULL,
           "mode none is no policy")) {
        j = crl_spec_to_json(&s);
        char *text = json_dumps(json_object_get(j, "network"), JSON_COMPACT);
        is_str(text, "{\"mode\":\"none\"}", "and reported as mode none");
        free(text);
        json_decref(j);
        crl_spec_free(&s);
    }
}

int main(void)
{
    TAP_RUN(test_object_errors, 10);
    TAP_RUN(test_too_many_rules, 10);
    TAP_RUN(test_rule_errors, 10);
    TAP_RUN(test_rule_forms, 10);
    TAP_RUN(test_name_matching, 10);
    TAP_RUN(test_cidr_matching, 10);
    TAP_RUN(test_port_matching, 10);
    TAP_RUN(test_decide, 10);
    TAP_RUN(test_json, 10);
    TAP_RUN(test_spec, 10);
    return done_testing();
}
