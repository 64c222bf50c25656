/* libFuzzer driver for lib/util/path's normaliser, the one check every
 * path from a client, an archive or a manifest goes through.  The input's
 * first byte picks extra rules and the output's room; the rest is the path
 * (NULs and all).  Each input is normalised under every named rule set and
 * under the picked one, and checked, besides memory safety:
 *
 *   - the output is `len` bytes with no NUL, no "." or ".." component, no
 *     "//", no trailing '/', a leading '/' exactly when absolute was asked,
 *     and obeys the rules (UTF-8, NAME_MAX, no ".wh." component);
 *   - normalising it again gives it back (idempotence), and the canonical
 *     rules accept it as it is; a canonical rule set changes nothing;
 *   - checking with no output agrees with normalising into one;
 *   - "./" before an accepted relative path changes nothing, and before a
 *     refused one keeps it refused (unless it was refused for how it
 *     starts: empty, absolute, relative, which "./" changes);
 *   - crl_path_check accepts exactly what the API's rules do.
 *
 *   tests/fuzz/run.sh builds it; corpus: tests/fuzz/corpus/path */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/util/buf.h"
#include "../../lib/util/path.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A failed invariant: abort, so that libFuzzer keeps the input. */
static void check(bool ok, const char *what, int line)
{
    if (ok)
        return;
    fprintf(stderr, "fuzz_path: line %d: check failed: %s\n", line, what);
    abort();
}
#define CHECK(cond) check((cond), #cond, __LINE__)

#define ROOM 8192

/* The output's form, whatever the input was. */
static void check_form(const char *out, size_t n, const struct crl_path_rules *r)
{
    bool abs = r->flags & CRL_PATH_ABS;
    CHECK(strlen(out) == n);
    CHECK(abs == (n > 0 && out[0] == '/'));
    CHECK(!abs || n > 0);
    CHECK(!strstr(out, "//"));
    CHECK(n <= 1 || out[n - 1] != '/');
    if ((r->flags & CRL_PATH_UTF8))
        CHECK(crl_utf8_valid(out, n));
    for (const char *p = out + abs; *p;) {
        size_t c = strcspn(p, "/");
        CHECK(c > 0);
        CHECK(!(c == 1 && p[0] == '.'));
        CHECK(!(c == 2 && p[0] == '.' && p[1] == '.'));
        CHECK(!(r->flags & CRL_PATH_NAME_MAX) || c <= NAME_MAX);
        CHECK(!(r->flags & CRL_PATH_NO_WHITEOUT) || c < 4 || memcmp(p, ".wh.", 4) != 0);
        p += c;
        if (*p)
            p++;
    }
}

/* `k` "./" before the input, under `r`. */
static int with_prefix(const char *in, size_t len, unsigned k, const struct crl_path_rules *r,
                       char *out, size_t cap)
{
    char *buf = malloc(len + 2 * k + 1);
    CHECK(buf);
    for (unsigned i = 0; i < k; i++)
        memcpy(buf + 2 * i, "./", 2);
    if (len)
        memcpy(buf + 2 * k, in, len);
    int got = crl_path_normalise(buf, len + 2 * k, r, out, cap);
    free(buf);
    return got;
}

static void fuzz_rules(const char *in, size_t len, const struct crl_path_rules *r, size_t cap)
{
    static char out[ROOM], again[ROOM], other[ROOM];
    bool abs = r->flags & CRL_PATH_ABS, canon = r->flags & CRL_PATH_CANONICAL;
    int got = crl_path_normalise(in, len, r, out, cap);
    int checked = crl_path_normalise(in, len, r, NULL, 0);
    /* with no output there is no room to run out of (and the walk goes
     * on to what follows) */
    CHECK(checked == got || got == CRL_PATH_TOO_LONG);
    if (got >= 0) {
        size_t n = (size_t)got;
        check_form(out, n, r);
        CHECK(n <= len);
        if (canon)
            CHECK(n == len && memcmp(out, in, len) == 0);
        /* idempotent; the relative root "" given back is a root only to
         * rules that take "" for one */
        struct crl_path_rules back = *r;
        if (n == 0)
            back.flags |= CRL_PATH_EMPTY_ROOT;
        CHECK(crl_path_normalise(out, n, &back, again, cap) == got);
        CHECK(memcmp(again, out, n + 1) == 0);
        /* already in canonical form */
        struct crl_path_rules strict = *r;
        strict.flags |= CRL_PATH_CANONICAL;
        if (n > 0)
            CHECK(crl_path_normalise(out, n, &strict, again, cap) == got);
        /* "./" before a relative path is the same path */
        if (!abs && !canon)
            for (unsigned k = 1; k <= 3; k++) {
                int p = with_prefix(in, len, k, r, other, cap);
                CHECK(p == got || (p == CRL_PATH_TOO_LONG && r->max_len));
                CHECK(p != got || memcmp(other, out, n + 1) == 0);
            }
        return;
    }
    if (got == CRL_PATH_EMPTY || got == CRL_PATH_ABSOLUTE || got == CRL_PATH_RELATIVE)
        return;
    for (unsigned k = 1; k <= 3; k++) {
        int p = with_prefix(in, len, k, r, other, cap);
        CHECK(p < 0);
        if (!abs && !canon)
            CHECK(p == got || p == CRL_PATH_TOO_LONG);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* the picked rules: the flags from the low bits, a max_len sometimes,
     * and an output's room from tight to ample */
    uint8_t pick = data[0];
    struct crl_path_rules picked = {pick & 0x3fu, (pick & 0x40u) ? (size_t)(pick & 0x1fu) * 3 : 0};
    size_t cap = (pick & 0x80u) ? (size_t)(pick & 0x0fu) + 1 : ROOM;
    const char *in = (const char *)data + 1;
    size_t len = size - 1;
    if (len >= ROOM / 2)
        return 0;

    fuzz_rules(in, len, CRL_PATH_RULES_API, ROOM);
    fuzz_rules(in, len, CRL_PATH_RULES_MEMBER, ROOM);
    fuzz_rules(in, len, CRL_PATH_RULES_LAYER, ROOM);
    fuzz_rules(in, len, CRL_PATH_RULES_STORED, ROOM);
    fuzz_rules(in, len, CRL_PATH_RULES_MEMBER, cap);
    fuzz_rules(in, len, &picked, cap);

    /* crl_path_check is the API's rules on a C string */
    char *s = malloc(len + 1);
    CHECK(s);
    memcpy(s, in, len);
    s[len] = 0;
    struct crl_err err = CRL_ERR_INIT;
    int r = crl_path_check(s, "path", &err);
    CHECK((r == 0) == (crl_path_normalise(s, strlen(s), CRL_PATH_RULES_API, NULL, 0) >= 0));
    CHECK(r == 0 || (err.code == CRL_E_INVALID && err.msg[0]));
    free(s);
    return 0;
}
