/* lib/util/err: the error contract (docs/errors.md).  crl_err_set, _sys and
 * _prefix fill, append and cut as err.h says; every code has a name and a
 * status, and the name maps back; and docs/errors.md's table of codes says
 * what err.c's table does, a row for every code. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../lib/util/cleanup.h"
#include "../../lib/util/err.h"
#include "tap.h"

/* The enum's names, as docs/errors.md spells them.  A code added to the enum
 * without a line here fails the build (the array's size) and the test. */
static const struct {
    const char *name;
    enum crl_errc code;
} errc_names[] = {
    {"CRL_E_INVALID", CRL_E_INVALID},
    {"CRL_E_JSON", CRL_E_JSON},
    {"CRL_E_UNAUTHORIZED", CRL_E_UNAUTHORIZED},
    {"CRL_E_FORBIDDEN", CRL_E_FORBIDDEN},
    {"CRL_E_NOT_FOUND", CRL_E_NOT_FOUND},
    {"CRL_E_METHOD", CRL_E_METHOD},
    {"CRL_E_CONFLICT", CRL_E_CONFLICT},
    {"CRL_E_TOO_LARGE", CRL_E_TOO_LARGE},
    {"CRL_E_MEDIA", CRL_E_MEDIA},
    {"CRL_E_INTERNAL", CRL_E_INTERNAL},
    {"CRL_E_UNSUPPORTED", CRL_E_UNSUPPORTED},
    {"CRL_E_CAPACITY", CRL_E_CAPACITY},
    {"CRL_E_UNAVAILABLE", CRL_E_UNAVAILABLE},
    {"CRL_E_TIMEOUT", CRL_E_TIMEOUT},
    {"CRL_E_NO_SPACE", CRL_E_NO_SPACE},
};
_Static_assert(CRL_ARRAY_SIZE(errc_names) == CRL_E__COUNT - 1,
               "every error code but CRL_OK has its name here");

static void test_set_sys_prefix(void)
{
    struct crl_err err = CRL_ERR_INIT;
    is_int(crl_err_set(&err, CRL_E_NOT_FOUND, "sandbox %s", "sb-x"), -1, "crl_err_set returns -1");
    ok(err.code == CRL_E_NOT_FOUND && err.sys_errno == 0, "the code is set, no errno");
    is_str(err.msg, "sandbox sb-x", "the message is formatted");

    is_int(crl_err_prefix(&err, "deleting %d", 2), -1, "crl_err_prefix returns -1");
    is_str(err.msg, "deleting 2: sandbox sb-x", "the context goes in front");
    ok(err.code == CRL_E_NOT_FOUND, "a prefix keeps the code");

    crl_err_sys(&err, EACCES, "open %s", "/x");
    ok(err.code == CRL_E_INTERNAL && err.sys_errno == EACCES, "a syscall's failure is internal");
    char want[256];
    snprintf(want, sizeof(want), "open /x: %s", strerror(EACCES));
    is_str(err.msg, want, "strerror is appended");
    crl_err_sys(&err, ENOSPC, "write");
    ok(err.code == CRL_E_NO_SPACE, "ENOSPC is no_space");
    crl_err_sys(&err, EDQUOT, "write");
    ok(err.code == CRL_E_NO_SPACE, "EDQUOT is no_space");

    crl_err_clear(&err);
    ok(err.code == CRL_OK && err.sys_errno == 0 && err.msg[0] == 0, "clear empties it");

    ok(crl_err_set(NULL, CRL_E_INVALID, "x") == -1 && crl_err_sys(NULL, EIO, "x") == -1 &&
           crl_err_prefix(NULL, "x") == -1,
       "a NULL err only returns -1");

    char big[1024];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    crl_err_set(&err, CRL_E_INVALID, "%s", big);
    is_int((long long)strlen(err.msg), (long long)sizeof(err.msg) - 1, "a long message is cut");
    crl_err_prefix(&err, "ctx");
    ok(strncmp(err.msg, "ctx: aaa", 8) == 0 && strlen(err.msg) == sizeof(err.msg) - 1,
       "a prefix on a full message keeps the prefix and cuts the tail");
}

static void test_names_and_statuses(void)
{
    bool all = true;
    for (int c = 0; c < CRL_E__COUNT; c++) {
        const char *name = crl_errc_name((enum crl_errc)c);
        int status = crl_errc_http_status((enum crl_errc)c);
        if (!name || !*name || crl_errc_from_name(name) != (enum crl_errc)c) {
            diag("code %d: name '%s' does not map back", c, name ? name : "(null)");
            all = false;
        }
        if (c != CRL_OK && (status < 400 || status > 599)) {
            diag("code %d (%s): status %d is not an error's", c, name, status);
            all = false;
        }
        for (int d = 0; d < c; d++)
            if (strcmp(name, crl_errc_name((enum crl_errc)d)) == 0) {
                diag("codes %d and %d are both '%s'", d, c, name);
                all = false;
            }
    }
    ok(all, "every code has a name of its own, that maps back, and an error status");
    is_int(crl_errc_http_status(CRL_OK), 200, "ok is 200");
    ok(crl_errc_from_name("no-such-code") == CRL_E_INTERNAL &&
           crl_errc_from_name(NULL) == CRL_E_INTERNAL,
       "an unknown name is internal");
    ok(strcmp(crl_errc_name((enum crl_errc)CRL_E__COUNT), "internal") == 0 &&
           crl_errc_http_status((enum crl_errc) - 1) == 500,
       "a code out of range is internal");
}

/* docs/errors.md, found from this program (BUILD/tests/test_err) or the
 * working directory. */
static FILE *open_doc(char *path, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char *tests = dirname(exe);
        char *bdir = dirname(tests);
        snprintf(path, cap, "%s/../docs/errors.md", bdir);
        FILE *f = fopen(path, "r");
        if (f)
            return f;
    }
    snprintf(path, cap, "docs/errors.md");
    return fopen(path, "r");
}

/* A row "| `CRL_E_X` | 400 | `name` | ... |" into its three first cells. */
static bool parse_row(const char *line, char *enum_name, size_t ecap, int *status, char *code,
                      size_t ccap)
{
    const char *p = line + strlen("| `");
    const char *q = strchr(p, '`');
    if (!q || (size_t)(q - p) >= ecap)
        return false;
    snprintf(enum_name, ecap, "%.*s", (int)(q - p), p);
    char *end;
    if (strncmp(q, "` | ", 4) != 0)
        return false;
    long s = strtol(q + 4, &end, 10);
    if (strncmp(end, " | `", 4) != 0)
        return false;
    *status = (int)s;
    p = end + 4;
    q = strchr(p, '`');
    if (!q || (size_t)(q - p) >= ccap)
        return false;
    snprintf(code, ccap, "%.*s", (int)(q - p), p);
    return true;
}

static void test_doc_table(void)
{
    char path[PATH_MAX + 32];
    FILE *f = open_doc(path, sizeof(path));
    if (!ok(f != NULL, "docs/errors.md is there (%s)", path)) {
        skip(2, "no docs/errors.md");
        return;
    }
    int rows[CRL_E__COUNT] = {0};
    bool all = true;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "| `CRL_", 7) != 0)
            continue;
        char name[64], code[64];
        int status = 0;
        if (!parse_row(line, name, sizeof(name), &status, code, sizeof(code))) {
            diag("a row of the table that does not read: %s", line);
            all = false;
            continue;
        }
        size_t i = 0;
        while (i < CRL_ARRAY_SIZE(errc_names) && strcmp(errc_names[i].name, name) != 0)
            i++;
        if (i == CRL_ARRAY_SIZE(errc_names)) {
            diag("%s: a row for a code that is not in err.h", name);
            all = false;
            continue;
        }
        enum crl_errc c = errc_names[i].code;
        rows[c]++;
        if (status != crl_errc_http_status(c) || strcmp(code, crl_errc_name(c)) != 0) {
            diag("%s: the document says %d %s, err.c %d %s", name, status, code,
                 crl_errc_http_status(c), crl_errc_name(c));
            all = false;
        }
    }
    fclose(f);
    ok(all, "every row's HTTP status and JSON code are err.c's");
    bool each_once = true;
    for (size_t i = 0; i < CRL_ARRAY_SIZE(errc_names); i++)
        if (rows[errc_names[i].code] != 1) {
            diag("%s has %d rows in the table", errc_names[i].name, rows[errc_names[i].code]);
            each_once = false;
        }
    ok(each_once, "every code has one row");
}

int main(void)
{
    test_set_sys_prefix();
    test_names_and_statuses();
    test_doc_table();
    return done_testing();
}
