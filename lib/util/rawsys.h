/* Raw system calls for code that runs in a CLONE_VM child: such a child
 * shares its parent's memory and thread-local storage, so it must not touch
 * errno, malloc or stdio.  These return the kernel's result directly:
 * a negative errno on failure. */
#ifndef CRL_UTIL_RAWSYS_H
#define CRL_UTIL_RAWSYS_H

#include <sys/syscall.h>

/* For a function such a child runs: no sanitizer code (its shadow memory
 * and reports are the parent's, on another stack). */
#define NO_SAN __attribute__((no_sanitize("address", "undefined")))

#if defined(__x86_64__)
static inline __attribute__((always_inline)) long crl_raw6(long n, long a, long b, long c, long d,
                                                           long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__)
static inline __attribute__((always_inline)) long crl_raw6(long n, long a, long b, long c, long d,
                                                           long e, long f)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
}
#else
#error "corral's raw syscalls support x86_64 and aarch64"
#endif

#define crl_raw0(n) crl_raw6((n), 0, 0, 0, 0, 0, 0)
#define crl_raw1(n, a) crl_raw6((n), (long)(a), 0, 0, 0, 0, 0)
#define crl_raw2(n, a, b) crl_raw6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define crl_raw3(n, a, b, c) crl_raw6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define crl_raw4(n, a, b, c, d) crl_raw6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define crl_raw5(n, a, b, c, d, e) \
    crl_raw6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

/* Leave the process at once, without atexit handlers or stdio flushing. */
static inline __attribute__((noreturn, always_inline)) void crl_raw_exit(int code)
{
    for (;;)
        crl_raw1(SYS_exit_group, code);
}

/* Tiny freestanding string helpers: the libc ones are fine to call, but these
 * keep the CLONE_VM children free of any libc state on the sanitizer build. */
static inline unsigned long crl_raw_strlen(const char *s)
{
    unsigned long n = 0;
    while (s[n])
        n++;
    return n;
}

#endif
