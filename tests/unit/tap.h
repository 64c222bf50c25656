/* A small TAP producer for Corral's C unit tests (one test program per
 * module, see docs and tests/run-unit.sh).
 *
 *   ok(cond, "what")               is_int(got, want, "what")
 *   is_str(got, want, "what")      like(got, "ERE", "what")
 *   diag("...")                    skip(n, "why")
 *   todo_start("bug: ...") ... todo_end()
 *   skip_all("why")                exit 77 with "1..0 # SKIP why"
 *   tap_run("name", fn, timeout)   run fn in a forked child, libuv style
 *   return done_testing();         prints the plan, 0 if nothing failed
 *
 * The counters live in a shared mapping, so assertions made in a forked test
 * case count as the parent's: a case that crashes, leaks (ASan's leak check
 * runs when the child exits) or hangs past its timeout is one failed test and
 * the next case still runs.  Timeouts are multiplied by the environment
 * variable CRL_TEST_TIMEOUT_MULTIPLIER (the sanitizer build is slower). */
#ifndef CRL_TESTS_TAP_H
#define CRL_TESTS_TAP_H

#include <errno.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

struct tap_state {
    int n;           /* number of the last test */
    int failed;      /* failures that count (not TODO) */
    int todo_failed; /* known bugs: TODO tests that failed */
    int todo_passed; /* TODO tests that passed: the bug may be fixed */
    char todo[256];  /* reason while inside todo_start()/todo_end() */
};

static struct tap_state *tap__st;

static inline struct tap_state *tap__state(void)
{
    if (!tap__st) {
        void *p = mmap(NULL, sizeof(struct tap_state), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            printf("Bail out! tap.h: mmap: %s\n", strerror(errno));
            exit(255);
        }
        tap__st = p;
        memset(tap__st, 0, sizeof(*tap__st));
        setvbuf(stdout, NULL, _IOLBF, 0);
    }
    return tap__st;
}

static inline void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void diag(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tap__state();
    /* One "# " per line so a multi-line message stays a TAP comment. */
    for (char *line = msg, *nl; line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (nl || *line)
            printf("# %s\n", line);
    }
    fflush(stdout);
}

static inline bool tap__result(bool pass, const char *file, int line, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static inline bool tap__result(bool pass, const char *file, int line, const char *fmt, va_list ap)
{
    struct tap_state *st = tap__state();
    char desc[1024];
    vsnprintf(desc, sizeof(desc), fmt, ap);
    /* '#' would start a directive: escape it as TAP says. */
    char esc[2048];
    size_t o = 0;
    for (const char *p = desc; *p && o + 3 < sizeof(esc); p++) {
        if (*p == '#')
            esc[o++] = '\\';
        esc[o++] = *p == '\n' ? ' ' : *p;
    }
    esc[o] = 0;
    st->n++;
    if (st->todo[0]) {
        printf("%sok %d - %s # TODO %s\n", pass ? "" : "not ", st->n, esc, st->todo);
        if (pass)
            st->todo_passed++;
        else
            st->todo_failed++;
    } else {
        printf("%sok %d - %s\n", pass ? "" : "not ", st->n, esc);
        if (!pass) {
            st->failed++;
            diag("  Failed test '%s'\n  at %s line %d.", esc, file, line);
        }
    }
    fflush(stdout);
    return pass;
}

static inline bool tap_ok_(bool pass, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline bool tap_ok_(bool pass, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool r = tap__result(pass, file, line, fmt, ap);
    va_end(ap);
    return r;
}
#define ok(cond, ...) tap_ok_(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define pass(...) tap_ok_(true, __FILE__, __LINE__, __VA_ARGS__)
#define fail(...) tap_ok_(false, __FILE__, __LINE__, __VA_ARGS__)

static inline bool tap_is_int_(long long got, long long want, const char *file, int line,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline bool tap_is_int_(long long got, long long want, const char *file, int line,
                               const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool r = tap__result(got == want, file, line, fmt, ap);
    va_end(ap);
    if (!r)
        diag("         got: %lld\n    expected: %lld", got, want);
    return r;
}
#define is_int(got, want, ...) \
    tap_is_int_((long long)(got), (long long)(want), __FILE__, __LINE__, __VA_ARGS__)

static inline bool tap_is_str_(const char *got, const char *want, const char *file, int line,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline bool tap_is_str_(const char *got, const char *want, const char *file, int line,
                               const char *fmt, ...)
{
    bool same = (got == NULL && want == NULL) || (got && want && strcmp(got, want) == 0);
    va_list ap;
    va_start(ap, fmt);
    bool r = tap__result(same, file, line, fmt, ap);
    va_end(ap);
    if (!r)
        diag("         got: %s%s%s\n    expected: %s%s%s", got ? "'" : "", got ? got : "NULL",
             got ? "'" : "", want ? "'" : "", want ? want : "NULL", want ? "'" : "");
    return r;
}
#define is_str(got, want, ...) tap_is_str_((got), (want), __FILE__, __LINE__, __VA_ARGS__)

/* POSIX extended regular expression match. */
static inline bool tap_like_(const char *got, const char *re, const char *file, int line,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline bool tap_like_(const char *got, const char *re, const char *file, int line,
                             const char *fmt, ...)
{
    regex_t rx;
    bool match = false;
    int rc = regcomp(&rx, re, REG_EXTENDED | REG_NOSUB);
    if (rc == 0) {
        match = got && regexec(&rx, got, 0, NULL, 0) == 0;
        regfree(&rx);
    }
    va_list ap;
    va_start(ap, fmt);
    bool r = tap__result(match, file, line, fmt, ap);
    va_end(ap);
    if (rc != 0)
        diag("    bad regular expression /%s/", re);
    else if (!r)
        diag("                  '%s'\n    doesn't match /%s/", got ? got : "(NULL)", re);
    return r;
}
#define like(got, re, ...) tap_like_((got), (re), __FILE__, __LINE__, __VA_ARGS__)

static inline void skip(int n, const char *why)
{
    struct tap_state *st = tap__state();
    for (int i = 0; i < n; i++)
        printf("ok %d # skip %s\n", ++st->n, why);
    fflush(stdout);
}

/* Known bugs: tests between these are TODO; a failure does not fail the run. */
static inline void todo_start(const char *why)
{
    snprintf(tap__state()->todo, sizeof(tap__st->todo), "%s", why);
}
static inline void todo_end(void)
{
    tap__state()->todo[0] = 0;
}

static inline __attribute__((noreturn)) void skip_all(const char *why)
{
    tap__state();
    printf("1..0 # SKIP %s\n", why);
    fflush(stdout);
    exit(77);
}

static inline __attribute__((noreturn)) void bail_out(const char *why)
{
    tap__state();
    printf("Bail out! %s\n", why);
    fflush(stdout);
    exit(255);
}

static inline unsigned tap_timeout_multiplier(void)
{
    const char *m = getenv("CRL_TEST_TIMEOUT_MULTIPLIER");
    long v = m ? strtol(m, NULL, 10) : 1;
    return v > 0 && v < 100 ? (unsigned)v : 1;
}

/* Run one test case in a forked child (its own process group) under a
 * timeout; a crash, a non-zero exit or a timeout is one failed test.
 * Returns true if the child exited 0. */
static inline bool tap_run(const char *name, void (*fn)(void), unsigned timeout_s)
{
    struct tap_state *st = tap__state();
    printf("# %s\n", name);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        diag("fork: %s", strerror(errno));
        st->n++;
        st->failed++;
        printf("not ok %d - %s: could not fork\n", st->n, name);
        return false;
    }
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGALRM, SIG_DFL);
        alarm(timeout_s * tap_timeout_multiplier());
        fn();
        fflush(stdout);
        exit(0); /* not _exit: the sanitizer's leak check runs at exit */
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    kill(-pid, SIGKILL); /* whatever the case left behind in its group */
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return true;
    char why[128];
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        snprintf(why, sizeof(why), "timed out after %us", timeout_s * tap_timeout_multiplier());
    else if (WIFSIGNALED(status))
        snprintf(why, sizeof(why), "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(why, sizeof(why), "exited with status %d", WEXITSTATUS(status));
    st->n++;
    if (st->todo[0]) {
        printf("not ok %d - %s: %s # TODO %s\n", st->n, name, why, st->todo);
        st->todo_failed++;
    } else {
        printf("not ok %d - %s: %s\n", st->n, name, why);
        st->failed++;
    }
    fflush(stdout);
    return false;
}
#define TAP_RUN(fn, timeout_s) tap_run(#fn, fn, timeout_s)

/* Print the plan; the exit status for main(): 0 if every test passed (TODO
 * failures excepted), 1 otherwise or when no test ran at all. */
static inline int done_testing(void)
{
    struct tap_state *st = tap__state();
    printf("1..%d\n", st->n);
    if (st->todo_failed)
        diag("%d known bug(s) (TODO)", st->todo_failed);
    if (st->todo_passed)
        diag("%d TODO test(s) passed: a known bug may be fixed", st->todo_passed);
    if (st->failed)
        diag("Looks like you failed %d test(s) of %d.", st->failed, st->n);
    if (st->n == 0)
        diag("No tests run!");
    fflush(stdout);
    return st->failed || st->n == 0 ? 1 : 0;
}

#endif
